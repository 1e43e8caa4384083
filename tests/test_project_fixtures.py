"""AMP001 on steps that reach into other modules of their project.

Each folder of fixtures/projects is a small project whose training scripts
(`train*.py`) import helpers from its other modules; `expected/` pins the
scripts as `amplint fix --apply --dtype bfloat16` leaves them when the scripts
are named and the helpers are not: their losses are BCE on probabilities, which
float16 declines (analysis/precision.py).  The rewrites then run on the CPU as
in test_fp32_fixtures: identical losses for CUDA (off on the CPU), falling
losses under CPU bfloat16 autocast; for CPU float16 nothing is written.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from tests.helpers import FIXTURES, assert_matches_golden, printed_losses, run_cli

PROJECTS = sorted(path for path in (FIXTURES / "projects").iterdir() if path.is_dir())
SETTINGS = {
    "cuda": ("--dtype", "bfloat16"),
    "bfloat16": ("--device-type", "cpu", "--dtype", "bfloat16"),
    "float16": ("--device-type", "cpu", "--dtype", "float16"),
}


def _copy(project: Path, destination: Path) -> list[Path]:
    """The project's modules copied to `destination`; its training scripts."""
    destination.mkdir()
    for module in project.glob("*.py"):
        shutil.copy(module, destination / module.name)
    return sorted(destination.glob("train*.py"))


def _fixed(project: Path, destination: Path, setting: str, exit_code: int = 0) -> list[Path]:
    scripts = _copy(project, destination)
    result = run_cli("fix", "--apply", "--no-cache", *SETTINGS[setting], *scripts)
    assert result.exit_code == exit_code, result.output
    return scripts


@pytest.mark.parametrize("project", PROJECTS, ids=[p.name for p in PROJECTS])
def test_rewrites_match_the_pinned_outputs_and_touch_no_helper(
    project: Path, tmp_path: Path
) -> None:
    scripts = _fixed(project, tmp_path / "fixed", "cuda")
    for script in scripts:
        assert_matches_golden(script.read_text(), project / "expected" / script.name)
    for helper in project.glob("*.py"):
        if not helper.name.startswith("train"):
            assert (tmp_path / "fixed" / helper.name).read_text() == helper.read_text()
    again = run_cli("fix", "--no-cache", *SETTINGS["cuda"], *scripts)
    assert again.exit_code == 0 and again.stdout == "", again.output


@pytest.fixture(scope="module")
def torch_installed() -> None:
    pytest.importorskip("torch")


@pytest.mark.slow
@pytest.mark.parametrize("project", PROJECTS, ids=[p.name for p in PROJECTS])
def test_the_rewrites_train_on_the_cpu(project: Path, tmp_path: Path, torch_installed) -> None:
    originals = _copy(project, tmp_path / "original")
    defaults = _fixed(project, tmp_path / "defaults", "cuda")
    bf16 = _fixed(project, tmp_path / "bf16", "bfloat16")
    fp16 = _fixed(project, tmp_path / "fp16", "float16", exit_code=1)  # declined, reported
    for original, default, low, half in zip(originals, defaults, bf16, fp16):
        assert 'autocast("cpu", dtype=torch.bfloat16)' in low.read_text()
        assert half.read_text() == original.read_text()
        expected = printed_losses(original)
        # CUDA autocast turns itself off on the CPU.
        assert printed_losses(default) == expected
        low_losses = printed_losses(low)
        assert len(low_losses) == len(expected)
        assert all(math.isfinite(value) for value in low_losses)
        if expected[-1] < expected[0]:
            assert low_losses[-1] < low_losses[0], f"{low.name}: bf16 loss did not fall"
