"""Many files: each read once, most ruled out by their text, others answered
from the cache, and the rest analysed in worker processes when there is enough
of it to pay for starting them.  Files are read largest first, and the first
analyses start while the rest are still being read.  Reports come back in
discovery order, the same whichever way the work was done."""

from __future__ import annotations

import importlib
import itertools
import os
import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, NamedTuple, Sequence

from amplint.config import ConfigError, Settings
from amplint.files import (
    Discovered,
    StaleTemporary,
    SourceError,
    SourceFile,
    discover,
    excluded,
    read_source,
    real_path,
    shown_path,
)
from amplint.diagnostics import Applicability, FileReport, is_applicable
from amplint.project import ProjectRoot, ProjectRoots, find_project_root
from amplint.settings import FileSettings
from amplint.triggers import ALL_CODES, text_may_fire
from amplint.workers import Lost, Workers

if TYPE_CHECKING:  # the run is handed its cache; a worker never loads it
    from amplint.cache import ResultCache

# Below this much source found, starting processes costs more than it saves:
# libcst reads about half a megabyte a second, a forked worker starts in ~20 ms.
PARALLEL_MIN_CHARS = 256 * 1024

# Whether files are analysed in forked workers (amplint/workers.py), where
# there is fork: a crash in native code costs one file, not the run.
ISOLATED = hasattr(os, "fork")


def default_jobs() -> int:
    """The processes this one may run on (CPU affinity and quotas aside)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


class Mode(NamedTuple):
    """What each file is analysed for, in analyse_source's argument order."""

    fixing: bool
    unsafe: bool | None  # None: as each file's configuration says (own_mode)
    previews: bool


# Told (files analysed, files to analyse) as the work goes on.
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class _Work:
    """One file that needs analysis, and where its report goes: all a worker
    needs to analyse it, since the first may be forked before the run knows
    its settings (amplint/launch.py)."""

    index: int
    source: SourceFile
    codes: frozenset[str]
    cache_key: str | None
    project_root: ProjectRoot
    settings: Settings
    mode: Mode


def run(
    paths: Sequence[Path],
    settings: Settings,
    *,
    fixing: bool = False,
    unsafe: bool | None = False,
    previews: bool = False,
    jobs: int = 1,
    cache: ResultCache | None = None,
    progress: Progress | None = None,
    force_exclude: bool = False,
    stale: list[Path] | None = None,
) -> list[FileReport]:
    """A report for every file found under `paths` (or for each path that is
    not there), in discovery order.  `unsafe` None: each file's configuration
    says (`unsafe-fixes`).  `stale` is told the temporary files of killed runs
    that discovery found on the way."""
    reports: list[FileReport] = []
    found_files: list[tuple[int, Discovered]] = []
    project_root = ProjectRoots(paths)
    mode = Mode(fixing, unsafe, previews)
    settings_of = FileSettings(settings)
    file_settings: dict[int, Settings] = {}  # by report index
    for found in discover(
        paths,
        settings.all_excludes,
        settings.root,
        force_exclude=force_exclude,
        respect_gitignore=settings.respect_gitignore,
    ):
        if isinstance(found, StaleTemporary):
            if stale is not None:
                stale.append(found.path)
            continue
        if not isinstance(found, Discovered):
            path, message = found
            reports.append(FileReport(path, error=message))
            continue
        try:
            own = settings_of(found.path)
        except ConfigError as error:
            reports.append(FileReport(found.path, error=f"its configuration: {error}"))
            continue
        if excluded_by_its_configuration(found, own, settings):
            continue
        reports.append(FileReport(found.path))
        found_files.append((len(reports) - 1, found))
        file_settings[len(reports) - 1] = own
    # Largest first: the longest analysis starts at once instead of last.  The
    # stat also keys the cache's index of files ruled out (taken before the
    # file is read: an edit in between is seen next time).
    stats = {index: _stat(found.path) for index, found in found_files}
    sizes = {index: stat.st_size if stat else 0 for index, stat in stats.items()}
    found_files.sort(key=lambda pair: sizes[pair[0]], reverse=True)
    done = 0

    def finished() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, len(found_files))

    def work() -> Iterator[_Work]:
        """The files left to analyse, read and ruled on one at a time while
        the first are analysed."""
        for index, found in found_files:
            report = reports[index]
            try:
                item = _prepare(
                    report, index, stats[index], file_settings[index], mode, cache, project_root
                )
            except SourceError as error:
                report.error = str(error)
                item = None
            except Exception as error:  # a bug must not end the run for the other files
                report.error = f"internal error: {describe(error)}"
                item = None
            if item is None:
                finished()
            else:
                yield item

    workers = jobs if sum(sizes.values()) >= PARALLEL_MIN_CHARS else 1
    for item, report in _analyse(work(), workers):
        finished()
        report.source = item.source
        reports[item.index] = report
        if cache is not None and report.found is not None:
            cache.put(item.cache_key, report.found, report.depends_on)
    if cache is not None:
        cache.save_ruled_out()
    return hold_partial_changes(reports, fixing)


