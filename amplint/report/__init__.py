"""Formatters: what a person (``text``) or a program (``machine``) reads about
the findings.  Each takes the findings in the order the files were found."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from amplint import api
from amplint.files import SourceFile


@dataclass(frozen=True)
class Finding:
    """A finding, the API's record, with the file it is in, as the reports
    show it."""

    path: Path
    found: api.Finding
    # The file as read: `--output-format full` shows the lines the finding
    # points at, and rdjson counts its columns in bytes.
    source: SourceFile | None = None

    @property
    def code(self) -> str:
        return self.found.code

    @property
    def message(self) -> str:
        return self.found.message

    @property
    def range(self) -> api.Range:
        return self.found.range

    @property
    def cell(self) -> int | None:
        return self.found.cell

    @property
    def fix(self) -> api.SuggestedFix | None:
        return self.found.fix

    @property
    def safe_fix(self) -> bool:
        return self.fix is not None and self.fix.safe

    @property
    def unsafe_fix(self) -> bool:
        return self.fix is not None and not self.fix.safe


def findings_in(results: Iterable[api.FileResult]) -> list[Finding]:
    """The findings of `results`, in their order, each with its file."""
    return [
        Finding(result.path, found, result.source)
        for result in results
        for found in result.findings
    ]


def location(finding: Finding) -> str:
    """``path:line:col``, or ``path:cell N:line:col`` in a notebook."""
    start = finding.range.start
    cell = f"cell {finding.cell}:" if finding.cell is not None else ""
    return f"{printable(str(finding.path))}:{cell}{start.line}:{start.column}"


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
