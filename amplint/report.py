"""Formatters: what a person or a program reads about the findings."""

from __future__ import annotations

import difflib
import json
from collections import Counter
from pathlib import Path
from typing import Iterable

from amplint.catalog import load_catalog
from amplint.diagnostics import Applicability, Diagnostic

SAFE_FIX_MARKER = "[*]"


def _name_of(code: str) -> str:
    doc = load_catalog().get(code)
    return doc.name if doc is not None else ""


def text_row(path: Path, diagnostic: Diagnostic) -> str:
    span = diagnostic.span
    fixable = diagnostic.fix is not None and diagnostic.fix.applicability is Applicability.SAFE
    marker = f" {SAFE_FIX_MARKER}" if fixable else ""
    return f"{path}:{span.line}:{span.column}: {diagnostic.code}{marker} {diagnostic.message}"


def json_record(path: Path, diagnostic: Diagnostic) -> dict:
    span = diagnostic.span
    fix = diagnostic.fix
    return {
        "code": diagnostic.code,
        "name": _name_of(diagnostic.code),
        "message": diagnostic.message,
        "path": str(path),
        "line": span.line,
        "column": span.column,
        "end_line": span.end_line,
        "end_column": span.end_column,
        "fix": (
            None
            if fix is None
            else {"applicability": fix.applicability.value, "message": fix.message}
        ),
    }


def json_document(findings: Iterable[tuple[Path, Diagnostic]]) -> str:
    return json.dumps([json_record(path, d) for path, d in findings], indent=2)


def summary(findings: list[tuple[Path, Diagnostic]]) -> str:
    if not findings:
        return "All checks passed."
    safe = sum(
        1 for _, d in findings if d.fix is not None and d.fix.applicability is Applicability.SAFE
    )
    unsafe = sum(
        1 for _, d in findings if d.fix is not None and d.fix.applicability is Applicability.UNSAFE
    )
    noun = "finding" if len(findings) == 1 else "findings"
    text = f"Found {len(findings)} {noun}"
    if safe:
        text += f" ({safe} fixable with `amplint fix --apply`)"
    text += "."
    if unsafe:
        text += f" {unsafe} more fixable with `amplint fix --apply --unsafe-fixes`."
    return text


def _diff_name(side: str, path: Path) -> str:
    # git's a/ and b/ prefixes make the diff apply with `git apply`; they only
    # make sense before a relative path.
    return path.as_posix() if path.is_absolute() else f"{side}/{path.as_posix()}"


def unified_diff(path: Path, before: str, after: str) -> str:
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            fromfile=_diff_name("a", path),
            tofile=_diff_name("b", path),
        )
    )


def applied_lines(path: Path, applied: list[Diagnostic]) -> list[str]:
    """``path: fixed N`` and one indented line per kind of fix carried out."""
    counts = Counter((d.code, d.fix.message) for d in applied if d.fix is not None)
    lines = [f"{path}: fixed {len(applied)}"]
    for (code, message), count in counts.items():
        times = f" (x{count})" if count > 1 else ""
        lines.append(f"  {code} {message}{times}")
    return lines
