"""`amplint fix`: show or write the fixes."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import click

from amplint.cli.common import (
    EXIT_CLEAN,
    EXIT_ERROR,
    EXIT_FINDINGS,
    config_paths,
    noun,
    pop_run_options,
    reads_stdin,
    run_paths,
    say_error,
    settings_for,
    stdin_source,
    with_selection,
)
from amplint.files import (
    SourceError,
    writable_target,
    write_source_atomic,
)
from amplint.report import Finding
from amplint.report.text import (
    applied_lines,
    text_row,
    unified_diff,
)
from amplint.runner import Mode, run_source
from amplint.terminal import color


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@with_selection
@click.option("--apply", "apply_", is_flag=True, help="Write the fixes instead of showing a diff.")
@click.option("--unsafe-fixes", is_flag=True, help="Also apply fixes that may change numerics.")
@click.option(
    "--write-through-links",
    is_flag=True,
    help="With --apply: write through a symbolic link to a file outside the paths named "
    "(by default such a link is an error and nothing is written through it).",
)
def fix(paths, apply_, unsafe_fixes, write_through_links, **options) -> None:
    """Show (or with --apply, write) the fixes for PATHS.  With `-`, the fixed
    standard input goes to standard output and the findings left to stderr."""
    run_options = pop_run_options(options)
    stdin_filename = run_options.pop("stdin_filename")
    if reads_stdin(paths, stdin_filename):
        _fix_stdin(paths, stdin_filename, options, unsafe_fixes)  # exits
    settings = settings_for(config_paths(paths, stdin_filename), options)
    errors, changed_files, fixed, remaining = 0, 0, 0, []
    for report in run_paths(paths, settings, run_options, fixing=True, unsafe=unsafe_fixes):
        if report.error is not None:
            say_error(f"{report.path}: {report.error}")
            errors += 1
        remaining += [Finding(report.path, diagnostic) for diagnostic in report.diagnostics]
        if report.fixed_text is None:
            continue
        if not apply_:
            changed_files += 1
            fixed += len(report.applied)
            click.echo(unified_diff(report.path, report.source.text, report.fixed_text), nl=False)
            continue
        try:
            target = writable_target(report.path, paths or (Path("."),), write_through_links)
            write_source_atomic(replace(report.source, path=target), report.fixed_text)
        except (SourceError, OSError) as error:
            say_error(f"{report.path}: cannot write: {_os_reason(error)}")
            errors += 1
            remaining += [Finding(report.path, d) for d in report.applied]
            continue
        # Counted once written: a file that could not be is not fixed.
        changed_files += 1
        fixed += len(report.applied)
        for line in applied_lines(report.path, report.applied):
            click.echo(line)
    for finding in remaining:
        click.echo(text_row(finding), err=not apply_, color=color())
    files = "file" if changed_files == 1 else "files"
    # As `check` does: say what --unsafe-fixes would add, so a user who ran the
    # safe fix knows the rest is one flag away (after reading what it changes).
    unsafe_left = 0 if unsafe_fixes else sum(1 for finding in remaining if finding.unsafe_fix)
    more = f" {unsafe_left} more fixable with --unsafe-fixes." if unsafe_left else ""
    if apply_:
        click.echo(
            f"Fixed {fixed} {noun(fixed)} in {changed_files} {files}; "
            f"{len(remaining)} remaining.{more}"
        )
    else:
        click.echo(
            f"Would fix {fixed} {noun(fixed)} in {changed_files} {files}; "
            f"{len(remaining)} would remain.{more}",
            err=True,
        )
    if errors:
        sys.exit(EXIT_ERROR)
    if apply_:
        sys.exit(EXIT_FINDINGS if remaining else EXIT_CLEAN)
    sys.exit(EXIT_FINDINGS if changed_files else EXIT_CLEAN)


def _os_reason(error: Exception) -> str:
    """Why a write failed, in one line: "No space left on device", not the
    errno and the temporary file's name."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error)


def _write_stdout(data: bytes) -> None:
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def _fix_stdin(
    paths: tuple[Path, ...], stdin_filename: Path | None, options: dict, unsafe: bool
) -> None:
    """Write the fixed source to stdout, or else the input exactly as it came:
    an editor replaces its buffer with what it reads back, so whatever fails
    (bad input, a configuration error, a crash, an interrupt), stdout holds
    either a verified rewrite or the bytes read, never nothing."""
    raw = sys.stdin.buffer.read()
    try:
        settings = settings_for(config_paths(paths, stdin_filename), options)
        source = stdin_source(stdin_filename, raw)
        report = run_source(source, settings, Mode(True, unsafe, False))
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
