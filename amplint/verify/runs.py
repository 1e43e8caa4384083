"""The parent side of `amplint verify`: rewrite the script in memory as `fix`
would, run both versions under the harness in child processes, and compare."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import amplint
from amplint.config import Settings
from amplint.engine import FixError, fix_text
from amplint.files import SourceError, read_source
from amplint.rules import ALL_CODES
from amplint.verify.compare import Comparison, Thresholds, active_autocast, inactive_amp
from amplint.verify.harness import HARNESS_ERROR, NEEDS_TORCH

EXIT_PASSED, EXIT_FAILED, EXIT_ERROR, EXIT_NOTHING = 0, 1, 2, 3
STDERR_TAIL_LINES = 20


class VerifyError(Exception):
    """Ends `verify` with `exit_code` and a message for the user."""

    def __init__(self, exit_code: int, message: str) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class Request:
    script: Path
    script_args: Sequence[str]
    settings: Settings
    unsafe: bool
    thresholds: Thresholds
    timeout_s: float


# Told (run name, steps done, steps wanted) while a child runs.
Progress = Callable[[str, int, int], None]


def rewritten(script: Path, settings: Settings, unsafe: bool) -> tuple[str, str, list[str]]:
    """(original text, rewritten text, what the rewrite did), or VerifyError 3
    when amplint would change nothing."""
    try:
        source = read_source(script)
    except SourceError as error:
        raise VerifyError(EXIT_ERROR, f"{script}: {error}") from None
    if source.notebook is not None:
        raise VerifyError(EXIT_ERROR, f"{script}: verify runs scripts, not notebooks")
    codes = settings.enabled_codes(ALL_CODES, script)
    try:
        result = fix_text(source.text, codes, settings, unsafe)
    except FixError as error:
        raise VerifyError(EXIT_ERROR, f"{script}: not fixed: {error}") from None
    if not result.applied:
        found = ", ".join(sorted({d.code for d in result.found})) or "no findings"
        raise VerifyError(
            EXIT_NOTHING,
            f"nothing to verify: amplint would not change {script} ({found}); "
            "verify compares a script with its rewrite, so it needs a training step to rewrite",
        )
    done = sorted({f"{d.code} {d.fix.message}" for d in result.applied if d.fix is not None})
    return source.text, result.text, done


def run_child(
    name: str, text: str, request: Request, progress: Progress | None, workdir: Path
) -> dict:
    """Run `text` as the script under the harness; what it measured, or
    VerifyError naming the run when it crashed, hung or measured nothing."""
    source = workdir / f"{name}.py"
    source.write_text(text, encoding="utf-8")
    out, progress_file = workdir / f"{name}.json", workdir / f"{name}.progress"
    stdout, stderr = workdir / f"{name}.stdout", workdir / f"{name}.stderr"
    command = [
        sys.executable,
        "-m",
        "amplint.verify.harness",
        "--source",
        str(source),
        "--script",
        str(request.script.resolve()),
        "--steps",
        str(request.thresholds.steps),
        "--out",
        str(out),
        "--progress",
        str(progress_file),
        "--",
        *request.script_args,
    ]
    package_root = str(Path(amplint.__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    with open(stdout, "wb") as out_handle, open(stderr, "wb") as err_handle:
        child = subprocess.Popen(
            command,
            cwd=request.script.resolve().parent,
            env=env,
            stdout=out_handle,
            stderr=err_handle,
            start_new_session=True,  # its DataLoader workers die with it
        )
        timed_out = _wait(child, name, request, progress, progress_file)
    if timed_out:
        done = _read_progress(progress_file)
        raise VerifyError(
            EXIT_FAILED,
            f"the {name} run hung: no end within --timeout {request.timeout_s:g} s "
            f"(killed after {done} of {request.thresholds.steps} steps)",
        )
    tail = _tail(stderr)
    if child.returncode == HARNESS_ERROR:
        raise VerifyError(EXIT_ERROR, f"the harness could not start:\n{tail}")
    try:
        result = json.loads(out.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        how = (
            f"was killed by signal {-child.returncode}"
            if child.returncode < 0
            else f"exited with status {child.returncode}"
        )
        raise VerifyError(EXIT_FAILED, f"the {name} run {how} before reporting:\n{tail}") from None
    if result["exit_status"] != 0:
        raise VerifyError(
            EXIT_FAILED,
            f"the {name} run crashed (exit status {result['exit_status']}) after "
            f"{result['steps']} of {request.thresholds.steps} steps:\n{tail}",
        )
    if result["steps"] == 0:
        raise VerifyError(
            EXIT_NOTHING,
            f"nothing to verify: the {name} run ended without an optimizer step",
        )
    return result


def _wait(
    child: subprocess.Popen,
    name: str,
    request: Request,
    progress: Progress | None,
    progress_file: Path,
) -> bool:
    """Wait for the child, reporting progress; True when it had to be killed."""
    deadline = time.monotonic() + request.timeout_s
    while True:
        try:
            child.wait(timeout=0.2)
            return False
        except subprocess.TimeoutExpired:
            pass
        if progress is not None:
            progress(name, _read_progress(progress_file), request.thresholds.steps)
        if time.monotonic() >= deadline:
            try:
                os.killpg(child.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            child.wait()
            return True


def _read_progress(path: Path) -> int:
    try:
        return int(path.read_text() or 0)
    except (OSError, ValueError):
        return 0


def _tail(path: Path) -> str:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join("    " + line for line in lines[-STDERR_TAIL_LINES:])


@dataclass
class Outcome:
    comparison: Comparison
    applied: list[str]
    device: str
    dtype: str
    speed_meaningful: bool


def verify(request: Request, progress: Progress | None = None) -> Outcome:
    original, fixed, applied = rewritten(request.script, request.settings, request.unsafe)
    device_type = request.settings.device_type
    dtype = request.settings.dtype
    # Only a CUDA rewrite needs the probe (a second torch import, about a
    # second); on the CPU a missing torch is the harness's to report.
    if device_type == "cuda" and not _cuda_available():
        raise VerifyError(
            EXIT_NOTHING,
            "nothing to verify: the rewrite uses CUDA autocast, and this machine has no "
            "CUDA device, so AMP would be inactive; on a CPU, check parity with "
            "--device-type cpu --dtype bfloat16",
        )
    with tempfile.TemporaryDirectory(prefix="amplint-verify-") as scratch:
        workdir = Path(scratch)
        baseline = run_child("baseline", original, request, progress, workdir)
        amp = run_child("AMP", fixed, request, progress, workdir)
    _require_active_amp(baseline, amp, request, applied)
    problems = []
    for name, run in (("baseline", baseline), ("AMP", amp)):
        if run["finished"] == "script" and run["steps"] < request.thresholds.steps:
            problems.append(
                f"the {name} run ended after {run['steps']} of {request.thresholds.steps} steps"
            )
    speed_meaningful = device_type == "cuda" and baseline["cuda_available"]
    comparison = Comparison(baseline, amp, request.thresholds, speed_meaningful, problems)
    device = baseline["device"] if device_type == "cuda" else device_type
    # What the AMP run trained under, which need not be what was asked for.
    dtypes = sorted({autocast.split()[1] for autocast in active_autocast(amp)})
    return Outcome(comparison, applied, device, ", ".join(dtypes) or dtype, speed_meaningful)


def _require_active_amp(baseline: dict, amp: dict, request: Request, applied: list[str]) -> None:
    """VerifyError 3 when the rewrite's AMP never switched on: two FP32 runs
    agree, and "passed" would say nothing.  A migrated script keeps the device
    it names (torch.cuda.amp -> torch.amp "cuda"), whatever --device-type says."""
    inactive = inactive_amp(amp)
    if inactive is None:
        return
    if inactive_amp(baseline) is None:
        raise VerifyError(
            EXIT_FAILED, f"the rewrite turned AMP off: the AMP run trained in FP32 ({inactive})"
        )
    message = f"nothing to verify: AMP was inactive in both runs (in the rewrite, {inactive})"
    settings = request.settings
    asked = {settings.device_type}
    regions = {region["device"] for region in amp.get("autocast", ())}
    if regions and not regions & asked:
        codes = ", ".join(sorted({change.split()[0] for change in applied}))
        message += (
            f"; --device-type {settings.device_type} and --dtype {settings.dtype} shape only the "
            f"autocast amplint adds, and this rewrite ({codes}) keeps the device the script names"
        )
    raise VerifyError(EXIT_NOTHING, message)


def _cuda_available() -> bool:
    """Asked of a child: importing torch here would cost the parent a second."""
    probe = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        raise VerifyError(EXIT_ERROR, NEEDS_TORCH)
    return probe.stdout.strip() == "True"
