"""What the commands share: exit codes, messages, options, settings and the run."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterable

import click

from amplint import api
from amplint.cache import CACHE_DIR_NAME
from amplint.config import DTYPES, ConfigError, Settings
from amplint.files import SourceError, SourceFile, source_from_bytes
from amplint.report import Finding, printable
from amplint.report.machine import (
    azure_lines,
    github_lines,
    json_document,
    gitlab_document,
    json_lines,
    junit_document,
    pylint_lines,
    rdjson_document,
    sarif_document,
)
from amplint.report.text import concise, full
from amplint.terminal import COLOR_CHOICES, ProgressBar, choose_color, color
from amplint.triggers import ALL_CODES

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a process Ctrl-C ended

# The arguments of the running command, after `amplint` (see cli._Group.main).
invoked_with: list[str] = []


def noun(count: int) -> str:
    return "finding" if count == 1 else "findings"


def say_error(message: str) -> None:
    click.echo(f"amplint: error: {printable(message)}", err=True)


def say_warning(message: str) -> None:
    click.echo(f"amplint: warning: {printable(message)}", err=True)


def unsafe_option(help: str):
    """`--unsafe-fixes/--no-unsafe-fixes`: given, it overrides every file's
    `unsafe-fixes`; not given (None), each file's configuration decides."""
    return click.option("--unsafe-fixes/--no-unsafe-fixes", default=None, help=help)


def unsafe_note(remaining: list[Finding], unsafe_asked: bool) -> str:
    """ " N more fixable with --unsafe-fixes." after a fix's summary, or "": a
    user who ran the safe fixes learns the rest is one flag away (an unsafe
    fix left where the option was given was withheld, not skipped)."""
    left = 0 if unsafe_asked else sum(1 for finding in remaining if finding.unsafe_fix)
    return f" {left} more fixable with --unsafe-fixes." if left else ""


def pop_run_options(options: dict) -> dict:
    """Split how to run (jobs, cache, which files) from the settings options."""
    names = ("jobs", "no_cache", "cache_dir", "force_exclude", "stdin_filename")
    return {name: options.pop(name) for name in names}


def settings_for(paths: tuple[Path, ...], options: dict) -> Settings:
    """The run's settings; a configuration error ends the run with exit code 2."""
    try:
        return api.load_settings(paths, **options)
    except ConfigError as error:
        say_error(str(error))
        sys.exit(EXIT_ERROR)


STDIN = Path("-")


def settings_lines(settings: Settings, for_file: Path | None = None) -> list[str]:
    """What `check --show-settings` prints: every setting as resolved (for
    `for_file`, the first path named, where that is a file), and after `#`
    where each value came from."""

    def listed(values) -> str:
        return ", ".join(values) if values else "(none)"

    def told(value: bool) -> str:
        return "true" if value else "false"

    rows = [
        *([("file", str(for_file))] if for_file is not None else []),
        ("configuration", str(settings.config_file or "(none: defaults)")),
        ("root", str(settings.root)),
        ("select", listed(settings.select)),
        ("extend-select", listed(settings.extend_select)),
        ("ignore", listed(settings.ignore)),
        ("extend-ignore", listed(settings.extend_ignore)),
        ("exclude", listed(settings.exclude)),
        ("extend-exclude", listed(settings.extend_exclude)),
        (
            "per-file-ignores",
            listed(
                [f"{pattern}: {' '.join(codes)}" for pattern, codes in settings.per_file_ignores]
            ),
        ),
        ("target-torch", ".".join(map(str, settings.target_torch))),
        ("dtype", settings.dtype),
        ("device-type", settings.device_type),
        ("respect-gitignore", told(settings.respect_gitignore)),
        ("unsafe-fixes", told(settings.unsafe_fixes)),
        ("fixable", "(all)" if settings.fixable is None else listed(settings.fixable)),
        ("unfixable", listed(settings.unfixable)),
        ("file-line-limit", f"{settings.file_line_limit:,}"),
        ("file-time-limit", f"{settings.file_time_limit:g} s"),
        ("enabled rules", listed(sorted(settings.enabled_codes(ALL_CODES, for_file)))),
    ]
    derived = ("file", "configuration", "root", "enabled rules")
    return [
        printable(
            f"{name:<17} {value}"
            if name in derived
            else f"{name:<17} {value:<24} # {settings.origin(name)}"
        )
        for name, value in rows
    ]


