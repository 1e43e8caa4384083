"""The forward pass of a step whose loss comes from the caller.

``def optimize(self, loss): loss.backward(); self.optimizer.step()`` is a training
step without its forward pass: each ``self.optimize(loss)`` elsewhere in the
class computes the loss it is given (XLM's trainer, research code with one
``optimize`` for several objectives).  Autocast belongs around the forward
region at each of those calls, found there exactly as a step's own region is
found above its backward.

Only a method's calls through ``self`` are followed, in its own class and in
the module's subclasses of it (XLM's ``EncDecTrainer.mt_step``): the GradScaler
is an attribute of the instance, so every name autocast reads there is the
instance's or the module's.  A call from elsewhere (another module, a plain
function) still works after the rewrite, in FP32; the finding names the calls
it covered.
"""

from __future__ import annotations

import re
from typing import Callable, Iterator, Sequence

import libcst as cst

from amplint.analysis.code_text import code_only
from amplint.analysis.forward import ForwardRegion, forward_region
from amplint.analysis.name_calls import name_calls
from amplint.analysis.statements import child_suites, name_use, parameter_names
from amplint.analysis.visitor import Visitor, descendants, holds, path_to

# A caller already running its forward pass under autocast (or apex's scaler).
_AUTOCAST = re.compile(r"autocast|scale_loss")


def caller_regions(
    class_def: cst.ClassDef,
    function: cst.FunctionDef,
    loss: cst.BaseExpression,
    runs_model: Callable[[cst.CSTNode], bool],
    code_for: Callable[[cst.CSTNode], str],
    subclasses: Sequence[cst.ClassDef] = (),
) -> list[ForwardRegion] | str:
    """The forward region at each call `self.<function>(...)` in the other
    methods of `class_def` and of its `subclasses`, where `loss` (a parameter
    of `function`) is passed; or why they cannot all be found.  No region at
    all (an empty list): the class never calls `function` itself, so its
    loss comes from the code that calls the instances (`forward_outside`)."""
    parameters = parameter_names(function)
    if not isinstance(loss, cst.Name) or len(parameters) < 2 or loss.value not in parameters[1:]:
        return "the loss comes from the caller"
    name = function.name.value
    positional = [param.name.value for param in function.params.params]
    # Where a call passes it by position (after self); None: by keyword only.
    position = positional.index(loss.value) - 1 if loss.value in positional[1:] else None
    regions: list[ForwardRegion] = []
    for subclass in subclasses:
        if any(method.name.value == name for method in methods(subclass)):
            # Its calls may mean its own `name`, a step this one does not plan.
            return f"`{subclass.name.value}` overrides `{name}`"
    for method in (m for owner in (class_def, *subclasses) for m in methods(owner)):
        if method is function or not method.params.params:
            continue
        me = method.params.params[0].name.value
        finder = _SelfCalls(me, name)
        finder.walk(method.body)
        if finder.other_uses:
            return f"`{me}.{name}` is used other than called (passed on, stored)"
        where = f"`{me}.{name}(...)` in `{method.name.value}`"
        if finder.calls and _AUTOCAST.search(code_only(code_for(method))):
            return f"{where} runs under autocast already"
        for call in finder.calls:
            argument = _argument(call, position, loss.value)
            if argument is None:
                return f"{where} does not pass the loss by position or by name"
            region = _region_above(method, call, argument, runs_model)
            if isinstance(region, str):
                return f"{where}: {region}"
            if not any(runs_model(statement) for statement in region.statements):
                return f"{where}: no model call computes the loss it passes"
            regions.append(region)
    return regions


def autocast_callers(
    module: cst.Module,
    function: cst.FunctionDef,
    class_def: cst.ClassDef | None,
    code_for: Callable[[cst.CSTNode], str],
) -> list[cst.CSTNode]:
    """Where `function`, a step given its loss (`def step(loss, optimizer)`),
    is called, when it is called in this module and every call runs in code
    that enters autocast (or apex's scale_loss): the functions that hold the
    calls, or at module level the statements that do; else empty.  The
    callers' step is mixed precision then, and this one is no FP32 step.  A
    method's calls are `self.<name>(...)` in its class; a function's, by its
    name anywhere in the module."""
    name = function.name.value
    # Each call with the code holding it, and the nodes from there down to it.
    calls: list[tuple[cst.CSTNode, cst.Call, list[cst.CSTNode]]] = []
    if class_def is not None:
        for method in methods(class_def):
            if method is function or not method.params.params:
                continue
            finder = _SelfCalls(method.params.params[0].name.value, name)
            finder.walk(method.body)
            if finder.other_uses:
                return []
            calls += [(method, call, path_to(method, call) or []) for call in finder.calls]
    else:
        found = name_calls(module)
        if found.other_uses[name]:
            return []  # passed on, stored: called where amplint cannot see
        for call, chain in found.calls.get(name, []):
            if any(node is function for node in chain):
                continue  # a call of itself
            defs = [i for i, node in enumerate(chain) if isinstance(node, cst.FunctionDef)]
            # The innermost function holding the call, else the module's statement.
            at = defs[-1] if defs else 1
            calls.append((chain[at], call, chain[at:]))
    if not calls or not all(_under_autocast(*site, code_for) for site in calls):
        return []
    return list(dict.fromkeys(holder for holder, _, _ in calls))


