"""AMP110: the loss computed after the autocast block, from its outputs.

Autocast runs the ops that need range or precision (``log_softmax``,
``cross_entropy``, ``mse_loss``, reductions) in float32.  Outside the block the
same ops run in whatever dtype their inputs have: a loss over float16 or
bfloat16 logits is computed in float16 or bfloat16.  The recipe wraps "the
forward pass(es) of your network, including the loss computation(s)".
"""

from __future__ import annotations

from typing import Iterator

from amplint.analysis import ModuleFacts
from amplint.analysis.regions import LossOutsideAutocast
from amplint.config import Settings
from amplint.diagnostics import Applicability, Diagnostic, Fix
from amplint.rules.base import Rule
from amplint.transforms.statements import moved_into


class LossOutsideAutocastRule(Rule):
    code = "AMP110"

    def check(self, facts: ModuleFacts, settings: Settings) -> Iterator[Diagnostic]:
        for found in facts.losses_outside_autocast:
            yield self._diagnostic(found, facts)

    def _diagnostic(self, found: LossOutsideAutocast, facts: ModuleFacts) -> Diagnostic:
        loss = facts.module.code_for_node(found.loss.body[0]).strip()
        message = (
            f"`{loss}` runs after the autocast block, on its low-precision outputs: the "
            "loss is computed in float16/bfloat16 instead of the float32 autocast picks "
            "for losses; compute it inside the block"
        )
        edits = moved_into(found.block, found.moved, at_start=False)
        fix = Fix(Applicability.UNSAFE, "loss moved into the autocast block", edits)
        return Diagnostic(self.code, message, facts.span(found.loss), fix)
