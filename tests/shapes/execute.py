"""Runs many small training programs in one child process, under verify's harness.

    python -m tests.shapes.execute JOBS.json RESULTS.json

Each job is {"source": code, "script": path, "seed": n, "steps": n}: the code
runs as ``__main__`` from the script's directory, as `amplint verify` runs a
script, and its result is what the harness measures of one run (losses, skipped
steps, what each optimizer step received), with "error" holding the traceback
of a program that raised.  torch is imported and instrumented once for the
whole batch: a generated program trains in milliseconds, an import of torch
takes a second.
"""

from __future__ import annotations

import builtins
import json
import os
import sys
import traceback
from pathlib import Path

from amplint.verify.harness import Recorder, StopTraining, _instrument, _seed


class _CurrentRecorder:
    """Hands the hooks installed once to the recorder of the job that runs."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def __getattr__(self, name: str):
        return getattr(self.recorder, name)


def run_jobs(jobs: list[dict]) -> list[dict]:
    import torch

    current = _CurrentRecorder(Recorder(torch, 1, None))
    _instrument(torch, current)
    results = []
    start = os.getcwd()
    for job in jobs:
        recorder = current.recorder = Recorder(torch, job["steps"], None)
        script = Path(job["script"])
        namespace = {"__name__": "__main__", "__file__": str(script), "__builtins__": builtins}
        _seed(torch, job["seed"])
        error = None
        os.chdir(script.parent)
        try:
            exec(compile(job["source"], str(script), "exec", dont_inherit=True), namespace)
        except StopTraining:
            pass
        except BaseException as raised:  # the program's own failure: reported, not ours
            error = "".join(traceback.format_exception(type(raised), raised, raised.__traceback__))
        finally:
            os.chdir(start)
        results.append({**recorder.result("script"), "error": error})
    return results


def main(argv: list[str]) -> int:
    jobs_path, results_path = argv
    jobs = json.loads(Path(jobs_path).read_text(encoding="utf-8"))
    results = run_jobs(jobs)
    Path(results_path).write_text(json.dumps(results), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
