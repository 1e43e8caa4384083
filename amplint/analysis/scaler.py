"""How a training step uses its GradScaler.

Built on the training steps.  A step uses the scaler S when its backward is
``S.scale(loss).backward()`` or it steps an optimizer through ``S.step(opt)``.
The recipe every rule here checks a part of, per iteration::

    S.scale(loss).backward()        # every backward scaled (AMP105)
    S.unscale_(opt)                 # once per optimizer, only before a clip (AMP102, AMP108)
    clip_grad_norm_(params, max_norm)
    S.step(opt)                     # every optimizer through S (AMP103)
    S.update()                      # once, after the last S.step (AMP104)

Statements in opposite branches of one test (``if scaler is not None: ...
else: ...``) never run in the same iteration, so no finding pairs them.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from amplint.analysis.clips import scale_aware
from amplint.analysis.imports import dotted_name
from amplint.analysis.statements import Branches, calls_in_line, method_name
from amplint.analysis.steps import (
    BackwardCall,
    GradEdit,
    OptimizerStep,
    StepScan,
    TrainingStep,
    is_scaler,
    looks_like_optimizer,
)
from amplint.analysis.visitor import Analysis, Visitor

SCALER_METHODS = frozenset({"unscale_", "step", "update"})


@dataclass(frozen=True, eq=False)
class ScalerCall:
    """``S.unscale_(opt)``, ``S.step(opt)`` or ``S.update()`` as a statement's call."""

    call: cst.Call
    method: str
    optimizer: str | None  # dotted name of the optimizer given to unscale_ / step
    statement: cst.BaseStatement
    order: int  # program order within the step block, as in TrainingStep


@dataclass(eq=False)
class ScalerUse:
    """A training step that uses exactly one GradScaler."""

    step: TrainingStep
    scaler: str  # as written: `scaler`, `self.grad_scaler`
    calls: list[ScalerCall]  # S.unscale_ / step / update, in program order
    scaled: list[BackwardCall]  # `S.scale(loss).backward()`
    unscaled: list[BackwardCall]  # any other backward

    def together(self, first_order: int, second_order: int) -> bool:
        """Whether one iteration can run both statements."""
        return not self.step.exclusive(first_order, second_order)

    def guard(self, order: int) -> Branches:
        """The branch conditions every use of the scaler is under but the
        statement at `order` is not: a line added there that uses the scaler
        needs them (`if scaler is not None:`), or it breaks the path without one."""
        used_under = [self.step.paths[b.order] for b in self.scaled]
        used_under += [self.step.paths[call.order] for call in self.calls]
        return frozenset.intersection(*used_under) - self.step.paths[order]

    def scaled_before(self, order: int) -> int | None:
        """The order of the last scaled backward before `order` on its path."""
        return max(
            (b.order for b in self.scaled if b.order < order and self.together(b.order, order)),
            default=None,
        )

    def calls_of(self, method: str) -> list[ScalerCall]:
        return [call for call in self.calls if call.method == method]


@dataclass(frozen=True, eq=False)
class BypassedScaler:
    """``opt.step()`` in a step that scales its loss with `scaler`."""

    step: OptimizerStep
    scaler: str
    also_stepped_by_scaler: bool  # `S.step(opt)` is there as well
    last_in_block: bool  # no other bypassing step follows it
    block_updates_scaler: bool  # `S.update()` runs in the same iteration
    guard: Branches  # see ScalerUse.guard: a rewrite there would need these
    # `S.step(opt)` runs before this step: the gradients are unscaled by then.
    after_scaler_step: bool = False


@dataclass(frozen=True, eq=False)
class UnscaledBackward:
    """``loss.backward()`` in a step whose optimizers S steps."""

    backward: BackwardCall
    scaler: str
    guard: Branches  # see ScalerUse.guard: a rewrite there would need these


@dataclass(frozen=True, eq=False)
class ClipBeforeUnscale:
    """A gradient clip between a scaled backward and ``S.step`` with no
    ``S.unscale_`` before it: it clips gradients multiplied by the loss scale."""

    clip: GradEdit
    scaler: str
    optimizers: tuple[str, ...]  # stepped by S after the clip, before the next backward
    guard: Branches  # what must hold for the scaler to be in use there (see ScalerUse.guard)


def _scaler_of(loss: cst.BaseExpression) -> str | None:
    """`scaler` for a backpropagated `scaler.scale(loss)`."""
    if isinstance(loss, cst.Call) and method_name(loss) == "scale":
        return dotted_name(loss.func.value)
    return None


