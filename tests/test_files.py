"""Discovery: which files a run sees, whichever way the patterns are matched.

Plain names (the default excludes) are matched by a set lookup on each entry's
name while walking; anything else goes through amplint.globs.  Both must give what
gitignore semantics give.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from amplint.files import Discovered, discover


def _found(root: Path, exclude: list[str], *paths: Path) -> list[str]:
    return [
        found.path.relative_to(root).as_posix()
        for found in discover(paths or (root,), exclude, root)
        if isinstance(found, Discovered)
    ]


def _tree(root: Path, *files: str) -> None:
    for name in files:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x = 1\n")


def test_plain_names_match_at_any_depth(tmp_path: Path) -> None:
    _tree(tmp_path, "build/a.py", "src/build/b.py", "src/build.py", "src/ok.py", "src/data/c.py")
    (tmp_path / "src" / "data.py").write_text("x = 1\n")
    expected = ["src/build.py", "src/data.py", "src/ok.py"]
    assert _found(tmp_path, ["build", "data/"]) == expected


def test_patterns_with_a_slash_are_anchored_at_the_root(tmp_path: Path) -> None:
    _tree(tmp_path, "src/gen/a.py", "gen/b.py", "src/c.py", "other/src/gen/d.py")
    assert _found(tmp_path, ["src/gen"]) == ["gen/b.py", "other/src/gen/d.py", "src/c.py"]


def test_globs_and_negations(tmp_path: Path) -> None:
    _tree(tmp_path, "a_pb2.py", "keep_pb2.py", "b.py")
    assert _found(tmp_path, ["*_pb2.py", "!keep_pb2.py"]) == ["b.py", "keep_pb2.py"]


def test_a_linked_file_is_seen_once_and_linked_directories_are_not_followed(
    tmp_path: Path,
) -> None:
    _tree(tmp_path, "pkg/train.py", "outside/secret.py")
    try:
        os.symlink(tmp_path / "pkg" / "train.py", tmp_path / "pkg" / "alias.py")
        os.symlink(tmp_path / "outside", tmp_path / "pkg" / "linked_dir")
    except OSError:
        pytest.skip("this system cannot create symbolic links")
    assert _found(tmp_path, [], tmp_path / "pkg") == ["pkg/alias.py"]


def test_a_directory_named_although_excluded_is_walked(tmp_path: Path) -> None:
    _tree(tmp_path, "site-packages/torch/a.py", "site-packages/torch/build/b.py")
    named = tmp_path / "site-packages" / "torch"
    assert _found(tmp_path, ["site-packages", "build"], named) == ["site-packages/torch/a.py"]
