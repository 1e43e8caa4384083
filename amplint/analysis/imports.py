"""Which local names mean which modules: a light, scope-aware import map.

libcst's QualifiedNameProvider would answer the same question at several times the
cost of parsing; rules only need to know what an import bound, so we read the
import statements ourselves.  Scopes are the module and each function (class
bodies do not enclose their methods in Python, so they are not searched from
inside methods).
"""

from __future__ import annotations

from dataclasses import dataclass
import libcst as cst

from amplint.analysis.scopes import Scope, ScopedVisitor

# The target of a name that imports bind to different things in one scope.
AMBIGUOUS = "<ambiguous>"
# What `from X import *` binds, for the modules whose names amplint follows
# through a star: apex.fp16_utils (removed in 2025), as its last release
# exported them; scripts took `to_python_float` and friends by `*`.
STAR_EXPORTS = {
    "apex.fp16_utils": (
        "BN_convert_float",
        "network_to_half",
        "prep_param_lists",
        "model_grads_to_master_grads",
        "master_params_to_model_params",
        "tofp16",
        "to_python_float",
        "clip_grad_norm",
        "convert_module",
        "convert_network",
        "FP16Model",
        "FP16_Optimizer",
        "LossScaler",
        "DynamicLossScaler",
    ),
}


def dotted_name(node: cst.BaseExpression) -> str | None:
    """``a.b.c`` for a chain of Names and Attributes, otherwise None."""
    parts: list[str] = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if not isinstance(node, cst.Name):
        return None
    parts.append(node.value)
    return ".".join(reversed(parts))


def module_name(node: cst.BaseExpression | None) -> str | None:
    return dotted_name(node) if node is not None else None


@dataclass(frozen=True)
class Binding:
    """`name` in `scope` refers to the module or object `target` (a dotted path)."""

    name: str
    target: str
    statement: cst.Import | cst.ImportFrom
    scope: Scope


class ImportMap(ScopedVisitor):
    """Built by visiting a module once; answers `resolve(expr, scope)`."""

    def __init__(self) -> None:
        super().__init__()
        self.bindings: dict[Scope, dict[str, Binding]] = {}
        self.parent: dict[Scope, Scope | None] = {}
        self.statements: list[Binding] = []
        # (name, id(scope)) -> binding: every analysis resolves the names of
        # every call and attribute, half a million lookups in a large tree.
        self._found: dict[tuple[str, int], Binding | None] = {}

    @classmethod
    def of(cls, module: cst.Module) -> ImportMap:
        import_map = cls()
        import_map.walk(module)
        return import_map

    def enter_scope(self, scope: Scope) -> None:
        self.parent[scope] = self.scopes[-2] if len(self.scopes) > 1 else None

    def _bind(self, name: str, target: str, statement: cst.Import | cst.ImportFrom) -> None:
        self._found.clear()
        scope = self.scope
        binding = Binding(name, target, statement, scope)
        scope_bindings = self.bindings.setdefault(scope, {})
        earlier = scope_bindings.get(name)
        if earlier is not None and earlier.target != target:
            # `try: from torch.amp import X / except: from torch.cuda.amp import X`:
            # the name means either, so it resolves to neither.
            scope_bindings[name] = Binding(name, AMBIGUOUS, statement, scope)
        else:
            scope_bindings[name] = binding
        self.statements.append(binding)

    def visit_Import(self, node: cst.Import) -> bool:
        for alias in node.names:
            full = dotted_name(alias.name)
            if full is None:
                continue
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                self._bind(alias.asname.name.value, full, node)
            else:
                # `import torch.cuda.amp` binds `torch`, through which the rest is reached.
                head = full.split(".", 1)[0]
                self._bind(head, head, node)
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        if isinstance(node.names, cst.ImportStar):
            module = module_name(node.module) if not node.relative else None
            for name in STAR_EXPORTS.get(module or "", ()):
                self._bind(name, f"{module}.{name}", node)
            return False
        # `from .losses import bce` binds `.losses.bce`: never a torch name, but
        # the project model follows it to the module that defines it.
        dots = "." * len(node.relative)
        source = module_name(node.module)
        if source is None and not dots:
            return False
        source = dots + (source or "")
        for alias in node.names:
            imported = dotted_name(alias.name)
            if imported is None:
                continue
            local = imported
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local = alias.asname.name.value
            # `from . import losses` binds `.losses`; `from .x import y`, `.x.y`.
            target = f"{source}.{imported}" if source.strip(".") else source + imported
            self._bind(local, target, node)
        return False

    # -- answering --------------------------------------------------------
    def visible_scopes(self, scope: Scope) -> list[Scope]:
        """`scope` and the scopes its names resolve through, innermost first."""
        chain: list[Scope] = [scope]
        current = self.parent.get(scope)
        while current is not None:
            if not isinstance(current, cst.ClassDef):
                chain.append(current)
            current = self.parent.get(current)
        return chain

    def binding(self, name: str, scope: Scope) -> Binding | None:
        key = (name, id(scope))
        if key in self._found:
            return self._found[key]
        found = None
        for candidate in self.visible_scopes(scope):
            found = self.bindings.get(candidate, {}).get(name)
            if found is not None:
                break
        self._found[key] = found
        return found

    def resolve(self, node: cst.BaseExpression, scope: Scope) -> str | None:
        """The dotted path an expression such as ``amp.autocast`` stands for."""
        dotted = dotted_name(node)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        binding = self.binding(head, scope)
        if binding is not None:
            if binding.target == AMBIGUOUS:
                return None
            target = binding.target
        elif head == "torch":
            target = "torch"  # unimported `torch` (notebooks, exec'd snippets): still torch
        else:
            return None
        return f"{target}.{rest}" if rest else target

    def name_for(self, target: str, scope: Scope) -> str | None:
        """A local name bound to module `target` in `scope`, such as `th` for torch."""
        for candidate in self.visible_scopes(scope):
            for name, binding in self.bindings.get(candidate, {}).items():
                if binding.target == target:
                    return name
        return None