def find_scaler_uses(scan: StepScan) -> list[ScalerUse]:
    uses = []
    for step in scan.steps:
        scaled_by = {id(backward): _scaler_of(backward.loss) for backward in step.backwards}
        scalers = set(scaled_by.values()) | {s.scaler for s in step.steps}
        scalers.discard(None)
        if len(scalers) != 1:
            continue  # no scaler here, or two: which one is meant would be a guess
        (scaler,) = scalers
        uses.append(
            ScalerUse(
                step,
                scaler,
                _scaler_calls(step, scaler),
                scaled=[b for b in step.backwards if scaled_by[id(b)] == scaler],
                unscaled=[b for b in step.backwards if scaled_by[id(b)] is None],
            )
        )
    return uses


def _scaler_calls(step: TrainingStep, scaler: str) -> list[ScalerCall]:
    found = []
    for order, statement in enumerate(step.statements):
        for call in calls_in_line(statement):
            method = method_name(call)
            if method in SCALER_METHODS and dotted_name(call.func.value) == scaler:
                optimizer = dotted_name(call.args[0].value) if call.args else None
                found.append(ScalerCall(call, method, optimizer, statement, order))
    return found


def find_bypassed_scalers(uses: list[ScalerUse]) -> list[BypassedScaler]:
    found = []
    for use in uses:
        plain = [
            s
            for s in use.step.steps
            if not s.has_closure
            and s.scaler is None
            and any(use.together(backward.order, s.order) for backward in use.scaled)
        ]
        for index, optimizer_step in enumerate(plain):
            optimizer = dotted_name(optimizer_step.optimizer)
            found.append(
                BypassedScaler(
                    optimizer_step,
                    use.scaler,
                    also_stepped_by_scaler=any(
                        call.optimizer == optimizer
                        and use.together(call.order, optimizer_step.order)
                        for call in use.calls_of("step")
                    ),
                    after_scaler_step=any(
                        call.optimizer == optimizer
                        and call.order < optimizer_step.order
                        and use.together(call.order, optimizer_step.order)
                        for call in use.calls_of("step")
                    ),
                    last_in_block=index == len(plain) - 1,
                    block_updates_scaler=any(
                        use.together(call.order, optimizer_step.order)
                        for call in use.calls_of("update")
                    ),
                    guard=use.guard(optimizer_step.order),
                )
            )
    return found


def find_unscaled_backwards(uses: list[ScalerUse]) -> list[UnscaledBackward]:
    return [
        UnscaledBackward(backward, use.scaler, use.guard(backward.order))
        for use in uses
        for backward in use.unscaled
        if any(use.together(backward.order, call.order) for call in use.calls_of("step"))
    ]


def find_clips_before_unscale(uses: list[ScalerUse]) -> list[ClipBeforeUnscale]:
    found = []
    for use in uses:
        for edit in use.step.grad_edits:
            if edit.clip is None:
                continue  # a hand-written `.grad` edit: scaling may well commute with it
            if edit.threshold is not None and scale_aware(edit.threshold, use.scaler):
                continue  # `clip_grad_norm_(p, max_norm * scaler.get_scale())`: clips as asked
            if use.scaled_before(edit.order) is None or any(
                call.order < edit.order and use.together(call.order, edit.order)
                for call in use.calls_of("unscale_")
            ):
                continue
            next_backward = min(
                (b.order for b in use.step.backwards if b.order > edit.order), default=None
            )
            stepped = [
                call.optimizer
                for call in use.calls_of("step")
                if call.order > edit.order
                and (next_backward is None or call.order < next_backward)
                and use.together(call.order, edit.order)
            ]
            if stepped:
                found.append(
                    ClipBeforeUnscale(
                        edit, use.scaler, tuple(dict.fromkeys(stepped)), use.guard(edit.order)
                    )
                )
    return found


@dataclass(frozen=True, eq=False)
class MissingUpdate:
    """The last ``S.step`` of an iteration with no ``S.update()`` after it."""

    last_step: ScalerCall
    scaler: str
    function: cst.FunctionDef | None = None  # the function holding the step


@dataclass(frozen=True, eq=False)
class EarlyUpdate:
    """``S.update()`` between a scaled backward and the ``S.step`` that applies its
    gradients: they were scaled with the scale the update just changed."""

    update: ScalerCall
    later_step: ScalerCall
    last_step: ScalerCall  # the iteration's last S.step, where the update belongs
    updated_after: bool  # another S.update() already follows the last step
    scaler: str


@dataclass(frozen=True, eq=False)
class ExtraUnscale:
    """``S.unscale_(opt)`` a second time, or after ``S.step(opt)``, before an update."""

    unscale: ScalerCall
    earlier: ScalerCall  # the unscale_ or step of the same optimizer before it
    scaler: str


