"""AMP124: an autocast block that computes only the loss, from a model call
made above it in full precision.

The time of a training step goes into the model's forward and backward
passes.  ``output = model(x)`` before ``with torch.autocast(...): loss =
criterion(output, y)`` runs all of it in FP32 (and its backward with it): the
program pays for a GradScaler and gets no speedup.  The recipe wraps "the
forward pass(es) of your network, including the loss computation(s)".
"""

from __future__ import annotations

from typing import Iterator

from amplint.analysis import ModuleFacts
from amplint.analysis.regions import ForwardOutsideAutocast
from amplint.config import Settings
from amplint.diagnostics import Applicability, Diagnostic, Fix
from amplint.rules.base import Rule
from amplint.transforms.statements import moved_into


class ForwardOutsideAutocastRule(Rule):
    code = "AMP124"

    def check(self, facts: ModuleFacts, settings: Settings) -> Iterator[Diagnostic]:
        for found in facts.forwards_outside_autocast:
            yield self._diagnostic(found, facts)

    def _diagnostic(self, found: ForwardOutsideAutocast, facts: ModuleFacts) -> Diagnostic:
        forward = facts.module.code_for_node(found.forward[-1]).strip()
        message = (
            f"`{forward}` runs the model before the autocast block, in full precision: the "
            "block computes the loss from its outputs, and this forward pass and its backward, "
            "where the time goes, get no mixed precision; move the model call into the block"
        )
        if not found.adjacent:
            return Diagnostic(
                self.code,
                message + " (not fixed: other statements stand between them)",
                facts.span(found.forward[-1]),
            )
        edits = moved_into(found.block, found.forward, at_start=True)
        fix = Fix(Applicability.UNSAFE, "forward pass moved into the autocast block", edits)
        return Diagnostic(self.code, message, facts.span(found.forward[-1]), fix)
