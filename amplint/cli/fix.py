"""`amplint fix`: show or write the fixes."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import click

from amplint.cli import common
from amplint.cli.common import (
    EXIT_CLEAN,
    EXIT_ERROR,
    EXIT_FINDINGS,
    MACHINE_FORMATS,
    Output,
    config_paths,
    machine_report,
    noun,
    os_reason,
    output_format_option,
    pop_run_options,
    reads_stdin,
    row_lines,
    run_paths,
    say_error,
    settings_for,
    stdin_source,
    unsafe_chosen,
    unsafe_note,
    unsafe_option,
    with_output,
    with_selection,
)
from amplint.config import Settings
from amplint.diagnostics import FileReport
from amplint.files import SourceError, real_path
from amplint.report import Finding
from amplint.report.text import (
    applied_lines,
    styled_diff,
    text_row,
    unified_diff,
)
from amplint.runner import Mode, run_source
from amplint.terminal import color
from amplint.writes import Change, PreparedWrite, journal_directories, writable_target


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@with_selection
@click.option("--apply", "apply_", is_flag=True, help="Write the fixes instead of showing a diff.")
@unsafe_option(
    "Also apply fixes that may change numerics (default: the configuration's unsafe-fixes)."
)
@click.option(
    "--write-through-links",
    is_flag=True,
    help="With --apply: write through a symbolic link to a file outside the paths named "
    "(by default such a link is an error and nothing is written through it).",
)
@output_format_option(
    "How the findings left are reported, as for check; json, github and sarif print "
    "a document of them instead of the diff."
)
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when findings or fixes are left.")
@with_output
def fix(
    paths, apply_, unsafe_fixes, write_through_links, output_format, exit_zero, **options
) -> None:
    """Show (or with --apply, write) the fixes for PATHS.  With `-`, the fixed
    standard input goes to standard output and the findings left to stderr."""
    output = Output(options)
    run_options = pop_run_options(options)
    stdin_filename = run_options.pop("stdin_filename")
    if reads_stdin(paths, stdin_filename):
        fix_stdin(paths, stdin_filename, options, unsafe_fixes)  # exits
    settings = settings_for(config_paths(paths, stdin_filename), options)
    unsafe_fixes = unsafe_chosen(unsafe_fixes, settings)
    done = carry_out(
        paths,
        settings,
        run_options,
        write=apply_,
        unsafe=unsafe_fixes,
        write_through_links=write_through_links,
    )
    document = output_format in MACHINE_FORMATS
    for report in done.changed:
        if document:
            continue
        if apply_:
            output.report_lines(applied_lines(report.path, report.applied))
        else:
            output.report(fixed_diff(report), nl=False)
    if document:
        output.report(machine_report(done.remaining, done.errors, output_format))
    elif apply_:
        output.report_lines(row_lines(done.remaining, output_format))
    else:  # the diff alone on stdout, so that it applies as a patch
        for line in row_lines(done.remaining, output_format):
            output.summary(line, err=True)
    files = "file" if len(done.changed) == 1 else "files"
    more = unsafe_note(done.remaining, unsafe_fixes)
    if apply_:
        output.summary(
            f"Fixed {done.fixed} {noun(done.fixed)} in {len(done.changed)} {files}; "
            f"{len(done.remaining)} remaining.{more}",
            err=document,  # a document on stdout stays one document
        )
    else:
        output.summary(
            f"Would fix {done.fixed} {noun(done.fixed)} in {len(done.changed)} {files}; "
            f"{len(done.remaining)} would remain.{more}",
            err=True,
        )
    if done.errors:
        sys.exit(EXIT_ERROR)
    if exit_zero:
        sys.exit(EXIT_CLEAN)
    if apply_:
        sys.exit(EXIT_FINDINGS if done.remaining else EXIT_CLEAN)
    sys.exit(EXIT_FINDINGS if done.changed else EXIT_CLEAN)


@dataclass
class Done:
    """What one run of the fixes did, for a command to tell."""

    changed: list[FileReport] = field(default_factory=list)  # written, or to be
    remaining: list[Finding] = field(default_factory=list)
    errors: list[tuple[Path, str]] = field(default_factory=list)

    @property
    def fixed(self) -> int:
        return sum(len(report.applied) for report in self.changed)


def fixed_diff(report: FileReport) -> str:
    """The change a fix made to `report`'s file, as a (coloured) unified diff."""
    return styled_diff(unified_diff(report.path, report.source.text, report.fixed_text))


