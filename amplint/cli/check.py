"""`amplint check`: report the findings."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from amplint.cli.common import (
    EXIT_CLEAN,
    EXIT_ERROR,
    EXIT_FINDINGS,
    OUTPUT_FORMATS,
    config_paths,
    echo_lines,
    findings_of,
    pop_run_options,
    reads_stdin,
    run_paths,
    say_error,
    settings_for,
    stdin_source,
    with_selection,
)
from amplint.report import Finding
from amplint.report.machine import github_lines, json_document, sarif_document
from amplint.report.text import (
    concise,
    full,
    statistics,
    statistics_rows,
    summary,
)
from amplint.runner import Mode, run_source


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@with_selection
@click.option(
    "--output-format",
    type=click.Choice(OUTPUT_FORMATS),
    default="concise",
    show_default=True,
    help="concise: a line per finding; full: with the code and the fix's diff; json; "
    "github: workflow annotations; sarif: SARIF 2.1.0. `text` is concise.",
)
@click.option("--statistics", is_flag=True, help="Count the findings per rule instead.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings.")
def check(paths, output_format, statistics, exit_zero, **options) -> None:
    """Report AMP findings in PATHS (files or directories, `-` for standard
    input; default: .)."""
    run_options = pop_run_options(options)
    stdin_filename = run_options.pop("stdin_filename")
    from_stdin = reads_stdin(paths, stdin_filename)
    settings = settings_for(config_paths(paths, stdin_filename), options)
    previews = output_format == "full" and not statistics
    if from_stdin:
        reports = [
            run_source(
                stdin_source(stdin_filename, sys.stdin.buffer.read()),
                settings,
                Mode(False, False, previews),
            )
        ]
    else:
        reports = run_paths(paths, settings, run_options, previews=previews)
    errors = [(report.path, report.error) for report in reports if report.error is not None]
    for path, message in errors:
        say_error(f"{path}: {message}")
    findings = findings_of(reports)
    if statistics:
        _report_statistics(findings, output_format)
    elif output_format == "json":
        click.echo(json_document(findings))
    elif output_format == "sarif":
        click.echo(sarif_document(findings, errors))
    elif output_format == "github":
        echo_lines(github_lines(findings))
    else:
        echo_lines(full(findings) if output_format == "full" else concise(findings))
        if errors and not findings:  # "All checks passed" would hide the errors
            files = "file" if len(errors) == 1 else "files"
            click.echo(f"No findings; {len(errors)} {files} could not be checked (errors above).")
        else:
            click.echo(summary(findings))
    if errors:
        sys.exit(EXIT_ERROR)
    sys.exit(EXIT_FINDINGS if findings and not exit_zero else EXIT_CLEAN)


def _report_statistics(findings: list[Finding], output_format: str) -> None:
    if output_format == "json":
        click.echo(json.dumps(statistics_rows(findings), indent=2))
        return
    echo_lines(statistics(findings))
    click.echo(summary(findings))
