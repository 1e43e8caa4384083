"""Text for people: one row per finding (``concise``), the rows with the code
and the fix under them (``full``), counts per rule (``--statistics``), the
summary line, and the diffs `fix` shows.

Rows are styled with click; the command line decides whether the styles reach
the terminal (``NO_COLOR``, not a terminal: they are dropped).
"""

from __future__ import annotations

import difflib
from collections import Counter
from pathlib import Path
from typing import Iterable

import click

from amplint import api
from amplint.catalog import load_catalog
from amplint.diagnostics import source_lines
from amplint.report import Finding, location, printable

SAFE_FIX_MARKER = "[*]"
# Lines of code `full` shows for one finding: its first lines, with one before.
SNIPPET_LINES = 6


def rule_name(code: str) -> str:
    doc = load_catalog().get(code)
    return doc.name if doc is not None else ""


def text_row(finding: Finding) -> str:
    marker = " " + click.style(SAFE_FIX_MARKER, fg="cyan") if finding.safe_fix else ""
    return (
        f"{click.style(location(finding), bold=True)}: "
        f"{click.style(finding.code, fg='red', bold=True)}{marker} {finding.message}"
    )


def concise(findings: Iterable[Finding]) -> list[str]:
    return [text_row(finding) for finding in findings]


def full(findings: Iterable[Finding]) -> list[str]:
    """Each row, the code it points at with the span underlined, and the fix
    as the diff it makes on its own."""
    lines: list[str] = []
    # A fix several findings share (AMP203 migrates a module at once) is shown
    # under the first of them.
    shown: dict[tuple[Path, tuple[api.TextEdit, ...]], str] = {}
    for finding in findings:
        lines.append(text_row(finding))
        lines += _snippet(finding)
        fix = finding.fix
        if fix is not None:
            label = "fix" if fix.safe else "unsafe fix (--unsafe-fixes)"
            lines.append(f"  = {click.style(label, fg='cyan')}: {fix.message}")
            key = (finding.path, fix.edits or ())
            if fix.edits is not None and key in shown:
                lines.append(f"    (the diff shown at {shown[key]})")
            else:
                if fix.edits is not None:
                    shown[key] = location(finding)
                lines += ["    " + line for line in _fix_diff(finding)]
        lines.append("")
    return lines


def _source_lines(finding: Finding) -> list[str]:
    source = finding.source
    if source is None:
        return []
    cell = finding.cell
    if source.notebook is not None and cell is not None:
        return source.notebook.cell_lines(cell)
    return source_lines(source.code)


def _snippet(finding: Finding) -> list[str]:
    lines = _source_lines(finding)
    start, end = finding.range.start, finding.range.end
    if not lines or start.line > len(lines):
        return []
    first = max(1, start.line - 1)
    last = min(len(lines), end.line, first + SNIPPET_LINES - 1)
    width = len(str(last))
    gutter = " " * width
    out = [f"  {gutter} |"]
    for number in range(first, last + 1):
        line = lines[number - 1]
        out.append(f"  {number:>{width}} | {shown_code(line)}")
        if number == start.line:
            stop = end.column if end.line == start.line else len(line) + 1
            before = len(shown_code(line[: start.column - 1]))
            carets = "^" * max(1, len(shown_code(line[start.column - 1 : stop - 1])))
            out.append(f"  {gutter} | {' ' * before}{click.style(carets, fg='red')}")
    return out


def shown_code(text: str) -> str:
    """A line of code as a terminal may show it: a tab as four spaces (carets
    under it count columns), a control character as its Unicode picture (one
    column: ESC is ␛), a format or separator character escaped (`\\u202e`).
    Printed raw, an escape sequence in a string would drive the terminal and
    a bidirectional override reorder the line the reader sees."""
    if text.isprintable() and "\t" not in text:
        return text
    return "".join(_SHOWN.get(char) or printable(char) for char in text)


