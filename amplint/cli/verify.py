"""`amplint verify`: run a script and its rewrite, compare them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from amplint.cli import common
from amplint.cli.common import (
    EXIT_ERROR,
    say_error,
    settings_for,
)
from amplint.config import (
    DTYPES,
)
from amplint.report import printable
from amplint.terminal import RunProgress, color


@click.command(context_settings={"ignore_unknown_options": True})
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
@click.option(
    "--atol",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Mean losses this close pass whatever their relative gap (for losses near zero).",
)
@click.option("--min-speedup", type=click.FloatRange(min=0), help="Fail below this speedup.")
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    help="Samples per step, for the throughput (read from the script's DataLoader otherwise).",
)
@click.option(
    "--seq-len",
    type=click.IntRange(min=1),
    help="Tokens per sample: the throughput in tokens per second.",
)
@click.option(
    "--repeat",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Rounds of timing runs, interleaved (FP32, AMP, TF32, FP32, ...): the median and IQR.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=600,
    show_default=True,
    help="Seconds each run may take before it is killed.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Write the runs' loss curves and step times to this PNG (needs matplotlib).",
)
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
@click.option("--config", multiple=True, metavar="FILE | KEY=VALUE", help="As for check and fix.")
@click.option("--dtype", type=click.Choice(DTYPES), help="As for fix.")
@click.option(
    "--device-type",
    help="As for fix; `cpu` with bfloat16 checks parity on a CPU (the runs see no CUDA device).",
)
def verify(
    script,
    script_args,
    steps,
    warmup,
    rtol,
    atol,
    min_speedup,
    repeat,
    batch_size,
    seq_len,
    timeout,
    as_json,
    plot,
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
    training step to rewrite, AMP inactive on this machine, or the FP32 run
    itself diverged: inconclusive)."""
    from amplint.verify import EXIT_FAILED, EXIT_NOTHING, EXIT_PASSED, VerifyError, runs
    from amplint.verify.compare import Thresholds, default_last, default_warmup
    from amplint.verify.report import text_report

    if plot is not None:
        from amplint.verify.plot import PLOT_NEEDS, plot_available

        if not plot_available():  # said before minutes of runs, not after
            say_error(PLOT_NEEDS)
            sys.exit(EXIT_ERROR)
    unsafe = options.pop("unsafe_fixes")
    settings = settings_for((script, *rewrite_paths), options)
    fix_settings = None  # the same as `settings` unless verify was given its own
    if options.get("device_type") or options.get("dtype"):
        fix_settings = settings_for(
            (script, *rewrite_paths), {**options, "device_type": None, "dtype": None}
        )
    if warmup is None:
        warmup = default_warmup(steps)
    if warmup >= steps:
        say_error(f"--warmup {warmup} leaves no step to time out of --steps {steps}")
        sys.exit(EXIT_ERROR)
    request = runs.Request(
        script=script,
        script_args=tuple(script_args),
        settings=settings,
        unsafe=unsafe,
        thresholds=Thresholds(steps, warmup, default_last(steps), rtol, min_speedup, atol),
        timeout_s=timeout,
        rewrite_paths=rewrite_paths,
        nproc_per_node=nproc_per_node,
        tf32_run=not no_tf32_run,
        fix_settings=fix_settings,
        repeat=repeat,
        batch_size=batch_size,
        seq_len=seq_len,
    )
    progress = RunProgress() if sys.stderr.isatty() else None
    try:
        outcome = runs.verify(request, progress)
    except VerifyError as error:
        if as_json:
            message = "\n".join(filter(None, [str(error), error.detail]))
            click.echo(
                json.dumps(
                    {
                        "schema_version": JSON_SCHEMA_VERSION,
                        "command": _command_line(),
                        "passed": False,
                        "error": message,
                        "exit_code": error.exit_code,
                    }
                )
            )
        say_error(str(error))
        for line in error.detail.splitlines():  # the run's own stderr, line by line
            click.echo(printable(line), err=True)
        sys.exit(error.exit_code)
    finally:
        if progress is not None:
            progress.clear()
    comparison = outcome.comparison
    if plot is not None:
        from amplint.verify.plot import write_plot

        title = f"amplint verify {script}: {outcome.device}, {outcome.dtype}"
        write_plot(plot, comparison, title)
        if not as_json:
            click.echo(f"plot: {plot}")
    if as_json:
        document = {
            "schema_version": JSON_SCHEMA_VERSION,
            "command": _command_line(),
            **comparison.as_json(outcome.device, outcome.dtype),
        }
        document["rewrite"] = outcome.applied
        document["notes"] = outcome.notes
        click.echo(json.dumps(document, indent=2))
    else:
        for line in text_report(script, outcome):
            click.echo(line, color=color())
    if comparison.inconclusive:
        sys.exit(EXIT_NOTHING)
    sys.exit(EXIT_PASSED if comparison.passed else EXIT_FAILED)


# The layout of `verify --json`: raised when a field changes meaning or goes.
# 2: per-step arrays for every run, the command line, losses per optimizer.
JSON_SCHEMA_VERSION = 2


def _command_line() -> list[str]:
    """How verify was run, as the shell gave it: the evidence names its command."""
    return ["amplint", *common.invoked_with]
