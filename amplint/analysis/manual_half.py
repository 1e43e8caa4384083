"""Casts to float16 by hand in a function whose training step uses autocast.

Autocast picks the dtype per op and keeps the weights in float32; a model put
in float16 with ``.half()`` has its optimizer update float16 weights (updates
smaller than the weight's precision round away) and makes a GradScaler raise
("Attempting to unscale FP16 gradients").  Inputs cast by hand are cast again
by autocast where it matters and lose precision where it does not.  Only casts
of a value the step's autocast region reads, made unconditionally, are found:
a cast under an ``if`` is a choice the author made.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst

from amplint.analysis.autocast import disabled, keyword_value
from amplint.analysis.imports import ImportMap, dotted_name
from amplint.analysis.regions import FLOAT16, step_regions
from amplint.analysis.scopes import Scope
from amplint.analysis.statements import method_name, positional_args
from amplint.analysis.steps import StepScan
from amplint.analysis.visitor import Visitor

_MAIN_GUARD = re.compile(r"""__name__\s*==\s*["']__main__["']""")


@dataclass(frozen=True, eq=False)
class ManualHalf:
    """A hand-written float16 cast in a training step that autocast makes redundant."""

    call: cst.Call  # `model.half()`, `x.to(device, torch.float16)`
    receiver: str  # `model`, as written
    statement: cst.SimpleStatementLine
    # The call without the cast: its receiver, or `.to(device)` without the dtype.
    without_cast: cst.BaseExpression


def without_cast(call: cst.Call, imports: ImportMap, scope: Scope) -> cst.BaseExpression | None:
    """What `call` is with the float16 cast taken out, or None if it is none."""
    method = method_name(call)
    receiver = call.func.value if method else None
    if method == "half" and not call.args:
        return receiver
    if method != "to":
        return None
    dtype = keyword_value(call, "dtype")
    positional = positional_args(call)
    if dtype is None and positional and imports.resolve(positional[-1].value, scope) in FLOAT16:
        dtype = positional[-1].value
    if dtype is None or imports.resolve(dtype, scope) not in FLOAT16:
        return None
    rest = [arg for arg in call.args if arg.value is not dtype]
    if not rest:
        return receiver
    last = rest[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return call.with_changes(args=[*rest[:-1], last])


class _CastFinder(Visitor):
    """Unconditional statements of a function (not nested defs) that cast to float16."""

    def __init__(
        self, imports: ImportMap, scope: Scope, wanted: set[str], regions: set[int]
    ) -> None:
        self.imports = imports
        self.scope = scope
        self.wanted = wanted  # dotted names the autocast regions read
        self.regions = regions  # ids of the regions' with-statements
        self.found: list[ManualHalf] = []
        self._statement: cst.SimpleStatementLine | None = None
        # Casts after the first region (in source order) act on its results,
        # e.g. features stored in float16, or a copy made for export.
        self._past_region = False

    def visit_With(self, node: cst.With) -> None:
        if id(node) in self.regions:
            self._past_region = True

    def visit_If(self, node: cst.If) -> bool:
        # A script's `if __name__ == "__main__":` is not a choice about precision.
        return _MAIN_GUARD.fullmatch(cst.Module([]).code_for_node(node.test)) is not None

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return node is self.scope

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self._statement = node

    def visit_Call(self, node: cst.Call) -> None:
        if self._statement is None or self._past_region:
            return
        without = without_cast(node, self.imports, self.scope)
        if without is None:
            return
        receiver = dotted_name(node.func.value)
        targets = {
            dotted_name(target.target)
            for small in self._statement.body
            if isinstance(small, cst.Assign)
            for target in small.targets
        }
        root = _root(node.func.value)
        matched = self.wanted & ({receiver, root} | targets)
        if matched:
            shown = receiver if receiver in matched else min(matched)
            self.found.append(ManualHalf(node, shown, self._statement, without))


def _root(node: cst.BaseExpression) -> str | None:
    """`model` for `model.to(device)` or `Net(...)`-free chains of calls."""
    while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        node = node.func.value
    return dotted_name(node)


class _ReadNames(Visitor):
    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Attribute(self, node: cst.Attribute) -> None:
        name = dotted_name(node)
        if name is not None:
            self.names.add(name)

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)


def find_manual_halves(scan: StepScan, module: cst.Module, imports: ImportMap) -> list[ManualHalf]:
    found: list[ManualHalf] = []
    seen: set[int] = set()
    for step in scan.steps:
        regions = [r for r in step_regions(step, imports) if not disabled(r.call)]
        if not regions:
            continue
        reader = _ReadNames()
        for region in regions:
            reader.walk(region.block.body)
        reader.names.discard("self")
        scope = step.function or module
        finder = _CastFinder(imports, scope, reader.names, {id(r.block) for r in regions})
        finder.walk(scope)
        for half in finder.found:
            if id(half.call) not in seen:
                seen.add(id(half.call))
                found.append(half)
    return found
