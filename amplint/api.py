"""amplint as a library: the settings the command line reads, the findings in
a source text, and their fixes.

    from pathlib import Path
    from amplint import api

    path = Path("src/train.py")
    settings = api.load_settings([path])  # its project's configuration, as `check` reads it
    for finding in api.check_source(path.read_text(), path, settings):
        print(finding.code, finding.range.start, finding.message)
        if finding.fix is not None:
            print(finding.fix.safe, finding.fix.edits)
    fixed = api.fix_source(path.read_text(), path, settings)

A source is analysed as `check -` and `fix -` analyse standard input: in a
worker process where the platform forks (a crash in libcst's native parser
costs that source, not the caller), under the file-time-limit, with the
project around `path` read from disk for the questions that cross modules.
Positions are 1-based lines and 1-based columns counted in characters (code
points), as the command line prints them.  The command line reads its
configuration here (`load_settings`); `amplint server` is built on all of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from amplint.config import ConfigError, Settings
from amplint.diagnostics import LINE_BREAK, Applicability, Diagnostic, FileReport, Span
from amplint.files import NOTEBOOK_SUFFIX, SourceError, SourceFile, source_from_bytes
from amplint.settings import FileSettings, load_settings

__all__ = [
    "AnalysisError",
    "ConfigError",
    "FileSettings",
    "Finding",
    "FixedSource",
    "Location",
    "Range",
    "Settings",
    "SuggestedFix",
    "TextEdit",
    "apply_edits",
    "check_source",
    "edits_between",
    "fix_source",
    "load_settings",
]


class AnalysisError(Exception):
    """A source amplint did not analyse or fix, and why (too large, a parse
    it declines, a worker that died), in the words the command line uses."""


@dataclass(frozen=True, order=True)
class Location:
    """A place in a source: 1-based line, 1-based column in characters."""

    line: int
    column: int


@dataclass(frozen=True)
class Range:
    """From `start` up to, not including, `end`."""

    start: Location
    end: Location


@dataclass(frozen=True)
class TextEdit:
    """Replace the text in `range` by `new_text`."""

    range: Range
    new_text: str


@dataclass(frozen=True)
class SuggestedFix:
    """A finding's fix as text edits on the source it was found in. `safe`
    fixes keep behaviour (`fix` applies them); the others may change numerics
    (`fix --unsafe-fixes`)."""

    safe: bool
    message: str
    edits: tuple[TextEdit, ...]


@dataclass(frozen=True)
class Finding:
    """What a rule found: its code, where, why, and its fix if it has one.
    In a notebook, `cell` is the cell (numbered from 1 among all its cells, as
    editors number them) and `range` is in the cell's own lines."""

    code: str
    message: str
    range: Range
    fix: SuggestedFix | None = None
    cell: int | None = None


@dataclass(frozen=True)
class FixedSource:
    """The source after the fixes `fix` would apply, what they fixed and what
    remains (with the reason a fix was withheld in its message)."""

    text: str
    fixed: tuple[Finding, ...]
    remaining: tuple[Finding, ...]


def check_source(text: str, path: Path, settings: Settings | None = None) -> list[Finding]:
    """The findings in `text`, the Python source of the file at `path` (which
    need not exist: its name decides per-file-ignores, its directory the
    project), each fixable one with the edits of its fix alone.  Where `path`
    ends in `.ipynb`, `text` is the notebook's JSON and the findings name their
    cells (without edits: a fix rewrites the notebook as a whole)."""
    settings = settings if settings is not None else load_settings([path])
    report = _analysed(text, path, settings, fixing=False)
    return [_finding(d, text, report.previews.get(d)) for d in report.diagnostics]


def fix_source(
    text: str, path: Path, settings: Settings | None = None, *, unsafe: bool = False
) -> FixedSource:
    """`text` with the fixes `fix` (with `--unsafe-fixes` where `unsafe`)
    would apply: rewritten, self-checked and stable, or unchanged."""
    settings = settings if settings is not None else load_settings([path])
    report = _analysed(text, path, settings, fixing=True, unsafe=unsafe)
    fixed_text = report.fixed_text if report.fixed_text is not None else text
    return FixedSource(
        fixed_text,
        tuple(_finding(d, text) for d in report.applied),
        tuple(_finding(d, fixed_text) for d in report.diagnostics),
    )


def _analysed(
    text: str, path: Path, settings: Settings, *, fixing: bool, unsafe: bool = False
) -> FileReport:
    from amplint.runner import Mode, run_source  # the runner forks; loaded when asked

    path = Path(path)
    if path.suffix == NOTEBOOK_SUFFIX:  # the notebook's JSON: its cells are analysed
        try:
            source = source_from_bytes(path, text.encode("utf-8", "surrogatepass"))
        except SourceError as error:
            raise AnalysisError(str(error)) from None
    else:  # already text: a coding cookie has had its say
        source = SourceFile(path, text, "utf-8")
    report = run_source(source, settings, Mode(fixing, unsafe, previews=not fixing))
    if report.error is not None and not (fixing and report.error.startswith("not fixed")):
        raise AnalysisError(report.error)
    return report


def _finding(diagnostic: Diagnostic, text: str, preview: str | None = None) -> Finding:
    fix = diagnostic.fix
    suggested = None
    cell = diagnostic.span.cell
    if fix is not None and preview is not None and cell is None:
        suggested = SuggestedFix(
            fix.applicability is Applicability.SAFE, fix.message, edits_between(text, preview)
        )
    return Finding(diagnostic.code, diagnostic.message, _range(diagnostic.span), suggested, cell)


def _range(span: Span) -> Range:
    return Range(Location(span.line, span.column), Location(span.end_line, span.end_column))


def edits_between(before: str, after: str) -> tuple[TextEdit, ...]:
    """One edit turning `before` into `after`: the span between their common
    beginning and their common end."""
    start = 0
    limit = min(len(before), len(after))
    while start < limit and before[start] == after[start]:
        start += 1
    end = 0
    while end < limit - start and before[-1 - end] == after[-1 - end]:
        end += 1
    if start == len(before) == len(after):
        return ()
    replaced = Range(_location(before, start), _location(before, len(before) - end))
    return (TextEdit(replaced, after[start : len(after) - end]),)


def _line_starts(text: str) -> list[int]:
    return [0, *(match.end() for match in LINE_BREAK.finditer(text))]


def _location(text: str, offset: int) -> Location:
    starts = _line_starts(text[:offset])
    return Location(len(starts), offset - starts[-1] + 1)


def apply_edits(text: str, edits: Iterable[TextEdit]) -> str:
    """`text` with `edits` (which must not overlap) carried out."""
    starts = _line_starts(text)
    offsets = [
        (
            starts[edit.range.start.line - 1] + edit.range.start.column - 1,
            starts[edit.range.end.line - 1] + edit.range.end.column - 1,
            edit.new_text,
        )
        for edit in edits
    ]
    for first, last, new_text in sorted(offsets, reverse=True):
        text = text[:first] + new_text + text[last:]
    return text
