"""AMP102 / AMP108: ``scaler.unscale_`` missing before a clip, or called twice.

After ``scaler.scale(loss).backward()`` every gradient is the true gradient
times the loss scale (65536 to start with).  ``clip_grad_norm_(params, 1.0)``
then compares the scaled norm with 1.0 and shrinks every update by about the
scale: training crawls, silently.  The recipe unscales first:
``scaler.unscale_(optimizer)`` right before the clip; ``scaler.step`` then
knows the gradients are unscaled and does not divide them again.

Each optimizer may be unscaled once per iteration, before its step: a second
``unscale_`` before ``update()``, or one after ``step``, raises (AMP108).
"""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from amplint.analysis import ModuleFacts
from amplint.analysis.statements import condition_code
from amplint.config import Settings
from amplint.diagnostics import Applicability, Diagnostic, Edit, Fix
from amplint.rules.base import Rule
from amplint.transforms.statements import preceded_by, removable, removed


class ClipBeforeUnscale(Rule):
    code = "AMP102"

    def check(self, facts: ModuleFacts, settings: Settings) -> Iterator[Diagnostic]:
        for found in facts.clips_before_unscale:
            clip = facts.module.code_for_node(found.clip.clip.func)
            scaler = found.scaler
            unscales = [f"{scaler}.unscale_({optimizer})" for optimizer in found.optimizers]
            advice = " and ".join(f"`{call}`" for call in unscales)
            message = (
                f"`{clip}` sees gradients still multiplied by `{scaler}`'s loss scale: nearly "
                f"every step is clipped and the updates shrink by that factor; call {advice} "
                "before it"
            )
            fix = None
            if all(optimizer is not None for optimizer in found.optimizers):
                if found.guard:  # the clip also runs where there is no scaler
                    body = "".join(f"    {call}\n" for call in unscales)
                    lines = [cst.parse_statement(f"if {condition_code(found.guard)}:\n{body}")]
                else:
                    lines = [cst.parse_statement(f"{call}\n") for call in unscales]
                fix = Fix(
                    Applicability.SAFE,
                    f"{advice} before the clip",
                    (Edit(found.clip.statement, lambda node, new=lines: preceded_by(new, node)),),
                )
            yield Diagnostic(self.code, message, facts.span(found.clip.clip), fix)


class DoubleUnscale(Rule):
    code = "AMP108"

    def check(self, facts: ModuleFacts, settings: Settings) -> Iterator[Diagnostic]:
        for extra in facts.extra_unscales:
            call = facts.module.code_for_node(extra.unscale.call)
            if extra.earlier.method == "step":
                why = 'after the optimizer stepped, `unscale_()` raises ("is being called after step()")'
            else:
                why = 'a second `unscale_()` before `update()` raises ("has already been called")'
            message = f"`{call}`: {why}; remove it"
            fix = None
            if removable(extra.unscale.statement):
                fix = Fix(
                    Applicability.SAFE,
                    f"`{call}` removed",
                    (Edit(extra.unscale.statement, removed),),
                )
            yield Diagnostic(self.code, message, facts.span(extra.unscale.call), fix)
