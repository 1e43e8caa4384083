"""Autocast for losses an object scales, through the program's own autocast switch.

timm's `ApexScaler` runs `amp.scale_loss` on a loss its callers computed: the
forward passes apex's O1 cast run wherever the instances are called, and the
class can take the GradScaler (it is an object's state) but not autocast.  A
program written for apex and torch.amp both keeps its autocast in a name, off
by default and torch's autocast for native AMP::

    amp_autocast = suppress                      # or nullcontext
    if use_amp == "apex":
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
        loss_scaler = ApexScaler()
    elif use_amp == "native":
        amp_autocast = partial(torch.autocast, device_type="cuda", dtype=amp_dtype)
    ...
    train_one_epoch(..., amp_autocast=amp_autocast, loss_scaler=loss_scaler)

and runs each forward pass under `with amp_autocast():`.  Those are the
forward passes native AMP casts; O1 cast them too.  So where apex was
initialized the switch is turned on the way the native branch turns it on,
for apex's float16: ``amp_autocast = partial(torch.autocast, device_type=
"cuda", dtype=torch.float16)``.  A program without such a name gives no place
to put autocast that amplint can vouch for, and the migration stops.
"""

from __future__ import annotations

import libcst as cst

from amplint.analysis.imports import ImportMap
from amplint.analysis.scopes import Scope
from amplint.analysis.statements import name_use
from amplint.analysis.visitor import Visitor, descendants, holds
from amplint.files import shown_path
from amplint.transforms.apex.common import MigrationBlocked, apex_choice
from amplint.transforms.apex.statements import leading_lines_of, without_apex_comments

# Context-manager factories that do nothing: the switch's "off".
_NO_OP = frozenset({"contextlib.suppress", "contextlib.nullcontext"})


def switch_names(function: cst.FunctionDef, imports: ImportMap) -> list[str]:
    """The names of `function` bound both to a no-op context factory and to an
    autocast factory, and read there."""
    found = _Bindings(imports, function)
    found.walk(function.body)
    read = name_use(function.body).read
    return sorted(name for name in found.no_op & found.autocast if name in read)


def under_autocast(function: cst.FunctionDef, statement: cst.CSTNode, imports: ImportMap) -> bool:
    """Whether `statement` runs in a `with` of `function` that enters autocast or
    one of its autocast switches: an autocast with `enabled=` nested there
    would turn the outer one off when its condition is false."""
    found = _Bindings(imports, function)
    found.walk(function.body)
    switches = found.autocast | found.no_op

    def enters_autocast(item: cst.WithItem) -> bool:
        entered = item.item.func if isinstance(item.item, cst.Call) else item.item
        return (isinstance(entered, cst.Name) and entered.value in switches) or _mentions_autocast(
            entered, imports, function
        )

    return any(
        holds(node, statement) and any(enters_autocast(item) for item in node.items)
        for node in descendants(function.body)
        if isinstance(node, cst.With)
    )


def autocast_switch(function: cst.FunctionDef, imports: ImportMap, need: str) -> str:
    """The one switch of `function` (`switch_names`); raises MigrationBlocked,
    saying `need` (why autocast is wanted) and what is missing, where there is
    not exactly one."""
    switches = switch_names(function, imports)
    if len(switches) == 1:
        return switches[0]
    where = f"`{function.name.value}`"
    missing = (
        f"more than one name holds autocast in {where} ({', '.join(switches)})"
        if switches
        else f"no name in {where} switches between `nullcontext`/`suppress` and torch.autocast"
    )
    raise MigrationBlocked(
        f"{need}; amplint writes it through the program's own autocast switch "
        f"(`amp_autocast = suppress`, else `partial(torch.autocast, ...)`), and {missing}"
    )


def switch_on(
    name: str, torch: str, partial: str | None, device: str, dtype: str, autocast: str
) -> str:
    """`name = partial(torch.autocast, device_type=..., dtype=...)`; `autocast` is
    the spelling target-torch has (transforms/spelling.py), which before torch
    1.10 is CUDA's own float16 autocast and needs no partial."""
    if autocast.endswith(".cuda.amp.autocast()"):
        return f"{name} = {autocast[: -len('()')]}"
    partial = partial or "functools.partial"
    return f'{name} = {partial}({torch}.autocast, device_type="{device}", dtype={dtype})'


class _Bindings(Visitor):
    """The names `function` binds to a no-op context factory, and to autocast."""

    def __init__(self, imports: ImportMap, scope: Scope) -> None:
        self.imports = imports
        self.scope = scope
        self.no_op: set[str] = set()
        self.autocast: set[str] = set()

    def visit_Assign(self, node: cst.Assign) -> None:
        names = {t.target.value for t in node.targets if isinstance(t.target, cst.Name)}
        value = node.value
        if self.imports.resolve(value, self.scope) in _NO_OP:
            self.no_op |= names
        elif _mentions_autocast(value, self.imports, self.scope):
            self.autocast |= names

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False  # a nested def's names are its own

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False


def _mentions_autocast(value: cst.BaseExpression, imports: ImportMap, scope: Scope) -> bool:
    """`torch.autocast`, `torch.cuda.amp.autocast` or a partial of either."""
    if isinstance(value, cst.Call) and imports.resolve(value.func, scope) == "functools.partial":
        value = value.args[0].value if value.args else value
    resolved = imports.resolve(value, scope) or ""
    return resolved in ("torch.autocast", "torch.amp.autocast") or resolved.endswith(
        ".amp.autocast"
    )


class AutocastSwitch:
    """The switch turned on in amp.initialize's place, mixed into the migrator
    (migration.py): it reads the migrator's `facts`, `program`, `settings`,
    `torch` and `book`, calls its `_autocast`, and sets `needs_functools`."""

    def _switch_on(self, init) -> cst.BaseStatement:  # init: migration._Initialization
        """`amp_autocast = partial(torch.autocast, ...)` in place of amp.initialize,
        for the forward passes of the losses a loss-scaler object scales."""
        classes = ", ".join(
            f"`{name}` ({shown_path(path)})" for path, name in self.program.scaled_at_callers
        )
        need = (
            f"apex's O1 cast the forward passes of the losses {classes} scales, which run "
            "where its instances are called: they need torch.autocast there"
        )
        use = init.use
        if not init.removable or not isinstance(use.scope, cst.FunctionDef):
            raise MigrationBlocked(f"{need}, in the function that called amp.initialize")
        return self.switch_statement(
            autocast_switch(use.scope, self.facts.imports, need), use.scope
        )

    def switch_statement(self, name: str, scope: cst.FunctionDef) -> cst.BaseStatement:
        """`name = partial(torch.autocast, device_type=..., dtype=...)`: the
        program's autocast switch turned on for apex's float16."""
        partial = self.facts.imports.name_for("functools.partial", scope)
        self.needs_functools |= partial is None
        choice = apex_choice(self.settings)
        line = switch_on(
            name,
            self.torch,
            partial,
            choice.device,
            f"{self.torch}.{choice.dtype}",
            self._autocast(None, []),
        )
        return cst.parse_statement(line + "\n")

    def _switch_in_place(self, statement: cst.BaseStatement, switch: cst.BaseStatement) -> None:
        """The amp.initialize `statement` becomes `switch`, keeping its leading
        lines but the comments about apex."""
        self.book.rewrite(
            statement,
            lambda node: switch.with_changes(
                leading_lines=without_apex_comments(leading_lines_of(node))
            ),
        )
