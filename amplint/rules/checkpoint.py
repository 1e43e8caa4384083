"""AMP109: a checkpoint that saves or restores the optimizer but not the scaler.

A resumed run whose scaler starts over at 65536 skips steps while it backs off
to the scale it had already found, and its growth tracker restarts; the
optimizer's state it did restore then meets different gradients than it would
have.  The fix saves ``"scaler": S.state_dict()`` next to the optimizer's
state, and restores it behind ``if checkpoint.get("scaler"):`` so checkpoints
written before the fix (no key) and by a disabled scaler (an empty state dict,
which an enabled scaler refuses to load) still load.

A checkpoint written by a module-level helper that receives the optimizer
receives the scaler the same way: a keyword-only ``scaler=None`` parameter,
passed by the calls that have the scaler, with the scaler's lines guarded by
``scaler is not None`` so other callers keep working unchanged.
"""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from amplint.analysis import ModuleFacts
from amplint.analysis.checkpoints import (
    Carrier,
    CheckpointWithoutScaler,
    ResumeWithoutScaler,
    state_dict_of,
)
from amplint.config import Settings
from amplint.diagnostics import Applicability, Diagnostic, Edit, Fix
from amplint.rules.base import Rule
from amplint.transforms.arguments import insert_argument, keyword_argument
from amplint.transforms.scaler_scope import with_keyword_only
from amplint.transforms.statements import followed_by

UNREACHABLE = "; not rewritten: `{scaler}` is not in scope here, pass it in"
MADE_AFTER = (
    "; not rewritten: `{scaler}` is made after this line; make it before, beside the optimizer"
)


def _unplaced(found: CheckpointWithoutScaler | ResumeWithoutScaler) -> str:
    return (MADE_AFTER if found.made_after else UNREACHABLE).format(scaler=found.scaler)


class ScalerNotCheckpointed(Rule):
    code = "AMP109"

    def check(self, facts: ModuleFacts, settings: Settings) -> Iterator[Diagnostic]:
        scan = facts.checkpoints_without_scaler
        for save in scan.saves:
            yield self._save(save, facts)
        for resume in scan.resumes:
            yield self._resume(resume, facts)

    def _save(self, save: CheckpointWithoutScaler, facts: ModuleFacts) -> Diagnostic:
        optimizer = facts.module.code_for_node(save.optimizer_entry.value)
        message = (
            f"the checkpoint saves `{optimizer}` but not `{save.scaler}.state_dict()`: "
            "a resumed run restarts the loss scale from its initial value (65536 by default) "
            "and skips steps finding it again"
        )
        if not save.reachable and save.carrier is None:
            return Diagnostic(
                self.code,
                message + _unplaced(save),
                facts.span(save.optimizer_entry),
            )
        index = next(i for i, e in enumerate(save.checkpoint.elements) if e is save.optimizer_entry)
        quote = save.optimizer_entry.key.quote
        state = f"{save.scaler}.state_dict()"
        if save.optional:
            state = f"{state} if {save.scaler} is not None else None"
        value = cst.parse_expression(state)
        saved = save.optimizer_entry.value
        if isinstance(saved, cst.IfExp) and not save.optional:
            # Saved when the optimizer's state is: `None if final else scaler.state_dict()`.
            side = "body" if state_dict_of(saved.body) is not None else "orelse"
            value = saved.with_changes(**{side: value})
        entry = cst.DictElement(cst.SimpleString(f"{quote}{save.key}{quote}"), value)
        edits = [Edit(save.checkpoint, lambda node: _inserted(node, index, entry))]
        what = f"`{save.scaler}.state_dict()` saved with the checkpoint"
        if save.carrier is not None:
            edits += _passing(save.carrier, save.scaler)
            what = f"`{save.scaler}` passed to `{save.carrier.function.name.value}` and " + what[1:]
        fix = Fix(Applicability.SAFE, what, tuple(edits))
        return Diagnostic(self.code, message, facts.span(save.optimizer_entry), fix)

    def _resume(self, resume: ResumeWithoutScaler, facts: ModuleFacts) -> Diagnostic:
        call = facts.module.code_for_node(resume.call)
        message = (
            f"`{call}` restores the optimizer but the scaler is never restored: the "
            "resumed run restarts the loss scale from its initial value"
        )
        if not resume.reachable and resume.carrier is None:
            return Diagnostic(
                self.code,
                message + _unplaced(resume),
                facts.span(resume.call),
            )
        key, holder, scaler = resume.key, resume.checkpoint, resume.scaler
        quoted = f"{resume.quote}{key}{resume.quote}"
        test = f"{holder}.get({quoted})"
        if resume.optional:
            test = f"{scaler} is not None and {test}"
        restore = cst.parse_statement(
            f"if {test}:\n    {scaler}.load_state_dict({holder}[{quoted}])\n"
        )
        edits = [Edit(resume.statement, lambda node: followed_by(node, [restore]))]
        what = f"`{scaler}` restored when the checkpoint has it"
        if resume.carrier is not None:
            edits += _passing(resume.carrier, scaler)
            what = f"`{scaler}` passed to `{resume.carrier.function.name.value}` and restored"
        fix = Fix(Applicability.SAFE, what, tuple(edits))
        return Diagnostic(self.code, message, facts.span(resume.call), fix)


