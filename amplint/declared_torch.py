"""The oldest torch a project declares it runs on: the default `target-torch`.

A project that says `torch>=1.8` (in `pyproject.toml`'s `[project]`
dependencies or Poetry's, `setup.py`, `setup.cfg`'s `install_requires`, or a
`requirements*.txt`) must keep running on 1.8: a fix that writes an API torch
1.8 lacks breaks the versions the project supports (a version-guarded fallback
rewritten to `torch.amp.GradScaler` on its old-torch branch).  The files are
read as text and data, never run: `setup.py` is parsed and its string literals
that are requirements of torch are read.

The project is the nearest directory, from where the run starts upwards, that
holds one of those files (or `.git`); the lowest floor among its files wins.
Optional extras are not read: a library that needs torch only for one extra
(as amplint itself) declares no floor for the rest.
"""

from __future__ import annotations

import ast
import configparser
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from amplint.config import Settings
from amplint.files import note_skipped, read_regular, repository_top

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on old Pythons only
    import tomli as tomllib

# `torch>=1.8`, `torch[opt] ~= 2.1.0`, `torch==1.13.1+cu117`: the name exactly
# (not torchvision), its extras, then specifiers separated by commas.  Markers
# (`; python_version>"3.8"`) and comments are cut off first.
_NAME = re.compile(r"\s*torch\s*(?:\[[^\]]*\])?", re.I)
_SPECIFIER = re.compile(r"\s*(?P<op>===|==|~=|>=|>|<=|<|!=)\s*(?P<version>[\w.*+!-]+)\s*")
_VERSION = re.compile(r"(\d{1,4})\.(\d{1,4})")
# Specifiers that set a lower bound; Poetry's caret and tilde too.
_LOWER = {"===", "==", "~=", ">=", ">"}
_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg")


@dataclass(frozen=True)
class DeclaredFloor:
    """The oldest torch the project declares it supports, and where it says so."""

    version: tuple[int, int]
    where: str  # `requirements.txt: torch>=1.8`, for --show-settings and messages


def declared_torch_floor(start: Path) -> DeclaredFloor | None:
    """The lowest torch the project around `start` declares, or None."""
    for directory in (start, *start.parents):
        if not directory.is_dir():
            continue
        requirements = sorted(directory.glob("requirements*.txt"))
        markers = [directory / name for name in _MARKERS if (directory / name).is_file()]
        if not (requirements or markers or (directory / ".git").exists()):
            continue
        found = []
        for path in [*markers, *requirements]:
            for spelled in _requirements_in(path, repository_top(directory)):
                floor = _floor(spelled)
                if floor is not None:
                    found.append(DeclaredFloor(floor, f"{path.name}: {spelled.strip()}"))
        return min(found, key=lambda declared: declared.version) if found else None
    return None


def with_declared_torch(settings: Settings, start: Path) -> Settings:
    """`settings` with the declared floor of the project around `start` as
    target-torch, where no configuration chose one."""
    if settings.target_torch_source != "default":
        return settings
    declared = declared_torch_floor(start if start.is_dir() else start.parent)
    if declared is None:
        return settings
    return replace(settings, target_torch=declared.version, target_torch_source=declared.where)


def _floor(requirement: str) -> tuple[int, int] | None:
    spelled = requirement.split(";", 1)[0].split("#", 1)[0]
    name = _NAME.match(spelled)
    if name is None:
        return None
    floors = []
    for part in spelled[name.end() :].split(","):
        specifier = _SPECIFIER.fullmatch(part)
        if specifier is None:
            return None  # not a requirement of torch (`torchvision>=0.9`, prose)
        version = _VERSION.match(specifier.group("version"))
        if specifier.group("op") in _LOWER and version is not None:
            floors.append((int(version.group(1)), int(version.group(2))))
    return min(floors) if floors else None


def _requirements_in(path: Path, project: Path) -> list[str]:
    """The requirement strings `path` declares; none where it cannot be read
    or links out of `project`."""
    try:
        text = read_regular(path, within=project).decode("utf-8")
    except OSError as error:
        note_skipped(error)
        return []
    except UnicodeDecodeError:
        return []
    if path.name == "pyproject.toml":
        return _pyproject(text)
    if path.name == "setup.py":
        return _setup_py(text)
    if path.name == "setup.cfg":
        return _setup_cfg(text)
    return [line for line in text.splitlines() if not line.lstrip().startswith(("-", "#"))]


def _pyproject(text: str) -> list[str]:
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return []
    project = document.get("project", {})
    found = list(project.get("dependencies", [])) if isinstance(project, dict) else []
    poetry = document.get("tool", {}).get("poetry", {}).get("dependencies", {})
    torch = poetry.get("torch") if isinstance(poetry, dict) else None
    if isinstance(torch, dict):
        torch = torch.get("version")
    if isinstance(torch, str):
        # Poetry: `^1.8` and `~1.8` are at least 1.8; a bare `1.8` is exactly it.
        spec = re.sub(r"^\s*[\^~](?!=)", ">=", torch)
        found.append(f"torch{spec}" if spec[:1] in "<>=!~" else f"torch=={spec}")
    return [item for item in found if isinstance(item, str)]


def _setup_py(text: str) -> list[str]:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]


def _setup_cfg(text: str) -> list[str]:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error:
        return []
    value = parser.get("options", "install_requires", fallback="")
    return value.splitlines()