def excluded_by_its_configuration(found: Discovered, own: Settings, run: Settings) -> bool:
    """Whether the closest configuration to a file found (not named) excludes
    it: discovery knew only the run's excludes; ruff applies the closest one's."""
    return (
        own is not run and not found.explicit and excluded(found.path, own.all_excludes, own.root)
    )


def _prepare(
    report: FileReport,
    index: int,
    stat: os.stat_result | None,
    settings: Settings,
    mode: Mode,
    cache: ResultCache | None,
    project_root: ProjectRoots,
) -> _Work | None:
    """Read the report's file and answer it from its text or the cache where
    they can; else the work of analysing it.  `stat` was taken before the read."""
    mode = own_mode(mode, settings)
    codes = settings.enabled_codes(ALL_CODES, report.path)
    if cache is None:
        stat = None
    if stat is not None and cache.ruled_out(report.path, stat, codes):
        return None  # unchanged since its text ruled out every rule: not even read
    source = read_source(report.path)  # after the stat: an edit between is seen next time
    if not text_may_fire(source.code, codes):
        if stat is not None:
            cache.note_ruled_out(report.path, stat, codes)
        return None
    if stat is not None:
        cache.forget_ruled_out(report.path)
    report.source = source
    root = project_root(report.path)
    key = cache.key(source, codes, settings, root) if cache is not None else None
    cached = cache.get(key, source) if cache is not None else None
    # The cache holds findings, not fixes: a run that needs the fixes recomputes them.
    needs_fixes = (mode.fixing and any(is_applicable(d, mode.unsafe) for d in cached or ())) or (
        mode.previews and any(d.fix is not None for d in cached or ())
    )
    if cached is not None and not needs_fixes:
        report.diagnostics = cached
        return None
    return _Work(index, source, codes, key, root, settings, mode)


def _stat(path: Path) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None  # read_source says why


def own_mode(mode: Mode, settings: Settings) -> Mode:
    """`mode` for a file with `settings`: its `unsafe-fixes` where the run
    left unsafe fixes to each file's configuration (None)."""
    return mode if mode.unsafe is not None else mode._replace(unsafe=settings.unsafe_fixes)


def run_source(source: SourceFile, settings: Settings, mode: Mode) -> FileReport:
    """The report on one source that was not read from disk (standard input)."""
    mode = own_mode(mode, settings)
    codes = settings.enabled_codes(ALL_CODES, source.path)
    if not text_may_fire(source.code, codes):
        report = FileReport(source.path)
    else:
        item = _Work(0, source, codes, None, find_project_root(source.path), settings, mode)
        [(_, report)] = _analyse([item], jobs=1)
    report.source = source
    return hold_partial_changes([report], mode.fixing)[0]


