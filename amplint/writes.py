"""Writing rewrites: each file replaced in one step, and the files of one
change (an apex program migrated whole) all or nothing, even when the run is
killed.

A rewrite is written and synced beside its file (`prepare_write`), then
renamed over it (`commit_writes`); the renames of a multi-file change are
journaled first, and the next run that writes finishes a killed run's journal
(`complete_journal`).  The temporary files are named by files.TEMPORARY_SUFFIX
so that discovery can tell a killed run's from a live one's.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from amplint.files import (
    TEMPORARY_SUFFIX,
    SourceError,
    SourceFile,
    encode_source,
    is_stale_temporary,
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


def write_source_atomic(source: SourceFile, new_text: str) -> None:
    """Replace one file's content in one step (see `prepare_write`)."""
    commit_writes([prepare_write(source, new_text)], source.path.parent)


def prepare_write(source: SourceFile, new_text: str) -> PreparedWrite:
    """Write the new content to a temporary file beside the file, keeping its
    mode, owner, group, extended attributes and encoding, synced to disk;
    `commit_writes` renames it over the file, `abandon_write` drops it.

    Renaming means a reader (or a crash) sees the old file or the new one,
    never half of each.  It makes a new file, so a file with other hard links
    (which would keep the old content) is refused, and so is one whose owner
    or group the new file could not be given.
    """
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
        raise SourceError("changed since amplint read it; not written")
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
    _remove_stale_temporaries(path)
    descriptor, temporary = tempfile.mkstemp(
        prefix=f".{path.name}.{os.getpid()}.", suffix=TEMPORARY_SUFFIX, dir=path.parent
    )
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, status.st_mode & 0o7777)
        _give_ownership(temporary, status)
        _keep_extended_attributes(path, temporary)
    except BaseException:
        abandon_write(temporary)
        raise
    return PreparedWrite(path, temporary, _sha256(old), _sha256(data))


def abandon_write(temporary: str | PreparedWrite) -> None:
    name = temporary.temporary if isinstance(temporary, PreparedWrite) else temporary
    try:
        os.unlink(name)
    except FileNotFoundError:
        pass


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# A multi-file change renames its files one after another: before the first
# rename it writes this journal of every rename, and deletes it after the
# last, so that a run killed in between leaves what the next one needs to
# finish the change (`complete_journal`): no program is left half migrated.
JOURNAL_PREFIX = ".amplint-journal."
_JOURNAL_NAME = re.compile(re.escape(JOURNAL_PREFIX) + r"(?P<pid>[0-9]+)\.[^.]+\.json")


def commit_writes(writes: Sequence[PreparedWrite], journal_directory: Path) -> None:
    """Rename each prepared write over its file: all of them, or (killed on
    the way) a journal that lets the next run rename the rest."""
    if len(writes) == 1:
        os.replace(writes[0].temporary, writes[0].path)
        return
    if not writes:
        return
    record = [
        [str(write.path.resolve()), write.temporary, write.old_digest, write.new_digest]
        for write in writes
    ]
    descriptor, staged = tempfile.mkstemp(
        prefix=f"{JOURNAL_PREFIX}{os.getpid()}.", suffix=".json", dir=journal_directory
    )
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            json.dump({"renames": record}, handle)
            handle.flush()
            os.fsync(handle.fileno())
        _sync_directory(journal_directory)
    except BaseException:
        os.unlink(staged)
        for write in writes:
            abandon_write(write)
        raise
    try:
        for write in writes:
            os.replace(write.temporary, write.path)
    except BaseException:
        # Not killed: an error of ours or the file system's.  What is renamed
        # stays renamed; finish the rest now, as the next run would.
        complete_journal(Path(staged))
        raise
    os.unlink(staged)


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


def complete_journal(journal: Path) -> list[str]:
    """Finish the renames a killed run's journal lists; what happened, in
    words (one line per file that could not be finished)."""
    try:
        renames = json.loads(read_regular(journal))["renames"]
        entries = [
            (Path(target), str(temporary), old, new) for target, temporary, old, new in renames
        ]
    except (OSError, ValueError, KeyError, TypeError):
        # Killed while writing it: it is synced before the first rename, so
        # nothing was renamed, and its files' temporaries are stale ones.
        try:
            os.unlink(journal)
        except OSError:
            pass
        return []
    problems = []
    for target, temporary, old, new in entries:
        try:
            current = _sha256(read_regular(target))
        except OSError:
            current = None
        if current == new:
            abandon_write(temporary)  # renamed before the kill
        elif current == old and os.path.exists(temporary):
            os.replace(temporary, target)
        else:
            problems.append(
                f"{target}: changed since the interrupted `amplint fix` that rewrote the "
                f"files beside it; its rewrite is left in {temporary}"
            )
    os.unlink(journal)
    return problems


def journal_directories(paths: Sequence[Path]) -> list[Path]:
    """Where a run naming `paths` keeps the journal of a multi-file change, and
    where the next run naming them looks for one: each directory named, or the
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


def _remove_stale_temporaries(path: Path) -> None:
    """Delete the temporary files a killed amplint left while writing `path`.
    (Discovery removes them from the directories it walks; this covers files
    named alone, as pre-commit names them.)"""
    try:
        names = [entry.name for entry in os.scandir(path.parent)]
    except OSError:
        return
    for name in names:
        if name.endswith(TEMPORARY_SUFFIX) and is_stale_temporary(name, of_name=path.name):
            try:
                os.unlink(path.parent / name)
            except OSError:
                pass


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


def remove_temporary(path: Path) -> bool:
    """Delete a stale temporary, only if it is still a regular file of a dead run."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode) or not is_stale_temporary(path.name):
            return False
        os.unlink(path)
    except OSError:
        return False
    return True