def _passing(carrier: Carrier, scaler: str) -> list[Edit]:
    """The edits that pass `scaler` to the carrier: a keyword-only parameter
    defaulting to None (a caller that has no scaler, perhaps in another
    module, keeps working) and ``scaler=scaler`` at each call that has it."""
    default = cst.Name("None")
    argument = keyword_argument(scaler, cst.Name(scaler))
    return [
        Edit(carrier.function.params, lambda node: with_keyword_only(node, scaler, default)),
        *(
            Edit(call, lambda node: insert_argument(node, len(node.args), argument))
            for call in carrier.calls
        ),
    ]


def _inserted(node: cst.Dict, index: int, entry: cst.DictElement) -> cst.Dict:
    """`entry` after the element at `index`, laid out like its neighbours: on its
    own line in a dict written one entry per line, a trailing comma kept
    trailing, and a comment after the element left on the element's line."""
    elements = list(node.elements)
    before = elements[index]
    entry = entry.with_changes(
        whitespace_before_colon=before.whitespace_before_colon,
        whitespace_after_colon=before.whitespace_after_colon,
    )
    if index < len(elements) - 1:
        entry = entry.with_changes(comma=_without_comment(before.comma))
    else:
        # The new entry ends the dict now: it takes the trailing comma (or its
        # absence), and the element gets the separator the others use.
        separator = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        if len(elements) >= 2 and isinstance(elements[-2].comma, cst.Comma):
            separator = _without_comment(elements[-2].comma)
        # libcst hangs the line after a trailing comma on the closing brace.
        closing = node.rbrace.whitespace_before
        if isinstance(separator.whitespace_after, cst.ParenthesizedWhitespace) and isinstance(
            closing, cst.ParenthesizedWhitespace
        ):
            separator = separator.with_changes(
                whitespace_after=separator.whitespace_after.with_changes(
                    first_line=closing.first_line
                )
            )
            node = node.with_changes(
                rbrace=node.rbrace.with_changes(
                    whitespace_before=closing.with_changes(first_line=cst.TrailingWhitespace())
                )
            )
        entry = entry.with_changes(comma=before.comma)
        elements[index] = before.with_changes(comma=separator)
    elements.insert(index + 1, entry)
    return node.with_changes(elements=elements)


def _without_comment(comma):
    """The comma with the comment after it, if any, taken off its line."""
    if isinstance(comma, cst.Comma) and isinstance(
        comma.whitespace_after, cst.ParenthesizedWhitespace
    ):
        return comma.with_changes(
            whitespace_after=comma.whitespace_after.with_changes(
                first_line=cst.TrailingWhitespace()
            )
        )
    return comma