def hold_partial_changes(reports: list[FileReport], fixing: bool) -> list[FileReport]:
    """Withdraw each fix whose partners (the other files its change rewrites,
    such as the modules of one apex.amp migration) are not all fixed in this
    run too, saying why on its findings: half such a change runs neither the
    old way nor the new."""
    by_path = {_key(report.path): report for report in reports}
    # Every file of such a change lists all the others, so one pass over the
    # reports as analysed finds each withdrawal's first cause.
    reasons = {}
    for index, report in enumerate(reports):
        partners = sorted(
            {
                partner
                for diagnostic in [*report.applied, *report.diagnostics]
                if diagnostic.fix is not None
                for partner in diagnostic.fix.partners
            }
        )
        unnamed = [shown_path(partner) for partner in partners if partner not in by_path]
        if unnamed:
            reasons[index] = (
                f"the same change rewrites {', '.join(unnamed)}, "
                f"{'which is' if len(unnamed) == 1 else 'which are'} not among the paths named"
            )
            continue
        for partner in partners:
            reason = _not_ready(partner, by_path[partner], fixing)
            if reason is not None:
                reasons[index] = reason
                break
    for index, reason in reasons.items():
        _withdraw(reports[index], reason)
    return reports


def _key(path: Path) -> str:
    return str(real_path(path))


def _not_ready(partner: str, report: FileReport, fixing: bool) -> str | None:
    """Why the partner's part of the change is not carried out in this run."""
    shown = shown_path(partner)
    if report.error is not None:
        return f"the same change rewrites {shown}, which has an error"
    if fixing and any(d.fix is not None and d.fix.partners for d in report.applied):
        return None
    waiting = [d for d in report.diagnostics if d.fix is not None and d.fix.partners]
    if waiting and not fixing:
        return None
    if waiting and any(d.fix.applicability is Applicability.UNSAFE for d in waiting):
        return f"the same change rewrites {shown}, whose part needs --unsafe-fixes"
    blocked = next((d for d in report.diagnostics if "not fixed: " in d.message), None)
    why = blocked.message.split("not fixed: ", 1)[1].rstrip(")") if blocked else "no fix"
    return f"the same change rewrites {shown}, which is not fixed: {why}"


def _withdraw(report: FileReport, reason: str) -> None:
    """Take back `report`'s fix of a change whose partners are not all fixed."""
    findings = report.found if report.applied else report.diagnostics
    if report.applied:
        report.fixed_text, report.applied = None, []
    report.diagnostics = [
        (
            replace(d, message=f"{d.message} (not fixed: {reason})", fix=None)
            if d.fix is not None and d.fix.partners
            else d
        )
        for d in findings or []
    ]


def _analyse(work: Iterable[_Work], jobs: int) -> Iterator[tuple[_Work, FileReport]]:
    """Each item of `work` with its report, in the order they finish, in up to
    `jobs` workers; `work` is drawn as they need it."""
    work = iter(work)
    first = next(work, None)
    if first is None:
        return
    work = itertools.chain([first], work)
    if not ISOLATED:
        load_engine()
        items = list(work)
        yield from _in_pool(items, min(jobs, len(items)))
        return

    # Each file's own alarm stops Python code at its file-time-limit; the
    # watchdog, a little later, stops native code (libcst's parser) that the
    # alarm cannot.  The limit is the file's: a closer configuration may set it.
    def deadline(item: _Work) -> float:
        return item.settings.file_time_limit * 1.1 + WATCHDOG_GRACE_S

    drawn: list[_Work] = []  # a result names its item by the order it was drawn in

    def recorded(items: Iterator[_Work]) -> Iterator[_Work]:
        for item in items:
            drawn.append(item)
            yield item

    # The engine is loaded once, before the run forks its own workers, rather
    # than in each: a run with nothing to analyse never loads libcst and the
    # rules at all, and one whose worker was forked as the command started
    # (amplint/launch.py) leaves the loading to that worker.
    workers = Workers(recorded(work), analyse_work, jobs, deadline, before_fork=load_engine)
    for index, result in workers.results():
        item = drawn[index]
        if isinstance(result, Lost):
            yield item, FileReport(item.source.path, error=_lost_message(result, item.settings))
        else:
            yield item, result


