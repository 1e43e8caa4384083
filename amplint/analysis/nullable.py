"""Whether a binding may hold None, from how the code spells it.

A fix that writes `scaler.state_dict()` where the scaler may be None (made
only under `if use_amp:`) crashes every run without AMP; it writes the guard
`... if scaler is not None else None` instead.  Every spelling of "may be
None" is one class: `scaler = None`, `GradScaler() if amp else None`, an
annotation `Optional[GradScaler]`, `GradScaler | None`, `Union[GradScaler,
None]` (also as a string), on an assignment, on a class-level attribute or on
a parameter, and a parameter defaulting to None.
"""

from __future__ import annotations

import libcst as cst

from amplint.analysis.imports import dotted_name


def may_be_none(value: cst.BaseExpression | None) -> bool:
    """`None`, or a conditional expression with `None` in an arm."""
    if isinstance(value, cst.Name):
        return value.value == "None"
    if isinstance(value, cst.IfExp):
        return may_be_none(value.body) or may_be_none(value.orelse)
    return False


def optional_annotation(annotation: cst.Annotation | cst.BaseExpression | None) -> bool:
    """An annotation that admits None: `Optional[T]`, `T | None`,
    `Union[T, None]`, `None`, or any of them as a string."""
    if isinstance(annotation, cst.Annotation):
        annotation = annotation.annotation
    if annotation is None:
        return False
    if isinstance(annotation, cst.SimpleString):
        try:
            return optional_annotation(cst.parse_expression(annotation.evaluated_value))
        except (cst.ParserSyntaxError, TypeError):
            return False
    if isinstance(annotation, cst.Name):
        return annotation.value == "None"
    if isinstance(annotation, cst.BinaryOperation) and isinstance(
        annotation.operator, cst.BitOr
    ):
        return optional_annotation(annotation.left) or optional_annotation(annotation.right)
    if isinstance(annotation, cst.Subscript):
        name = dotted_name(annotation.value) or ""
        last = name.rsplit(".", 1)[-1]
        if last == "Optional":
            return True
        if last == "Union":
            return any(
                isinstance(element.slice, cst.Index)
                and optional_annotation(element.slice.value)
                for element in annotation.slice
            )
    return False


def optional_parameter(param: cst.Param) -> bool:
    """A parameter that may arrive as None: defaulting to None, or annotated so."""
    default = param.default
    return (isinstance(default, cst.Name) and default.value == "None") or optional_annotation(
        param.annotation
    )
