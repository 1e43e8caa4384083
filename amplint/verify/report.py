"""The table and verdict `amplint verify` prints."""

from __future__ import annotations

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


def text_report(script: Path, outcome: Outcome) -> list[str]:
    comparison = outcome.comparison
    thresholds = comparison.thresholds
    base, amp = comparison.baseline, comparison.amp
    lines = [
        f"amplint verify {script}: {outcome.device}, {outcome.dtype}, {thresholds.steps} steps "
        f"(timed after {thresholds.warmup}), torch {base.get('torch')}",
    ]
    if base.get("cuda_available"):  # TF32 changes what FP32 means, on CUDA only
        lines.append(f"  {_tf32_line(base['settings'])}")
    lines += [
        "  rewrite: " + "; ".join(outcome.applied),
        "",
        f"  {'':<22}{'baseline':>12}{'AMP':>12}",
    ]
    speed = "-" if comparison.speedup is None else f"{comparison.speedup:.2f}x"
    if not outcome.speed_meaningful:
        speed += " (not meaningful: no CUDA)"
    lines.append(
        f"  {'median step':<22}{_ms(comparison.baseline_median):>12}"
        f"{_ms(comparison.amp_median):>12}   speedup {speed}"
    )
    ratio = "-" if comparison.mem_ratio is None else f"{comparison.mem_ratio:.2f}"
    lines.append(
        f"  {'peak memory':<22}{_mib(base.get('peak_mem_bytes')):>12}"
        f"{_mib(amp.get('peak_mem_bytes')):>12}   ratio {ratio}"
    )
    gap = "-" if comparison.loss_gap is None else f"{comparison.loss_gap:.2%}"
    lines.append(
        f"  {f'mean loss (last {thresholds.last})':<22}"
        f"{_loss(comparison.mean_last_loss(base)):>12}"
        f"{_loss(comparison.mean_last_loss(amp)):>12}   gap {gap}"
    )
    lines.append(f"  {'skipped steps':<22}{base['skipped_steps']:>12}{amp['skipped_steps']:>12}")
    lines.append("")
    if comparison.passed:
        verdict = click.style("passed", fg="green", bold=True)
        lines.append(f"verdict: {verdict} (loss within {thresholds.rtol:.1%})")
    else:
        lines.append(f"verdict: {click.style('failed', fg='red', bold=True)}")
        lines += [f"  - {reason}" for reason in comparison.reasons()]
    return lines
