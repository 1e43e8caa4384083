"""AMP001 on steps that reach into other modules of their project.

Each folder of fixtures/projects is a small project whose training scripts
(`train*.py`) import helpers from its other modules; `expected/` pins the
scripts as `amplint fix --apply` leaves them when the scripts are named and
the helpers are not.  The rewrites then run on the CPU as in
test_fp32_fixtures: identical losses with the defaults, falling losses under
CPU bfloat16 autocast, and a real GradScaler under CPU float16.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from tests.helpers import FIXTURES, assert_matches_golden, printed_losses, run_cli

PROJECTS = sorted(path for path in (FIXTURES / "projects").iterdir() if path.is_dir())
SETTINGS = {
    "defaults": (),
    "bfloat16": ("--device-type", "cpu", "--dtype", "bfloat16"),
    "float16": ("--device-type", "cpu", "--dtype", "float16"),
}


def _copy(project: Path, destination: Path) -> list[Path]:
    """The project's modules copied to `destination`; its training scripts."""
    destination.mkdir()
    for module in project.glob("*.py"):
        shutil.copy(module, destination / module.name)
    return sorted(destination.glob("train*.py"))


def _fixed(project: Path, destination: Path, setting: str) -> list[Path]:
    scripts = _copy(project, destination)
    result = run_cli("fix", "--apply", "--no-cache", *SETTINGS[setting], *scripts)
    assert result.exit_code == 0, result.output
    return scripts


@pytest.mark.parametrize("project", PROJECTS, ids=[p.name for p in PROJECTS])
def test_rewrites_match_the_pinned_outputs_and_touch_no_helper(
    project: Path, tmp_path: Path
) -> None:
    scripts = _fixed(project, tmp_path / "fixed", "defaults")
    for script in scripts:
        assert_matches_golden(script.read_text(), project / "expected" / script.name)
    for helper in project.glob("*.py"):
        if not helper.name.startswith("train"):
            assert (tmp_path / "fixed" / helper.name).read_text() == helper.read_text()
    again = run_cli("fix", "--no-cache", *scripts)
    assert again.exit_code == 0 and again.stdout == "", again.output


@pytest.fixture(scope="module")
def torch_installed() -> None:
    pytest.importorskip("torch")


@pytest.mark.slow
@pytest.mark.parametrize("project", PROJECTS, ids=[p.name for p in PROJECTS])
def test_the_rewrites_train_on_the_cpu(project: Path, tmp_path: Path, torch_installed) -> None:
    originals = _copy(project, tmp_path / "original")
    defaults = _fixed(project, tmp_path / "defaults", "defaults")
    bf16 = _fixed(project, tmp_path / "bf16", "bfloat16")
    fp16 = _fixed(project, tmp_path / "fp16", "float16")
    for original, default, low, half in zip(originals, defaults, bf16, fp16):
        assert 'autocast("cpu", dtype=torch.bfloat16)' in low.read_text()
        assert 'GradScaler("cpu")' in half.read_text()
        expected = printed_losses(original)
        # CUDA autocast and scaler turn themselves off on the CPU.
        assert printed_losses(default) == expected
        low_losses, half_losses = printed_losses(low), printed_losses(half)
        assert len(low_losses) == len(half_losses) == len(expected)
        assert all(math.isfinite(value) for value in low_losses + half_losses)
        if expected[-1] < expected[0]:
            assert low_losses[-1] < low_losses[0], f"{low.name}: bf16 loss did not fall"
