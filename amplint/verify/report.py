"""The table and verdict `amplint verify` prints."""

from __future__ import annotations

import math
from pathlib import Path

import click

from amplint.verify.runs import Outcome


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f} ms"


def _mib(size: int | None) -> str:
    return "-" if size is None else f"{size / 2**20:.0f} MiB"


def _loss(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _tf32_line(settings: dict) -> str:
    matmul = "on" if settings["matmul_allow_tf32"] else "off"
    cudnn = "on" if settings["cudnn_allow_tf32"] else "off"
    return f"TF32 matmul {matmul} (precision {settings['matmul_precision']}), cuDNN TF32 {cudnn}"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _times(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


_BARS = "▁▂▃▄▅▆▇█"


def sparklines(series: list[list], width: int = 40) -> list[str]:
    """One line of bars per series, on one scale shared by all of them (so
    two runs' losses compare at a glance), at most `width` bars: each the
    mean of the steps it stands for.  A NaN or inf is `!`."""
    resampled = []
    for values in series:
        numbers = [float(value) for value in values]
        buckets = max(1, min(width, len(numbers)))
        bars = []
        for bucket in range(buckets):
            part = numbers[
                bucket * len(numbers) // buckets : (bucket + 1) * len(numbers) // buckets
            ]
            bars.append(sum(part) / len(part) if part else math.nan)
        resampled.append(bars)
    finite = [value for bars in resampled for value in bars if math.isfinite(value)]
    low, high = (min(finite), max(finite)) if finite else (0.0, 0.0)
    span = high - low or 1.0
    return [
        "".join(
            (
                _BARS[min(len(_BARS) - 1, int((value - low) / span * len(_BARS)))]
                if math.isfinite(value)
                else "!"
            )
            for value in bars
        )
        for bars in resampled
    ]


def environment_line(environment: dict) -> str:
    """`NVIDIA H100 80GB HBM3 (sm 9.0, bfloat16 native), CUDA 12.8, cuDNN 91002, driver 12080`."""
    native = "bfloat16 native" if environment.get("bf16_native") else "bfloat16 emulated"
    parts = [
        f"{environment['gpu']} (sm {environment.get('capability')}, {native})",
        f"CUDA {environment.get('cuda')}",
        f"cuDNN {environment.get('cudnn')}",
    ]
    if environment.get("driver") is not None:
        parts.append(f"driver {environment['driver']}")
    if environment.get("cudnn_benchmark"):
        parts.append("cudnn.benchmark on")
    if environment.get("compiled"):
        parts.append("torch.compile in use")
    return ", ".join(parts)


def text_report(script: Path, outcome: Outcome) -> list[str]:
    comparison = outcome.comparison
    thresholds = comparison.thresholds
    base, amp, tf32 = comparison.baseline, comparison.amp, comparison.tf32
    ranks = len(base)
    lines = [
        f"amplint verify {script}: {outcome.device}, {outcome.dtype}, {thresholds.steps} steps "
        f"(timed after {thresholds.warmup}), torch {base[0].get('torch')}"
        + (f", {ranks} ranks (times: the slowest rank's; losses: rank 0's)" if ranks > 1 else ""),
    ]
    if base[0].get("cuda_available"):  # TF32 changes what FP32 means, on CUDA only
        environment = base[0].get("environment") or {}
        if "gpu" in environment:
            lines.append(f"  {environment_line(environment)}")
        lines.append(f"  {_tf32_line(base[0]['settings'])}")
    lines += [
        "  rewrite: " + "; ".join(outcome.applied),
        *(f"  note: {note}" for note in outcome.notes),
        "",
    ]
    columns = [("baseline", base), ("AMP", amp)] + ([("FP32+TF32", tf32)] if tf32 else [])

    def row(label: str, cells: list[str], after: str = "") -> str:
        return f"  {label:<22}" + "".join(f"{cell:>12}" for cell in cells) + after

    lines.append(row("", [name for name, _ in columns]))
    speed = f"speedup {_times(comparison.speedup)}"
    if tf32:
        speed += f" (TF32 alone: {_times(comparison.tf32_speedup)})"
    if not outcome.speed_meaningful:
        speed += " (not meaningful: no CUDA)"
    lines.append(
        row("median step", [_ms(comparison.median(runs)) for _, runs in columns], f"   {speed}")
    )
    samples = comparison.samples_per_step
    if samples is not None:
        unit = "tokens/s" if comparison.seq_len else "samples/s"
        lines.append(
            row(
                "throughput",
                [_rate(comparison.throughput(runs)) for _, runs in columns],
                f"   {unit}, {samples[0]} samples a step ({samples[1]})",
            )
        )
    if comparison.repeats:
        rounds = len(next(iter(comparison.repeats.values())))
        lines.append(
            row(
                "IQR over rounds",
                [_ms(comparison.spread(runs)) for _, runs in columns],
                f"   {rounds} rounds, interleaved",
            )
        )
    lines.append(
        row(
            "peak memory",
            [_mib(comparison.peak(runs)) for _, runs in columns],
            f"   ratio {'-' if comparison.mem_ratio is None else f'{comparison.mem_ratio:.2f}'}"
            " (allocated, after the warm-up)",
        )
    )
    reserved = [comparison.peak(runs, "peak_reserved_bytes") for _, runs in columns]
    if any(value is not None for value in reserved):
        lines.append(row("reserved memory", [_mib(value) for value in reserved]))
    gap = "-" if comparison.loss_gap is None else f"{comparison.loss_gap:.2%}"
    if ranks > 1:
        gap += (
            " (largest of "
            + ", ".join(
                "-" if rank_gap is None else f"{rank_gap:.2%}" for rank_gap in comparison.rank_gaps
            )
            + ")"
        )
    if comparison.matched:
        gap += " (AMP against the FP32 run below)"
    floor = comparison.noise_floor
    if floor is not None and comparison.calibrated_by:
        gap += f" (noise floor {floor:.2%}: {comparison.calibrated_by})"
    lines.append(
        row(
            f"mean loss (last {thresholds.last})",
            [_loss(comparison.mean_last_loss(runs)) for _, runs in columns],
            f"   gap {gap}",
        )
    )
    if comparison.matched:
        lines.append(
            row(
                "FP32, AMP's skips",
                ["", _loss(comparison.mean_last_loss(comparison.matched))],
                f"   {comparison.matched_run}: parity's reference",
            )
        )
    lines.append(row("skipped steps", [str(runs[0]["skipped_steps"]) for _, runs in columns]))
    curves = sparklines([runs[0]["losses"] for _, runs in columns])
    for (name, _), curve in zip(columns, curves):
        lines.append(f"  {'loss, ' + name:<22}{curve}")
    parity = comparison.update_parity()
    band, compared = parity.band, parity.steps_compared
    inside = compared - parity.steps_outside
    lines.append(
        row(
            "updates within band",
            ["", f"{inside} of {compared}"],
            f"   band {1 / band:.3g}x-{band:.3g}x of the "
            + ("FP32 run's (AMP's skips)" if comparison.matched else "baseline's")
            + " gradients and updates",
        )
    )
    lines.append("")
    if comparison.inconclusive:
        verdict = click.style("inconclusive", fg="yellow", bold=True)
        lines.append(f"verdict: {verdict} ({comparison.inconclusive}: nothing to compare AMP with)")
    elif comparison.passed:
        verdict = click.style("passed", fg="green", bold=True)
        lines.append(
            f"verdict: {verdict} (loss within {thresholds.rtol:.1%}; every update within the band)"
        )
    else:
        lines.append(f"verdict: {click.style('failed', fg='red', bold=True)}")
        lines += [f"  - {reason}" for reason in comparison.reasons()]
    return lines
