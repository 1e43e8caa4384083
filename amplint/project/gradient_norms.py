"""Project functions that compute a norm of the gradients they are given.

Until ``unscale_``, a GradScaler leaves every gradient multiplied by its scale
S.  A function whose result is homogeneous of degree one in the gradients,
f(S·g) = S·f(g) (a 2-norm, a p-norm, a max-norm), returns S times on scaled
gradients what it returned on unscaled ones, so its result divided by
``scaler.get_scale()`` is exactly its FP32 value.  That is how a gradient norm
logged on every micro-step of accumulation keeps its meaning, where an
``unscale_`` (one per optimizer step) cannot go first::

    def get_grad_norm(parameters, norm_type=2):
        parameters = list(filter(lambda p: p.grad is not None, parameters))
        norm_type = float(norm_type)
        total_norm = 0
        for p in parameters:
            total_norm += p.grad.data.norm(norm_type).item() ** norm_type
        return total_norm ** (1.0 / norm_type)

The degree is worked out from the code, statement by statement: ``p.grad`` has
degree 1; ``x.norm(p)``, ``abs``, ``max``, ``sum``, ``torch.stack`` keep the
degree of what they are given; ``x ** e`` multiplies it by e; a product adds
degrees; a sum needs equal ones (a literal zero fits any).  Exponents are
symbolic, so ``(Σ|g|^p)^(1/p)`` comes out as degree 1 for every p.  Anything
else the gradients, or the parameters holding them, flow into (code this
module does not know, a test that picks a branch, an in-place edit) makes the
function unknown, and unknown is not a norm.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from fractions import Fraction

from amplint.project.source import ModuleSource, dotted_expression, top_level_definitions

# A polynomial over the function's symbols (its parameters and globals, as in
# `norm_type`): {((symbol, power), ...): coefficient}; {} is zero.
Monomial = tuple[tuple[str, int], ...]
Polynomial = dict[Monomial, Fraction]
_ONE: Polynomial = {(): Fraction(1)}

# Calls whose result has the degree of their (first) tensor argument, as the
# module spells them after `import torch` / `import math`.
_KEEP_DEGREE_FUNCTIONS = frozenset(
    {
        "abs",
        "max",
        "min",
        "sum",
        "float",
        "math.fabs",
        "torch.abs",
        "torch.max",
        "torch.amax",
        "torch.sum",
        "torch.norm",
        "torch.linalg.norm",
        "torch.linalg.vector_norm",
        "torch.stack",
        "torch.cat",
        "torch.tensor",
        "torch.as_tensor",
    }
)
_SQUARE_ROOTS = frozenset({"math.sqrt", "torch.sqrt"})
_POWERS = frozenset({"math.pow", "torch.pow", "pow"})
# Calls that do nothing to the parameters or gradients they are given.
_INSPECTING_FUNCTIONS = frozenset({"isinstance", "len", "any", "all", "type", "int"})
# Calls that give back what they are given, or part of it.
_CONTAINER_FUNCTIONS = frozenset({"list", "tuple", "filter", "iter", "enumerate", "zip"})
_ZEROS = frozenset({"torch.zeros", "torch.zeros_like"})
_KEEP_DEGREE_METHODS = frozenset(
    {
        "detach",
        "float",
        "double",
        "abs",
        "clone",
        "cpu",
        "cuda",
        "to",
        "item",
        "view",
        "reshape",
        "flatten",
        "contiguous",
        "max",
        "amax",
        "sum",
        "norm",
    }
)
# Attributes and methods that say nothing of the values: where, what shape.
_SHAPE_ATTRIBUTES = frozenset({"device", "dtype", "shape", "ndim", "is_sparse", "requires_grad"})
_SHAPE_METHODS = frozenset({"numel", "size", "dim", "nelement"})


def gradient_norms_in(module: ModuleSource) -> dict[str, int]:
    """`module`'s top-level functions that return a norm of the gradients of
    the parameters they are given (degree one, see above): name -> line."""
    if ".grad" not in module.text:
        return {}
    imports = _import_names(module.text)
    return {
        name: definition.lineno
        for name, definition in top_level_definitions(module, frozenset({".grad"})).items()
        if isinstance(definition, (ast.FunctionDef, ast.AsyncFunctionDef))
        and _Degrees(imports).of_function(definition)
    }


def _import_names(text: str) -> dict[str, str]:
    """Local name -> what it imports, for the module's one-line top-level
    imports (`import torch as th`, `from math import inf, sqrt`), each line
    parsed alone: the module is not parsed whole for them."""
    names: dict[str, str] = {}
    for line in text.splitlines():
        if not line.startswith(("import ", "from ")):
            continue
        try:
            (node,) = ast.parse(line).body
        except (SyntaxError, ValueError):
            continue  # an import spanning lines
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


# -- the polynomials -----------------------------------------------------------------
def _add(a: Polynomial, b: Polynomial, sign: int = 1) -> Polynomial:
    total = dict(a)
    for monomial, coefficient in b.items():
        total[monomial] = total.get(monomial, Fraction(0)) + sign * coefficient
    return {m: c for m, c in total.items() if c}


def _multiply(a: Polynomial, b: Polynomial) -> Polynomial:
    total: Polynomial = {}
    for left, x in a.items():
        for right, y in b.items():
            powers = dict(left)
            for symbol, power in right:
                powers[symbol] = powers.get(symbol, 0) + power
            monomial = tuple(sorted((s, p) for s, p in powers.items() if p))
            total = _add(total, {monomial: x * y})
    return total


def _inverse(a: Polynomial) -> Polynomial | None:
    """1/a where a is one term, else None."""
    if len(a) != 1:
        return None
    ((monomial, coefficient),) = a.items()
    return {tuple((s, -p) for s, p in monomial): 1 / coefficient}


def _constant(value: object) -> Polynomial | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return {(): Fraction(value)} if value else {}


def _symbol(name: str) -> Polynomial:
    return {((name, 1),): Fraction(1)}


# -- the abstract values -----------------------------------------------------------
@dataclass(frozen=True)
class _Value:
    """What the analysis knows of an expression's value.

    `degree`: the power of the loss scale it carries ({} for none), or None
    when it depends on the gradients in a way not worked out.  `value`: its
    value as a polynomial where known (for exponents).  `zero`: a literal zero,
    of every degree.  `holds_parameters`: it may hold the parameters (so their
    gradients), and only known code may be given it."""

    degree: Polynomial | None
    value: Polynomial | None = None
    zero: bool = False
    holds_parameters: bool = False


_UNKNOWN = _Value(None)
_PLAIN = _Value({})


def _join(a: _Value | None, b: _Value | None) -> _Value | None:
    """What a name holds where two paths meet."""
    if a is None or b is None:
        return a if b is None else b
    if a.zero or b.zero:
        kept = b if a.zero else a
        holds = a.holds_parameters or b.holds_parameters
        return _Value(kept.degree, kept.value, a.zero and b.zero, holds)
    if a.degree is None or b.degree is None or a.degree != b.degree:
        return _UNKNOWN
    return _Value(
        a.degree,
        a.value if a.value == b.value else None,
        holds_parameters=a.holds_parameters or b.holds_parameters,
    )


def _joined(values) -> _Value | None:
    """What one name holds after paths that gave it each of `values`."""
    joined: _Value | None = None
    for value in values:
        joined = _join(joined, value)
    return joined


def _computed(value: _Value) -> _Value:
    """A value computed from `value`: a number or a new tensor, not the parameters."""
    return _Value(value.degree, value.value, value.zero)


class _Unknown(Exception):
    """The function does something this analysis does not follow."""


class _Degrees:
    """Abstract interpretation of one function for the degree of what it returns."""

    def __init__(self, imports: dict[str, str]) -> None:
        self.imports = imports
        self.returned: list[_Value] = []

    def of_function(self, function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        """Whether `function` returns a value of degree exactly one."""
        arguments = function.args
        names: dict[str, _Value] = {}
        for argument in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs):
            names[argument.arg] = _Value({}, _symbol(argument.arg), holds_parameters=True)
        try:
            self._block(function.body, names)
        except (_Unknown, RecursionError, ZeroDivisionError):
            return False
        returned = _joined(self.returned)
        return returned is not None and not returned.zero and returned.degree == _ONE

    # -- statements ---------------------------------------------------------------
    def _block(self, statements: list[ast.stmt], names: dict[str, _Value]) -> None:
        for statement in statements:
            self._statement(statement, names)

    def _statement(self, node: ast.stmt, names: dict[str, _Value]) -> None:
        if isinstance(node, ast.Expr):
            self._known(node.value, names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            if node.value is None:
                return
            value = self._known(node.value, names)
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                self._bind(target, value, names)
        elif isinstance(node, ast.AugAssign):
            if not isinstance(node.target, ast.Name):
                self._bind(node.target, self._known(node.value, names), names)
                return
            current = names.get(node.target.id, self._name(node.target.id, names))
            names[node.target.id] = self._arithmetic(
                node.op, current, self._expression(node.value, names)
            )
        elif isinstance(node, ast.Return):
            self.returned.append(
                self._known(node.value, names) if node.value is not None else _PLAIN
            )
        elif isinstance(node, ast.If):
            self._test(node.test, names)
            self._branches([node.body, node.orelse], names)
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            if isinstance(node, ast.While):
                self._test(node.test, names)
            before = dict(names)
            for _ in range(2):  # twice: what one iteration leaves, the next one reads
                if not isinstance(node, ast.While):
                    element = self._element(self._known(node.iter, names))
                    self._bind(node.target, element, names)
                self._block(node.body, names)
            self._merge(names, before)
            self._block(node.orelse, names)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                self._known(item.context_expr, names)
            self._block(node.body, names)
        elif isinstance(node, ast.Assert):
            self._known(node.test, names)
        elif not isinstance(node, (ast.Pass, ast.Break, ast.Continue)):
            raise _Unknown  # try, raise, del, nested defs, global, imports

    def _branches(self, blocks: list[list[ast.stmt]], names: dict[str, _Value]) -> None:
        ends = []
        for block in blocks:
            branch = dict(names)
            self._block(block, branch)
            ends.append(branch)
        names.clear()
        names.update(ends[0])
        for other in ends[1:]:
            self._merge(names, other)

    @staticmethod
    def _merge(names: dict[str, _Value], other: dict[str, _Value]) -> None:
        for name in names.keys() | other.keys():
            names[name] = _join(names.get(name), other.get(name))

    def _bind(self, target: ast.expr, value: _Value, names: dict[str, _Value]) -> None:
        if isinstance(target, ast.Name):
            names[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:  # unpacking: each part of what the whole holds
                self._bind(element, self._element(value), names)
        else:  # an attribute or item: never one of a gradient
            if any(isinstance(n, ast.Attribute) and n.attr == "grad" for n in ast.walk(target)):
                raise _Unknown
            self._expression(target, names)

    def _test(self, test: ast.expr, names: dict[str, _Value]) -> None:
        """A condition that picks a path must not depend on the gradients'
        values, or the result is not homogeneous."""
        if self._known(test, names).degree != {}:
            raise _Unknown

    # -- expressions --------------------------------------------------------------
    def _known(self, node: ast.expr, names: dict[str, _Value]) -> _Value:
        value = self._expression(node, names)
        if value.degree is None:
            raise _Unknown
        return value

    def _element(self, value: _Value) -> _Value:
        """What iterating over `value` gives."""
        return _Value(value.degree, None, value.zero, value.holds_parameters)

    def _name(self, name: str, names: dict[str, _Value]) -> _Value:
        if name in names:
            return names[name]
        return _Value({}, _symbol(name))  # a global: `inf`, `torch`, a constant

    def _expression(self, node: ast.expr, names: dict[str, _Value]) -> _Value:
        if isinstance(node, ast.Constant):
            value = _constant(node.value)
            return _Value({}, value, zero=value == {})
        if isinstance(node, ast.Name):
            return self._name(node.id, names)
        if isinstance(node, ast.Attribute):
            owner = self._expression(node.value, names)
            if node.attr in _SHAPE_ATTRIBUTES and owner.degree is not None:
                return _PLAIN
            if node.attr == "grad":
                return _Value(dict(_ONE)) if owner.degree == {} else _UNKNOWN
            if node.attr in ("data", "T", "real"):
                return _Value(owner.degree, None, owner.zero, owner.holds_parameters)
            return (
                _Value({}, None, holds_parameters=owner.holds_parameters)
                if (owner.degree == {})
                else _UNKNOWN
            )
        if isinstance(node, ast.Subscript):
            self._known(node.slice, names)
            return self._element(self._expression(node.value, names))
        if isinstance(node, ast.Call):
            return self._call(node, names)
        if isinstance(node, ast.BinOp):
            left, right = self._expression(node.left, names), self._expression(node.right, names)
            return self._arithmetic(node.op, left, right)
        if isinstance(node, ast.UnaryOp):
            operand = self._expression(node.operand, names)
            if isinstance(node.op, ast.USub) and operand.value is not None:
                return _Value(operand.degree, _multiply(operand.value, {(): Fraction(-1)}))
            if isinstance(node.op, (ast.USub, ast.UAdd)):
                return _Value(operand.degree, None, operand.zero)
            return _PLAIN if operand.degree == {} else _UNKNOWN
        if isinstance(node, ast.Compare):
            operands = [self._expression(n, names) for n in (node.left, *node.comparators)]
            if all(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops):
                return _PLAIN  # `p.grad is not None`: the same at every scale
            return _PLAIN if all(o.degree == {} for o in operands) else _UNKNOWN
        if isinstance(node, ast.BoolOp):
            values = [self._expression(n, names) for n in node.values]
            return _PLAIN if all(v.degree == {} for v in values) else _UNKNOWN
        if isinstance(node, ast.IfExp):
            self._test(node.test, names)
            return _join(self._expression(node.body, names), self._expression(node.orelse, names))
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            return self._collection(node.elts, names)
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp)):
            inner = dict(names)
            for generator in node.generators:
                self._bind(
                    generator.target, self._element(self._known(generator.iter, inner)), inner
                )
                for condition in generator.ifs:
                    self._test(condition, inner)
            return self._expression(node.elt, inner)
        if isinstance(node, ast.Lambda):
            inner = dict(names)
            for argument in node.args.args:
                inner[argument.arg] = _Value({}, holds_parameters=True)
            return _PLAIN if self._expression(node.body, inner).degree is not None else _UNKNOWN
        if isinstance(node, ast.JoinedStr):
            return _PLAIN  # text for a log
        return _UNKNOWN

    def _collection(self, elements: list[ast.expr], names: dict[str, _Value]) -> _Value:
        joined = _joined(self._expression(element, names) for element in elements)
        return joined or _Value({}, zero=True)

    def _arithmetic(self, op: ast.operator, left: _Value, right: _Value) -> _Value:
        if left.degree is None or right.degree is None:
            return _UNKNOWN
        if isinstance(op, (ast.Add, ast.Sub)):
            sign = 1 if isinstance(op, ast.Add) else -1
            value = None
            if left.value is not None and right.value is not None:
                value = _add(left.value, right.value, sign)
            if left.zero or right.zero or left.degree == right.degree:
                degree = right.degree if left.zero else left.degree
                return _Value(degree, value, left.zero and right.zero)
            return _UNKNOWN
        if isinstance(op, ast.Mult):
            value = None
            if left.value is not None and right.value is not None:
                value = _multiply(left.value, right.value)
            return _Value(_add(left.degree, right.degree), value, left.zero or right.zero)
        if isinstance(op, ast.Div):
            inverse = _inverse(right.value) if right.value is not None else None
            value = _multiply(left.value, inverse) if left.value is not None and inverse else None
            return _Value(_add(left.degree, right.degree, -1), value, left.zero)
        if isinstance(op, ast.Pow):
            return self._power(left, right)
        if left.degree == {} and right.degree == {}:
            return _PLAIN
        return _UNKNOWN

    @staticmethod
    def _power(base: _Value, exponent: _Value) -> _Value:
        if exponent.degree != {} or exponent.value is None:
            return _UNKNOWN if base.degree != {} else _PLAIN
        return _Value(_multiply(base.degree, exponent.value), None, base.zero)

    def _call(self, node: ast.Call, names: dict[str, _Value]) -> _Value:
        arguments = [
            self._expression(a.value if isinstance(a, ast.Starred) else a, names) for a in node.args
        ]
        keywords = [self._expression(k.value, names) for k in node.keywords]
        if any(k.degree != {} for k in keywords):
            return _UNKNOWN  # `norm(x, p=...)`: options, never gradients
        spelled = self._spelled(node.func)
        if isinstance(node.func, ast.Attribute) and spelled not in (
            _KEEP_DEGREE_FUNCTIONS | _SQUARE_ROOTS | _POWERS | _ZEROS
        ):
            return self._method(node.func.attr, self._expression(node.func.value, names), arguments)
        if spelled in _ZEROS:
            return _Value({}, zero=True)
        if spelled in _CONTAINER_FUNCTIONS:
            # `filter(lambda p: ..., params)`: the params
            return _joined(arguments) or _PLAIN
        if spelled in _KEEP_DEGREE_FUNCTIONS and arguments:
            if any(a.degree != {} for a in arguments[1:]) and spelled not in ("max", "min"):
                return _UNKNOWN
            return _computed(_joined(arguments if spelled in ("max", "min") else arguments[:1]))
        if spelled in _SQUARE_ROOTS and len(arguments) == 1:
            return self._power(arguments[0], _Value({}, {(): Fraction(1, 2)}))
        if spelled in _POWERS and len(arguments) == 2:
            return self._power(*arguments)
        if any(a.degree != {} for a in arguments):
            return _UNKNOWN
        if spelled in _INSPECTING_FUNCTIONS or not any(a.holds_parameters for a in arguments):
            return _PLAIN
        return _UNKNOWN  # the gradients, or what holds them, given to unknown code

    def _method(self, method: str, receiver: _Value, arguments: list[_Value]) -> _Value:
        if receiver.degree is None or any(a.degree != {} or a.holds_parameters for a in arguments):
            return _UNKNOWN  # `torch.nn.utils.clip_grad_value_(params, 1.0)`
        if method in _SHAPE_METHODS:
            return _PLAIN
        if receiver.degree == {} and not receiver.holds_parameters:
            return _PLAIN  # arithmetic on plain numbers: `norm_type.__float__()`
        if method in _KEEP_DEGREE_METHODS:
            return _computed(_Value(receiver.degree, None, receiver.zero))
        if method == "sqrt":
            return self._power(receiver, _Value({}, {(): Fraction(1, 2)}))
        if method == "pow" and len(arguments) == 1:
            return self._power(receiver, arguments[0])
        return _UNKNOWN  # `p.grad.clamp_(...)`, `params.pop()`: it may change them

    def _spelled(self, func: ast.expr) -> str | None:
        dotted = dotted_expression(func)
        if dotted is None:
            return None
        first, _, rest = dotted.partition(".")
        target = self.imports.get(first, first)
        return f"{target}.{rest}" if rest else target
