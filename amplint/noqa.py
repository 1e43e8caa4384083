"""`# noqa` comments: which findings they silence, and writing them (--add-noqa).

A line comment `# noqa` or `# noqa: AMP001, AMP201` silences the findings whose
span holds its line (all of them, or the codes named); a file-level
`# amplint: noqa` on a line of its own silences the file, or the codes named.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
import warnings
from dataclasses import dataclass

from amplint.diagnostics import LINE_BREAK as _LINE_BREAK, Diagnostic

_NOQA = re.compile(
    r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:\s*,?\s*[A-Z]+[0-9]+)*))?", re.IGNORECASE
)
_CODE = re.compile(r"[A-Z]+[0-9]+", re.IGNORECASE)
# `# amplint: noqa` (every finding of the file) or `# amplint: noqa: AMP001, AMP201`,
# as ruff's `# ruff: noqa`; only on a line holding nothing but the comment.
_FILE_NOQA = re.compile(
    r"^[ \t]*#[ \t]*amplint[ \t]*:[ \t]*noqa"
    r"(?:[ \t]*:[ \t]*(?P<codes>[A-Z]+[0-9]+(?:[ \t]*,?[ \t]*[A-Z]+[0-9]+)*))?[ \t]*\r?$",
    re.IGNORECASE | re.MULTILINE,
)
_LINE_PIECES = re.compile(f"({_LINE_BREAK.pattern})")  # split keeping each line's ending


def _named(codes: str) -> list[str]:
    """The codes a `noqa: ...` list names, as written, upper-cased."""
    return [code.upper() for code in _CODE.findall(codes)]


def noqa_directive(comment: str) -> tuple[tuple[int, int], list[str] | None] | None:
    """Where the comment `comment` holds a `noqa` directive, and the codes it
    names (None for a bare `# noqa`); None without one."""
    match = _NOQA.search(comment)
    if match is None:
        return None
    codes = match.group("codes")
    return match.span(), (_named(codes) if codes is not None else None)


def noqa_filter(text: str, diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    """The diagnostics no `# noqa` silences.

    On the lines of a finding's span, `# noqa` silences it bare or naming its
    code; on the other lines of the code it is about (`about_lines`: a
    training step, flagged on its backward, annotated where its loop begins)
    only a comment naming its code does, so that a bare `# noqa` left for
    another linter on a long line of a loop does not hide the whole step.
    A file-level `# amplint: noqa` silences the file, or the codes it names."""
    if not diagnostics or "noqa" not in text.lower():
        return diagnostics
    silenced_in_file = _file_noqa_codes(text)
    if silenced_in_file is None:
        return []
    lines = _LINE_BREAK.split(text)

    def silenced(diagnostic: Diagnostic) -> bool:
        span = diagnostic.span
        first, last = span.line, max(span.end_line, span.line)
        if any(_silences(lines, number, diagnostic.code) for number in range(first, last + 1)):
            return True
        if diagnostic.about_lines is None:
            return False
        start, end = diagnostic.about_lines
        return any(
            _silences(lines, number, diagnostic.code, named_only=True)
            for number in range(start, end + 1)
            if not first <= number <= last
        )

    return [
        diagnostic
        for diagnostic in diagnostics
        if diagnostic.code not in silenced_in_file and not silenced(diagnostic)
    ]


def _silences(lines: list[str], number: int, code: str, named_only: bool = False) -> bool:
    if not 1 <= number <= len(lines):
        return False
    match = _NOQA.search(lines[number - 1])
    if match is None:
        return False
    codes = match.group("codes")
    if codes is None:
        return not named_only
    return code in _named(codes)


def _file_noqa_codes(text: str) -> frozenset[str] | None:
    """The codes file-level comments silence; None when one silences all.
    A match is a comment only if tokenizing says so (not a line of a string)."""
    matches = list(_FILE_NOQA.finditer(text))
    if not matches:
        return frozenset()
    comment_lines = _comment_lines(text)
    codes: set[str] = set()
    for match in matches:
        if text.count("\n", 0, match.start()) + 1 not in comment_lines:
            continue
        if match.group("codes") is None:
            return None
        codes.update(_named(match.group("codes")))
    return frozenset(codes)


def _comment_lines(text: str) -> set[int]:
    tokens = _tokens(text)
    return set() if tokens is None else {t.start[0] for t in tokens if t.type == tokenize.COMMENT}


def _tokens(text: str) -> list[tokenize.TokenInfo] | None:
    """`text`'s tokens, None when this Python cannot tokenize it."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return None


@dataclass
class Added:
    """What `add_noqa` did to one text."""

    text: str
    directives: int  # comments written or extended
    skipped: list[int]  # lines where a comment cannot go (inside a string, after a `\`)


def add_noqa(text: str, codes_by_line: dict[int, set[str]]) -> Added:
    """`text` with a `# noqa: CODES` comment at the end of each line of
    `codes_by_line` (1-based), merged into a `# noqa: ...` already there.

    A line whose end lies inside a multi-line string, or that continues with a
    backslash, cannot take a comment: it is left alone and listed in `skipped`."""
    pieces = _LINE_PIECES.split(text)  # line, ending, line, ending, ..., last line
    lines, endings = pieces[0::2], pieces[1::2] + [""]
    blocked = _lines_without_room(text)
    directives, skipped = 0, []
    for number, codes in sorted(codes_by_line.items()):
        if not 1 <= number <= len(lines):
            continue
        line = lines[number - 1]
        if number in blocked or line.rstrip().endswith("\\"):
            skipped.append(number)
            continue
        match = _NOQA.search(line)
        if match is None:
            lines[number - 1] = f"{line.rstrip()}  # noqa: {', '.join(sorted(codes))}"
        elif match.group("codes") is not None:  # a bare noqa silences them already
            named = _named(match.group("codes"))
            missing = sorted(set(codes) - set(named))
            if not missing:
                continue
            merged = f"# noqa: {', '.join([*named, *missing])}"
            lines[number - 1] = line[: match.start()] + merged + line[match.end() :]
        else:
            continue
        directives += 1
    new_text = "".join(line + ending for line, ending in zip(lines, endings))
    return Added(new_text, directives, skipped)


def _lines_without_room(text: str) -> set[int]:
    """Lines whose end lies inside a token (a triple-quoted string, an
    f-string): a comment there would become part of the string."""
    blocked: set[int] = set()
    if re.search(r"\r(?!\n)", text):  # tokenize numbers lines by \n alone
        return set(range(1, len(_LINE_PIECES.split(text)) // 2 + 2))
    tokens = _tokens(text)
    if tokens is None:  # not Python this version can read: nothing is safe to touch
        return set(range(1, text.count("\n") + 2))
    for token in tokens:
        if token.end[0] > token.start[0] and token.type != tokenize.NL:
            blocked.update(range(token.start[0], token.end[0]))
    return blocked


def parses(text: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(text)
    except (SyntaxError, ValueError):
        return False
    return True
