"""The work a run does, counted instead of timed: a guard that does not depend
on the machine.

For a fixed set of files, `check` and `fix` are run in this process and four
things counted: walks of a tree by our visitors, nodes those walks visit,
nodes turned back into text (libcst's code generator), and parses.  Each count
is pinned in tests/golden/work_counts.json; a change that makes any of them
more than half again as large fails here, with the file and the count
(AMPLINT_UPDATE_GOLDEN=1 pins the new counts, for a change that means to).
The bench (`make bench`) stays a benchmark.
"""

from __future__ import annotations

import json
import os

import libcst as cst
import pytest
from libcst._nodes.base import CSTNode

from amplint.analysis import visitor
from amplint.analysis.visitor import Visitor
from amplint.config import Settings
from amplint.engine import fix_text, lint_text
from tests.helpers import ALL, FIXTURES, REPO, training_functions

PINNED = REPO / "tests" / "golden" / "work_counts.json"
GENERATED = "(generated) 40 training functions"
# Training scripts of several kinds, an apex program, a module of many steps.
FILES = [
    "fp32_steps/nested_loops.py",
    "fp32_steps/gan.py",
    "fp32_steps/huggingface_style.py",
    "fp32_steps/grad_accumulation.py",
    "amp_misuse/clip_before_unscale.py",
    "amp_misuse/half_model_scaler.py",
    "deprecated_amp/legacy_train.py",
    "apex/apex_trainer/train.py",
    "frameworks/accelerate_glue.py",
    GENERATED,
]
# More than this times the pinned count fails.
GROWTH = 1.5


class _Counts:
    """A node visited by several visitors walking together counts once."""

    def __init__(self) -> None:
        self.walks = self.nodes = self.codegen = self.parses = 0
        self._walking = 0


def _counted(monkeypatch: pytest.MonkeyPatch) -> _Counts:
    counts = _Counts()

    def traversal(function):
        """`function` (a visitor's walk, or one node of a shared walk),
        counting each node it visits and each walk it starts."""

        def counted(*args):
            counts.nodes += 1
            counts.walks += counts._walking == 0
            counts._walking += 1
            try:
                return function(*args)
            finally:
                counts._walking -= 1

        return counted

    def counting(function, what: str):
        def counted(*args, **kwargs):
            setattr(counts, what, getattr(counts, what) + 1)
            return function(*args, **kwargs)

        return counted

    monkeypatch.setattr(Visitor, "walk", traversal(Visitor.walk))
    # A shared walk (visitor.walk_together) visits each node in `_together`.
    monkeypatch.setattr(visitor, "_together", traversal(visitor._together))
    monkeypatch.setattr(CSTNode, "_codegen", counting(CSTNode._codegen, "codegen"))
    monkeypatch.setattr(cst, "parse_module", counting(cst.parse_module, "parses"))
    return counts


def _measure(path: str, mode: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    if path == GENERATED:
        text = training_functions(40)
    else:
        text = (FIXTURES / path).read_text(encoding="utf-8")
    with monkeypatch.context() as patch:
        counts = _counted(patch)
        if mode == "fix":
            fix_text(text, ALL, Settings(), unsafe=True)
        else:
            lint_text(text, ALL, Settings())
    return {
        "walks": counts.walks,
        "nodes": counts.nodes,
        "codegen": counts.codegen,
        "parses": counts.parses,
    }


def test_the_work_stays_within_half_again_of_the_pinned_counts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    measured = {
        path: {mode: _measure(path, mode, monkeypatch) for mode in ("check", "fix")}
        for path in FILES
    }
    assert all(measured[path]["check"]["walks"] for path in FILES)  # the counters count
    if os.environ.get("AMPLINT_UPDATE_GOLDEN"):
        PINNED.write_text(json.dumps(measured, indent=1, sort_keys=True) + "\n")
    pinned = json.loads(PINNED.read_text())
    grown = [
        f"{path} {mode} {what}: {count:,} against {pinned[path][mode][what]:,} pinned"
        for path in FILES
        for mode, counts in measured[path].items()
        for what, count in counts.items()
        if count > GROWTH * max(pinned[path][mode][what], 1)
    ]
    assert not grown, "\n".join(grown)


def test_the_guard_catches_a_walk_per_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the guard is for: one more walk of the module per finding (the
    shape of the quadratic scaler placement) multiplies the nodes visited."""
    path = GENERATED
    honest = _measure(path, "check", monkeypatch)
    from amplint.rules import fp32_step

    diagnostic = fp32_step.FP32TrainingStep._diagnostic

    class Looking(Visitor):
        pass

    def walking(self, step, facts, settings):
        Looking().walk(facts.module)
        return diagnostic(self, step, facts, settings)

    monkeypatch.setattr(fp32_step.FP32TrainingStep, "_diagnostic", walking)
    wasteful = _measure(path, "check", monkeypatch)
    assert wasteful["nodes"] > GROWTH * honest["nodes"], (honest, wasteful)


def test_every_pinned_file_is_there() -> None:
    assert all((FIXTURES / path).is_file() for path in FILES if path != GENERATED)
    assert sorted(json.loads(PINNED.read_text())) == sorted(FILES)
