"""Insert and rename call arguments (and dict entries) the way black would lay them out."""

from __future__ import annotations

import libcst as cst


def _has_newline(whitespace: cst.BaseParenthesizableWhitespace) -> bool:
    return isinstance(whitespace, cst.ParenthesizedWhitespace)


def _separator(call: cst.Call) -> cst.BaseParenthesizableWhitespace:
    """What follows a comma between arguments of this call: a space, or the
    newline and indent the call already uses when it is split over lines."""
    if _has_newline(call.whitespace_before_args):
        return _without_comment(call.whitespace_before_args)
    for arg in call.args:
        if isinstance(arg.comma, cst.Comma) and _has_newline(arg.comma.whitespace_after):
            return _without_comment(arg.comma.whitespace_after)
    return cst.SimpleWhitespace(" ")


def _without_comment(
    whitespace: cst.BaseParenthesizableWhitespace,
) -> cst.BaseParenthesizableWhitespace:
    """The line break and indent of `whitespace`, without the comment that ends
    the line it breaks (it belongs to the argument before it)."""
    if isinstance(whitespace, cst.ParenthesizedWhitespace):
        return whitespace.with_changes(first_line=cst.TrailingWhitespace())
    return whitespace


def _after_last(
    comma: cst.Comma, separator: cst.BaseParenthesizableWhitespace
) -> tuple[cst.Comma, cst.Comma]:
    """For an element appended after one with a trailing comma: the old last
    element's comma (its comment, if any, stays on its line) and the new one's
    (which keeps the layout before the closing bracket)."""
    trailing = comma.whitespace_after
    if isinstance(trailing, cst.ParenthesizedWhitespace) and _has_newline(separator):
        kept = comma.with_changes(
            whitespace_after=separator.with_changes(first_line=trailing.first_line)
        )
        return kept, comma.with_changes(whitespace_after=_without_comment(trailing))
    return cst.Comma(whitespace_after=separator), comma


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
    kept = cst.Comma(whitespace_after=separator)
    if isinstance(last.comma, cst.Comma):
        # A trailing comma (a "magic" one in black's terms) stays trailing.
        kept, trailing = _after_last(last.comma, separator)
        new = new.with_changes(comma=trailing)
    else:
        new = new.with_changes(
            comma=cst.MaybeSentinel.DEFAULT, whitespace_after_arg=last.whitespace_after_arg
        )
    args[-1] = last.with_changes(comma=kept, whitespace_after_arg=cst.SimpleWhitespace(""))
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
        separator = _without_comment(node.lbrace.whitespace_after)
    last = elements[-1]
    kept = cst.Comma(whitespace_after=separator)
    if isinstance(last.comma, cst.Comma):
        # A trailing comma stays trailing; the closing brace keeps its line.
        if _has_newline(last.comma.whitespace_after) and len(elements) > 1:
            separator = _without_comment(elements[-2].comma.whitespace_after)
        kept, trailing = _after_last(last.comma, separator)
        new = new.with_changes(comma=trailing)
    closing = node.rbrace.whitespace_before
    if isinstance(closing, cst.ParenthesizedWhitespace) and _has_newline(separator):
        # `"b": 2,  # two` before the brace: the comment stays with "b".
        kept = kept.with_changes(
            whitespace_after=separator.with_changes(first_line=closing.first_line)
        )
        node = node.with_changes(
            rbrace=node.rbrace.with_changes(whitespace_before=_without_comment(closing))
        )
        if isinstance(new.comma, cst.Comma):
            new = new.with_changes(
                comma=new.comma.with_changes(whitespace_after=cst.SimpleWhitespace(""))
            )
    elements[-1] = last.with_changes(comma=kept)
    elements.append(new)
    return node.with_changes(elements=elements)


def one_per_line(call: cst.Call) -> cst.Call:
    """`call` laid out as black lays out a call too long for its line: each
    argument on a line of its own, one level in, with a trailing comma, and
    the closing parenthesis back at the call's indentation."""
    inside = cst.ParenthesizedWhitespace(
        first_line=cst.TrailingWhitespace(),
        indent=True,
        last_line=cst.SimpleWhitespace("    "),
    )
    closing = cst.ParenthesizedWhitespace(
        first_line=cst.TrailingWhitespace(), indent=True, last_line=cst.SimpleWhitespace("")
    )
    args = list(call.args)
    if len(args) == 1 and _bare_generator(args[0].value):
        # `list(p for p in ps)`: a trailing comma would need the generator in
        # parentheses of its own (`list((p for p in ps),)`); black writes none.
        sole = args[0].with_changes(comma=cst.MaybeSentinel.DEFAULT, whitespace_after_arg=closing)
        return call.with_changes(whitespace_before_args=inside, args=[sole])
    laid = [
        arg.with_changes(
            comma=cst.Comma(whitespace_after=inside if index < len(args) - 1 else closing),
            whitespace_after_arg=cst.SimpleWhitespace(""),
        )
        for index, arg in enumerate(args)
    ]
    return call.with_changes(whitespace_before_args=inside, args=laid)


def _bare_generator(value: cst.BaseExpression) -> bool:
    """A generator expression written without parentheses of its own, as the
    sole argument of a call may be."""
    return isinstance(value, cst.GeneratorExp) and not value.lpar
