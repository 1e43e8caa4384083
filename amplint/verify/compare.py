"""Two measured runs in, figures and a verdict out (no torch, no processes)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Thresholds:
    """What verify's comparison of two runs passes."""

    steps: int
    warmup: int  # steps left out of the timing
    last: int  # steps whose mean loss is compared
    rtol: float
    min_speedup: float | None
    # Losses within this of each other pass whatever their ratio: a loss near
    # zero makes any relative gap large.
    atol: float = 0.0


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
        if region["enabled"] and _on_parameters_device(region, run)
    ]


def _on_parameters_device(region: dict, run: dict) -> bool:
    """Whether an autocast region is for a device the optimizers' parameters
    live on: autocast changes only the operations of its own device, so a CPU
    autocast around a model on CUDA casts nothing (torch says nothing of it)."""
    devices = run.get("parameter_devices")
    return not devices or region["device"] in devices


def inactive_amp(run: dict) -> str | None:
    """Why the run trained without AMP (no autocast region on the parameters'
    device and no GradScaler enabled), in words; None when AMP was on."""
    regions, scalers = run.get("autocast", ()), run.get("scalers", ())
    if active_autocast(run) or any(s["enabled"] for s in scalers):
        return None
    if not regions and not scalers:
        return "no autocast region was entered and no GradScaler made"
    elsewhere = [region for region in regions if region["enabled"]]
    if elsewhere:
        shown = " and ".join(f"autocast ({r['device']}, {r['dtype']})" for r in elsewhere)
        devices = ", ".join(run["parameter_devices"])
        return (
            f"{shown} {'was' if len(elsewhere) == 1 else 'were'} on, but the optimizer's "
            f"parameters are on {devices}, whose operations it does not cast"
        )
    # Turned off by the script's own `enabled=False` (`asked` False), or by
    # torch: a CUDA autocast or GradScaler on a machine without CUDA.
    by_script, by_torch = [], []
    for shown, made in [
        *((f"autocast ({region['device']}, {region['dtype']})", region) for region in regions),
        *((f"GradScaler ({scaler['device']})", scaler) for scaler in scalers),
    ]:
        (by_torch if made.get("asked", True) else by_script).append(shown)
    parts = []
    if by_script:
        verb = "was" if len(by_script) == 1 else "were"
        parts.append(f"{' and '.join(by_script)} {verb} disabled by the script (enabled=False)")
    if by_torch:
        devices = {made["device"] for made in [*regions, *scalers] if made.get("asked", True)}
        no_cuda = "cuda" in devices and not run["cuda_available"]
        why = ", as this machine has no CUDA device" if no_cuda else ""
        verb = "was" if len(by_torch) == 1 else "were"
        parts.append(f"{' and '.join(by_torch)} {verb} disabled{why}")
    return "; ".join(parts)


# Update parity: the AMP run's optimizer must receive what the baseline's did.
# A factor both ways around 1 within which the gradient norm, the largest
# gradient and the update norm of each group must stay, step by step: twice
# the widest disagreement between the baseline and a calibration run that
# differs from it in nothing AMP touches (another seed, or TF32), at least
# MIN_BAND (float16 rounding moves early steps by a few percent), at most
# MAX_BAND: a gradient left multiplied or divided by a loss scale is off by a
# power of two far above it (65536 at first; the scale of a short run rarely
# falls below 2**10).
MIN_BAND, MAX_BAND = 4.0, 64.0
UPDATE_FIGURES = {
    "grad_norm": "gradient norm",
    "grad_max": "largest |gradient|",
    "update_norm": "update norm",
}


def _figure(value) -> float | None:
    return None if value is None else float(value)


def _ratio_of(value: float | None, base: float | None) -> float | None:
    """value / base; None where the two cannot be compared (a figure missing,
    or the baseline's not finite); 0 / 0 is 1 (an unused group, a zero
    learning rate), and anything else over 0 or not finite is inf."""
    if value is None or base is None or not math.isfinite(base):
        return None
    if not math.isfinite(value):
        return math.inf
    if base == 0:
        return 1.0 if value == 0 else math.inf
    return value / base


