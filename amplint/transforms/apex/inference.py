"""apex.amp for inference: autocast where apex patched torch for forward passes.

``model = amp.initialize(model, opt_level="O1")`` with no optimizer patched torch
so that every later forward pass ran its ops in float16 where apex's lists said
so; torch's counterpart is autocast around those forward passes.  When every
later use of the model in the function that initialized it is a call of it, one
of its attributes, a wrapper bound back to its name (``model =
DataParallel(model)``) or an inspection (``hasattr(model, ...)``), those calls
are its forward passes, and each statement holding one gets autocast, enabled
under the conditions the initialize ran under.  A model handed to other code
(``evaluate(model, loader)``) runs its forward passes where amplint does not
follow, and the migration stops with a message.  O3 cast the model itself and
becomes ``model.half()``.

``amp.init(enabled=...)``, apex's first API, named no model: it patched torch
for everything the process ran after it.  Its counterpart is that literally:
the rest of its function under one autocast (``_first_api``), which also covers
forward passes in code the function calls (an evaluation library's
``inference(model, loader)``).

`ApexInference` is mixed into the migrator (migration.py): it reads the
migrator's `facts`, `uses`, `settings`, `book` and `changes`, calls its `code`,
`_conditions`, `_remove`, `_vanishing`, `switch_statement` and
`_switch_in_place`, and sets
`inference_only`.
"""

from __future__ import annotations

from typing import Callable, Iterator

import libcst as cst

from amplint.analysis.apex import ApexUse, assigned_names, squeezed
from amplint.analysis.statements import name_use, positional_args, string_value
from amplint.analysis.visitor import children
from amplint.transforms.apex.autocast_switch import switch_names, under_autocast
from amplint.transforms.apex.common import MigrationBlocked, apex_choice, keyword_args
from amplint.transforms.apex.conditions import conjunction

# amp.init's keywords that change nothing once no loss is scaled through its
# handle: `verbose` printed its patching, `loss_scale` set the handle's scaler.
_FIRST_API_UNUSED = frozenset({"verbose", "loss_scale"})


