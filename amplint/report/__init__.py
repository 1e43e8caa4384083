"""Formatters: what a person (``text``) or a program (``machine``) reads about
the findings.  Each takes the findings in the order the files were found."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from pathlib import Path

from amplint.diagnostics import Applicability, Diagnostic
from amplint.files import SourceFile


@dataclass(frozen=True)
class Finding:
    """A diagnostic with the file it is in, as the reports show it."""

    path: Path
    diagnostic: Diagnostic
    # What `--output-format full` shows under the finding: the lines it points
    # at, and the code its fix alone gives (None without a fix).
    source: SourceFile | None = None
    preview: str | None = None

    @property
    def safe_fix(self) -> bool:
        fix = self.diagnostic.fix
        return fix is not None and fix.applicability is Applicability.SAFE

    @property
    def unsafe_fix(self) -> bool:
        fix = self.diagnostic.fix
        return fix is not None and fix.applicability is Applicability.UNSAFE


def location(path: Path, diagnostic: Diagnostic) -> str:
    """``path:line:col``, or ``path:cell N:line:col`` in a notebook."""
    span = diagnostic.span
    cell = f"cell {span.cell}:" if span.cell is not None else ""
    return f"{printable(str(path))}:{cell}{span.line}:{span.column}"


def printable(text: str) -> str:
    """`text` with its control and format characters escaped as Python
    writes them (``\\n``, ``\\x1b``, ``\\u202e``).  A file name may hold a
    newline: unescaped, it would start a line of its own, one that CI reads as
    a workflow command (``::error``) or a terminal as an escape sequence."""
    if text.isprintable():
        return text
    return "".join(
        (
            char.encode("unicode_escape").decode("ascii")
            if unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp")
            else char
        )
        for char in text
    )
