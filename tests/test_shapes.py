"""Generated training scripts (tests/shapes/): every `check` and `fix` holds every
oracle, or fails in one of the open classes that tests/shapes/known.py names.

`make shapes` runs the long form (`N=20000`); the suite runs SUITE_PROGRAMS of
them, drawn from a fixed seed so that a failure reproduces.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tests.shapes.grammar import FAMILIES, Shape, random_shape, render
from tests.shapes.known import OPEN, OpenClass, expected
from tests.shapes.oracles import judge
from tests.shapes.shrink import failure_class

# Runs programs under torch: seconds.
pytestmark = pytest.mark.slow

SUITE_PROGRAMS = int(os.environ.get("AMPLINT_SHAPES", "300"))


def test_generated_programs_hold_every_oracle(tmp_path: Path) -> None:
    rng = random.Random(20261126)
    programs = [render(random_shape(rng)) for _ in range(SUITE_PROGRAMS)]
    verdicts = judge(programs, tmp_path)
    surprises = [
        f"{failure} in {judged.program.shape.as_json()}"
        for judged in verdicts
        for failure in judged.failures
        if not expected(failure_class(failure), judged.program.shape)
    ]
    assert not surprises, "\n".join(surprises[:10])
    assert sum(judged.rewrites for judged in verdicts) > SUITE_PROGRAMS  # it tested rewrites


@pytest.mark.parametrize("open_class", OPEN, ids=lambda c: f"{c.family}={c.value}")
def test_each_open_class_still_fails(open_class: OpenClass, tmp_path: Path) -> None:
    """An open class that stopped failing comes off the list (fixed, with a
    fixture of its own); one that fails differently is a new class."""
    (judged,) = judge([render(open_class.shrunk)], tmp_path)
    assert open_class.key in {failure_class(failure) for failure in judged.failures}


def test_every_idiom_renders_a_program_that_runs(tmp_path: Path) -> None:
    """The grammar itself: each idiom of each family, in a shape otherwise
    default (or the nearest that goes with it), runs as written."""
    shapes = []
    for family, options in FAMILIES.items():
        for option in options:
            shape = Shape(**{family: option})
            if shape.problems:
                shape = _nearest_valid(shape)
            shapes.append(shape)
    verdicts = judge([render(shape) for shape in shapes], tmp_path)
    broken = [
        f"{failure} in {judged.program.shape.as_json()}"
        for judged in verdicts
        for failure in judged.failures
        if failure.settings == "original"
    ]
    assert not broken, "\n".join(broken)


def _nearest_valid(shape: Shape) -> Shape:
    """`shape` with placements tried until its idioms go together."""
    for placement in FAMILIES["placement"]:
        candidate = Shape(**{**shape.__dict__, "placement": placement})
        if not candidate.problems:
            return candidate
    raise AssertionError(f"no placement goes with {shape}")
