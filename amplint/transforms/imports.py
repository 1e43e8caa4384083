"""Module passes that keep imports right after fixes rewrote the code using them.

`tidy_deprecated_amp_imports` drops the torch.cuda.amp / torch.cpu.amp names that
no code refers to any more and binds ``torch`` where a rewrite now needs it;
`tidy_apex_imports` drops the apex names the AMP203/AMP204 migrations left unused,
with the ``try: ... except ImportError:`` that guarded nothing else;
`ensure_functools_imported` adds ``import functools`` for ``functools.partial``.
"""

from __future__ import annotations

from typing import Callable, Sequence

import libcst as cst

from amplint.analysis.apex import is_apex
from amplint.analysis.deprecated_amp import DEPRECATED_MODULES
from amplint.analysis.imports import STAR_EXPORTS, Binding, ImportMap, dotted_name, module_name
from amplint.analysis.scopes import Scope, ScopedVisitor
from amplint.transforms.edits import ancestor_ids


class _ReferencedNames(ScopedVisitor):
    """Names each scope (and the scopes nested in it) reads or writes."""

    def __init__(self) -> None:
        super().__init__()
        self.by_scope: dict[Scope, set[str]] = {}

    def enter_scope(self, scope: Scope) -> None:
        self.by_scope[scope] = set()

    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        self.walk(node.value)  # `x.name` reads x, not name
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        self.walk(node.value)  # keyword= is not a name read
        return False

    def visit_Name(self, node: cst.Name) -> None:
        for scope in self.scopes:
            self.by_scope[scope].add(node.value)


def _is_deprecated_binding(binding: Binding) -> bool:
    # `import torch.cuda.amp` binds `torch` itself (target "torch") and stays.
    return any(
        binding.target == module or binding.target.startswith(module + ".")
        for module in DEPRECATED_MODULES
    )


def _import_torch_line(leading_lines: Sequence[cst.EmptyLine] = ()) -> cst.SimpleStatementLine:
    return cst.SimpleStatementLine(
        body=[cst.Import(names=[cst.ImportAlias(name=cst.Name("torch"))])],
        leading_lines=leading_lines,
    )


class _UnusedImportTidier(cst.CSTTransformer):
    def __init__(
        self, unused: dict[int, set[str]], add_torch_before: set[int], entered: set[int]
    ) -> None:
        self.unused = unused  # import statement id -> local names no longer referenced
        self.add_torch_before = add_torch_before  # statement ids
        self.entered = entered  # ids of the nodes that hold those statements
        self.vanished: dict[int, cst.SimpleStatementLine] = {}

    def on_visit(self, node: cst.CSTNode) -> bool:
        # Only the way to the imports is rebuilt; the leave hooks still run
        # on every node they reach, and change nothing where no import went.
        return id(node) in self.entered

    def _without_unused(self, statement: cst.BaseSmallStatement, unused: set[str]):
        if isinstance(statement, cst.ImportFrom) and isinstance(statement.names, cst.ImportStar):
            # A star of a module whose exports are known goes when none is used.
            exported = STAR_EXPORTS.get(module_name(statement.module) or "", ())
            return None if exported and set(exported) <= unused else statement
        if not isinstance(statement, (cst.Import, cst.ImportFrom)):
            return statement
        kept = [alias for alias in statement.names if local_name(alias) not in unused]
        if not kept:
            return None
        if len(kept) < len(statement.names):
            # The new last name takes the old last one's comma: a trailing comma
            # (and the line break before a closing parenthesis) stays.
            kept[-1] = kept[-1].with_changes(comma=statement.names[-1].comma)
            return statement.with_changes(names=kept)
        return statement

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ):
        if not any(id(statement) in self.unused for statement in original_node.body):
            return updated_node
        add_torch = any(id(statement) in self.add_torch_before for statement in original_node.body)
        body = []
        for original, updated in zip(original_node.body, updated_node.body):
            kept = self._without_unused(updated, self.unused.get(id(original), set()))
            if kept is not None:
                body.append(kept)
        if body:
            body[-1] = body[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
        if add_torch:
            torch_line = _import_torch_line(original_node.leading_lines)
            if not body:
                return torch_line
            return cst.FlattenSentinel(
                [torch_line, updated_node.with_changes(body=body, leading_lines=())]
            )
        if body:
            return updated_node.with_changes(body=body)
        # Removed: leave a `pass` placeholder that the enclosing block drops,
        # handing its comment lines to the next statement.
        placeholder = updated_node.with_changes(body=[cst.Pass()])
        self.vanished[id(placeholder)] = placeholder
        return placeholder

    def _drop_placeholders(
        self, body: Sequence[cst.BaseStatement], opens_block: bool
    ) -> list[cst.BaseStatement]:
        """Drop removed lines, handing their comments to the next statement.

        When a removed line opened an indented block (or the file), the blank
        lines that separated it from the next statement go too: black puts no
        blank line right after `if ...:` or `def ...:`, nor at a file's top.
        """
        result: list[cst.BaseStatement] = []
        carried: list[cst.EmptyLine] = []
        removed_first = False
        for index, statement in enumerate(body):
            if id(statement) in self.vanished:
                if index == len(body) - 1 and not result:
                    result.append(statement)  # the block needs a statement: keep `pass`
                else:
                    carried += [line for line in statement.leading_lines if line.comment]
                    removed_first = removed_first or not result
                continue
            if carried or removed_first:
                leading = list(statement.leading_lines)
                if opens_block and removed_first and not result:
                    while leading and leading[0].comment is None:
                        leading.pop(0)
                statement = statement.with_changes(leading_lines=[*carried, *leading])
                carried = []
            result.append(statement)
        return result

    def leave_Try(self, original_node: cst.Try, updated_node: cst.Try):
        """`try: from apex import amp / except ImportError: raise ...` guarded the
        import alone: once the import goes, so does the try."""
        if not all(id(statement) in self.vanished for statement in updated_node.body.body):
            return updated_node
        if updated_node.orelse is not None or updated_node.finalbody is not None:
            return updated_node
        if not all(
            handler.type is not None and dotted_name(handler.type) in IMPORT_ERRORS
            for handler in updated_node.handlers
        ):
            return updated_node
        placeholder = cst.SimpleStatementLine(
            body=[cst.Pass()], leading_lines=updated_node.leading_lines
        )
        self.vanished[id(placeholder)] = placeholder
        return placeholder

    def leave_IndentedBlock(
        self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock
    ):
        body = self._drop_placeholders(updated_node.body, opens_block=True)
        return updated_node.with_changes(body=body)

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module):
        # A file that began with the removed line begins with the next
        # statement, not with the blank lines that followed it.
        starts_file = not updated_node.header
        body = self._drop_placeholders(updated_node.body, opens_block=starts_file)
        return updated_node.with_changes(body=body)


