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

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from amplint.writes import Change
from tests.helpers import FIXTURES, dead_pid, run_cli

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


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_only_the_temporaries_a_killed_run_recorded_are_removed(tmp_path: Path) -> None:
    """A file merely named as amplint's temporaries are (a repository can
    commit one) is never deleted; what a killed run recorded is, by the next
    run that writes, and never by `check`."""
    program = tmp_path / "program"
    shutil.copytree(PROGRAM, program)
    killed = subprocess.run(
        [sys.executable, "-c", KILLER, "fsync", "1", *MIGRATE, str(program)],
        capture_output=True,
        text=True,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    recorded = sorted(p.name for p in program.glob(".*.amplint-tmp"))
    assert len(recorded) == 2 and len(list(program.glob(".amplint-journal.*"))) == 1
    planted = program / f".train.py.{dead_pid()}.k2j4x.amplint-tmp"
    planted.write_text("a file of the repository's")
    leftovers = sorted(p.name for p in program.iterdir() if p.name.startswith("."))
    read_only = _amplint("check", "--no-cache", program)
    assert sorted(p.name for p in program.iterdir() if p.name.startswith(".")) == leftovers
    assert f"{planted}: named as the temporary files of an interrupted" in read_only.stderr
    after = _amplint("fix", "--apply", "--no-cache", "--select", "AMP001", program)
    assert [p.name for p in program.iterdir() if p.name.startswith(".")] == [planted.name]
    assert _texts(program) == _texts(PROGRAM)
    assert f"{planted}: named as amplint's temporary files, but no interrupted" in after.stderr


@pytest.mark.parametrize("forgery", ["outside file", "another process's name", "not JSON"])
def test_a_journal_amplint_did_not_write_is_left_alone(tmp_path: Path, forgery: str) -> None:
    """A repository can commit a file named as a killed run's journal: what it
    names is neither deleted nor renamed (a forged journal once told amplint to
    delete a file anywhere the user could write)."""
    program = tmp_path / "program"
    shutil.copytree(PROGRAM, program)
    victim = tmp_path / "outside" / f".train.py.{dead_pid()}.k2j4x.amplint-tmp"
    victim.parent.mkdir()
    victim.write_text("the user's")
    pid = dead_pid()
    beside = program / f".train.py.{pid + 1}.k2j4x.amplint-tmp"
    beside.write_text("the repository's")
    named = {"outside file": str(victim), "another process's name": str(beside)}.get(forgery)
    journal = program / f".amplint-journal.{pid}.x1.json"
    if named is None:
        journal.write_text("{\nnot json\n{}\n")
    else:
        target = str((program / "train.py").resolve())
        digest = hashlib.sha256((program / "train.py").read_bytes()).hexdigest()
        journal.write_text(
            json.dumps({"temporary": named})
            + "\n"
            + json.dumps({"renames": [[target, named, "0" * 64, digest]]})
            + "\n"
        )
    after = _amplint("fix", "--apply", "--no-cache", "--select", "AMP001", program)
    assert f"{journal}: not a journal amplint wrote" in after.stderr, after.stderr
    assert victim.read_text() == "the user's" and beside.read_text() == "the repository's"
    # Set aside, never read again: the next run says nothing of it.
    assert not journal.exists() and journal.with_name(journal.name + ".rejected").exists()
    assert _texts(program) == _texts(PROGRAM)
    again = _amplint("fix", "--apply", "--no-cache", "--select", "AMP001", program)
    assert "not a journal amplint wrote" not in again.stderr


def _forged_journal(directory: Path, pid: int, temporary: str, target: str, digest: str) -> Path:
    journal = directory / f".amplint-journal.{pid}.x1.json"
    journal.write_text(
        json.dumps({"temporary": temporary})
        + "\n"
        + json.dumps({"renames": [[target, temporary, "0" * 64, digest]]})
        + "\n"
    )
    return journal


@pytest.mark.parametrize("route", ["..", "a committed link", "one file named"])
def test_a_journal_naming_a_path_outside_through_links_or_dots_is_refused(
    tmp_path: Path, route: str
) -> None:
    """A forged journal whose records start with the named directory but lead
    out of it (`<dir>/../outside`, a committed directory link) names files
    outside: nothing there is deleted or renamed over, also when the user
    names one file of the directory."""
    program = tmp_path / "program"
    shutil.copytree(PROGRAM, program)
    outside = tmp_path / "outside"
    outside.mkdir()
    keep = outside / "keep.py"
    keep.write_text("the user's file\n")
    pid = dead_pid()
    planted = outside / f".keep.py.{pid}.k2j4x.amplint-tmp"
    planted.write_text("the repository's replacement\n")
    if route == "a committed link":
        (program / "link").symlink_to(outside, target_is_directory=True)
        directory = program / "link"
    else:
        directory = program / ".." / "outside"
    temporary = str(directory / planted.name)
    digest = hashlib.sha256(planted.read_bytes()).hexdigest()
    journal = _forged_journal(program, pid, temporary, str(directory / "keep.py"), digest)
    named = program / "train.py" if route == "one file named" else program
    after = _amplint("fix", "--apply", "--no-cache", "--select", "AMP001", named)
    assert "outside the paths named" in after.stderr, after.stderr
    assert keep.read_text() == "the user's file\n"
    assert planted.read_text() == "the repository's replacement\n"
    assert not journal.exists()


@pytest.mark.parametrize("shape", ["deeply nested", "a NUL in a path", "huge"])
def test_a_journal_of_the_wrong_shape_is_set_aside_not_fatal(tmp_path: Path, shape: str) -> None:
    """A journal that crashed the run (RecursionError, ValueError) crashed
    every later run of the directory too; a huge one cost every run."""
    program = tmp_path / "program"
    shutil.copytree(PROGRAM, program)
    pid = dead_pid()
    journal = program / f".amplint-journal.{pid}.x1.json"
    if shape == "deeply nested":
        journal.write_text("[" * 100_000 + "]" * 100_000 + "\n{}\n")
    elif shape == "a NUL in a path":
        name = f".train.py.{pid}.k2j4x.amplint-tmp"
        journal.write_text(json.dumps({"temporary": f"{program}/\0/{name}"}) + "\n")
    else:
        journal.write_text((json.dumps({"temporary": "x" * 1000}) + "\n") * 5000)
    after = _amplint("fix", "--apply", "--no-cache", "--select", "AMP001", program)
    assert "internal error" not in after.stderr and "Traceback" not in after.stderr
    assert f"{journal}: not a journal amplint wrote" in after.stderr, after.stderr
    assert not journal.exists() and after.returncode in (0, 1)  # the run went on


def test_a_rename_that_fails_is_said_for_its_file_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file system refuses one rename of a change: the others are put in
    place and counted, the refused one is named with where its rewrite is."""
    program = tmp_path / "program"
    shutil.copytree(PROGRAM, program)
    original = os.replace

    def refusing(source, target, *args, **kwargs):
        if str(target).endswith("trainer.py"):
            raise PermissionError(13, "Permission denied")
        return original(source, target, *args, **kwargs)

    monkeypatch.setattr(os, "replace", refusing)
    result = run_cli(*MIGRATE, program)
    assert result.exit_code == 2
    errors = [line for line in result.stderr.splitlines() if "cannot write" in line]
    assert (
        len(errors) == 1 and "trainer.py: cannot write: its rewrite could not be put" in errors[0]
    )
    assert "(Permission denied)" in errors[0]
    left = [p for p in program.iterdir() if p.name.startswith(".")]
    assert [p.name.startswith(".trainer.py.") for p in left] == [True]
    texts = _texts(program)
    assert texts["trainer.py"] == _texts(PROGRAM)["trainer.py"]
    assert texts["train.py"] != _texts(PROGRAM)["train.py"]


@pytest.mark.parametrize("when", ["before the first rename", "between two renames"])
def test_a_file_saved_while_the_change_is_written_keeps_the_save(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    """An editor saves a file after amplint read it: the rewrite is not renamed
    over the save, which is kept and said ("changed since amplint read it");
    before, the save was lost without a word (150 of 150 files, exit 0)."""
    program = tmp_path / "program"
    shutil.copytree(PROGRAM, program)
    edited = program / "trainer.py"
    saved = edited.read_text() + "# saved in the editor\n"
    original_replace = os.replace
    original_commit = Change.commit

    def save_then_commit(self, writes):
        if when == "before the first rename":
            edited.write_text(saved)
        return original_commit(self, writes)

    def save_on_first_rename(source, target, *args, **kwargs):
        if when == "between two renames" and not edited.read_text().endswith("editor\n"):
            edited.write_text(saved)
        return original_replace(source, target, *args, **kwargs)

    monkeypatch.setattr(Change, "commit", save_then_commit)
    monkeypatch.setattr(os, "replace", save_on_first_rename)
    result = run_cli(*MIGRATE, program)
    assert edited.read_text() == saved
    errors = [line for line in result.stderr.splitlines() if "trainer.py" in line]
    assert any("changed since amplint read it" in line for line in errors), result.stderr
    assert result.exit_code != 0
    assert [p.name for p in program.iterdir() if p.name.startswith(".")] == []
