"""What the parts of the apex migration share: the reason a migration stops,
and small readers of calls and code."""

from __future__ import annotations

import libcst as cst

_CODE = cst.Module([])


class MigrationBlocked(Exception):
    """Why the module cannot be migrated; the message is shown to the user."""


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
