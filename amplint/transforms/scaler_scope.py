"""Where a new GradScaler lives: beside the optimizer it serves.

The scaler must outlive the step and be checkpointed with it, and the user's
code already solved both for the optimizer.  So the scaler is made right after
the statement that makes the optimizer, in that scope, and reaches the step the
way the optimizer does.  When the step's function receives the optimizer as a
parameter (``def train(args, model, loader, optimizer, epoch)``), the scaler
becomes a parameter next to it, every call passes it next to the optimizer,
and each caller makes it right after making that optimizer; making it inside
``train`` would reset the loss scale every epoch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

import libcst as cst

from amplint.analysis.name_calls import name_calls
from amplint.analysis.statements import name_use, parameter_names
from amplint.project import ProjectView


class NoCallers(str):
    """Why there is no plan, when no caller of the step function is in sight."""


_PER_EPOCH = re.compile(r"epoch", re.I)


def runs_per_epoch(function: cst.FunctionDef) -> bool:
    """`train_one_epoch(...)`, `train(..., epoch)`: a function its caller runs
    once per epoch, where a scaler made inside would restart each time."""
    names = [function.name.value, *parameter_names(function)]
    return any(_PER_EPOCH.search(name) for name in names)


@dataclass
class ThreadPlan:
    """How a scaler parameter reaches a step function from its callers."""

    parameter: cst.Param  # the optimizer's parameter; the scaler's goes after it
    keyword_only: bool
    # Each call, with the index of its argument for the optimizer.
    calls: list[tuple[cst.Call, int]] = field(default_factory=list)
    # Statements after which a caller makes its scaler (one per caller scope).
    creations: list[cst.BaseStatement] = field(default_factory=list)


def _is_name(node: cst.BaseExpression, name: str) -> bool:
    return isinstance(node, cst.Name) and node.value == name


def thread_through_callers(
    module: cst.Module,
    function: cst.FunctionDef,
    optimizer: str,
    project: ProjectView | None,
) -> ThreadPlan | str:
    """The plan that passes a scaler to `function` next to its parameter
    `optimizer`, or why there is none, in the user's terms."""
    name = function.name.value
    params = function.params
    keyword_only = False
    parameter = next((p for p in params.params if p.name.value == optimizer), None)
    if parameter is None:
        parameter = next((p for p in params.kwonly_params if p.name.value == optimizer), None)
        keyword_only = parameter is not None
    if parameter is None:
        return f"`{optimizer}` reaches `{name}` in a way amplint does not follow"
    if parameter.default is not None:
        return f"`{name}` has a default for `{optimizer}`; pass a GradScaler next to it by hand"
    if project is not None:
        elsewhere = project.callers(name)
        if elsewhere:
            where = ", ".join(
                sorted({site.where(project.relative(site.path)) for site in elsewhere})
            )
            return (
                f"`{name}` receives `{optimizer}` from {where}; its GradScaler belongs "
                "beside that optimizer, and amplint rewrites one module at a time"
            )
    ancestries = name_calls(module)
    if ancestries.other_uses[name]:
        return f"`{name}` is used other than by calling it; pass a GradScaler next to `{optimizer}`"
    calls = ancestries.calls.get(name, [])
    if not calls:
        return NoCallers(
            f"`{name}` receives `{optimizer}` from its callers and none is in this project; "
            "a GradScaler made in it would restart each call: make one beside the optimizer "
            "and pass it in"
        )
    index = params.params.index(parameter) if not keyword_only else None
    plan = ThreadPlan(parameter, keyword_only)
    for call, chain in calls:
        position = _argument_position(call, optimizer, index)
        if isinstance(position, str):
            return position
        argument = call.args[position].value
        if not isinstance(argument, cst.Name):
            shown = module.code_for_node(argument)
            return f"the optimizer reaches `{name}` as `{shown}`; pass a GradScaler next to it"
        creation = _binding_before(chain, call, argument.value)
        if creation is None:
            return (
                f"cannot find where `{argument.value}`, passed to `{name}` as `{optimizer}`, "
                "is made in the calling scope"
            )
        plan.calls.append((call, position))
        if creation not in plan.creations:
            plan.creations.append(creation)
    return plan


def _argument_position(call: cst.Call, optimizer: str, index: int | None) -> int | str:
    if any(arg.star for arg in call.args):
        return "a call passes `*args` or `**kwargs`; pass a GradScaler next to the optimizer"
    for position, arg in enumerate(call.args):
        if arg.keyword is not None and arg.keyword.value == optimizer:
            return position
    positional = [p for p, arg in enumerate(call.args) if arg.keyword is None]
    if index is not None and index < len(positional):
        return positional[index]
    return f"a call of the step function does not pass `{optimizer}`"


