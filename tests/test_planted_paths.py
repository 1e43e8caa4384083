"""Paths a cloned repository plants that amplint reads without being told to
(ignore files, configuration, requirements, its cache and what a cache entry
names): never a hang, never memory without bound, never an internal error.

Each run is a subprocess under a timeout: before these were guarded, a
`.gitignore` linked to /dev/zero read until memory ran out, a FIFO hung for
ever, and a cache entry of the wrong shape was an internal error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")

STEP = (REPO / "fixtures" / "fp32_steps" / "nested_loops.py").read_text(encoding="utf-8")
FINDING = "train.py:35:13: AMP001"


def _check(project: Path, *args: str, limit: float = 60) -> subprocess.CompletedProcess:
    # The cache where a clone keeps it, not the suite's private one.
    environment = {k: v for k, v in os.environ.items() if k != "AMPLINT_CACHE_DIR"}
    return subprocess.run(
        [sys.executable, "-m", "amplint", "check", ".", *args],
        cwd=project,
        env=environment,
        capture_output=True,
        text=True,
        timeout=limit,  # a hang fails the test instead of the suite
    )


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "clone"
    project.mkdir()
    (project / ".git").mkdir()  # a repository: its .gitignore files count
    (project / "train.py").write_text(STEP, encoding="utf-8")
    return project


@pytest.mark.parametrize("planted", [".gitignore", "requirements.txt", "pyproject.toml"])
@pytest.mark.parametrize("kind", ["link to /dev/zero", "FIFO"])
def test_a_planted_device_or_fifo_is_skipped(tmp_path: Path, planted: str, kind: str) -> None:
    if kind == "FIFO":
        os.mkfifo(_project(tmp_path) / planted)
    else:
        (_project(tmp_path) / planted).symlink_to("/dev/zero")
    run = _check(tmp_path / "clone", limit=30)
    assert FINDING in run.stdout, run.stderr[-2000:]
    assert run.returncode == 1 and "internal error" not in run.stderr
    if planted != "pyproject.toml":  # which holds no [tool.amplint]: not amplint's to read
        assert f"{planted}: not read (not a regular file)" in run.stderr


DAMAGE = {
    "a list": [],
    "a number": 5,
    "null": None,
    "Infinity in a span": "INFINITY",
    "a huge end column": "HUGE",
    "depends on a FIFO": "FIFO",
    "depends on the wrong shape": "DEPENDS",
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_cache_entry_is_a_miss(tmp_path: Path, damage: str) -> None:
    project = _project(tmp_path)
    first = _check(project)
    assert FINDING in first.stdout
    entries = [
        path
        for path in (project / ".amplint_cache").rglob("*.json")
        if not path.name.startswith("ruled-out")
    ]
    assert entries
    for entry in entries:
        document = json.loads(entry.read_text())
        planted = DAMAGE[damage]
        if planted == "INFINITY":
            text = json.dumps(document).replace("[35, 13,", "[Infinity, 13,", 1)
        elif planted == "HUGE":
            document["diagnostics"][0][2][3] = 10**9  # the end column
            text = json.dumps(document)
        elif planted == "FIFO":
            fifo = tmp_path / "pipe"
            if not fifo.exists():
                os.mkfifo(fifo)
            document["depends_on"] = {str(fifo): "0" * 64}
            text = json.dumps(document)
        elif planted == "DEPENDS":
            document["depends_on"] = [["a", "b"]]
            text = json.dumps(document)
        else:
            text = json.dumps(planted)
        entry.write_text(text)
    again = _check(project, "--output-format", "full", limit=30)
    assert again.returncode == 1 and "internal error" not in again.stderr, again.stderr[-2000:]
    assert "train.py:35:13" in again.stdout
    assert len(again.stdout) < 20_000  # no caret line a billion columns long


def test_toml_nested_too_deeply_is_a_one_line_error_naming_the_file(tmp_path: Path) -> None:
    project = _project(tmp_path)
    depth = 5_000
    (project / "pyproject.toml").write_text(
        "[tool.amplint]\nselect = " + "[" * depth + "]" * depth + "\n", encoding="utf-8"
    )
    run = _check(project)
    assert run.returncode == 2, run.stderr[-2000:]
    (line,) = run.stderr.strip().splitlines()
    assert "pyproject.toml" in line and "nested too deeply" in line
