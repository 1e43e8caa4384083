"""The command line: wiring between click, settings, the engine and reports."""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path
import click

from amplint import __version__
from amplint.catalog import load_catalog
from amplint.config import (
    DTYPES,
    ConfigError,
    Settings,
    find_config,
    load_settings,
    parse_device_type,
    parse_selectors,
)
from amplint.cache import CACHE_DIR_NAME, ResultCache
from amplint.engine import FileReport
from amplint.files import SourceError, writable_target, write_source_atomic
from amplint.report import (
    applied_lines,
    json_document,
    summary,
    text_row,
    unified_diff,
)
from amplint.rules import ALL_CODES
from amplint.runner import default_jobs, run

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


def _findings(count: int) -> str:
    return "finding" if count == 1 else "findings"


def _error(message: str) -> None:
    click.echo(f"amplint: error: {message}", err=True)


def _pop_run_options(options: dict) -> dict:
    """Split how to run (jobs, cache) from the settings options."""
    return {name: options.pop(name) for name in ("jobs", "no_cache", "cache_dir")}


def _settings(paths: tuple[Path, ...], options: dict) -> Settings:
    """The run's settings; a configuration error ends the run with exit code 2."""
    try:
        return _load_settings(paths, **options)
    except ConfigError as error:
        _error(str(error))
        sys.exit(EXIT_ERROR)


def _load_settings(
    paths: tuple[Path, ...], config: Path | None, select, ignore, dtype, device_type
) -> Settings:
    if config is None:
        start = Path(os.path.commonpath([p.resolve() for p in paths])) if paths else Path.cwd()
        config = find_config(start)
    settings = load_settings(config, ALL_CODES)
    if select is not None:
        settings = replace(
            settings, select=parse_selectors(select, "select", "--select", ALL_CODES)
        )
    if ignore is not None:
        settings = replace(
            settings, ignore=parse_selectors(ignore, "ignore", "--ignore", ALL_CODES)
        )
    if dtype is not None:
        settings = replace(settings, dtype=dtype)
    if device_type is not None:
        settings = replace(settings, device_type=parse_device_type(device_type, "--device-type"))
    return settings


def _run(paths: tuple[Path, ...], settings: Settings, options: dict, **mode) -> list[FileReport]:
    jobs, no_cache, cache_dir = options["jobs"], options["no_cache"], options["cache_dir"]
    if jobs is not None and jobs < 1:
        _error(f"--jobs must be at least 1, not {jobs}")
        sys.exit(EXIT_ERROR)
    cache = None
    if not no_cache:
        cache = ResultCache(cache_dir or settings.root / CACHE_DIR_NAME)
    reports = run(paths or (Path("."),), settings, jobs=jobs or default_jobs(), cache=cache, **mode)
    if cache is not None and cache.write_error is not None:
        click.echo(f"amplint: warning: {cache.write_error}; --no-cache skips it", err=True)
    return reports


_run_options = [
    click.option(
        "--jobs",
        "-j",
        type=int,
        help="Worker processes for large runs. Default: one per available CPU.",
    ),
    click.option("--no-cache", is_flag=True, help="Neither read nor write the result cache."),
    click.option(
        "--cache-dir",
        type=click.Path(path_type=Path, file_okay=False),
        envvar="AMPLINT_CACHE_DIR",
        help=f"Where results are cached. Default: {CACHE_DIR_NAME} in the project root.",
    ),
]

_selection_options = [
    click.option("--select", help="Rule codes or prefixes to enable, comma-separated (e.g. AMP2)."),
    click.option("--ignore", help="Rule codes or prefixes to disable, comma-separated."),
    click.option(
        "--config",
        type=click.Path(path_type=Path, dir_okay=False),
        help="A pyproject.toml ([tool.amplint]) or amplint.toml to use instead of the nearest one.",
    ),
    click.option(
        "--dtype",
        type=click.Choice(DTYPES),
        help="What AMP001 inserts: float16 (autocast + GradScaler), bfloat16 (autocast), "
        "auto (bf16 where supported, else fp16). Default: float16.",
    ),
    click.option(
        "--device-type",
        help="The autocast / GradScaler device AMP001 inserts. Default: cuda.",
    ),
]


