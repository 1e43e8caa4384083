"""A model cast whole to float16 whose optimizer is stepped through a GradScaler.

`model.half()` makes the parameters, and so their gradients, float16.
`GradScaler.unscale_` (which `scaler.step` calls) refuses float16 gradients:
"Attempting to unscale FP16 gradients."  AMP111 reports such a cast when an
autocast region of the step reads the model; this finds it where there is no
autocast at all: a "pure fp16" script that added a scaler.

Matched within one module: an unconditional cast of `X` (`X.half()`, `X =
X.to(torch.float16)`, `X = Net().cuda().half()`), an optimizer built from
`X.parameters()` and bound to `O`, and `S.step(O)` or `S.unscale_(O)` on a
GradScaler `S` made in the module.  Each name is the same variable only where
Python says so: a function's own local `model` is not its sibling's (test
classes reuse `model`, `optimizer` in every method), `self.model` is one
attribute across a class's methods, and a name a function receives as a
parameter may be any caller's.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from amplint.analysis.bf16_scaler import GRAD_SCALERS
from amplint.analysis.imports import ImportMap, dotted_name
from amplint.analysis.manual_half import without_cast
from amplint.analysis.scopes import Scope, ScopedVisitor
from amplint.analysis.statements import method_name


@dataclass(frozen=True, eq=False)
class HalfModel:
    """A model cast to float16 whose optimizer a GradScaler steps."""

    call: cst.Call  # the cast: `model.half()`
    model: str  # `model`
    optimizer: str  # the optimizer built from its parameters
    scaler_call: cst.Call  # `scaler.step(optimizer)`


@dataclass(frozen=True)
class _Variable:
    """A dotted name where it is used: the scopes around the use, innermost last."""

    name: str
    scopes: tuple[Scope, ...]

    def home(self, bound: dict[int, set[str]], parameters: dict[int, set[str]]) -> int | None:
        """The id of the scope whose variable this is; None for a function's
        parameter, which stands for whatever its callers pass."""
        head = self.name.partition(".")[0]
        if head in ("self", "cls"):
            classes = [scope for scope in self.scopes if isinstance(scope, cst.ClassDef)]
            return id(classes[-1]) if classes else id(self.scopes[0])
        for scope in reversed(self.scopes):
            if not isinstance(scope, cst.FunctionDef):
                continue
            if head in bound.get(id(scope), ()):
                return id(scope)
            if head in parameters.get(id(scope), ()):
                return None
        return id(self.scopes[0])


class _Finder(ScopedVisitor):
    def __init__(self, imports: ImportMap) -> None:
        super().__init__()
        self.imports = imports
        # (cast, model, scope, order): the order of calls in the source
        self.casts: list[tuple[cst.Call, _Variable, int, int]] = []
        self.optimizers: list[tuple[_Variable, _Variable]] = []  # (optimizer, its model)
        self.scalers: list[_Variable] = []  # variables bound to a GradScaler
        # (call, scaler, optimizer, scope, order)
        self.scaler_calls: list[tuple[cst.Call, _Variable, _Variable, int, int]] = []
        # Per function (by id): the names it binds, and those it receives.
        self.bound: dict[int, set[str]] = {}
        self.parameters: dict[int, set[str]] = {}
        self._order = 0
        self._conditional = 0
        self._target: str | None = None

    def _variable(self, name: str) -> _Variable:
        return _Variable(name, tuple(self.scopes))

    def _binds(self, target: cst.BaseExpression) -> None:
        if isinstance(target, cst.Name) and isinstance(self.scope, cst.FunctionDef):
            self.bound.setdefault(id(self.scope), set()).add(target.value)

    def visit_Param(self, node: cst.Param) -> None:
        self.parameters.setdefault(id(self.scope), set()).add(node.name.value)

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._binds(node.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._binds(node.target)

    def visit_For(self, node: cst.For) -> None:
        self._binds(node.target)

    def visit_AsName(self, node: cst.AsName) -> None:
        self._binds(node.name)

    def leave_Assign(self, original_node: cst.Assign) -> None:
        self._target = None

    def visit_If(self, node: cst.If) -> None:
        self._conditional += 1

    def leave_If(self, original_node: cst.If) -> None:
        self._conditional -= 1

    def visit_IfExp(self, node: cst.IfExp) -> None:
        self._conditional += 1

    def leave_IfExp(self, original_node: cst.IfExp) -> None:
        self._conditional -= 1

    def visit_Assign(self, node: cst.Assign) -> None:
        if len(node.targets) != 1 or not isinstance(node.value, cst.Call):
            return
        target = dotted_name(node.targets[0].target)
        if target is None:
            return
        self._target = target  # `model = Net().cuda().half()` casts `model`
        called = self.imports.resolve(node.value.func, self.scope)
        if called in GRAD_SCALERS:
            self.scalers.append(self._variable(target))
        model = _parameters_of(node.value)
        if model is not None:
            self.optimizers.append((self._variable(target), self._variable(model)))

    def visit_Call(self, node: cst.Call) -> None:
        self._order += 1
        method = method_name(node)
        if method in ("step", "unscale_") and node.args:
            scaler = dotted_name(node.func.value)
            optimizer = dotted_name(node.args[0].value)
            if scaler is not None and optimizer is not None:
                self.scaler_calls.append(
                    (
                        node,
                        self._variable(scaler),
                        self._variable(optimizer),
                        id(self.scope),
                        self._order,
                    )
                )
            return
        if self._conditional or without_cast(node, self.imports, self.scope) is None:
            return
        root = _moved(node.func.value)
        if root is not None and self._target not in (None, root):
            return  # `export = model.half()`: a copy made to be saved
        model = root or self._target
        if model is not None:
            self.casts.append((node, self._variable(model), id(self.scope), self._order))


# Methods that hand back the module they were called on.
_MOVES = frozenset({"to", "cuda", "cpu", "half", "float", "train", "requires_grad_"})


def _moved(node: cst.BaseExpression) -> str | None:
    """`model` for `model.to(device).cuda()`; None for `Net().cuda()`, whose
    module is new (the statement's target names it)."""
    while isinstance(node, cst.Call) and method_name(node) in _MOVES:
        node = node.func.value
    return dotted_name(node)


def _parameters_of(call: cst.Call) -> str | None:
    """`model` for `torch.optim.AdamW(model.parameters(), ...)`, else None."""
    if not call.args:
        return None
    first = call.args[0].value
    if isinstance(first, cst.Call) and method_name(first) == "parameters":
        return dotted_name(first.func.value)
    return None


def find_half_models(module: cst.Module, imports: ImportMap, skip: set[int]) -> list[HalfModel]:
    """Each whole-model float16 cast whose optimizer a GradScaler steps; the
    casts in `skip` (ids: AMP111's findings) are left out."""
    finder = _Finder(imports)
    finder.walk(module)

    def same(one: _Variable, other: _Variable) -> bool:
        if one.name != other.name:
            return False
        homes = [v.home(finder.bound, finder.parameters) for v in (one, other)]
        return None in homes or homes[0] == homes[1]

    found = []
    for cast, model, cast_scope, cast_order in finder.casts:
        if id(cast) in skip:
            continue
        optimizers = [optimizer for optimizer, of in finder.optimizers if same(of, model)]
        for call, scaler, optimizer, scope, order in finder.scaler_calls:
            if not any(same(scaler, made) for made in finder.scalers):
                continue
            if not any(same(optimizer, built) for built in optimizers):
                continue
            if scope == cast_scope and order < cast_order:
                break  # cast after the scaler stepped: after training
            found.append(HalfModel(cast, model.name, optimizer.name, call))
            break
    return found