@dataclass(frozen=True)
class UpdateRatio:
    """How one figure of an optimizer's update compares between two runs."""

    step: int  # from 0, as the runs counted optimizer steps
    optimizer: str
    group: int
    figure: str  # a key of UPDATE_FIGURES
    ratio: float  # the other run's figure over the baseline's

    @property
    def distance(self) -> float:
        """How far the ratio is from 1 as a factor (2.0 for both 0.5 and 2)."""
        if self.ratio <= 0:
            return math.inf
        return max(self.ratio, 1 / self.ratio)


def _updates_made(run: dict) -> dict[int, list[tuple[int, dict]]]:
    """Per optimizer (numbered as the run made them), (step, what it received)
    for each of its steps that updated."""
    made: dict[int, list[tuple[int, dict]]] = {}
    for step, records in enumerate(run.get("updates") or ()):
        for record in records or ():
            made.setdefault(record.get("index", 0), []).append((step, record))
    return made


def update_ratios(baseline: dict, other: dict) -> list[UpdateRatio]:
    """The other run's figures over the baseline's, optimizer by optimizer and
    update by update: the k-th update of an optimizer in one run against its
    k-th in the other, as loss parity compares losses.  A step the scaler
    skipped updated nothing; the run after it is one update behind, not wrong.
    Steps are named as the other run counted them, and come in their order."""
    found = []
    base_made, other_made = _updates_made(baseline), _updates_made(other)
    for index, other_updates in other_made.items():
        for (_, base), (step, mine) in zip(base_made.get(index, ()), other_updates):
            for figure in UPDATE_FIGURES:
                pairs = zip(base[figure], mine[figure])
                for group, (base_value, value) in enumerate(pairs):
                    ratio = _ratio_of(_figure(value), _figure(base_value))
                    if ratio is not None:
                        found.append(UpdateRatio(step, mine["optimizer"], group, figure, ratio))
    return sorted(found, key=lambda ratio: ratio.step)


def update_band(baseline: dict, calibration: dict | None) -> float:
    """The factor within which the AMP run's figures must stay (see MIN_BAND)."""
    if calibration is None:
        return MIN_BAND
    spread = max((r.distance for r in update_ratios(baseline, calibration)), default=1.0)
    return min(MAX_BAND, max(MIN_BAND, 2 * spread))


@dataclass(frozen=True)
class UpdateParity:
    """One run's updates against the baseline's: the band and what left it."""

    band: float
    ratios: list[UpdateRatio]
    outliers: list[UpdateRatio]  # the ratios outside the band, in step order

    @property
    def steps_compared(self) -> int:
        return len({ratio.step for ratio in self.ratios})

    @property
    def steps_outside(self) -> int:
        return len({ratio.step for ratio in self.outliers})


def update_parity(baseline: dict, other: dict, calibration: dict | None) -> UpdateParity:
    band = update_band(baseline, calibration)
    ratios = update_ratios(baseline, other)
    return UpdateParity(band, ratios, [ratio for ratio in ratios if ratio.distance > band])


def slowest_median(runs: list[dict], warmup: int) -> float | None:
    """The slowest rank's median step time."""
    medians = [median_step_s(run, warmup) for run in runs]
    return None if not medians or None in medians else max(medians)


def median_step_s(run: dict, warmup: int) -> float | None:
    # step_times_s[i] is the time from step i to step i+1 (the first step's
    # start is the script's start, import and set-up included: never timed).
    times = run["step_times_s"][max(0, warmup - 1) :]
    return statistics.median(times) if times else None


# A GradScaler's defaults: the scale it starts from, and how many steps without
# an overflow it waits before doubling it.
DEFAULT_INIT_SCALE = 65536.0
DEFAULT_GROWTH_INTERVAL = 2000


