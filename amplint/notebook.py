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
from functools import cached_property

# Cell magics whose body is Python run by the kernel; any other cell magic
# (%%bash, %%writefile, %%html, ...) holds something else and is masked whole.
PYTHON_CELL_MAGICS = frozenset(
    {"time", "timeit", "capture", "prun", "debug", "profile", "memit", "cuda_sync"}
)

# The comments that stand for cell starts and IPython lines name a tag that
# occurs nowhere in the notebook's cells ("amplint", else "amplint-1", ...):
# a cell whose text spells a mark cannot pass for one.
_TAG = "amplint"

# Matched on a line without its indentation: `[ \t]*` before the alternatives,
# which also take spaces, backtracked quadratically on long indents.
_IPYTHON_LINE = re.compile(
    r"""(
        [%!?]                                   # %magic, !shell, ?help
        | [\w.\[\]]+[ \t]*\?\??[ \t]*$          # obj? / obj??
        | [\w.,\[\]() \t]+=[ \t]*[%!]           # files = !ls, out = %sx ls
    )""",
    re.VERBOSE,
)


@dataclass(frozen=True)
class _Marks:
    """The mask comments of one notebook, which name its tag."""

    tag: str

    def cell(self, number: int) -> str:
        return f"# <{self.tag}: cell {number}>"

    def magic(self, index: int) -> str:
        return f"# <{self.tag}: ipython {index}>"

    @cached_property
    def cell_line(self) -> re.Pattern[str]:
        return re.compile(rf"# <{re.escape(self.tag)}: cell (\d+)>")

    @cached_property
    def magic_line(self) -> re.Pattern[str]:
        return re.compile(rf"([ \t]*)# <{re.escape(self.tag)}: ipython (\d+)>")


def _unused_tag(sources: list[str]) -> str:
    tag, attempt = _TAG, 0
    while any(f"<{tag}:" in source for source in sources):
        attempt += 1
        tag = f"{_TAG}-{attempt}"
    return tag


class NotebookError(Exception):
    """A notebook amplint cannot read, or a rewrite it cannot put back."""


@dataclass(frozen=True)
class CodeCell:
    """Where a notebook's code cell stands in the module made of its cells."""

    number: int  # 1-based position among all the notebook's cells, as editors count them
    first_line: int  # the module line of the cell's first line
    line_count: int
    # Jupyter stores the last line without "\n"; the module needs one.
    newline_added: bool


@dataclass(frozen=True)
class Notebook:
    """A Jupyter notebook read as one Python module, and the way back."""

    raw: str  # the JSON text as read
    code: str  # the code cells as one module
    cells: tuple[CodeCell, ...]
    masked: tuple[str, ...]  # the IPython lines the module's mask comments stand for
    marks: _Marks = _Marks(_TAG)  # the mask comments, which name a tag no cell spells

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
        match = self.marks.magic_line.fullmatch(line)
        if match is None or int(match.group(2)) >= len(self.masked):
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
            match = self.marks.cell_line.fullmatch(line)
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
    """How the notebook's JSON was written, so that it is written back the same way."""

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
    document = _load(raw)
    code_cells = _code_cells(document)
    marks = _Marks(_unused_tag([text for _, text in code_cells]))
    module_lines: list[str] = []
    masked: list[str] = []
    cells: list[CodeCell] = []
    for number, text in code_cells:
        lines = text.split("\n")
        newline_added = not text.endswith("\n")
        if not newline_added:
            lines.pop()
        if cells:
            module_lines.append(marks.cell(number))
        cells.append(CodeCell(number, len(module_lines) + 1, len(lines), newline_added))
        module_lines += _masked_lines(lines, masked, marks)
    code = "\n".join(module_lines) + "\n" if module_lines else ""
    return Notebook(raw, code, tuple(cells), tuple(masked), marks)


def _load(raw: str) -> dict:
    """The notebook's JSON document, checked to be the nbformat 4 shape
    amplint reads: any other value anywhere is a NotebookError, not a crash."""
    try:
        document = json.loads(raw)
    except json.JSONDecodeError as error:
        raise NotebookError(
            f"not a notebook: invalid JSON at line {error.lineno} column {error.colno}"
        ) from None
    except RecursionError:
        raise NotebookError("not a notebook: JSON nested too deeply to read") from None
    except ValueError:  # an integer of more digits than Python converts (4,300)
        raise NotebookError("not a notebook: a number of more digits than Python reads") from None
    if not isinstance(document, dict) or not isinstance(document.get("cells"), list):
        raise NotebookError("not a notebook: no list of cells (nbformat 4 is supported)")
    nbformat = document.get("nbformat", 4)
    if not isinstance(nbformat, int) or isinstance(nbformat, bool):
        raise NotebookError(f"not a notebook: nbformat is {_json_type(nbformat)}, not a number")
    if nbformat < 4:
        raise NotebookError(f"nbformat {nbformat} is not supported; save as 4")
    metadata = document.get("metadata", {})
    if not isinstance(metadata, dict):
        raise NotebookError(f"not a notebook: metadata is {_json_type(metadata)}, not an object")
    language_info = metadata.get("language_info", {})
    if not isinstance(language_info, dict):
        raise NotebookError(
            f"not a notebook: language_info is {_json_type(language_info)}, not an object"
        )
    language = language_info.get("name", "python")
    if not isinstance(language, str):
        raise NotebookError(f"not a notebook: the language's name is {_json_type(language)}")
    if language != "python":
        raise NotebookError(f"a {language} notebook, not Python")
    return document


def _code_cells(document: dict) -> list[tuple[int, str]]:
    """(number among all cells, source) of each code cell."""
    code_cells = []
    for number, cell in enumerate(document["cells"], start=1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        if "source" not in cell:
            raise NotebookError(f"cell {number}: a code cell without source")
        source = cell["source"]
        if isinstance(source, list) and all(isinstance(line, str) for line in source):
            code_cells.append((number, "".join(source)))
        elif isinstance(source, str):
            code_cells.append((number, source))
        else:
            raise NotebookError(
                f"cell {number}: source is {_json_type(source)}, "
                "neither text nor a list of lines of text"
            )
    return code_cells


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, list):
        return "a list" + ("" if all(isinstance(item, str) for item in value) else " of non-text")
    return {bool: "a boolean", int: "a number", float: "a number", str: "text", dict: "an object"}[
        type(value)
    ]


def _masked_lines(lines: list[str], masked: list[str], marks: _Marks) -> list[str]:
    """`lines` with each IPython line replaced by a comment that stands for it."""

    def mask(line: str) -> str:
        masked.append(line)
        indent = line[: len(line) - len(line.lstrip(" \t"))]
        return indent + marks.magic(len(masked) - 1)

    first = lines[0].strip() if lines else ""
    if first.startswith("%%"):
        name = first[2:].split(maxsplit=1)[0] if len(first) > 2 else ""
        if name not in PYTHON_CELL_MAGICS:
            return [mask(line) for line in lines]  # %%bash, %%writefile: not Python
        return [mask(lines[0]), *_masked_lines(lines[1:], masked, marks)]
    result = []
    continued = False
    for line in lines:
        if continued or _IPYTHON_LINE.match(line.lstrip(" \t")):
            result.append(mask(line))
            continued = line.endswith("\\")
        else:
            result.append(line)
    return result
