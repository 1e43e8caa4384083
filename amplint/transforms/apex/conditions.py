"""The conditions amp.initialize ran under, as Python expressions: combined
into the GradScaler's `enabled=` (all the `if`s around one call, any of the
calls of one scope) and negated for an `else` branch."""

from __future__ import annotations

from typing import Sequence

import libcst as cst


def conjunction(pieces: Sequence[str]) -> str | None:
    """`a and b`, each piece parenthesized where `and` would regroup it, and
    said once: `if opt_level != "O0": amp.initialize(..., opt_level=opt_level)`
    runs under one condition, not two."""
    pieces = list(dict.fromkeys(pieces))
    if not pieces:
        return None
    if len(pieces) == 1:
        return pieces[0]
    parts = []
    for piece in pieces:
        node = cst.parse_expression(piece)
        loose = isinstance(node, (cst.IfExp, cst.Lambda, cst.NamedExpr)) or (
            isinstance(node, cst.BooleanOperation) and isinstance(node.operator, cst.Or)
        )
        parts.append(f"({piece})" if loose else piece)
    return " and ".join(parts)


def disjunction(alternatives: Sequence[Sequence[str]]) -> str | None:
    """`a or b` of conjunctions; None (always) when one of them is empty.  The
    pieces every alternative shares are factored out, and an alternative that
    negates a whole earlier one drops that piece: `if A: ...(enabled=E) else:
    ...(enabled=E)` gives `E`, and `if A: ... else: ... B` gives `A or B`, not
    `A or not A and B`."""
    common = [p for p in alternatives[0] if all(p in other for other in alternatives[1:])]
    rests = [[p for p in pieces if p not in common] for pieces in alternatives]
    either = _any_of(rests)
    return conjunction([*common, *([either] if either is not None else [])])


def _any_of(alternatives: Sequence[Sequence[str]]) -> str | None:
    if any(not pieces for pieces in alternatives):
        return None
    seen: list[str] = []
    parts = []
    for pieces in alternatives:
        kept = [p for p in pieces if not any(p == negated(earlier) for earlier in seen)]
        joined = conjunction(kept)
        if joined is None:
            return None
        node = cst.parse_expression(joined)
        loose = isinstance(node, (cst.IfExp, cst.Lambda, cst.NamedExpr))
        parts.append(f"({joined})" if loose else joined)
        seen.append(joined)
    return " or ".join(dict.fromkeys(parts))


def negated(test: str) -> str:
    node = cst.parse_expression(test)
    simple = isinstance(node, (cst.Name, cst.Attribute, cst.Call, cst.Subscript))
    return f"not {test}" if simple else f"not ({test})"
