"""AMP007: an mmengine config whose optimizer wrapper trains in FP32.

OpenMMLab's training configs choose mixed precision by the optimizer
wrapper's type: ``optim_wrapper = dict(type="OptimWrapper", ...)`` trains in
FP32, ``type="AmpOptimWrapper"`` runs the forward pass under autocast and
scales the loss with a GradScaler (``loss_scale="dynamic"`` by default,
``dtype="bfloat16"`` for bfloat16).  The rule reads the config as code: it
never imports mmengine.
"""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from amplint.analysis import ModuleFacts
from amplint.analysis.autocast import keyword_value
from amplint.analysis.imports import dotted_name
from amplint.analysis.precision import float16_obstacle
from amplint.analysis.statements import string_value
from amplint.config import Settings
from amplint.diagnostics import Applicability, Diagnostic, Edit, Fix
from amplint.rules.base import Rule
from amplint.rules.framework_fp32 import NUMERICS_NOTE
from amplint.transforms.arguments import append_dict_element, insert_argument, keyword_argument

_FP32 = "OptimWrapper"
_AMP = "AmpOptimWrapper"


class MmengineOptimWrapperInFp32(Rule):
    code = "AMP007"

    def check(self, facts: ModuleFacts, settings: Settings) -> Iterator[Diagnostic]:
        for config, type_value in _fp32_wrappers(facts.module):
            yield self._diagnostic(config, type_value, facts, settings)

    def _diagnostic(self, config, type_value, facts: ModuleFacts, settings: Settings):
        bfloat16 = settings.dtype == "bfloat16"
        switch = f'type="{_AMP}"' + (', dtype="bfloat16"' if bfloat16 else "")
        message = (
            f'the optimizer wrapper is mmengine\'s `{_FP32}`, which trains in FP32; {switch} '
            "runs the forward pass under autocast and scales the loss with a GradScaler"
        )
        span = facts.span(type_value)
        if not isinstance(type_value, cst.SimpleString):
            # `type=OptimWrapper`, the class itself: its import changes too.
            return Diagnostic(self.code, message + " (not fixed: the class is imported)", span)
        if settings.dtype == "auto":
            return Diagnostic(
                self.code, message + " (not fixed: a config cannot ask the GPU; set --dtype)", span
            )
        obstacle = None if bfloat16 else float16_obstacle(facts.code_text)
        if obstacle is not None:
            return Diagnostic(self.code, f"{message} (not fixed: {obstacle})", span)
        quote = type_value.value[0]
        renamed = type_value.with_changes(value=f"{quote}{_AMP}{quote}")
        edits = [Edit(type_value, lambda _: renamed)]
        if bfloat16:
            edits.append(Edit(config, lambda node: _with_bfloat16(node, quote)))
        fix = Fix(Applicability.SAFE, f"{switch} ({NUMERICS_NOTE})", tuple(edits))
        return Diagnostic(self.code, message, span, fix)


def _fp32_wrappers(module: cst.Module) -> list[tuple[cst.CSTNode, cst.BaseExpression]]:
    """Each `optim_wrapper` config (`optim_wrapper = dict(type=...)`, a dict
    literal, or `optim_wrapper=dict(...)` passed to a Runner) whose type is
    the FP32 wrapper, with the expression naming the type."""
    found = []
    for node in _optim_wrapper_values(module):
        type_value = _type_of(node)
        if type_value is None:
            continue
        named = string_value(type_value) if isinstance(type_value, cst.SimpleString) else None
        name = named if named is not None else (dotted_name(type_value) or "")
        if name.rsplit(".", 1)[-1] == _FP32:
            found.append((node, type_value))
    return found


def _optim_wrapper_values(module: cst.Module) -> list[cst.BaseExpression]:
    values = []

    class Finder(cst.CSTVisitor):
        def visit_Assign(self, node: cst.Assign) -> None:
            if any(
                isinstance(target.target, cst.Name) and target.target.value == "optim_wrapper"
                for target in node.targets
            ):
                values.append(node.value)

        def visit_Arg(self, node: cst.Arg) -> None:
            if node.keyword is not None and node.keyword.value == "optim_wrapper":
                values.append(node.value)

    module.visit(Finder())
    return values


def _type_of(config: cst.BaseExpression) -> cst.BaseExpression | None:
    """The `type` of `dict(type=...)` or `{"type": ...}`."""
    if isinstance(config, cst.Call) and dotted_name(config.func) == "dict":
        return keyword_value(config, "type")
    if isinstance(config, cst.Dict):
        return next(
            (
                element.value
                for element in config.elements
                if isinstance(element, cst.DictElement) and string_value(element.key) == "type"
            ),
            None,
        )
    return None


def _with_bfloat16(config: cst.CSTNode, quote: str) -> cst.CSTNode:
    """The config with `dtype="bfloat16"` last, laid out as its entries are."""
    value = cst.SimpleString(f"{quote}bfloat16{quote}")
    if isinstance(config, cst.Call):
        return insert_argument(config, len(config.args), keyword_argument("dtype", value))
    if isinstance(config, cst.Dict):
        key = cst.SimpleString(f"{quote}dtype{quote}")
        return append_dict_element(config, cst.DictElement(key, value))
    return config
