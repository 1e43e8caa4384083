"""The registry of rules: every code amplint can report comes from here."""

from __future__ import annotations

from amplint.diagnostics import SYNTAX_ERROR
from amplint.rules.apex import ApexAmp, ApexOther
from amplint.rules.autocast_device import AutocastDeviceType
from amplint.rules.compiled_backward import CompiledBackwardAutocast
from amplint.rules.cuda_amp_device import CudaAmpOnOtherDevice
from amplint.rules.backward_in_autocast import BackwardInsideAutocast
from amplint.rules.base import Rule
from amplint.rules.bf16_scaler import ScalerWithBfloat16
from amplint.rules.booster import BoosterApexAmp, BoosterPrecisionIgnored
from amplint.rules.checkpoint import ScalerNotCheckpointed
from amplint.rules.fp16_scaler import Float16WithoutScaler
from amplint.rules.framework_amp import ManualAmpUnderFramework
from amplint.rules.fsdp_policy import AmpAgainstFsdpPolicy
from amplint.rules.fsdp_scaler import PlainScalerUnderFsdp
from amplint.rules.half_model import HalfModelWithScaler
from amplint.rules.loss_outside import LossOutsideAutocastRule
from amplint.rules.manual_half import ManualHalfRule
from amplint.rules.scaler_step import (
    ScalerStepWithClosure,
    StepBypassesScaler,
    UnscaledBackwardRule,
    ZeroGradBeforeScalerStep,
)
from amplint.rules.scaler_microstep import ScalerPerMicroStep
from amplint.rules.scaler_update import MissingScalerUpdate
from amplint.rules.unscale import ClipBeforeUnscale, DoubleUnscale
from amplint.rules.unsafe_loss import UnsafeLossUnderAutocast
from amplint.rules.deprecated_amp import DeprecatedTorchAmp
from amplint.rules.deprecated_state import DeprecatedAutocastState
from amplint.rules.fp32_step import FP32TrainingStep
from amplint.rules.framework_fp32 import (
    AcceleratorInFp32,
    BoosterInFp32,
    DeepSpeedInFp32,
    LightningInFp32,
    TrainingArgumentsInFp32,
)

RULES: tuple[Rule, ...] = (
    FP32TrainingStep(),
    AcceleratorInFp32(),
    LightningInFp32(),
    TrainingArgumentsInFp32(),
    DeepSpeedInFp32(),
    BoosterInFp32(),
    BackwardInsideAutocast(),
    ClipBeforeUnscale(),
    StepBypassesScaler(),
    MissingScalerUpdate(),
    UnscaledBackwardRule(),
    Float16WithoutScaler(),
    ScalerPerMicroStep(),
    LossOutsideAutocastRule(),
    ManualHalfRule(),
    DoubleUnscale(),
    ScalerNotCheckpointed(),
    ZeroGradBeforeScalerStep(),
    ScalerStepWithClosure(),
    ScalerWithBfloat16(),
    UnsafeLossUnderAutocast(),
    PlainScalerUnderFsdp(),
    ManualAmpUnderFramework(),
    HalfModelWithScaler(),
    AmpAgainstFsdpPolicy(),
    BoosterPrecisionIgnored(),
    DeprecatedTorchAmp("AMP201", "cuda"),
    DeprecatedTorchAmp("AMP202", "cpu"),
    DeprecatedAutocastState(),
    AutocastDeviceType(),
    CudaAmpOnOtherDevice(),
    CompiledBackwardAutocast(),
    ApexAmp(),
    ApexOther(),
    BoosterApexAmp(),
)

# Codes the engine reports itself rather than through a rule.
ENGINE_CODES = (SYNTAX_ERROR,)

ALL_CODES: tuple[str, ...] = tuple(sorted([rule.code for rule in RULES] + list(ENGINE_CODES)))
