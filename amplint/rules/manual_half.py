"""AMP111: a float16 cast by hand next to autocast.

Autocast keeps the weights in float32 and casts per op.  ``model.half()``
makes the optimizer update float16 weights (small updates round away, and a
GradScaler raises "Attempting to unscale FP16 gradients"); inputs cast by
hand are cast again where autocast wants them and lose precision where it
does not.  Reported; the unsafe fix removes the cast.
"""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from amplint.analysis import ModuleFacts
from amplint.analysis.manual_half import ManualHalf
from amplint.config import Settings
from amplint.diagnostics import Applicability, Diagnostic, Edit, Fix
from amplint.rules.base import Rule


class ManualHalfRule(Rule):
    code = "AMP111"

    def check(self, facts: ModuleFacts, settings: Settings) -> Iterator[Diagnostic]:
        for half in facts.manual_halves:
            yield self._diagnostic(half, facts)

    def _diagnostic(self, half: ManualHalf, facts: ModuleFacts) -> Diagnostic:
        call = facts.module.code_for_node(half.call)
        message = (
            f"`{call}` casts `{half.receiver}` to float16 by hand in a step that uses "
            "autocast, which casts per op and keeps weights in float32: a half model loses "
            "small updates (and a GradScaler refuses its gradients), half inputs lose "
            "precision autocast would keep"
        )
        fix = Fix(
            Applicability.UNSAFE,
            "float16 cast removed",
            (Edit(half.statement, lambda statement: _uncast(statement, half)),),
        )
        return Diagnostic(self.code, message, facts.span(half.call), fix)


def _uncast(statement: cst.SimpleStatementLine, half: ManualHalf):
    """The statement without the cast; nothing when that leaves it doing nothing
    (`model.half()` alone, `x = x.half()`)."""
    rewritten = statement.deep_replace(half.call, half.without_cast)
    small = rewritten.body[0] if len(rewritten.body) == 1 else None
    inert = isinstance(small, cst.Expr) and isinstance(small.value, (cst.Name, cst.Attribute))
    if isinstance(small, cst.Assign) and len(small.targets) == 1:
        code = cst.Module([]).code_for_node
        inert = code(small.targets[0].target) == code(small.value)
    if inert and not any(line.comment for line in statement.leading_lines):
        return cst.RemovalSentinel.REMOVE
    return rewritten
