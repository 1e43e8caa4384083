"""AMP117: a plain GradScaler where FullyShardedDataParallel shards the model."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.helpers import codes_of, dedent, run_cli

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
