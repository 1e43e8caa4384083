"""GradScaler calls that run on every micro-step of gradient accumulation.

Under accumulation the optimizer steps once per k backwards, inside a guard
(``if (i + 1) % k == 0:``).  ``S.unscale_(opt)`` and ``S.update()`` belong to
the step, under the same guard: ``unscale_`` run on every micro-step raises on
the second ("unscale_() has already been called on this optimizer since the
last update()"), and ``update`` on a micro-step with no step raises ("No inf
checks were recorded prior to update").  A guard is recognised by its test:
a modulo or a name that says accumulation; anything else is not for a guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst

from amplint.analysis.scaler import ScalerCall, ScalerUse
from amplint.analysis.statements import (
    Condition,
    if_condition,
    statements_in_order,
)

_ACCUMULATION_TEST = re.compile(r"%|accum", re.I)


@dataclass(frozen=True, eq=False)
class PerMicroStep:
    """``S.unscale_`` / ``S.update()`` outside the guard every ``S.step`` is under."""

    call: ScalerCall
    scaler: str
    test: str  # the guard's test, as written
    last_step: ScalerCall  # the last S.step under the guard
    # Where the fix moves the call: the guard's `if` (None: the guard is an
    # early exit, or not the `if` the steps sit in), and for an unscale_ the
    # statements from it up to that `if` (its gradient clipping with it).
    guard: cst.If | None
    moved: tuple[cst.BaseStatement, ...]
    updated_under_guard: bool  # an S.update() already follows the last step there
    # Both unscale_ and update run on every micro-step: nothing raises, but each
    # unscale_ divides the gradients summed so far by the scale once more.
    both_every_microstep: bool


def find_scalers_per_microstep(uses: list[ScalerUse]) -> list[PerMicroStep]:
    found = []
    for use in uses:
        steps = use.calls_of("step")
        if not steps:
            continue
        shared = frozenset.intersection(*(use.step.paths[s.order] for s in steps))
        guards = [condition for condition in shared if _ACCUMULATION_TEST.search(condition[0])]
        if len(guards) != 1:
            continue
        (guard,) = guards
        last = max(steps, key=lambda s: s.order)
        guard_if = _guard_if(use, guard, last)
        updated = any(
            call.order > last.order and guard in use.step.paths[call.order]
            for call in use.calls_of("update")
        )
        every_microstep = [
            call
            for call in use.calls
            if call.method in ("unscale_", "update")
            and guard not in use.step.paths[call.order]
            and use.together(call.order, last.order)
        ]
        both = {call.method for call in every_microstep} == {"unscale_", "update"}
        for call in every_microstep:
            moved = (call.statement,)
            if call.method == "unscale_":
                moved = _run_up_to(use, call, guard_if)
            found.append(
                PerMicroStep(
                    call,
                    use.scaler,
                    guard[0],
                    last,
                    guard_if if moved else None,
                    moved,
                    updated,
                    both,
                )
            )
    return found


def _guard_if(use: ScalerUse, guard: Condition, step: ScalerCall) -> cst.If | None:
    """The `if guard:` whose body holds `step`."""
    test, taken = guard
    if not taken:
        return None  # `if not accumulated: continue`: there is no body to move into
    for statement in use.step.statements:
        if isinstance(statement, cst.If) and if_condition(statement.test) == guard:
            inside = statements_in_order(statement.body.body)
            if any(child is step.statement for _, child, _ in inside):
                return statement
    return None


def _run_up_to(
    use: ScalerUse, unscale: ScalerCall, guard_if: cst.If | None
) -> tuple[cst.BaseStatement, ...]:
    """`S.unscale_(opt)` and the clipping after it, when they lead straight up
    to the guard's `if` in one block; empty otherwise."""
    if guard_if is None:
        return ()
    clips = {id(edit.statement) for edit in use.step.grad_edits}
    for suite in use.step.suites():
        start, end = _index(suite, unscale.statement), _index(suite, guard_if)
        if start is None or end is None:
            continue
        run = tuple(suite[start:end])
        if start < end and all(
            isinstance(statement, cst.SimpleStatementLine)
            and (statement is unscale.statement or id(statement) in clips)
            for statement in run
        ):
            return run
    return ()


def _index(suite, node: cst.CSTNode) -> int | None:
    return next((i for i, statement in enumerate(suite) if statement is node), None)
