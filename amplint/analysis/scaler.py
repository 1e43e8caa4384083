"""How a training step that scales its loss uses the GradScaler.

Built on the training steps: a step whose backward is ``S.scale(loss).backward()``
scales with S, and then every optimizer it steps must go through ``S.step(opt)``
(which unscales and skips steps with inf/NaN gradients), followed by
``S.update()``.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from amplint.analysis.imports import dotted_name
from amplint.analysis.statements import method_name
from amplint.analysis.steps import OptimizerStep, StepScan
from amplint.analysis.visitor import Visitor


@dataclass(frozen=True, eq=False)
class BypassedScaler:
    """``optimizer.step()`` in a step whose backward S scaled."""

    step: OptimizerStep
    scaler: str  # how the step spells its scaler: `scaler`, `self.scaler`
    also_stepped_by_scaler: bool  # `S.step(optimizer)` is there too: stepped twice
    last_in_block: bool  # the last such plain step of its block
    block_updates_scaler: bool  # `S.update()` runs somewhere in the block


class _ScalerCalls(Visitor):
    """`S.<method>(...)` calls in a block, not looking into nested defs."""

    def __init__(self, scaler: str) -> None:
        self.scaler = scaler
        self.stepped: set[str] = set()  # dotted names of optimizers given to S.step
        self.updates = False

    def visit_Call(self, node: cst.Call) -> None:
        method = method_name(node)
        if method is None or dotted_name(node.func.value) != self.scaler:
            return
        if method == "step" and node.args:
            name = dotted_name(node.args[0].value)
            if name is not None:
                self.stepped.add(name)
        elif method == "update":
            self.updates = True

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False


def _scaler_of(scan_loss: cst.BaseExpression) -> str | None:
    """`scaler` for a backpropagated `scaler.scale(loss)`."""
    if isinstance(scan_loss, cst.Call) and method_name(scan_loss) == "scale":
        return dotted_name(scan_loss.func.value)
    return None


def find_bypassed_scalers(scan: StepScan) -> list[BypassedScaler]:
    found = []
    for step in scan.steps:
        scalers = {_scaler_of(backward.loss) for backward in step.backwards} - {None}
        if len(scalers) != 1:
            continue  # no scaled backward, or two scalers: not for a guess
        (scaler,) = scalers
        calls = _ScalerCalls(scaler)
        calls.walk(step.block)
        plain = [s for s in step.steps if not s.has_closure]
        for index, optimizer_step in enumerate(plain):
            optimizer = dotted_name(optimizer_step.optimizer)
            found.append(
                BypassedScaler(
                    optimizer_step,
                    scaler,
                    also_stepped_by_scaler=optimizer in calls.stepped,
                    last_in_block=index == len(plain) - 1,
                    block_updates_scaler=calls.updates,
                )
            )
    return found
