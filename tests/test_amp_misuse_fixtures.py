"""Golden tests on realistic scripts with AMP mistakes: each firing fixture is
fixed as pinned, runs on the CPU afterwards, and a second fix changes nothing;
each silent fixture draws no misuse finding.

Set AMPLINT_UPDATE_GOLDEN=1 to rewrite the pinned outputs after a reviewed change.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import FIXTURES, assert_matches_golden, codes_of, fixed

FOLDER = FIXTURES / "amp_misuse"
EXPECTED = FOLDER / "expected"
# fixture -> the codes it must raise (an empty set: a fixture that must stay silent)
FIXTURES_AND_CODES = {
    "backward_inside_autocast.py": {"AMP101"},
    "step_bypasses_scaler.py": {"AMP103"},
    # accumulation, clipping after unscale_, scaler in checkpoints: all correct
    "correct_torch_amp.py": set(),
    "autocast_device_object.py": {"AMP116"},
    "autocast_device_strings.py": {"AMP116"},
    "autocast_device_ok.py": set(),
}
MISUSE_CODES = {f"AMP1{n:02}" for n in range(1, 17)}
FIRING = sorted(name for name, codes in FIXTURES_AND_CODES.items() if codes)


def test_every_fixture_is_listed() -> None:
    assert sorted(p.name for p in FOLDER.glob("*.py")) == sorted(FIXTURES_AND_CODES)


@pytest.mark.parametrize("name", sorted(FIXTURES_AND_CODES))
def test_fixture_raises_exactly_its_codes(name: str) -> None:
    text = (FOLDER / name).read_text(encoding="utf-8")
    assert set(codes_of(text)) & MISUSE_CODES == FIXTURES_AND_CODES[name]


@pytest.mark.parametrize("name", FIRING)
def test_fix_matches_the_pinned_output_and_settles(name: str) -> None:
    result = fixed((FOLDER / name).read_text(encoding="utf-8"))
    assert_matches_golden(result, EXPECTED / name)
    assert fixed(result) == result
    assert not set(codes_of(result)) & MISUSE_CODES


def _run(script: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, script.name], cwd=script.parent, capture_output=True, text=True
    )


@pytest.mark.parametrize(
    "script",
    [EXPECTED / name for name in FIRING]
    + [FOLDER / n for n, c in FIXTURES_AND_CODES.items() if not c],
    ids=lambda path: f"{path.parent.name}/{path.name}",
)
def test_fixed_and_silent_scripts_run_on_the_cpu(script: Path) -> None:
    pytest.importorskip("torch")
    result = _run(script)
    assert result.returncode == 0, result.stderr[-3000:]


def test_the_torch_device_fixture_fails_before_the_fix() -> None:
    pytest.importorskip("torch")
    result = _run(FOLDER / "autocast_device_object.py")
    assert result.returncode != 0
    assert "Expected `device_type` of type `str`" in result.stderr
