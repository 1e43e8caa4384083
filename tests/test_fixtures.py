"""Golden tests on realistic training scripts: the rewrite is pinned, stable, and
the rewritten script still runs under torch with no deprecated AMP call left.

Set AMPLINT_UPDATE_GOLDEN=1 to rewrite the pinned outputs after a reviewed change.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import FIXTURES, assert_matches_golden, codes_of, fixed

SCRIPTS = sorted((FIXTURES / "deprecated_amp").glob("*.py"))
EXPECTED = FIXTURES / "deprecated_amp" / "expected"
ids = [script.stem for script in SCRIPTS]


def _expected(script: Path) -> Path:
    return EXPECTED / script.name


def test_there_are_fixtures() -> None:
    assert len(SCRIPTS) >= 4


@pytest.mark.parametrize("script", SCRIPTS, ids=ids)
def test_fix_matches_the_pinned_output(script: Path) -> None:
    assert_matches_golden(fixed(script.read_text(encoding="utf-8")), _expected(script))


@pytest.mark.parametrize("script", SCRIPTS, ids=ids)
def test_fix_is_idempotent_and_leaves_nothing_to_report(script: Path) -> None:
    expected = _expected(script).read_text(encoding="utf-8")
    assert fixed(expected) == expected
    assert not {"AMP201", "AMP202"} & set(codes_of(expected))


def _run(script: Path, *warning_options: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *warning_options, script.name],
        cwd=script.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS, ids=ids)
def test_rewritten_script_runs_without_future_warnings(script: Path) -> None:
    pytest.importorskip("torch")
    rewritten = _run(_expected(script), "-W", "error::FutureWarning")
    assert rewritten.returncode == 0, rewritten.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS, ids=ids)
def test_original_script_runs_and_warns(script: Path) -> None:
    """The check above can fail: the originals do hit deprecated AMP calls."""
    pytest.importorskip("torch")
    original = _run(script, "-W", "always::FutureWarning")
    assert original.returncode == 0, original.stderr[-3000:]
    assert "is deprecated" in original.stderr and "FutureWarning" in original.stderr
