"""Whether a training step runs on the CPU only, where CUDA autocast and a CUDA
GradScaler would do nothing: AMP001 declines such a step under the default
device type and rewrites it only for `--device-type cpu`.

Two proofs.  A script that never leaves the CPU (a tutorial on toy data)
says so in its text.  A module that uses a GPU elsewhere (a notebook whose
first cells train a toy on the CPU before moving to the GPU) proves it per
step: the parameters its optimizer holds come from objects made before the
step's loop, by torch or by code of this module that never leaves the CPU,
and no line up to the loop's end moves them.  Anything not followed is no
proof, and the step keeps its CUDA rewrite.
"""

from __future__ import annotations

import builtins
import re

import libcst as cst

from amplint.analysis import ModuleFacts
from amplint.analysis.code_text import code_only
from amplint.analysis.imports import dotted_name
from amplint.analysis.statements import name_use, parameter_names
from amplint.analysis.steps import TrainingStep
from amplint.analysis.visitor import descendants

# Any sign that code runs on something other than the CPU: CUDA, a device
# variable, an accelerator, a `.to(...)` move, a launcher's rank.
LEAVES_THE_CPU = re.compile(r"cuda|device|accelerat|\bmps\b|xpu|gpu|\.to\(|local_rank", re.I)
# What may make an object's tensors somewhere other than where its code says:
# a load (a checkpoint saved from the GPU), a default device, a device context.
_MADE_ELSEWHERE = re.compile(r"\bload\b|set_default_|\bwith\b[^:\n]*device\(")
# How far a proof follows the objects an object is made from.
_MAX_DEPTH = 4


def cpu_only_reason(step: TrainingStep, facts: ModuleFacts) -> str | None:
    """Why `step` runs on the CPU only, in the user's terms, or None where
    nothing proves it."""
    if not facts.training_steps.creates_optimizer:
        return None
    given = set(parameter_names(step.function)) if step.function is not None else set()
    for optimizer_step in step.steps:
        root = (dotted_name(optimizer_step.optimizer) or "").split(".")[0]
        if root in given and root != "self":
            # Set up by the caller, where the model may well be moved to a GPU.
            return None
    if not LEAVES_THE_CPU.search(facts.code_text):
        # A library module (`algo/ppo.py`) trains where the script importing it
        # puts the model (`main.py`'s `actor_critic.to(device)`).
        if facts.project is not None and any(
            LEAVES_THE_CPU.search(code_only(importer.text))
            for importer in facts.project.importers()
        ):
            return None
        return "the script never moves its model or data off the CPU"
    optimizers = sorted({dotted_name(s.optimizer) or "" for s in step.steps})
    if _CpuProof(step, facts).holds():
        return (
            f"what `{optimizers[0]}` trains is made on the CPU and never moved off it "
            "(other code of the file uses the GPU)"
        )
    return None


class _CpuProof:
    """The per-step proof (see the module's docstring)."""

    def __init__(self, step: TrainingStep, facts: ModuleFacts) -> None:
        self.step = step
        self.facts = facts
        self.seen: set[str] = set()

    def holds(self) -> bool:
        step, facts = self.step, self.facts
        loop = step.outermost_loop
        if loop is None or _MADE_ELSEWHERE.search(facts.code_text):
            return False
        if LEAVES_THE_CPU.search(code_only(facts.module.code_for_node(loop))):
            return False
        # A module's top level runs in order, so only the lines up to the
        # loop's end can move what it trains; a function may run after any.
        lines = facts.code_text.split("\n")
        if step.function is None:
            lines = lines[: facts.span(loop).end_line]
        self.lines = lines
        optimizers = {(dotted_name(s.optimizer) or "").split(".")[0] for s in step.steps}
        return "" not in optimizers and all(self._stays(name, 0) for name in optimizers)

    def _stays(self, name: str, depth: int) -> bool:
        """Whether what `name` holds at the step's loop is on the CPU."""
        if name in self.seen:
            return True
        self.seen.add(name)
        imported = self.facts.imports.binding(name, self.step.enclosing_scope)
        if imported is not None:
            # A library (`torch`, `nn`), or a value of a module that is not
            # the project's (`from config import lr`): no model of its own.
            return not self._project_module(imported.target)
        word = re.compile(rf"\b{re.escape(name)}\b")
        if any(word.search(line) and LEAVES_THE_CPU.search(line) for line in self.lines):
            return False
        bindings = [s for s in self.step.setup if name in name_use(s).bound]
        if not bindings:
            return name in vars(builtins)
        if depth >= _MAX_DEPTH:
            return False
        for statement in bindings:
            if not isinstance(statement, cst.SimpleStatementLine):
                return False  # a def, a class, a loop binding it: not followed
            calls = (node for node in descendants(statement) if isinstance(node, cst.Call))
            if not all(self._callee_stays(call) for call in calls):
                return False
            if not all(self._stays(read, depth + 1) for read in name_use(statement).read):
                return False
        return True

    def _callee_stays(self, call: cst.Call) -> bool:
        """Whether what `call` makes is made on the CPU: torch's and other
        libraries' constructors make it there; this module's class or
        function, when its code never leaves the CPU."""
        func = call.func
        if not isinstance(func, cst.Name):
            return True  # a method: its object is followed as a name read
        definition = _definition(self.facts.module, func.value)
        if definition is not None:
            return not LEAVES_THE_CPU.search(code_only(self.facts.module.code_for_node(definition)))
        return True  # an import or a builtin: followed as a name read

    def _project_module(self, target: str) -> bool:
        project = self.facts.project
        return project is not None and project.module_path(target.rsplit(".", 1)[0]) is not None


def _definition(module: cst.Module, name: str) -> cst.FunctionDef | cst.ClassDef | None:
    """The module-level def or class named `name`, if one."""
    for statement in module.body:
        if isinstance(statement, (cst.FunctionDef, cst.ClassDef)) and statement.name.value == name:
            return statement
    return None
