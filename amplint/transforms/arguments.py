"""Insert and rename call arguments (and dict entries) the way black would lay them out."""

from __future__ import annotations

import libcst as cst


def _has_newline(whitespace: cst.BaseParenthesizableWhitespace) -> bool:
    return isinstance(whitespace, cst.ParenthesizedWhitespace)


def _separator(call: cst.Call) -> cst.BaseParenthesizableWhitespace:
    """What follows a comma between arguments of this call: a space, or the
    newline and indent the call already uses when it is split over lines."""
    if _has_newline(call.whitespace_before_args):
        return call.whitespace_before_args
    for arg in call.args:
        if isinstance(arg.comma, cst.Comma) and _has_newline(arg.comma.whitespace_after):
            return arg.comma.whitespace_after
    return cst.SimpleWhitespace(" ")


def insert_argument(call: cst.Call, index: int, new: cst.Arg) -> cst.Call:
    """`call` with `new` inserted before the argument at `index` (or appended)."""
    args = list(call.args)
    separator = _separator(call)
    if index < len(args):
        new = new.with_changes(comma=cst.Comma(whitespace_after=separator))
        args.insert(index, new)
        return call.with_changes(args=args)
    if not args:
        return call.with_changes(args=[new.with_changes(comma=cst.MaybeSentinel.DEFAULT)])
    last = args[-1]
    if isinstance(last.comma, cst.Comma):
        # A trailing comma (a "magic" one in black's terms) stays trailing.
        new = new.with_changes(comma=last.comma)
    else:
        new = new.with_changes(
            comma=cst.MaybeSentinel.DEFAULT, whitespace_after_arg=last.whitespace_after_arg
        )
    args[-1] = last.with_changes(
        comma=cst.Comma(whitespace_after=separator),
        whitespace_after_arg=cst.SimpleWhitespace(""),
    )
    args.append(new)
    return call.with_changes(args=args)


def keyword_argument(name: str, value: cst.BaseExpression) -> cst.Arg:
    return cst.Arg(
        value=value,
        keyword=cst.Name(name),
        equal=cst.AssignEqual(
            whitespace_before=cst.SimpleWhitespace(""),
            whitespace_after=cst.SimpleWhitespace(""),
        ),
    )


def as_keyword(arg: cst.Arg, name: str) -> cst.Arg:
    """A positional argument turned into ``name=value``, comments and commas kept."""
    return arg.with_changes(
        keyword=cst.Name(name),
        equal=cst.AssignEqual(
            whitespace_before=cst.SimpleWhitespace(""),
            whitespace_after=cst.SimpleWhitespace(""),
        ),
    )


def is_positional(arg: cst.Arg) -> bool:
    return arg.keyword is None and arg.star == ""


def append_dict_element(node: cst.Dict, new: cst.DictElement) -> cst.Dict:
    """`node` with `new` as its last entry, laid out as its entries are: on a
    line of its own in a dict split over lines, after `, ` in one that is not."""
    elements = list(node.elements)
    if not elements:
        return node.with_changes(elements=[new])
    separator: cst.BaseParenthesizableWhitespace = cst.SimpleWhitespace(" ")
    if _has_newline(node.lbrace.whitespace_after):
        separator = node.lbrace.whitespace_after
    last = elements[-1]
    if isinstance(last.comma, cst.Comma):
        # A trailing comma stays trailing; the closing brace keeps its line.
        if _has_newline(last.comma.whitespace_after) and len(elements) > 1:
            separator = elements[-2].comma.whitespace_after
        new = new.with_changes(comma=last.comma)
    elements[-1] = last.with_changes(comma=cst.Comma(whitespace_after=separator))
    elements.append(new)
    return node.with_changes(elements=elements)
