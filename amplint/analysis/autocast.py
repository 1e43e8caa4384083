"""Where a module opens autocast regions, what device argument each call is
known to hold, and which regions run a backward pass.

autocast takes a device *type* ("cuda", "cpu"); a ``torch.device`` raises, and
a device string with an index ("cuda:0") slips past the checks autocast makes
for "cuda" (is CUDA there, does it do bf16).  Only what the module itself
proves is recorded: a literal, an inline ``torch.device(...)``, or a name every
binding of which in its scope is one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst

from amplint.analysis.imports import ImportMap, dotted_name
from amplint.analysis.scopes import Scope, ScopedVisitor
from amplint.analysis.statements import method_name, string_value
from amplint.analysis.visitor import Analysis, Visitor, descendants

AUTOCAST = {"torch.autocast", "torch.amp.autocast", "torch.amp.autocast_mode.autocast"}
# Every spelling of an autocast region, the deprecated ones included.
ANY_AUTOCAST = AUTOCAST | {
    "torch.cuda.amp.autocast",
    "torch.cuda.amp.autocast_mode.autocast",
    "torch.cpu.amp.autocast",
    "torch.cpu.amp.autocast_mode.autocast",
}
TORCH_DEVICE = "torch.device"
# Losses CUDA autocast refuses ("unsafe to autocast"): classes, then functions.
UNSAFE_LOSS_CLASSES = {"torch.nn.BCELoss", "torch.nn.modules.loss.BCELoss"}
UNSAFE_LOSS_FUNCTIONS = {"torch.nn.functional.binary_cross_entropy", "torch.binary_cross_entropy"}
_UNKNOWN = None  # a binding whose value the module does not show
_INDEXED_DEVICE = re.compile(r"[a-z_]+:\d+")  # "cuda:0", "xpu:1"


@dataclass(frozen=True)
class AutocastDevice:
    """An autocast call whose device argument is a torch.device or has an index."""

    call: cst.Call
    argument: cst.BaseExpression  # as written in the call
    is_torch_device: bool  # else a string literal with an index, e.g. "cuda:0"
    literal_type: str | None  # "cuda" when the device is spelled as a literal


@dataclass(frozen=True)
class BackwardInAutocast:
    """A ``with autocast(...)`` block whose body runs ``.backward()``."""

    block: cst.With
    backward: cst.Call  # the first backward call in the body
    # Index in the block's body of the statement holding it; None when the
    # block cannot be split there (one-line body, several context managers,
    # or the backward nested in a compound statement).
    split_at: int | None
    # The function of the module whose body runs the backward, when the block
    # calls it (`self.backward_G()`, `step(loss)`); `backward` is then that call.
    helper: str | None = None


@dataclass(frozen=True)
class UnsafeLossCall:
    """A call to a loss CUDA autocast refuses, inside a region that may be CUDA."""

    call: cst.Call
    loss: str  # the qualified class or function: "torch.nn.BCELoss"


class _AutocastFinder(ScopedVisitor):
    def __init__(self, imports: ImportMap) -> None:
        super().__init__()
        self.imports = imports
        self.calls: list[tuple[cst.Call, cst.BaseExpression, Scope]] = []
        self.blocks: list[cst.With] = []  # with-statements that open autocast
        # scope -> name -> the values bound to it (None: a binding we cannot read)
        self.bindings: dict[Scope, dict[str, list[cst.BaseExpression | None]]] = {}
        # Per open `with autocast(...)`, innermost last: whether it may run CUDA
        # autocast (False for "cpu" and for `enabled=False`, which ends autocast).
        self._regions: list[bool] = []
        self.calls_in_cuda_regions: list[tuple[cst.Call, Scope]] = []
        # `self.loss_fn = ...`: every value assigned to each attribute chain
        self.attribute_values: dict[str, list[cst.BaseExpression]] = {}
        self.defs: dict[str, list[cst.FunctionDef]] = {}  # every def, by its name

    def _bind(self, name: str, value: cst.BaseExpression | None) -> None:
        self.bindings.setdefault(self.scope, {}).setdefault(name, []).append(value)

    def enter_scope(self, scope: Scope) -> None:
        if isinstance(scope, cst.FunctionDef):
            self.defs.setdefault(scope.name.value, []).append(scope)
            parameters = scope.params
            for param in (
                *parameters.posonly_params,
                *parameters.params,
                *parameters.kwonly_params,
                parameters.star_arg,
                parameters.star_kwarg,
            ):
                if isinstance(param, cst.Param):
                    self._bind(param.name.value, _UNKNOWN)

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            if isinstance(target.target, cst.Name):
                self._bind(target.target.value, node.value)
            elif isinstance(target.target, cst.Attribute):
                name = dotted_name(target.target)
                if name is not None:
                    self.attribute_values.setdefault(name, []).append(node.value)
            else:
                self._bind_all(target.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if isinstance(node.target, cst.Name):
            self._bind(node.target.value, node.value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._bind_all(node.target)

    def visit_For(self, node: cst.For) -> None:
        self._bind_all(node.target)

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self._bind_all(node.asname.name)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._bind_all(node.target)

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            local = alias.asname.name if alias.asname is not None else alias.name
            while isinstance(local, cst.Attribute):  # `import a.b` binds `a`
                local = local.value
            self._bind_all(local)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if isinstance(node.names, cst.ImportStar):
            return
        for alias in node.names:
            self._bind_all(alias.asname.name if alias.asname is not None else alias.name)

    def visit_Global(self, node: cst.Global) -> None:
        for item in node.names:
            self._bind(item.name.value, _UNKNOWN)

    def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
        for item in node.names:
            self._bind(item.name.value, _UNKNOWN)

    def _bind_all(self, target: cst.BaseExpression) -> None:
        if isinstance(target, cst.Name):
            self._bind(target.value, _UNKNOWN)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._bind_all(element.value)
        elif isinstance(target, cst.StarredElement):
            self._bind_all(target.value)

    def visit_With_body(self, node: cst.With) -> None:
        # The innermost autocast item decides the region: may it be CUDA autocast?
        region = None
        opens = False  # some item turns autocast on
        for item in node.items:
            call = item.item
            if not isinstance(call, cst.Call):
                continue
            called = self.imports.resolve(call.func, self.scope)
            if called in ANY_AUTOCAST:
                enabled = not disabled(call)
                opens = opens or enabled
                region = enabled and _may_be_cuda(call, called)
        if opens:
            self.blocks.append(node)
        self._regions.append(self._in_cuda_region() if region is None else region)

    def leave_With_body(self, node: cst.With) -> None:
        self._regions.pop()

    def _in_cuda_region(self) -> bool:
        return bool(self._regions) and self._regions[-1]

    def visit_Call(self, node: cst.Call) -> None:
        if self._in_cuda_region():
            self.calls_in_cuda_regions.append((node, self.scope))
        if self.imports.resolve(node.func, self.scope) not in AUTOCAST:
            return
        device = device_argument(node)
        if device is not None:
            self.calls.append((node, device, self.scope))

    # A def or lambda inside the block runs wherever it is called.
    def visit_FunctionDef_body(self, node: cst.FunctionDef) -> None:
        self._regions.append(False)

    def leave_FunctionDef_body(self, node: cst.FunctionDef) -> None:
        self._regions.pop()

    def visit_Lambda_body(self, node: cst.Lambda) -> None:
        self._regions.append(False)

    def leave_Lambda_body(self, node: cst.Lambda) -> None:
        self._regions.pop()


def keyword_value(call: cst.Call, name: str) -> cst.BaseExpression | None:
    return next((arg.value for arg in call.args if _is_keyword(arg, name)), None)


def disabled(call: cst.Call) -> bool:
    """`enabled=False` as a literal: the call turns autocast (or a scaler) off."""
    enabled = keyword_value(call, "enabled")
    return isinstance(enabled, cst.Name) and enabled.value == "False"


def device_argument(call: cst.Call) -> cst.BaseExpression | None:
    """The device type an autocast call is given, by keyword or first position."""
    device = keyword_value(call, "device_type")
    if device is None and call.args and call.args[0].keyword is None and not call.args[0].star:
        device = call.args[0].value
    return device


def spelled_device_type(call: cst.Call) -> str | None:
    """The device type an autocast call spells as a literal ("cuda" for "cuda:0");
    None when it is held in a variable or not given."""
    text = string_value(device_argument(call))
    return text.split(":", 1)[0] if text is not None else None


def _may_be_cuda(call: cst.Call, called: str) -> bool:
    """Whether the enabled autocast `call` (resolved to `called`) may be CUDA's."""
    if called.startswith(("torch.cuda.", "torch.cpu.")):
        return called.startswith("torch.cuda.")
    spelled = spelled_device_type(call)
    return spelled is None or spelled == "cuda"


