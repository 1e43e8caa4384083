"""Finding, reading and writing source files without losing a byte.

Discovery honours default excludes, configured excludes and ``.gitignore`` files;
reading keeps the encoding (coding cookie, BOM) and the newline style so that a
rewritten file differs from the original only where amplint changed it.
"""

from __future__ import annotations

import codecs
import errno
import io
import os
import re
import stat
import tokenize
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator, Sequence

from amplint.globs import PatternList

if TYPE_CHECKING:
    from amplint.notebook import Notebook

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


# A notebook's outputs (plots, tables) can run to tens of megabytes, but
# nothing amplint reads is near this: a larger file is refused before it is
# read, not after (a 3 GB log named .py would otherwise be read whole).
MAX_READ_BYTES = 256 * 1024 * 1024


class NotARegularFile(OSError):
    """What `read_regular` raises for a path that is not a regular file within
    the read limit: an OSError, so every reader that skips an unreadable file
    skips it too."""


# The paths amplint found in a repository and skipped unread (a FIFO, a
# device, a file over the limit), each with why: the command says each once.
skipped_unread: dict[str, str] = {}


def note_skipped(error: OSError) -> None:
    """Remember why a path a repository planted was not read (NotARegularFile
    only: a file that is simply absent is no news)."""
    if isinstance(error, NotARegularFile):
        path, _, why = str(error.args[0]).rpartition(": ")
        skipped_unread.setdefault(path, why)


