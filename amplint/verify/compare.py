"""Two measured runs in, figures and a verdict out (no torch, no processes)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Thresholds:
    steps: int
    warmup: int  # steps left out of the timing
    last: int  # steps whose mean loss is compared
    rtol: float
    min_speedup: float | None


def default_warmup(steps: int) -> int:
    """10 steps, or a fifth of a short run: enough for cuDNN autotuning and the
    allocator to settle, while leaving steps to time."""
    return max(1, min(10, steps // 5))


def default_last(steps: int) -> int:
    return max(1, min(10, steps // 2))


def _losses(run: dict) -> list[float]:
    return [float(loss) for loss in run["losses"]]  # "nan" / "inf" come back as strings


def _losses_per_update(run: dict) -> list[float]:
    """The run's losses without those of the steps its scaler skipped: the k-th
    is the loss before the k-th update of the parameters.  A GradScaler skips
    its first steps while it lowers its scale from 65536; compared step by step,
    an AMP run of a fast-falling loss would look a few steps behind."""
    skipped = set(run.get("skipped_at", ()))
    return [loss for index, loss in enumerate(_losses(run)) if index not in skipped]


def active_autocast(run: dict) -> list[str]:
    """The autocast the run trained under: "cpu bfloat16", ..."""
    return [
        f"{region['device']} {region['dtype']}"
        for region in run.get("autocast", ())
        if region["enabled"]
    ]


def inactive_amp(run: dict) -> str | None:
    """Why the run trained without AMP (no autocast region and no GradScaler
    enabled), in words; None when AMP was on."""
    regions, scalers = run.get("autocast", ()), run.get("scalers", ())
    if any(region["enabled"] for region in regions) or any(s["enabled"] for s in scalers):
        return None
    disabled = [f"autocast ({region['device']}, {region['dtype']})" for region in regions]
    disabled += [f"GradScaler ({scaler['device']})" for scaler in scalers]
    if not disabled:
        return "no autocast region was entered and no GradScaler made"
    devices = {region["device"] for region in regions} | {scaler["device"] for scaler in scalers}
    no_cuda = "cuda" in devices and not run["cuda_available"]
    why = ", as this machine has no CUDA device" if no_cuda else ""
    return f"{' and '.join(disabled)} {'was' if len(disabled) == 1 else 'were'} disabled{why}"


def median_step_s(run: dict, warmup: int) -> float | None:
    # step_times_s[i] is the time from step i to step i+1 (the first step's
    # start is the script's start, import and set-up included: never timed).
    times = run["step_times_s"][max(0, warmup - 1) :]
    return statistics.median(times) if times else None


@dataclass
class Comparison:
    baseline: dict
    amp: dict
    thresholds: Thresholds
    speed_meaningful: bool
    problems: list[str] = field(default_factory=list)

    @property
    def baseline_median(self) -> float | None:
        return median_step_s(self.baseline, self.thresholds.warmup)

    @property
    def amp_median(self) -> float | None:
        return median_step_s(self.amp, self.thresholds.warmup)

    @property
    def speedup(self) -> float | None:
        base, amp = self.baseline_median, self.amp_median
        return base / amp if base and amp else None

    @property
    def mem_ratio(self) -> float | None:
        base, amp = self.baseline.get("peak_mem_bytes"), self.amp.get("peak_mem_bytes")
        return amp / base if base and amp else None

    def last_losses(self, run: dict) -> list[float]:
        """The run's losses over the last updates both runs made."""
        updates = min(len(_losses_per_update(self.baseline)), len(_losses_per_update(self.amp)))
        return _losses_per_update(run)[:updates][-self.thresholds.last :]

    def mean_last_loss(self, run: dict) -> float | None:
        losses = self.last_losses(run)
        return sum(losses) / len(losses) if losses else None

    @property
    def finite(self) -> bool:
        return all(
            math.isfinite(loss)
            for run in (self.baseline, self.amp)
            for loss in self.last_losses(run)
        )

    @property
    def loss_gap(self) -> float | None:
        """|amp - baseline| / |baseline| of the mean loss over the last steps."""
        base, amp = self.mean_last_loss(self.baseline), self.mean_last_loss(self.amp)
        if base is None or amp is None or not self.finite:
            return None
        return abs(amp - base) / max(abs(base), 1e-12)

    @property
    def parity_ok(self) -> bool:
        gap = self.loss_gap
        return gap is not None and gap <= self.thresholds.rtol

    @property
    def speed_ok(self) -> bool:
        wanted = self.thresholds.min_speedup
        return wanted is None or (self.speedup is not None and self.speedup >= wanted)

    @property
    def passed(self) -> bool:
        return self.parity_ok and self.speed_ok and not self.problems

    def reasons(self) -> list[str]:
        """Why it did not pass, one line each."""
        reasons = list(self.problems)
        if not self.finite:
            runs = [
                name
                for name, run in (("baseline", self.baseline), ("AMP", self.amp))
                if not all(math.isfinite(loss) for loss in self.last_losses(run))
            ]
            reasons.append(f"the {' and '.join(runs)} loss is not finite (NaN or inf)")
        elif not self.parity_ok and self.loss_gap is not None:
            reasons.append(
                f"loss parity: the AMP run's mean loss over the last {self.thresholds.last} "
                f"updates differs from the baseline's by {self.loss_gap:.1%} "
                f"(allowed: {self.thresholds.rtol:.1%}, --rtol)"
            )
        if not self.speed_ok:
            shown = "unknown" if self.speedup is None else f"{self.speedup:.2f}x"
            reasons.append(f"speedup {shown} is below --min-speedup {self.thresholds.min_speedup}")
        return reasons

    def as_json(self, device: str, dtype: str) -> dict:
        def run_summary(run: dict) -> dict:
            return {
                "median_step_s": median_step_s(run, self.thresholds.warmup),
                "peak_mem_bytes": run.get("peak_mem_bytes"),
                "losses": run["losses"],
                "skipped_steps": run["skipped_steps"],
                "steps": run["steps"],
                "loss_scale": run.get("loss_scale"),
            }

        return {
            "device": device,
            "dtype": dtype,
            "steps": self.thresholds.steps,
            "warmup": self.thresholds.warmup,
            "torch": self.baseline.get("torch"),
            "settings": self.baseline.get("settings"),
            "baseline": run_summary(self.baseline),
            "amp": run_summary(self.amp),
            "speedup": self.speedup,
            "speed_meaningful": self.speed_meaningful,
            "mem_ratio": self.mem_ratio,
            "loss_gap": self.loss_gap,
            "parity_ok": self.parity_ok,
            "passed": self.passed,
            "problems": self.reasons(),
        }
