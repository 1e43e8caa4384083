"""Shrinks a failing shape to the fewest idioms that still fail the same way."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from tests.shapes.grammar import Shape, render, simpler
from tests.shapes.oracles import Failure, judge

# Names, numbers and quoted code vary from program to program; the class of a
# failure is its oracle and the words around them.
_VARYING = re.compile(r"`[^`]*`|'[^']*'|\b\d[\d.e+-]*x?\b")


def failure_class(failure: Failure) -> str:
    """The oracle and its message with names and numbers left out: one class."""
    detail = _VARYING.sub("_", failure.detail.splitlines()[0] if failure.detail else "")
    return f"{failure.oracle}: {detail[:160]}"


def shrink(shape: Shape, key: str, rounds: int = 12) -> Shape:
    """Greedily move `shape` one idiom at a time toward the default while it
    still fails with class `key`; each round judges its candidates in one batch."""
    for _ in range(rounds):
        candidates = simpler(shape)
        if not candidates:
            return shape
        with tempfile.TemporaryDirectory(prefix="amplint-shrink-") as scratch:
            verdicts = judge([render(candidate) for candidate in candidates], Path(scratch))
        failing = [
            judged.program.shape
            for judged in verdicts
            if any(failure_class(failure) == key for failure in judged.failures)
        ]
        if not failing:
            return shape
        shape = failing[0]
    return shape
