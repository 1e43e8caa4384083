"""The autocast regions a training step opens, and what they say about precision.

A region here is a ``with`` statement of the step block (at any depth of its
if/with/try) with an enabled autocast item.  Only what the call spells counts:
a device or dtype held in a variable is chosen at run time and not guessed at.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst

from amplint.analysis.autocast import ANY_AUTOCAST, device_argument, disabled, keyword_value
from amplint.analysis.imports import ImportMap
from amplint.analysis.steps import TrainingStep

FLOAT16 = {"torch.float16", "torch.half"}


@dataclass(frozen=True, eq=False)
class StepRegion:
    """``with autocast(...)`` inside a training step."""

    block: cst.With
    call: cst.Call  # the autocast item
    called: str  # what the call resolves to: "torch.autocast", "torch.cuda.amp.autocast"
    order: int  # the with-statement's place in TrainingStep.statements


def step_regions(step: TrainingStep, imports: ImportMap) -> list[StepRegion]:
    """Every autocast item of the step's with-statements, in program order;
    items with a literal ``enabled=False`` (which end autocast) included."""
    found = []
    for order, statement in enumerate(step.statements):
        if not isinstance(statement, cst.With):
            continue
        for item in statement.items:
            call = item.item
            if isinstance(call, cst.Call):
                called = imports.resolve(call.func, step.enclosing_scope)
                if called in ANY_AUTOCAST:
                    found.append(StepRegion(statement, call, called, order))
    return found


def selects_cuda_float16(region: StepRegion, imports: ImportMap, scope) -> bool:
    """Whether the region is certainly CUDA autocast in float16: CUDA's default
    dtype, or ``dtype=torch.float16`` spelled out, on a device spelled "cuda"."""
    call, called = region.call, region.called
    if disabled(call):
        return False
    if called.startswith("torch.cpu."):
        return False
    if not called.startswith("torch.cuda."):
        device = device_argument(call)
        if not (
            isinstance(device, cst.SimpleString)
            and isinstance(device.evaluated_value, str)
            and device.evaluated_value.split(":", 1)[0] == "cuda"
        ):
            return False
    dtype = keyword_value(call, "dtype")
    return dtype is None or imports.resolve(dtype, scope) in FLOAT16


# A loss scaler by any name: GradScaler, apex's scale_loss, a hand-rolled one.
# A module that mentions one may scale where amplint cannot see it.
_SCALING = re.compile(r"scaler|scale_loss|loss_scal", re.I)


@dataclass(frozen=True, eq=False)
class UnscaledFloat16:
    """A training step that backpropagates from float16 autocast with no scaler."""

    step: TrainingStep
    region: StepRegion  # the first float16 region the backward follows


def find_unscaled_float16(
    steps: list[TrainingStep], imports: ImportMap, text: str
) -> list[UnscaledFloat16]:
    if _SCALING.search(text):
        return []
    found = []
    for step in steps:
        if not step.backwards or any(s.has_closure or s.scaler for s in step.steps):
            continue
        for region in step_regions(step, imports):
            if selects_cuda_float16(region, imports, step.enclosing_scope) and any(
                region.order < b.order and not step.exclusive(region.order, b.order)
                for b in step.backwards
            ):
                found.append(UnscaledFloat16(step, region))
                break
    return found