def local_name(alias: cst.ImportAlias) -> str | None:
    """The name an import binds: `amp` of `from apex import amp`, `torch` of
    `import torch.nn`, `F` of `... as F`."""
    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
        return alias.asname.name.value
    name = dotted_name(alias.name)
    return name.split(".", 1)[0] if name else None


IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError"}


def referenced_names(module: cst.Module) -> dict[Scope, set[str]]:
    """The names each scope (and the scopes nested in it) reads or writes,
    imports left out."""
    referenced = _ReferencedNames()
    referenced.walk(module)
    return referenced.by_scope


def tidy_apex_imports(module: cst.Module) -> cst.Module:
    return _tidy_unused_imports(module, lambda binding: is_apex(binding.target))


def tidy_deprecated_amp_imports(module: cst.Module) -> cst.Module:
    return _tidy_unused_imports(module, _is_deprecated_binding)


def _tidy_unused_imports(module: cst.Module, tidied: Callable[[Binding], bool]) -> cst.Module:
    """Drop the names bound by imports `tidied` selects that no code uses any more."""
    imports = ImportMap.of(module)
    referenced = _ReferencedNames()
    referenced.walk(module)
    unused: dict[int, set[str]] = {}
    add_torch_before: set[int] = set()
    scopes_given_torch: set[int] = set()
    for binding in imports.statements:
        if not tidied(binding):
            continue
        scope_names = referenced.by_scope.get(binding.scope, set())
        if binding.name not in scope_names:
            unused.setdefault(id(binding.statement), set()).add(binding.name)
            needs_torch = "torch" in scope_names and imports.binding("torch", binding.scope) is None
            if needs_torch and id(binding.scope) not in scopes_given_torch:
                scopes_given_torch.add(id(binding.scope))
                add_torch_before.add(id(binding.statement))
    if not unused:
        return module
    entered = ancestor_ids(module, set(unused))
    return module.visit(_UnusedImportTidier(unused, add_torch_before, entered))


def _is_future_import(statement: cst.BaseStatement) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and any(
        isinstance(small, cst.ImportFrom)
        and isinstance(small.module, cst.Name)
        and small.module.value == "__future__"
        for small in statement.body
    )


