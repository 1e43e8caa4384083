"""A multi-file change (an apex program migrated whole) is all or nothing,
even when the run is killed: every rewrite is written and synced before the
first rename, the renames are journaled, and the next run that writes
finishes them.

The fixture is a three-module apex.amp program.  The run is killed (SIGKILL)
at each fsync of the write phase and before each rename; after one more run
that writes but migrates nothing itself (`--select AMP001`), every module is
original or every module is migrated, and nothing of amplint's is left.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import FIXTURES

PROGRAM = FIXTURES / "apex" / "apex_trainer"
MIGRATE = ["fix", "--apply", "--unsafe-fixes", "--no-cache"]

# Runs amplint with os.fsync or os.replace (of a .py file) killing the
# process at its N-th call (from 0).
KILLER = """
import os, signal, sys

kind, at = sys.argv[1], int(sys.argv[2])
calls = [0]
original = getattr(os, kind)


def killing(*args, **kwargs):
    if kind == "replace" and not str(args[1]).endswith(".py"):
        return original(*args, **kwargs)
    if calls[0] == at:
        os.kill(os.getpid(), signal.SIGKILL)
    calls[0] += 1
    return original(*args, **kwargs)


setattr(os, kind, killing)
from amplint.cli import main

main(sys.argv[3:], prog_name="amplint")
"""


def _texts(directory: Path) -> dict[str, str]:
    return {path.name: path.read_text() for path in sorted(directory.glob("*.py"))}


def _amplint(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "amplint", *map(str, args)], capture_output=True, text=True
    )


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    clean = tmp_path_factory.mktemp("clean") / "program"
    shutil.copytree(PROGRAM, clean)
    assert _amplint(*MIGRATE, clean).returncode == 0
    texts = _texts(clean)
    assert texts != _texts(PROGRAM) and len(texts) == 3
    return texts


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
@pytest.mark.parametrize(
    "kind, at",
    [
        ("fsync", 0),
        ("fsync", 1),
        ("fsync", 2),
        ("fsync", 3),
        ("replace", 0),
        ("replace", 1),
        ("replace", 2),
    ],
)
def test_a_killed_migration_is_finished_or_untouched(
    tmp_path: Path, migrated: dict[str, str], kind: str, at: int
) -> None:
    program = tmp_path / "program"
    shutil.copytree(PROGRAM, program)
    killed = subprocess.run(
        [sys.executable, "-c", KILLER, kind, str(at), *MIGRATE, str(program)],
        capture_output=True,
        text=True,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    if kind == "replace" and at > 0:
        assert _texts(program) not in (migrated, _texts(PROGRAM))  # half written on disk
        read_only = _amplint("check", "--no-cache", program)
        assert "left a change half written" in read_only.stderr
    after = _amplint("fix", "--apply", "--no-cache", "--select", "AMP001", program)
    assert "internal error" not in after.stderr, after.stderr
    texts = _texts(program)
    if kind == "replace":  # the journal was complete: the change is finished
        assert texts == migrated
        assert "finished the change an interrupted `amplint fix` began" in after.stderr
    else:
        assert texts in (migrated, _texts(PROGRAM))
    leftovers = [p.name for p in program.iterdir() if p.name.startswith(".")]
    assert leftovers == [], leftovers
