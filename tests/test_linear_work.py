"""Work grows linearly with the training functions in a file: the suite counts
it (nodes our walks visit, nodes turned back into text) instead of timing it.

A walk of the whole module per finding made a file of 1,000 FP32 training
functions take minutes (100: 2.9 s, 400: 28 s): the scaler placement walked
the module once per step, and module-wide text searches ran once per step.
"""

from __future__ import annotations

import libcst as cst
import pytest

from amplint.analysis import visitor
from amplint.config import Settings
from amplint.engine import fix_text, lint_text
from tests.helpers import ALL, training_functions


class _CountingFields(dict):
    """visitor._CHILD_FIELDS, counting the nodes whose children are asked for."""

    visits = 0

    def get(self, key, default=None):
        type(self).visits += 1
        return super().get(key, default)


def _work(text: str, monkeypatch: pytest.MonkeyPatch, fixing: bool) -> tuple[int, int]:
    _CountingFields.visits = 0
    monkeypatch.setattr(visitor, "_CHILD_FIELDS", _CountingFields(visitor._CHILD_FIELDS))
    generated = [0]
    original = cst.Module.code_for_node

    def counting(self, node):
        generated[0] += 1
        return original(self, node)

    monkeypatch.setattr(cst.Module, "code_for_node", counting)
    if fixing:
        fix_text(text, ALL, Settings(), False)
    else:
        assert len(lint_text(text, ALL, Settings())) == text.count("def train_")
    return _CountingFields.visits, generated[0]


@pytest.mark.parametrize("fixing", [False, True], ids=["check", "fix"])
@pytest.mark.parametrize(
    "small, large", [(25, 100), pytest.param(100, 1_000, marks=pytest.mark.slow)]
)
def test_the_work_grows_linearly_with_the_training_functions(
    monkeypatch: pytest.MonkeyPatch, fixing: bool, small: int, large: int
) -> None:
    """`large / small` times the functions: as many times the work, and one
    more to spare; a walk per finding squares it.  1,000 functions is the size
    the issue named (about 3 s to check and 12 s to fix here): slow suite."""
    small_visits, small_text = _work(training_functions(small), monkeypatch, fixing)
    large_visits, large_text = _work(training_functions(large), monkeypatch, fixing)
    bound = large // small + 1
    assert large_visits <= bound * small_visits, (small_visits, large_visits)
    assert large_text <= bound * small_text, (small_text, large_text)
