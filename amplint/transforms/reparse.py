"""The parse of an edited module's code, made without parsing all of it again.

`fix` analyses each round's rewrite from a parse of its code, never from the
edited tree itself: rules read trees as the parser builds them, and a node a
rewrite built may differ from the parser's for the same code.  But the edits
change a few statements of a module that may hold a thousand functions, and
libcst parses about half a megabyte a second.

`apply_edits` rebuilds only the path from the module down to each edit; every
other node of the edited tree is the very object the parser made, for code
the edit left as it was.  So the parse of the new code is the edited tree in
which each statement a rewrite made is parsed again alone (at column 0: libcst
keeps indentation relative to the enclosing block), and each statement that
only holds changed statements is the original's, around its body rebuilt the
same way.  The caller checks that the result gives the new code back; the
suite checks, on every fixture's rewrites, that it equals a whole parse.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import libcst as cst

# Past this share of the module's code parsed again statement by statement,
# one parse of the whole is cheaper.
_MOST = 0.5


class _Whole(Exception):
    """The edited tree is better parsed whole."""


def reparsed(original: cst.Module, edited: cst.Module, code: str) -> cst.Module | None:
    """The parse of `code`, the code of `edited` (the tree `apply_edits` and
    module passes made from `original`), from the statements that changed; None
    where a parse of the whole is cheaper or the statements do not parse alone."""
    builder = _Builder(edited, budget=int(len(code) * _MOST))
    try:
        if any(getattr(edited, f) != getattr(original, f) for f in _MODULE_OWN):
            return None  # comments above the code or below it changed
        body = builder.block(original.body, edited.body, nested=False)
        return original.with_changes(body=body)
    except (_Whole, cst.ParserSyntaxError, RecursionError):
        return None


class _Builder:
    def __init__(self, edited: cst.Module, budget: int) -> None:
        self.edited = edited
        self.config = edited.config_for_parsing
        self.budget = budget  # characters left to parse statement by statement

    def block(
        self, before: Sequence[cst.CSTNode], after: Sequence[cst.CSTNode], nested: bool
    ) -> tuple[cst.CSTNode, ...]:
        """`after`, the statements of one edited body, as the parser gives them;
        `before` are the original statements of that body, `nested` whether it
        is a block's (not the module's)."""
        kept = {id(statement) for statement in before}
        # A statement whose own parts are an original statement's (an `if` whose
        # test and header the edits left alone) is that statement, rebuilt.
        owners = {id(part): statement for statement in before for part in _parts(statement)}
        statements = []
        for statement in after:
            if id(statement) in kept:
                statements.append(statement)
                continue
            owner = next(
                (owners[id(part)] for part in _parts(statement) if id(part) in owners), None
            )
            rebuilt = self.around(owner, statement) if owner is not None else None
            if rebuilt is None:
                rebuilt = self.parse(statement, nested)
            statements.append(rebuilt)
        return tuple(statements)  # as the parser holds them

    def around(self, original: cst.CSTNode, edited: cst.CSTNode) -> cst.CSTNode | None:
        """`edited` as `original` with only its blocks changed, each rebuilt;
        None where anything else of it changed."""
        if type(original) is not type(edited):
            return None
        changes = {}
        for field in dataclasses.fields(edited):
            new, old = getattr(edited, field.name), getattr(original, field.name)
            if new is old:
                continue
            if isinstance(new, cst.IndentedBlock) and isinstance(old, cst.IndentedBlock):
                if any(getattr(new, f) is not getattr(old, f) for f in _BLOCK_OWN):
                    return None
                changes[field.name] = old.with_changes(body=self.block(old.body, new.body, True))
            elif isinstance(new, _CLAUSES) and isinstance(old, _CLAUSES):
                rebuilt = self.around(old, new)
                if rebuilt is None:
                    return None
                changes[field.name] = rebuilt
            elif _is_node_sequence(new) and _is_node_sequence(old) and len(new) == len(old):
                # `except` clauses, `match` cases: each the original's, rebuilt
                items = []
                for new_item, old_item in zip(new, old):
                    rebuilt = new_item if new_item is old_item else self.around(old_item, new_item)
                    if rebuilt is None:
                        return None
                    items.append(rebuilt)
                changes[field.name] = tuple(items)
            else:
                return None
        return original.with_changes(**changes) if changes else original

    def parse(self, statement: cst.CSTNode, nested: bool) -> cst.CSTNode:
        code = self.edited.code_for_node(statement)
        self.budget -= len(code)
        if self.budget < 0:
            raise _Whole
        parsed = cst.parse_statement(code, config=self.config)
        return _with_line_indents(parsed, statement) if nested else parsed


class _EmptyLines(cst.CSTVisitor):
    def __init__(self) -> None:
        self.found: list[cst.EmptyLine] = []

    def visit_EmptyLine(self, node: cst.EmptyLine) -> None:
        self.found.append(node)


class _Indents(cst.CSTTransformer):
    def __init__(self, indents: list[bool]) -> None:
        self.indents = iter(indents)

    def leave_EmptyLine(self, original: cst.EmptyLine, updated: cst.EmptyLine) -> cst.EmptyLine:
        indent = next(self.indents)
        return updated if updated.indent is indent else updated.with_changes(indent=indent)


def _with_line_indents(parsed: cst.CSTNode, edited: cst.CSTNode) -> cst.CSTNode:
    """`parsed`, a statement of a block parsed alone, with each blank or
    comment line indented as in `edited`, the statement that wrote the code.

    Parsed alone, a statement stands at column 0, where a line with no
    indentation is "at the statement's indentation" (`indent`); in its block
    the parser says it is not (a blank line in a class body).  A line
    `edited` writes indented is indented in the block too, and one it writes
    without is not, unless its own whitespace starts where the block's
    indentation would (never so in a parse): then the whole is parsed."""
    lines, edited_lines = _EmptyLines(), _EmptyLines()
    parsed.visit(lines)
    edited.visit(edited_lines)
    if len(lines.found) != len(edited_lines.found):
        raise _Whole
    if any(not line.indent and line.whitespace.value for line in edited_lines.found):
        raise _Whole
    indents = [line.indent for line in edited_lines.found]
    if [line.indent for line in lines.found] == indents:
        return parsed
    return parsed.visit(_Indents(indents))


# The parts of a module that are not its statements.
_MODULE_OWN = (
    "header",
    "footer",
    "encoding",
    "default_indent",
    "default_newline",
    "has_trailing_newline",
)
# The parts of a block that are not its statements.
_BLOCK_OWN = ("header", "indent", "footer")
# The clauses that hold a block of their own.
_CLAUSES = (
    cst.If,
    cst.Else,
    cst.Finally,
    cst.ExceptHandler,
    cst.ExceptStarHandler,
    cst.MatchCase,
)


def _is_node_sequence(value: object) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(v, cst.CSTNode) for v in value)


def _parts(statement: cst.CSTNode) -> list[cst.CSTNode]:
    """The nodes a statement holds directly, but its blocks and clauses: what
    stays the same object when only a block of it is edited."""
    parts = []
    for field in dataclasses.fields(statement):
        value = getattr(statement, field.name)
        values = value if isinstance(value, (list, tuple)) else [value]
        parts += [
            v
            for v in values
            if isinstance(v, cst.CSTNode) and not isinstance(v, (cst.BaseSuite, *_CLAUSES))
        ]
    return parts
