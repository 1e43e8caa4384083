"""Where a module uses NVIDIA apex's mixed-precision APIs.

apex removed ``apex.amp`` (and ``apex.parallel``'s DDP with it) in 2025, so every
use is a line that no longer runs on a current install.  Each use is recorded
with the statement that holds it and the compound statements around that one,
because the migration (transforms/apex.py) replaces whole statements, keeps the
FP32 branch of ``if args.fp16: <apex> else: <fp32>``, and turns the ``if`` tests
an ``amp.initialize`` ran under into the GradScaler's ``enabled=``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst

from amplint.analysis.imports import ImportMap, dotted_name
from amplint.analysis.scopes import Scope, ScopedVisitor
from amplint.analysis.statements import positional_args
from amplint.analysis.visitor import Analysis, descendants

APEX_AMP = "apex.amp"
APEX_PARALLEL = "apex.parallel"
APEX_FP16_UTILS = "apex.fp16_utils"

# What the `ancestors` of a use are made of: statements that hold others, and
# their clauses (`else:` tells the branch of an `if`).
_HOLDERS = (cst.If, cst.Else, cst.For, cst.While, cst.With, cst.Try, cst.ExceptHandler, cst.Finally)


@dataclass(frozen=True, eq=False)
class ApexUse:
    """One use of an apex name: what it resolves to and where it stands."""

    target: (
        str  # what it resolves to: "apex.amp.scale_loss", "apex.parallel.DistributedDataParallel"
    )
    node: cst.BaseExpression  # the spelling: `amp.scale_loss`, `DDP`, ...
    call: cst.Call | None  # the call whose callee is `node`
    decorator: cst.Decorator | None  # `@amp.float_function`
    statement: cst.BaseStatement  # the innermost statement holding it
    # The statements, and else/except/finally clauses, that enclose `statement`
    # in its scope, outermost first; a function or class is a scope of its own.
    ancestors: tuple[cst.CSTNode, ...]
    scope: Scope

    @property
    def module(self) -> str:
        """`apex.amp` for apex.amp.scale_loss; "apex" for apex's other modules."""
        return removed_module(self.target) or "apex"

    @property
    def member(self) -> str:
        """`scale_loss` for apex.amp.scale_loss; "" for the module itself."""
        return self.target[len(self.module) + 1 :]

    @property
    def is_star_import(self) -> bool:
        """`from apex.fp16_utils import *`, the use being the module's name."""
        return isinstance(self.statement, cst.SimpleStatementLine) and any(
            isinstance(small, cst.ImportFrom)
            and isinstance(small.names, cst.ImportStar)
            and small.module is self.node
            for small in self.statement.body
        )


@dataclass(frozen=True, eq=False)
class AutogradFunction:
    """A class of this module deriving from torch.autograd.Function."""

    node: cst.ClassDef
    forward: cst.FunctionDef | None
    backward: cst.FunctionDef | None


@dataclass
class ApexScan:
    """Every apex use of a module, and the autograd Functions its decorators move to."""

    uses: list[ApexUse]
    # Classes deriving from torch.autograd.Function, by name: where
    # `@amp.float_function` on a wrapper of `Fn.apply` moves to.
    autograd_functions: dict[str, AutogradFunction]

    def of(self, module: str) -> list[ApexUse]:
        return [use for use in self.uses if use.module == module]


