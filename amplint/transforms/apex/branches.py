"""What happens to the code around apex.amp: the probes of its availability
(`assert amp is not None`, `hasattr(amp, "state_dict")`), the import fallbacks
(`try: from apex import amp / except ImportError: amp = None`), a restore of
apex's state, and the `if args.fp16: <apex> else: <fp32>` branches, whose FP32
side is kept and then given autocast and the GradScaler.

`ApexBranches` is mixed into the migrator (migration.py): it reads the
migrator's `facts`, `uses` and `book`, and calls its `code`, `scaler_at` and
`_remove`.
"""

from __future__ import annotations

from typing import Sequence

import libcst as cst

from amplint.analysis.apex import ApexUse
from amplint.analysis.imports import dotted_name
from amplint.analysis.statements import string_value
from amplint.analysis.visitor import children, descendants
from amplint.names import free_name
from amplint.transforms.apex.statements import (
    imports_amp_under_if,
    imports_amp_with_fallback,
    in_place_of,
    is_none_test,
    nodes_in,
    replaced_by_branch,
)

# The apex.amp members the migration maps: a probe for one of them (`hasattr(amp,
# "state_dict")`, `"state_dict" in amp.__dict__`) holds once migrated.
_MAPPED_MEMBERS = frozenset(
    {
        "initialize",
        "scale_loss",
        "master_params",
        "state_dict",
        "load_state_dict",
        "float_function",
        "half_function",
        "promote_function",
        "register_float_function",
        "register_half_function",
        "register_promote_function",
        "disable_casts",
    }
)
# What apex adds to a training step, and an FP32 branch beside it does plainly.
_STEP_MEMBERS = {"scale_loss", "master_params"}