def carry_out(
    paths: tuple[Path, ...],
    settings: Settings,
    run_options: dict,
    *,
    write: bool,
    unsafe: bool,
    write_through_links: bool = False,
) -> Done:
    """Fix the files under `paths`, writing them when `write`; each error is
    said on stderr as it comes."""
    done = Done()
    reports = run_paths(paths, settings, run_options, writes=write, fixing=True, unsafe=unsafe)
    change = Change(journal_directories(paths)[0])
    prepared: list[tuple[FileReport, PreparedWrite]] = []
    for report in reports:
        if report.error is not None:
            say_error(f"{report.path}: {report.error}")
            done.errors.append((report.path, report.error))
        done.remaining += [Finding(report.path, d, report.source) for d in report.diagnostics]
        if report.fixed_text is None:
            continue
        if not write:
            done.changed.append(report)
            continue
        try:
            target = writable_target(report.path, paths or (Path("."),), write_through_links)
            prepared.append(
                (report, change.prepare(replace(report.source, path=target), report.fixed_text))
            )
        except (SourceError, OSError) as error:
            _not_written(done, report, f"cannot write: {os_reason(error)}")
        except BaseException:
            change.abandon()
            raise
    if write:
        _commit(done, change, prepared)
    return done


def _commit(done: Done, change: Change, prepared: list[tuple[FileReport, PreparedWrite]]) -> None:
    """Rename every prepared rewrite over its file, as one change: a file
    whose partner (another module of the same migration) could not be written
    is not written either (writes.Change)."""
    failed = {real_path(path) for path, _ in done.errors}
    kept = []
    for report, write in prepared:
        partners = {
            real_path(Path(partner))
            for diagnostic in report.applied
            if diagnostic.fix is not None
            for partner in diagnostic.fix.partners
        }
        lost = sorted(str(path) for path in partners & failed)
        if lost:
            _not_written(done, report, f"not written: the same change rewrites {', '.join(lost)}")
        else:
            kept.append((report, write))
    try:
        unwritten = dict(change.commit([write for _, write in kept]))
    except OSError as error:  # the journal could not be written: nothing was
        for report, _ in kept:
            _not_written(done, report, f"cannot write: {os_reason(error)}")
        return
    for report, write in kept:
        if write.path in unwritten:
            _not_written(done, report, f"cannot write: {unwritten[write.path]}")
        else:
            done.changed.append(report)


def _not_written(done: Done, report: FileReport, why: str) -> None:
    """Not counted as fixed: its findings are all still there."""
    message = f"{why}; {len(report.applied)} {noun(len(report.applied))} not fixed"
    say_error(f"{report.path}: {message}")
    done.errors.append((report.path, message))
    done.remaining += [Finding(report.path, d, report.source) for d in report.applied]


def _write_stdout(data: bytes) -> None:
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def fix_stdin(
    paths: tuple[Path, ...], stdin_filename: Path | None, options: dict, unsafe: bool | None
) -> None:
    """Write the fixed source to stdout, or else the input exactly as it came:
    an editor replaces its buffer with what it reads back, so whatever fails
    (bad input, a configuration error, a crash, an interrupt), stdout holds
    either a verified rewrite or the bytes read, never nothing."""
    raw = sys.stdin.buffer.read()
    common.stdin_taken = True  # what follows answers for stdout itself
    try:
        settings = settings_for(config_paths(paths, stdin_filename), options)
        source = stdin_source(stdin_filename, raw)
        report = run_source(source, settings, Mode(True, unsafe_chosen(unsafe, settings), False))
    except BaseException:  # SystemExit and KeyboardInterrupt too
        _write_stdout(raw)
        raise
    fixed = report.fixed_text
    _write_stdout(fixed.encode(source.encoding) if fixed is not None else raw)
    if report.error is not None:
        say_error(f"{report.path}: {report.error}")
    for diagnostic in report.diagnostics:
        click.echo(text_row(Finding(report.path, diagnostic)), err=True, color=color())
    if report.error is not None:
        sys.exit(EXIT_ERROR)
    sys.exit(EXIT_FINDINGS if report.diagnostics else EXIT_CLEAN)
