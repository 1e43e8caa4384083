"""AMP119: a model cast whole to float16 whose optimizer goes through a
GradScaler, which refuses float16 gradients (analysis/half_model.py)."""

from __future__ import annotations

from typing import Iterator

from amplint.analysis import ModuleFacts
from amplint.config import Settings
from amplint.diagnostics import Diagnostic
from amplint.rules.base import Rule


class HalfModelWithScaler(Rule):
    code = "AMP119"

    def check(self, facts: ModuleFacts, settings: Settings) -> Iterator[Diagnostic]:
        for half in facts.half_models_with_scaler:
            cast = facts.module.code_for_node(half.call)
            stepped = facts.module.code_for_node(half.scaler_call)
            line = facts.span(half.scaler_call).line
            yield Diagnostic(
                self.code,
                f"`{cast}` makes `{half.model}`'s parameters and gradients float16, and "
                f'`{stepped}` (line {line}) raises on them ("Attempting to unscale FP16 '
                'gradients"): keep the model in float32 and run the forward pass under '
                "torch.autocast, or drop the GradScaler and keep float32 master weights",
                facts.span(half.call),
            )
