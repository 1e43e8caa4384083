"""Facts about single statements that the training-step analysis is built from:
walking a block in program order, whole-statement calls, names bound and read,
in-place gradient edits."""

from __future__ import annotations

from typing import Iterator, Sequence

import libcst as cst

from amplint.analysis.visitor import Visitor

# An `if` test as written (negation folded in) and the branch taken: `(test, True)`
# in its body, `(test, False)` in its else.  `x is None` and `x is not None`, `f`
# and `not f`, are one test.
Condition = tuple[str, bool]
Branches = frozenset[Condition]


def statements_in_order(
    body: Sequence[cst.BaseStatement], into_loops: bool = False
) -> Iterator[tuple[int, cst.BaseStatement, Branches]]:
    """(top-level index, statement, branch conditions) for every statement of the
    block in program order, through if/with/try (and the bodies of loops, when
    `into_loops`) but never into functions or classes."""
    path: Branches = frozenset()
    for index, statement in enumerate(body):
        yield from _flat_statement(index, statement, path, into_loops)
        path |= _exits_unless(statement)


def exclusive(first: Branches, second: Branches) -> bool:
    """Whether no run of the block reaches both: opposite branches of one test."""
    return any((test, not taken) in second for test, taken in first)


def _flat_statement(
    index: int, statement: cst.BaseStatement, path: Branches, into_loops: bool = False
):
    yield index, statement, path
    blocks = list(_child_blocks(statement))
    if into_loops and isinstance(statement, (cst.For, cst.While)):
        blocks.append((statement.body, frozenset()))
    for block, conditions in blocks:
        inner = path | conditions
        for child in block.body:
            yield from _flat_statement(index, child, inner, into_loops)
            inner |= _exits_unless(child)


def _exits_unless(statement: cst.BaseStatement) -> Branches:
    """After `if scaler is None: ...; return`, the rest of the block runs only
    when the test is false."""
    if isinstance(statement, cst.If) and statement.orelse is None:
        last = statement.body.body[-1] if statement.body.body else None
        if isinstance(last, cst.SimpleStatementLine):
            last = last.body[-1]
        if isinstance(last, (cst.Return, cst.Raise, cst.Continue, cst.Break)):
            test, taken = if_condition(statement.test)
            return frozenset([(test, not taken)])
    return frozenset()


def _child_blocks(statement: cst.BaseStatement) -> Iterator[tuple[cst.BaseSuite, Branches]]:
    if isinstance(statement, cst.If):
        test = if_condition(statement.test)
        yield statement.body, frozenset([test])
        otherwise = frozenset([(test[0], not test[1])])
        if isinstance(statement.orelse, cst.If):
            for block, conditions in _child_blocks(statement.orelse):
                yield block, otherwise | conditions
        elif statement.orelse is not None:
            yield statement.orelse.body, otherwise
    elif isinstance(statement, cst.With):
        yield statement.body, frozenset()
    elif isinstance(statement, cst.Try):
        blocks = [statement.body] + [handler.body for handler in statement.handlers]
        blocks += [part.body for part in (statement.orelse, statement.finalbody) if part]
        for block in blocks:
            yield block, frozenset()


def child_suites(statement: cst.CSTNode) -> Iterator[Sequence[cst.BaseStatement]]:
    """The statement lists directly inside a compound statement (or a block)."""
    if isinstance(statement, cst.IndentedBlock):
        yield statement.body
        return
    for child in statement.children:
        if isinstance(child, cst.IndentedBlock):
            yield child.body
        elif isinstance(child, (cst.Else, cst.Finally, cst.ExceptHandler, cst.If)):
            yield from child_suites(child)


def condition_code(conditions: Branches) -> str:
    """The test that holds exactly on these branches: `scaler is not None and args.amp`."""
    parts = []
    for test, taken in sorted(conditions):
        if test.endswith(" is None"):
            parts.append(test if taken else test[: -len("None")] + "not None")
            continue
        simple = isinstance(
            cst.parse_expression(test), (cst.Name, cst.Attribute, cst.Call, cst.Subscript)
        )
        if not taken:
            test = f"not {test}" if simple else f"not ({test})"
        elif not simple and len(conditions) > 1:
            test = f"({test})"
        parts.append(test)
    return " and ".join(parts)


_CODE = cst.Module([])