def _is_keyword(arg: cst.Arg, name: str) -> bool:
    return arg.keyword is not None and arg.keyword.value == name


class _DeviceResolver:
    def __init__(self, finder: _AutocastFinder) -> None:
        self.finder = finder

    def is_torch_device(self, node: cst.BaseExpression, scope: Scope) -> bool:
        if isinstance(node, cst.Call):
            return self.finder.imports.resolve(node.func, scope) == TORCH_DEVICE
        if isinstance(node, cst.IfExp):
            return self.is_torch_device(node.body, scope) and self.is_torch_device(
                node.orelse, scope
            )
        if isinstance(node, cst.Name):
            values = self.values(node.value, scope)
            return bool(values) and all(
                value is not None and self.is_torch_device(value, scope) for value in values
            )
        return False

    def values(self, name: str, scope: Scope) -> list[cst.BaseExpression | None]:
        """Every value bound to `name` where the call in `scope` looks it up."""
        for candidate in self.finder.imports.visible_scopes(scope):
            values = self.finder.bindings.get(candidate, {}).get(name)
            if values:
                return values
        return []


def _wrong_devices(finder: _AutocastFinder) -> list[AutocastDevice]:
    resolver = _DeviceResolver(finder)
    found = []
    for call, device, scope in finder.calls:
        text = string_value(device)
        if text is not None:
            if _INDEXED_DEVICE.fullmatch(text):
                found.append(AutocastDevice(call, device, False, text.split(":", 1)[0]))
        elif resolver.is_torch_device(device, scope):
            literal = None
            if isinstance(device, cst.Call) and device.args:
                inner = string_value(device.args[0].value)
                literal = inner.split(":", 1)[0] if inner is not None else None
            found.append(AutocastDevice(call, device, True, literal))
    return found