class ApexInference:
    def _initialize_for_inference(self, use: ApexUse) -> None:
        """amp.initialize with no optimizer casts a model for inference; there
        is no loss to scale.  O3 was `model.half()` and becomes it; O1 and O2
        patched or cast more than the model, so the message says what to write."""
        call = use.call
        model = self.code(positional_args(call)[0].value)
        keywords = keyword_args(call)
        level_argument = keywords.get("opt_level")
        level = string_value(level_argument.value) if level_argument is not None else "O1"
        statement = use.statement
        targets = assigned_names(statement)
        assigned = statement.body[0] if targets is not None else None
        names = [squeezed(t) for t in (targets or "").split(",")]
        if any(member == "scale_loss" for member in (u.member for u in self.uses)):
            raise MigrationBlocked(
                f"`{self.code(call)}` initializes for inference (no optimizer) in a module "
                "that also scales a loss: which scaler a step should use is a guess"
            )
        others = set(keywords) - {"opt_level", "verbosity"}
        if (
            level == "O1"
            and not others
            and assigned is not None
            and assigned.value is call
            and all(name in ("_", "") for name in names[1:])
        ):
            self._autocast_for_inference(use, names[0], model)
            return
        if (
            level != "O3"
            or others
            or assigned is None
            or assigned.value is not call
            or names[0] != squeezed(model)
            or any(name not in ("_", "") for name in names[1:])
        ):
            raise MigrationBlocked(
                f"`{self.code(call)}` prepares a model for inference (no optimizer), which "
                "torch.amp does not do in one call: run its forward passes under "
                f'`torch.autocast("{self.settings.device_type}", dtype=torch.float16)` '
                "(O1), or call `.half()` on the model (O3)"
            )
        self.changes[use] = [
            "O3 also cast the model's floating-point inputs to float16 on every call; "
            f"`{model}.half()` does not, so its callers must pass float16 tensors"
        ]
        half = cst.parse_statement(f"{model} = {model}.half()\n")
        self.book.rewrite(
            statement,
            lambda node: half.with_changes(leading_lines=node.leading_lines),
        )
        self.inference_only = True

    def _autocast_for_inference(self, use: ApexUse, target: str, model: str) -> None:
        """O1 for inference: the initialize goes, and autocast goes around each
        later call of the model in its function (transforms/apex/inference.py);
        where the function keeps its autocast in a switch (`amp_autocast =
        suppress`, `partial(torch.autocast, ...)` for native AMP), the switch is
        turned on in the initialize's place instead (autocast_switch.py)."""
        call = use.call
        function = use.scope
        switches = (
            switch_names(function, self.facts.imports)
            if isinstance(function, cst.FunctionDef)
            else []
        )
        if len(switches) == 1 and target == squeezed(model):
            self._switch_in_place(use.statement, self.switch_statement(switches[0], function))
            self.inference_only = True
            return
        conditions = self._conditions(use)
        condition = conjunction(conditions)
        found = (
            forward_statements(
                use.scope,
                use.statement,
                model,
                set().union(*(name_use(cst.parse_expression(c)).read for c in conditions)),
                lambda node: self.facts.span(node).line,
                self.code,
            )
            if isinstance(use.scope, cst.FunctionDef) and target == squeezed(model)
            else "it is not bound back to the model's name in a function"
        )
        if not isinstance(found, str) and any(
            under_autocast(function, statement, self.facts.imports) for statement in found
        ):
            found = (
                "its forward passes run under an autocast of the program's own, which an "
                "autocast with `enabled=` inside would turn off"
            )
        if isinstance(found, str):
            raise MigrationBlocked(
                f"`{self.code(call)}` prepares a model for inference (no optimizer), which "
                "torch.amp does not do in one call: run its forward passes under "
                f'`torch.autocast("{self.settings.device_type}", dtype=torch.float16)`; '
                f"amplint does not, as {found}"
            )
        choice = apex_choice(self.settings)
        enabled = [f"enabled={condition}"] if condition is not None else []
        autocast = self._autocast(f"{self.torch}.{choice.dtype}", enabled)
        for statement in found:
            self.book.rewrite(statement, lambda node: _wrapped(node, autocast))
        self._remove(self._vanishing(use))
        self.inference_only = True

    def _first_api(self, use: ApexUse) -> None:
        """`handle = amp.init(enabled=fp16)` in a function: the statements after it
        go under one `torch.autocast(..., enabled=fp16)`, as apex's patching
        covered everything they ran.  A handle used later (apex's first
        `handle.scale_loss`, `handle.wrap_optimizer`) is training; that and a
        call anywhere but the top of a function's body stop with the recipe."""
        call = use.call
        recipe = (
            f"`{self.code(call)}` is apex's first API, which cast every op of the "
            "process as O1 does: run the forward passes under `torch.autocast("
            f'"{self.settings.device_type}", dtype=torch.float16)` instead, and scale '
            "a training loss with a torch.amp.GradScaler"
        )
        function = use.scope
        statement = use.statement
        targets = assigned_names(statement)
        handle = squeezed(targets) if targets is not None else None
        keywords = keyword_args(call)
        obstacle = None
        if not isinstance(function, cst.FunctionDef) or not any(
            statement is top for top in function.body.body
        ):
            obstacle = "it is not a statement of a function's own body"
        elif positional_args(call) or set(keywords) - _FIRST_API_UNUSED - {"enabled"}:
            shown = ", ".join(sorted(set(keywords) - _FIRST_API_UNUSED - {"enabled"}))
            obstacle = f"it is given {shown or 'positional arguments'}"
        elif targets is not None and (
            statement.body[0].value is not call or not handle.isidentifier()
        ):
            obstacle = "its result is used other than bound to one name"
        elif handle is not None and handle in name_use(self.facts.module).read:
            obstacle = f"its handle `{handle}` is used: a loss is scaled through it"
        elif any(other.member == "scale_loss" for other in self.uses):
            obstacle = "the module also scales a loss"
        elif statement is function.body.body[-1]:
            obstacle = f"nothing follows it in `{function.name.value}`"
        if obstacle is not None:
            raise MigrationBlocked(f"{recipe}; amplint does not, as {obstacle}")
        choice = apex_choice(self.settings)
        enabled = keywords.get("enabled")
        autocast = self._autocast(
            f"{self.torch}.{choice.dtype}",
            [f"enabled={self.code(enabled.value)}"] if enabled is not None else [],
        )
        marker = cst.SimpleStatementLine([cst.Pass()], leading_lines=statement.leading_lines)
        self.book.rewrite(statement, lambda _: marker)
        self.book.rewrite(
            function.body,
            lambda block: _tail_wrapped(block, marker, cst.parse_expression(autocast)),
        )
        self.removed.add(id(statement))
        self.inference_only = True


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


def _wrapped(statement: cst.SimpleStatementLine, autocast: str) -> cst.With:
    """`statement` in a `with <autocast>:` block that takes its leading lines."""
    return cst.With(
        items=[cst.WithItem(cst.parse_expression(autocast))],
        body=cst.IndentedBlock([statement.with_changes(leading_lines=[])]),
        leading_lines=statement.leading_lines,
    )


def _tail_wrapped(block: cst.IndentedBlock, marker: cst.CSTNode, autocast: cst.BaseExpression):
    """`block` with `marker` (the statement amp.init stood in) replaced by a
    `with <autocast>:` holding every statement after it."""
    body = list(block.body)
    at = next(index for index, statement in enumerate(body) if statement is marker)
    tail = body[at + 1 :]
    first = tail[0]
    lines = list(first.leading_lines)
    while lines and lines[0].comment is None:
        lines.pop(0)  # the blank line after amp.init would open the block
    tail[0] = first.with_changes(leading_lines=lines)
    wrapped = cst.With(
        items=[cst.WithItem(autocast)],
        body=cst.IndentedBlock(tail),
        leading_lines=marker.leading_lines,
    )
    return block.with_changes(body=[*body[:at], wrapped])