def _binding_before(
    chain: Sequence[cst.CSTNode], call: cst.Call, name: str
) -> cst.BaseStatement | None:
    """The statement, in the scope of `call`, that last binds `name` before the
    statement holding the call, searching outwards suite by suite."""
    nodes = [*chain, call]
    for depth in range(len(nodes) - 1, -1, -1):
        suite = nodes[depth]
        if not isinstance(suite, (cst.Module, cst.IndentedBlock)):
            continue
        holder = nodes[depth + 1] if depth + 1 < len(nodes) else None
        body = list(suite.body)
        if holder not in body:
            continue
        for statement in reversed(body[: body.index(holder)]):
            if name in name_use(statement).bound:
                return statement
        if isinstance(suite, cst.Module) or isinstance(nodes[depth - 1], cst.FunctionDef):
            return None  # a parameter, a global, a closure: not made in this scope
    return None


def with_parameter_after(
    params: cst.Parameters, after_name: str, new_name: str, keyword_only: bool
) -> cst.Parameters:
    """`params` with ``new_name`` right after the parameter `after_name`, laid
    out like its neighbours."""
    field_name = "kwonly_params" if keyword_only else "params"
    items = list(getattr(params, field_name))
    index = next(i for i, param in enumerate(items) if param.name.value == after_name)
    after = items[index]
    if isinstance(after.comma, cst.Comma):
        # One per line stays one per line: the new one takes the same comma.
        items.insert(index + 1, cst.Param(cst.Name(new_name), comma=after.comma))
    else:
        # `after` ends its list: libcst writes the comma between the two.
        items[index] = after.with_changes(whitespace_after_param=cst.SimpleWhitespace(""))
        new = cst.Param(cst.Name(new_name), whitespace_after_param=after.whitespace_after_param)
        items.insert(index + 1, new)
    return params.with_changes(**{field_name: items})


def with_keyword_only(
    params: cst.Parameters, new_name: str, default: cst.BaseExpression | None = None
) -> cst.Parameters:
    """`params` with a keyword-only parameter ``new_name`` (``=default`` when
    given) at the end of the keyword-only ones (after a new bare ``*`` where
    there is none), laid out like its neighbours.  A caller that does not pass
    a required one fails with a TypeError instead of shifting its positional
    arguments by one."""
    if default is not None:
        no_space = cst.SimpleWhitespace("")
        defaulted = {"default": default, "equal": cst.AssignEqual(no_space, no_space)}
    else:
        defaulted = {}
    star = params.star_arg if isinstance(params.star_arg, (cst.Param, cst.ParamStar)) else None
    ordered = [*params.params, *([star] if star is not None else []), *params.kwonly_params]
    if params.star_kwarg is not None:
        ordered.append(params.star_kwarg)
    # One per line (black's magic trailing comma): each comma but the last
    # carries the newline and indent to the next parameter.
    between = next(
        (
            param.comma
            for param in ordered[:-1]
            if isinstance(param.comma, cst.Comma)
            and isinstance(param.comma.whitespace_after, cst.ParenthesizedWhitespace)
        ),
        None,
    )
    if between is None:
        new = cst.Param(cst.Name(new_name), **defaulted)
        if star is not None:
            return params.with_changes(kwonly_params=[*params.kwonly_params, new])
        return params.with_changes(star_arg=cst.ParamStar(), kwonly_params=[new])
    # The new parameter goes last among those before **kwargs, with the comma
    # of the one it follows; that one takes a comma that leads to the next line.
    before = params.star_kwarg is None
    last = ordered[-1] if before else ordered[-2]
    new = cst.Param(cst.Name(new_name), comma=last.comma, **defaulted)
    closing = {}
    if not isinstance(last.comma, cst.Comma):  # `b\n)`: the newline before `)` moves on
        new = new.with_changes(whitespace_after_param=last.whitespace_after_param)
        closing = {"whitespace_after_param": cst.SimpleWhitespace("")}

    def relaid(param):
        return param.with_changes(comma=between, **closing) if param is last else param

    changes = {
        "params": [relaid(p) for p in params.params],
        "kwonly_params": [relaid(p) for p in params.kwonly_params],
    }
    if star is not None:
        changes["star_arg"] = relaid(star)
        changes["kwonly_params"].append(new)
    else:
        changes["star_arg"] = cst.ParamStar(comma=between)
        changes["kwonly_params"] = [new]
    return params.with_changes(**changes)
