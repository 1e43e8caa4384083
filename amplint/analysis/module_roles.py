"""The roles a module's names play in training, found in one walk.

Which names are optimizers and schedulers, which defs backpropagate or step an
optimizer (the halves of a step split across helpers, the closures a step hands
to `optimizer.step`), which compute a loss CUDA autocast refuses, which names
stand for autocast or for torch itself.  The step finder (analysis/steps.py)
reads them to tell a training step from a look-alike.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import libcst as cst

from amplint.analysis.forward import AUTOCAST_UNSAFE_LOSSES, short_loss_name
from amplint.analysis.imports import ImportMap, dotted_name
from amplint.analysis.scopes import Scope, ScopedVisitor
from amplint.analysis.statements import method_name
from amplint.analysis.visitor import Analysis, Visitor
from amplint.project.losses import LossHelper

OPTIMIZER_NAME = re.compile(r"optim|^opt($|[_\dA-Z]|[dg]$)", re.I)
SCHEDULER_NAME = re.compile(r"sched", re.I)
# Receivers of `.backward(loss)` that belong to a framework owning precision.
FRAMEWORK_BACKWARD = {"accelerator", "booster", "engine", "model_engine", "fabric"}


def framework_backward(receiver: str) -> bool:
    """Whether `<receiver>.backward(...)` is a framework's backward, which owns
    the precision: `accelerator.backward(loss)`, `booster.backward(loss,
    optimizer)`; and `optimizer.backward(loss)`, as a torch optimizer has no
    backward: the wrappers that add one (Colossal-AI's boosted optimizer,
    apex's FP16_Optimizer) scale the loss themselves."""
    last = receiver.rsplit(".", 1)[-1]
    if last in FRAMEWORK_BACKWARD:
        return True
    return bool(OPTIMIZER_NAME.search(last)) and not SCHEDULER_NAME.search(last)


@dataclass
class ModuleRoles:
    """What the module's names are: optimizers, schedulers, losses, functions."""

    names: set[str]
    schedulers: set[str]
    unsafe_losses: dict[str, str]  # name bound to an autocast-unsafe loss -> its class
    functions: set[str]  # names of every def in the module: candidates for closures
    module_functions: dict[str, cst.FunctionDef]  # the defs at the module's top level
    # Module globals naming a torch callable: `Tensor = torch.cuda.FloatTensor
    # if cuda else torch.FloatTensor`, as GAN collections write it.
    torch_aliases: set[str]
    # Defs that call `.backward()` themselves or in a nested def: closures a
    # training step can hand to `optimizer.step`.
    backward_functions: set[str]
    # Defs whose backward is a framework's (`booster.backward(loss, optimizer)`
    # in a helper of a Colossal-AI loop): a step calling one is the framework's.
    framework_backward_functions: set[str] = field(default_factory=set)
    # Defs that call `<optimizer>.step()`: half of a step split across helpers.
    step_functions: set[str] = field(default_factory=set)
    # Defs that compute a loss which raises under CUDA autocast -> that loss.
    unsafe_helpers: dict[str, str] = field(default_factory=dict)
    created: bool = False  # some torch.optim optimizer is made in the module
    # Names bound to an autocast context or factory: `ctx = nullcontext() if cpu
    # else torch.autocast(...)`, `amp_autocast = partial(torch.autocast, ...)`.
    autocast_aliases: set[str] = field(default_factory=set)
    classes: list[cst.ClassDef] = field(default_factory=list)  # every class of the module


class _RoleCollector(ScopedVisitor):
    def __init__(self, imports: ImportMap, project_losses: dict[str, LossHelper]) -> None:
        super().__init__()
        self.imports = imports
        self.found = ModuleRoles(set(), set(), {}, set(), {}, set(), set())
        # Classes whose instances compute an unsafe loss: the module's own
        # (found as the walk goes) and those imported from the project.
        self.loss_classes = {
            name: helper.description for name, helper in project_losses.items() if helper.is_class
        }
        self.found.unsafe_helpers.update(
            (name, helper.description)
            for name, helper in project_losses.items()
            if not helper.is_class
        )
        self.constructed: list[tuple[str, str]] = []  # (name, the callable whose result it is)

    def leave_scope(self, scope: Scope) -> None:
        if not isinstance(scope, cst.Module):
            return
        # `criterion = GANLoss()`: calling the instance computes the loss.  Done
        # at the end, where every class of the module is known.
        for name, constructed in self.constructed:
            if constructed in self.loss_classes:
                self.found.unsafe_helpers.setdefault(name, self.loss_classes[constructed])

    def enter_scope(self, scope: Scope) -> None:
        if isinstance(scope, cst.ClassDef):
            self.found.classes.append(scope)
        if isinstance(scope, cst.FunctionDef):
            self.found.functions.add(scope.name.value)
            if len(self.scopes) == 2:  # the module, then this def
                self.found.module_functions[scope.name.value] = scope

    def visit_Assign(self, node: cst.Assign) -> None:
        if _mentions_autocast(node.value):
            for target in node.targets:
                name = dotted_name(target.target)
                if name is not None:
                    self.found.autocast_aliases.add(name)
        if isinstance(self.scope, cst.Module) and self._names_torch(node.value):
            self.found.torch_aliases.update(
                target.target.value
                for target in node.targets
                if isinstance(target.target, cst.Name)
            )
        if not isinstance(node.value, cst.Call):
            return
        called = self.imports.resolve(node.value.func, self.scope) or ""
        constructed = dotted_name(_moved(node.value).func)
        for target in node.targets:
            name = dotted_name(target.target)
            if name is None:
                continue
            if constructed is not None:
                self.constructed.append((name, constructed))
            if called.startswith("torch.optim.lr_scheduler."):
                self.found.schedulers.add(name)
            elif called.startswith("torch.optim."):
                self.found.names.add(name)
                self.found.created = True
            elif called in AUTOCAST_UNSAFE_LOSSES:
                self.found.unsafe_losses[name] = called

    def _names_torch(self, value: cst.BaseExpression) -> bool:
        if isinstance(value, cst.IfExp):
            return self._names_torch(value.body) and self._names_torch(value.orelse)
        if not isinstance(value, (cst.Name, cst.Attribute)):
            return False
        return (self.imports.resolve(value, self.scope) or "").startswith("torch.")

    def visit_Call(self, node: cst.Call) -> None:
        called = self.imports.resolve(node.func, self.scope)
        if called in AUTOCAST_UNSAFE_LOSSES:
            # A loss helper: calling it runs a loss that raises under autocast.
            for scope in self.scopes:
                if isinstance(scope, cst.FunctionDef):
                    self.found.unsafe_helpers.setdefault(scope.name.value, short_loss_name(called))
                elif isinstance(scope, cst.ClassDef):
                    self.loss_classes.setdefault(scope.name.value, short_loss_name(called))
        if method_name(node) == "backward":
            defs = [scope.name.value for scope in self.scopes if isinstance(scope, cst.FunctionDef)]
            if framework_backward(dotted_name(node.func.value) or ""):
                self.found.framework_backward_functions.update(defs)
            else:
                self.found.backward_functions.update(defs)
        if method_name(node) == "step" and not node.args:
            receiver = (dotted_name(node.func.value) or "").rsplit(".", 1)[-1]
            if OPTIMIZER_NAME.search(receiver) and not SCHEDULER_NAME.search(receiver):
                self.found.step_functions.update(
                    scope.name.value for scope in self.scopes if isinstance(scope, cst.FunctionDef)
                )
        if method_name(node) == "zero_grad":
            name = dotted_name(node.func.value)
            if name is not None:
                self.found.names.add(name)


def _moved(call: cst.Call) -> cst.Call:
    """`GANLoss()` of `GANLoss().to(device)` (also `.cuda()`, `.float()`)."""
    while (
        isinstance(call.func, cst.Attribute)
        and call.func.attr.value in ("to", "cuda", "float", "cpu")
        and isinstance(call.func.value, cst.Call)
    ):
        call = call.func.value
    return call


def _mentions_autocast(value: cst.BaseExpression) -> bool:
    finder = _AutocastMention()
    finder.walk(value)
    return finder.found


class _AutocastMention(Visitor):
    def __init__(self) -> None:
        self.found = False

    def visit_Name(self, node: cst.Name) -> None:
        self.found = self.found or "autocast" in node.value


def module_roles(
    module: cst.Module, imports: ImportMap, project_losses: dict[str, LossHelper]
) -> ModuleRoles:
    return module_roles_analysis(imports, project_losses).alone(module)


def module_roles_analysis(
    imports: ImportMap, project_losses: dict[str, LossHelper]
) -> Analysis[ModuleRoles]:
    collector = _RoleCollector(imports, project_losses)
    return Analysis(collector, lambda: collector.found)
