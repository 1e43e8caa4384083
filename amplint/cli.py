"""The command line: wiring between click, settings, the engine and reports."""

from __future__ import annotations

import json
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
from amplint.diagnostics import FileReport
from amplint.files import (
    SourceError,
    SourceFile,
    real_path,
    source_from_bytes,
    writable_target,
    write_source_atomic,
)
from amplint.report import Finding, printable
from amplint.report.machine import github_lines, json_document, sarif_document
from amplint.report.text import (
    applied_lines,
    concise,
    full,
    statistics,
    statistics_rows,
    summary,
    text_row,
    unified_diff,
)
from amplint.triggers import ALL_CODES
from amplint.terminal import ProgressBar, RunProgress, color
from amplint.runner import Mode, default_jobs, run, run_source

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a process Ctrl-C ended


def _noun(count: int) -> str:
    return "finding" if count == 1 else "findings"


def _error(message: str) -> None:
    click.echo(f"amplint: error: {printable(message)}", err=True)


def _warning(message: str) -> None:
    click.echo(f"amplint: warning: {printable(message)}", err=True)


def _pop_run_options(options: dict) -> dict:
    """Split how to run (jobs, cache, which files) from the settings options."""
    names = ("jobs", "no_cache", "cache_dir", "force_exclude", "stdin_filename")
    return {name: options.pop(name) for name in names}


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
        start = Path(os.path.commonpath([real_path(p) for p in paths])) if paths else Path.cwd()
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


STDIN = Path("-")


def _run(paths: tuple[Path, ...], settings: Settings, options: dict, **mode) -> list[FileReport]:
    jobs, no_cache, cache_dir = options["jobs"], options["no_cache"], options["cache_dir"]
    if jobs is not None and jobs < 1:
        _error(f"--jobs must be at least 1, not {jobs}")
        sys.exit(EXIT_ERROR)
    cache = None
    if not no_cache:
        cache = ResultCache(cache_dir or settings.root / CACHE_DIR_NAME)
    progress = ProgressBar()
    removed: list[Path] = []
    try:
        reports = run(
            paths or (Path("."),),
            settings,
            jobs=jobs or default_jobs(),
            cache=cache,
            progress=progress,
            force_exclude=options["force_exclude"],
            removed=removed,
            **mode,
        )
    finally:
        progress.close()
    for path in removed:
        _warning(f"{path}: removed, a temporary file an interrupted `amplint fix` left")
    if cache is not None and cache.write_error is not None:
        _warning(f"{cache.write_error}; --no-cache skips it")
    return reports


def _stdin_source(stdin_filename: Path | None, raw: bytes) -> SourceFile:
    """`raw`, read from standard input, as the file `--stdin-filename` names
    (a notebook when it ends in .ipynb); "-" in messages without one."""
    try:
        return source_from_bytes(stdin_filename or STDIN, raw)
    except SourceError as error:
        _error(f"{stdin_filename or 'stdin'}: {error}")
        sys.exit(EXIT_ERROR)


def _paths_and_stdin(paths: tuple[Path, ...], stdin_filename: Path | None) -> bool:
    """Whether the source comes from standard input ("-"): then alone."""
    reads_stdin = STDIN in paths
    if reads_stdin and len(paths) > 1:
        _error("`-` (standard input) cannot be mixed with other paths")
        sys.exit(EXIT_ERROR)
    if stdin_filename is not None and not reads_stdin:
        _error("--stdin-filename is for reading standard input: pass `-` as the path")
        sys.exit(EXIT_ERROR)
    return reads_stdin


