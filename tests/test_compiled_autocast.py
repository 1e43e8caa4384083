"""AMP123 and AMP001 on torch.compile'd models: a compiled backward run outside
autocast needs `torch._functorch.config.backward_pass_autocast = "off"`.

The first test is the evidence the rule rests on; the others hold the rule and
AMP001's refusal to what they find and leave alone.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from amplint.config import Settings
from tests.helpers import codes_of, dedent, findings_of, fixed

DOCUMENTED = Settings(target_torch=(2, 13))
CPU_BF16 = dict(device_type="cpu", dtype="bfloat16")


def test_the_compiled_backward_differs_from_eager_amp_unless_the_setting_is_off() -> None:
    """torch 2.13, CPU, bfloat16: a compiled model whose forward runs under
    autocast and whose backward runs outside it, as the AMP recipe says.  Its
    gradients match eager AMP's exactly with "off", and not with the default."""
    torch = pytest.importorskip("torch")
    import torch._functorch.config as functorch_config

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(64, 64)
            self.norm = torch.nn.LayerNorm(64)
            self.weight = torch.nn.Parameter(torch.randn(64, 64) / 8)

        def forward(self, x):
            h = self.norm(self.linear(x))
            mixed = torch.softmax(h @ h.transpose(-1, -2), -1) @ h
            with torch.autocast("cpu", enabled=False):  # kept in float32 on purpose
                out = mixed.float() @ self.weight
            return torch.log_softmax(out, -1)

    def gradients(compiled: bool, setting: str) -> list:
        torch.manual_seed(0)
        model, inputs = Model(), torch.randn(4, 16, 64)
        torch._dynamo.reset()
        run = torch.compile(model, backend="aot_eager") if compiled else model
        with functorch_config.patch(backward_pass_autocast=setting):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = run(inputs).float().pow(2).mean()
            loss.backward()
        return [parameter.grad for parameter in model.parameters()]

    eager = gradients(False, "same_as_forward")
    default = gradients(True, "same_as_forward")
    off = gradients(True, "off")
    assert all(torch.equal(a, b) for a, b in zip(off, eager))
    gap = max((a - b).abs().max().item() for a, b in zip(default, eager))
    assert gap > 1e-4


SCALED_STEP = """
    import torch
    {setting}
    model = torch.nn.Linear(16, 1)
    {compile}
    optimizer = torch.optim.AdamW(model.parameters())
    scaler = torch.amp.GradScaler()


    def train(loader):
        for inputs, targets in loader:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = torch.nn.functional.mse_loss(model(inputs), targets)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
"""


def _scaled(compile: str = "model = torch.compile(model)", setting: str = "") -> str:
    return _filled(SCALED_STEP, compile=compile, setting=setting)


def _filled(template: str, **lines: str) -> str:
    """`template` with each field's lines at the template's indentation."""
    return dedent(template.format(**{k: v.replace("\n", "\n    ") for k, v in lines.items()}))


@pytest.mark.parametrize(
    "compile",
    [
        "model = torch.compile(model)",
        'model = torch.compile(model, mode="max-autotune")',
        "model.compile()",
        "from torch import compile as jit; model = jit(model)",
    ],
)
def test_a_compiled_model_under_autocast_is_reported(compile: str) -> None:
    text = _scaled(compile)
    (finding,) = [d for d in findings_of(text, DOCUMENTED) if d.code == "AMP123"]
    assert finding.fix is None
    assert 'backward_pass_autocast = "off"' in finding.message
    assert "`model` is torch.compile'd (line 4" in finding.message


def test_a_compiled_method_and_a_compiled_attribute() -> None:
    text = dedent("""
        import torch


        class Trainer:
            def __init__(self, net):
                self.net = torch.compile(net)

            @torch.compile
            def loss(self, batch):
                return self.net(batch).sum()

            def step(self, batch, optimizer):
                with torch.autocast("cuda"):
                    loss = self.loss(batch) + self.net(batch).mean()
                loss.backward()
                optimizer.step()
        """)
    findings = [d for d in findings_of(text, DOCUMENTED) if d.code == "AMP123"]
    assert [d.span.line for d in findings] == [
        14
    ]  # the first compiled call of the block; line 8 is the decorator
    assert "`self.loss` is torch.compile'd (line 8)" in findings[0].message


