"""Where the forward pass of a loss built from saved results ran.

REINFORCE and actor-critic scripts run the policy once per environment step and
keep what the loss needs (`policy.saved_log_probs.append(m.log_prob(action))`);
at the end of the episode another function builds the loss from the list and
steps.  That step's block runs no model: its forward pass is in the function
that fills the list, where autocast would have to go.

A def fills a container from a forward pass when it calls the container's
owner: `policy.saved_log_probs.append(...)` beside `probs = policy(state)`, or
`self.saved_log_probs[i].append(...)` beside `self.policy(state)`.  The def that
appends each reward (`policy.rewards.append(reward)`) runs no `policy(...)`:
rewards are what the environment gave, not what the model computed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import libcst as cst

from amplint.analysis.imports import dotted_name
from amplint.analysis.statements import method_name
from amplint.analysis.visitor import Visitor

# Methods that put a value into a container kept on an object.
_FILLING_METHODS = {"append", "extend", "insert", "appendleft"}


@dataclass(frozen=True)
class SavedForward:
    """Outputs a step reads from a container another def fills while running the model."""

    container: str  # `policy.saved_log_probs`, as the step reads it
    filler: str  # the def that fills it while calling its owner


@dataclass(frozen=True)
class _Filling:
    """A def that appends to an owner's container."""

    owner: str  # `policy` of `policy.saved_log_probs.append(...)`
    function: cst.FunctionDef
    methods: frozenset[str]  # the defs of the class `function` is a method of


def saved_forward(
    module: cst.Module, step_statements: Iterable[cst.CSTNode]
) -> SavedForward | None:
    """The container that the step's statements read and that a def of the
    module fills while calling the container's owner, or None.  Containers are
    matched by their attribute name: `self.saved_log_probs` filled in a method
    is `policy.saved_log_probs` read by a module function."""
    reads = _AttributeReads()
    for statement in step_statements:
        reads.walk(statement)
    if not reads.names:
        return None
    fillers = _Fillers()
    fillers.walk(module)
    for container in reads.names:
        for filling in fillers.by_attribute.get(container.rsplit(".", 1)[-1], ()):
            calls = _OwnerCalls(filling)
            calls.walk(filling.function.body)
            if calls.found:
                return SavedForward(container, filling.function.name.value)
    return None


class _AttributeReads(Visitor):
    """Dotted attribute chains read (`policy.saved_log_probs`), in order."""

    def __init__(self) -> None:
        self.names: dict[str, None] = {}

    def visit_Attribute(self, node: cst.Attribute) -> None:
        name = dotted_name(node)
        if name is not None:
            self.names.setdefault(name, None)


class _Fillers(Visitor):
    """Per attribute name, the defs that call `<owner>.<attribute>.append(...)`
    (or on an item of it: `<owner>.<attribute>[key].append(...)`)."""

    def __init__(self) -> None:
        self.by_attribute: dict[str, list[_Filling]] = {}
        self._functions: list[cst.FunctionDef] = []
        self._methods: list[frozenset[str]] = [frozenset()]

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._methods.append(
            frozenset(
                statement.name.value
                for statement in node.body.body
                if isinstance(statement, cst.FunctionDef)
            )
        )

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self._methods.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._functions.append(node)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._functions.pop()

    def visit_Call(self, node: cst.Call) -> None:
        if not self._functions or method_name(node) not in _FILLING_METHODS:
            return
        container = node.func.value
        while isinstance(container, cst.Subscript):
            container = container.value
        if not isinstance(container, cst.Attribute):
            return
        owner = dotted_name(container.value)
        if owner is None:
            return
        filling = _Filling(owner, self._functions[-1], self._methods[-1])
        found = self.by_attribute.setdefault(container.attr.value, [])
        if filling not in found:
            found.append(filling)


class _OwnerCalls(Visitor):
    """Whether a def calls the owner of the container it fills: `policy(x)`, or
    a callable attribute of it (`self.policy(x)`; not one of its methods)."""

    def __init__(self, filling: _Filling) -> None:
        self.filling = filling
        self.found = False

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if dotted_name(func) == self.filling.owner:
            self.found = True
        elif (
            isinstance(func, cst.Attribute)
            and dotted_name(func.value) == self.filling.owner
            and func.attr.value not in _FILLING_METHODS
            and not (self.filling.owner == "self" and func.attr.value in self.filling.methods)
        ):
            self.found = True
