"""AMP901: a `# noqa: AMPxxx` that silences nothing, as ruff's RUF100.

Only amplint's own codes are judged, and only those enabled in the run: a
bare `# noqa`, or one naming another tool's codes (`# noqa: E501`), may be
there for that tool.  The engine runs this after the rules, on their findings
before `# noqa` filters them; the fix removes the codes that silence nothing,
and the comment where nothing else is left in it.
"""

from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from amplint.analysis import ModuleFacts
from amplint.diagnostics import Applicability, Diagnostic, Edit, Fix
from amplint.noqa import noqa_directive
from amplint.triggers import UNUSED_NOQA

_AMPLINT_CODE = re.compile(r"AMP[0-9]+")


def unused_noqa(
    facts: ModuleFacts, findings: list[Diagnostic], codes: frozenset[str]
) -> list[Diagnostic]:
    """An AMP901 finding for each `# noqa` comment of the module naming an
    enabled amplint code that silences none of `findings`."""
    found = []
    for holder, comment in _comments(facts.module):
        directive = noqa_directive(comment.value)
        if directive is None or directive[1] is None:
            continue
        where, named = directive
        line = facts.span(comment).line
        unused = [
            code
            for code in named
            if _AMPLINT_CODE.fullmatch(code)
            and code in codes
            and code != UNUSED_NOQA
            and not any(_silences(line, code, finding) for finding in findings)
        ]
        if not unused:
            continue
        rewritten = _without(comment.value, where, [code for code in named if code not in unused])
        fix = Fix(
            Applicability.SAFE,
            f"remove {', '.join(unused)} from the `noqa` comment",
            (Edit(holder, lambda node, value=rewritten: _with_comment(node, value)),),
        )
        listed = ", ".join(f"`{code}`" for code in unused)
        found.append(
            Diagnostic(
                UNUSED_NOQA,
                f"unused `noqa` code{'s' if len(unused) > 1 else ''} {listed}: "
                "nothing here is reported under it",
                facts.span(comment),
                fix,
            )
        )
    return found


def _silences(line: int, code: str, finding: Diagnostic) -> bool:
    """Whether a comment on `line` naming `code` silences `finding` (the
    lines amplint.noqa.noqa_filter reads for it)."""
    if finding.code != code:
        return False
    span = finding.span
    if span.line <= line <= max(span.end_line, span.line):
        return True
    about = finding.about_lines
    return about is not None and about[0] <= line <= about[1]


def _comments(
    module: cst.Module,
) -> Iterator[tuple[cst.TrailingWhitespace | cst.EmptyLine, cst.Comment]]:
    """Each comment of the module with the node that holds it."""
    for node in _holders(module):
        if node.comment is not None:
            yield node, node.comment


def _holders(module: cst.Module) -> list[cst.TrailingWhitespace | cst.EmptyLine]:
    holders: list[cst.TrailingWhitespace | cst.EmptyLine] = []

    class Collect(cst.CSTVisitor):
        def visit_TrailingWhitespace(self, node: cst.TrailingWhitespace) -> None:
            holders.append(node)

        def visit_EmptyLine(self, node: cst.EmptyLine) -> None:
            holders.append(node)

    module.visit(Collect())
    return holders


def _without(comment: str, where: tuple[int, int], kept: list[str]) -> str | None:
    """`comment` with its `noqa` directive (at `where`) naming only `kept`;
    None where no text is left in it."""
    directive = f"# noqa: {', '.join(kept)}" if kept else ""
    start, end = where
    if not directive and start > 0:  # `# type: ignore  # noqa: X`: drop the gap too
        while start > 0 and comment[start - 1] in " \t":
            start -= 1
    rest = (comment[:start] + directive + comment[end:]).rstrip()
    if not rest.startswith("#"):
        rest = f"# {rest.strip()}" if rest.strip() else ""
    return rest or None


def _with_comment(
    node: cst.TrailingWhitespace | cst.EmptyLine, value: str | None
) -> cst.TrailingWhitespace | cst.EmptyLine | cst.RemovalSentinel:
    """The comment's holder with `value` in place of the comment; where no
    text is left, a line that held only the comment goes (as ruff's RUF100
    fix deletes it), a comment after code leaves the code."""
    if value is not None:
        return node.with_changes(comment=cst.Comment(value))
    if isinstance(node, cst.TrailingWhitespace):
        return node.with_changes(whitespace=cst.SimpleWhitespace(""), comment=None)
    return cst.RemovalSentinel.REMOVE
