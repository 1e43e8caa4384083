"""Where a module spells the deprecated ``torch.cuda.amp`` / ``torch.cpu.amp`` API.

Each use is recorded with how it is used (called, bare decorator, type position,
plain reference), because each needs a different rewrite, and with whether it
sits in a version fallback, which must be left alone.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

import libcst as cst

from amplint.analysis.code_text import code_only
from amplint.analysis.imports import ImportMap
from amplint.analysis.guards import GuardedVisitor
from amplint.analysis.scopes import Scope
from amplint.analysis.visitor import Analysis
from amplint.triggers import DEPRECATED_MEMBERS

DEPRECATED_MODULES = {"torch.cuda.amp": "cuda", "torch.cpu.amp": "cpu"}

# An `if` whose test reads a version or probes for an attribute guards a
# fallback; its branches are written for several torch releases on purpose.
_VERSION_TEST = re.compile(r"version|torch_(greater|less)|hasattr\(|getattr\(", re.I)
# A `try` that also spells the modern API (`torch.amp`, `torch.autocast`, through
# whatever name torch has) is a fallback between the two.
_MODERN_ATTRIBUTE = re.compile(r"\b(\w+)\s*\.\s*(?:amp|autocast)\b")
_MODERN_IMPORT = re.compile(r"\bfrom\s+torch(?:\.amp\s+import|\s+import\s+[^\n]*\bamp\b)")


class UseKind(enum.Enum):
    CALL = "call"  # torch.cuda.amp.autocast(...), also as a decorator
    BARE_DECORATOR = "bare decorator"  # @torch.cuda.amp.custom_fwd
    TYPE = "type"  # annotations, isinstance/issubclass, except clauses
    REFERENCE = "reference"  # amp_autocast = torch.cuda.amp.autocast


@dataclass(frozen=True, eq=False)
class DeprecatedAmpUse:
    """One use of a `torch.cuda.amp` / `torch.cpu.amp` member, and how it is used."""

    node: cst.BaseExpression  # the spelling: `torch.cuda.amp.autocast`, `autocast`, ...
    spelled: str  # that spelling as text
    device: str  # "cuda" or "cpu"
    member: str  # "autocast", "GradScaler", "custom_fwd" or "custom_bwd"
    kind: UseKind
    call: cst.Call | None  # the call when kind is CALL
    decorator: cst.Decorator | None  # the decorator when kind is BARE_DECORATOR
    scope: Scope
    in_version_fallback: bool


def deprecated_member(qualified: str | None) -> tuple[str, str] | None:
    """``("cuda", "autocast")`` for ``torch.cuda.amp.autocast``, else None."""
    if qualified is None:
        return None
    module, _, member = qualified.rpartition(".")
    device = DEPRECATED_MODULES.get(module)
    if device is None or member not in DEPRECATED_MEMBERS[device]:
        return None
    return device, member


class _UseFinder(GuardedVisitor):
    def __init__(self, module: cst.Module, imports: ImportMap) -> None:
        super().__init__()
        self.module = module
        self.imports = imports
        self.uses: list[DeprecatedAmpUse] = []
        self._type_depth = 0
        self._compared_depth = 0
        self._claimed: set[int] = set()  # ids of spellings already recorded by a parent

    # -- contexts -------------------------------------------------------------
    def visit_Import(self, node: cst.Import) -> bool:
        return False  # imports are bindings, not uses; fixes tidy them afterwards

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def visit_Annotation(self, node: cst.Annotation) -> None:
        self._type_depth += 1

    def leave_Annotation(self, original_node: cst.Annotation) -> None:
        self._type_depth -= 1

    # `func in (torch.amp.autocast, torch.cuda.amp.autocast)` asks which class it
    # was given: the class itself is meant, and touching it would break the test.
    def visit_Comparison(self, node: cst.Comparison) -> None:
        self._compared_depth += 1

    def leave_Comparison(self, original_node: cst.Comparison) -> None:
        self._compared_depth -= 1

    def visit_DictElement(self, node: cst.DictElement) -> None:
        self._claimed.add(id(node.key))  # a key is compared, not called

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        if node.type is not None:
            self._claim_types(node.type)

    # -- version fallbacks (GuardedVisitor) -------------------------------------
    def opens_guard(self, node) -> bool:
        if isinstance(node, cst.Try):
            return self._spells_modern_amp(code_only(self.module.code_for_node(node)))
        return bool(_VERSION_TEST.search(code_only(self.module.code_for_node(node.test))))

    def _spells_modern_amp(self, code: str) -> bool:
        if _MODERN_IMPORT.search(code):
            return True
        return any(
            self.imports.resolve(cst.Name(head), self.scope) == "torch"
            for head in set(_MODERN_ATTRIBUTE.findall(code))
        )

    # -- uses ---------------------------------------------------------------
    def _record(
        self,
        node: cst.BaseExpression,
        kind: UseKind,
        call: cst.Call | None = None,
        decorator: cst.Decorator | None = None,
    ) -> bool:
        if id(node) in self._claimed:
            return False
        scope = self.scope
        found = deprecated_member(self.imports.resolve(node, scope))
        if found is None:
            return False
        self._claimed.add(id(node))
        device, member = found
        self.uses.append(
            DeprecatedAmpUse(
                node=node,
                spelled=self.module.code_for_node(node),
                device=device,
                member=member,
                kind=kind,
                call=call,
                decorator=decorator,
                scope=scope,
                in_version_fallback=self.guarded,
            )
        )
        return True

    def _claim_types(self, expression: cst.BaseExpression) -> None:
        elements = (
            [element.value for element in expression.elements]
            if isinstance(expression, cst.Tuple)
            else [expression]
        )
        for element in elements:
            self._record(element, UseKind.TYPE)

    def visit_Decorator(self, node: cst.Decorator) -> None:
        if not isinstance(node.decorator, cst.Call):
            self._record(node.decorator, UseKind.BARE_DECORATOR, decorator=node)

    def visit_Call(self, node: cst.Call) -> None:
        if self._record(node.func, UseKind.CALL, call=node):
            return
        if isinstance(node.func, cst.Name) and node.func.value in ("isinstance", "issubclass"):
            if len(node.args) == 2:
                self._claim_types(node.args[1].value)

    def _plain_use_kind(self) -> UseKind | None:
        if self._compared_depth:
            return None
        return UseKind.TYPE if self._type_depth else UseKind.REFERENCE

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        kind = self._plain_use_kind()
        if kind is None:
            return True
        # A recorded spelling is rewritten whole: its inner parts are not uses.
        if id(node) in self._claimed or self._record(node, kind):
            return False
        self._claimed.add(id(node.attr))  # `x.autocast` is not the name `autocast`
        return True

    def visit_Name(self, node: cst.Name) -> None:
        kind = self._plain_use_kind()
        if kind is not None:
            self._record(node, kind)

    def visit_Arg(self, node: cst.Arg) -> None:
        # keyword names (`enabled=`) are not references
        if node.keyword is not None:
            self._claimed.add(id(node.keyword))

    def visit_Param(self, node: cst.Param) -> None:
        self._claimed.add(id(node.name))

    def visit_FunctionDef_name(self, node: cst.FunctionDef) -> None:
        self._claimed.add(id(node.name))

    def visit_ClassDef_name(self, node: cst.ClassDef) -> None:
        self._claimed.add(id(node.name))


def deprecated_amp_analysis(
    module: cst.Module, imports: ImportMap
) -> Analysis[list[DeprecatedAmpUse]]:
    finder = _UseFinder(module, imports)
    return Analysis(finder, lambda: finder.uses)
