"""AMP114: a loss CUDA autocast refuses, inside an autocast region.

CUDA autocast raises on ``F.binary_cross_entropy`` and ``nn.BCELoss`` ("unsafe
to autocast"): after a float16 sigmoid, probabilities of exactly 0 or 1 make
its log infinite.  The CPU runs the same code, so the crash waits for the GPU.
"""

from __future__ import annotations

from typing import Iterator

from amplint.analysis import ModuleFacts
from amplint.config import Settings
from amplint.diagnostics import Diagnostic
from amplint.rules.base import Rule

_ADVICE = {
    "torch.nn.BCELoss": "`nn.BCEWithLogitsLoss` on the logits",
    "torch.nn.modules.loss.BCELoss": "`nn.BCEWithLogitsLoss` on the logits",
}


class UnsafeLossUnderAutocast(Rule):
    code = "AMP114"

    def check(self, facts: ModuleFacts, settings: Settings) -> Iterator[Diagnostic]:
        for found in facts.autocast.unsafe_losses:
            called = facts.module.code_for_node(found.call.func)
            advice = _ADVICE.get(found.loss, "`F.binary_cross_entropy_with_logits` on the logits")
            message = (
                f'`{called}` raises under CUDA autocast ("unsafe to autocast"); use {advice}, '
                "or compute it in a `torch.autocast(..., enabled=False)` region on `.float()` "
                "inputs"
            )
            yield Diagnostic(self.code, message, facts.span(found.call))
