"""AMP101: a backward pass inside an autocast block.

PyTorch's AMP recipe: autocast should wrap only the forward pass and the loss;
backward ops run in the dtype autocast chose for the matching forward ops, so
running backward under autocast buys nothing and is not recommended.  The fix
moves the backward, and every statement after it, out of the block.
"""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from amplint.analysis import ModuleFacts
from amplint.config import Settings
from amplint.diagnostics import Applicability, Diagnostic, Edit, Fix
from amplint.rules.base import Rule


class BackwardInsideAutocast(Rule):
    code = "AMP101"

    def check(self, facts: ModuleFacts, settings: Settings) -> Iterator[Diagnostic]:
        for found in facts.autocast.backward_inside:
            backward = facts.module.code_for_node(found.backward)
            if found.helper is not None:
                # What else the helper does (a loss, a step) is not known here: no fix.
                yield Diagnostic(
                    self.code,
                    f"`{backward}` runs a backward (in `{found.helper}`) inside the autocast "
                    "block; autocast belongs around the forward pass and the loss only: call "
                    "it after the block (not fixed: the helper may compute its loss too)",
                    facts.span(found.backward),
                )
                continue
            message = (
                f"`{backward}` runs inside the autocast block; autocast belongs around the "
                "forward pass and the loss only: move the backward and what follows out"
            )
            fix = None
            if found.split_at is not None:
                fix = Fix(
                    Applicability.SAFE,
                    "backward moved out of the autocast block",
                    (Edit(found.block, lambda node, at=found.split_at: _split(node, at)),),
                )
            yield Diagnostic(self.code, message, facts.span(found.backward), fix)


def _split(block: cst.With, at: int) -> cst.With | cst.FlattenSentinel:
    """The block keeps its first `at` statements; the rest follow it."""
    statements = list(block.body.body)
    moved = statements[at:]
    if at == 0:  # nothing runs under autocast but the backward: no block left
        first = moved[0].with_changes(leading_lines=[*block.leading_lines, *moved[0].leading_lines])
        return cst.FlattenSentinel([first, *moved[1:]])
    kept = block.with_changes(body=block.body.with_changes(body=statements[:at]))
    return cst.FlattenSentinel([kept, *moved])