class ApexBranches:
    """The migrator's decisions about probes, fallbacks and FP32 branches."""

    def _restore_guarded(self, use: ApexUse) -> bool:
        """`amp.load_state_dict(state)` as a statement of its own becomes a
        restore that checkpoints from before the migration survive: apex's
        state (`{"loss_scaler0": {...}}`) and a disabled scaler's empty one are
        skipped (GradScaler raises on both), and the scaler starts afresh."""
        statement = use.statement
        if (
            use.call is None
            or len(use.call.args) != 1
            or not isinstance(statement, cst.SimpleStatementLine)
            or len(statement.body) != 1
            or not isinstance(statement.body[0], cst.Expr)
            or statement.body[0].value is not use.call
        ):
            return False
        state = self.code(use.call.args[0].value)
        scaler = self.scaler_at(use.scope)
        lines = []
        if nodes_in(use.call.args[0].value, cst.Call):
            held = free_name(("amp_state", "scaler_state"), self.facts.text)
            lines.append(f"{held} = {state}\n")
            state = held
        lines.append(
            f'if {state} and "loss_scaler0" not in {state}:  # not apex\'s state, not empty\n'
            f"    {scaler}.load_state_dict({state})\n"
        )
        replacement = [cst.parse_statement(line) for line in lines]

        def guarded(node: cst.SimpleStatementLine) -> cst.FlattenSentinel:
            first = replacement[0].with_changes(leading_lines=node.leading_lines)
            return cst.FlattenSentinel([first, *replacement[1:]])

        self.book.rewrite(statement, guarded)
        return True

    # -- try: from apex import amp / except ImportError: amp = None -----------------
    def _drop_import_fallbacks(self) -> None:
        """A `try` that only imports apex.amp goes whole, its handlers with it:
        they ran where apex was missing (`amp = None`, `use_amp = False`, a
        warning), and torch.amp is never missing."""
        stack: list[cst.CSTNode] = [self.facts.module]
        while stack:
            node = stack.pop()
            if (isinstance(node, cst.Try) and imports_amp_with_fallback(node)) or (
                isinstance(node, cst.If) and imports_amp_under_if(node)
            ):
                self.book.rewrite(node, lambda _: cst.RemovalSentinel.REMOVE)
                continue
            if isinstance(node, (cst.Module, cst.IndentedBlock, cst.If, cst.Else, cst.FunctionDef)):
                stack.extend(children(node))

    # -- assert amp is not None ------------------------------------------------------
    def _availability_probe(self, use: ApexUse) -> bool:
        """`amp is not None` asks whether apex imported; torch.amp always does.
        An `assert` of it goes (with an `if` holding nothing else), an `if`
        testing it alone keeps the branch that runs, other probes become
        `True` / `False`.  False for any other use of `amp`."""
        probe = next(
            (
                comparison
                for comparison in nodes_in(use.statement, cst.Comparison)
                if is_none_test(comparison, {id(use.node)})
            ),
            None,
        )
        if probe is None:
            return False
        available = isinstance(probe.comparisons[0].operator, cst.IsNot)
        statement = use.statement
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
        if not (isinstance(small, cst.Assert) and small.test is probe and available):
            self._answer(statement, probe, available)
            return True
        vanishing: cst.BaseStatement = statement
        for holder in reversed(use.ancestors):
            if not (
                isinstance(holder, cst.If)
                and holder.orelse is None
                and len(holder.body.body) == 1
                and not nodes_in(holder.test, cst.Call)
            ):
                break
            vanishing = holder
        self._remove(vanishing)
        return True

    def _feature_probe(self, use: ApexUse) -> bool:
        """`hasattr(amp, "state_dict")` and `"state_dict" in amp.__dict__` ask
        whether the installed apex has a feature (timm's ApexScaler); for a
        member the migration maps, the answer is yes.  An `if` testing only
        that keeps the branch that runs; other probes become `True`/`False`."""
        probe, holds = None, True
        for node in descendants(use.statement):
            if (
                use.member == ""
                and isinstance(node, cst.Call)
                and dotted_name(node.func) == "hasattr"
                and len(node.args) == 2
                and node.args[0].value is use.node
            ):
                probe, name = node, string_value(node.args[1].value)
            elif (
                use.member == "__dict__"
                and isinstance(node, cst.Comparison)
                and len(node.comparisons) == 1
                and node.comparisons[0].comparator is use.node
                and isinstance(node.comparisons[0].operator, (cst.In, cst.NotIn))
            ):
                probe, name = node, string_value(node.left)
                holds = isinstance(node.comparisons[0].operator, cst.In)
            if probe is not None:
                break
        if probe is None or name not in _MAPPED_MEMBERS:
            return False
        self._answer(use.statement, probe, holds)
        return True

    def _answer(self, statement: cst.BaseStatement, probe: cst.CSTNode, holds: bool) -> None:
        """`probe` answered: an `if` testing only it becomes the branch that runs
        (nothing, where that is an absent `else`), any other use a literal."""
        if not (isinstance(statement, cst.If) and statement.test is probe):
            self.book.rewrite(probe, lambda _: cst.Name("True" if holds else "False"))
            return

        def branch(node: cst.If):
            if not isinstance(node, cst.If):
                # Already replaced by the branch that runs (`if amp is not None:
                # <apex> else: <fp32>` keeps its FP32 side, see _keep_fp32_branches).
                return node
            # `node` has its branches migrated already: keep them, not the originals.
            if holds:
                kept = list(node.body.body)
            elif isinstance(node.orelse, cst.If):  # an `elif` runs instead: it is the `if`
                return node.orelse.with_changes(leading_lines=node.leading_lines)
            else:
                kept = list(node.orelse.body.body) if node.orelse is not None else []
            return in_place_of(node, kept) if kept else cst.RemovalSentinel.REMOVE

        self.book.rewrite(statement, branch)

    # -- if args.fp16: <apex> else: <fp32> --------------------------------------------
    def _keep_fp32_branches(self) -> set[int]:
        """Plan each `if` with apex on one side only, and nothing else there, to
        become its other side; returns the ids of the dropped branches' holders."""
        dropped: set[int] = set()
        for use in self.uses:
            for index, holder in enumerate(use.ancestors):
                if not isinstance(holder, cst.If) or not isinstance(holder.orelse, cst.Else):
                    continue
                inside = use.ancestors[index + 1] if index + 1 < len(use.ancestors) else None
                in_else = inside is holder.orelse
                apex_block = holder.orelse.body if in_else else holder.body
                kept_block = holder.body if in_else else holder.orelse.body
                if id(holder) in dropped or not self._only_apex(apex_block.body, kept_block.body):
                    continue
                if any(self._inside(other, kept_block) for other in self.uses):
                    continue
                dropped.add(id(holder))
                self.book.rewrite(holder, replaced_by_branch(keep_body=in_else))
        return dropped

    def _inside(self, use: ApexUse, block: cst.BaseSuite) -> bool:
        statements = {id(statement) for statement in block.body}
        return id(use.statement) in statements or any(
            id(ancestor) in statements for ancestor in use.ancestors
        )

    def _only_apex(
        self, statements: Sequence[cst.BaseStatement], kept: Sequence[cst.BaseStatement]
    ) -> bool:
        """Whether every statement is apex's half of a step (scale_loss, a clip of
        master_params) that the other branch, `kept`, does in FP32: an apex
        statement itself, or a loop or `if` the other branch has too (same
        header) holding only such statements.  An `if` of apex's own (XLM's
        accumulation, `if n_iter % accumulate == 0:`) is work the FP32 branch
        does not do, and keeps the branch.  An `amp.initialize` is never
        dropped: it becomes the scaler."""
        step_work = [use for use in self.uses if use.member in _STEP_MEMBERS]
        if any(
            use.statement is statement or statement in use.ancestors
            for use in self.uses
            if use.member not in _STEP_MEMBERS
            for statement in statements
        ):
            return False
        counterparts = {self._header(k): k for k in kept if self._header(k) is not None}
        for statement in statements:
            if any(use.statement is statement for use in step_work):
                continue
            counterpart = counterparts.get(self._header(statement))
            if counterpart is None or not self._same_shape(statement, counterpart):
                return False
        return True

    def _same_shape(self, statement: cst.BaseStatement, counterpart: cst.BaseStatement) -> bool:
        """Whether `statement` and the FP32 branch's `counterpart`, of one header,
        hold apex's half and the FP32 half of the same work, `else` included."""
        if not isinstance(statement.body, cst.IndentedBlock) or not isinstance(
            counterpart.body, cst.IndentedBlock
        ):
            return False
        if not self._only_apex(statement.body.body, counterpart.body.body):
            return False
        orelse, other = getattr(statement, "orelse", None), getattr(counterpart, "orelse", None)
        if orelse is None or other is None:
            return orelse is None and other is None
        if isinstance(orelse, cst.Else) and isinstance(other, cst.Else):
            return self._same_shape(orelse, other)
        return self._only_apex([orelse], [other])

    def _header(self, statement: cst.BaseStatement) -> str | None:
        """`for name in names` / `if clip > 0` / `while ...`: a compound
        statement's header, as written; None for any other statement."""
        if isinstance(statement, cst.For):
            return f"for {self.code(statement.target)} in {self.code(statement.iter)}"
        if isinstance(statement, (cst.If, cst.While)):
            return f"{type(statement).__name__} {self.code(statement.test)}"
        return None
