"""Findings per file, kept between runs in ``.amplint_cache/``.

An entry is found by a key that hashes everything a file's findings depend on:
its text, the codes enabled for it, the settings rules read, and amplint's own
code (every module of the package, so an edited checkout never serves stale
results).  Each entry is one small file written through a temporary name and
``os.replace``: runs sharing a cache see a whole entry or none, and a damaged
entry is a miss.

Most files never get that far: their text rules out every rule.  For them the
cache keeps one index, path -> the file's stat (size, times, inode) and the
codes it was tested for, so a warm run neither reads nor tests a file that is
unchanged since (ruff trusts the same stat fields).

A cache directory can arrive with a clone (committed by mistake, or planted):
an entry listing no findings would hide them from a reviewer.  So every entry
and the index are sealed with an HMAC under a key kept outside any project,
in the user's cache directory (`$XDG_CACHE_HOME/amplint/cache-key`, made on
first use, readable by its owner only); what another user or machine wrote
does not verify and is computed again.  Where no key can be kept, nothing is
cached.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Iterable

import amplint
from amplint.config import Settings
from amplint.diagnostics import Applicability, Diagnostic, Fix, Span
from amplint.files import SourceFile, read_regular
from amplint.project import ProjectRoot, still_current

CACHE_DIR_NAME = ".amplint_cache"
# Bumped when the entry format changes.
_FORMAT = "6"  # 2: spans carry a notebook cell; 3: entries name the modules they read;
# 4: fixes name the other files they rewrite; 5: keys tell a notebook from a module;
# 6: entries are sealed
_GITIGNORE = "*\n"
_CACHEDIR_TAG = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by amplint.\n"
)


@lru_cache(maxsize=None)
def _package_fingerprint() -> str:
    """A hash of amplint's own source: changes whenever its behaviour can."""
    digest = hashlib.sha256(amplint.__version__.encode())
    package = Path(amplint.__file__).parent
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


@lru_cache(maxsize=None)
def _signing_key() -> bytes | None:
    """This user's key for sealing cache files, made on first use; None where
    none can be read or made (a read-only home)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = Path(base) / "amplint" / "cache-key"
    for _ in range(2):
        try:
            key = read_regular(path, 64).decode("ascii")
            if len(key) == 64 and all(c in "0123456789abcdef" for c in key):
                return key.encode()
            return None  # a key file amplint did not write: trust nothing
        except FileNotFoundError:
            pass
        except (OSError, UnicodeDecodeError):
            return None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue  # another run made it meanwhile: read that one
        except OSError:
            return None
        with os.fdopen(descriptor, "w") as handle:
            handle.write(os.urandom(32).hex())
    return None


def _seal(key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hashlib.sha256).hexdigest().encode()


def _sealed(data: bytes) -> bytes | None:
    """`data` with this user's seal before it, or None where there is no key."""
    key = _signing_key()
    return None if key is None else _seal(key, data) + b"\n" + data


def _unsealed(stored: bytes) -> bytes | None:
    """What `stored` holds when this user's key sealed it, else None."""
    key = _signing_key()
    seal, _, data = stored.partition(b"\n")
    if key is None or not hmac.compare_digest(seal, _seal(key, data)):
        return None
    return data


def _stat_key(stat: os.stat_result, codes: Iterable[str]) -> list:
    """What must be unchanged for a text test's verdict to stand: a change of
    content moves the modification time, one of permissions the change time."""
    codes_digest = hashlib.sha256(",".join(sorted(codes)).encode()).hexdigest()[:16]
    return [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino, codes_digest]


