"""The parent side of `amplint verify`: run the script and its rewrite under
the harness in child processes (under torchrun for several ranks), a third
run with TF32 on CUDA, and compare what they measured."""

from __future__ import annotations

import json
import os
import re
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
from amplint.verify import EXIT_ERROR, EXIT_FAILED, EXIT_NOTHING, VerifyError
from amplint.verify.compare import (
    Comparison,
    Thresholds,
    active_autocast,
    inactive_amp,
    slowest_median,
    untrained,
)
from amplint.verify.harness import HARNESS_ERROR, NEEDS_TORCH
from amplint.verify.rewrite import Rewrite, listed, rewritten, unrewritten_imports

STDERR_TAIL_LINES = 20
# The seed of the run that calibrates update parity (the others run with 0).
CALIBRATION_SEED = 1


@dataclass(frozen=True)
class Request:
    """What one `amplint verify` run compares."""

    script: Path
    script_args: Sequence[str]
    settings: Settings
    unsafe: bool
    thresholds: Thresholds
    timeout_s: float
    # Project files and directories rewritten too: the modules the script imports.
    rewrite_paths: Sequence[Path] = ()
    nproc_per_node: int = 1  # more than one: each run is launched by torchrun
    tf32_run: bool = True  # on CUDA, a third run: the original with TF32 matmuls
    # What `amplint fix` would use with the user's configuration alone (no
    # --device-type / --dtype given to verify); None: the same as `settings`.
    fix_settings: Settings | None = None
    # Rounds of timing runs (--repeat): FP32, AMP, TF32, FP32, AMP, ...
    repeat: int = 1
    batch_size: int | None = None  # samples per step, for the throughput
    seq_len: int | None = None  # tokens per sample


# Told (run name, steps done, steps wanted) while a child runs.
Progress = Callable[[str, int, int], None]


