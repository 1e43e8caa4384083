"""AMP104: ``scaler.update()`` missing from an iteration, or run too early.

``GradScaler.update()`` ends an iteration: it adjusts the loss scale and resets
each optimizer's record of being unscaled and stepped.  Without it the second
iteration's ``scaler.step`` raises ("step() has already been called since the
last update()").  Run between a scaled backward and the ``scaler.step`` that
applies its gradients, it changes the scale those gradients are divided by
from the one they were multiplied with.  The recipe: one ``update()`` after the
iteration's last ``scaler.step``.
"""

from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from amplint.analysis.code_text import code_only
from amplint.analysis import ModuleFacts
from amplint.analysis.scaler import EarlyUpdate, MissingUpdate
from amplint.config import Settings
from amplint.diagnostics import Applicability, Diagnostic, Edit, Fix
from amplint.rules.base import Rule
from amplint.analysis.statements import parameter_names
from amplint.transforms.statements import followed_by, removable, removed


def update_after(statement: cst.BaseStatement, scaler: str) -> Edit:
    """The edit that puts `scaler.update()` on the line after `statement`."""
    update = cst.parse_statement(f"{scaler}.update()\n")
    return Edit(statement, lambda node: followed_by(node, [update]))


def _owned_by(function: cst.FunctionDef | None, scaler: str, facts: ModuleFacts) -> bool:
    """Whether `scaler` is a local of `function` that nothing else can reach: it
    binds it, never receives, passes, returns or stores it (only calls its
    methods), and updates it nowhere.  Then an update in another function is
    another scaler's, and does not excuse this one."""
    if function is None or "." in scaler:
        return False
    if scaler in parameter_names(function):
        return False
    code = code_only(facts.module.code_for_node(function))
    name = re.escape(scaler)
    if re.search(rf"\b{name}\s*\.\s*update\s*\(", code):
        return False
    if not re.search(rf"(?<![\w.]){name}\s*=[^=]", code):
        return False  # not bound here: a global
    # Any use but `scaler.method(...)` and its own binding lets the object escape.
    return not re.search(rf"(?<![\w.]){name}\b(?!\s*\.|\s*=[^=])", code)


class MissingScalerUpdate(Rule):
    code = "AMP104"

    def check(self, facts: ModuleFacts, settings: Settings) -> Iterator[Diagnostic]:
        for missing in facts.missing_updates:
            diagnostic = self._missing(missing, facts)
            if diagnostic is not None:
                yield diagnostic
        for early in facts.early_updates:
            yield self._early(early, facts)

    def _missing(self, missing: MissingUpdate, facts: ModuleFacts) -> Diagnostic | None:
        scaler = missing.scaler
        updated = rf"\b{re.escape(scaler)}\s*\.\s*update\s*\("
        if re.search(updated, facts.code_text) and not _owned_by(missing.function, scaler, facts):
            return None  # updated elsewhere (a caller, another method): not for a guess
        step = facts.module.code_for_node(missing.last_step.call)
        message = (
            f"`{scaler}.update()` never follows `{step}`: the next iteration's step raises "
            f'("step() has already been called since the last update()"); call '
            f"`{scaler}.update()` after the last `{scaler}.step` of each iteration"
        )
        statement = missing.last_step.statement
        fix = None
        if isinstance(statement, cst.SimpleStatementLine):
            fix = Fix(
                Applicability.SAFE,
                f"`{scaler}.update()` after `{step}`",
                (update_after(statement, scaler),),
            )
        return Diagnostic(self.code, message, facts.span(missing.last_step.call), fix)

    def _early(self, early: EarlyUpdate, facts: ModuleFacts) -> Diagnostic:
        scaler = early.scaler
        later = facts.module.code_for_node(early.later_step.call)
        message = (
            f"`{scaler}.update()` runs before `{later}`, which then divides gradients "
            "scaled with the old loss scale by the new one; update once, after the last "
            f"`{scaler}.step` of the iteration"
        )
        fix = None
        last = early.last_step.statement
        if removable(early.update.statement) and isinstance(last, cst.SimpleStatementLine):
            edits = [Edit(early.update.statement, removed)]
            if not early.updated_after:
                edits.append(update_after(last, scaler))
            fix = Fix(
                Applicability.SAFE,
                f"one `{scaler}.update()` after the last step",
                tuple(edits),
            )
        return Diagnostic(self.code, message, facts.span(early.update.call), fix)