# How long past its file-time-limit the watchdog lets a file's analysis run.
WATCHDOG_GRACE_S = 5.0


def _lost_message(lost: Lost, settings: Settings) -> str:
    if lost.overdue:
        return _over_budget_message(settings)
    return f"internal error: the process analysing this file {lost.why}"


def _over_budget_message(settings: Settings) -> str:
    return f"not analysed: took longer than file-time-limit {settings.file_time_limit:g} s"


def _in_pool(work: list[_Work], workers: int) -> Iterator[tuple[_Work, FileReport]]:
    """Without fork (Windows): in this process, or in a pool of `workers`;
    a worker's death (a crash in native code) takes the pool with it, and
    each file left then runs alone, so that only the culprit fails."""
    if workers < 2:
        for item in work:
            yield item, analyse_work(item)
        return
    unfinished = yield from _pool(work, workers)
    for item in unfinished:
        alone = yield from _pool([item], 1)
        for lost in alone:
            yield lost, FileReport(
                lost.source.path, error="internal error: the process analysing this file died"
            )


def _pool(work: list[_Work], workers: int) -> Iterator[tuple[_Work, FileReport]]:
    """Analyse `work` in a pool; returns the items whose results were lost."""
    # Imported here: only a run without fork uses the pool, and the import
    # (multiprocessing, sockets, logging) is a twentieth of a one-file check.
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    finished: set[int] = set()
    try:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = {pool.submit(analyse_work, item): item for item in work}
            for future in as_completed(futures):
                item = futures[future]
                yield item, future.result()
                finished.add(item.index)
    except BrokenProcessPool:
        pass
    return [item for item in work if item.index not in finished]


def load_engine() -> None:
    """Import libcst and the engine (what analysing a file needs), once."""
    importlib.import_module("amplint.engine")


def analyse_work(item: _Work) -> FileReport:
    """The report on one item, as a worker sends it back."""
    source, settings = item.source, item.settings
    try:
        # libcst and the rules load before the clock starts: a file's budget
        # is its own analysis, not the first file's import of them.
        load_engine()
        with _time_limit(settings.file_time_limit):
            report = analyse_source(
                source, item.codes, settings, *item.mode, project_root=item.project_root
            )
    except _OverBudget:
        return FileReport(source.path, error=_over_budget_message(settings))
    except Exception as error:  # a bug must not end the run for the other files
        return FileReport(source.path, error=f"internal error: {describe(error)}")
    report.source = None  # the parent has it: do not send the text back
    return report


class _OverBudget(BaseException):
    """Raised into a file's analysis when its time is up (a BaseException: no
    `except Exception` of ours or libcst's swallows it)."""


@contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Stop the analysis of one file after `seconds`, where the platform has
    an interval timer and this is the main thread (worker and child processes
    are); native code (libcst's parser) is stopped when it returns."""
    if (
        not hasattr(signal, "setitimer")
        or threading.current_thread() is not threading.main_thread()
    ):
        yield
        return

    def expire(signum, frame):
        raise _OverBudget

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def analyse_source(*args, **kwargs) -> FileReport:
    """engine.analyse_source, imported when first needed: libcst and the rules
    load only when a file passed its text test."""
    from amplint.engine import analyse_source as analyse

    return analyse(*args, **kwargs)


def describe(error: BaseException, limit: int = 300) -> str:
    """`error` as one line of at most `limit` characters.  Its text can be
    anything: the repr of a syntax tree nested too deep to print (that raises
    RecursionError again), or many lines."""
    try:
        text = f"{type(error).__name__}: {error}"
    except Exception:  # RecursionError among them
        text = f"{type(error).__name__} (its message could not be formatted)"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
