"""The registry of rules: every code amplint can report comes from here."""

from __future__ import annotations

import importlib
from functools import lru_cache
from typing import Iterable

from amplint.diagnostics import SYNTAX_ERROR
from amplint.triggers import UNUSED_NOQA
from amplint.rules.base import Rule

# Each rule by its code, in the order the engine runs them: the module under
# amplint.rules that holds its class, the class, and what it is made with.
# A rule's module is imported when a file first needs it (its trigger, in
# amplint.triggers, decides from the text), so that checking a script only
# AMP001 can fire on does not load the apex migration.
_REGISTRY: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "AMP001": ("fp32_step", "FP32TrainingStep", ()),
    "AMP002": ("framework_fp32", "AcceleratorInFp32", ()),
    "AMP003": ("framework_fp32", "LightningInFp32", ()),
    "AMP004": ("framework_fp32", "TrainingArgumentsInFp32", ()),
    "AMP005": ("framework_fp32", "DeepSpeedInFp32", ()),
    "AMP006": ("framework_fp32", "BoosterInFp32", ()),
    "AMP007": ("mmengine_fp32", "MmengineOptimWrapperInFp32", ()),
    "AMP101": ("backward_in_autocast", "BackwardInsideAutocast", ()),
    "AMP102": ("unscale", "ClipBeforeUnscale", ()),
    "AMP103": ("scaler_step", "StepBypassesScaler", ()),
    "AMP104": ("scaler_update", "MissingScalerUpdate", ()),
    "AMP105": ("scaler_step", "UnscaledBackwardRule", ()),
    "AMP106": ("fp16_scaler", "Float16WithoutScaler", ()),
    "AMP107": ("scaler_microstep", "ScalerPerMicroStep", ()),
    "AMP110": ("loss_outside", "LossOutsideAutocastRule", ()),
    "AMP124": ("forward_outside", "ForwardOutsideAutocastRule", ()),
    "AMP111": ("manual_half", "ManualHalfRule", ()),
    "AMP108": ("unscale", "DoubleUnscale", ()),
    "AMP109": ("checkpoint", "ScalerNotCheckpointed", ()),
    "AMP113": ("scaler_step", "ZeroGradBeforeScalerStep", ()),
    "AMP115": ("scaler_step", "ScalerStepWithClosure", ()),
    "AMP112": ("bf16_scaler", "ScalerWithBfloat16", ()),
    "AMP114": ("unsafe_loss", "UnsafeLossUnderAutocast", ()),
    "AMP117": ("fsdp_scaler", "PlainScalerUnderFsdp", ()),
    "AMP118": ("framework_amp", "ManualAmpUnderFramework", ()),
    "AMP119": ("half_model", "HalfModelWithScaler", ()),
    "AMP120": ("fsdp_policy", "AmpAgainstFsdpPolicy", ()),
    "AMP121": ("booster", "BoosterPrecisionIgnored", ()),
    "AMP201": ("deprecated_amp", "DeprecatedTorchAmp", ("AMP201", "cuda")),
    "AMP202": ("deprecated_amp", "DeprecatedTorchAmp", ("AMP202", "cpu")),
    "AMP205": ("deprecated_state", "DeprecatedAutocastState", ()),
    "AMP116": ("autocast_device", "AutocastDeviceType", ()),
    "AMP122": ("cuda_amp_device", "CudaAmpOnOtherDevice", ()),
    "AMP123": ("compiled_backward", "CompiledBackwardAutocast", ()),
    "AMP203": ("apex", "ApexAmp", ()),
    "AMP204": ("apex", "ApexOther", ()),
    "AMP206": ("booster", "BoosterApexAmp", ()),
}
# The codes rules report, in the order the engine runs them.
RULE_CODES: tuple[str, ...] = tuple(_REGISTRY)


def load_rules(codes: Iterable[str]) -> list[Rule]:
    """The rules of `codes` in the order they run (a code no rule reports,
    such as the engine's own, has none), each made once and its module
    imported then."""
    wanted = set(codes)
    return [_rule(code) for code in RULE_CODES if code in wanted]


@lru_cache(maxsize=None)
def _rule(code: str) -> Rule:
    module, name, arguments = _REGISTRY[code]
    return getattr(importlib.import_module(f"amplint.rules.{module}"), name)(*arguments)


def __getattr__(name: str) -> tuple[Rule, ...]:
    # RULES, every rule loaded: for the catalogue's tests and the trigger audit.
    if name == "RULES":
        return tuple(load_rules(RULE_CODES))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# Codes the engine reports itself rather than through a rule.
ENGINE_CODES = (SYNTAX_ERROR, UNUSED_NOQA)

ALL_CODES: tuple[str, ...] = tuple(sorted([*RULE_CODES, *ENGINE_CODES]))