def _scaler_settings(run: dict) -> tuple[float, int]:
    """The initial scale and growth interval of the run's first enabled scaler."""
    for made in run.get("scalers", ()):
        if made.get("enabled"):
            return (
                float(made.get("init_scale") or DEFAULT_INIT_SCALE),
                int(made.get("growth_interval") or DEFAULT_GROWTH_INTERVAL),
            )
    return DEFAULT_INIT_SCALE, DEFAULT_GROWTH_INTERVAL


def untrained(run: dict, baseline: dict) -> str | None:
    """Why an AMP run did not train as a healthy one does, or None.

    A GradScaler skips a step when the scaled gradients hold inf or NaN, and
    halves its scale.  Healthy, the scale falls from its initial value
    (65,536) to one the gradients fit under, at the start or as they grow
    early in training, then doubles after each growth interval (2,000 steps)
    without an overflow, which may overflow once more.  So a healthy scaler
    skips at most log2(initial scale) steps (16: below a scale of 1 the
    gradients overflow float16 unscaled, which no scaling mends), plus one
    per growth interval the run went through, plus one for a rare spike.
    More than that, the float16 run does not train, whatever the few updates
    left say (the losses at updates are what parity compares).  A loss that is
    not finite is never the scale's doing (scaling does not touch the forward
    pass), so any in the AMP run fails it where the baseline's were finite."""
    losses = _losses(run)
    steps = run.get("steps", len(losses))
    skipped = sorted(run.get("skipped_at", ()))
    init_scale, interval = _scaler_settings(run)
    halvings = max(0, math.ceil(math.log2(init_scale))) if init_scale >= 1 else 0
    allowed = halvings + 1 + steps // interval
    non_finite = [step for step, loss in enumerate(losses) if not math.isfinite(loss)]
    if not all(map(math.isfinite, _losses(baseline))):
        non_finite = []  # the baseline diverged too: inconclusive, said apart
    if len(skipped) <= allowed and not non_finite:
        return None
    parts = []
    if skipped:
        shown = f"its GradScaler skipped {len(skipped)} of {steps} steps"
        if not non_finite:  # else the forward pass overflows: said below
            shown += (
                f", more than a healthy scaler's {allowed} (the {halvings} halvings from "
                f"{init_scale:g} to a scale of 1, below which the gradients overflow float16 "
                "unscaled, one per growth interval and one for a spike)"
            )
        parts.append(shown)
    if non_finite:
        parts.append(
            f"its loss is not finite at {len(non_finite)} of {steps} steps, first at step "
            f"{non_finite[0]}, the baseline's at none: the forward pass overflows, which no "
            "loss scale mends"
        )
    elif skipped:
        parts.append(f"the scaled gradients first held inf or NaN at step {skipped[0]}")
    first = run.get("first_non_finite")
    if first:
        parts.append(
            f"the first inf/NaN of the forward pass came out of `{first['module']}` at step "
            f"{first['step']}"
            + ("" if first.get("inputs_finite", True) else " (its inputs held them already)")
        )
    return "the AMP run did not train: " + "; ".join(parts)


def _last_losses(run: dict, other: dict, last: int) -> list[float]:
    """`run`'s losses over the last `last` of the updates both runs made."""
    updates = min(len(_losses_per_update(run)), len(_losses_per_update(other)))
    return _losses_per_update(run)[:updates][-last:]


def _relative_gap(base: float, value: float) -> float:
    return abs(value - base) / max(abs(base), 1e-12)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


