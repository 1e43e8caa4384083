"""AMP107: GradScaler calls that run on every micro-step of accumulation.

Under gradient accumulation ``S.unscale_(opt)``, ``S.step(opt)`` and
``S.update()`` belong together under the accumulation guard.  Outside it,
``unscale_`` raises on the second micro-step and ``update`` raises on the
first micro-step with no step; both outside raise nothing, but every
``unscale_`` divides the gradients summed so far by the scale once more.  The fix moves them under the guard: the
``unscale_`` with the gradient clipping that follows it, the ``update`` after
the guard's last ``S.step``.
"""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from amplint.analysis import ModuleFacts
from amplint.analysis.accumulation import PerMicroStep
from amplint.config import Settings
from amplint.diagnostics import Applicability, Diagnostic, Edit, Fix
from amplint.rules.base import Rule
from amplint.rules.scaler_update import update_after
from amplint.transforms.statements import moved_into, removable, removed

BOTH = (
    "with `unscale_` and `update()` on every micro-step, each unscale_ divides the "
    "gradients accumulated so far by the loss scale again"
)
RAISES = {
    "unscale_": 'the second micro-step raises ("unscale_() has already been called on '
    'this optimizer since the last update()")',
    "update": 'a micro-step without a step raises ("No inf checks were recorded prior to '
    'update")',
}


class ScalerPerMicroStep(Rule):
    code = "AMP107"

    def check(self, facts: ModuleFacts, settings: Settings) -> Iterator[Diagnostic]:
        for found in facts.scalers_per_microstep:
            yield self._diagnostic(found, facts)

    def _diagnostic(self, found: PerMicroStep, facts: ModuleFacts) -> Diagnostic:
        call = facts.module.code_for_node(found.call.call)
        message = (
            f"`{call}` runs on every micro-step, but `{found.scaler}.step` only when "
            f"`{found.test}`: {BOTH if found.both_every_microstep else RAISES[found.call.method]}; "
            "move it under the "
            "accumulation guard"
        )
        edits = self._edits(found)
        fix = None
        if edits:
            fix = Fix(Applicability.SAFE, f"`{call}` moved under `if {found.test}:`", edits)
        return Diagnostic(self.code, message, facts.span(found.call.call), fix)

    def _edits(self, found: PerMicroStep) -> tuple[Edit, ...]:
        if found.guard is None:
            return ()
        if found.call.method == "update":
            last = found.last_step.statement
            if not removable(found.call.statement) or not isinstance(last, cst.SimpleStatementLine):
                return ()
            edits = [Edit(found.call.statement, removed)]
            if not found.updated_under_guard:
                edits.append(update_after(last, found.scaler))
            return tuple(edits)
        return moved_into(found.guard, found.moved, at_start=True)