def _config_paths(paths: tuple[Path, ...], stdin_filename: Path | None) -> tuple[Path, ...]:
    """Where to look for the configuration: the named paths, or the directory
    of the file standard input stands for."""
    if STDIN in paths:
        return (stdin_filename.parent,) if stdin_filename is not None else ()
    return paths


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
    click.option(
        "--force-exclude",
        is_flag=True,
        help="Apply the excludes to files named on the command line too (for pre-commit).",
    ),
    click.option(
        "--stdin-filename",
        type=click.Path(path_type=Path, dir_okay=False),
        help="With `-` as the path: the file standard input stands for (its name in "
        "messages, its configuration, a notebook when it ends in .ipynb).",
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


class _Group(click.Group):
    """click's group, but Ctrl-C exits 130 (not 1, which means "findings")."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            click.echo("Aborted!", err=True)
            ctx.exit(EXIT_INTERRUPTED)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="amplint")
def main() -> None:
    """Find and fix PyTorch mixed-precision (AMP) mistakes."""


OUTPUT_FORMATS = ("concise", "full", "json", "github", "sarif", "text")


def _findings(reports: list[FileReport]) -> list[Finding]:
    return [
        Finding(report.path, diagnostic, report.source, report.previews.get(diagnostic))
        for report in reports
        for diagnostic in report.diagnostics
    ]


def _echo_lines(lines: list[str]) -> None:
    for line in lines:
        click.echo(line, color=color())


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@_with_selection
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
    run_options = _pop_run_options(options)
    stdin_filename = run_options.pop("stdin_filename")
    reads_stdin = _paths_and_stdin(paths, stdin_filename)
    settings = _settings(_config_paths(paths, stdin_filename), options)
    previews = output_format == "full" and not statistics
    if reads_stdin:
        reports = [
            run_source(
                _stdin_source(stdin_filename, sys.stdin.buffer.read()),
                settings,
                Mode(False, False, previews),
            )
        ]
    else:
        reports = _run(paths, settings, run_options, previews=previews)
    errors = [(report.path, report.error) for report in reports if report.error is not None]
    for path, message in errors:
        _error(f"{path}: {message}")
    findings = _findings(reports)
    if statistics:
        _report_statistics(findings, output_format)
    elif output_format == "json":
        click.echo(json_document(findings))
    elif output_format == "sarif":
        click.echo(sarif_document(findings, errors))
    elif output_format == "github":
        _echo_lines(github_lines(findings))
    else:
        _echo_lines(full(findings) if output_format == "full" else concise(findings))
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
    _echo_lines(statistics(findings))
    click.echo(summary(findings))


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@_with_selection
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
    run_options = _pop_run_options(options)
    stdin_filename = run_options.pop("stdin_filename")
    if _paths_and_stdin(paths, stdin_filename):
        _fix_stdin(paths, stdin_filename, options, unsafe_fixes)  # exits
    settings = _settings(_config_paths(paths, stdin_filename), options)
    errors, changed_files, fixed, remaining = 0, 0, 0, []
    for report in _run(paths, settings, run_options, fixing=True, unsafe=unsafe_fixes):
        if report.error is not None:
            _error(f"{report.path}: {report.error}")
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
            _error(f"{report.path}: cannot write: {_os_reason(error)}")
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
            f"Fixed {fixed} {_noun(fixed)} in {changed_files} {files}; "
            f"{len(remaining)} remaining.{more}"
        )
    else:
        click.echo(
            f"Would fix {fixed} {_noun(fixed)} in {changed_files} {files}; "
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
        settings = _settings(_config_paths(paths, stdin_filename), options)
        source = _stdin_source(stdin_filename, raw)
        report = run_source(source, settings, Mode(True, unsafe, False))
    except BaseException:  # SystemExit and KeyboardInterrupt too
        _write_stdout(raw)
        raise
    fixed = report.fixed_text
    _write_stdout(fixed.encode(source.encoding) if fixed is not None else raw)
    if report.error is not None:
        _error(f"{report.path}: {report.error}")
    for diagnostic in report.diagnostics:
        click.echo(text_row(Finding(report.path, diagnostic)), err=True, color=color())
    if report.error is not None:
        sys.exit(EXIT_ERROR)
    sys.exit(EXIT_FINDINGS if report.diagnostics else EXIT_CLEAN)


@main.command(context_settings={"ignore_unknown_options": True})
@click.argument("script", type=click.Path(path_type=Path, dir_okay=False))
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--steps", type=click.IntRange(min=2), default=50, show_default=True)
@click.option(
    "--warmup",
    type=click.IntRange(min=0),
    help="Steps left out of the timing. Default: 10, or a fifth of a short run.",
)
@click.option(
    "--rtol",
    type=click.FloatRange(min=0),
    default=0.05,
    show_default=True,
    help="Allowed relative gap between the mean losses over the last steps.",
)
@click.option("--min-speedup", type=click.FloatRange(min=0), help="Fail below this speedup.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=600,
    show_default=True,
    help="Seconds each run may take before it is killed.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option(
    "--rewrite",
    "rewrite_paths",
    multiple=True,
    type=click.Path(path_type=Path),
    help="A project file or directory the script imports, rewritten too (repeatable).",
)
@click.option(
    "--nproc-per-node",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Run each version under torchrun with this many processes; compare rank by rank.",
)
@click.option(
    "--no-tf32-run", is_flag=True, help="On CUDA, skip the third run (FP32 with TF32 matmuls)."
)
@click.option("--unsafe-fixes", is_flag=True, help="Rewrite with unsafe fixes too, as fix would.")
@click.option(
    "--config", type=click.Path(path_type=Path, dir_okay=False), help="As for check and fix."
)
@click.option("--dtype", type=click.Choice(DTYPES), help="As for fix.")
@click.option("--device-type", help="As for fix; `cpu` with bfloat16 checks parity on a CPU.")
def verify(
    script,
    script_args,
    steps,
    warmup,
    rtol,
    min_speedup,
    timeout,
    as_json,
    rewrite_paths,
    nproc_per_node,
    no_tf32_run,
    **options,
):
    """Run SCRIPT and amplint's rewrite of it for a few steps; compare speed,
    memory and loss.  Arguments after `--` go to the script.  Modules under
    `--rewrite` paths run rewritten too, as `fix SCRIPT PATHS` would write them.

    Exit codes: 0 passed; 1 parity or speed check failed, or a run crashed,
    hung or produced NaN; 2 usage or internal error; 3 nothing to verify (no
    training step to rewrite, or AMP inactive on this machine)."""
    from amplint.verify import EXIT_FAILED, EXIT_PASSED, VerifyError, runs
    from amplint.verify.compare import Thresholds, default_last, default_warmup
    from amplint.verify.report import text_report

    unsafe = options.pop("unsafe_fixes")
    settings = _settings((script, *rewrite_paths), {**options, "select": None, "ignore": None})
    if warmup is None:
        warmup = default_warmup(steps)
    if warmup >= steps:
        _error(f"--warmup {warmup} leaves no step to time out of --steps {steps}")
        sys.exit(EXIT_ERROR)
    request = runs.Request(
        script=script,
        script_args=tuple(script_args),
        settings=settings,
        unsafe=unsafe,
        thresholds=Thresholds(steps, warmup, default_last(steps), rtol, min_speedup),
        timeout_s=timeout,
        rewrite_paths=rewrite_paths,
        nproc_per_node=nproc_per_node,
        tf32_run=not no_tf32_run,
    )
    progress = RunProgress() if sys.stderr.isatty() else None
    try:
        outcome = runs.verify(request, progress)
    except VerifyError as error:
        if as_json:
            message = "\n".join(filter(None, [str(error), error.detail]))
            click.echo(
                json.dumps({"passed": False, "error": message, "exit_code": error.exit_code})
            )
        _error(str(error))
        for line in error.detail.splitlines():  # the run's own stderr, line by line
            click.echo(printable(line), err=True)
        sys.exit(error.exit_code)
    finally:
        if progress is not None:
            progress.clear()
    comparison = outcome.comparison
    if as_json:
        document = comparison.as_json(outcome.device, outcome.dtype)
        document["rewrite"] = outcome.applied
        document["notes"] = outcome.notes
        click.echo(json.dumps(document, indent=2))
    else:
        for line in text_report(script, outcome):
            click.echo(line, color=color())
    sys.exit(EXIT_PASSED if comparison.passed else EXIT_FAILED)


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
