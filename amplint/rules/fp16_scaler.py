"""AMP106: float16 autocast around a training step that has no GradScaler.

float16 has five exponent bits: gradients below about 6e-8 flush to zero, and
many do in the backward pass of a deep model.  The recipe for float16 scales the
loss before backward (``scaler.scale(loss).backward()``), skips steps whose
gradients overflowed, and adjusts the scale (``scaler.step`` / ``update``).
CUDA autocast runs in float16 unless told otherwise, so a step that copied only
the ``with torch.autocast("cuda"):`` half of the recipe trains on flushed
gradients.  bfloat16 has float32's range and needs no scaler: such regions, and
regions whose device or dtype is chosen at run time, are left alone.
"""

from __future__ import annotations

from typing import Iterator

from amplint.analysis import ModuleFacts
from amplint.analysis.regions import UnscaledFloat16
from amplint.config import Settings
from amplint.diagnostics import Applicability, Diagnostic, Edit, Fix
from amplint.rules.base import Rule
from amplint.transforms.insert_amp import AmpChoice, InsertAmp, scaler_obstacle

CUDA_FLOAT16 = AmpChoice(device="cuda", dtype="float16")


class Float16WithoutScaler(Rule):
    code = "AMP106"

    def check(self, facts: ModuleFacts, settings: Settings) -> Iterator[Diagnostic]:
        for found in facts.unscaled_float16:
            yield self._diagnostic(found, facts, settings)

    def _diagnostic(
        self, found: UnscaledFloat16, facts: ModuleFacts, settings: Settings
    ) -> Diagnostic:
        step = found.step
        region = facts.module.code_for_node(found.region.call)
        loss = facts.module.code_for_node(step.backwards[0].loss)
        message = (
            f"`{loss}` is backpropagated from float16 autocast (`{region}`) without a "
            "GradScaler: small gradients flush to zero in float16; scale the loss with "
            "torch.amp.GradScaler (or use dtype=torch.bfloat16)"
        )
        span = facts.span(step.anchor)
        insert = InsertAmp(step, facts, settings, choice=CUDA_FLOAT16)
        reason = scaler_obstacle(facts, settings) or insert.place_scaler()
        if reason is not None:
            return Diagnostic(self.code, f"{message}; not rewritten: {reason}", span)
        insert.plan_step(autocast_regions=False)
        fix = Fix(
            Applicability.SAFE,
            f"GradScaler `{insert.scaler}` scales the loss and steps the optimizer",
            (Edit(insert.target, insert.rewrite),),
            module_passes=insert.module_passes,
        )
        return Diagnostic(self.code, message, span, fix)
