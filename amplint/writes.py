"""Writing rewrites: each file replaced in one step, and the files of one
run (an apex program migrated whole) all or nothing, even when the run is
killed.

A `Change` keeps a journal in a directory the user named.  Before it makes a
temporary file it records the temporary's name there; the rewrite is written
and synced into it beside its file (`Change.prepare`); then the journal gets
the renames, is synced, and each temporary is renamed over its file
(`Change.commit`).  The next run that writes finishes a killed run's journal
(`complete_journal`): the renames it recorded are done, the temporaries it
recorded are removed.  Nothing else is ever removed: a file merely named like
amplint's temporaries is not amplint's to delete.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from amplint.files import (
    TEMPORARY_NAME,
    TEMPORARY_SUFFIX,
    NotARegularFile,
    SourceError,
    SourceFile,
    encode_source,
    process_gone,
    read_regular,
    real_path,
)


@dataclass(frozen=True)
class PreparedWrite:
    """A rewrite written and synced beside its file, not yet renamed over it."""

    path: Path
    temporary: str
    old_digest: str  # sha256 of the file as read
    new_digest: str  # sha256 of what replaces it
    identity: tuple[int, int] = (0, 0)  # (device, inode) of the file as read

    def still_as_read(self) -> bool:
        """Whether the file is still the one read, with the content read: an
        editor's save (or a swap for another file) since then is kept."""
        try:
            status = os.stat(self.path)
            data = read_regular(self.path)
        except OSError:
            return False
        return (status.st_dev, status.st_ino) == self.identity and _sha256(data) == self.old_digest


def write_source_atomic(source: SourceFile, new_text: str) -> None:
    """Replace one file's content in one step (see `Change`)."""
    change = Change(source.path.parent)
    try:
        write = change.prepare(source, new_text)
    except BaseException:
        change.abandon()
        raise
    problems = change.commit([write])
    if problems:
        raise SourceError(problems[0][1])


# A run's journal: JSON lines, `{"temporary": PATH}` for each temporary file
# before it is made, then `{"renames": [[TARGET, TEMPORARY, OLD, NEW], ...]}`
# before the first rename.  Deleted when the run is done with it.
JOURNAL_PREFIX = ".amplint-journal."
# Why a file edited (or replaced) since it was read is not written over.
_CHANGED = "changed since amplint read it; not written"
# A journal names each temporary once and each rename once, a few hundred
# bytes per file: past this it is no journal a run of amplint wrote.
MAX_JOURNAL_BYTES = 4 << 20
_JOURNAL_NAME = re.compile(re.escape(JOURNAL_PREFIX) + r"(?P<pid>[0-9]+)\.[^.]+\.json")