@dataclass(frozen=True, eq=False)
class ZeroGradBeforeStep:
    """``zero_grad()`` after the backward whose gradients ``S.step`` then applies."""

    zero_grad: cst.Call
    step: ScalerCall
    scaler: str


def _between(use: ScalerUse, method: str, first: int, last: int) -> bool:
    """Whether an S.<method> call runs after order `first` and before `last`, on
    their path."""
    return any(
        first < call.order < last
        and use.together(call.order, last)
        and use.together(call.order, first)
        for call in use.calls_of(method)
    )


def find_missing_updates(uses: list[ScalerUse]) -> list[MissingUpdate]:
    found = []
    for use in uses:
        steps = use.calls_of("step")
        for call in steps:
            followed = any(
                later.order > call.order and use.together(later.order, call.order)
                for later in steps + use.calls_of("update")
            )
            if not followed:
                found.append(MissingUpdate(call, use.scaler, use.step.function))
                break  # one finding per step block: the update goes after the last step
    return found


def find_early_updates(uses: list[ScalerUse]) -> list[EarlyUpdate]:
    found = []
    for use in uses:
        steps = use.calls_of("step")
        for update in use.calls_of("update"):
            for step in steps:
                if step.order < update.order or not use.together(step.order, update.order):
                    continue
                backward = use.scaled_before(step.order)
                if backward is not None and backward < update.order:
                    last = max(
                        (s for s in steps if use.together(s.order, update.order)),
                        key=lambda s: s.order,
                    )
                    updated_after = any(
                        call.order > last.order and use.together(call.order, last.order)
                        for call in use.calls_of("update")
                    )
                    found.append(EarlyUpdate(update, step, last, updated_after, use.scaler))
                    break
    return found


def find_extra_unscales(uses: list[ScalerUse]) -> list[ExtraUnscale]:
    found = []
    for use in uses:
        for unscale in use.calls_of("unscale_"):
            earlier = [
                call
                for call in use.calls
                if call.method in ("unscale_", "step")
                and call.optimizer == unscale.optimizer is not None
                and call.order < unscale.order
                and use.together(call.order, unscale.order)
                and not _between(use, "update", call.order, unscale.order)
            ]
            if earlier:
                found.append(ExtraUnscale(unscale, earlier[-1], use.scaler))
    return found


def find_zero_grads_before_step(uses: list[ScalerUse]) -> list[ZeroGradBeforeStep]:
    found = []
    for use in uses:
        steps = use.calls_of("step")
        stepped = {call.optimizer for call in steps}
        for order, statement in enumerate(use.step.statements):
            for call in calls_in_line(statement):
                if method_name(call) != "zero_grad":
                    continue
                target = dotted_name(call.func.value)
                for step in steps:
                    # the optimizer itself, or a model when only one optimizer steps
                    if target != step.optimizer and (
                        len(stepped) > 1 or target is None or looks_like_optimizer(target)
                    ):
                        continue
                    backward = use.scaled_before(step.order)
                    if (
                        backward is not None
                        and backward < order < step.order
                        and use.together(order, step.order)
                    ):
                        found.append(ZeroGradBeforeStep(call, step, use.scaler))
                        break
    return found


@dataclass(frozen=True, eq=False)
class ScalerClosure:
    """``S.step(optimizer, closure)``: GradScaler does not support closures."""

    call: cst.Call
    keyword: bool  # passed as `closure=...`: GradScaler raises on the first step


class _ScalerClosureFinder(Visitor):
    def __init__(self) -> None:
        self.found: list[ScalerClosure] = []
        self._parameters: list[set[str]] = []  # of each enclosing def, innermost last

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._parameters.append({param.name.value for param in node.params.params})

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._parameters.pop()

    def visit_Call(self, node: cst.Call) -> None:
        if method_name(node) != "step" or len(node.args) < 2 or not is_scaler(node.func.value):
            return
        keyword = any(arg.keyword and arg.keyword.value == "closure" for arg in node.args)
        forwarded = node.args[1].value
        if (
            not keyword
            and isinstance(forwarded, cst.Name)
            and self._parameters
            and forwarded.value in self._parameters[-1]
        ):
            return  # a wrapper's `step(self, closure=None)` passing on what it got
        self.found.append(ScalerClosure(node, keyword))


def scaler_closures_analysis() -> Analysis[list[ScalerClosure]]:
    finder = _ScalerClosureFinder()
    return Analysis(finder, lambda: finder.found)