@dataclass
class Comparison:
    """The AMP run against the baseline, rank by rank (one rank without
    --nproc-per-node), with the TF32 run beside them where there is one.  A
    step ends when the slowest rank ends it: times are the slowest rank's."""

    baseline: list[dict]  # one measured run per rank
    amp: list[dict]
    thresholds: Thresholds
    speed_meaningful: bool
    problems: list[str] = field(default_factory=list)
    tf32: list[dict] = field(default_factory=list)  # empty: no TF32 run
    # Runs of the original that differ from the baseline in nothing AMP touches
    # (another seed; the TF32 run where there is one): what sets the band of
    # update parity.  Empty: MIN_BAND.
    calibration: list[dict] = field(default_factory=list)
    calibrated_by: str = ""  # "another seed", "TF32"
    # With --repeat: each run's median step time in every round ("baseline",
    # "AMP", "TF32" -> one per round, the first round's included), the rounds
    # interleaved so a machine that slows down slows every column alike.
    repeats: dict[str, list[float]] = field(default_factory=dict)
    # Samples per step as given (--batch-size); None: read from the script's
    # DataLoader where it made one batch size.  Tokens per sample (--seq-len).
    batch_size: int | None = None
    seq_len: int | None = None
    # Runs of the original, one per rank, that skipped the optimizer steps the
    # AMP run's GradScaler skipped (empty when it skipped none): the reference
    # of loss and update parity, so that the scale search's skips neither fake
    # a divergence nor hide one.  The baseline stays the reference of speed.
    matched: list[dict] = field(default_factory=list)

    def reference(self, rank: int) -> dict:
        """What the rank's AMP run is held to for parity."""
        return self.matched[rank] if self.matched else self.baseline[rank]

    @property
    def matched_run(self) -> str | None:
        """The reference of parity, where it is not the baseline."""
        if not self.matched:
            return None
        skipped = sum(len(calls) for calls in (self.matched[0].get("skipped_calls") or {}).values())
        return (
            f"an FP32 run skipping the {skipped} optimizer step{'s' * (skipped != 1)} "
            "the GradScaler skipped"
        )

    @property
    def reference_name(self) -> str:
        return f"that of {self.matched_run}" if self.matched else "the baseline's"

    @property
    def samples_per_step(self) -> tuple[int, str] | None:
        """How many samples a step takes, and where that was learnt."""
        if self.batch_size is not None:
            return self.batch_size, "--batch-size"
        sizes = set(self.baseline[0].get("loader_batch_sizes", []))
        if len(sizes) == 1 and None not in sizes:
            return sizes.pop(), "the script's DataLoader"
        return None

    def throughput(self, runs: list[dict]) -> float | None:
        """Samples per second (tokens, with --seq-len) at the median step."""
        samples, median = self.samples_per_step, self.median(runs)
        if samples is None or not median:
            return None
        return samples[0] * (self.seq_len or 1) / median

    def _name(self, runs: list[dict]) -> str:
        return "baseline" if runs is self.baseline else "AMP" if runs is self.amp else "TF32"

    def median(self, runs: list[dict]) -> float | None:
        """The slowest rank's median step time; over repeated rounds, the
        median of the rounds' medians."""
        rounds = self.repeats.get(self._name(runs))
        if rounds:
            return statistics.median(rounds)
        return slowest_median(runs, self.thresholds.warmup)

    def spread(self, runs: list[dict]) -> float | None:
        """The interquartile range of the rounds' median step times; None
        without two rounds."""
        rounds = self.repeats.get(self._name(runs), [])
        if len(rounds) < 2:
            return None
        low, _, high = statistics.quantiles(rounds, n=4, method="inclusive")
        return high - low

    @property
    def timing_noise(self) -> str | None:
        """Why the speedup may be noise: the rounds' step times spread more
        than the baseline's and the AMP run's medians differ."""
        base, amp = self.baseline_median, self.amp_median
        spreads = [s for s in (self.spread(self.baseline), self.spread(self.amp)) if s is not None]
        if base is None or amp is None or not spreads or max(spreads) <= abs(base - amp):
            return None
        return (
            f"the repeated runs' step times spread more (IQR {max(spreads) * 1000:.1f} ms) "
            f"than the baseline's and the AMP run's differ ({abs(base - amp) * 1000:.1f} ms): "
            "the speedup is within the noise"
        )

    @property
    def baseline_median(self) -> float | None:
        return self.median(self.baseline)

    @property
    def amp_median(self) -> float | None:
        return self.median(self.amp)

    @property
    def tf32_median(self) -> float | None:
        return self.median(self.tf32)

    @staticmethod
    def _ratio(numerator: float | None, denominator: float | None) -> float | None:
        return numerator / denominator if numerator and denominator else None

    @property
    def speedup(self) -> float | None:
        """AMP over the baseline."""
        return self._ratio(self.baseline_median, self.amp_median)

    @property
    def tf32_speedup(self) -> float | None:
        """TF32 over the baseline: what the one-line switch buys."""
        return self._ratio(self.baseline_median, self.tf32_median)

    @staticmethod
    def peak(runs: list[dict], figure: str = "peak_mem_bytes") -> int | None:
        """The largest rank's peak memory after the warm-up: allocated by
        tensors, or (`peak_reserved_bytes`) held by the caching allocator."""
        peaks = [run.get(figure) for run in runs]
        return None if not peaks or None in peaks else max(peaks)

    @property
    def mem_ratio(self) -> float | None:
        return self._ratio(self.peak(self.amp), self.peak(self.baseline))

    def mean_last_loss(self, runs: list[dict], rank: int = 0) -> float | None:
        """The rank's mean loss over the last updates it and the run it is
        compared with both made (the AMP run's: parity's reference)."""
        other = self.amp[rank] if runs is not self.amp else self.reference(rank)
        return _mean(_last_losses(runs[rank], other, self.thresholds.last))

    def _means(self, baseline: dict, other: dict) -> tuple[float, float] | None:
        """The two runs' mean losses over the last updates both made; None
        where a loss is not finite or there is none."""
        base_losses = _last_losses(baseline, other, self.thresholds.last)
        other_losses = _last_losses(other, baseline, self.thresholds.last)
        if not all(map(math.isfinite, base_losses + other_losses)):
            return None
        base, value = _mean(base_losses), _mean(other_losses)
        return None if base is None or value is None else (base, value)

    def _gap(self, baseline: dict, other: dict) -> float | None:
        """|other - baseline| / |baseline| of the mean loss over the last steps."""
        means = self._means(baseline, other)
        return None if means is None else _relative_gap(*means)

    def _within(self, baseline: dict, other: dict) -> bool:
        """The mean losses agree: relatively (--rtol) or absolutely (--atol)."""
        means = self._means(baseline, other)
        if means is None:
            return False
        base, value = means
        return (
            _relative_gap(base, value) <= self.thresholds.rtol
            or abs(value - base) <= self.thresholds.atol
        )

    @property
    def noise_floor(self) -> float | None:
        """How far the calibration run (TF32, or another seed), which differs
        from the baseline in nothing AMP touches, strays from it: a loss gap
        below this says nothing about AMP."""
        gaps = [self._gap(base, other) for base, other in zip(self.baseline, self.calibration)]
        return None if not gaps or None in gaps else max(gaps)

    @property
    def inconclusive(self) -> str | None:
        """Why no verdict can be given on AMP: the FP32 run itself diverged."""
        for rank, base in enumerate(self.baseline):
            if not all(map(math.isfinite, _losses(base))):
                where = f" on rank {rank}" if len(self.baseline) > 1 else ""
                return f"the FP32 baseline itself diverged{where} (NaN or inf loss)"
        return None

    @property
    def rank_gaps(self) -> list[float | None]:
        return [self._gap(self.reference(rank), amp) for rank, amp in enumerate(self.amp)]

    @property
    def loss_gap(self) -> float | None:
        """The largest gap over the ranks; None when a loss is not finite."""
        gaps = self.rank_gaps
        return None if not gaps or None in gaps else max(gaps)

    @property
    def tf32_gap(self) -> float | None:
        gaps = [self._gap(base, tf32) for base, tf32 in zip(self.baseline, self.tf32)]
        return None if not gaps or None in gaps else max(gaps)

    def update_parity(self, rank: int = 0) -> UpdateParity:
        """The rank's AMP run against its baseline, update by update."""
        calibration = self.calibration[rank] if self.calibration else None
        return update_parity(self.reference(rank), self.amp[rank], calibration)

    @property
    def update_parity_ok(self) -> bool:
        return not any(self.update_parity(rank).outliers for rank in range(len(self.baseline)))

    def _update_reasons(self) -> list[str]:
        reasons = []
        for rank in range(len(self.baseline)):
            parity = self.update_parity(rank)
            if not parity.outliers:
                continue
            first, band = parity.outliers[0], parity.band
            where = f" on rank {rank}" if len(self.baseline) > 1 else ""
            group = f" (group {first.group})" if first.group else ""
            calibrated = f", calibrated on {self.calibrated_by}" if self.calibrated_by else ""
            reasons.append(
                f"update parity{where}: at step {first.step} {first.optimizer}{group} received "
                f"a {UPDATE_FIGURES[first.figure]} {first.ratio:.3g}x {self.reference_name} (allowed: "
                f"{1 / band:.3g}x to {band:.3g}x{calibrated}); {parity.steps_outside} of "
                f"{parity.steps_compared} steps outside"
            )
        return reasons

    def _untrained(self) -> list[str]:
        """Why an AMP rank did not train (`untrained`), one line per rank."""
        found = []
        for rank, (base, amp) in enumerate(zip(self.baseline, self.amp)):
            why = untrained(amp, base)
            if why is not None:
                where = f" on rank {rank}" if len(self.baseline) > 1 else ""
                found.append(why.replace("did not train:", f"did not train{where}:", 1))
        return found

    def _not_finite(self) -> list[str]:
        """ "the AMP loss is not finite (NaN or inf)", one per run and rank it
        holds for (an AMP run that did not train is said by `_untrained`)."""
        found = []
        for rank, (base, amp) in enumerate(zip(self.baseline, self.amp)):
            where = f" on rank {rank}" if len(self.baseline) > 1 else ""
            runs = [
                name
                for name, run, other in (("baseline", base, amp), ("AMP", amp, base))
                if not all(map(math.isfinite, _last_losses(run, other, self.thresholds.last)))
                and not (name == "AMP" and untrained(amp, base) is not None)
            ]
            if runs:
                found.append(f"the {' and '.join(runs)} loss is not finite (NaN or inf){where}")
        return found

    def _no_updates(self, rank: int) -> list[str]:
        """Why a rank's loss gap could not be computed, where a run made no
        update to compare (its not-finite losses are said apart)."""
        found = []
        for name, run in (("baseline", self.baseline[rank]), ("AMP", self.amp[rank])):
            if _losses_per_update(run):
                continue
            if name == "AMP" and untrained(run, self.baseline[rank]) is not None:
                continue  # said by _untrained, with why
            steps = run.get("steps", 0)
            if steps and run.get("skipped_steps", 0) >= steps:
                found.append(
                    f"the {name} run made no update: its GradScaler skipped all {steps} steps "
                    "(the scaled gradients held inf or NaN at every scale it tried)"
                )
            else:
                found.append(f"the {name} run made no update to compare")
        return found

    @property
    def finite(self) -> bool:
        return not self._not_finite()

    @property
    def parity_ok(self) -> bool:
        return all(self._within(self.reference(rank), amp) for rank, amp in enumerate(self.amp))

    @property
    def speed_ok(self) -> bool:
        wanted = self.thresholds.min_speedup
        return wanted is None or (self.speedup is not None and self.speedup >= wanted)

    @property
    def passed(self) -> bool:
        return (
            self.parity_ok
            and self.update_parity_ok
            and self.speed_ok
            and not self.problems
            and not self._untrained()
        )

    def reasons(self) -> list[str]:
        """Why it did not pass, one line each."""
        reasons = list(self.problems) + self._untrained() + self._not_finite()
        for rank, gap in enumerate(self.rank_gaps):
            where = f" on rank {rank}" if len(self.baseline) > 1 else ""
            if gap is None:
                reasons += [f"{why}{where}" for why in self._no_updates(rank)]
            elif not self._within(self.reference(rank), self.amp[rank]):
                reasons.append(
                    f"loss parity{where}: the AMP run's mean loss over the last "
                    f"{self.thresholds.last} updates differs from {self.reference_name} by {gap:.1%} "
                    f"(allowed: {self.thresholds.rtol:.1%}, --rtol"
                    + (
                        f", or {self.thresholds.atol:g} apart, --atol)"
                        if self.thresholds.atol
                        else ")"
                    )
                )
        reasons += self._update_reasons()
        if not self.speed_ok:
            shown = "unknown" if self.speedup is None else f"{self.speedup:.2f}x"
            reasons.append(f"speedup {shown} is below --min-speedup {self.thresholds.min_speedup}")
        return reasons

    def as_json(self, device: str, dtype: str) -> dict:
        def summary(runs: list[dict]) -> dict | None:
            if not runs:
                return None
            first = runs[0]
            return {
                "median_step_s": self.median(runs),  # the slowest rank's
                "throughput": self.throughput(runs),
                "peak_mem_bytes": self.peak(runs),  # the largest rank's
                "peak_reserved_bytes": self.peak(runs, "peak_reserved_bytes"),
                "losses": first["losses"],  # rank 0's, as below
                # Per step, rank 0's: the time (from the end of the step before),
                # whether the scaler skipped it, the loss scale it ran with, and
                # each optimizer's mean loss (by the order they were made).
                "step_times_s": first.get("step_times_s", []),
                "skipped_at": first.get("skipped_at", []),
                "loss_scales": first.get("loss_scales", []),
                "losses_by_optimizer": first.get("losses_by_optimizer", []),
                "environment": first.get("environment"),
                "skipped_steps": first["skipped_steps"],
                "steps": first["steps"],
                "loss_scale": first.get("loss_scale"),
                "autocast": first.get("autocast", []),
                "scalers": first.get("scalers", []),
                "parameter_devices": first.get("parameter_devices", []),
                "settings": first.get("settings"),
            }

        parity = self.update_parity()  # rank 0's, as the losses shown
        return {
            "device": device,
            "dtype": dtype,
            "steps": self.thresholds.steps,
            "warmup": self.thresholds.warmup,
            "ranks": len(self.baseline),
            "torch": self.baseline[0].get("torch"),
            "settings": self.baseline[0].get("settings"),
            "baseline": summary(self.baseline),
            "amp": summary(self.amp),
            "tf32": summary(self.tf32),
            # Where the AMP run's GradScaler skipped steps: the FP32 run that
            # skipped them too, which loss and update parity compared it with.
            "parity_reference": self.matched_run,
            "matched": summary(self.matched),
            "speedup": self.speedup,
            "tf32_speedup": self.tf32_speedup,
            "speed_meaningful": self.speed_meaningful,
            "mem_ratio": self.mem_ratio,
            "loss_gap": self.loss_gap,
            "rank_loss_gaps": self.rank_gaps,
            "tf32_loss_gap": self.tf32_gap,
            "noise_floor": self.noise_floor,
            "repeats": self.repeats or None,
            "samples_per_step": self.samples_per_step and self.samples_per_step[0],
            "throughput_unit": "tokens/s" if self.seq_len else "samples/s",
            "inconclusive": self.inconclusive,
            "parity_ok": self.parity_ok,
            "update_parity_ok": self.update_parity_ok,
            "update_band": parity.band,
            "updates_compared": parity.steps_compared,
            "update_calibration": self.calibrated_by or None,
            "passed": self.passed,
            "problems": self.reasons(),
            "per_rank": [
                {
                    "rank": rank,
                    "steps": [base["steps"], amp["steps"]],
                    "median_step_s": [
                        median_step_s(base, self.thresholds.warmup),
                        median_step_s(amp, self.thresholds.warmup),
                    ],
                    "loss_gap": gap,
                }
                for rank, (base, amp, gap) in enumerate(
                    zip(self.baseline, self.amp, self.rank_gaps)
                )
            ],
        }
