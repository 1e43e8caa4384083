"""Formatters: what a person (``text``) or a program (``machine``) reads about
the findings.  Each takes the findings in the order the files were found."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from amplint.diagnostics import Applicability, Diagnostic
from amplint.files import SourceFile


@dataclass(frozen=True)
class Finding:
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
    return f"{path}:{cell}{span.line}:{span.column}"
