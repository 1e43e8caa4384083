"""AMP103 / AMP105 / AMP113 / AMP115: a scaled backward and the optimizer step
must agree.

After ``scaler.scale(loss).backward()`` the gradients are multiplied by the loss
scale (65536 to start with).  ``optimizer.step()`` applies them as they are and
steps on inf/NaN gradients too (AMP103); ``scaler.step(optimizer)`` unscales
first and skips those steps, and ``scaler.update()`` then adjusts the scale.
The other way round, ``scaler.step`` after an unscaled ``loss.backward()``
divides gradients that were never multiplied (AMP105).  Gradients cleared
between the two leave nothing to step (AMP113), and ``scaler.step`` cannot run
an optimizer's closure (AMP115).
"""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from amplint.analysis import ModuleFacts
from amplint.analysis.scaler import BypassedScaler
from amplint.config import Settings
from amplint.diagnostics import Applicability, Diagnostic, Edit, Fix
from amplint.rules.base import Rule
from amplint.rules.scaler_update import update_after


class StepBypassesScaler(Rule):
    code = "AMP103"

    def check(self, facts: ModuleFacts, settings: Settings) -> Iterator[Diagnostic]:
        for bypass in facts.bypassed_scalers:
            yield self._diagnostic(bypass, facts)

    def _diagnostic(self, bypass: BypassedScaler, facts: ModuleFacts) -> Diagnostic:
        scaler = bypass.scaler
        optimizer = facts.module.code_for_node(bypass.step.optimizer)
        call = facts.module.code_for_node(bypass.step.call)
        span = facts.span(bypass.step.call)
        if bypass.after_scaler_step:
            # `scaler.step` unscaled the gradients in place: what harms is the
            # second update, applied even when the scaler skipped for inf/NaN.
            message = (
                f"`{call}` steps `{optimizer}` a second time, after `{scaler}.step({optimizer})`: "
                "the same gradients, which the scaler unscaled, are applied twice, and on a "
                "step the scaler skipped for inf/NaN they are applied anyway; remove it"
            )
            return Diagnostic(self.code, message, span)
        if bypass.also_stepped_by_scaler:
            message = (
                f"`{call}` steps `{optimizer}` a second time, besides `{scaler}.step({optimizer})`,"
                " with gradients still multiplied by the loss scale; remove it"
            )
            return Diagnostic(self.code, message, span)
        add_update = bypass.last_in_block and not bypass.block_updates_scaler
        statement = bypass.step.statement
        if add_update and not isinstance(statement, cst.SimpleStatementLine):
            add_update = None  # no line of its own to put the update after
        advice = f"`{scaler}.step({optimizer})`" + (
            f" then `{scaler}.update()`" if add_update or add_update is None else ""
        )
        message = (
            f"`{call}` bypasses `{scaler}`: its gradients are still multiplied by the loss "
            f"scale and inf/NaN steps are not skipped; use {advice}"
        )
        if add_update is None or bypass.guard:  # no line of its own, or no scaler there
            return Diagnostic(self.code, message, span)
        stepped = cst.parse_expression(f"{scaler}.step({optimizer})")
        edits = [Edit(bypass.step.call, lambda _node, new=stepped: new)]
        if add_update:
            edits.append(update_after(statement, scaler))
        done = f"`{scaler}.step({optimizer})`" + (f" and `{scaler}.update()`" if add_update else "")
        fix = Fix(Applicability.SAFE, done, tuple(edits))
        return Diagnostic(self.code, message, span, fix)


class UnscaledBackwardRule(Rule):
    code = "AMP105"

    def check(self, facts: ModuleFacts, settings: Settings) -> Iterator[Diagnostic]:
        for unscaled in facts.unscaled_backwards:
            scaler = unscaled.scaler
            loss = unscaled.backward.loss
            written = facts.module.code_for_node(loss)
            scaled = cst.parse_expression(f"{scaler}.scale(_)").with_changes(
                args=[cst.Arg(loss.with_changes(lpar=[], rpar=[]))]
            )
            shown = facts.module.code_for_node(scaled)
            message = (
                f"`{written}.backward()` is not scaled, yet `{scaler}.step` divides the "
                "gradients by the loss scale: updates shrink by that factor and float16 "
                f"gradients underflow; use `{shown}.backward()`"
            )
            fix = None
            if not unscaled.guard:  # else the backward also runs where there is no scaler
                fix = Fix(
                    Applicability.SAFE,
                    f"`{shown}.backward()`",
                    (Edit(loss, lambda _node, new=scaled: new),),
                )
            yield Diagnostic(self.code, message, facts.span(unscaled.backward.call), fix)


class ZeroGradBeforeScalerStep(Rule):
    code = "AMP113"

    def check(self, facts: ModuleFacts, settings: Settings) -> Iterator[Diagnostic]:
        for found in facts.zero_grads_before_step:
            zero_grad = facts.module.code_for_node(found.zero_grad)
            step = facts.module.code_for_node(found.step.call)
            message = (
                f"`{zero_grad}` clears the gradients of the scaled backward before `{step}` "
                'applies them: the step raises ("No inf checks were recorded") when they are '
                "None, or does nothing; clear them before the backward or after the step"
            )
            yield Diagnostic(self.code, message, facts.span(found.zero_grad))


class ScalerStepWithClosure(Rule):
    code = "AMP115"

    def check(self, facts: ModuleFacts, settings: Settings) -> Iterator[Diagnostic]:
        for found in facts.scaler_closures:
            call = facts.module.code_for_node(found.call)
            if found.keyword:
                why = (
                    'GradScaler refuses closures: it raises "Closure use is not currently '
                    'supported if GradScaler is enabled"'
                )
            else:
                why = (
                    "the optimizer reruns the closure after the scaler unscaled the gradients, "
                    "and the closure's backward leaves gradients the scaler never checks"
                )
            message = (
                f"`{call}`: {why}; compute the loss and scaled backward before "
                "`scaler.step(optimizer)`, or train this optimizer without a GradScaler"
            )
            yield Diagnostic(self.code, message, facts.span(found.call))