def run_child(
    name: str,
    text: str,
    request: Request,
    progress: Progress | None,
    workdir: Path,
    modules: dict[Path, str] | None = None,
    harness_options: Sequence[str] = (),
) -> list[dict]:
    """Run `text` as the script under the harness (under torchrun with
    --nproc-per-node), with `modules` (real path -> text) imported in place of
    those files; what each rank measured, or VerifyError naming the run when
    it crashed, hung or measured nothing."""
    source = workdir / f"{name}.py"
    source.write_text(text, encoding="utf-8")
    options = list(harness_options)
    if modules:
        modules_map = workdir / f"{name}.modules.json"
        texts = {}
        for number, (path, module_text) in enumerate(sorted(modules.items())):
            texts[str(path)] = str(workdir / f"{name}.module{number}.py")
            Path(texts[str(path)]).write_text(module_text, encoding="utf-8")
        modules_map.write_text(json.dumps(texts), encoding="utf-8")
        options += ["--rewritten", str(modules_map)]
    ranks = request.nproc_per_node
    out, progress_file = workdir / f"{name}.rank{{rank}}.json", workdir / f"{name}.progress"
    stdout, stderr = workdir / f"{name}.stdout", workdir / f"{name}.stderr"
    launcher = [sys.executable]
    rank_logs = workdir / f"{name}.ranks"
    if ranks > 1:  # torch's own launcher: RANK, WORLD_SIZE, a rendezvous on a free port
        launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
        # Each rank's stderr in a file of its own: the launcher's stderr ends
        # with its summary of the failure, which would push the rank's
        # traceback out of the tail shown.
        launcher += ["--log-dir", str(rank_logs), "--redirects", "2"]
    command = [
        *launcher,
        "-m",
        "amplint.verify.harness",
        "--source",
        str(source),
        "--script",
        str(request.script.resolve()),
        "--steps",
        str(request.thresholds.steps),
        "--warmup",
        str(request.thresholds.warmup),
        "--out",
        str(out),
        "--progress",
        str(progress_file),
        *options,
        "--",
        *request.script_args,
    ]
    package_root = str(Path(amplint.__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    if request.settings.device_type == "cpu":
        # Verified where it was asked to be: a script that picks CUDA when it
        # sees it would otherwise train on the GPU, where the rewrite's CPU
        # autocast casts nothing.
        env["CUDA_VISIBLE_DEVICES"] = ""
    with open(stdout, "wb") as out_handle, open(stderr, "wb") as err_handle:
        child = subprocess.Popen(
            command,
            cwd=request.script.resolve().parent,
            env=env,
            stdout=out_handle,
            stderr=err_handle,
            start_new_session=True,  # its DataLoader workers and torchrun's ranks die with it
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
        raise VerifyError(EXIT_ERROR, "the harness could not start:", tail)
    reports: list[dict | None] = []
    for rank in range(ranks):
        try:
            reports.append(json.loads(Path(str(out).format(rank=rank)).read_text("utf-8")))
        except (OSError, ValueError):
            reports.append(None)

    def rank_failed(rank: int, message: str) -> VerifyError:
        logs = sorted(rank_logs.glob(f"**/{rank}/stderr.log")) if ranks > 1 else []
        return VerifyError(
            EXIT_FAILED,
            f"{_run_name(name, rank, ranks)} {message}",
            _tail(logs[-1] if logs else stderr),
        )

    # A rank that crashed by itself first: the launcher then stops the others,
    # which end without a report.
    for rank, result in enumerate(reports):
        if result is not None and result["exit_status"] != 0:
            raise rank_failed(
                rank,
                f"crashed (exit status {result['exit_status']}) after "
                f"{result['steps']} of {request.thresholds.steps} steps:",
            )
    for rank, result in enumerate(reports):
        if result is None:
            how = (
                f"was killed by signal {-child.returncode}"
                if child.returncode < 0
                else f"exited with status {child.returncode}"
            )
            raise rank_failed(rank, f"{how} before reporting:")
        if result["steps"] == 0:
            raise VerifyError(
                EXIT_NOTHING,
                f"nothing to verify: {_run_name(name, rank, ranks)} ended without an optimizer step",
            )
    return reports


def _run_name(name: str, rank: int, ranks: int) -> str:
    """ "the AMP run", or "rank 1 of the AMP run" under torchrun."""
    return f"the {name} run" if ranks == 1 else f"rank {rank} of the {name} run"


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
    """What `amplint verify` found: the comparison and what it should say with it."""

    comparison: Comparison
    applied: list[str]
    device: str
    dtype: str
    speed_meaningful: bool
    notes: list[str]  # what the user should know about what was compared


def verify(request: Request, progress: Progress | None = None) -> Outcome:
    rewrite = rewritten(request.script, request.settings, request.unsafe, request.rewrite_paths)
    device_type = request.settings.device_type
    dtype = request.settings.dtype
    # Only a CUDA rewrite needs the probe (a second torch import, about a
    # second); on the CPU a missing torch is the harness's to report.
    devices = _cuda_devices() if device_type == "cuda" else 0
    if device_type == "cuda" and not devices:
        raise VerifyError(
            EXIT_NOTHING,
            "nothing to verify: the rewrite uses CUDA autocast, and this machine has no "
            "CUDA device, so AMP would be inactive; on a CPU, check parity with "
            "--device-type cpu --dtype bfloat16",
        )
    if device_type == "cuda" and request.nproc_per_node > devices:
        raise VerifyError(
            EXIT_ERROR,
            f"--nproc-per-node {request.nproc_per_node} starts a process per GPU, and this "
            f"machine has {devices} CUDA device{'s' if devices > 1 else ''}: use "
            f"--nproc-per-node {devices} or fewer",
        )
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="amplint-verify-") as scratch:
        workdir = Path(scratch)
        before = files_in(request.script.resolve().parent)
        baseline = run_child("baseline", rewrite.original, request, progress, workdir)
        written = _written_by_baseline(request.script.resolve().parent, before)
        notes += written
        try:
            amp = run_child("AMP", rewrite.script, request, progress, workdir, rewrite.modules)
        except VerifyError as error:  # perhaps from reading what the baseline wrote
            error.detail += "".join(f"\nnote: {note}" for note in written)
            raise
        notes += _imported_rewrites(rewrite, amp[0])
        _require_active_amp(baseline[0], amp[0], request, rewrite.codes)
        tf32: list[dict] = []
        on_cuda = device_type == "cuda" and baseline[0]["cuda_available"]
        if request.tf32_run and on_cuda:
            if baseline[0]["settings"]["matmul_allow_tf32"]:
                notes.append("no TF32 run: the script turns TF32 matmuls on itself")
            else:
                tf32 = run_child(
                    "TF32", rewrite.original, request, progress, workdir, harness_options=["--tf32"]
                )
        # Update parity's band is set by how far a run of the original that
        # AMP has nothing to do with strays from the baseline: the TF32 run,
        # or else one seeded differently.
        calibration, calibrated_by = tf32, "the TF32 run"
        if not calibration:
            calibration, calibrated_by = (
                run_child(
                    "calibration",
                    rewrite.original,
                    request,
                    progress,
                    workdir,
                    harness_options=["--seed", str(CALIBRATION_SEED)],
                ),
                "an FP32 run with another seed",
            )
        # Loss and update parity hold the AMP run to an FP32 run that skips
        # the steps its GradScaler skipped: a skipped step changes what
        # follows (RMSprop's first update is as large as any; a GAN's critic
        # one update behind moves the generator's losses), which is neither a
        # divergence nor a thing a divergence may hide behind.
        matched: list[dict] = []
        plan = amp[0].get("skipped_calls") or {}
        if plan and untrained(amp[0], baseline[0]) is None:
            matched = run_child(
                "FP32 skipping the same steps",
                rewrite.original,
                request,
                progress,
                workdir,
                harness_options=["--skip-steps", json.dumps(plan)],
            )
        repeats = _repeated(request, rewrite, progress, workdir, bool(tf32), [baseline, amp, tf32])
    fixable, _ = unrewritten_imports(
        request.script, request.settings, request.unsafe, rewrite.covered
    )
    if fixable:
        notes.append(
            "not rewritten, though the script imports them and fix would change them: "
            f"{listed(fixable)} (add --rewrite)"
        )
    baseline_losses = {str(loss) for loss in baseline[0]["losses"]}
    if len(baseline_losses) == 1:  # pytorch/examples' DDP tutorial: cross-entropy of one class
        notes.append(
            f"the baseline's loss is {baseline_losses.pop()} at every step: parity says little here"
        )
    problems = []
    for name, runs in (("baseline", baseline), ("AMP", amp), ("TF32", tf32)):
        for rank, run in enumerate(runs):
            if run["finished"] == "script" and run["steps"] < request.thresholds.steps:
                problems.append(
                    f"{_run_name(name, rank, len(runs))} ended after {run['steps']} of "
                    f"{request.thresholds.steps} steps"
                )
    comparison = Comparison(
        baseline,
        amp,
        request.thresholds,
        on_cuda,
        problems,
        tf32,
        calibration,
        calibrated_by,
        repeats,
        request.batch_size,
        request.seq_len,
        matched,
    )
    notes += _warnings(request, comparison, baseline[0])
    device = baseline[0]["device"] if device_type == "cuda" else device_type
    # What the AMP run trained under, which need not be what was asked for.
    dtypes = sorted({autocast.split()[1] for autocast in active_autocast(amp[0])})
    dtype = ", ".join(dtypes) or dtype
    return Outcome(comparison, rewrite.applied, device, dtype, on_cuda, notes)


def _repeated(request, rewrite, progress, workdir, with_tf32: bool, first: list) -> dict:
    """With --repeat K: K - 1 more rounds of the timing runs, interleaved
    (FP32, AMP, TF32, FP32, ...), and every round's median step time per run;
    {} without."""
    if request.repeat <= 1:
        return {}
    kinds = [("baseline", rewrite.original, None, ()), ("AMP", rewrite.script, rewrite.modules, ())]
    if with_tf32:
        kinds.append(("TF32", rewrite.original, None, ("--tf32",)))
    warmup = request.thresholds.warmup
    rounds = {name: [slowest_median(runs, warmup)] for (name, *_), runs in zip(kinds, first)}
    for round_ in range(2, request.repeat + 1):
        for name, text, modules, options in kinds:
            runs = run_child(
                f"{name}, round {round_}",
                text,
                request,
                progress,
                workdir,
                modules,
                harness_options=list(options),
            )
            rounds[name].append(slowest_median(runs, warmup))
    return {name: medians for name, medians in rounds.items() if None not in medians}


# The release whose `fp32_precision` settings replace allow_tf32 and
# set_float32_matmul_precision (the CUDA notes, "TensorFloat-32 (TF32) on Ampere
# (and later) devices").
FP32_PRECISION_SINCE = (2, 9)


def tf32_switch(torch_version: str) -> str:
    """How to turn TF32 matmuls on, in the API of the torch the runs used."""
    numbers = re.match(r"(\d+)\.(\d+)", torch_version)
    if numbers is None or tuple(map(int, numbers.groups())) < FP32_PRECISION_SINCE:
        return '`torch.set_float32_matmul_precision("high")`'
    # torch 2.13 raises when a legacy getter reads what the new setter set.
    return (
        '`torch.backends.cuda.matmul.fp32_precision = "tf32"` (not mixed with the legacy '
        "`allow_tf32` / `set_float32_matmul_precision`, which torch refuses to read after it)"
    )


def _warnings(request: Request, comparison: Comparison, baseline: dict) -> list[str]:
    """What makes the figures say less than they seem to: AMP slower than what
    it is compared with, AMP on both sides, or a rewrite other than the one
    `fix` writes."""
    found = []
    speedup, tf32_speedup = comparison.speedup, comparison.tf32_speedup
    if comparison.speed_meaningful and speedup is not None and speedup < 1:
        found.append(f"the AMP run was slower than the baseline ({speedup:.2f}x)")
    elif comparison.speed_meaningful and speedup and tf32_speedup and tf32_speedup > speedup:
        found.append(
            f"the AMP run was slower than FP32 with TF32 ({speedup:.2f}x against "
            f"{tf32_speedup:.2f}x): TF32 alone is the better switch for this script, "
            f"{tf32_switch(baseline.get('torch', ''))}"
        )
    if comparison.timing_noise:
        found.append(comparison.timing_noise)
    if inactive_amp(baseline) is None:
        found.append(
            "the original already trains under autocast or a GradScaler: this compares "
            "AMP with AMP"
        )
    fix = request.fix_settings
    verified = (request.settings.device_type, request.settings.dtype)
    if fix is not None and (fix.device_type, fix.dtype) != verified:
        found.append(
            f"verified the rewrite for --device-type {verified[0]} --dtype {verified[1]}; "
            f"`amplint fix` with this configuration writes the one for {fix.device_type} and "
            f"{fix.dtype}, which this run did not check"
        )
    return found


# How much of the script's directory is looked at for what the baseline wrote.
FILES_SEEN_DEPTH, FILES_SEEN_MAX = 3, 5000


def files_in(directory: Path) -> dict[str, int] | None:
    """Each file's modification time under `directory`, a few levels deep
    (relative path -> st_mtime_ns); None where there are too many to list."""
    found: dict[str, int] = {}
    for root, subdirectories, files in os.walk(directory):
        depth = len(Path(root).relative_to(directory).parts)
        subdirectories[:] = [
            d
            for d in subdirectories
            if depth < FILES_SEEN_DEPTH and not d.startswith(".") and d != "__pycache__"
        ]
        for name in files:
            path = os.path.join(root, name)
            try:
                found[os.path.relpath(path, directory)] = os.stat(path).st_mtime_ns
            except OSError:
                continue
            if len(found) > FILES_SEEN_MAX:
                return None
    return found


def _written_by_baseline(directory: Path, before: dict[str, int] | None) -> list[str]:
    """A note naming the files the baseline run wrote where the AMP run, started
    from the same directory, can read them: a script that resumes from its
    latest checkpoint would not start the AMP run from scratch."""
    after = files_in(directory) if before is not None else None
    if after is None:
        return []
    written = sorted(path for path, mtime in after.items() if before.get(path) != mtime)
    if not written:
        return []
    shown = ", ".join(written[:3]) + (f" and {len(written) - 3} more" if len(written) > 3 else "")
    return [
        f"the baseline run wrote {shown} beside the script; if the script resumes from what "
        "it wrote, the AMP run did not start from scratch"
    ]


def _imported_rewrites(rewrite: Rewrite, amp: dict) -> list[str]:
    """A note for each rewritten module the AMP run never imported, or
    VerifyError 3 when it ran none of the rewrite."""
    loaded = set(amp.get("rewritten_loaded", ()))
    unused = [rewrite.shown[path] for path in rewrite.modules if str(path) not in loaded]
    if not unused:
        return []
    if rewrite.script == rewrite.original and len(unused) == len(rewrite.modules):
        raise VerifyError(
            EXIT_NOTHING,
            f"nothing to verify: the script is unchanged and the AMP run imported none of the "
            f"rewritten modules ({', '.join(unused)}), so both runs ran the same code",
        )
    return [f"rewritten, but never imported by the AMP run: {', '.join(unused)}"]


def _require_active_amp(baseline: dict, amp: dict, request: Request, codes: list[str]) -> None:
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
        message += (
            f"; --device-type {settings.device_type} and --dtype {settings.dtype} shape only the "
            f"autocast amplint adds, and this rewrite ({', '.join(codes)}) keeps the device the "
            "script names"
        )
    raise VerifyError(EXIT_NOTHING, message)


def _cuda_devices() -> int:
    """How many CUDA devices torch sees (0 without CUDA).  Asked of a child:
    importing torch here would cost the parent a second."""
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)",
        ],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        raise VerifyError(EXIT_ERROR, NEEDS_TORCH)
    return int(probe.stdout.strip() or 0)
