"""Where a file's project begins, and the directories it holds."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterator, Sequence

from amplint.files import DEFAULT_EXCLUDES, real_path

ROOT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")


@dataclass(frozen=True)
class ProjectRoot:
    """Where a file's project starts, and whether the directories below it are
    read (a marker says where the project ends; without one, only the
    directories the user's own paths span)."""

    path: Path
    whole_tree: bool


class ProjectRoots:
    """Each file's project root in one run over `named` (the user's paths): the
    nearest directory above the file holding a project marker, else the common
    parent of the paths, else (one script named alone) the script's directory,
    whose subdirectories are then not read: a script in /tmp or ~/Downloads
    must not read everything below."""

    def __init__(self, named: Sequence[Path]) -> None:
        spans = {real_path(path) if path.is_dir() else real_path(path).parent for path in named}
        try:
            common = Path(os.path.commonpath(sorted(spans))) if spans else None
        except ValueError:  # paths on different drives
            common = None
        # One file, or files of one directory, span only that directory.
        named_a_tree = len(spans) > 1 or any(path.is_dir() for path in named)
        self._common = common if named_a_tree else None

    def __call__(self, path: Path) -> ProjectRoot:
        directory = path.resolve().parent
        marked = _marked_root(directory)
        if marked is not None:
            return ProjectRoot(marked, whole_tree=True)
        if self._common is not None and directory.is_relative_to(self._common):
            return ProjectRoot(self._common, whole_tree=True)
        return ProjectRoot(directory, whole_tree=False)


def find_project_root(path: Path) -> ProjectRoot:
    """The project root of `path` named alone (standard input, one file)."""
    return ProjectRoots([path])(path)


_SKIPPED_DIRECTORIES = frozenset(
    {*DEFAULT_EXCLUDES, "site-packages", "node_modules", "__pycache__"}
)


def walk_tree(root: str, whole: bool) -> Iterator[tuple[str, list[os.DirEntry], bool]]:
    """Each directory os.walk would list under `root` (only `root` unless
    `whole`; no hidden, excluded or linked directory), with its entries that
    are not directories, in name order, and whether it holds a project marker.
    A directory entry of os.scandir says whether it is a link without the stat
    os.walk's names need: a project of 400 modules is listed in half the time."""
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            with os.scandir(directory) as listing:
                entries = sorted(listing, key=lambda entry: entry.name)
        except OSError:
            continue
        files, subdirectories, marked = [], [], False
        for entry in entries:
            if not _is_directory(entry):
                files.append(entry)
                marked = marked or entry.name in ROOT_MARKERS
                continue
            marked = marked or entry.name == ".git"
            if whole and not (
                entry.name.startswith(".")
                or entry.name in _SKIPPED_DIRECTORIES
                or entry.is_symlink()
            ):
                subdirectories.append(entry.path)
        yield directory, files, marked
        stack += reversed(subdirectories)


def _is_directory(entry: os.DirEntry) -> bool:
    """Whether `entry` is a directory or a link to one, as os.walk decides."""
    try:
        return entry.is_dir()
    except OSError:
        return False


@lru_cache(maxsize=4096)
def _marked_root(directory: Path) -> Path | None:
    for candidate in (directory, *directory.parents):
        if any((candidate / marker).exists() for marker in ROOT_MARKERS):
            return candidate
    return None
