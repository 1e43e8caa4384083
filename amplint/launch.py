"""The `amplint` command's entry, and `python -m amplint`'s.

A `check` or `fix` that finds a file to analyse spends most of its time
loading: click and the command line (0.08 s), then libcst and the rules
(0.15 s), one after the other.  Where the machine has a second CPU, the
first analysis worker is forked here, before anything else loads, and loads
libcst and the engine while this process loads the command line, reads the
configuration and finds the files: a pre-commit hook's one file with a
finding waits for the longer of the two, not their sum.  A run with nothing
to analyse (most commits) stops that worker as it exits
(amplint.workers.release_early_worker).

This module imports only what Python has loaded already.
"""

from __future__ import annotations

import gc
import os
import sys
from typing import Callable, NoReturn


def run() -> NoReturn:
    # The collector threshold amplint.cli.run sets, set before the fork so
    # that the early worker has it too.
    gc.set_threshold(50_000, 20, 20)
    if _worker_starts_early(sys.argv[1:]):
        from amplint.workers import start_early_worker

        start_early_worker(_analysis)
    from amplint.cli import run as run_command

    run_command()


def _worker_starts_early(arguments: list[str]) -> bool:
    """Whether the command may analyse files, and a worker loading meanwhile
    has a CPU of its own (on one, it would only slow the command line down)."""
    return (
        hasattr(os, "fork")
        and arguments[:1] in (["check"], ["fix"])
        and hasattr(os, "sched_getaffinity")
        and len(os.sched_getaffinity(0)) > 1
    )


def _analysis() -> Callable:
    """What the early worker loads, in the worker: the function it analyses
    each job with."""
    from amplint import runner

    runner.load_engine()
    return runner.analyse_work
