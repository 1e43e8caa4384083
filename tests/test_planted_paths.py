"""Paths a cloned repository plants that amplint reads without being told to
(ignore files, configuration, requirements, its cache and what a cache entry
names): never a hang, never memory without bound, never an internal error.

Each run is a subprocess under a timeout: before these were guarded, a
`.gitignore` linked to /dev/zero read until memory ran out, a FIFO hung for
ever, and a cache entry of the wrong shape was an internal error.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from amplint.cache import _sealed
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
    if kind == "FIFO":
        why = "not a regular file"
    elif planted == ".gitignore":
        why = "a link, which git does not follow either"
    else:
        why = "a link out of the project"
    assert f"{planted}: not read ({why})" in run.stderr


# What each planted file says when it is read: train.py is left out, or (a
# requirement) the declared torch is one AMP001 does not rewrite for.
PLANTED_TEXT = {
    ".gitignore": "train.py\n",
    "pyproject.toml": '[tool.amplint]\nexclude = ["train.py"]\n',
    "amplint.toml": 'exclude = ["train.py"]\n',
}


@pytest.mark.parametrize("planted", sorted(PLANTED_TEXT))
def test_a_planted_link_out_of_the_project_is_not_followed(tmp_path: Path, planted: str) -> None:
    outside = tmp_path / "elsewhere" / planted
    outside.parent.mkdir()
    outside.write_text(PLANTED_TEXT[planted], encoding="utf-8")
    project = _project(tmp_path)
    (project / planted).symlink_to(outside)
    run = _check(project)
    assert FINDING in run.stdout, run.stderr[-2000:]
    assert f"{planted}: not read (a link" in run.stderr


@pytest.mark.parametrize("planted", ["pyproject.toml", "amplint.toml"])
def test_a_configuration_linked_inside_the_project_is_read(tmp_path: Path, planted: str) -> None:
    project = _project(tmp_path)
    shared = project / "configs" / planted
    shared.parent.mkdir()
    shared.write_text(PLANTED_TEXT[planted], encoding="utf-8")
    (project / planted).symlink_to(shared)
    run = _check(project)
    assert FINDING not in run.stdout and "not read" not in run.stderr, run.stderr[-2000:]


def test_a_declared_torch_linked_out_of_the_project_is_not_read(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere" / "requirements.txt"
    outside.parent.mkdir()
    outside.write_text("torch>=1.5\n", encoding="utf-8")
    project = _project(tmp_path)
    (project / "requirements.txt").symlink_to(outside)
    assert "torch>=1.5" not in _check(project, "--show-settings").stdout
    assert "requirements.txt: not read (a link out of the project)" in _check(project).stderr
    (project / "requirements.txt").unlink()
    (project / "requirements.txt").write_text("torch>=1.5\n", encoding="utf-8")
    assert (
        "torch>=1.5" in _check(project, "--show-settings").stdout
    )  # read when it is the project's


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
        document = json.loads(entry.read_bytes().partition(b"\n")[2])
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
        # Sealed with this user's key: damage amplint itself could have left.
        entry.write_bytes(_sealed(text.encode()))
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


def test_the_project_model_reads_no_module_or_config_linked_out_of_the_project(
    tmp_path: Path,
) -> None:
    from amplint.project import ProjectIndex, ProjectRoot
    from amplint.project.configs import read_config_file

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "helpers.py").write_text("def loss(x):\n    return x\n", encoding="utf-8")
    (elsewhere / "ds.json").write_text('{"fp16": {"enabled": true}}', encoding="utf-8")
    project = _project(tmp_path).resolve()
    (project / "helpers.py").symlink_to(elsewhere / "helpers.py")
    (project / "ds.json").symlink_to(elsewhere / "ds.json")
    (project / "local.json").write_text("{}", encoding="utf-8")
    index = ProjectIndex(ProjectRoot(project, whole_tree=True))
    assert index.module(project / "helpers.py") is None
    assert index.module(project / "train.py") is not None
    assert read_config_file(project / "ds.json", project) is None
    assert read_config_file(project / "local.json", project) is not None
    # A config the code names outside the project is read as named.
    assert read_config_file(elsewhere / "ds.json", project) is not None


def test_a_cache_entry_another_user_wrote_is_not_trusted(tmp_path: Path) -> None:
    """A clone can carry `.amplint_cache/` (committed by mistake, or planted)
    with an entry that lists no findings for a file that has them: entries
    are sealed with a key kept outside the project, so one sealed elsewhere
    is computed again and the finding is seen."""
    project = _project(tmp_path)
    author, reviewer = tmp_path / "author-home", tmp_path / "reviewer-home"

    def check_as(home: Path) -> subprocess.CompletedProcess:
        environment = {k: v for k, v in os.environ.items() if k != "AMPLINT_CACHE_DIR"}
        return subprocess.run(
            [sys.executable, "-m", "amplint", "check", "."],
            cwd=project,
            env={**environment, "XDG_CACHE_HOME": str(home)},
            capture_output=True,
            text=True,
            timeout=60,
        )

    assert FINDING in check_as(author).stdout
    key = (author / "amplint" / "cache-key").read_bytes()
    for entry in (project / ".amplint_cache").rglob("*.json"):
        if entry.name.startswith("ruled-out"):
            continue
        hidden = json.dumps({"diagnostics": []}).encode()
        seal = hmac.new(key, hidden, hashlib.sha256).hexdigest().encode()
        entry.write_bytes(seal + b"\n" + hidden)
    assert FINDING not in check_as(author).stdout  # the author's own seal is trusted
    assert FINDING in check_as(reviewer).stdout  # the reviewer's is another key
