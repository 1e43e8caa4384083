"""Loss helpers: a project's defs and classes that compute a loss CUDA autocast refuses."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from amplint.project.source import ModuleSource, last_name, top_level_definitions

# The autocast-unsafe losses as a helper's own code calls them (the last part
# of the name: `nn.BCELoss()`, `F.binary_cross_entropy(...)`).
UNSAFE_LOSS_CALLS = frozenset({"BCELoss", "binary_cross_entropy"})


@dataclass(frozen=True)
class LossHelper:
    """A def or class of a project module that computes a loss which raises
    under CUDA autocast (`vae_loss` calling `F.binary_cross_entropy`)."""

    path: Path
    line: int
    loss: str  # as the helper calls it: "BCELoss", "binary_cross_entropy"
    is_class: bool  # its instances compute the loss; else calling it does
    where: str = ""  # "losses.py:6", relative to the project root

    @property
    def description(self) -> str:
        return f"{self.loss}, {self.where}" if self.where else self.loss


def loss_helpers_in(module: ModuleSource) -> dict[str, LossHelper]:
    """The top-level defs and classes of `module` computing an unsafe loss,
    also through another def of the same module."""
    if not any(loss in module.text for loss in UNSAFE_LOSS_CALLS):
        return {}
    definitions = top_level_definitions(module, UNSAFE_LOSS_CALLS)

    def loss_of(name: str, seen: set[str]) -> str | None:
        seen.add(name)
        definition = definitions[name]
        if isinstance(definition, ast.ClassDef):
            for base in definition.bases:
                if last_name(base) in UNSAFE_LOSS_CALLS:
                    return last_name(base)
        for node in ast.walk(definition):
            if not isinstance(node, ast.Call):
                continue
            called = last_name(node.func)
            if called in UNSAFE_LOSS_CALLS:
                return called
            if isinstance(node.func, ast.Name) and called in definitions:
                if called not in seen and (loss := loss_of(called, seen)):
                    return loss
        return None

    found = {}
    for name, definition in definitions.items():
        loss = loss_of(name, set())
        if loss is not None:
            is_class = isinstance(definition, ast.ClassDef)
            found[name] = LossHelper(module.path, definition.lineno, loss, is_class)
    return found