@pytest.mark.parametrize(
    "text",
    [
        # The setting, assigned or patched, either way: the program has said.
        _scaled(
            setting='import torch._functorch.config\ntorch._functorch.config.backward_pass_autocast = "off"'
        ),
        _scaled(
            setting='import torch._functorch.config\ntorch._functorch.config.backward_pass_autocast = "same_as_forward"'
        ),
        _scaled(
            setting='import torch._functorch.config as fc\nfc.patch(backward_pass_autocast="off").__enter__()'
        ),
        # Nothing compiled: re.compile, a Keras-style compile.
        _scaled(compile='import re\npattern = re.compile("x")'),
        _scaled(compile='model.compile(optimizer="adam", loss="mse")'),
    ],
)
def test_left_alone(text: str) -> None:
    assert "AMP123" not in codes_of(text, DOCUMENTED)


def test_left_alone_where_the_backward_is_not_outside_autocast() -> None:
    backward = "        scaler.scale(loss).backward()\n"
    under = _scaled().replace(backward, "    " + backward)
    assert under != _scaled()
    assert "AMP123" not in codes_of(under, DOCUMENTED)
    evaluation = dedent("""
        import torch

        model = torch.compile(torch.nn.Linear(16, 1))


        def evaluate(loader):
            with torch.no_grad(), torch.autocast("cuda"):
                return [model(inputs) for inputs in loader]
        """)
    assert codes_of(evaluation, DOCUMENTED) == []


def test_only_for_a_target_torch_that_documents_the_setting() -> None:
    assert "AMP123" not in codes_of(_scaled(), Settings(target_torch=(2, 8)))
    assert "AMP123" in codes_of(_scaled(), Settings(target_torch=(2, 9)))


FP32_STEP = """
    import torch
    {setting}
    model = torch.compile(torch.nn.Linear(16, 1), backend="aot_eager")
    optimizer = torch.optim.AdamW(model.parameters())
    for step in range(4):
        inputs, targets = torch.randn(8, 16), torch.randn(8, 1)
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
"""
SETTING = 'import torch._functorch.config\ntorch._functorch.config.backward_pass_autocast = "off"'


def test_amp001_declines_a_compiled_model_until_the_setting_is_there(tmp_path: Path) -> None:
    """The rewrite runs backward outside autocast: on a target that documents
    the setting, AMP001 asks for it rather than leave AMP123 behind; once it is
    there the step is rewritten, nothing is left, and the script runs."""
    settings = Settings(target_torch=(2, 13), **CPU_BF16)
    plain = _filled(FP32_STEP, setting="")
    (finding,) = findings_of(plain, settings)
    assert finding.code == "AMP001" and finding.fix is None
    assert "`model` is torch.compile'd (line 3)" in finding.message
    assert finding.message.endswith("set it once before training, and fix rewrites this step")
    assert fixed(plain, settings) == plain

    ready = _filled(FP32_STEP, setting=SETTING)
    rewritten = fixed(ready, settings)
    assert 'with torch.autocast("cpu", dtype=torch.bfloat16):' in rewritten
    assert codes_of(rewritten, settings) == []
    script = tmp_path / "train.py"
    script.write_text(rewritten)
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]

    # Below 2.9 the setting does not exist: the step is rewritten as before.
    assert codes_of(plain, Settings(**CPU_BF16)) == ["AMP001"]
    assert fixed(plain, Settings(**CPU_BF16)) != plain


@pytest.mark.parametrize(
    "text",
    [
        # A script at module level whose autocast is chosen once by device.
        """
        from contextlib import nullcontext

        import torch

        device_type = "cuda" if torch.cuda.is_available() else "cpu"
        amp = nullcontext() if device_type == "cpu" else torch.amp.autocast(device_type)
        model = torch.compile(torch.nn.Linear(16, 1))
        optimizer = torch.optim.AdamW(model.parameters())
        for step in range(10):
            with amp:
                loss = model(torch.randn(8, 16)).pow(2).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        """,
        # An autocast maker kept in a name and called per step.
        """
        from functools import partial

        import torch


        def train(net, loader, optimizer):
            net = torch.compile(net)
            autocast = partial(torch.autocast, device_type="cuda", dtype=torch.bfloat16)
            for inputs in loader:
                with autocast():
                    loss = net(inputs).mean()
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
        """,
    ],
)
def test_autocast_kept_in_a_name(text: str) -> None:
    assert codes_of(dedent(text), DOCUMENTED) == ["AMP123"]