class _ApexFinder(ScopedVisitor):
    def __init__(self, imports: ImportMap) -> None:
        super().__init__()
        self.imports = imports
        self.uses: list[ApexUse] = []
        self.functions: dict[str, AutogradFunction] = {}
        # Per scope, the compound statements (and clauses) open at the visit position.
        self._open: list[list[cst.CSTNode]] = []
        self._decorator: cst.Decorator | None = None

    def enter_scope(self, scope: Scope) -> None:
        self._open.append([])

    def leave_scope(self, scope: Scope) -> None:
        self._open.pop()

    # -- where we are -----------------------------------------------------------
    def _enter(self, node: cst.CSTNode) -> None:
        self._open[-1].append(node)

    def _leave(self, node: cst.CSTNode) -> None:
        self._open[-1].pop()

    # -- what we find -----------------------------------------------------------
    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        # `from apex.fp16_utils import *`: the star is a use of its own; the
        # names it binds (imports.STAR_EXPORTS) are uses where they are read.
        module = dotted_name(node.module) if node.module is not None else None
        if isinstance(node.names, cst.ImportStar) and module and is_apex(module):
            statement = self._open[-1][-1]
            self.uses.append(
                ApexUse(
                    module,
                    node.module,
                    None,
                    None,
                    statement,
                    tuple(self._open[-1][:-1]),
                    self.scope,
                )
            )
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        bases = {self.imports.resolve(base.value, self.scope) for base in node.bases}
        if "torch.autograd.Function" in bases and isinstance(node.body, cst.IndentedBlock):
            methods = {
                statement.name.value: statement
                for statement in node.body.body
                if isinstance(statement, cst.FunctionDef)
            }
            self.functions[node.name.value] = AutogradFunction(
                node, methods.get("forward"), methods.get("backward")
            )
        super().visit_ClassDef(node)

    def visit_Decorator(self, node: cst.Decorator) -> None:
        self._decorator = node

    def leave_Decorator(self, original_node: cst.Decorator) -> None:
        self._decorator = None

    def visit_Call(self, node: cst.Call) -> bool:
        if not self._record(node.func, node):
            return True
        for argument in node.args:
            self.walk(argument.value)
        return False

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        if not self._record(node, None):
            self.walk(node.value)  # `opt.amp` reads `opt`, not a name `amp`
        return False

    def visit_AssignTarget(self, node: cst.AssignTarget) -> bool:
        return not isinstance(node.target, cst.Name)  # `amp = None` rebinds, it uses nothing

    def visit_Arg(self, node: cst.Arg) -> bool:
        self.walk(node.value)  # `amp=` is a keyword, not a name
        return False

    def visit_Name(self, node: cst.Name) -> None:
        self._record(node, None)

    def _record(self, node: cst.BaseExpression, call: cst.Call | None) -> bool:
        target = self.imports.resolve(node, self.scope)
        if target is None or not is_apex(target):
            return False
        if target == "apex" and isinstance(node, cst.Name):
            return False  # `apex` alone, as in `apex.__version__`: the attribute is the use
        open_here = self._open[-1]
        statement = next((n for n in reversed(open_here) if isinstance(n, cst.BaseStatement)), None)
        if statement is None:  # a decorator: its statement is the def or class
            statement = self.scope
            open_here = self._open[-2] if len(self._open) > 1 else []
        ancestors = tuple(n for n in open_here if n is not statement)
        self.uses.append(
            ApexUse(
                target,
                node,
                call,
                self._decorator,
                statement,
                ancestors,
                self._use_scope(statement),
            )
        )
        return True

    def _use_scope(self, statement: cst.BaseStatement) -> Scope:
        # A decorator belongs to the scope that defines the decorated function.
        if statement is self.scope and len(self.scopes) > 1:
            return self.scopes[-2]
        return self.scope


# Every statement and clause opens and closes a level of `ancestors`.
for _holder in (cst.SimpleStatementLine, *_HOLDERS):
    setattr(_ApexFinder, f"visit_{_holder.__name__}", _ApexFinder._enter)
    setattr(_ApexFinder, f"leave_{_holder.__name__}", _ApexFinder._leave)


def apex_analysis(imports: ImportMap) -> Analysis[ApexScan]:
    finder = _ApexFinder(imports)
    return Analysis(finder, lambda: ApexScan(finder.uses, finder.functions))


def squeezed(code: str) -> str:
    """`code` without whitespace: two spellings of one expression compare equal."""
    return re.sub(r"\s+", "", code)


def removed_module(path: str) -> str | None:
    """The module of apex removed in 2025 (apex.amp, apex.parallel,
    apex.fp16_utils) that the dotted `path` is or lies in, else None."""
    removed = (APEX_AMP, APEX_PARALLEL, APEX_FP16_UTILS)
    return next((m for m in removed if path == m or path.startswith(m + ".")), None)


