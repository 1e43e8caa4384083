"""AMP118: an autocast or GradScaler of the user's own inside code a framework
already runs in mixed precision (see analysis/framework_amp.py).  Reported
only: which of the two precisions the user meant is theirs to say."""

from __future__ import annotations

from typing import Iterator

from amplint.analysis import ModuleFacts
from amplint.analysis.framework_amp import ManualAmp
from amplint.analysis.frameworks import Precision
from amplint.config import Settings
from amplint.diagnostics import Diagnostic
from amplint.rules.base import Rule

_NAMES = {
    "accelerate": "the Accelerator",
    "transformers": "the Trainer",
    "lightning": "the Lightning Trainer",
    "fabric": "Lightning Fabric",
    "deepspeed": "the DeepSpeed engine",
    "colossalai": "the Colossal-AI Booster",
}
# What each framework does itself once its precision is set.
_ALREADY = {
    "accelerate": "scales the loss in `accelerator.backward` and unscales it in its step",
    "transformers": "runs `compute_loss` under its own autocast (and, for fp16, GradScaler)",
    "lightning": "runs `training_step` under its own autocast (and, for 16-bit, GradScaler)",
    "fabric": "runs the forward pass of the models it sets up under autocast and, for 16-bit, "
    "scales the loss in `fabric.backward`",
    "deepspeed": "keeps the model in half precision and scales the loss in `engine.backward`",
    "colossalai": "runs the boosted model's forward pass in its precision and scales the loss "
    "in `booster.backward`",
}
_ADVICE = {
    "autocast": "remove this autocast",
    "scaler": "remove this scaler and pass the plain loss",
}
_DEEPSPEED_AUTOCAST = (
    "remove it, or turn DeepSpeed's `torch_autocast` section on instead of fp16/bf16 "
    "(DeepSpeed refuses both together)"
)


class ManualAmpUnderFramework(Rule):
    code = "AMP118"

    def check(self, facts: ModuleFacts, settings: Settings) -> Iterator[Diagnostic]:
        for manual in facts.manual_amp_under_framework:
            yield Diagnostic(self.code, self._message(manual, facts), facts.span(manual.call))

    @staticmethod
    def _message(manual: ManualAmp, facts: ModuleFacts) -> str:
        setup = manual.setup
        where = f"line {facts.span(setup.call).line}"
        if setup.config_file is not None and facts.project is not None:
            where = facts.project.relative(setup.config_file)
        precision = f"{setup.spelled}, {where}" if setup.spelled else where
        launch = facts.project.launch_precision() if facts.project is not None else None
        if setup.precision is Precision.UNSET and launch is not None:
            # An Accelerator() that `accelerate launch` runs in mixed precision.
            shown = f"{facts.project.relative(launch.path)}:{launch.line}"
            precision = f"{launch.precision}, {shown}"
        advice = _ADVICE[manual.kind]
        if setup.framework == "deepspeed" and manual.kind == "autocast":
            advice = _DEEPSPEED_AUTOCAST
        kind = "an autocast" if manual.kind == "autocast" else "a GradScaler"
        return (
            f"{kind} of its own where {_NAMES[setup.framework]} already trains in mixed "
            f"precision ({precision}): it {_ALREADY[setup.framework]}; {advice}"
        )