class _FirstBackward(Visitor):
    """The first ``.backward()`` call, not looking into defs and lambdas (their
    bodies do not run where they are written)."""

    def __init__(self) -> None:
        self.found: cst.Call | None = None

    def visit_Call(self, node: cst.Call) -> bool:
        if self.found is None and method_name(node) == "backward":
            self.found = node
        return self.found is None

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False


def first_backward(node: cst.CSTNode) -> cst.Call | None:
    """The first `.backward()` call that runs where `node` is written."""
    search = _FirstBackward()
    search.walk(node)
    return search.found


def _backward_in_blocks(finder: _AutocastFinder) -> list[BackwardInAutocast]:
    found = []
    for block in finder.blocks:
        body = block.body
        statements = body.body if isinstance(body, cst.IndentedBlock) else ()
        for index, statement in enumerate(statements):
            backward = first_backward(statement)
            if backward is None:
                continue
            splittable = len(block.items) == 1 and isinstance(statement, cst.SimpleStatementLine)
            found.append(BackwardInAutocast(block, backward, index if splittable else None))
            break
        else:
            if isinstance(body, cst.SimpleStatementSuite):
                backward = first_backward(body)
                if backward is not None:
                    found.append(BackwardInAutocast(block, backward, None))
                    continue
            helped = _backward_helper_call(block, finder.defs)
            if helped is not None:
                call, helper = helped
                found.append(BackwardInAutocast(block, call, None, helper))
    return found


def _backward_helper_call(
    block: cst.With, defs: dict[str, list[cst.FunctionDef]]
) -> tuple[cst.Call, str] | None:
    """A call in the block of a function of the module (`step(loss)`) or a
    method (`self.backward_G()`) whose own body runs `.backward()`, and its
    name.  A name two defs share counts only where both run one."""
    for node in descendants(block.body):
        if not isinstance(node, cst.Call):
            continue
        func = node.func
        if isinstance(func, cst.Name):
            name = func.value
        elif (
            isinstance(func, cst.Attribute)
            and isinstance(func.value, cst.Name)
            and func.value.value == "self"
        ):
            name = func.attr.value
        else:
            continue
        candidates = defs.get(name, ())
        if candidates and all(first_backward(d.body) is not None for d in candidates):
            return node, name
    return None


def _unsafe_losses(finder: _AutocastFinder) -> list[UnsafeLossCall]:
    resolver = _DeviceResolver(finder)
    resolve = finder.imports.resolve

    def constructs_unsafe_loss(value: cst.BaseExpression | None, scope: Scope) -> str | None:
        if isinstance(value, cst.Call):
            called = resolve(value.func, scope)
            if called in UNSAFE_LOSS_CLASSES:
                return called
        return None

    def every(values: list, scope: Scope) -> str | None:
        kinds = {constructs_unsafe_loss(value, scope) for value in values}
        return kinds.pop() if len(kinds) == 1 else None

    found = []
    for call, scope in finder.calls_in_cuda_regions:
        func = call.func
        loss = resolve(func, scope)
        if loss not in UNSAFE_LOSS_FUNCTIONS:
            if isinstance(func, cst.Call):  # nn.BCELoss()(probs, targets)
                loss = constructs_unsafe_loss(func, scope)
            elif isinstance(func, cst.Name):  # criterion(probs, targets)
                values = resolver.values(func.value, scope)
                loss = every(values, scope) if values else None
            elif isinstance(func, cst.Attribute):  # self.criterion(probs, targets)
                values = finder.attribute_values.get(dotted_name(func) or "", [])
                loss = every(values, scope) if values else None
            else:
                loss = None
        if loss is not None:
            found.append(UnsafeLossCall(call, loss))
    return found


@dataclass(frozen=True)
class AutocastScan:
    """What the autocast walk found: wrong devices, backwards inside a region, unsafe losses."""

    wrong_devices: list[AutocastDevice]
    backward_inside: list[BackwardInAutocast]
    unsafe_losses: list[UnsafeLossCall]


def autocast_analysis(imports: ImportMap) -> Analysis[AutocastScan]:
    finder = _AutocastFinder(imports)
    return Analysis(
        finder,
        lambda: AutocastScan(
            _wrong_devices(finder), _backward_in_blocks(finder), _unsafe_losses(finder)
        ),
    )
