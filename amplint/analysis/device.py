"""The device a script trains on, where its own code proves it.

AMP001 writes `torch.autocast("cuda", ...)` unless the module shows the model
moving to something else: `device = torch.accelerator.current_accelerator().type
if torch.accelerator.is_available() else "cpu"` (PyTorch's tutorials), `device =
torch.device("mps" if torch.backends.mps.is_available() else "cpu")`.  There
autocast must follow the script's device at run time, or it does nothing on the
machine the script was written for.

The proof is plain assignments of the name the model is moved to (`.to(device)`,
`device=device`): string literals, `torch.device(...)`, conditional expressions
of those, `torch.accelerator.current_accelerator()`, and names bound to them.
Anything else (`args.device`, a function's result) proves nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import libcst as cst

from amplint.analysis.imports import ImportMap, dotted_name
from amplint.analysis.scopes import ScopedVisitor
from amplint.analysis.visitor import Analysis
from amplint.analysis.statements import parameter_names, string_value

ACCELERATOR = "accelerator"  # whichever torch.accelerator finds at run time


def shown_types(types: Iterable[str]) -> str:
    """Device types for a message: `cpu or mps`; ACCELERATOR said as what it is."""
    shown = ("the device torch.accelerator finds" if t == ACCELERATOR else t for t in types)
    return " or ".join(sorted(shown))


@dataclass(frozen=True)
class _Spelled:
    """What one device expression can be at run time."""

    types: frozenset[str]  # "cuda", "cpu", "mps", ..., ACCELERATOR
    is_device: bool  # a torch.device (read `.type`), else a string
    indexed: bool = False  # a string such as "cuda:0", not a device type itself


@dataclass(frozen=True)
class ScriptDevice:
    """The device type autocast and the scaler should name, and how."""

    types: frozenset[str]
    expression: str  # Python reading the device type in the step's scope
    name: str  # the name the expression reads (`device`, `args.device`)
    is_global: bool  # a module global, so readable in any function of the module

    @property
    def may_be_cpu(self) -> bool:
        return "cpu" in self.types


def _called_name(func: cst.BaseExpression) -> str | None:
    """The last part of what a call calls: `GradScaler` for `torch.amp.GradScaler`."""
    if isinstance(func, cst.Attribute):
        return func.attr.value
    return func.value if isinstance(func, cst.Name) else None


class _DeviceUses(ScopedVisitor):
    """Names models and tensors are moved to, and every assignment in the module."""

    def __init__(self) -> None:
        super().__init__()
        self.moved_to: set[str] = set()
        self.assigned: dict[str, list[cst.BaseExpression]] = {}
        self.assigned_in: dict[str, set[int]] = {}  # name -> ids of the scopes binding it
        self.uses_cuda_method = False
        self.moves_to_a_literal = False

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "to":
            for arg in node.args:
                if arg.keyword is None or arg.keyword.value == "device":
                    self._moved(arg.value)
                    break
        if isinstance(func, cst.Attribute) and func.attr.value == "cuda":
            self.uses_cuda_method = True
        if _called_name(func) == "GradScaler":
            return  # `GradScaler(device="cuda")` names where it scales, not where data lives
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value == "device":
                self._moved(arg.value)

    def _moved(self, value: cst.BaseExpression) -> None:
        name = dotted_name(value)
        if name is not None:
            self.moved_to.add(name)
        elif string_value(value) not in (None, "cpu"):
            self.moves_to_a_literal = True  # `.to("cuda")` beside `.to(device)`

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._assign(target.target, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._assign(node.target, node.value)

    def _assign(self, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        name = dotted_name(target)
        if name is not None:
            self.assigned.setdefault(name, []).append(value)
            self.assigned_in.setdefault(name, set()).add(id(self.scope))


class _Classifier:
    def __init__(self, uses: _DeviceUses, imports: ImportMap, module: cst.Module) -> None:
        self.uses = uses
        self.imports = imports
        self.module = module
        # Each name is classified once: a test module assigning `device` a
        # hundred times, each from other such names, would otherwise branch
        # at every level of the chain.
        self._names: dict[str, _Spelled | None] = {}

    def name(self, name: str) -> _Spelled | None:
        if name in self._names:
            return self._names[name]
        values = self.uses.assigned.get(name)
        if not values:
            return None
        self._names[name] = None  # while it is being classified: a cycle proves nothing
        found = []
        for value in values:
            spelled = self.expression(value)
            if spelled is None:
                return None
            found.append(spelled)
        self._names[name] = result = _union(found)
        return result

    def expression(self, value: cst.BaseExpression) -> _Spelled | None:
        literal = string_value(value)
        if literal is not None:
            kind, _, index = literal.partition(":")
            return _Spelled(frozenset({kind}), is_device=False, indexed=bool(index))
        if isinstance(value, cst.FormattedString):  # f"cuda:{rank}"
            first = value.parts[0] if value.parts else None
            if not isinstance(first, cst.FormattedStringText) or ":" not in first.value:
                return None
            return _Spelled(frozenset({first.value.split(":", 1)[0]}), False, indexed=True)
        if isinstance(value, cst.IfExp):
            both = [self.expression(value.body), self.expression(value.orelse)]
            return None if None in both else _union(both)
        if isinstance(value, cst.Attribute) and value.attr.value == "type":
            inner = self.expression(value.value)
            if inner is None or not inner.is_device:
                return None
            return _Spelled(inner.types, is_device=False)
        if isinstance(value, cst.Call):
            called = self.imports.resolve(value.func, self.module) or ""
            if called == "torch.device" and value.args:
                inner = self.expression(value.args[0].value)
                return None if inner is None else _Spelled(inner.types, is_device=True)
            if called == "torch.accelerator.current_accelerator":
                return _Spelled(frozenset({ACCELERATOR}), is_device=True)
            return None
        name = dotted_name(value)
        return None if name is None else self.name(name)


def _union(found: list[_Spelled]) -> _Spelled | None:
    if len({spelled.is_device for spelled in found}) != 1:
        return None
    return _Spelled(
        frozenset().union(*(spelled.types for spelled in found)),
        found[0].is_device,
        any(spelled.indexed for spelled in found),
    )


@dataclass(frozen=True)
class ProvenDevice:
    """The one name the module moves its model and batches to, and what it can
    be at run time: found once per module (ModuleFacts.proven_device)."""

    name: str
    spelled: _Spelled
    bound_in: frozenset[int]  # ids of the scopes that assign the name
    module: cst.Module


def proven_device_analysis(module: cst.Module, imports: ImportMap) -> Analysis[ProvenDevice | None]:
    """The module's device when it proves one that "cuda" does not cover (CUDA
    or the CPU as fallback is "cuda"'s to say); None where nothing is proven."""
    uses = _DeviceUses()
    return Analysis(uses, lambda: _proven(uses, module, imports))


