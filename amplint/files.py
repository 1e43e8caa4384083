"""Finding, reading and writing source files without losing a byte.

Discovery honours default excludes, configured excludes and ``.gitignore`` files;
reading keeps the encoding (coding cookie, BOM) and the newline style so that a
rewritten file differs from the original only where amplint changed it.
"""

from __future__ import annotations

import io
import os
import re
import stat
import tempfile
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import pathspec

from amplint.notebook import Notebook, NotebookError, read_notebook

SOURCE_SUFFIXES = (".py", ".pyi", ".ipynb")
NOTEBOOK_SUFFIX = ".ipynb"

DEFAULT_EXCLUDES = (
    ".git",
    ".hg",
    ".svn",
    ".venv",
    "venv",
    ".tox",
    ".nox",
    ".mypy_cache",
    ".ruff_cache",
    ".amplint_cache",
    "build",
    "dist",
    "__pycache__",
    ".ipynb_checkpoints",  # Jupyter's autosaved copies of the notebooks beside them
    "site-packages",
    "node_modules",
)


class SourceError(Exception):
    """A file that cannot be read as Python source; the message is one line."""


@dataclass(frozen=True)
class SourceFile:
    path: Path
    text: str
    # The codec that round-trips the file: "utf-8-sig" keeps a BOM, a coding
    # cookie's codec keeps e.g. latin-1 files in latin-1.
    encoding: str
    # A Jupyter notebook: `text` is its JSON, `notebook.code` what is analysed.
    notebook: Notebook | None = None

    @property
    def code(self) -> str:
        """The Python source to analyse."""
        return self.notebook.code if self.notebook is not None else self.text


def read_source(path: Path) -> SourceFile:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise SourceError("no such file") from None
    except IsADirectoryError:
        raise SourceError("is a directory") from None
    except OSError as error:
        raise SourceError(error.strerror or str(error)) from None
    return source_from_bytes(path, raw)


def source_from_bytes(path: Path, raw: bytes) -> SourceFile:
    """The source in `raw`, read as `path` says: a notebook or a Python file."""
    if path.suffix == NOTEBOOK_SUFFIX:
        try:
            text = raw.decode("utf-8")  # nbformat: JSON in UTF-8
        except UnicodeDecodeError as error:
            raise SourceError(f"cannot decode notebook as utf-8 at byte {error.start}") from None
        try:
            return SourceFile(path, text, "utf-8", notebook=read_notebook(text))
        except NotebookError as error:
            raise SourceError(str(error)) from None
    return SourceFile(path, decode_source(raw), encoding=detect_encoding(raw))


def detect_encoding(raw: bytes) -> str:
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    except SyntaxError as error:  # an unknown codec named in a coding cookie
        raise SourceError(f"cannot decode: {error.msg}") from None
    return encoding


def decode_source(raw: bytes) -> str:
    if b"\0" in raw:
        raise SourceError("binary file (contains NUL bytes), not Python source")
    encoding = detect_encoding(raw)
    try:
        # No newline translation: CRLF and lone CR reach the parser as written.
        return raw.decode(encoding)
    except UnicodeDecodeError as error:
        raise SourceError(
            f"cannot decode as {encoding} at byte {error.start}: {error.reason}"
        ) from None


def encode_source(text: str, encoding: str) -> bytes:
    return text.encode(encoding)


def write_source_atomic(source: SourceFile, new_text: str) -> None:
    """Replace the file's content in one step, keeping its mode and encoding.

    The new bytes go to a temporary file in the same directory, which is then
    renamed over the original: a reader (or a crash) sees the old file or the
    new one, never half of each.
    """
    path = source.path
    data = encode_source(new_text, source.encoding)
    # Edited (or replaced) since it was read: writing would throw that away.
    try:
        unchanged = path.read_bytes() == encode_source(source.text, source.encoding)
    except OSError:
        unchanged = False
    if not unchanged:
        raise SourceError("changed since amplint read it; not written")
    mode = path.stat().st_mode
    # The mode bits, not os.access: root may write anything, but a file its
    # owner marked read-only is one the user does not want changed.
    if not mode & stat.S_IWUSR or not os.access(path, os.W_OK):
        raise SourceError("file is not writable (read-only)")
    descriptor, temporary = tempfile.mkstemp(
        prefix=f".{path.name}.", suffix=".amplint-tmp", dir=path.parent
    )
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, mode & 0o7777)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass
        raise


def writable_target(path: Path, named: Sequence[Path]) -> Path:
    """Where writing `path` goes: the file itself, or the file a link names.

    A link is written through, so it stays a link, but only to a file inside
    the paths the user named: a fix never reaches outside them.
    """
    if not path.is_symlink():
        return path
    real = path.resolve()
    if not any(real == root or root in real.parents for root in (p.resolve() for p in named)):
        raise SourceError(f"a link to {real}, outside the paths named; not written")
    return real


@dataclass(frozen=True)
class Discovered:
    path: Path
    # Named on the command line: checked even when an exclude matches it.
    explicit: bool


# A pattern that is one plain name ("build", "node_modules/") matches that name
# at any depth: while walking, comparing the entry's own name is enough.
_PLAIN_NAME = re.compile(r"[^/!*?\[\]\\#\s][^/*?\[\]\\]*/?")


