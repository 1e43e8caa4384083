"""Autocast regions and GradScalers of the user's own inside code a framework
already runs in mixed precision.

Accelerate with `mixed_precision` set scales the loss in `accelerator.backward`
and unscales it in its optimizer's step: a GradScaler of the user's around it
scales twice and unscales once.  The HuggingFace Trainer (fp16/bf16) and
Lightning (`precision="16-mixed"`) run `compute_loss` / `training_step` under
their own autocast and scaler; DeepSpeed's fp16/bf16 engine keeps the model in
half precision and scales the loss itself (its supported autocast is the
`torch_autocast` config section, which it refuses next to fp16/bf16).

Only what one module shows is matched: the set-up and the manual AMP in the
same module (a LightningModule in model.py, trained by a Trainer in train.py,
is not followed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst

from amplint.analysis.code_text import code_only
from amplint.analysis.autocast import ANY_AUTOCAST, disabled
from amplint.analysis.frameworks import (
    HF_TRAINERS,
    LIGHTNING_MODULES,
    FrameworkSetup,
    Precision,
)
from amplint.analysis.fsdp_scaler import ANY_GRAD_SCALER
from amplint.analysis.imports import ImportMap, dotted_name
from amplint.analysis.scopes import ScopedVisitor
from amplint.analysis.statements import assigned_name, method_name
from amplint.analysis.module_roles import framework_backward
from amplint.analysis.visitor import holds

# The methods each framework runs under its own autocast and scaler.
_HOOKS = {"transformers": ("compute_loss", "training_step"), "lightning": ("training_step",)}


@dataclass(frozen=True, eq=False)
class ManualAmp:
    """A manual autocast or scaler the framework's own makes redundant or wrong."""

    call: cst.Call  # `torch.autocast(...)`, `GradScaler(...)`, `scaler.scale(loss)`
    kind: str  # "autocast" or "scaler"
    setup: FrameworkSetup  # the set-up that already runs mixed precision


@dataclass(eq=False)
class _Found:
    """A manual autocast or scaler call, with what the fix needs to know of its place."""

    call: cst.Call
    kind: str
    function: cst.FunctionDef | None  # innermost
    class_bases: frozenset[str]  # of the class the function is a method of
    # the innermost function (or module) holding it calls a framework's backward
    beside_framework_backward: bool
    # `accelerator.backward(scaler.scale(loss))`
    inside_framework_backward: bool = False


class _ManualAmpFinder(ScopedVisitor):
    def __init__(self, imports: ImportMap) -> None:
        super().__init__()
        self.imports = imports
        self.found: list[_Found] = []
        self._backward_args: set[int] = set()  # ids of calls given to a framework backward
        self._calls_framework_backward: set[int] = set()  # ids of scopes
        self.module_backwards: list[cst.Call] = []  # framework backwards at module level

    def _function(self) -> cst.FunctionDef | None:
        return next((s for s in reversed(self.scopes) if isinstance(s, cst.FunctionDef)), None)

    def _class_bases(self) -> frozenset[str]:
        if len(self.scopes) < 2 or not isinstance(self.scopes[-1], cst.FunctionDef):
            return frozenset()
        owner = self.scopes[-2]
        if not isinstance(owner, cst.ClassDef):
            return frozenset()
        module = self.scopes[0]
        return frozenset(
            resolved
            for base in owner.bases
            if (resolved := self.imports.resolve(base.value, module)) is not None
        )

    def visit_Call(self, node: cst.Call) -> None:
        method = method_name(node)
        if method == "backward":
            if framework_backward(dotted_name(node.func.value) or ""):
                self._calls_framework_backward.add(id(self.scope))
                if self._function() is None:
                    self.module_backwards.append(node)
                self._backward_args.update(id(arg.value) for arg in node.args)
            return
        if method == "scale" and id(node) in self._backward_args:
            self._add(node, "scaler", inside=True)
            return
        called = self.imports.resolve(node.func, self.scope)
        if called in ANY_AUTOCAST and not disabled(node):
            self._add(node, "autocast")
        elif called in ANY_GRAD_SCALER:
            self._add(node, "scaler")

    def _add(self, call: cst.Call, kind: str, inside: bool = False) -> None:
        self.found.append(_Found(call, kind, self._function(), self._class_bases(), False, inside))

    def leave_scope(self, scope) -> None:
        if id(scope) not in self._calls_framework_backward:
            return
        # What this scope holds directly (not what its nested defs hold).
        for found in self.found:
            if (found.function or self.scopes[0]) is scope:
                found.beside_framework_backward = True


