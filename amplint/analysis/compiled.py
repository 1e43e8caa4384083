"""What a module hands to torch.compile, and whether it says how the compiled
backward meets autocast.

torch.compile traces a region's backward when its forward runs, and bakes in an
assumption about the autocast that backward runs under
(`torch._functorch.config.backward_pass_autocast`, "same_as_forward" by
default).  PyTorch's documentation from 2.9 on ("torch.compile has different
autograd semantics") tells a program that runs backward outside autocast, as
the AMP recipe does, to set it to "off": otherwise the compiled backward runs
under the forward's autocast, and computes in float16 or bfloat16 what eager
AMP keeps in float32 (the backward of a softmax, a layer norm, a region the
model runs with autocast disabled).  On torch 2.13 a model with those three
differs from eager AMP by 1e-3 in its gradients under "same_as_forward" and
not at all under "off" (`tests/test_compiled_autocast.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from amplint.analysis.autocast import ANY_AUTOCAST, disabled, first_backward
from amplint.analysis.imports import ImportMap, dotted_name
from amplint.analysis.scopes import Scope, ScopedVisitor
from amplint.analysis.statements import method_name
from amplint.analysis.visitor import Analysis, Visitor

COMPILE = "torch.compile"
SETTING = "backward_pass_autocast"
# The first release whose documentation names the setting and says when to
# turn it off.
DOCUMENTED_SINCE = (2, 9)
# nn.Module.compile(*args, **kwargs) passes these to torch.compile; a
# `model.compile(optimizer=..., loss=...)` is Keras's, not a compile of ours.
_COMPILE_KEYWORDS = frozenset({"fullgraph", "dynamic", "backend", "mode", "options", "disable"})


@dataclass(frozen=True)
class CompiledUnderAutocast:
    """`call` runs `name`, compiled by `compiled`, inside the autocast block
    `block`, while its scope runs backward outside every autocast block."""

    call: cst.Call
    name: str
    compiled: cst.CSTNode
    block: cst.With


@dataclass
class CompiledScan:
    """What the module compiles (torch.compile, `.compile()`, decorators), by scope."""

    # Scope -> name -> the node that compiled it (`torch.compile(...)`, a
    # `.compile()` call, a decorator); attribute chains (`self.model`) are
    # module-wide.
    names: dict[Scope, dict[str, cst.CSTNode]] = field(default_factory=dict)
    attributes: dict[str, cst.CSTNode] = field(default_factory=dict)
    # The module sets `backward_pass_autocast` (assigned, or given to
    # `config.patch`): it has said what its compiled backward runs under.
    sets_backward_autocast: bool = False
    under_autocast: list[CompiledUnderAutocast] = field(default_factory=list)

    def compiled_call(
        self, node: cst.CSTNode, scopes: tuple[Scope, ...]
    ) -> tuple[cst.Call, str, cst.CSTNode] | None:
        """The first call under `node` of something compiled, as seen from
        `scopes` (innermost first): the call, its name, what compiled it."""
        for call in _calls(node):
            name = dotted_name(call.func)
            if name is None:
                continue
            if "." in name:
                if name in self.attributes:
                    return call, name, self.attributes[name]
                continue
            for scope in scopes:
                compiled = self.names.get(scope, {}).get(name)
                if compiled is not None:
                    return call, name, compiled
        return None


class _CompileFinder(ScopedVisitor):
    def __init__(self, imports: ImportMap) -> None:
        super().__init__()
        self.imports = imports
        self.scan = CompiledScan()
        self._blocks: list[tuple[cst.With, tuple[Scope, ...]]] = []
        # Scopes that call `.backward()` outside every autocast block.
        self._backward_outside: set[Scope] = set()
        self._open_autocast = 0  # autocast blocks open around the code visited
        self._outer_open: list[int] = []  # the count outside each def being visited
        # Names bound to an autocast region or a maker of one (nanoGPT's
        # `ctx = nullcontext() if cpu else torch.amp.autocast(...)`, timm's
        # `amp_autocast = partial(torch.autocast, ...)`), per scope.
        self._autocast_names: dict[Scope, set[str]] = {}

    def _record(self, target: cst.BaseExpression, compiled: cst.CSTNode) -> None:
        name = dotted_name(target)
        if name is None:
            return
        if "." in name:
            self.scan.attributes[name] = compiled
        else:
            self.scan.names.setdefault(self.scope, {})[name] = compiled

    def _compiles(self, node: cst.BaseExpression) -> bool:
        func = node.func if isinstance(node, cst.Call) else node
        return self.imports.resolve(func, self.scope) == COMPILE

    def visit_Assign(self, node: cst.Assign) -> None:
        if isinstance(node.value, cst.Call) and self._compiles(node.value):
            for target in node.targets:
                self._record(target.target, node.value)
        if any(self._opens_autocast(call) for call in _calls(node.value)):
            for target in node.targets:
                if isinstance(target.target, cst.Name):
                    self._autocast_names.setdefault(self.scope, set()).add(target.target.value)
        self._notes_setting(target.target for target in node.targets)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if isinstance(node.value, cst.Call) and self._compiles(node.value):
            self._record(node.target, node.value)
        self._notes_setting([node.target])

    def _notes_setting(self, targets) -> None:
        for target in targets:
            if isinstance(target, cst.Attribute) and target.attr.value == SETTING:
                self.scan.sets_backward_autocast = True

    def visit_Call(self, node: cst.Call) -> None:
        if any(arg.keyword is not None and arg.keyword.value == SETTING for arg in node.args):
            self.scan.sets_backward_autocast = True  # torch._functorch.config.patch(...)
        func = node.func
        if (
            isinstance(func, cst.Attribute)
            and func.attr.value == "compile"
            and self.imports.resolve(func, self.scope) is None  # not re.compile, torch.compile
            and all(
                arg.keyword is not None and arg.keyword.value in _COMPILE_KEYWORDS
                for arg in node.args
            )
        ):
            self._record(func.value, node)  # nn.Module.compile(): compiled in place
        if self._open_autocast == 0 and method_name(node) == "backward":
            self._backward_outside.add(self.scope)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        for decorator in node.decorators:
            if self._compiles(decorator.decorator):
                if isinstance(self.scope, cst.ClassDef):
                    self.scan.attributes[f"self.{node.name.value}"] = decorator
                else:
                    self.scan.names.setdefault(self.scope, {})[node.name.value] = decorator
        super().visit_FunctionDef(node)

    def _opens_autocast(self, call: cst.Call) -> bool:
        """An enabled autocast call, or `partial(autocast, ...)`."""
        called = self.imports.resolve(call.func, self.scope)
        if called == "functools.partial" and call.args:
            called = self.imports.resolve(call.args[0].value, self.scope)
        return called in ANY_AUTOCAST and not disabled(call)

    def _names_autocast(self, item: cst.BaseExpression) -> bool:
        """`with ctx:` or `with amp_autocast():`, the name bound to autocast."""
        if isinstance(item, cst.Call) and not item.args:
            item = item.func
        if not isinstance(item, cst.Name):
            return False
        scopes = (self.scope, self.scopes[0])
        return any(item.value in self._autocast_names.get(scope, ()) for scope in scopes)

    def visit_With(self, node: cst.With) -> None:
        opens = any(
            (isinstance(item.item, cst.Call) and self._opens_autocast(item.item))
            or self._names_autocast(item.item)
            for item in node.items
        )
        if opens:
            self._blocks.append((node, tuple(reversed(self.scopes))))
            self._open_autocast += 1

    def leave_With(self, original_node: cst.With) -> None:
        if self._blocks and self._blocks[-1][0] is original_node:
            self._open_autocast -= 1

    # A def inside an autocast block runs wherever it is called.
    def visit_FunctionDef_body(self, node: cst.FunctionDef) -> None:
        self._outer_open.append(self._open_autocast)
        self._open_autocast = 0

    def leave_FunctionDef_body(self, node: cst.FunctionDef) -> None:
        self._open_autocast = self._outer_open.pop()

    def finish(self) -> CompiledScan:
        for block, scopes in self._blocks:
            if scopes[0] not in self._backward_outside or first_backward(block) is not None:
                continue  # backward under autocast too, or elsewhere: not what the docs name
            found = self.scan.compiled_call(block.body, scopes)
            if found is not None:
                call, name, compiled = found
                self.scan.under_autocast.append(CompiledUnderAutocast(call, name, compiled, block))
        return self.scan


class _Calls(Visitor):
    def __init__(self) -> None:
        self.calls: list[cst.Call] = []

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False  # runs where it is called

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False


def _calls(node: cst.CSTNode) -> list[cst.Call]:
    finder = _Calls()
    finder.walk(node)
    return finder.calls


def compiled_analysis(imports: ImportMap) -> Analysis[CompiledScan]:
    finder = _CompileFinder(imports)
    return Analysis(finder, finder.finish)