class ResultCache:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.write_error: str | None = None  # why entries could not be stored, once
        self._directory_ready = False
        self._ruled_out: dict[str, list] | None = None  # the index, once read
        self._ruled_out_news: dict[str, list | None] = {}  # this run's changes (None: drop)

    # -- files their text ruled out ------------------------------------------------
    def ruled_out(self, path: Path, stat: os.stat_result, codes: Iterable[str]) -> bool:
        """Whether `path`'s text ruled out `codes`, and the file is as it was then."""
        if self._ruled_out is None:
            self._ruled_out = self._read_ruled_out()
        return self._ruled_out.get(os.path.abspath(path)) == _stat_key(stat, codes)

    def note_ruled_out(self, path: Path, stat: os.stat_result, codes: Iterable[str]) -> None:
        self._ruled_out_news[os.path.abspath(path)] = _stat_key(stat, codes)

    def forget_ruled_out(self, path: Path) -> None:
        """`path` now passes its text test: its old verdict would only grow the index."""
        if self._ruled_out is not None and os.path.abspath(path) in self._ruled_out:
            self._ruled_out_news[os.path.abspath(path)] = None

    def save_ruled_out(self) -> None:
        """This run's verdicts, merged into the index as it is on disk now (other
        runs may have written it since this one read it)."""
        if not self._ruled_out_news or self.write_error is not None:
            return
        index = self._read_ruled_out()
        for path, key in self._ruled_out_news.items():
            if key is None:
                index.pop(path, None)
            else:
                index[path] = key
        sealed = _sealed(json.dumps(index).encode())
        if sealed is None:
            return
        try:
            self._ensure_directory()
            _write_atomic(self._ruled_out_path(), sealed)
        except OSError as error:
            self.write_error = f"cannot write the cache in {self.directory}: {error.strerror}"
        self._ruled_out_news = {}

    def _ruled_out_path(self) -> Path:
        return self.directory / f"ruled-out-{_FORMAT}-{_package_fingerprint()[:16]}.json"

    def _read_ruled_out(self) -> dict[str, list]:
        try:
            data = _unsealed(read_regular(self._ruled_out_path()))
            index = json.loads(data) if data is not None else None
        except (OSError, ValueError, RecursionError):
            return {}  # absent or damaged: every file is read again
        return index if isinstance(index, dict) else {}  # or not this user's

    # -- findings -------------------------------------------------------------------

    def key(
        self, source: SourceFile, codes: Iterable[str], settings: Settings, project: ProjectRoot
    ) -> str:
        # The project is part of the question: the same text asks other
        # modules for its callers when the user names more of the tree.  So
        # is the kind of file: a module whose text is a notebook's cells
        # joined has the same code and other positions.
        codes = sorted(codes)
        digest = hashlib.sha256()
        for part in (
            _FORMAT,
            "notebook" if source.notebook is not None else "module",
            str(project.path),
            str(project.whole_tree),
            _package_fingerprint(),
            ",".join(codes),
            ",".join(code for code in codes if settings.fix_allowed(code)),
            settings.target_torch_shown,  # with its source, which messages name
            settings.dtype,
            settings.device_type,
            # A test file's numerics-changing fixes are withheld (rewrite-tests).
            str(not settings.rewrite_tests and settings.is_test_file(source.path)),
        ):
            digest.update(part.encode())
            digest.update(b"\0")
        digest.update(source.code.encode("utf-8", "surrogatepass"))
        return digest.hexdigest()

    def get(self, key: str, source: SourceFile) -> list[Diagnostic] | None:
        """The findings stored under `key`, while every other project module
        they were computed from is unchanged and each lies inside `source`."""
        try:
            data = _unsealed(read_regular(self._entry(key)))
            if data is None:
                return None  # written by another user or machine, or by hand
            document = json.loads(data)
            if not isinstance(document, dict):
                return None  # `[]`, `5`, `null`: not an entry this wrote
            depends_on = document.get("depends_on", {})
            if not isinstance(depends_on, dict) or not all(
                isinstance(path, str) and isinstance(digest, str)
                for path, digest in depends_on.items()
            ):
                return None
            if depends_on and not still_current(depends_on):
                return None
            diagnostics = [_diagnostic(record) for record in document["diagnostics"]]
        except (
            OSError,
            ValueError,
            OverflowError,  # int(Infinity), from a span
            KeyError,
            IndexError,
            TypeError,
            AttributeError,
            RecursionError,
        ):
            return None  # absent, or damaged: compute it again
        if not all(_lies_in(diagnostic.span, source) for diagnostic in diagnostics):
            return None  # well-formed, but not about this file: compute it again
        return diagnostics

    def put(
        self, key: str, diagnostics: Iterable[Diagnostic], depends_on: dict[str, str] | None = None
    ) -> None:
        if self.write_error is not None:
            return
        document = {"diagnostics": [_record(d) for d in diagnostics]}
        if depends_on:
            document["depends_on"] = depends_on
        data = _sealed(json.dumps(document).encode())
        if data is None:
            return  # no key to seal it with: an entry nobody could trust
        try:
            self._ensure_directory()
            _write_atomic(self._entry(key), data)
        except OSError as error:
            self.write_error = f"cannot write the cache in {self.directory}: {error.strerror}"

    def _entry(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    def _ensure_directory(self) -> None:
        """The directory, with the files that keep it out of git and backups
        (as .ruff_cache has them): made, or repaired where a full disk or a
        killed run left them empty or missing."""
        if self._directory_ready:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        for name, content in ((".gitignore", _GITIGNORE), ("CACHEDIR.TAG", _CACHEDIR_TAG)):
            path = self.directory / name
            try:
                if path.read_text(encoding="utf-8") == content:
                    continue
            except (OSError, UnicodeDecodeError):
                pass
            _write_atomic(path, content.encode())
        self._directory_ready = True


def is_amplint_cache(directory: Path) -> bool:
    """Whether `directory` holds amplint's cache (its CACHEDIR.TAG says so)."""
    try:
        return (directory / "CACHEDIR.TAG").read_text(encoding="utf-8") == _CACHEDIR_TAG
    except (OSError, UnicodeDecodeError):
        return False


def _write_atomic(path: Path, data: bytes) -> None:
    """`data` at `path` whole or not at all: a full disk leaves the old file."""
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def _lies_in(span: Span, source: SourceFile) -> bool:
    """Whether `span` can be a position in `source`: its lines (or its cell
    and the cell's lines) exist.  Generous by a line (a syntax error may sit
    just past the end) and about line ends: this tells garbage from a file's
    own findings, it does not re-derive them."""
    notebook = source.notebook
    if notebook is None:
        if span.cell is not None:
            return False
        lines = source.text.count("\n") + source.text.count("\r") + 1
    else:
        cell = next((cell for cell in notebook.cells if cell.number == span.cell), None)
        if cell is None:
            return False
        lines = max(cell.line_count, 1)
    # No column is past the text's length: an entry with a huge one would
    # have the full output format allocate a caret line that long.
    columns = len(source.text) + 1
    return (
        1 <= span.line <= span.end_line <= lines + 1
        and 0 <= min(span.column, span.end_column)
        and max(span.column, span.end_column) <= columns
    )


def _record(diagnostic: Diagnostic) -> list:
    span, fix = diagnostic.span, diagnostic.fix
    return [
        diagnostic.code,
        diagnostic.message,
        [span.line, span.column, span.end_line, span.end_column, span.cell],
        None if fix is None else [fix.applicability.value, fix.message, list(fix.partners)],
    ]


def _diagnostic(record: list) -> Diagnostic:
    code, message, span, fix = record
    return Diagnostic(
        str(code),
        str(message),
        Span(*(int(number) for number in span[:4]), cell=None if span[4] is None else int(span[4])),
        (
            None
            if fix is None
            else Fix(
                Applicability(fix[0]),
                str(fix[1]),
                edits=(),
                partners=tuple(str(path) for path in fix[2]),
            )
        ),
    )
