"""`amplint verify --plot FILE.png`: the runs' losses and step times, as a picture.

Two panels over the steps: the loss of each run (the AMP run's skipped steps
marked), and each run's step time.  matplotlib is an optional extra (`pip
install 'amplint[plot]'`); nothing else in amplint imports it.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

from amplint.verify.compare import Comparison

PLOT_NEEDS = "--plot needs matplotlib: pip install 'amplint[plot]'"
_COLORS = {"baseline": "#4c72b0", "AMP": "#dd8452", "FP32+TF32": "#55a868"}


def plot_available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def _finite(values) -> list[float]:
    numbers = [float(value) for value in values]
    return [value if math.isfinite(value) else math.nan for value in numbers]


def write_plot(path: Path, comparison: Comparison, title: str) -> None:
    """Draw rank 0's runs of `comparison` into the PNG at `path`."""
    import matplotlib

    matplotlib.use("Agg")  # no screen: render to a file
    from matplotlib import pyplot

    runs = [("baseline", comparison.baseline), ("AMP", comparison.amp)]
    if comparison.tf32:
        runs.append(("FP32+TF32", comparison.tf32))
    figure, (losses, times) = pyplot.subplots(2, 1, figsize=(8, 6), sharex=True)
    for name, ranks in runs:
        run = ranks[0]
        color = _COLORS[name]
        loss = _finite(run["losses"])
        losses.plot(range(len(loss)), loss, label=name, color=color)
        skipped = [step for step in run.get("skipped_at", []) if step < len(loss)]
        if skipped:
            losses.scatter(
                skipped,
                [loss[step] for step in skipped],
                marker="x",
                color=color,
                label=f"{name}: step skipped by the GradScaler",
            )
        # step_times_s[i] is the time of step i + 1 (the first step has none).
        step_ms = [seconds * 1000 for seconds in run.get("step_times_s", [])]
        times.plot(range(1, len(step_ms) + 1), step_ms, label=name, color=color)
    warmup = comparison.thresholds.warmup
    times.axvspan(0, warmup, color="#dddddd", label=f"warm-up (not timed): {warmup} steps")
    losses.set_ylabel("loss")
    losses.legend(fontsize="small")
    losses.set_title(title, fontsize="medium")
    times.set_ylabel("step time (ms)")
    times.set_xlabel("step")
    times.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    pyplot.close(figure)
