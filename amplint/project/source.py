"""A project module's source, and what can be read from it without parsing it whole."""

from __future__ import annotations

import ast
import codecs
import hashlib
import re
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from amplint.diagnostics import source_lines

if TYPE_CHECKING:
    from amplint.notebook import Notebook

Definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
# Where a module read from text, not from a file of a project, stands in a program.
TEXT_PATH = Path("<text>")


@dataclass
class ModuleSource:
    """A project module as the index read it: its text, and its `ast` tree on
    first use (None where it does not parse)."""

    path: Path
    name: str  # dotted, relative to the project root
    text: str
    bom: bool = False  # the file starts with a UTF-8 byte order mark, which `text` lacks
    # A notebook's code cells are read as one module (`text`); this maps its
    # lines back to cells.  None for a Python file.
    notebook: Notebook | None = field(default=None, repr=False)
    _digest: str | None = field(default=None, repr=False)
    _tree: ast.Module | None = field(default=None, repr=False)
    _parsed: bool = False
    _imports: list[ast.Import | ast.ImportFrom] | None = field(default=None, repr=False)

    @property
    def digest(self) -> str:
        """The sha256 of the file's bytes, for the cache (ProjectView.consulted),
        made when first asked: most modules a question reads are never asked."""
        if self._digest is None:
            data = self.text.encode("utf-8")  # UTF-8 spells each text one way
            self._digest = hashlib.sha256(codecs.BOM_UTF8 + data if self.bom else data).hexdigest()
        return self._digest

    @property
    def tree(self) -> ast.Module | None:
        if not self._parsed:
            self._parsed = True
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    self._tree = ast.parse(self.text)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                self._tree = None
        return self._tree

    @property
    def imports(self) -> list[ast.Import | ast.ImportFrom]:
        """Its import statements, at any depth: found in one walk of its tree,
        which each question about what it imports would otherwise repeat."""
        if self._imports is None:
            tree = self.tree
            self._imports = [
                node
                for node in (ast.walk(tree) if tree is not None else ())
                if isinstance(node, (ast.Import, ast.ImportFrom))
            ]
        return self._imports


def may_import(text: str, name: str) -> bool:
    """Whether an import statement in `text` may spell `name`, a module's last
    name (`import pkg.name`, `from .name import f`, `from pkg import (a,
    name)`): a text test before parsing, never False where one does.  A module
    that mentions the name only elsewhere (a path in a string, a function of
    the same name) is not parsed: `train.py` defines `train`."""
    return name in text and any(
        pattern.search(text) is not None for pattern in _import_patterns(name)
    )


@lru_cache(maxsize=256)
def _import_patterns(name: str) -> tuple[re.Pattern[str], ...]:
    word = rf"\b{re.escape(name)}\b"
    # Each starts with its keyword, so that the search looks for that literal
    # first: a pattern starting with an alternation or a `\b` tries every
    # position of the text, ten times slower.
    logical_line = r"(?:[^\n;]|\\\r?\n)*?"  # up to the line's end, through `\` continuations
    return (
        re.compile(rf"import\s{logical_line}{word}"),  # import a.name; from pkg import name
        re.compile(rf"from\s{logical_line}{word}"),  # from .name import f
        # A comment runs to its line's end, where its `)` does not close the list.
        re.compile(rf"import\s*\((?:[^)#]|#[^\n]*\n)*?{word}"),  # from pkg import (a,\n name)
    )


_DEFINITION = re.compile(r"(?:async\s+)?def\s+(\w+)|class\s+(\w+)")
_TRIPLE_QUOTE = re.compile(r"\"\"\"|\'\'\'")


def definitions_mentioning(text: str, words: frozenset[str]) -> dict[str, Definition] | None:
    """The top-level defs and classes of `text` that mention one of `words`,
    or call by name one that does, each parsed alone with the module's line
    numbers: a library module that defines `binary_cross_entropy` among a
    thousand other functions is not parsed whole.  Lines inside a string
    spanning lines never start a block.  None where the text does not split
    into blocks that parse alone; the caller parses the module then."""
    blocks: dict[str, tuple[int, str]] = {}
    start: int | None = None
    lines: list[str] = []
    name: str | None = None
    string: str | None = None  # the triple quote a string spanning lines opened
    for number, line in enumerate([*source_lines(text, keepends=True), "end\n"], 1):
        inside = string is not None
        for quote in _TRIPLE_QUOTE.findall(line):
            string = quote if string is None else None if quote == string else string
        if inside or not line.strip() or line[0] in " \t#)]}":
            if start is not None:
                lines.append(line)
            continue
        match = _DEFINITION.match(line)
        if start is not None and name is None and (line.startswith("@") or match):
            lines.append(line)  # decorators, then their def
        else:
            if name is not None:
                blocks[name] = (start, "".join(lines))
            start, lines, name = None, [], None
            if line.startswith("@") or match:
                start, lines = number, [line]
        if match and name is None and start is not None:
            name = match.group(1) or match.group(2)
    if string is not None:
        return None  # quotes this count cannot pair
    wanted = {name for name, (_, block) in blocks.items() if any(w in block for w in words)}
    while True:  # and the defs calling those, as far as the calls go
        callers = {
            name
            for name, (_, block) in blocks.items()
            if name not in wanted
            and any(re.search(rf"\b{re.escape(w)}\s*\(", block) for w in wanted)
        }
        if not callers:
            break
        wanted |= callers
    found = {}
    for name in wanted:
        first, block = blocks[name]
        try:
            tree = ast.parse(block)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
        if len(tree.body) != 1 or getattr(tree.body[0], "name", None) != name:
            return None
        found[name] = ast.increment_lineno(tree, first - 1).body[0]
    return found


def last_name(node: ast.AST) -> str | None:
    """`BCELoss` of `nn.BCELoss`, of `torch.nn.BCELoss` or of `BCELoss`."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def dotted_expression(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted_expression(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def top_level_definitions(module: ModuleSource, words: frozenset[str]) -> dict[str, Definition]:
    """The top-level defs and classes of `module` that mention one of `words`
    or call one that does (see definitions_mentioning); every one of them
    where its text does not split into blocks."""
    found = definitions_mentioning(module.text, words)
    if found is None and module.tree is not None:
        found = {
            node.name: node
            for node in module.tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        }
    return found or {}