def is_docstring(statement: cst.BaseStatement) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _is_import(statement: cst.BaseStatement) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and all(
        isinstance(small, (cst.Import, cst.ImportFrom)) for small in statement.body
    )


def _needs_import(module: cst.Module, name: str) -> bool:
    """Whether code at module level uses `name` and nothing there binds it."""
    referenced = _ReferencedNames()
    referenced.walk(module)
    if name not in referenced.by_scope.get(module, set()):
        return False
    return ImportMap.of(module).binding(name, module) is None


def _first_import_position(body: list[cst.BaseStatement]) -> int:
    """Where a module's imports may start: after its docstring and `__future__` imports."""
    position = 0
    while position < len(body) and (
        (position == 0 and is_docstring(body[position])) or _is_future_import(body[position])
    ):
        position += 1
    return position


def ensure_module_import(module: cst.Module, name: str) -> cst.Module:
    """Add ``import name`` at the top of the module's imports if code uses `name`
    and nothing at module level binds it."""
    if not _needs_import(module, name):
        return module
    body = list(module.body)
    position = _first_import_position(body)
    new_line = cst.SimpleStatementLine(
        body=[cst.Import(names=[cst.ImportAlias(name=cst.Name(name))])]
    )
    if position < len(body) and _is_import(body[position]):
        # Join the import block: take over its leading comments, it keeps none.
        first = body[position]
        new_line = new_line.with_changes(leading_lines=first.leading_lines)
        body[position] = first.with_changes(leading_lines=())
    elif position > 0:
        new_line = new_line.with_changes(leading_lines=[cst.EmptyLine()])
    body.insert(position, new_line)
    return module.with_changes(body=body)


def ensure_from_import(module: cst.Module, source: str, name: str) -> cst.Module:
    """Add ``from source import name`` if code uses `name` and nothing at module
    level binds it: among the module's leading imports of the same package, in
    sorted order as isort keeps them, else after its last leading import."""
    if not _needs_import(module, name):
        return module
    body = list(module.body)
    position = _first_import_position(body)
    package = source.split(".", 1)[0]
    leading, after_same_package = [], None
    for index in range(position, len(body)):
        if not _is_import(body[index]):
            break
        leading.append(index)
        imported = _imported_module(body[index])
        if imported.split(".", 1)[0] == package and imported <= source:
            after_same_package = index
    new_line = cst.parse_statement(f"from {source} import {name}\n")
    if after_same_package is not None:
        body.insert(after_same_package + 1, new_line)
    elif leading:
        body.insert(leading[-1] + 1, new_line)
    elif position > 0:  # after a docstring: set apart from it
        body.insert(position, new_line.with_changes(leading_lines=[cst.EmptyLine()]))
    else:
        body.insert(0, new_line)
    return module.with_changes(body=body)


def _imported_module(statement: cst.SimpleStatementLine) -> str:
    """The module the first import of an import line names."""
    first = statement.body[0]
    if isinstance(first, cst.ImportFrom):
        return "." * len(first.relative) + (module_name(first.module) or "")
    return dotted_name(first.names[0].name) or ""


def ensure_stdlib_imported(module: cst.Module, name: str) -> cst.Module:
    """`import <name>` for a standard-library module, in sorted place among the
    module's first group of plain imports (`import argparse`, `import functools`,
    `import os`), where the standard library's are; else as
    `ensure_module_import` puts it."""
    if not _needs_import(module, name):
        return module
    body = list(module.body)
    start = _first_import_position(body)
    end = start
    while (
        end < len(body)
        and _is_import(body[end])
        and all(isinstance(small, cst.Import) for small in body[end].body)
        and (end == start or not body[end].leading_lines)
    ):
        end += 1
    if end == start:
        return ensure_module_import(module, name)
    line = cst.SimpleStatementLine(body=[cst.Import(names=[cst.ImportAlias(name=cst.Name(name))])])
    position = next((i for i in range(start, end) if _imported_module(body[i]) > name), end)
    if position == start:  # it opens the group: it takes the group's leading lines
        line = line.with_changes(leading_lines=body[start].leading_lines)
        body[start] = body[start].with_changes(leading_lines=())
    body.insert(position, line)
    return module.with_changes(body=body)


def ensure_functools_imported(module: cst.Module) -> cst.Module:
    return ensure_stdlib_imported(module, "functools")


def ensure_os_imported(module: cst.Module) -> cst.Module:
    return ensure_stdlib_imported(module, "os")


def ensure_torch_imported(module: cst.Module) -> cst.Module:
    return ensure_module_import(module, "torch")