def is_apex(path: str) -> bool:
    """Whether the dotted path `path` is apex or lies inside it."""
    return path == "apex" or path.startswith("apex.")


def is_private(member: str) -> bool:
    """`_amp_state`: apex's internals; `__dict__` and friends are Python's."""
    return member.startswith("_") and not member.startswith("__")


def assigned_names(statement: cst.BaseStatement) -> str | None:
    """`model, optimizer` for `model, optimizer = ...`, as written; None for other lines."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    small = statement.body[0]
    if not isinstance(small, cst.Assign) or len(small.targets) != 1:
        return None
    return cst.Module([]).code_for_node(small.targets[0].target)


class _CallsTo(ScopedVisitor):
    def __init__(self, imports: ImportMap, targets: set[str]) -> None:
        super().__init__()
        self.imports = imports
        self.targets = targets
        self.found: list[cst.Call] = []

    def visit_Call(self, node: cst.Call) -> None:
        if self.imports.resolve(node.func, self.scope) in self.targets:
            self.found.append(node)


def calls_to(module: cst.Module, imports: ImportMap, targets: set[str]) -> list[cst.Call]:
    """Every call of a function in `targets` (dotted paths, as imports resolve them)."""
    finder = _CallsTo(imports, targets)
    finder.walk(module)
    return finder.found


_LOSS_SCALE_READ = re.compile(r"(?P<amp>[\w.]+)\._amp_state\.loss_scalers\[\d+\]\.loss_scale\(\)")


# apex's loss scaler, set through its private state; the attributes that a
# GradScaler keyword matches (apex's scale window is GradScaler's growth interval).
_SCALER_ATTRIBUTE = re.compile(r"(?P<amp>\w+)\._amp_state\.loss_scalers\[0\]\.(?P<attribute>\w+)")
_SCALER_SETTINGS = {"_loss_scale": "init_scale", "_scale_seq_len": "growth_interval"}


def scaler_setting(use: ApexUse, module: cst.Module) -> tuple[str, cst.BaseExpression] | None:
    """The GradScaler keyword and value for `use` when its statement sets
    apex's loss scaler (`amp._amp_state.loss_scalers[0]._loss_scale = E`:
    `init_scale`, E), where a keyword has that meaning; else None."""
    statement = use.statement
    if not (
        use.member.split(".")[0] == "_amp_state"
        and isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Assign)
        and len(statement.body[0].targets) == 1
    ):
        return None
    assign = statement.body[0]
    match = _SCALER_ATTRIBUTE.fullmatch(squeezed(module.code_for_node(assign.targets[0].target)))
    spelled = squeezed(module.code_for_node(use.node)).split("._amp_state")[0]
    if match is None or match.group("amp") != spelled:
        return None
    keyword = _SCALER_SETTINGS.get(match.group("attribute"))
    return (keyword, assign.value) if keyword is not None else None


def initializes_for_inference(use: ApexUse) -> bool:
    """Whether `use` is `amp.initialize(model)` or `amp.initialize(model, [])`:
    a model cast for inference, with no optimizer and no loss to scale."""
    call = use.call
    if use.member != "initialize" or call is None:
        return False
    positional = positional_args(call)
    if any(arg.keyword is not None and arg.keyword.value == "optimizers" for arg in call.args):
        return False
    return len(positional) < 2 or (
        isinstance(positional[1].value, (cst.List, cst.Tuple)) and not positional[1].value.elements
    )


def loss_scale_reads(use: ApexUse, module: cst.Module) -> list[cst.Call]:
    """The calls `amp._amp_state.loss_scalers[0].loss_scale()` that `use`
    (apex's private `_amp_state`) is part of: the one read of apex's private
    state that the GradScaler answers (`get_scale()`)."""
    if use.member.split(".")[0] != "_amp_state":
        return []
    spelled = squeezed(module.code_for_node(use.node)).split("._amp_state")[0]
    found = []
    for node in descendants(use.statement):
        if isinstance(node, cst.Call):
            match = _LOSS_SCALE_READ.fullmatch(squeezed(module.code_for_node(node)))
            if match is not None and match.group("amp") == spelled:
                found.append(node)
    return found
