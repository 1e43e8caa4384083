"""`amplint check`: report the findings."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from amplint import api, noqa
from amplint.cli.common import (
    EXIT_CLEAN,
    EXIT_ERROR,
    EXIT_FINDINGS,
    MACHINE_FORMATS,
    STDIN,
    Output,
    check_run,
    config_paths,
    machine_report,
    noun,
    output_format_option,
    pop_run_options,
    reads_stdin,
    row_lines,
    say_error,
    say_warning,
    settings_for,
    settings_lines,
    stdin_source,
    unsafe_note,
    unsafe_option,
    with_output,
    with_selection,
)
from amplint.cli.fix import Done, carry_out, fix_stdin, fixed_diff
from amplint.config import ConfigError, Settings
from amplint.files import Discovered, SourceError, discover
from amplint.report import Finding, findings_in, printable
from amplint.report.text import (
    applied_lines,
    statistics,
    statistics_rows,
    summary,
)
from amplint.runner import excluded_by_its_configuration
from amplint.settings import FileSettings
from amplint.writes import os_reason, write_source_atomic


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@with_selection
@output_format_option(
    "concise: a line per finding; full: with the code and the fix's diff; json; "
    "json-lines: a JSON object a line; github, azure: workflow annotations; pylint: "
    "pylint's parseable lines; sarif: SARIF 2.1.0. `text` is concise."
)
@click.option("--statistics", is_flag=True, help="Count the findings per rule instead.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings.")
@click.option("--fix", "fix_", is_flag=True, help="Write the fixes, then report what is left.")
@click.option(
    "--fix-only",
    is_flag=True,
    help="Write the fixes and report only what was fixed, not the findings left (exit 0).",
)
@unsafe_option("With --fix or --diff: unsafe fixes too (default: the configuration's).")
@click.option(
    "--diff", is_flag=True, help="Print the fixes as a diff, write nothing (exit 1 if any)."
)
@click.option("--show-fixes", is_flag=True, help="With --fix: list what was fixed, per file.")
@click.option(
    "--exit-non-zero-on-fix",
    is_flag=True,
    help="With --fix: exit 1 when a file was fixed, even if no finding is left.",
)
@click.option(
    "--add-noqa",
    is_flag=True,
    help="Write a `# noqa: CODE` comment on each finding's line (merged into one there).",
)
@click.option(
    "--show-settings", is_flag=True, help="Print the settings this run resolves, and exit."
)
@click.option("--show-files", is_flag=True, help="Print the files this run would check, and exit.")
@with_output
def check(
    paths,
    output_format,
    statistics,
    exit_zero,
    fix_,
    fix_only,
    unsafe_fixes,
    diff,
    show_fixes,
    exit_non_zero_on_fix,
    add_noqa,
    show_settings,
    show_files,
    **options,
) -> None:
    """Report AMP findings in PATHS (files or directories, `-` for standard
    input; default: .).  With --fix, write the fixes first, as `fix --apply`."""
    fix_ = fix_ or fix_only
    modes = {
        "--fix": fix_,
        "--diff": diff,
        "--add-noqa": add_noqa,
        "--show-settings": show_settings,
        "--show-files": show_files,
    }
    chosen = [flag for flag, given in modes.items() if given]
    if len(chosen) > 1:
        say_error(f"{chosen[0]} and {chosen[1]} do not go together; give one")
        sys.exit(EXIT_ERROR)
    output = Output(options)
    run_options = pop_run_options(options)
    stdin_filename = run_options.pop("stdin_filename")
    from_stdin = reads_stdin(paths, stdin_filename)
    if from_stdin and fix_:
        fix_stdin(paths, stdin_filename, options, unsafe_fixes)  # exits
    settings = settings_for(config_paths(paths, stdin_filename), options)
    if show_settings:
        # As ruff: for the first path named, where it is a file, what that
        # file gets (the configuration closest to it).
        named = paths[0] if paths and paths[0] != STDIN and paths[0].is_file() else None
        try:
            shown = FileSettings(settings)(named) if named is not None else settings
        except ConfigError as error:
            say_error(str(error))
            sys.exit(EXIT_ERROR)
        output.report_lines(settings_lines(shown, named))
        sys.exit(EXIT_CLEAN)
    if show_files:
        output.report_lines(_files_lines(paths, settings, run_options["force_exclude"]))
        sys.exit(EXIT_CLEAN)
    if diff:
        _diff(paths, settings, run_options, unsafe_fixes, output)  # exits
    if add_noqa:
        _add_noqa(paths, settings, run_options, output)  # exits
    fixed: Done | None = None
    if fix_:
        fixed = carry_out(paths, settings, run_options, write=True, unsafe=unsafe_fixes)
        if fix_only:
            _report_fixed_only(fixed, show_fixes, exit_non_zero_on_fix, output)  # exits
        errors, findings = fixed.errors, fixed.remaining
    else:
        # `full` shows each fix's diff; rdjson hands each fix to reviewdog as
        # suggestions.
        edits = output_format in ("full", "rdjson") and not statistics
        if from_stdin:
            source = stdin_source(stdin_filename, sys.stdin.buffer.read())
            results = [api.check_file(source, settings, edits=edits)]
        else:
            results = check_run(paths, settings, run_options, edits=edits)
        errors = [(result.path, result.error) for result in results if result.error is not None]
        for path, message in errors:
            say_error(f"{path}: {message}")
        findings = findings_in(results)
    if fixed is not None and show_fixes and output_format not in MACHINE_FORMATS:
        for changed in fixed.changed:
            output.report_lines(applied_lines(changed.path, changed.fixed))
    if statistics:
        _report_statistics(findings, output_format, output)
    elif output_format in MACHINE_FORMATS:
        output.report(machine_report(findings, errors, output_format))
    else:
        output.report_lines(row_lines(findings, output_format))
        if errors and not findings:  # "All checks passed" would hide the errors
            files = "file" if len(errors) == 1 else "files"
            output.summary(
                f"No findings; {len(errors)} {files} could not be checked (errors above)."
            )
        elif fixed is not None and fixed.fixed:
            found = fixed.fixed + len(findings)
            output.summary(
                f"Found {found} {noun(found)} ({fixed.fixed} fixed, {len(findings)} remaining)."
                + unsafe_note(findings, unsafe_fixes is True)
            )
        else:
            output.summary(summary(findings))
    if errors:
        sys.exit(EXIT_ERROR)
    if exit_non_zero_on_fix and fixed is not None and fixed.changed:
        sys.exit(EXIT_FINDINGS)
    sys.exit(EXIT_FINDINGS if findings and not exit_zero else EXIT_CLEAN)


def _report_fixed_only(
    done: Done, show_fixes: bool, exit_non_zero_on_fix: bool, output: Output
) -> None:
    """`check --fix-only`, as ruff's: what was fixed, never the findings left;
    exit 0 unless a file could not be checked (or --exit-non-zero-on-fix and
    something was fixed)."""
    if show_fixes:
        for changed in done.changed:
            output.report_lines(applied_lines(changed.path, changed.fixed))
    output.summary(f"Fixed {done.fixed} {noun(done.fixed)}.")
    if done.errors:
        sys.exit(EXIT_ERROR)
    sys.exit(EXIT_FINDINGS if exit_non_zero_on_fix and done.changed else EXIT_CLEAN)


def _diff(
    paths: tuple[Path, ...],
    settings: Settings,
    run_options: dict,
    unsafe: bool | None,
    output: Output,
) -> None:
    """`check --diff`: the fixes as a patch on stdout, as `fix` shows them;
    exit 1 when there is one, as ruff does."""
    if STDIN in paths:
        say_error("--diff reads files; for standard input use `amplint fix -`")
        sys.exit(EXIT_ERROR)
    done = carry_out(paths, settings, run_options, write=False, unsafe=unsafe)
    for changed in done.changed:
        output.report(fixed_diff(changed), nl=False)
    files = "file" if len(done.changed) == 1 else "files"
    output.summary(
        f"Would fix {done.fixed} {noun(done.fixed)} in {len(done.changed)} {files}.", err=True
    )
    if done.errors:
        sys.exit(EXIT_ERROR)
    sys.exit(EXIT_FINDINGS if done.changed else EXIT_CLEAN)


def _add_noqa(paths: tuple[Path, ...], settings: Settings, run_options: dict, output: Output):
    """`check --add-noqa`: silence every finding where it is, as ruff does
    when a rule is adopted on a code base that has many."""
    if STDIN in paths:
        say_error("--add-noqa writes files; it cannot take standard input")
        sys.exit(EXIT_ERROR)
    errors, directives, files = 0, 0, 0
    for result in check_run(paths, settings, run_options):
        if result.error is not None:
            say_error(f"{result.path}: {result.error}")
            errors += 1
        if not result.findings or result.source is None:
            continue
        if result.source.notebook is not None:
            say_warning(f"{result.path}: --add-noqa does not write into notebooks")
            continue
        codes_by_line: dict[int, set[str]] = {}
        for finding in result.findings:
            codes_by_line.setdefault(finding.range.start.line, set()).add(finding.code)
        added = noqa.add_noqa(result.source.text, codes_by_line)
        for line in added.skipped:
            say_warning(
                f"{result.path}:{line}: no room for a `# noqa` there "
                "(the line ends inside a string or with a `\\`)"
            )
        if not added.directives:
            continue
        if not noqa.parses(added.text):  # never write a file that does not parse
            say_error(f"{result.path}: adding `# noqa` comments would break it; not written")
            errors += 1
            continue
        try:
            write_source_atomic(result.source, added.text)
        except (SourceError, OSError) as error:
            say_error(f"{result.path}: cannot write: {os_reason(error)}")
            errors += 1
            continue
        directives, files = directives + added.directives, files + 1
    things = "directive" if directives == 1 else "directives"
    output.summary(
        f"Added {directives} noqa {things} in {files} {'file' if files == 1 else 'files'}."
    )
    sys.exit(EXIT_ERROR if errors else EXIT_CLEAN)


def _files_lines(paths: tuple[Path, ...], settings: Settings, force_exclude: bool) -> list[str]:
    """What --show-files prints: each file a run would check, or why not."""
    lines = []
    settings_of = FileSettings(settings)
    for found in discover(
        paths or (Path("."),),
        settings.all_excludes,
        settings.root,
        force_exclude=force_exclude,
        respect_gitignore=settings.respect_gitignore,
    ):
        if not isinstance(found, Discovered):
            continue
        try:
            if excluded_by_its_configuration(found, settings_of(found.path), settings):
                continue
        except ConfigError:
            pass  # listed: the run reports the error on it
        lines.append(printable(str(found.path)))
    return lines


def _report_statistics(findings: list[Finding], output_format: str, output: Output) -> None:
    if output_format == "json":
        output.report(json.dumps(statistics_rows(findings), indent=2))
        return
    output.report_lines(statistics(findings))
    output.summary(summary(findings))