def _proven(uses: _DeviceUses, module: cst.Module, imports: ImportMap) -> ProvenDevice | None:
    classifier = _Classifier(uses, imports, module)
    proven: dict[str, _Spelled] = {}
    for name in sorted(uses.moved_to):
        spelled = classifier.name(name)
        if spelled is not None:
            proven[name] = spelled
    if len(proven) != 1 or uses.uses_cuda_method or uses.moves_to_a_literal:
        return None  # several devices, or `.cuda()` beside one: not one answer
    ((name, spelled),) = proven.items()
    if spelled.types - {"cpu"} in (frozenset(), frozenset({"cuda"})):
        return None  # "cuda" already says it, and turns itself off on the CPU
    return ProvenDevice(name, spelled, frozenset(uses.assigned_in.get(name, ())), module)


def script_device(
    proven: ProvenDevice | None, function: cst.FunctionDef | None, torch_name: str
) -> ScriptDevice | None:
    """How the step in `function` (None: at module level) reads the module's
    proven device, or None where it cannot read the name."""
    if proven is None or not _readable(proven, function):
        return None
    name, spelled = proven.name, proven.spelled
    if spelled.is_device:
        expression = f"{name}.type"
    elif spelled.indexed:
        expression = f"{torch_name}.device({name}).type"
    else:
        expression = name
    is_global = "." not in name and id(proven.module) in proven.bound_in
    return ScriptDevice(spelled.types, expression, name, is_global)


def _readable(proven: ProvenDevice, function: cst.FunctionDef | None) -> bool:
    """Whether the step's scope can read the device name: a parameter or a
    local of its function, `self.` anything in a method, or a module global."""
    if function is not None:
        head = proven.name.split(".", 1)[0]
        if head in parameter_names(function) or id(function) in proven.bound_in:
            return True
    return "." not in proven.name and id(proven.module) in proven.bound_in
