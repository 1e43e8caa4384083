"""Questions about the statements an apex migration edits, and the small
edits it makes of them: which statements only import apex, which `if` holds
nothing else once apex's lines go, which backward a `with amp.scale_loss`
wraps, and the comments about apex that go with a replaced line."""

from __future__ import annotations

import re
from typing import Callable, Sequence

import libcst as cst

from amplint.analysis.apex import ApexUse, is_apex
from amplint.analysis.imports import dotted_name
from amplint.analysis.statements import is_none
from amplint.analysis.visitor import descendants
from amplint.transforms.apex.common import code_of
from amplint.transforms.imports import IMPORT_ERRORS, is_docstring, local_name

# A comment about apex, over a statement the migration replaces, describes what is gone.
_APEX_WORD = re.compile(r"\bapex\b", re.I)


def block_holding(use: ApexUse) -> Sequence[cst.BaseStatement]:
    """The statements of the block `use.statement` stands in."""
    holder = use.ancestors[-1] if use.ancestors else use.scope
    body = getattr(holder, "body", ())
    if isinstance(body, cst.BaseSuite):
        body = body.body if isinstance(body, cst.IndentedBlock) else ()
    return tuple(body)


def longest_chain(use: ApexUse, module: cst.Module) -> str:
    """`amp._amp_state.loss_scalers[0]._max_loss_scale` for a use of
    `amp._amp_state.loss_scalers`: the longest attribute, subscript or call
    chain in its statement that starts with it."""
    spelled = module.code_for_node(use.node)
    chains = [
        module.code_for_node(node)
        for node in descendants(use.statement)
        if isinstance(node, (cst.Attribute, cst.Subscript, cst.Call))
        and module.code_for_node(node).startswith(spelled)
    ]
    return max(chains, key=len, default=spelled)


def is_none_test(test: cst.BaseExpression, names: set[int]) -> bool:
    """Whether `test` is `x is None` / `x is not None` for a node of `names` (by id)."""
    return (
        isinstance(test, cst.Comparison)
        and id(test.left) in names
        and len(test.comparisons) == 1
        and isinstance(test.comparisons[0].operator, (cst.Is, cst.IsNot))
        and is_none(test.comparisons[0].comparator)
    )


def top_statement(use: ApexUse) -> cst.BaseStatement:
    """The statement of the scope's body that holds `use`."""
    return use.ancestors[0] if use.ancestors else use.statement


def holds_only(holder: cst.If, removed: set[int]) -> bool:
    """Whether every branch of `holder` holds only statements in `removed` (by
    id) and apex imports, and its tests call nothing: the whole `if` can go."""
    branch: cst.If | cst.Else | None = holder
    while branch is not None:
        if isinstance(branch, cst.If) and nodes_in(branch.test, cst.Call):
            return False
        for statement in branch.body.body:
            if id(statement) in removed or imports_apex_only(statement):
                continue
            if not (isinstance(statement, cst.If) and holds_only(statement, removed)):
                return False
        branch = branch.orelse if isinstance(branch, cst.If) else None
    return True


def replaced_by_branch(keep_body: bool) -> Callable:
    def rewrite(node: cst.If) -> cst.FlattenSentinel:
        return in_place_of(node, list((node.body if keep_body else node.orelse.body).body))

    return rewrite


def in_place_of(node: cst.If, kept: list[cst.BaseStatement]) -> cst.FlattenSentinel:
    """The statements of one branch of `node` where `node` stood, its comments first."""
    first = kept[0].with_changes(leading_lines=[*node.leading_lines, *kept[0].leading_lines])
    return cst.FlattenSentinel([first, *kept[1:]])


def imports_apex_only(statement: cst.BaseStatement) -> bool:
    """`from apex import amp`, alone or in `try: ... except ImportError: ...`."""
    if isinstance(statement, cst.SimpleStatementLine):
        return all(
            isinstance(small, (cst.Import, cst.ImportFrom)) and _names_apex(small)
            for small in statement.body
        )
    if isinstance(statement, cst.Try) and statement.orelse is None and statement.finalbody is None:
        return all(imports_apex_only(s) for s in statement.body.body) and all(
            handler.type is not None and dotted_name(handler.type) in IMPORT_ERRORS
            for handler in statement.handlers
        )
    return False


def imports_amp_with_fallback(statement: cst.Try) -> bool:
    """`try: from apex import amp` with handlers for apex missing, nothing else."""
    if statement.orelse is not None or statement.finalbody is not None:
        return False
    if not all(
        isinstance(line, cst.SimpleStatementLine) and all(_binds_apex_amp(s) for s in line.body)
        for line in statement.body.body
    ):
        return False
    return all(
        handler.type is None or dotted_name(handler.type) in {*IMPORT_ERRORS, "Exception"}
        for handler in statement.handlers
    )


