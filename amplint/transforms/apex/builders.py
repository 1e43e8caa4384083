"""A builder returns the GradScaler with the optimizer it made.

``def build(args): ...; model, optimizer = amp.initialize(...); return model,
optimizer``, called as ``model, optimizer = build(args)`` in ``main()``, hands
the optimizer to the function that trains.  The scaler goes the same way: the
builder returns it after what it returned already, and each call unpacks it
beside the optimizer (project/apex.py names the builders and their receivers)::

    def build(args):                            def build(args):
        ...                                         ...
        if args.evaluate:                           if args.evaluate:
            return model, None                          return model, None, None
        model, optimizer = amp.initialize(...)      scaler = torch.amp.GradScaler(...)
        return model, optimizer                     return model, optimizer, scaler

    model, optimizer = build(args)              model, optimizer, scaler = build(args)

A return before the scaler is made (an evaluation path that makes no
optimizer) returns None in its place.  Every return must have one shape and
every call must unpack it, or the migration stops and names the one that does
not: a call that keeps the tuple whole would get one element more than it
expects.
"""

from __future__ import annotations

from typing import Callable

import libcst as cst

from amplint.analysis import ModuleFacts
from amplint.analysis.visitor import children
from amplint.project.apex import Taker
from amplint.transforms.apex.common import MigrationBlocked
from amplint.transforms.apex.reach import CallsOf, ScalerReach

_NESTED = (cst.FunctionDef, cst.ClassDef, cst.Lambda)
_COMMA = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))


Planned = list[tuple[cst.CSTNode, Callable]]


def return_scaler(
    facts: ModuleFacts,
    builder: cst.FunctionDef,
    made_at: cst.BaseStatement,
    scaler: str,
    arity_of: dict[int, int],
) -> Planned:
    """The rewrites that end `builder`'s returns with `scaler`, made by (or
    before) `made_at` of its body: None in the returns that come before it.
    `arity_of` gives the element count of a return whose value the migration
    rewrites (`return amp.initialize(model, optimizer)`: 2), by node id."""
    name = builder.name.value
    returns = _own_returns(builder)
    shapes = {arity_of.get(id(r.value), _arity(r.value)) for r in returns if r.value is not None}
    if any(r.value is None for r in returns) or len(shapes) != 1 or shapes == {1}:
        lines = ", ".join(str(facts.span(r).line) for r in returns)
        raise MigrationBlocked(
            f"`{name}` runs amp.initialize and returns what its callers train with, but not "
            f"as one tuple (returns at lines {lines}): the GradScaler goes back to them "
            "with the optimizer, so return the same tuple everywhere first"
        )
    body = list(builder.body.body) if isinstance(builder.body, cst.IndentedBlock) else []
    made = next(i for i, statement in enumerate(body) if statement is made_at)
    planned: Planned = []
    for position, statement in enumerate(body):
        if isinstance(statement, _NESTED):
            continue  # a def in the builder returns for itself
        for returned in _own_returns(statement):
            value = scaler if position >= made else "None"
            planned.append((returned, lambda node, value=value: _with_element(node, value)))
    return planned


def take_scaler(reach: ScalerReach, builders: frozenset[Taker]) -> Planned:
    """The rewrites that make each call of a builder in this module unpack the
    scaler too, into the name its receiver reads it by."""
    planned: Planned = []
    finder = CallsOf(reach, builders)
    finder.walk(reach.facts.module)
    facts = reach.facts
    for call, scope, builder in finder.found:
        statement = finder.statement_of.get(id(call))
        line = facts.span(call).line
        place = reach.place(scope, facts.module)
        if not _unpacking(statement, call):
            raise MigrationBlocked(
                f"`{builder.name}` returns the GradScaler with the optimizer after the "
                f"migration, and the call at line {line} does not unpack what it returns "
                f"(`{facts.module.code_for_node(call)}`): unpack it into names first"
            )
        if scope is not place.top and scope is not place.method:
            raise MigrationBlocked(
                f"`{builder.name}` returns the GradScaler with the optimizer after the "
                f"migration, and the call at line {line} is in a function nested in "
                f"`{place.top.name.value}`, whose scaler it would not set"
            )
        target = reach.expression(scope)
        planned.append(
            (
                statement.body[0],
                lambda node, target=target: node.with_changes(
                    targets=[node.targets[0].with_changes(target=_with_target(node, target))]
                ),
            )
        )
    return planned


def _own_returns(node: cst.CSTNode) -> list[cst.Return]:
    """The returns in `node` that return from it, not from a def nested in it."""
    found: list[cst.Return] = []
    pending = list(children(node)) if isinstance(node, cst.FunctionDef) else [node]
    while pending:
        current = pending.pop()
        if isinstance(current, cst.Return):
            found.append(current)
        elif not isinstance(current, _NESTED):
            pending.extend(children(current))
    return found


def _arity(value: cst.BaseExpression) -> int:
    if isinstance(value, cst.Tuple) and not any(
        isinstance(e, cst.StarredElement) for e in value.elements
    ):
        return len(value.elements)
    return 1


def _with_element(node: cst.Return, value: str) -> cst.Return:
    """`return a, b` -> `return a, b, value`."""
    returned = node.value
    added = cst.Element(cst.parse_expression(value))
    elements = list(returned.elements)
    elements[-1] = elements[-1].with_changes(comma=_COMMA)
    return node.with_changes(value=returned.with_changes(elements=[*elements, added]))


def _unpacking(statement: cst.SimpleStatementLine | None, call: cst.Call) -> bool:
    """Whether `statement` is `a, b = call`, unpacking the call whole."""
    if statement is None or len(statement.body) != 1:
        return False
    small = statement.body[0]
    if not isinstance(small, cst.Assign) or small.value is not call or len(small.targets) != 1:
        return False
    target = small.targets[0].target
    return isinstance(target, (cst.Tuple, cst.List)) and not any(
        isinstance(element, cst.StarredElement) for element in target.elements
    )


def _with_target(node: cst.Assign, name: str) -> cst.BaseAssignTargetExpression:
    """`a, b = ...` -> `a, b, name = ...`."""
    target = node.targets[0].target
    elements = list(target.elements)
    elements[-1] = elements[-1].with_changes(comma=_COMMA)
    return target.with_changes(elements=[*elements, cst.Element(cst.parse_expression(name))])
