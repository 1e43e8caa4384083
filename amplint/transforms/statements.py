"""Statement-level rewrites planned by node identity: insert lines before or
after a statement, wrap a run of statements in a compound statement, replace a
node.  One plan is carried out in one pass over the subtree it was made for."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import libcst as cst

from amplint.diagnostics import Edit

Wrapper = Callable[[Sequence[cst.BaseStatement]], cst.BaseCompoundStatement]


@dataclass
class StatementPlan:
    """Statements to insert, wrap or replace, applied to a tree in one pass."""

    # Keys are ids of nodes in the tree the plan was made from.
    insert_before: dict[int, list[cst.BaseStatement]] = field(default_factory=dict)
    insert_after: dict[int, list[cst.BaseStatement]] = field(default_factory=dict)
    # first statement id -> (last statement id, build the compound statement)
    wraps: dict[int, tuple[int, Wrapper]] = field(default_factory=dict)
    replace: dict[int, Callable[[cst.CSTNode], cst.CSTNode]] = field(default_factory=dict)

    def before(self, statement: cst.CSTNode, *new: cst.BaseStatement) -> None:
        self.insert_before.setdefault(id(statement), []).extend(new)

    def after(self, statement: cst.CSTNode, *new: cst.BaseStatement) -> None:
        self.insert_after.setdefault(id(statement), []).extend(new)

    def wrap(self, first: cst.CSTNode, last: cst.CSTNode, wrapper: Wrapper) -> None:
        self.wraps[id(first)] = (id(last), wrapper)

    def replace_node(self, node: cst.CSTNode, rewrite: Callable[[cst.CSTNode], cst.CSTNode]):
        self.replace[id(node)] = rewrite

    def apply(self, node: cst.CSTNode) -> cst.CSTNode:
        return node.visit(_PlanApplier(self))


def split_leading_lines(
    lines: Sequence[cst.EmptyLine],
) -> tuple[list[cst.EmptyLine], list[cst.EmptyLine]]:
    """(the blank lines before the first comment, the rest)."""
    lines = list(lines)
    first_comment = next((i for i, line in enumerate(lines) if line.comment), len(lines))
    return lines[:first_comment], lines[first_comment:]


def _separation(statement: cst.BaseStatement, top_level: bool) -> list[cst.EmptyLine]:
    """Blank lines black keeps between a new line and the statement after it:
    two before a top-level def or class, one before a nested one, else none."""
    if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
        return [cst.EmptyLine(indent=False)] * (2 if top_level else 1)
    return []


def _without_leading_lines(statement: cst.BaseStatement) -> cst.BaseStatement:
    return statement.with_changes(leading_lines=())


class _PlanApplier(cst.CSTTransformer):
    def __init__(self, plan: StatementPlan) -> None:
        self.plan = plan

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode):
        rewrite = self.plan.replace.get(id(original_node))
        if rewrite is not None:
            updated_node = rewrite(updated_node)
        if isinstance(updated_node, (cst.IndentedBlock, cst.Module)):
            top_level = isinstance(original_node, cst.Module)
            body = self._rebuild(original_node.body, updated_node.body, top_level)
            updated_node = updated_node.with_changes(body=body)
        return updated_node

    def _rebuild(
        self,
        originals: Sequence[cst.BaseStatement],
        updated: Sequence[cst.BaseStatement],
        top_level: bool,
    ) -> list[cst.BaseStatement]:
        plan = self.plan
        result: list[cst.BaseStatement] = []
        wrapping: tuple[int, Wrapper] | None = None
        wrapped: list[cst.BaseStatement] = []
        for original, statement in zip(originals, updated):
            before = plan.insert_before.get(id(original), [])
            if before:
                # Blank lines above the statement move above the inserted lines;
                # its comments stay with it.
                blank, comments = split_leading_lines(statement.leading_lines)
                before = [before[0].with_changes(leading_lines=blank), *before[1:]]
                statement = statement.with_changes(
                    leading_lines=comments or _separation(statement, top_level)
                )
            target = wrapped if wrapping is not None else result
            target.extend(before)
            if wrapping is None and id(original) in plan.wraps:
                wrapping = plan.wraps[id(original)]
                target = wrapped
            target.append(statement)
            target.extend(plan.insert_after.get(id(original), []))
            if wrapping is not None and id(original) == wrapping[0]:
                head = wrapped[0]
                compound = wrapping[1]([_without_leading_lines(head), *wrapped[1:]])
                result.append(compound.with_changes(leading_lines=head.leading_lines))
                wrapping, wrapped = None, []
        if wrapping is not None:
            raise ValueError("a wrapped run of statements does not end in the same block")
        return result


# Single-statement rewrites for `Edit`s: a rule edits the statement node and
# returns these in its place.
def preceded_by(
    new: Sequence[cst.BaseStatement], statement: cst.BaseStatement
) -> cst.FlattenSentinel:
    """`new`, then `statement`; as in a plan, blank lines above the statement
    move above the new lines and its comments stay with it."""
    blank, comments = split_leading_lines(statement.leading_lines)
    first = new[0].with_changes(leading_lines=blank)
    return cst.FlattenSentinel([first, *new[1:], statement.with_changes(leading_lines=comments)])


def followed_by(
    statement: cst.BaseStatement, new: Sequence[cst.BaseStatement]
) -> cst.FlattenSentinel:
    return cst.FlattenSentinel([statement, *new])


def removable(statement: cst.BaseStatement) -> bool:
    """Whether deleting the line loses nothing but itself: one small statement,
    no comment above it (a trailing comment is about the line and goes with it)."""
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and not any(line.comment for line in statement.leading_lines)
    )


def moved_into(
    compound: cst.BaseCompoundStatement,
    statements: Sequence[cst.BaseStatement],
    at_start: bool,
) -> tuple[Edit, ...]:
    """The edits that move `statements`, siblings of `compound`, into its body:
    first in it (`at_start`) or last.  Comments above them move with them."""

    def rewrite(node: cst.BaseCompoundStatement) -> cst.BaseCompoundStatement:
        body = list(node.body.body)
        body = [*statements, *body] if at_start else [*body, *statements]
        return node.with_changes(body=node.body.with_changes(body=body))

    return (*(Edit(statement, removed) for statement in statements), Edit(compound, rewrite))


def removed(_statement: cst.BaseStatement) -> cst.RemovalSentinel:
    """The rewrite that deletes a statement; libcst writes `pass` into a block
    left empty."""
    return cst.RemovalSentinel.REMOVE