class _IgnoreRules:
    """Gitignore-style patterns anchored at a directory."""

    def __init__(self, base: Path, lines: Sequence[str]):
        self.base = base
        self._prefix = str(base).rstrip(os.sep) + os.sep
        patterns = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
        self._names: set[str] | None = None
        self._dir_names: set[str] = set()
        if all(_PLAIN_NAME.fullmatch(pattern) for pattern in patterns):
            # The default excludes: a set lookup instead of a regex per pattern.
            self._names = {p for p in patterns if not p.endswith("/")}
            self._dir_names = {p.rstrip("/") for p in patterns if p.endswith("/")}
        self.spec = pathspec.GitIgnoreSpec.from_lines(lines)

    def matches(self, path: Path, is_dir: bool) -> bool:
        """Whether `path` (resolved) or, while walking down, its own name matches."""
        return self.matches_resolved(str(path), path.name, is_dir)

    def matches_resolved(self, resolved: str, name: str, is_dir: bool) -> bool:
        if not resolved.startswith(self._prefix):
            return False
        if self._names is not None:
            return name in self._names or (is_dir and name in self._dir_names)
        relative = resolved[len(self._prefix) :]
        if os.sep != "/":
            relative = relative.replace(os.sep, "/")
        if is_dir:
            relative += "/"
        return self.spec.match_file(relative)


def _gitignore_at(directory: Path) -> _IgnoreRules | None:
    gitignore = directory / ".gitignore"
    try:
        lines = gitignore.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    return _IgnoreRules(directory, lines)


def _gitignores_above(directory: Path) -> list[_IgnoreRules]:
    """The .gitignore files of the enclosing repository that apply to `directory`."""
    chain: list[_IgnoreRules] = []
    for parent in [directory, *directory.parents]:
        rules = _gitignore_at(parent)
        if rules is not None:
            chain.append(rules)
        if (parent / ".git").exists():
            break
    else:
        return []  # not inside a git repository: .gitignore files mean nothing
    chain.reverse()
    return chain


def discover(
    paths: Sequence[Path],
    exclude: Iterable[str],
    root: Path,
    suffixes: tuple[str, ...] = SOURCE_SUFFIXES,
    force_exclude: bool = False,
) -> Iterator[Discovered | tuple[Path, str]]:
    """Yield the files to check, or ``(path, error)`` for a path that is not there.

    `exclude` holds gitignore-style patterns relative to `root` (a bare name such
    as ``build`` matches that name at any depth).  A file named explicitly is
    checked even when excluded, unless `force_exclude` (pre-commit names every
    staged file).
    """
    exclude_lines = list(exclude)
    root = root.resolve()
    seen: set[Path] = set()
    for given in paths:
        if not given.exists() and not given.is_symlink():
            yield (given, "no such file or directory")
            continue
        if given.is_file():
            if force_exclude and _excluded_file(given.resolve(), _IgnoreRules(root, exclude_lines)):
                continue
            if given.resolve() not in seen:
                seen.add(given.resolve())
                yield Discovered(given, explicit=True)
            continue
        if not given.is_dir():
            yield (given, "not a regular file or directory")
            continue
        directory = given.resolve()
        # Patterns are relative to the project root. A directory outside the root,
        # or one named explicitly although an exclude covers it (checking
        # .venv/.../site-packages/torch on purpose), anchors them itself.
        exclude_rules = _IgnoreRules(root, exclude_lines)
        if not (directory == root or root in directory.parents) or _covered(
            exclude_rules, directory
        ):
            exclude_rules = _IgnoreRules(directory, exclude_lines)
        gitignores = _gitignores_above(directory)
        if any(_covered(rules, directory) for rules in gitignores):
            gitignores = []  # named although ignored: only .gitignore files inside apply
        yield from _walk(given, directory, exclude_rules, gitignores, suffixes, seen)


def _excluded_file(path: Path, rules: _IgnoreRules) -> bool:
    return rules.matches(path, is_dir=False) or _covered(rules, path.parent)


def _covered(rules: _IgnoreRules, directory: Path) -> bool:
    """Whether `directory` or one of its parents below the rules' base matches."""
    return any(
        rules.matches(candidate, is_dir=True)
        for candidate in [directory, *directory.parents]
        if rules.base in candidate.parents
    )


def _walk(
    directory: Path,
    resolved_dir: Path,
    exclude_rules: _IgnoreRules,
    gitignores: list[_IgnoreRules],
    suffixes: tuple[str, ...],
    seen: set[Path],
) -> Iterator[Discovered | tuple[Path, str]]:
    """`directory` as the user will read it; `resolved_dir`, its real path.
    Directory links are never followed, so a child's real path is the parent's
    plus its name: no `resolve()` (a system call per component) per entry."""
    try:
        entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
    except OSError as error:
        yield (directory, f"cannot list directory: {error.strerror}")
        return
    local = _gitignore_at(resolved_dir)
    if local is not None and local.base not in {rules.base for rules in gitignores}:
        gitignores = [*gitignores, local]
    resolved_prefix = os.path.join(str(resolved_dir), "")
    for entry in entries:
        name = entry.name
        resolved = resolved_prefix + name
        try:
            is_dir = entry.is_dir()
        except OSError:
            continue
        if exclude_rules.matches_resolved(resolved, name, is_dir) or any(
            rules.matches_resolved(resolved, name, is_dir) for rules in gitignores
        ):
            continue
        if is_dir:
            if entry.is_symlink():
                continue  # never follow directory links: no loops, no escaping the tree
            yield from _walk(
                directory / name, resolved_dir / name, exclude_rules, gitignores, suffixes, seen
            )
        elif name.endswith(suffixes) and entry.is_file():  # no FIFOs or sockets
            path = directory / name
            real = path.resolve() if entry.is_symlink() else Path(resolved)
            if real not in seen:
                seen.add(real)
                yield Discovered(path, explicit=False)