def check_run(
    paths: tuple[Path, ...], settings: Settings, options: dict, *, edits: bool = False
) -> list[api.FileResult]:
    """The API's run of `check` over `paths`, its warnings said."""
    return _files_of(api.check_paths, paths, settings, options, edits=edits)


def fix_run(
    paths: tuple[Path, ...], settings: Settings, options: dict, **how_to_fix
) -> list[api.FixedFile]:
    """The API's run of `fix` over `paths`, its warnings said."""
    return _files_of(api.fix_paths, paths, settings, options, **how_to_fix)


def _files_of(run_paths, paths: tuple[Path, ...], settings: Settings, options: dict, **asked):
    """What `run_paths` (api.check_paths or api.fix_paths) gives for each file,
    with a progress bar while it runs and its warnings said after."""
    progress = ProgressBar()
    try:
        run = run_paths(paths, settings, progress=progress, **asked, **_how(options))
    finally:
        progress.close()
    for warning in run.warnings:
        say_warning(warning)
    return list(run.files)


def _how(options: dict) -> dict:
    """The run options (--jobs, the cache, --force-exclude) as the API takes them."""
    jobs = options["jobs"]
    if jobs is not None and jobs < 1:
        say_error(f"--jobs must be at least 1, not {jobs}")
        sys.exit(EXIT_ERROR)
    cache = False if options["no_cache"] else options["cache_dir"] or True
    return {"jobs": jobs, "cache": cache, "force_exclude": options["force_exclude"]}


def stdin_source(stdin_filename: Path | None, raw: bytes) -> SourceFile:
    """`raw`, read from standard input, as the file `--stdin-filename` names
    (a notebook when it ends in .ipynb); "-" in messages without one."""
    try:
        return source_from_bytes(stdin_filename or STDIN, raw)
    except SourceError as error:
        say_error(f"{stdin_filename or 'stdin'}: {error}")
        sys.exit(EXIT_ERROR)


# Set once `fix -` has read its input: from then on it answers for stdout.
stdin_taken = False


def echo_unread_stdin() -> None:
    """`fix -` stopped before reading its input (an option was wrong): stdout
    gets the input as it came, as fix_stdin gives it on every other failure;
    an editor replaces its buffer with what it reads back, never with nothing."""
    global stdin_taken
    arguments = invoked_with[1:] if invoked_with[:1] == ["fix"] else []
    if str(STDIN) not in arguments or stdin_taken:
        return
    stdin_taken = True
    try:
        raw = sys.stdin.buffer.read()
    except (OSError, ValueError, AttributeError):
        return  # no readable stdin: nothing an editor sent
    sys.stdout.buffer.write(raw)
    sys.stdout.buffer.flush()


def reads_stdin(paths: tuple[Path, ...], stdin_filename: Path | None) -> bool:
    """Whether the source comes from standard input ("-"): then alone."""
    reads_stdin = STDIN in paths
    if reads_stdin and len(paths) > 1:
        say_error("`-` (standard input) cannot be mixed with other paths")
        sys.exit(EXIT_ERROR)
    if stdin_filename is not None and not reads_stdin:
        say_error("--stdin-filename is for reading standard input: pass `-` as the path")
        sys.exit(EXIT_ERROR)
    return reads_stdin