def _with_selection(command):
    for option in reversed(_selection_options + _run_options):
        command = option(command)
    return command


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="amplint")
def main() -> None:
    """Find and fix PyTorch mixed-precision (AMP) mistakes."""


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@_with_selection
@click.option(
    "--output-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
)
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when there are findings.")
def check(paths, output_format, exit_zero, **options) -> None:
    """Report AMP findings in PATHS (files or directories; default: .)."""
    run_options = _pop_run_options(options)
    settings = _settings(paths, options)
    findings, errors = [], 0
    for report in _run(paths, settings, run_options):
        if report.error is not None:
            _error(f"{report.path}: {report.error}")
            errors += 1
        findings += [(report.path, diagnostic) for diagnostic in report.diagnostics]
    if output_format == "json":
        click.echo(json_document(findings))
    else:
        for path, diagnostic in findings:
            click.echo(text_row(path, diagnostic))
        if errors and not findings:  # "All checks passed" would hide the errors
            files = "file" if errors == 1 else "files"
            click.echo(f"No findings; {errors} {files} could not be checked (errors above).")
        else:
            click.echo(summary(findings))
    if errors:
        sys.exit(EXIT_ERROR)
    sys.exit(EXIT_FINDINGS if findings and not exit_zero else EXIT_CLEAN)


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@_with_selection
@click.option("--apply", "apply_", is_flag=True, help="Write the fixes instead of showing a diff.")
@click.option("--unsafe-fixes", is_flag=True, help="Also apply fixes that may change numerics.")
def fix(paths, apply_, unsafe_fixes, **options) -> None:
    """Show (or with --apply, write) the fixes for PATHS."""
    run_options = _pop_run_options(options)
    settings = _settings(paths, options)
    errors, changed_files, fixed, remaining = 0, 0, 0, []
    for report in _run(paths, settings, run_options, fixing=True, unsafe=unsafe_fixes):
        if report.error is not None:
            _error(f"{report.path}: {report.error}")
            errors += 1
        remaining += [(report.path, diagnostic) for diagnostic in report.diagnostics]
        if report.fixed_text is None:
            continue
        changed_files += 1
        fixed += len(report.applied)
        if not apply_:
            click.echo(unified_diff(report.path, report.source.text, report.fixed_text), nl=False)
            continue
        try:
            target = writable_target(report.path, paths or (Path("."),))
            write_source_atomic(replace(report.source, path=target), report.fixed_text)
        except (SourceError, OSError) as error:
            _error(f"{report.path}: cannot write: {error}")
            errors += 1
            remaining += [(report.path, d) for d in report.applied]
            continue
        for line in applied_lines(report.path, report.applied):
            click.echo(line)
    for path, diagnostic in remaining:
        click.echo(text_row(path, diagnostic), err=not apply_)
    files = "file" if changed_files == 1 else "files"
    if apply_:
        click.echo(
            f"Fixed {fixed} {_findings(fixed)} in {changed_files} {files}; {len(remaining)} remaining."
        )
    else:
        click.echo(
            f"Would fix {fixed} {_findings(fixed)} in {changed_files} {files}; "
            f"{len(remaining)} would remain.",
            err=True,
        )
    if errors:
        sys.exit(EXIT_ERROR)
    if apply_:
        sys.exit(EXIT_FINDINGS if remaining else EXIT_CLEAN)
    sys.exit(EXIT_FINDINGS if changed_files else EXIT_CLEAN)


@main.command(name="rules")
def list_rules() -> None:
    """List every rule: code, name, fix, summary."""
    for doc in load_catalog().values():
        click.echo(f"{doc.code}  {doc.name:<28} {doc.fix:<7} {doc.summary}")


@main.command()
@click.argument("code")
def rule(code: str) -> None:
    """Print the document of rule CODE."""
    doc = load_catalog().get(code.upper())
    if doc is None:
        _error(f"unknown rule `{code}`; `amplint rules` lists them")
        sys.exit(EXIT_ERROR)
    click.echo(doc.text, nl=False)
