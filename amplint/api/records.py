"""What the API answers with: findings, their fixes as text edits, and a run's
files, as plain frozen records.  The command line's reports are made from
these records (amplint/report), so a program reading the API and a person
reading `check` see the same things."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from amplint.diagnostics import LINE_BREAK, Applicability, Diagnostic, Span
from amplint.files import SourceFile


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
    """Replace the text in `range` by `new_text`; in a notebook, in the lines
    of `cell` (numbered as `Finding.cell`)."""

    range: Range
    new_text: str
    cell: int | None = None


@dataclass(frozen=True)
class SuggestedFix:
    """A finding's fix.  `safe` fixes keep behaviour (`fix` applies them); the
    others may change numerics (`fix --unsafe-fixes`).  `edits` are the fix
    alone as text edits on the source it was found in, None where they were
    not asked for (`check_paths(..., edits=False)`).  `other_files` are the
    files the same change rewrites with this one (an apex.amp migration spans
    a program): `fix` writes them all or none."""

    safe: bool
    message: str
    edits: tuple[TextEdit, ...] | None = None
    other_files: tuple[Path, ...] = ()


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


@dataclass(frozen=True)
class FileResult:
    """One file of a run: its findings, or why it was not checked (`error`).
    `source` is the file as it was read, None where it could not be."""

    path: Path
    findings: tuple[Finding, ...] = ()
    error: str | None = None
    source: SourceFile | None = None


@dataclass(frozen=True)
class FixedFile:
    """One file of a fixing run: what was fixed and what remains (`fixed`
    empty where nothing changed), `fixed_text` the file's new text (None when
    unchanged), and `error` why a file was not checked, fixed or written; a
    fix not written leaves its findings in `remaining`."""

    path: Path
    fixed: tuple[Finding, ...] = ()
    remaining: tuple[Finding, ...] = ()
    fixed_text: str | None = None
    error: str | None = None
    source: SourceFile | None = None


@dataclass(frozen=True)
class Run:
    """What a run over paths gives: a result per file found, sorted by path,
    and what is worth a word but is no file's result (a directory with nothing
    to check, a file not read, the temporary files of an interrupted fix)."""

    files: tuple[FileResult, ...]
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class FixRun:
    """`Run` for the fixes: a result per file found, sorted by path."""

    files: tuple[FixedFile, ...]
    warnings: tuple[str, ...] = ()


def finding_of(diagnostic: Diagnostic, source: SourceFile | None, preview: str | None) -> Finding:
    """The record of a diagnostic on `source`, with the edits of its fix where
    `preview` (the code that fix alone gives) is known."""
    fix = diagnostic.fix
    suggested = None
    if fix is not None:
        edits = None
        if preview is not None and source is not None:
            edits = _preview_edits(source, preview)
        suggested = SuggestedFix(
            fix.applicability is Applicability.SAFE,
            fix.message,
            edits,
            tuple(Path(partner) for partner in fix.partners),
        )
    return Finding(
        diagnostic.code,
        diagnostic.message,
        _range(diagnostic.span),
        suggested,
        diagnostic.span.cell,
    )


def _preview_edits(source: SourceFile, preview: str) -> tuple[TextEdit, ...] | None:
    notebook = source.notebook
    if notebook is None:
        return edits_between(source.text, preview)
    from amplint.notebook import NotebookError  # loaded already: the source is a notebook

    try:
        before, after = notebook.cell_sources(notebook.code), notebook.cell_sources(preview)
    except NotebookError:  # the fix moves code across cells: `fix` declines it
        return None
    return tuple(
        TextEdit(edit.range, edit.new_text, number)
        for number, text in after.items()
        if before.get(number) != text
        for edit in edits_between(before.get(number, ""), text)
    )


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
    """`text` with `edits` (which must not overlap, and name no cell) carried out."""
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