def _under_autocast(
    holder: cst.CSTNode,
    call: cst.Call,
    path: list[cst.CSTNode],
    code_for: Callable[[cst.CSTNode], str],
) -> bool:
    """Whether `call` runs inside an autocast block of `holder` (`path`, the
    nodes from `holder` down to it), or is passed a name that such a block
    binds (`with autocast(): loss = ...`, then `step(loss, optimizer)`)."""
    if any(isinstance(node, cst.With) and _enters_autocast(node, code_for) for node in path):
        return True
    passed = {arg.value.value for arg in call.args if isinstance(arg.value, cst.Name)}
    return any(
        isinstance(node, cst.With)
        and _enters_autocast(node, code_for)
        and passed & name_use(node.body).bound
        for node in descendants(holder)
    )


def _enters_autocast(block: cst.With, code_for: Callable[[cst.CSTNode], str]) -> bool:
    return any(_AUTOCAST.search(code_only(code_for(item))) for item in block.items)


def forward_outside(function: cst.FunctionDef, loss: cst.Name) -> str:
    """Why a step whose loss its method is given, and which its class never
    calls, cannot take autocast itself (timm's `ApexScaler.__call__`)."""
    name = function.name.value
    shown = "its instances" if name == "__call__" else f"`{name}`"
    return (
        f"`{loss.value}` is a parameter of `{name}`, and the forward pass that computes "
        f"it runs in the code that calls {shown}, not in this class: autocast belongs "
        "there, and amplint does not follow an object to its callers"
    )


def subclasses_of(class_def: cst.ClassDef, classes: Sequence[cst.ClassDef]) -> list[cst.ClassDef]:
    """The classes among `classes` that derive from `class_def`, directly or
    through one another, by the name their bases spell."""
    found: list[cst.ClassDef] = []
    names = {class_def.name.value}
    grew = True
    while grew:
        grew = False
        for other in classes:
            if other is class_def or other in found:
                continue
            if any(
                isinstance(base.value, cst.Name) and base.value.value in names
                for base in other.bases
            ):
                found.append(other)
                names.add(other.name.value)
                grew = True
    return found


def methods(class_def: cst.ClassDef) -> Iterator[cst.FunctionDef]:
    """The defs of `class_def`'s own body."""
    if isinstance(class_def.body, cst.IndentedBlock):
        for statement in class_def.body.body:
            if isinstance(statement, cst.FunctionDef):
                yield statement


def _argument(call: cst.Call, position: int | None, keyword: str) -> cst.BaseExpression | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == keyword:
            return arg.value
    if position is None or any(arg.star for arg in call.args):
        return None
    positional = [arg for arg in call.args if arg.keyword is None]
    return positional[position].value if position < len(positional) else None


def _region_above(
    method: cst.FunctionDef,
    call: cst.Call,
    loss: cst.BaseExpression,
    runs_model: Callable[[cst.CSTNode], bool],
) -> ForwardRegion | str:
    """The forward region computing `loss` above the statement holding `call`:
    in the suite holding that statement, else in each suite around it."""
    chain = _suites_to(method.body.body, call)
    if chain is None:
        return "the call is not in a statement of the method"
    parameters = set(parameter_names(method))
    reason = "cannot find where the loss it passes is computed"
    for suite, index in reversed(chain):
        region = forward_region(suite, loss, index, 0, parameters, runs_model)
        if isinstance(region, ForwardRegion):
            return region
        reason = region
    return reason


def _suites_to(
    suite: Sequence[cst.BaseStatement], call: cst.Call
) -> list[tuple[Sequence[cst.BaseStatement], int]] | None:
    """The suites from `suite` down to the one whose statement holds `call`,
    each with the index of the statement leading down; None if not there.  A
    nested def or class is not entered: its code runs elsewhere."""
    for index, statement in enumerate(suite):
        if isinstance(statement, (cst.FunctionDef, cst.ClassDef)) or not holds(statement, call):
            continue
        for inner in child_suites(statement):
            deeper = _suites_to(inner, call)
            if deeper is not None:
                return [(suite, index), *deeper]
        return [(suite, index)]
    return None


class _SelfCalls(Visitor):
    """The calls `me.name(...)` in a method, and whether `me.name` is used otherwise."""

    def __init__(self, me: str, name: str) -> None:
        self.me, self.name = me, name
        self.calls: list[cst.Call] = []
        self.other_uses = 0
        self._called: set[int] = set()

    def _is_ours(self, node: cst.BaseExpression) -> bool:
        return (
            isinstance(node, cst.Attribute)
            and node.attr.value == self.name
            and isinstance(node.value, cst.Name)
            and node.value.value == self.me
        )

    def visit_Call(self, node: cst.Call) -> None:
        if self._is_ours(node.func):
            self.calls.append(node)
            self._called.add(id(node.func))

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if self._is_ours(node) and id(node) not in self._called:
            self.other_uses += 1

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False  # a nested def's `self` is another name's business