class Change:
    """The rewrites of one run, written as one change (see the module)."""

    def __init__(self, journal_directory: Path) -> None:
        self.journal_directory = journal_directory
        self._journal: str | None = None
        self._descriptor: int | None = None
        self._temporaries: list[str] = []

    def prepare(self, source: SourceFile, new_text: str) -> PreparedWrite:
        """Write the new content to a temporary file beside the file, keeping
        its mode, owner, group, extended attributes and encoding, synced to
        disk; `commit` renames it over the file.

        Renaming means a reader (or a crash) sees the old file or the new
        one, never half of each.  It makes a new file, so a file with other
        hard links (which would keep the old content) is refused, and so is
        one whose owner or group the new file could not be given."""
        path = source.path
        data = encode_source(new_text, source.encoding)
        old = encode_source(source.text, source.encoding)
        # Edited (or replaced) since it was read: writing would throw that away.
        try:
            # Never waiting: a FIFO put in its place would block the read for ever.
            unchanged = read_regular(path) == old
        except OSError:
            unchanged = False
        if not unchanged:
            raise SourceError(_CHANGED)
        status = path.stat()
        # The mode bits, not os.access: root may write anything, but a file its
        # owner marked read-only is one the user does not want changed.
        if not status.st_mode & stat.S_IWUSR or not os.access(path, os.W_OK):
            raise SourceError("file is not writable (read-only)")
        if status.st_nlink > 1:
            raise SourceError(
                f"the file has {status.st_nlink} hard links, which replacing it would "
                "part from the fix; not written"
            )
        temporary = self._new_temporary(path)
        descriptor = os.open(
            temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600
        )
        self._temporaries.append(temporary)  # made by this run: its to remove
        try:
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(temporary, status.st_mode & 0o7777)
            _give_ownership(temporary, status)
            _keep_extended_attributes(path, temporary)
        except BaseException:
            _remove(temporary)
            raise
        identity = (status.st_dev, status.st_ino)
        return PreparedWrite(path, temporary, _sha256(old), _sha256(data), identity)

    def _new_temporary(self, path: Path) -> str:
        """A name for `path`'s temporary, recorded in the journal before the
        file exists: whatever kills the run, every temporary it made is one
        its journal names (a write, not a sync, survives SIGKILL)."""
        if self._descriptor is None:
            self._descriptor, self._journal = tempfile.mkstemp(
                prefix=f"{JOURNAL_PREFIX}{os.getpid()}.", suffix=".json", dir=self.journal_directory
            )
        name = f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}{TEMPORARY_SUFFIX}"
        temporary = str(path.resolve().parent / name)
        self._append({"temporary": temporary})
        return temporary

    def _append(self, record: dict) -> None:
        assert self._descriptor is not None
        line = (json.dumps(record) + "\n").encode("utf-8")
        while line:
            line = line[os.write(self._descriptor, line) :]

    def commit(self, writes: Sequence[PreparedWrite]) -> list[tuple[Path, str]]:
        """Rename each prepared write over its file, the renames journaled and
        synced first; the temporaries of writes left out are removed.  What
        could not be renamed, each with why (nothing, as a rule)."""
        problems: list[tuple[Path, str]] = []
        if writes:
            record = [
                [str(write.path.resolve()), write.temporary, write.old_digest, write.new_digest]
                for write in writes
            ]
            try:
                self._append({"renames": record})
                os.fsync(self._descriptor)
                _sync_directory(self.journal_directory)
            except BaseException:
                self.abandon()
                raise
            renamed = 0
            try:
                for write in writes:
                    # Saved by an editor since it was read (the rewrites of
                    # a large run take a while to prepare): checked right
                    # before the rename, what the save wrote is the user's.
                    if write.still_as_read():
                        os.replace(write.temporary, write.path)
                    else:
                        problems.append((write.path, _CHANGED))
                    renamed += 1
            except OSError as error:
                # Not killed: an error of the file system's.  What is renamed
                # stays renamed; the rest is tried once more, as the next run
                # would, and what still fails is said file by file.
                unfinished = dict(_finish(_renames(record[renamed:])))
                for write in writes[renamed:]:
                    why = unfinished.get(write.path.resolve())
                    if why is not None:
                        problems.append((write.path, f"{why} ({error.strerror or error})"))
        unwritten = {path for path, why in problems if why != _CHANGED}
        # A rewrite that could not be put in place stays where the message says.
        self._close(keep={write.temporary for write in writes if write.path in unwritten})
        return problems

    def abandon(self) -> None:
        """Remove every temporary this change made, and its journal."""
        self._close(keep=set())

    def _close(self, keep: set[str]) -> None:
        for temporary in self._temporaries:
            if temporary not in keep:
                _remove(temporary)
        self._temporaries = []
        if self._descriptor is not None:
            os.close(self._descriptor)
            self._descriptor = None
        if self._journal is not None:
            _remove(self._journal)
            self._journal = None


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _remove(path: str | Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _sync_directory(directory: Path) -> None:
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def _renames(record: list) -> list[tuple[Path, str, str, str]]:
    return [(Path(target), temporary, old, new) for target, temporary, old, new in record]


def _finish(renames: list[tuple[Path, str, str, str]]) -> list[tuple[Path, str]]:
    """Do the renames a journal lists that are not done; the files that
    could not be finished, each with why."""
    problems = []
    for target, temporary, old, new in renames:
        try:
            current = _sha256(read_regular(target))
        except OSError:
            current = None
        if current == new:
            _remove(temporary)  # renamed already
            continue
        if current == old and os.path.exists(temporary):
            try:
                os.replace(temporary, target)
                continue
            except OSError:
                pass
        problems.append(
            (target, f"its rewrite could not be put in place and is left in {temporary}")
        )
    return problems


class NotAJournal(ValueError):
    """A file named like a journal that amplint did not write."""


def complete_journal(journal: Path, areas: Sequence[Path]) -> list[str]:
    """Finish the change a killed run's journal records: the renames it
    listed are done, the temporaries it made are removed, and so is the
    journal.  What happened, in words: one line per file that could not be
    finished.  A journal whose records are not what amplint writes (a
    temporary not named for the file beside it by the journal's process, a
    file outside `areas`, the paths the user named) is left alone, and so is
    every file it names."""
    try:
        temporaries, renames = _read_journal(journal, areas)
    except NotAJournal as why:
        return [f"{journal}: not a journal amplint wrote ({why}); {_set_aside(journal)}"]
    except OSError:
        return []
    unfinished = {target for target, _ in _finish(renames)}
    left = {temporary for target, temporary, _, _ in renames if target in unfinished}
    for temporary in temporaries:
        if temporary not in left and _is_regular(temporary):
            _remove(temporary)
    _remove(journal)
    return [
        f"{target}: changed since the interrupted `amplint fix` that rewrote the files "
        f"beside it; its rewrite is left in {temporary}"
        for target, temporary, _, _ in renames
        if target in unfinished
    ]


def _read_journal(
    journal: Path, areas: Sequence[Path]
) -> tuple[dict[str, Path], list[tuple[Path, str, str, str]]]:
    """The temporaries a journal records (each with the file it stands for)
    and the renames it lists; NotAJournal where a record is not one amplint
    writes."""
    match = _JOURNAL_NAME.fullmatch(journal.name)
    if match is None:
        raise NotAJournal("its name")
    pid = match.group("pid")
    try:
        data = read_regular(journal, MAX_JOURNAL_BYTES)
    except NotARegularFile as why:
        raise NotAJournal(str(why).removeprefix(f"{journal}: ")) from None
    lines = data.decode("utf-8", errors="replace").splitlines()
    records = []
    for number, line in enumerate(lines):
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            if number < len(lines) - 1:  # the last line may be cut short by a kill
                raise NotAJournal(f"line {number + 1} is not JSON") from None
            continue
        if "\0" in line or "\\u0000" in line:
            raise NotAJournal(f"line {number + 1} names a path with a NUL")
        records.append(record)
    temporaries: dict[str, Path] = {}
    renames: list[tuple[Path, str, str, str]] = []
    roots = [real_path(area) for area in areas]
    for record in records:
        if isinstance(record, dict) and isinstance(record.get("temporary"), str):
            temporary = record["temporary"]
            temporaries[temporary] = _recorded_target(temporary, pid, roots)
        elif isinstance(record, dict) and isinstance(record.get("renames"), list):
            try:
                renames = _renames(record["renames"])
            except (TypeError, ValueError):
                raise NotAJournal("its renames") from None
            for target, temporary, _, _ in renames:
                if temporaries.get(temporary) != target:
                    raise NotAJournal(f"{temporary} is not a recorded temporary of {target}")
        else:
            raise NotAJournal("a record amplint does not write")
    return temporaries, renames


def _recorded_target(temporary: str, pid: str, roots: Sequence[Path]) -> Path:
    """The file `temporary` stands for, when it is one the journal's process
    could have made: named by files.TEMPORARY_NAME with that process's id,
    beside that file, inside the named paths."""
    match = TEMPORARY_NAME.fullmatch(os.path.basename(temporary))
    parent = Path(os.path.dirname(temporary))
    if match is None or match.group("pid") != pid or not parent.is_absolute():
        raise NotAJournal(f"{temporary} is not named as its temporaries are")
    # Where the directory really is, every link and `..` followed: a record
    # of `<project>/../outside/...` or of a committed link to elsewhere names
    # a file outside, whatever its spelling starts with.
    if real_path(parent) != parent or not any(parent.is_relative_to(root) for root in roots):
        raise NotAJournal(f"{temporary} is outside the paths named")
    return parent / match.group("name")


def _set_aside(journal: Path) -> str:
    """Rename a journal amplint will not act on out of the journals' names, so
    that no later run reads it again; what was done, in words."""
    aside = journal.with_name(journal.name + ".rejected")
    try:
        os.replace(journal, aside)
    except OSError:
        return "left alone"
    return f"renamed to {aside.name}, and nothing it names touched"


def _is_regular(path: str) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def journal_directories(paths: Sequence[Path]) -> list[Path]:
    """Where a run naming `paths` keeps the journal of its change, and where
    the next run naming them looks for one: each directory named, or the
    directory of each file named."""
    directories = []
    for path in paths or (Path("."),):
        directory = path if path.is_dir() else path.parent
        if directory not in directories:
            directories.append(directory)
    return directories


def journals_in(directory: Path) -> list[Path]:
    """The journals in `directory` that killed runs left (a live run's are its own)."""
    try:
        names = [entry.name for entry in os.scandir(directory)]
    except OSError:
        return []
    found = []
    for name in sorted(names):
        match = _JOURNAL_NAME.fullmatch(name)
        if match is not None and process_gone(int(match.group("pid"))):
            found.append(directory / name)
    return found


def _give_ownership(temporary: str, original: os.stat_result) -> None:
    """Make the new file's owner and group the original's: root (or a user
    changing only the group to one of theirs) may; anyone else is refused."""
    made = os.stat(temporary)
    if (made.st_uid, made.st_gid) == (original.st_uid, original.st_gid):
        return
    try:
        os.chown(temporary, original.st_uid, original.st_gid)
    except (PermissionError, AttributeError):  # AttributeError: no chown (Windows)
        raise SourceError(
            f"the file belongs to user {original.st_uid}, group {original.st_gid}, which "
            "amplint may not give its rewrite; not written"
        ) from None
    # chown clears the set-user-ID and set-group-ID bits: put them back.
    os.chmod(temporary, original.st_mode & 0o7777)


def _keep_extended_attributes(original: Path, temporary: str) -> None:
    """Give the new file the original's extended attributes (a macOS quarantine
    flag, an SELinux label, a user's tags): renaming a new file over the old
    one would drop them.  One that cannot be set is a refusal, not a loss."""
    if not hasattr(os, "listxattr"):
        return  # not Linux: nothing this can read
    try:
        names = os.listxattr(original)
    except OSError:
        return  # a file system without them
    for name in names:
        try:
            value = os.getxattr(original, name)
        except OSError:
            continue  # gone meanwhile, or unreadable: nothing to keep
        try:
            if os.getxattr(temporary, name) == value:
                continue  # given by the directory already (a default ACL, a label)
        except OSError:
            pass  # not there yet
        try:
            os.setxattr(temporary, name, value)
        except OSError as error:
            raise SourceError(
                f"its extended attribute {name} could not be kept "
                f"({error.strerror or error}); not written"
            ) from None


def writable_target(path: Path, named: Sequence[Path], through_links: bool = False) -> Path:
    """Where writing `path` goes: the file itself, or the file a link names.

    A link is written through, so it stays a link, but only to a file inside
    the paths the user named (a named link stands for itself there, not for
    its target): a fix never reaches outside them unless `through_links`.
    """
    if not path.is_symlink():
        return path
    real = real_path(path)
    if through_links:
        return real
    areas = [real_path(p.parent) / p.name if p.is_symlink() else real_path(p) for p in named]
    if not any(real == area or area in real.parents for area in areas):
        raise SourceError(
            f"a link to {real}, outside the paths named; not written "
            "(--write-through-links writes it)"
        )
    return real


def os_reason(error: Exception) -> str:
    """Why a write failed, in one line: "No space left on device", not the
    errno and the temporary file's name."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error)