def read_regular(
    path: Path | str,
    limit: int = MAX_READ_BYTES,
    *,
    within: Path | None = None,
    follow_link: bool = True,
) -> bytes:
    """The bytes of `path`, a regular file of at most `limit` bytes, read
    without ever waiting: a FIFO is opened non-blocking and refused, as is a
    device (`/dev/zero` behind a committed symlink), and a file that grows
    past `limit` while read is refused at `limit + 1` bytes.  For every path
    a repository can plant that amplint reads without being told to (ignore
    files, configuration, requirements, its cache and what an entry names).

    With `within` (a resolved directory, the project), a path whose links lead
    out of it is refused: a clone decides what its links point to.  Without
    `follow_link`, a path that is itself a link is refused, as git (2.32 on)
    refuses a linked `.gitignore`."""
    if within is not None and not Path(os.path.realpath(path)).is_relative_to(within):
        raise NotARegularFile(f"{path}: a link out of the project")
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow_link:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        descriptor = os.open(path, flags)
    except OSError as error:
        if error.errno == errno.ELOOP and not follow_link:
            raise NotARegularFile(f"{path}: a link, which git does not follow either") from None
        raise
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise NotARegularFile(f"{path}: not a regular file")
        if status.st_size > limit:
            raise NotARegularFile(f"{path}: larger than {limit} bytes")
        chunks, size = [], 0
        while chunk := os.read(descriptor, min(1 << 20, limit + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise NotARegularFile(f"{path}: larger than {limit} bytes")
            if size == status.st_size:
                break  # all fstat saw: one call, not a second to find the end
        return b"".join(chunks)
    finally:
        os.close(descriptor)


@lru_cache(maxsize=1024)
def repository_top(directory: Path) -> Path:
    """The project a file planted in `directory` belongs to, resolved, for
    `read_regular(within=...)`: the enclosing git work tree, else `directory`."""
    directory = real_path(directory)
    for candidate in (directory, *directory.parents):
        if os.path.lexists(candidate / ".git"):
            return candidate
    return directory


# What atomic writes name their temporary files: `.NAME.PID.RANDOM.amplint-tmp`
# beside the file NAME, by process PID (writes.Change records each in its journal).
TEMPORARY_SUFFIX = ".amplint-tmp"
TEMPORARY_NAME = re.compile(r"\.(?P<name>.+)\.(?P<pid>[0-9]+)\.[^.]+" + re.escape(TEMPORARY_SUFFIX))


class SourceError(Exception):
    """A file that cannot be read as Python source; the message is one line."""


def real_path(path: Path) -> Path:
    """`path` with every link followed, as far as they lead: unlike
    `Path.resolve()`, a link loop is no exception."""
    return Path(os.path.realpath(path))


def shown_path(path: str | Path) -> str:
    """`path` as messages show another file: relative to the working directory
    where it lies below it, as given otherwise."""
    try:
        return Path(path).resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return Path(path).as_posix()


@dataclass(frozen=True)
class SourceFile:
    """A file's text as read, and how to write it back byte for byte."""

    path: Path
    text: str
    # The codec that round-trips the file: "utf-8-sig" keeps a BOM, a coding
    # cookie's codec keeps e.g. latin-1 files in latin-1.
    encoding: str
    # A Jupyter notebook: `text` is its JSON, `notebook.code` what is analysed.
    notebook: Notebook | None = None
    # Whether `text` encodes back to the bytes read. Not so for a few codecs
    # (utf-7 has several spellings of one text): such a file is checked, and
    # never rewritten, since bytes the fix did not touch would change too.
    round_trips: bool = True

    @property
    def code(self) -> str:
        """The Python source to analyse."""
        return self.notebook.code if self.notebook is not None else self.text


def read_source(path: Path) -> SourceFile:
    try:
        size = path.stat().st_size
        if size > MAX_READ_BYTES:
            raise SourceError(
                f"{size / 1e6:.0f} MB is more than amplint reads "
                f"({MAX_READ_BYTES / 1e6:.0f} MB); exclude it"
            )
        # Bounded and never waiting: the file found may have been swapped for
        # a FIFO (or a link to a device) since the walk listed it.
        raw = read_regular(path)
    except NotARegularFile as why:
        raise SourceError(str(why).removeprefix(f"{path}: ")) from None
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
        from amplint.notebook import NotebookError, read_notebook  # loaded for notebooks only

        try:
            text = raw.decode("utf-8")  # nbformat: JSON in UTF-8
        except UnicodeDecodeError as error:
            raise SourceError(f"cannot decode notebook as utf-8 at byte {error.start}") from None
        try:
            return SourceFile(path, text, "utf-8", notebook=read_notebook(text))
        except NotebookError as error:
            raise SourceError(str(error)) from None
    text, encoding = decode_source(raw), detect_encoding(raw)
    # UTF-8 has one spelling of each text; other codecs are compared.
    round_trips = encoding in ("utf-8", "utf-8-sig") or _encodes_to(text, encoding, raw)
    return SourceFile(path, text, encoding=encoding, round_trips=round_trips)


# Text whose bytes every codec Python reads source in spells as ASCII does.
_ASCII_PROBE = "# -*- coding: x -*-\nimport torch\n"


def detect_encoding(raw: bytes) -> str:
    """The codec the file's coding cookie or BOM names (UTF-8 without either),
    when Python itself could read source in it."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    except SyntaxError as error:  # an unknown codec named in a coding cookie
        raise SourceError(f"cannot decode: {error.msg}") from None
    info = codecs.lookup(encoding)
    if not getattr(info, "_is_text_encoding", True):  # hex, rot13, base64, zlib
        raise SourceError(f"cannot decode: the coding cookie names {encoding}, not a text encoding")
    if encoding != "utf-8-sig" and not _spells_ascii_as_ascii(encoding):
        # utf-16, utf-32, EBCDIC: the cookie itself could not have been read in them.
        raise SourceError(
            f"cannot decode: the coding cookie names {encoding}, which does not spell "
            "ASCII as ASCII (Python cannot read source in it either)"
        )
    return encoding


def _spells_ascii_as_ascii(encoding: str) -> bool:
    try:
        return _ASCII_PROBE.encode(encoding) == _ASCII_PROBE.encode("ascii")
    except (UnicodeError, ValueError):  # the "undefined" codec refuses everything
        return False


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
    except (UnicodeError, ValueError) as error:  # a codec's own failure (idna, punycode)
        raise SourceError(f"cannot decode as {encoding}: {error}") from None


def encode_source(text: str, encoding: str) -> bytes:
    return text.encode(encoding)


def _encodes_to(text: str, encoding: str, raw: bytes) -> bool:
    try:
        return encode_source(text, encoding) == raw
    except (UnicodeError, ValueError):
        return False


def is_stale_temporary(entry: str, of_name: str | None = None) -> bool:
    match = TEMPORARY_NAME.fullmatch(entry)
    if match is None or (of_name is not None and match.group("name") != of_name):
        return False
    return process_gone(int(match.group("pid")))


def process_gone(pid: int) -> bool:
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (OSError, OverflowError):
        return False  # alive under another user, or cannot tell
    return False


@dataclass(frozen=True)
class Discovered:
    """A file discovery found to check."""

    path: Path
    # Named on the command line: checked even when an exclude matches it.
    explicit: bool


@dataclass(frozen=True)
class StaleTemporary:
    """A file named as the temporaries of `fix --apply` are, by a process that
    is gone, found on the way: worth a word, never deleted for its name (the
    journal of the run that made it is what removes it: writes.complete_journal)."""

    path: Path


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
        self.patterns = PatternList(lines)

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
        return self.patterns.matches(relative, is_dir)


def _rules_from(path: Path, base: Path, follow_link: bool = False) -> _IgnoreRules | None:
    """The patterns of the ignore file at `path`, anchored at `base`; None where
    there is none (or it is no regular file: a repository may plant anything)."""
    try:
        data = read_regular(path, follow_link=follow_link)
    except OSError as error:
        note_skipped(error)
        return None
    return _IgnoreRules(base, data.decode("utf-8", errors="replace").splitlines())


# A directory's own ignore files: git's, and the `.ignore` that ripgrep and
# ruff honour for what a project keeps in git but no tool should read.
IGNORE_FILE_NAMES = (".gitignore", ".ignore")


def _ignore_files_at(directory: Path) -> list[_IgnoreRules]:
    found = (_rules_from(directory / name, directory) for name in IGNORE_FILE_NAMES)
    return [rules for rules in found if rules is not None]


def _ignore_files_above(directory: Path) -> list[_IgnoreRules]:
    """The ignore files of the enclosing git repository that apply to
    `directory`: its .gitignore and .ignore files from the repository's root
    down, `.git/info/exclude`, and the user's `core.excludesFile`."""
    chain: list[_IgnoreRules] = []
    for parent in [directory, *directory.parents]:
        chain += reversed(_ignore_files_at(parent))
        if (parent / ".git").exists():
            chain += _repository_excludes(parent)
            break
    else:
        return []  # not inside a git repository: its ignore files mean nothing
    chain.reverse()
    return chain


def _repository_excludes(repository: Path) -> list[_IgnoreRules]:
    """What git ignores in `repository` beyond its .gitignore files: the
    repository's own `.git/info/exclude` (not a worktree's, whose `.git` is a
    file) and the user's global excludes file."""
    found = [_rules_from(repository / ".git" / "info" / "exclude", repository)]
    excludes_file = global_excludes_file(repository)
    if excludes_file is not None:
        found.append(_rules_from(excludes_file, repository, follow_link=True))
    return [rules for rules in found if rules is not None]


_EXCLUDES_FILE = re.compile(r"\s*excludesfile\s*=\s*(.*?)\s*$", re.IGNORECASE)
_SECTION = re.compile(r"\s*\[\s*([A-Za-z0-9.-]+)")


def global_excludes_file(repository: Path) -> Path | None:
    """git's `core.excludesFile` for `repository`, read from the user's and the
    repository's git configuration as git reads them (the last one set wins;
    not the system's, /etc/gitconfig), else git's default,
    `$XDG_CONFIG_HOME/git/ignore`.  Read, not asked of git: git may not be
    installed, and a run must not wait on it."""
    home = Path.home()
    xdg = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
    # GIT_CONFIG_GLOBAL (git 2.32) names the global configuration instead.
    named = os.environ.get("GIT_CONFIG_GLOBAL")
    user = [Path(named)] if named else [xdg / "git" / "config", home / ".gitconfig"]
    value: str | None = None
    for config in (*user, repository / ".git" / "config"):
        try:
            text = read_regular(config).decode("utf-8", errors="replace")
        except OSError:
            continue
        section = ""
        for line in text.splitlines():
            header = _SECTION.match(line)
            if header is not None:
                section = header.group(1).lower()
                continue
            found = _EXCLUDES_FILE.match(line) if section == "core" else None
            if found is not None:
                value = _config_value(found.group(1))
    if value is None:
        return xdg / "git" / "ignore"
    if not value:
        return None  # set to nothing: no global excludes
    return Path(os.path.expanduser(value))


def _config_value(raw: str) -> str:
    """A git config value: quoted, or up to a comment."""
    if raw.startswith('"'):
        return raw[1:].split('"', 1)[0]
    return re.split(r"\s[#;]|^[#;]", raw, maxsplit=1)[0].strip()


def discover(
    paths: Sequence[Path],
    exclude: Iterable[str],
    root: Path,
    suffixes: tuple[str, ...] = SOURCE_SUFFIXES,
    force_exclude: bool = False,
    respect_gitignore: bool = True,
) -> Iterator[Discovered | StaleTemporary | tuple[Path, str]]:
    """Yield the files to check, or ``(path, error)`` for a path that is not there.

    `exclude` holds gitignore-style patterns relative to `root` (a bare name such
    as ``build`` matches that name at any depth).  A file named explicitly is
    checked even when excluded, unless `force_exclude` (pre-commit names every
    staged file).  With `respect_gitignore`, what git ignores and `.ignore`
    files name is skipped too.
    """
    exclude_lines = list(exclude)
    root = root.resolve()
    seen: set[Path] = set()
    for given in paths:
        if not given.exists():
            yield (given, _why_missing(given))
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
        gitignores = _ignore_files_above(directory) if respect_gitignore else []
        if any(_covered(rules, directory) for rules in gitignores):
            gitignores = []  # named although ignored: only ignore files inside apply
        yield from _walk(
            given, directory, exclude_rules, gitignores, suffixes, seen, respect_gitignore
        )


def _why_missing(path: Path) -> str:
    try:
        os.stat(path)
    except OSError as error:
        if error.errno == errno.ELOOP:
            return "a loop of links"
    return "a link to nothing" if path.is_symlink() else "no such file or directory"


def excluded(path: Path, patterns: Sequence[str], root: Path) -> bool:
    """Whether the exclude `patterns` (relative to `root`) cover `path`."""
    return _excluded_file(path.resolve(), _rules(root.resolve(), tuple(patterns)))


@lru_cache(maxsize=64)
def _rules(root: Path, patterns: tuple[str, ...]) -> _IgnoreRules:
    return _IgnoreRules(root, patterns)


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
    respect_gitignore: bool = True,
) -> Iterator[Discovered | StaleTemporary | tuple[Path, str]]:
    """`directory` as the user will read it; `resolved_dir`, its real path.
    Directory links are never followed, so a child's real path is the parent's
    plus its name: no `resolve()` (a system call per component) per entry."""
    try:
        entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
    except OSError as error:
        yield (directory, f"cannot list directory: {error.strerror}")
        return
    if respect_gitignore and not any(rules.base == resolved_dir for rules in gitignores):
        gitignores = [*gitignores, *_ignore_files_at(resolved_dir)]
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
                directory / name,
                resolved_dir / name,
                exclude_rules,
                gitignores,
                suffixes,
                seen,
                respect_gitignore,
            )
        elif name.endswith(TEMPORARY_SUFFIX) and is_stale_temporary(name):
            yield StaleTemporary(directory / name)
        elif name.endswith(suffixes) and entry.is_file():  # no FIFOs or sockets
            path = directory / name
            real = path.resolve() if entry.is_symlink() else Path(resolved)
            if real not in seen:
                seen.add(real)
                yield Discovered(path, explicit=False)
