"""Facts about single statements that the training-step analysis is built from:
walking a block in program order, whole-statement calls, names bound and read,
in-place gradient edits."""

from __future__ import annotations

from typing import Iterator, Sequence

import libcst as cst

from amplint.analysis.visitor import Visitor


def statements_in_order(
    body: Sequence[cst.BaseStatement],
) -> Iterator[tuple[int, cst.BaseStatement]]:
    """(top-level index, statement) for every statement of the block in program
    order, through if/with/try but not into loops, functions or classes."""
    for index, statement in enumerate(body):
        yield from _flat_statement(index, statement)


def _flat_statement(index: int, statement: cst.BaseStatement):
    yield index, statement
    if isinstance(statement, (cst.If, cst.With, cst.Try)):
        for block in _child_blocks(statement):
            for child in block.body:
                yield from _flat_statement(index, child)


def _child_blocks(statement: cst.BaseStatement) -> Iterator[cst.BaseSuite]:
    if isinstance(statement, cst.If):
        yield statement.body
        if statement.orelse is not None:
            if isinstance(statement.orelse, cst.If):
                yield from _child_blocks(statement.orelse)
            else:
                yield statement.orelse.body
    elif isinstance(statement, cst.With):
        yield statement.body
    elif isinstance(statement, cst.Try):
        yield statement.body
        for handler in statement.handlers:
            yield handler.body
        if statement.orelse is not None:
            yield statement.orelse.body
        if statement.finalbody is not None:
            yield statement.finalbody.body


def calls_in_line(statement: cst.BaseStatement) -> Iterator[cst.Call]:
    """Calls that make up a whole statement of a simple line: `f(x)`, or the value
    of an assignment such as `loss = optimizer.step(closure)`."""
    if isinstance(statement, cst.SimpleStatementLine):
        for small in statement.body:
            value = getattr(small, "value", None)
            if isinstance(small, (cst.Expr, cst.Assign, cst.AnnAssign)) and isinstance(
                value, cst.Call
            ):
                yield value


def method_name(call: cst.Call) -> str | None:
    return call.func.attr.value if isinstance(call.func, cst.Attribute) else None


class _NameUse(Visitor):
    """Names a statement binds and names it reads."""

    def __init__(self) -> None:
        self.bound: set[str] = set()
        self.read: set[str] = set()
        self._target_depth = 0

    def _visit_target(self, target: cst.CSTNode) -> None:
        self._target_depth += 1
        self.walk(target)
        self._target_depth -= 1

    def visit_Assign(self, node: cst.Assign) -> bool:
        for target in node.targets:
            self._visit_target(target.target)
        self.walk(node.value)
        return False

    def visit_AnnAssign(self, node: cst.AnnAssign) -> bool:
        self._visit_target(node.target)
        if node.value is not None:
            self.walk(node.value)
        return False

    def visit_AugAssign(self, node: cst.AugAssign) -> bool:
        self._visit_target(node.target)
        self.walk(node.target)  # `x += 1` reads x too
        self.walk(node.value)
        return False

    def visit_For(self, node: cst.For) -> bool:
        self._visit_target(node.target)
        self.walk(node.iter)
        self.walk(node.body)
        return False

    def visit_AsName(self, node: cst.AsName) -> bool:
        self._visit_target(node.name)
        return False

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        self.walk(node.value)
        return False

    def visit_Subscript(self, node: cst.Subscript) -> bool:
        # `d[k] = v` reads d (and mutates it) rather than binding a name
        depth, self._target_depth = self._target_depth, 0
        self.walk(node.value)
        for element in node.slice:
            self.walk(element)
        self._target_depth = depth
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        self.walk(node.value)
        return False

    def visit_Name(self, node: cst.Name) -> None:
        (self.bound if self._target_depth else self.read).add(node.value)


def name_use(node: cst.CSTNode) -> _NameUse:
    use = _NameUse()
    use.walk(node)
    return use


def _chain_has_attribute(node: cst.BaseExpression, attribute: str) -> bool:
    while isinstance(node, (cst.Attribute, cst.Call, cst.Subscript)):
        if isinstance(node, cst.Attribute):
            if node.attr.value == attribute:
                return True
            node = node.value
        elif isinstance(node, cst.Call):
            node = node.func
        else:
            node = node.value
    return False


class GradEditFinder(Visitor):
    """Does a statement change gradients in place (`p.grad.mul_`, `p.grad = ...`)?"""

    def __init__(self) -> None:
        self.found = False

    def visit_Call(self, node: cst.Call) -> None:
        method = method_name(node)
        if (
            method is not None
            and method.endswith("_")
            and method not in ("zero_", "requires_grad_")
            and _chain_has_attribute(node.func.value, "grad")
        ):
            self.found = True

    def _target(self, target: cst.BaseExpression) -> None:
        if isinstance(target, cst.Attribute) and target.attr.value == "grad":
            self.found = True
        elif _chain_has_attribute(target, "grad"):
            self.found = True

    def visit_Assign(self, node: cst.Assign) -> None:
        if not (isinstance(node.value, cst.Name) and node.value.value == "None"):
            for target in node.targets:
                self._target(target.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._target(node.target)