def imports_amp_under_if(statement: cst.If) -> bool:
    """`if use_cuda: from apex import amp` with, at most, `else: amp = None`: an
    import of apex.amp where a test allows it, nothing else."""
    lines = statement.body.body
    if not lines or not all(
        isinstance(line, cst.SimpleStatementLine) and all(_binds_apex_amp(s) for s in line.body)
        for line in lines
    ):
        return False
    if statement.orelse is None:
        return True
    if not isinstance(statement.orelse, cst.Else):
        return False  # an `elif` tests more
    imported = {name for line in lines for small in line.body for name in _bound_names(small)}
    return all(
        isinstance(line, cst.SimpleStatementLine)
        and all(
            isinstance(small, cst.Assign)
            and is_none(small.value)
            and {dotted_name(t.target) for t in small.targets} <= imported
            for small in line.body
        )
        for line in statement.orelse.body.body
    )


def _bound_names(small: cst.BaseSmallStatement) -> set[str]:
    """The names an import binds (`amp` of `from apex import amp`)."""
    if not isinstance(small, (cst.Import, cst.ImportFrom)) or isinstance(
        small.names, cst.ImportStar
    ):
        return set()
    return {name for alias in small.names if (name := local_name(alias)) is not None}


def _binds_apex_amp(small: cst.BaseSmallStatement) -> bool:
    """`from apex import amp [as x]`, `import apex.amp as x`: apex.amp and nothing else."""
    if isinstance(small, cst.ImportFrom):
        module = code_of(small.module) if small.module is not None else ""
        return (
            not small.relative
            and not isinstance(small.names, cst.ImportStar)
            and module == "apex"
            and all(code_of(alias.name) == "amp" for alias in small.names)
        )
    if isinstance(small, cst.Import):
        return all(code_of(alias.name) == "apex.amp" for alias in small.names)
    return False


def _names_apex(statement: cst.Import | cst.ImportFrom) -> bool:
    if isinstance(statement, cst.ImportFrom):
        module = code_of(statement.module) if statement.module is not None else ""
        return is_apex(module)
    return all(is_apex(code_of(alias.name)) for alias in statement.names)


def backward_of(statement: cst.BaseStatement, name: str) -> bool:
    """`name.backward(...)` as a whole statement."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return False
    small = statement.body[0]
    return (
        isinstance(small, cst.Expr)
        and isinstance(small.value, cst.Call)
        and isinstance(small.value.func, cst.Attribute)
        and small.value.func.attr.value == "backward"
        and isinstance(small.value.func.value, cst.Name)
        and small.value.func.value.value == name
    )


def with_backward_of(
    statement: cst.BaseStatement, scaled: str, loss: cst.BaseExpression
) -> cst.BaseStatement:
    if not backward_of(statement, scaled):
        return statement
    small = statement.body[0]
    call = small.value.with_changes(func=small.value.func.with_changes(value=loss))
    return statement.with_changes(body=[small.with_changes(value=call)])


def nodes_in(node: cst.CSTNode, kind: type) -> list:
    """Every node of type `kind` at or below `node`."""
    return [found for found in descendants(node) if isinstance(found, kind)]


def leading_lines_of(node) -> Sequence[cst.EmptyLine]:
    """The blank lines and comments above a statement an earlier edit may have
    turned into several (`if amp is not None:` kept as its body) or none."""
    if isinstance(node, cst.FlattenSentinel):
        return leading_lines_of(node.nodes[0]) if node.nodes else ()
    return getattr(node, "leading_lines", ())


def without_apex_comments(lines: Sequence[cst.EmptyLine]) -> list[cst.EmptyLine]:
    """The lines above a statement the GradScaler replaces, less the comments
    about apex (`# initialize apex amp`): they describe what is gone.  Other
    comments (`# mixed precision`) still hold and stay."""
    return [
        line for line in lines if not _APEX_WORD.search(line.comment.value if line.comment else "")
    ]


def with_first(block: cst.IndentedBlock, statement: cst.BaseStatement) -> cst.IndentedBlock:
    """`block` with `statement` first, after its docstring if it has one."""
    body = list(block.body)
    at = 1 if body and is_docstring(body[0]) else 0
    return block.with_changes(body=[*body[:at], statement, *body[at:]])


def own_init(class_def: cst.ClassDef) -> cst.FunctionDef | None:
    """The `__init__` that `class_def` defines itself, if any."""
    body = class_def.body
    if not isinstance(body, cst.IndentedBlock):
        return None
    return next(
        (s for s in body.body if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"),
        None,
    )