def config_paths(paths: tuple[Path, ...], stdin_filename: Path | None) -> tuple[Path, ...]:
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
    click.option(
        "--select",
        help="Rule codes or prefixes to enable, comma-separated (e.g. AMP2); replaces the "
        "configuration's select and extend-select.",
    ),
    click.option("--ignore", help="Rule codes or prefixes to disable, comma-separated."),
    click.option("--extend-select", help="Codes or prefixes to enable on top of the selection."),
    click.option("--extend-ignore", help="Codes or prefixes to disable on top of the ignored."),
    click.option(
        "--exclude",
        help="Gitignore-style patterns to skip, comma-separated; replaces the configuration's "
        "(and the defaults).",
    ),
    click.option(
        "--extend-exclude", help="Patterns to skip on top of the excludes, comma-separated."
    ),
    click.option(
        "--respect-gitignore/--no-respect-gitignore",
        default=None,
        help="Skip (or not) what .gitignore, .git/info/exclude, git's core.excludesFile and "
        ".ignore files name. Default: the configuration's respect-gitignore, else skip.",
    ),
    click.option(
        "--per-file-ignores",
        multiple=True,
        metavar="PATTERN:CODES",
        help="Ignore CODES (comma-separated) in files matching PATTERN (repeatable); added "
        "to the configuration's.",
    ),
    click.option(
        "--isolated",
        is_flag=True,
        help="Read no configuration file: the project's, nor the user's; `--config KEY=VALUE` "
        "overrides still apply.",
    ),
    click.option(
        "--config",
        multiple=True,
        metavar="FILE | KEY=VALUE",
        help="A configuration file to use instead of the nearest one (amplint.toml, or "
        "pyproject-style with [tool.amplint]), or a TOML `KEY = VALUE` overriding one "
        "setting (repeatable).",
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


def with_selection(command):
    for option in reversed(_selection_options + _run_options):
        command = option(command)
    return command


_output_options = [
    click.option(
        "--output-file",
        "-o",
        type=click.Path(path_type=Path, dir_okay=False, writable=True),
        help="Write the report to this file instead of standard output.",
    ),
    click.option("--quiet", "-q", is_flag=True, help="Print the findings, nothing else."),
    click.option(
        "--silent",
        "-s",
        is_flag=True,
        help="Print nothing but errors; the exit code still tells findings.",
    ),
    click.option(
        "--color",
        "color_choice",
        type=click.Choice(COLOR_CHOICES),
        default="auto",
        show_default=True,
        help="Colour the output: auto on a terminal (NO_COLOR and FORCE_COLOR honoured).",
    ),
]


def with_output(command):
    for option in reversed(_output_options):
        command = option(command)
    return command


class Output:
    """Where a command's report goes (standard output, or --output-file) and
    how much else it says: -q keeps the report alone, -s nothing but errors."""

    def __init__(self, options: dict) -> None:
        output_file: Path | None = options.pop("output_file")
        self.quiet = options.pop("quiet")
        self.silent = options.pop("silent")
        choose_color(options.pop("color_choice"))
        self._file = None
        if output_file is not None:
            try:
                # Line-buffered: the commands end with sys.exit, at any line.
                self._file = open(output_file, "w", encoding="utf-8", newline="", buffering=1)
            except OSError as error:
                say_error(f"{output_file}: cannot write: {error.strerror or error}")
                sys.exit(EXIT_ERROR)

    def report(self, text: str, nl: bool = True) -> None:
        """Findings, a document, a diff."""
        if not self.silent:
            click.echo(text, file=self._file, nl=nl, color=color() if self._file is None else False)

    def report_lines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.report(line)

    def summary(self, text: str, err: bool = False) -> None:
        """Counts and verdicts: beside the report, or on stderr with err."""
        if self.quiet or self.silent:
            return
        stream = None if err else self._file
        click.echo(text, file=stream, err=err, color=color() if stream is None else False)


# A document, or lines, for a program, not rows for a reader.
MACHINE_FORMATS = (
    "json",
    "json-lines",
    "github",
    "azure",
    "pylint",
    "junit",
    "gitlab",
    "rdjson",
    "sarif",
)
OUTPUT_FORMATS = ("concise", "full", *MACHINE_FORMATS, "text")


def output_format_option(help: str):
    return click.option(
        "--output-format",
        type=click.Choice(OUTPUT_FORMATS),
        default="concise",
        show_default=True,
        envvar="AMPLINT_OUTPUT_FORMAT",  # ruff's RUFF_OUTPUT_FORMAT: CI sets it once
        show_envvar=True,
        help=help,
    )


def machine_report(
    findings: list[Finding], errors: list[tuple[Path, str]], output_format: str
) -> str:
    if output_format == "json":
        return json_document(findings)
    if output_format == "sarif":
        return sarif_document(findings, errors)
    if output_format == "junit":
        return junit_document(findings, errors)
    if output_format == "gitlab":
        return gitlab_document(findings)
    if output_format == "rdjson":
        return rdjson_document(findings)
    lines = {
        "json-lines": json_lines,
        "github": github_lines,
        "azure": azure_lines,
        "pylint": pylint_lines,
    }[output_format]
    return "\n".join(lines(findings))


def row_lines(findings: list[Finding], output_format: str) -> list[str]:
    """The findings as rows for a reader, in `concise` (`text`) or `full` form."""
    return full(findings) if output_format == "full" else concise(findings)