_SHOWN = {chr(code): chr(0x2400 + code) for code in range(32)} | {"\t": "    ", "\x7f": "\u2421"}


def _fix_diff(finding: Finding) -> list[str]:
    """The fix's edits as a diff (of each cell they change, in a notebook)."""
    source, edits = finding.source, finding.fix.edits if finding.fix is not None else None
    if source is None or not edits:
        return []
    name = printable(finding.path.as_posix())
    notebook = source.notebook
    if notebook is None:
        return _diff_lines(name, source.code, api.apply_edits(source.code, edits))
    before = notebook.cell_sources(notebook.code)
    lines: list[str] = []
    for number in sorted({edit.cell for edit in edits if edit.cell is not None}):
        after = api.apply_edits(before[number], [e for e in edits if e.cell == number])
        lines += _diff_lines(f"{name}:cell {number}", before[number], after)
    return lines


def _diff_lines(name: str, before: str, after: str) -> list[str]:
    diff = difflib.unified_diff(
        source_lines(before),
        source_lines(after),
        fromfile=name,
        tofile=name,
        lineterm="",
        n=1,
    )
    styled = []
    for number, line in enumerate(diff):
        if number < 2:  # the file names, printable already
            styled.append(click.style(line, bold=True))
            continue
        line = shown_code(line)  # shown, not applied: `fix` prints the patch
        if line.startswith("+"):
            styled.append(click.style(line, fg="green"))
        elif line.startswith("-"):
            styled.append(click.style(line, fg="red"))
        else:
            styled.append(line)
    return styled


def statistics(findings: list[Finding]) -> list[str]:
    """One line per code, most frequent first: count, code, [*] when fixable, name."""
    lines = []
    for row in statistics_rows(findings):
        marker = SAFE_FIX_MARKER if row["fixable"] else " " * len(SAFE_FIX_MARKER)
        lines.append(f"{row['count']:>5}  {row['code']}  {marker} {row['name']}")
    return lines


def statistics_rows(findings: list[Finding]) -> list[dict]:
    counts = Counter(finding.code for finding in findings)
    fixable = {finding.code for finding in findings if finding.safe_fix}
    return [
        {"code": code, "name": rule_name(code), "count": count, "fixable": code in fixable}
        for code, count in sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    ]


def summary(findings: list[Finding]) -> str:
    if not findings:
        return "All checks passed."
    safe = sum(1 for finding in findings if finding.safe_fix)
    unsafe = sum(1 for finding in findings if finding.unsafe_fix)
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
    name = printable(path.as_posix())
    return name if path.is_absolute() else f"{side}/{name}"


def unified_diff(path: Path, before: str, after: str) -> str:
    return "".join(
        difflib.unified_diff(
            source_lines(before, keepends=True),
            source_lines(after, keepends=True),
            fromfile=_diff_name("a", path),
            tofile=_diff_name("b", path),
        )
    )


def styled_diff(diff: str) -> str:
    """A unified diff in git's colours (click drops them where styles are off)."""
    styled = []
    for line in source_lines(diff, keepends=True):
        body = line.rstrip("\r\n")
        ending = line[len(body) :]
        if body.startswith(("---", "+++")):
            body = click.style(body, bold=True)
        elif body.startswith("@@"):
            body = click.style(body, fg="cyan")
        elif body.startswith("+"):
            body = click.style(body, fg="green")
        elif body.startswith("-"):
            body = click.style(body, fg="red")
        styled.append(body + ending)
    return "".join(styled)


def applied_lines(path: Path, applied: Iterable[api.Finding]) -> list[str]:
    """``path: fixed N`` and one indented line per kind of fix carried out."""
    applied = list(applied)
    counts = Counter((d.code, d.fix.message) for d in applied if d.fix is not None)
    lines = [f"{printable(str(path))}: fixed {len(applied)}"]
    for (code, message), count in counts.items():
        times = f" (x{count})" if count > 1 else ""
        lines.append(f"  {code} {message}{times}")
    return lines
