"""GradScalers kept for bfloat16 autocast, where they have nothing to do.

bfloat16 has float32's exponent range: gradients do not underflow and need no
loss scaling.  A scaler over a bf16 step still multiplies, checks every
gradient for inf/NaN and synchronises with the host each step.  Only regions
that spell bf16 are counted: ``dtype=torch.bfloat16``, or CPU autocast with its
default dtype.  A dtype chosen at run time is not for a guess.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from amplint.analysis.autocast import disabled, keyword_value
from amplint.analysis.imports import ImportMap, dotted_name
from amplint.analysis.regions import autocast_dtype, step_regions
from amplint.analysis.scaler import ScalerUse
from amplint.analysis.scopes import ScopedVisitor

GRAD_SCALERS = {
    "torch.amp.GradScaler",
    "torch.amp.grad_scaler.GradScaler",
    "torch.cuda.amp.GradScaler",
    "torch.cuda.amp.grad_scaler.GradScaler",
    "torch.cpu.amp.GradScaler",
}


@dataclass(frozen=True, eq=False)
class Bf16Scaler:
    """A GradScaler working beside a bfloat16 autocast region, which needs none."""

    scaler: str
    region: cst.Call  # the autocast call that selects bfloat16
    # The one `S = GradScaler(...)` of the module, when it has no `enabled=`:
    # where `enabled=False` can go.  None: not one, or already conditional.
    construction: cst.Call | None


class _ScalerConstructions(ScopedVisitor):
    def __init__(self, imports: ImportMap) -> None:
        super().__init__()
        self.imports = imports
        self.found: dict[str, list[cst.Call]] = {}  # target as written -> calls

    def visit_Assign(self, node: cst.Assign) -> None:
        value = node.value
        if isinstance(value, cst.Call) and self.imports.resolve(value.func, self.scope) in (
            GRAD_SCALERS
        ):
            for target in node.targets:
                name = dotted_name(target.target)
                if name is not None:
                    self.found.setdefault(name, []).append(value)


def _selects_bf16(call: cst.Call, called: str, imports: ImportMap, scope) -> bool:
    return not disabled(call) and autocast_dtype(call, called, imports, scope) == "bfloat16"


def find_bf16_scalers(
    uses: list[ScalerUse], module: cst.Module, imports: ImportMap
) -> list[Bf16Scaler]:
    found = []
    constructions: _ScalerConstructions | None = None
    for use in uses:
        if not use.scaled:
            continue
        scope = use.step.enclosing_scope
        regions = [
            (region.call, _selects_bf16(region.call, region.called, imports, scope))
            for region in step_regions(use.step, imports)
            if any(use.together(region.order, backward.order) for backward in use.scaled)
        ]
        if not regions or not all(bf16 for _, bf16 in regions):
            continue  # some region of the step is float16, or none is visible
        if constructions is None:
            constructions = _ScalerConstructions(imports)
            constructions.walk(module)
        calls = constructions.found.get(use.scaler, [])
        if calls and all(disabled(call) for call in calls):
            continue  # disabled already: every call passes straight through
        conditional = calls and keyword_value(calls[0], "enabled") is not None
        construction = calls[0] if len(calls) == 1 and not conditional else None
        found.append(Bf16Scaler(use.scaler, regions[0][0], construction))
    return found
