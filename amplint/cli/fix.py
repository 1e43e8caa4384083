"""`amplint fix`: show or write the fixes."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import click

from amplint import api
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
    output_format_option,
    pop_run_options,
    reads_stdin,
    row_lines,
    fix_run,
    say_error,
    settings_for,
    stdin_source,
    unsafe_note,
    unsafe_option,
    with_output,
    with_selection,
)
from amplint.config import Settings
from amplint.report import Finding
from amplint.report.text import (
    applied_lines,
    styled_diff,
    text_row,
    unified_diff,
)
from amplint.terminal import color


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
    done = carry_out(
        paths,
        settings,
        run_options,
        write=apply_,
        unsafe=unsafe_fixes,
        write_through_links=write_through_links,
    )
    document = output_format in MACHINE_FORMATS
    for changed in done.changed:
        if document:
            continue
        if apply_:
            output.report_lines(applied_lines(changed.path, changed.fixed))
        else:
            output.report(fixed_diff(changed), nl=False)
    if document:
        output.report(machine_report(done.remaining, done.errors, output_format))
    elif apply_:
        output.report_lines(row_lines(done.remaining, output_format))
    else:  # the diff alone on stdout, so that it applies as a patch
        for line in row_lines(done.remaining, output_format):
            output.summary(line, err=True)
    files = "file" if len(done.changed) == 1 else "files"
    more = unsafe_note(done.remaining, unsafe_fixes is True)
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

    changed: list[api.FixedFile] = field(default_factory=list)  # written, or to be
    remaining: list[Finding] = field(default_factory=list)
    errors: list[tuple[Path, str]] = field(default_factory=list)

    @property
    def fixed(self) -> int:
        return sum(len(changed.fixed) for changed in self.changed)


def fixed_diff(changed: api.FixedFile) -> str:
    """The change a fix made to a file, as a (coloured) unified diff."""
    return styled_diff(unified_diff(changed.path, changed.source.text, changed.fixed_text))


def carry_out(
    paths: tuple[Path, ...],
    settings: Settings,
    run_options: dict,
    *,
    write: bool,
    unsafe: bool | None,
    write_through_links: bool = False,
) -> Done:
    """Fix the files under `paths` with the API, writing them when `write`;
    each error is said on stderr."""
    done = Done()
    results = fix_run(
        paths,
        settings,
        run_options,
        write=write,
        unsafe=unsafe,
        write_through_links=write_through_links,
    )
    for result in results:
        if result.error is not None:
            say_error(f"{result.path}: {result.error}")
            done.errors.append((result.path, result.error))
        done.remaining += [Finding(result.path, found, result.source) for found in result.remaining]
        if result.fixed_text is not None:
            done.changed.append(result)
    return done


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
        fixed = api.fix_file(source, settings, unsafe=unsafe)
    except BaseException:  # SystemExit and KeyboardInterrupt too
        _write_stdout(raw)
        raise
    new_text = fixed.fixed_text
    _write_stdout(new_text.encode(source.encoding) if new_text is not None else raw)
    if fixed.error is not None:
        say_error(f"{fixed.path}: {fixed.error}")
    for found in fixed.remaining:
        click.echo(text_row(Finding(fixed.path, found)), err=True, color=color())
    if fixed.error is not None:
        sys.exit(EXIT_ERROR)
    sys.exit(EXIT_FINDINGS if fixed.remaining else EXIT_CLEAN)
