"""amp.initialize for inference at O1: autocast around the model's forward passes.

``model = amp.initialize(model, opt_level="O1")`` with no optimizer patched torch
so that every later forward pass ran its ops in float16 where apex's lists said
so; torch's counterpart is autocast around those forward passes.  When every
later use of the model in the function that initialized it is a call of it, one
of its attributes, a wrapper bound back to its name (``model =
DataParallel(model)``) or an inspection (``hasattr(model, ...)``), those calls
are its forward passes, and each statement holding one gets autocast, enabled
under the conditions the initialize ran under.  A model handed to other code
(``evaluate(model, loader)``) runs its forward passes where amplint does not
follow, and the migration stops with a message.
"""

from __future__ import annotations

from typing import Callable, Iterator

import libcst as cst

from amplint.analysis.statements import name_use
from amplint.analysis.visitor import children

# Calls that look at a model without running it.
_INSPECTIONS = frozenset({"hasattr", "getattr", "isinstance", "type", "id", "print", "str", "repr"})


def forward_statements(
    function: cst.FunctionDef,
    initialize: cst.BaseStatement,
    model: str,
    condition_names: set[str],
    line_of: Callable[[cst.CSTNode], int],
    code: Callable[[cst.CSTNode], str],
) -> list[cst.SimpleStatementLine] | str:
    """The statements after `initialize` in `function` that run `model`, each
    to wrap in autocast; or why its forward passes cannot all be found there."""
    start = line_of(initialize)
    parents: dict[int, cst.CSTNode] = {}
    found: list[cst.SimpleStatementLine] = []
    for node, parent in _after(function.body, initialize, start, line_of):
        parents[id(node)] = parent
        rebound = (
            name_use(node).bound & condition_names
            if isinstance(node, cst.SimpleStatementLine)
            else set()
        )
        if rebound:
            shown = ", ".join(sorted(rebound))
            return f"`{shown}`, which says whether it ran, is bound again at line {line_of(node)}"
        if not (isinstance(node, cst.Name) and node.value == model) or parent is None:
            continue
        if (isinstance(parent, cst.Attribute) and parent.attr is node) or (
            isinstance(parent, cst.Arg) and parent.keyword is node
        ):
            continue  # `args.model`, `dict(model=...)`: other names spelled alike
        if isinstance(parent, cst.Call) and parent.func is node:
            statement = _statement_of(node, parents)
            if statement is None:
                return f"`{code(parent)}` runs it outside a statement autocast can wrap"
            if not any(statement is other for other in found):
                found.append(statement)
        elif isinstance(parent, cst.Attribute) and parent.value is node:
            continue  # `model.eval()`, `model.embeds`
        elif isinstance(parent, cst.Arg):
            call = parents.get(id(parent))
            if not isinstance(call, cst.Call):
                return f"`{model}` is used at line {line_of(node)} other than called"
            callee = call.func.value if isinstance(call.func, cst.Name) else None
            if callee in _INSPECTIONS or _wraps_back(call, model, parents):
                continue
            return (
                f"`{code(call)}` hands `{model}` to code that runs it elsewhere, where "
                "amplint does not follow"
            )
        elif isinstance(parent, cst.AssignTarget):
            assigned = parents.get(id(parent))
            if not (isinstance(assigned, cst.Assign) and model in name_use(assigned.value).read):
                return f"`{model}` is bound to something else at line {line_of(node)}"
        else:
            return f"`{model}` is used at line {line_of(node)} other than called"
    if not found:
        return f"no call of `{model}` follows it in `{function.name.value}`"
    return found


def _after(
    body: cst.CSTNode,
    initialize: cst.BaseStatement,
    start: int,
    line_of: Callable[[cst.CSTNode], int],
) -> Iterator[tuple[cst.CSTNode, cst.CSTNode | None]]:
    """Every node of `body` below the line `initialize` starts on, with its
    parent, not entering `initialize`, nested defs or classes."""
    stack: list[tuple[cst.CSTNode, cst.CSTNode | None]] = [(body, None)]
    while stack:
        node, parent = stack.pop()
        if node is initialize or (
            parent is not None and isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda))
        ):
            continue
        if isinstance(node, (cst.SimpleStatementLine, cst.Name)) and line_of(node) <= start:
            continue  # before it; a compound statement before it may hold later ones
        yield node, parent
        stack.extend((child, node) for child in reversed(list(children(node))))


def _statement_of(
    node: cst.CSTNode, parents: dict[int, cst.CSTNode]
) -> cst.SimpleStatementLine | None:
    current = parents.get(id(node))
    while current is not None:
        if isinstance(current, cst.SimpleStatementLine):
            return current
        if isinstance(current, cst.BaseCompoundStatement):
            return None  # `for x in model(y):`, `if model(x).any():`
        current = parents.get(id(current))
    return None


def _wraps_back(call: cst.Call, model: str, parents: dict[int, cst.CSTNode]) -> bool:
    """`model = torch.nn.DataParallel(model, ...)`: a wrapper bound to the model's name."""
    assigned = parents.get(id(call))
    return (
        isinstance(assigned, cst.Assign)
        and assigned.value is call
        and len(assigned.targets) == 1
        and isinstance(assigned.targets[0].target, cst.Name)
        and assigned.targets[0].target.value == model
    )
