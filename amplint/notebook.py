"""A Jupyter notebook as one Python module, and back.

The code cells are joined into one module, the way the kernel runs them, so a
training loop whose model and optimizer were made cells earlier is analysed as
one program.  IPython syntax (``%magic``, ``!shell``, ``obj?``, cell magics)
is not Python: each such line is masked by a comment that names it, and put
back as it was when the module is split into cells again.  A comment line
before each code cell but the first marks where the cell starts.

Only the ``source`` of changed code cells is rewritten; the JSON is written
with the layout it was read with (indent, key order, escapes, final newline),
so outputs, execution counts, metadata and markdown cells come back
byte-identical.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

# Cell magics whose body is Python run by the kernel; any other cell magic
# (%%bash, %%writefile, %%html, ...) holds something else and is masked whole.
PYTHON_CELL_MAGICS = frozenset(
    {"time", "timeit", "capture", "prun", "debug", "profile", "memit", "cuda_sync"}
)

_CELL_MARK = "# <amplint: cell {}>"
_CELL_MARK_LINE = re.compile(r"^# <amplint: cell (\d+)>$")
_MAGIC_MARK = "# <amplint: ipython {}>"
_MAGIC_MARK_LINE = re.compile(r"^([ \t]*)# <amplint: ipython (\d+)>$")

_IPYTHON_LINE = re.compile(
    r"""^[ \t]*(
        [%!?]                                   # %magic, !shell, ?help
        | [\w.\[\]]+[ \t]*\?\??[ \t]*$          # obj? / obj??
        | [\w.,\[\]() \t]+=[ \t]*[%!]           # files = !ls, out = %sx ls
    )""",
    re.VERBOSE,
)


class NotebookError(Exception):
    """A notebook amplint cannot read, or a rewrite it cannot put back."""


@dataclass(frozen=True)
class CodeCell:
    number: int  # 1-based position among all the notebook's cells, as editors count them
    first_line: int  # the module line of the cell's first line
    line_count: int
    # Jupyter stores the last line without "\n"; the module needs one.
    newline_added: bool


@dataclass(frozen=True)
class Notebook:
    raw: str  # the JSON text as read
    code: str  # the code cells as one module
    cells: tuple[CodeCell, ...]
    masked: tuple[str, ...]  # the IPython lines the module's mask comments stand for

    def position(self, line: int) -> tuple[int, int]:
        """(cell number, line within the cell) of a module line."""
        for cell in reversed(self.cells):
            if line >= cell.first_line:
                return cell.number, min(line - cell.first_line + 1, max(cell.line_count, 1))
        first = self.cells[0]
        return first.number, 1

    def cell_lines(self, number: int) -> list[str]:
        """The source lines of a cell, IPython syntax included, as the user wrote them."""
        cell = next(cell for cell in self.cells if cell.number == number)
        lines = self.code.split("\n")[cell.first_line - 1 : cell.first_line - 1 + cell.line_count]
        return [self._unmask(line) for line in lines]

    def _unmask(self, line: str) -> str:
        match = _MAGIC_MARK_LINE.match(line)
        if match is None:
            return line
        return match.group(1) + self.masked[int(match.group(2))].lstrip(" \t")

    def cell_sources(self, code: str) -> dict[int, str]:
        """The source of each code cell in `code`, a rewrite of this module."""
        lines = code.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        chunks: list[list[str]] = [[]]
        numbers = [self.cells[0].number] if self.cells else []
        for line in lines:
            match = _CELL_MARK_LINE.match(line)
            if match is not None:
                numbers.append(int(match.group(1)))
                chunks.append([])
            else:
                chunks[-1].append(self._unmask(line))
        if numbers != [cell.number for cell in self.cells]:
            raise NotebookError("a fix moved code across notebook cells; not fixed")
        sources = {}
        for cell, chunk in zip(self.cells, chunks):
            text = "\n".join(chunk)
            sources[cell.number] = text if cell.newline_added else text + "\n"
        return sources

    def with_code(self, code: str) -> str:
        """The notebook's JSON with its code cells replaced by those of `code`.

        Raises NotebookError when the cells cannot be told apart any more, or
        when the JSON's layout is not one amplint can write back unchanged.
        """
        document = json.loads(self.raw)
        layout = _layout_of(self.raw, document)
        sources = self.cell_sources(code)
        for number, source in sources.items():
            cell = document["cells"][number - 1]
            if _joined(cell["source"]) == source:
                continue
            if isinstance(cell["source"], list):
                cell["source"] = source.splitlines(keepends=True)
            else:
                cell["source"] = source
        return _dump(document, layout)


def _joined(source: str | list[str]) -> str:
    return source if isinstance(source, str) else "".join(source)


@dataclass(frozen=True)
class _Layout:
    indent: int | None
    separators: tuple[str, str]
    ensure_ascii: bool
    final_newline: bool


def _dump(document: object, layout: _Layout) -> str:
    text = json.dumps(
        document,
        indent=layout.indent,
        separators=layout.separators,
        ensure_ascii=layout.ensure_ascii,
    )
    return text + "\n" if layout.final_newline else text


# (indent, separators) as notebook writers use them: Jupyter, nbformat and VS
# Code write indent=1; some tools indent 2 or 4; Colab exports write compact JSON.
_INDENTS = (
    (1, (",", ": ")),
    (2, (",", ": ")),
    (4, (",", ": ")),
    (None, (",", ":")),
    (None, (", ", ": ")),
)


def _layout_of(raw: str, document: object) -> _Layout:
    """The json.dumps settings that reproduce `raw`, whose parse is
    `document`, byte for byte (key order is kept as read)."""
    final_newline = raw.endswith("\n")
    for indent, separators in _INDENTS:
        for ensure_ascii in (False, True):
            layout = _Layout(indent, separators, ensure_ascii, final_newline)
            if _dump(document, layout) == raw:
                return layout
    raise NotebookError(
        "the notebook's JSON layout is not one amplint can reproduce byte for byte "
        "(save it from Jupyter once); not fixed"
    )


def read_notebook(raw: str) -> Notebook:
    """The notebook in `raw` (its JSON text) as one module."""
    try:
        document = json.loads(raw)
    except json.JSONDecodeError as error:
        raise NotebookError(
            f"not a notebook: invalid JSON at line {error.lineno} column {error.colno}"
        ) from None
    if not isinstance(document, dict) or not isinstance(document.get("cells"), list):
        raise NotebookError("not a notebook: no list of cells (nbformat 4 is supported)")
    if document.get("nbformat", 4) < 4:
        raise NotebookError(f"nbformat {document['nbformat']} is not supported; save as 4")
    language = document.get("metadata", {}).get("language_info", {}).get("name", "python")
    if language != "python":
        raise NotebookError(f"a {language} notebook, not Python")
    module_lines: list[str] = []
    masked: list[str] = []
    cells: list[CodeCell] = []
    for number, cell in enumerate(document["cells"], start=1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        if not isinstance(source, (str, list)):
            raise NotebookError(f"cell {number}: source is neither text nor a list of lines")
        text = _joined(source)
        lines = text.split("\n")
        newline_added = not text.endswith("\n")
        if not newline_added:
            lines.pop()
        if cells:
            module_lines.append(_CELL_MARK.format(number))
        cells.append(CodeCell(number, len(module_lines) + 1, len(lines), newline_added))
        module_lines += _masked_lines(lines, masked)
    code = "\n".join(module_lines) + "\n" if module_lines else ""
    return Notebook(raw, code, tuple(cells), tuple(masked))


def _masked_lines(lines: list[str], masked: list[str]) -> list[str]:
    """`lines` with each IPython line replaced by a comment that stands for it."""

    def mask(line: str) -> str:
        masked.append(line)
        indent = line[: len(line) - len(line.lstrip(" \t"))]
        return indent + _MAGIC_MARK.format(len(masked) - 1)

    first = lines[0].strip() if lines else ""
    if first.startswith("%%"):
        name = first[2:].split(maxsplit=1)[0] if len(first) > 2 else ""
        if name not in PYTHON_CELL_MAGICS:
            return [mask(line) for line in lines]  # %%bash, %%writefile: not Python
        return [mask(lines[0]), *_masked_lines(lines[1:], masked)]
    result = []
    continued = False
    for line in lines:
        if continued or _IPYTHON_LINE.match(line):
            result.append(mask(line))
            continued = line.endswith("\\")
        else:
            result.append(line)
    return result
