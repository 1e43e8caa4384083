"""What the parts of the apex migration share: the reason a migration stops,
what it writes in apex's place, and small readers of calls and code."""

from __future__ import annotations

import libcst as cst

from amplint.config import Settings
from amplint.transforms.insert_amp import AmpChoice

_CODE = cst.Module([])


class MigrationBlocked(Exception):
    """Why the module cannot be migrated; the message is shown to the user."""


def apex_choice(settings: Settings) -> AmpChoice:
    """What the migration writes: apex.amp ran float16 only, its O1 being
    autocast with a dynamic loss scaler, on the device `--device-type` names
    (a CPU test of a migration needs `GradScaler("cpu")`, which really scales).
    `--dtype bfloat16` asks for bfloat16 instead: autocast and `half_function`'s
    casts take it, and the GradScaler that holds apex's state stays (bfloat16
    needs no scaling, but a power-of-two scale is exact in it, and checkpoints
    and scale reads keep their meaning)."""
    return AmpChoice(
        settings.device_type, "bfloat16" if settings.dtype == "bfloat16" else "float16"
    )


def code_of(node: cst.CSTNode) -> str:
    """`node` as source, for nodes whose module is not at hand."""
    return _CODE.code_for_node(node)


def keyword_args(call: cst.Call) -> dict[str, cst.Arg]:
    return {arg.keyword.value: arg for arg in call.args if arg.keyword is not None}


def atom(node: cst.BaseExpression) -> cst.BaseExpression:
    """`node`, parenthesized unless it binds tighter than an attribute access."""
    if isinstance(node, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) or node.lpar:
        return node
    return node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
