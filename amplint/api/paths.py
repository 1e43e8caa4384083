"""Files and directories checked and fixed as `check` and `fix` do: the
closest configuration to each file, the cache, the worker processes, and the
fixes written as one change."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Callable

from amplint.api.records import FileResult, FixedFile, FixRun, Run, finding_of
from amplint.cache import CACHE_DIR_NAME, ResultCache
from amplint.config import Settings
from amplint.diagnostics import FileReport
from amplint.files import SourceError, real_path, skipped_unread
from amplint.settings import PathsLike, StrPath, as_paths, load_settings
from amplint.writes import (
    Change,
    PreparedWrite,
    complete_journal,
    journal_directories,
    journals_in,
    os_reason,
    writable_target,
)

# Told (files analysed, files to analyse) as the work goes on.
Progress = Callable[[int, int], None]


def check_paths(
    paths: PathsLike,
    settings: Settings | None = None,
    *,
    edits: bool = False,
    jobs: int | None = None,
    cache: StrPath | bool = True,
    force_exclude: bool = False,
    progress: Progress | None = None,
) -> Run:
    """The findings in every Python file and notebook under `paths` (`.`
    where none), as `check` reports them.  `edits`: each fix's edits too (it
    costs a rewrite per fixable finding).  `jobs`: worker processes (default:
    the CPUs this process may use).  `cache`: True for the configuration's
    cache directory, a directory, or False for none.  Paths are `str` or
    `os.PathLike`; a single one may stand for the sequence."""
    paths = tuple(as_paths(paths)) or (Path("."),)
    settings = settings if settings is not None else load_settings(paths)
    reports, warnings = _run(
        paths, settings, False, jobs, cache, force_exclude, progress, previews=edits
    )
    return Run(tuple(_file_result(report) for report in reports), warnings)


def fix_paths(
    paths: PathsLike,
    settings: Settings | None = None,
    *,
    write: bool = False,
    unsafe: bool | None = None,
    write_through_links: bool = False,
    jobs: int | None = None,
    cache: StrPath | bool = True,
    force_exclude: bool = False,
    progress: Progress | None = None,
) -> FixRun:
    """The fixes for every file under `paths`, as `fix` makes them: the unsafe
    ones too where `unsafe` (None: where a file's configuration says
    `unsafe-fixes`); with `write`, written as one change (each file renamed
    over, a file whose partner in the same change could not be written left as
    it was).  A link is written through only to a file inside `paths`, unless
    `write_through_links`."""
    paths = tuple(as_paths(paths)) or (Path("."),)
    settings = settings if settings is not None else load_settings(paths)
    reports, warnings = _run(
        paths,
        settings,
        write,
        jobs,
        cache,
        force_exclude,
        progress,
        fixing=True,
        unsafe=unsafe,
    )
    if not write:
        return FixRun(tuple(_fixed_file(report) for report in reports), warnings)
    return FixRun(_written(paths, reports, write_through_links), warnings)


def _run(
    paths: tuple[Path, ...],
    settings: Settings,
    writes: bool,
    jobs: int | None,
    cache: Path | bool,
    force_exclude: bool,
    progress: Progress | None,
    **mode,
) -> tuple[list[FileReport], tuple[str, ...]]:
    """The runner's reports on `paths`, sorted by path, and the warnings the
    run is worth."""
    from amplint.runner import default_jobs, run

    if jobs is not None and jobs < 1:
        raise ValueError(f"jobs must be at least 1, not {jobs}")
    result_cache = None
    if cache is not False:
        result_cache = ResultCache(
            settings.root / CACHE_DIR_NAME if cache is True else Path(os.fspath(cache))
        )
    warnings = _interrupted_changes(paths, writes)
    stale: list[Path] = []
    reports = run(
        paths,
        settings,
        jobs=jobs or default_jobs(),
        cache=result_cache,
        progress=progress,
        force_exclude=force_exclude,
        stale=stale,
        **mode,
    )
    # Deleted only by the journal that recorded it, which a run that writes
    # finished before reading anything: what is still here, no journal named.
    for path in stale:
        if writes:
            warnings.append(
                f"{path}: named as amplint's temporary files, but no interrupted "
                "`amplint fix` recorded it; left alone"
            )
        else:
            warnings.append(
                f"{path}: named as the temporary files of an interrupted `amplint fix "
                "--apply`; the next `fix --apply` of these paths removes it if that run "
                "recorded it"
            )
    # As ruff does: a directory that held nothing to check is worth a word
    # (a typo, or everything excluded), not a silent "All checks passed".
    for path in paths:
        if path.is_dir() and not any(
            report.path == path or path in report.path.parents for report in reports
        ):
            warnings.append(f"{path}: no Python file or notebook to check here")
    for path, why in sorted(skipped_unread.items()):
        warnings.append(f"{path}: not read ({why})")
    skipped_unread.clear()
    if result_cache is not None and result_cache.write_error is not None:
        warnings.append(f"{result_cache.write_error}; --no-cache skips it")
    # By path, as ruff shows them, whatever order the paths were named in.
    return sorted(reports, key=lambda report: report.path.as_posix()), tuple(warnings)


def _interrupted_changes(paths: tuple[Path, ...], writes: bool) -> list[str]:
    """A multi-file change a killed `fix --apply` left half renamed: a run that
    writes finishes it before reading anything, a read-only one says so."""
    said = []
    directories = journal_directories(paths)
    for directory in directories:
        for journal in journals_in(directory):
            if not writes:
                said.append(
                    f"{journal}: an interrupted `amplint fix --apply` left a change half "
                    "written; the next `fix --apply` of these paths finishes it"
                )
                continue
            said += complete_journal(journal, directories)
            if not journal.exists():
                said.append(f"{journal}: finished the change an interrupted `amplint fix` began")
    return said


def _file_result(report: FileReport) -> FileResult:
    return FileResult(
        report.path,
        tuple(
            finding_of(diagnostic, report.source, report.previews.get(diagnostic))
            for diagnostic in report.diagnostics
        ),
        report.error,
        report.source,
    )


def _fixed_file(report: FileReport, error: str | None = None, written: bool = True) -> FixedFile:
    """`report` as a fixing run's record; where its rewrite was not written
    (`written` false, with the `error` saying why), its fixes are findings."""
    fixed = tuple(finding_of(d, report.source, None) for d in report.applied)
    remaining = tuple(finding_of(d, report.source, None) for d in report.diagnostics)
    if not written:
        return FixedFile(report.path, (), remaining + fixed, None, error, report.source)
    return FixedFile(report.path, fixed, remaining, report.fixed_text, report.error, report.source)


def _written(
    paths: tuple[Path, ...], reports: list[FileReport], write_through_links: bool
) -> tuple[FixedFile, ...]:
    """Write every rewrite in `reports` as one change (writes.Change): each
    file's record says what was written, or why not."""
    change = Change(journal_directories(paths)[0])
    prepared: dict[int, PreparedWrite] = {}
    not_written: dict[int, str] = {}
    for index, report in enumerate(reports):
        if report.fixed_text is None:
            continue
        try:
            target = writable_target(report.path, paths, write_through_links)
            prepared[index] = change.prepare(replace(report.source, path=target), report.fixed_text)
        except (SourceError, OSError) as error:
            not_written[index] = f"cannot write: {os_reason(error)}"
        except BaseException:
            change.abandon()
            raise
    # A file whose partner (another module of the same migration) could not
    # be written is not written either.
    failed = {
        real_path(report.path)
        for index, report in enumerate(reports)
        if report.error is not None or index in not_written
    }
    for index in list(prepared):
        partners = {
            real_path(Path(partner))
            for diagnostic in reports[index].applied
            if diagnostic.fix is not None
            for partner in diagnostic.fix.partners
        }
        lost = sorted(str(path) for path in partners & failed)
        if lost:
            del prepared[index]
            not_written[index] = f"not written: the same change rewrites {', '.join(lost)}"
    try:
        unwritten = dict(change.commit(list(prepared.values())))
    except OSError as error:  # the journal could not be written: nothing was
        unwritten = {write.path: os_reason(error) for write in prepared.values()}
    for index, write in prepared.items():
        if write.path in unwritten:
            not_written[index] = f"cannot write: {unwritten[write.path]}"
    results = []
    for index, report in enumerate(reports):
        why = not_written.get(index)
        if why is None:
            results.append(_fixed_file(report))
            continue
        count = len(report.applied)
        message = f"{why}; {count} {'finding' if count == 1 else 'findings'} not fixed"
        if report.error is not None:
            message = f"{report.error}; {message}"
        results.append(_fixed_file(report, message, written=False))
    return tuple(results)