def find_manual_amp(
    module: cst.Module,
    imports: ImportMap,
    setups: list[FrameworkSetup],
    accelerate_launched_mixed: bool = False,
) -> list[ManualAmp]:
    """Manual autocast and scalers where a set-up of the same module already
    runs mixed precision; `accelerate_launched_mixed`: a launch config of the
    project turns Accelerate's on for an Accelerator that does not say."""

    def mixed(setup: FrameworkSetup) -> bool:
        if setup.precision is Precision.MIXED:
            return True
        return (
            setup.framework == "accelerate"
            and setup.precision is Precision.UNSET
            and accelerate_launched_mixed
        )

    running = {}
    for setup in setups:
        if mixed(setup):
            running.setdefault(setup.framework, setup)
    if not running:
        return []
    finder = _ManualAmpFinder(imports)
    finder.walk(module)
    _narrow_module_level(finder, module)
    matched: list[ManualAmp] = []
    # `accelerator.backward(scaler.scale(loss))` (or Fabric's) is the mistake to show; the
    # scaler's construction is then the same finding again.
    found_inside = any(found.inside_framework_backward for found in finder.found)
    for found in finder.found:
        setup = _framework_of(found, running)
        if setup is None:
            continue
        if (
            setup.framework in ("accelerate", "fabric", "colossalai")
            and found_inside
            and not found.inside_framework_backward
        ):
            continue
        matched.append(ManualAmp(found.call, found.kind, setup))
    return matched


def _narrow_module_level(finder: _ManualAmpFinder, module: cst.Module) -> None:
    """A script's or notebook's module holds all its sections: manual AMP at
    module level is beside a framework's backward only in the top-level
    statement that calls it (a loop), or as a scaler made at the top and read
    there.  A plain loop of its own in another cell is not."""
    backward_statements = [
        statement
        for statement in module.body
        if any(holds(statement, call) for call in finder.module_backwards)
    ]
    backward_code = [code_only(module.code_for_node(s)) for s in backward_statements]
    for found in finder.found:
        if found.function is not None or not found.beside_framework_backward:
            continue
        statement = next(s for s in module.body if holds(s, found.call))
        bound = assigned_name(statement, found.call)
        found.beside_framework_backward = statement in backward_statements or (
            bound is not None
            and any(re.search(rf"\b{re.escape(bound)}\b", code) for code in backward_code)
        )


def _framework_of(found: _Found, running: dict[str, FrameworkSetup]) -> FrameworkSetup | None:
    """The mixed-precision set-up that already does what `found` does, or None."""
    name = found.function.name.value if found.function is not None else None
    for framework, bases in (("transformers", HF_TRAINERS), ("lightning", LIGHTNING_MODULES)):
        if framework in running and found.class_bases & bases and name in _HOOKS[framework]:
            return running[framework]
    # Fabric, like Accelerate, scales the loss in its own backward.
    accelerate = running.get("accelerate") or running.get("fabric")
    if accelerate is not None and found.kind == "scaler":
        # Beside the Accelerator's own backward, or made where it is made.
        if found.inside_framework_backward or found.beside_framework_backward:
            return accelerate
        if found.function is not None and found.function is accelerate.scope:
            return accelerate
    # DeepSpeed and Colossal-AI run the model itself in their precision: an
    # autocast or a scaler beside their backward is a second one.
    for framework in ("deepspeed", "colossalai"):
        if framework in running and found.beside_framework_backward:
            return running[framework]
    return None