def if_condition(test: cst.BaseExpression) -> Condition:
    """The condition an `if` with this test puts its body under."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner, taken = if_condition(test.expression)
        return inner, not taken
    if (
        isinstance(test, cst.Comparison)
        and len(test.comparisons) == 1
        and isinstance(test.comparisons[0].operator, (cst.Is, cst.IsNot))
        and isinstance(test.comparisons[0].comparator, cst.Name)
        and test.comparisons[0].comparator.value == "None"
    ):
        left = _CODE.code_for_node(test.left.with_changes(lpar=[], rpar=[]))
        return f"{left} is None", isinstance(test.comparisons[0].operator, cst.Is)
    return _CODE.code_for_node(test.with_changes(lpar=[], rpar=[])), True


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


def parameter_names(function: cst.FunctionDef) -> list[str]:
    """The names of the function's parameters, but `*args` and `**kwargs`."""
    params = function.params
    return [p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)]


def assigned_name(statement: cst.BaseStatement, value: cst.BaseExpression) -> str | None:
    """The plain name `statement` binds to `value` (`name = value`, the first
    target of a chain), else None."""
    if isinstance(statement, cst.SimpleStatementLine):
        for small in statement.body:
            if (
                isinstance(small, cst.Assign)
                and small.value is value
                and isinstance(small.targets[0].target, cst.Name)
            ):
                return small.targets[0].target.value
    return None


def string_value(node: cst.BaseExpression | None) -> str | None:
    """The text of a plain string literal; None for anything else."""
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


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


# Edits that multiply every gradient by one factor commute with the loss scale,
# so they may run on scaled gradients; so does writing back a copy of the
# gradients all-reduced by hand (`p.grad.data.copy_(flat[o:o + n] / world)`,
# cleanrl's multi-GPU PPO).  Anything else (a clamp, adding weight decay) must
# see unscaled ones.
_HOMOGENEOUS_EDITS = {"mul_", "div_", "copy_"}


class GradEditFinder(Visitor):
    """Does a statement change gradients in place (`p.grad.mul_`, `p.grad = ...`)?
    `nonlinear`: some edit is not a multiplication by a factor (`clamp_`), so
    it gives another result on scaled gradients."""

    def __init__(self) -> None:
        self.found = False
        self.nonlinear = False

    def visit_Call(self, node: cst.Call) -> None:
        method = method_name(node)
        if (
            method is not None
            and method.endswith("_")
            and method not in ("zero_", "requires_grad_")
            and _chain_has_attribute(node.func.value, "grad")
        ):
            self.found = True
            self.nonlinear = self.nonlinear or method not in _HOMOGENEOUS_EDITS

    def _target(self, target: cst.BaseExpression, homogeneous: bool) -> None:
        if (isinstance(target, cst.Attribute) and target.attr.value == "grad") or (
            _chain_has_attribute(target, "grad")
        ):
            self.found = True
            self.nonlinear = self.nonlinear or not homogeneous

    def visit_Assign(self, node: cst.Assign) -> None:
        if not (isinstance(node.value, cst.Name) and node.value.value == "None"):
            for target in node.targets:
                self._target(target.target, homogeneous=False)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        scaling = isinstance(node.operator, (cst.MultiplyAssign, cst.DivideAssign))
        self._target(node.target, homogeneous=scaling)


class _GradReads(Visitor):
    """Reads of a `.grad` value (`p.grad.norm()`, `[p.grad for p in params]`),
    not counting tests against None (`if p.grad is not None`) or assignment
    targets (`p.grad = None`)."""

    def __init__(self) -> None:
        self.found = False

    def visit_Comparison(self, node: cst.Comparison) -> bool:
        return not any(is_none(target.comparator) for target in node.comparisons)

    def visit_Assign(self, node: cst.Assign) -> bool:
        self.walk(node.value)
        return False

    def visit_AugAssign(self, node: cst.AugAssign) -> bool:
        self.walk(node.value)
        return False

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value == "grad":
            self.found = True


def reads_gradients(statement: cst.CSTNode) -> bool:
    """Whether `statement` reads the value of some `.grad`: on a scaled step it
    would read the gradients times the loss scale (a logged gradient norm)."""
    reads = _GradReads()
    reads.walk(statement)
    return reads.found


def is_none(node: cst.BaseExpression) -> bool:
    """Whether `node` is the name `None`."""
    return isinstance(node, cst.Name) and node.value == "None"


def positional_args(call: cst.Call) -> list[cst.Arg]:
    """The arguments of `call` given by position (not `*args`)."""
    return [arg for arg in call.args if arg.keyword is None and not arg.star]
