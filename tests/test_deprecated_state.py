"""AMP205: the per-device autocast state functions torch 2.4 deprecated."""

from __future__ import annotations

import subprocess
import sys

import pytest

from amplint.analysis.deprecated_state import DEPRECATED_STATE_FUNCTIONS
from amplint.config import Settings
from tests.helpers import codes_of, dedent, findings_of, fixed


def _amp205(text: str, settings: Settings | None = None) -> list[str]:
    return [d.message for d in findings_of(text, settings) if d.code == "AMP205"]


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        ("torch.get_autocast_gpu_dtype()", 'torch.get_autocast_dtype("cuda")'),
        ("torch.get_autocast_cpu_dtype()", 'torch.get_autocast_dtype("cpu")'),
        ("torch.is_autocast_cpu_enabled()", 'torch.is_autocast_enabled("cpu")'),
        ("torch.set_autocast_cpu_enabled(False)", 'torch.set_autocast_enabled("cpu", False)'),
        (
            "torch.set_autocast_gpu_dtype(torch.half)",
            'torch.set_autocast_dtype("cuda", torch.half)',
        ),
        (
            "torch.set_autocast_xla_dtype(dtype=torch.bfloat16)",
            'torch.set_autocast_dtype("xla", dtype=torch.bfloat16)',
        ),
        ("torch.is_autocast_ipu_enabled()", 'torch.is_autocast_enabled("ipu")'),
    ],
)
def test_each_call_becomes_the_device_taking_function(call: str, expected: str) -> None:
    text = f"import torch\nvalue = {call}\n"
    [message] = _amp205(text)
    assert message.startswith(f"`torch.{call.split('.')[1].split('(')[0]}()` is deprecated")
    assert fixed(text) == f"import torch\nvalue = {expected}\n"
    assert "AMP205" not in codes_of(fixed(text))


def test_through_an_alias_of_torch() -> None:
    text = "import torch as th\n\nd = th.get_autocast_gpu_dtype()\n"
    assert fixed(text) == 'import torch as th\n\nd = th.get_autocast_dtype("cuda")\n'


def test_a_name_imported_from_torch_is_reported_not_fixed() -> None:
    text = "from torch import get_autocast_gpu_dtype\n\nd = get_autocast_gpu_dtype()\n"
    [message] = _amp205(text)
    assert "not fixed: `get_autocast_gpu_dtype` is imported by name" in message
    assert fixed(text) == text


def test_below_target_torch_2_4_it_is_reported_not_fixed() -> None:
    text = "import torch\nd = torch.get_autocast_gpu_dtype()\n"
    settings = Settings(target_torch=(2, 3))
    [message] = _amp205(text, settings)
    assert "needs torch 2.4, target-torch is 2.3" in message
    assert fixed(text, settings) == text


@pytest.mark.parametrize(
    "text",
    [
        # Version fallbacks, written for several releases on purpose.
        """
        import torch
        if hasattr(torch, "get_autocast_dtype"):
            d = torch.get_autocast_dtype("cuda")
        else:
            d = torch.get_autocast_gpu_dtype()
        """,
        """
        import torch
        try:
            d = torch.get_autocast_dtype("cuda")
        except AttributeError:
            d = torch.get_autocast_gpu_dtype()
        """,
        """
        import torch
        d = torch.get_autocast_gpu_dtype() if torch.__version__ < "2.4" else None
        """,
        # Not torch's, and not deprecated.
        """
        import mylib
        d = mylib.get_autocast_gpu_dtype()
        enabled = torch.is_autocast_enabled()
        """,
        # Named in a string or a comment only.
        """
        import torch
        # torch.get_autocast_gpu_dtype() is deprecated
        doc = "torch.get_autocast_gpu_dtype()"
        """,
    ],
)
def test_left_alone(text: str) -> None:
    assert _amp205(dedent(text)) == []


def test_a_plain_try_is_not_a_fallback() -> None:
    text = dedent("""
        import torch
        try:
            d = torch.get_autocast_gpu_dtype()
        except KeyboardInterrupt:
            raise
        """)
    assert len(_amp205(text)) == 1


def test_the_table_is_every_function_torch_deprecates() -> None:
    # torch 2.13 has 14 of them: each of the four questions for cpu, xla and ipu,
    # and the dtype getter and setter for the GPU.
    assert len(DEPRECATED_STATE_FUNCTIONS) == 14
    assert {device for _, device in DEPRECATED_STATE_FUNCTIONS.values()} == {
        "cuda",
        "cpu",
        "xla",
        "ipu",
    }


@pytest.mark.slow
def test_the_rewrite_asks_torch_the_same_and_warns_no_more(tmp_path) -> None:
    # Every deprecated call, run on the installed torch with its deprecation
    # warnings made errors: the original raises, the rewrite prints the same.
    pytest.importorskip("torch")
    lines = ["import torch"]
    for name in sorted(DEPRECATED_STATE_FUNCTIONS):
        if name.startswith("set_autocast_") and name.endswith("_dtype"):
            getter = name.replace("set_", "get_", 1)
            lines.append(f"torch.{name}(torch.{getter}())")
        elif name.startswith("set_"):
            lines.append(f"torch.{name}(False)")
        else:
            lines.append(f"print({name!r}, torch.{name}())")
    original = "\n".join(lines) + "\n"
    rewritten = fixed(original)
    assert "AMP205" not in codes_of(rewritten)
    assert not any(f"torch.{name}(" in rewritten for name in DEPRECATED_STATE_FUNCTIONS)

    def run(text: str) -> subprocess.CompletedProcess:
        script = tmp_path / "state.py"
        script.write_text(text)
        command = [sys.executable, "-W", "error::DeprecationWarning", "-W", "ignore::UserWarning"]
        return subprocess.run([*command, str(script)], capture_output=True, text=True)

    assert "is deprecated" in run(original).stderr
    relaxed = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", original], capture_output=True, text=True
    )
    after = run(rewritten)
    assert after.returncode == 0, after.stderr
    assert after.stdout == relaxed.stdout and after.stdout.count("\n") == 7  # the getters


def test_the_flash_attention_upcast_of_transformers_models() -> None:
    # The pattern many attention modules share: under autocast, cast float32
    # inputs back to autocast's dtype before a half-only kernel.
    text = dedent("""
        import torch


        class Attention(torch.nn.Module):
            def _upcast_dtype(self, query):
                if query.dtype == torch.float32:
                    if torch.is_autocast_enabled():
                        target_dtype = torch.get_autocast_gpu_dtype()
                    elif hasattr(self.config, "_pre_quantization_dtype"):
                        target_dtype = self.config._pre_quantization_dtype
                    else:
                        target_dtype = self.q_proj.weight.dtype
                    query = query.to(target_dtype)
                return query
        """)
    assert len(_amp205(text)) == 1
    assert fixed(text) == text.replace(
        "torch.get_autocast_gpu_dtype()", 'torch.get_autocast_dtype("cuda")'
    )
