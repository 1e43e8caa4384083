"""Rewrites from ``torch.cuda.amp`` / ``torch.cpu.amp`` spellings to ``torch.amp``.

Each builder returns the rewrite for one use; the rule decides which applies.
"""

from __future__ import annotations

from typing import Callable

import libcst as cst

from amplint.transforms.arguments import (
    as_keyword,
    insert_argument,
    is_positional,
    keyword_argument,
)


def bfloat16_in_hardware(torch: str) -> str:
    """The run-time test `--dtype auto` writes for bfloat16: a CUDA GPU of compute
    capability 8.0 or later, whose tensor cores run it.  Not
    `torch.cuda.is_bf16_supported()`, which by default also says yes where
    bfloat16 is only emulated (a V100, a T4): slower than float16 there, and
    cuDNN has no bfloat16 convolutions below 8.0.  Parenthesized, so that it
    can follow `not` and `if`."""
    return f"({torch}.cuda.is_available() and {torch}.cuda.get_device_capability() >= (8, 0))"


# torch.cuda.amp.autocast(enabled, dtype, cache_enabled) puts `enabled` first;
# torch.amp.autocast(device_type, dtype, enabled, ...) does not, so positional
# arguments must become keywords before "cuda" is put in front of them.
AUTOCAST_POSITIONAL = ("enabled", "dtype", "cache_enabled")
# torch.amp.custom_fwd/custom_bwd take the device as a keyword-only argument.
KEYWORD_DEVICE_MEMBERS = ("custom_fwd", "custom_bwd")


def modern_path(torch_name: str, member: str) -> str:
    return f"{torch_name}.amp.{member}"


def _expression(code: str, like: cst.BaseExpression) -> cst.BaseExpression:
    """`code` parsed, wearing the parentheses the replaced expression had."""
    new = cst.parse_expression(code)
    return new.with_changes(lpar=like.lpar, rpar=like.rpar)


def _device_string(device: str) -> cst.SimpleString:
    return cst.SimpleString(f'"{device}"')


def autocast_call_is_fixable(call: cst.Call) -> bool:
    """Whether every positional argument can be named (no *args, not too many)."""
    if any(arg.star == "*" for arg in call.args):
        return False
    return sum(is_positional(arg) for arg in call.args) <= len(AUTOCAST_POSITIONAL)


def rewrite_call(torch_name: str, device: str, member: str) -> Callable[[cst.Call], cst.Call]:
    """``torch.cuda.amp.X(args)`` -> ``torch.amp.X("cuda", args)`` with X's own rules."""

    def rewrite(call: cst.Call) -> cst.Call:
        call = call.with_changes(func=_expression(modern_path(torch_name, member), call.func))
        device_arg = _device_string(device)
        if member == "autocast":
            named = []
            positional_index = 0
            for arg in call.args:
                if is_positional(arg):
                    arg = as_keyword(arg, AUTOCAST_POSITIONAL[positional_index])
                    positional_index += 1
                named.append(arg)
            return insert_argument(call.with_changes(args=named), 0, cst.Arg(device_arg))
        if member in KEYWORD_DEVICE_MEMBERS:
            after_positional = sum(is_positional(arg) or arg.star == "*" for arg in call.args)
            return insert_argument(
                call, after_positional, keyword_argument("device_type", device_arg)
            )
        # GradScaler(init_scale, ...) keeps its order after the new device argument.
        return insert_argument(call, 0, cst.Arg(device_arg))

    return rewrite


def rewrite_bare_decorator(torch_name: str, device: str, member: str):
    """``@torch.cuda.amp.custom_fwd`` -> ``@torch.amp.custom_fwd(device_type="cuda")``."""

    def rewrite(node: cst.BaseExpression) -> cst.BaseExpression:
        return _expression(f'{modern_path(torch_name, member)}(device_type="{device}")', node)

    return rewrite


def rewrite_type(torch_name: str, member: str):
    """In annotations and isinstance checks the class itself is what is meant."""

    def rewrite(node: cst.BaseExpression) -> cst.BaseExpression:
        return _expression(modern_path(torch_name, member), node)

    return rewrite


def rewrite_reference(torch_name: str, device: str, member: str):
    """A stored or returned ``torch.cuda.amp.X`` becomes a callable with the device bound.

    GradScaler keeps positional compatibility (the device is its first
    parameter); autocast and custom_fwd/bwd bind the device by keyword, so a
    positional call of the alias fails loudly instead of passing a flag as dtype.
    """
    path = modern_path(torch_name, member)
    if member == "GradScaler":
        code = f'functools.partial({path}, "{device}")'
    else:
        code = f'functools.partial({path}, device_type="{device}")'

    def rewrite(node: cst.BaseExpression) -> cst.BaseExpression:
        return _expression(code, node)

    return rewrite
