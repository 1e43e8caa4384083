"""AMP117: a plain GradScaler where FullyShardedDataParallel shards the model."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from amplint.config import Settings
from amplint.engine import fix_text
from tests.helpers import codes_of, dedent, findings_of, run_cli

STEP = """
    scaler = {scaler}
    for inputs, targets in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(model(inputs), targets)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
"""


def _script(wrap: str, scaler: str = 'torch.amp.GradScaler("cuda")') -> str:
    body = "\n".join("    " + line for line in dedent(STEP.format(scaler=scaler)).splitlines())
    return (
        "import torch\n"
        "import torch.distributed as dist\n"
        "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
        "from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler\n"
        "from torch.distributed._composable.fsdp import fully_shard\n\n\n"
        "def train(model, loader, rank):\n"
        f"    model = {wrap}\n"
        "    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)\n" + body + "\n"
    )


@pytest.mark.parametrize(
    "scaler", ['torch.amp.GradScaler("cuda")', "torch.cuda.amp.GradScaler(init_scale=2.0**12)"]
)
def test_a_plain_scaler_with_fsdp_is_reported(scaler: str) -> None:
    assert codes_of(_script("FSDP(model.to(rank))", scaler)).count("AMP117") == 1


@pytest.mark.parametrize(
    ("wrap", "scaler"),
    [
        ("FSDP(model.to(rank))", 'ShardedGradScaler("cuda")'),  # the right one
        (  # chosen against the sharded one, as AMP001 writes it
            "FSDP(model.to(rank))",
            'ShardedGradScaler("cuda") if dist.is_initialized() else torch.amp.GradScaler("cuda")',
        ),
        ("fully_shard(model)", 'torch.amp.GradScaler("cuda")'),  # FSDP2: DTensor gradients
        ("torch.nn.parallel.DistributedDataParallel(model)", 'torch.amp.GradScaler("cuda")'),
    ],
)
def test_left_alone(wrap: str, scaler: str) -> None:
    assert "AMP117" not in codes_of(_script(wrap, scaler))


def test_fsdp_in_another_module_of_the_program(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    (tmp_path / "wrap.py").write_text(
        "from torch.distributed.fsdp import FullyShardedDataParallel\n\n\n"
        "def shard(model):\n    return FullyShardedDataParallel(model)\n"
    )
    (tmp_path / "train.py").write_text(
        "import torch\n\nfrom wrap import shard\n\n\n"
        "def make(model):\n    return shard(model), torch.amp.GradScaler('cuda')\n"
    )
    result = run_cli(
        "check", "--no-cache", "--select", "AMP117", "--output-format", "json", tmp_path
    )
    [record] = json.loads(result.stdout)
    assert record["path"] == str(tmp_path / "train.py")
    assert "(wrap.py:5)" in record["message"]


def test_the_program_is_read_without_opening_a_fifo(tmp_path: Path) -> None:
    # The question "does another module wrap the model in FSDP?" reads the
    # project's modules; a FIFO named like one would block that read forever.
    os.mkfifo(tmp_path / "pipe.py")
    (tmp_path / "train.py").write_text("import torch\n\nscaler = torch.amp.GradScaler('cuda')\n")
    result = run_cli("check", "--no-cache", "--select", "AMP117", tmp_path / "train.py")
    assert result.exit_code == 0, result.output


# -- the fix ------------------------------------------------------------------
def _lint(text: str, settings: Settings | None = None):
    return findings_of(text, settings, frozenset({"AMP117"}))


def _fixed(text: str, settings: Settings | None = None) -> str:
    return fix_text(text, frozenset({"AMP117"}), settings or Settings(), False).text


FSDP_HEADER = (
    "import torch\n"
    "import torch.distributed as dist\n"
    "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n\n\n"
)


def _wrapped(body: str) -> str:
    return FSDP_HEADER + "def train(model):\n    model = FSDP(model)\n" + body


def test_the_fix_chooses_the_sharded_scaler_where_a_process_group_runs() -> None:
    text = _wrapped('    scaler = torch.amp.GradScaler("cuda")  # fp16\n')
    result = _fixed(text)
    assert result == (
        "import torch\n"
        "import torch.distributed as dist\n"
        "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
        "from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler\n\n\n"
        "def train(model):\n    model = FSDP(model)\n"
        '    scaler = ShardedGradScaler("cuda") if dist.is_initialized() '
        'else torch.amp.GradScaler("cuda")  # fp16\n'
    )
    assert not _lint(result)
    assert _fixed(result) == result


def test_arguments_carry_over_by_name() -> None:
    # torch.cuda.amp.GradScaler has no device; ShardedGradScaler takes
    # backoff_factor before growth_factor, so positions would swap them.
    text = _wrapped("    scaler = torch.cuda.amp.GradScaler(2.0**12, 3.0, 0.25, enabled=fp16)\n")
    assert (
        'ShardedGradScaler("cuda", init_scale=2.0**12, growth_factor=3.0, '
        "backoff_factor=0.25, enabled=fp16) if dist.is_initialized() "
        "else torch.cuda.amp.GradScaler(2.0**12, 3.0, 0.25, enabled=fp16)"
    ) in _fixed(text)
    text = _wrapped('    scaler = torch.amp.GradScaler(growth_interval=100, device="cpu")\n')
    assert 'ShardedGradScaler("cpu", growth_interval=100) if' in _fixed(text)


def test_a_scaler_inside_an_expression_is_parenthesized() -> None:
    text = _wrapped('    state = torch.amp.GradScaler("cuda").state_dict()\n')
    result = _fixed(text)
    assert (
        '    state = (ShardedGradScaler("cuda") if dist.is_initialized() '
        'else torch.amp.GradScaler("cuda")).state_dict()\n'
    ) in result
    assert not _lint(result)


def test_names_for_torch_distributed_and_the_scaler_are_reused_or_imported() -> None:
    text = (
        "from torch.cuda.amp import GradScaler\n"
        "from torch.distributed.fsdp import FullyShardedDataParallel\n"
        "from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler as SGS\n\n"
        "model = FullyShardedDataParallel(net)\n"
        "torch_scaler = None\n\n\n"
        "def make():\n    return GradScaler()\n"
    )
    result = _fixed(text)
    assert result.startswith("import torch\n")
    assert (
        '    return SGS("cuda") if torch.distributed.is_initialized() else GradScaler()\n' in result
    )


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (  # at import time, before main() starts the process group
            FSDP_HEADER + "scaler = torch.amp.GradScaler('cuda')\n\n\n"
            "def main(model):\n    dist.init_process_group('nccl')\n    return FSDP(model)\n",
            "made before a process group is started",
        ),
        (  # above its own function's init_process_group
            _wrapped(
                "    scaler = torch.amp.GradScaler('cuda')\n    dist.init_process_group('nccl')\n"
            ),
            "made before a process group is started",
        ),
        (_wrapped("    scaler = torch.amp.GradScaler(*scaler_args)\n"), "unpacked"),
        (
            _wrapped("    scaler = torch.amp.GradScaler('cuda', 1.0, 2.0, 0.5, 10, True, 7)\n"),
            "more",
        ),
    ],
)
def test_reported_without_a_fix(text: str, reason: str) -> None:
    [finding] = _lint(text)
    assert finding.fix is None
    assert reason in finding.message
    assert _fixed(text) == text


def test_a_scaler_after_a_process_group_started_at_import_is_fixed() -> None:
    text = (
        FSDP_HEADER + "dist.init_process_group('gloo')\nmodel = FSDP(net)\n"
        "scaler = torch.amp.GradScaler('cpu')\n"
    )
    [finding] = _lint(text)
    assert finding.fix is not None


def test_no_fix_below_torch_2_3() -> None:
    text = _wrapped("    scaler = torch.amp.GradScaler('cuda')\n")
    [finding] = _lint(text, Settings(target_torch=(2, 2)))
    assert finding.fix is None
    assert "torch 2.3" in finding.message


def test_a_function_that_returns_the_sharded_scaler_first_chooses() -> None:
    # Accelerate's get_grad_scaler: an early return for FSDP, plain ones after.
    text = (
        FSDP_HEADER + "model = FSDP(net)\n\n\n"
        "def get_grad_scaler(distributed_type, **kwargs):\n"
        "    if distributed_type == 'FSDP':\n"
        "        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler\n\n"
        "        return ShardedGradScaler(**kwargs)\n"
        "    return torch.amp.GradScaler('cuda', **kwargs)\n"
    )
    assert not _lint(text)
