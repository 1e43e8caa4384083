"""AMP103: which optimizer steps bypass the scaler, and how they are rerouted."""

from __future__ import annotations

import pytest

from tests.helpers import codes_of, dedent, fixed

SCALED = """
import torch
for x, y in loader:
    with torch.autocast("cuda"):
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()
"""


def test_an_existing_update_is_not_added_twice() -> None:
    source = dedent(SCALED) + "    optimizer.step()\n    scaler.update()\n"
    assert fixed(source) == dedent(SCALED) + "    scaler.step(optimizer)\n    scaler.update()\n"


def test_two_optimizers_get_one_update_after_the_last() -> None:
    source = dedent(SCALED) + "    opt_d.step()\n    opt_g.step()\n"
    assert fixed(source) == dedent(SCALED) + (
        "    scaler.step(opt_d)\n    scaler.step(opt_g)\n    scaler.update()\n"
    )


@pytest.mark.parametrize(
    "tail",
    [
        "    scaler.step(optimizer)\n    scaler.update()\n",  # correct
        "    optimizer.step(closure)\n",  # a closure: AMP115's business
        "    scheduler.step()\n    scaler.step(optimizer)\n    scaler.update()\n",
    ],
)
def test_silent(tail: str) -> None:
    assert "AMP103" not in codes_of(dedent(SCALED) + tail)


def test_unscaled_backward_is_not_this_rule() -> None:
    source = dedent(SCALED).replace("scaler.scale(loss).backward()", "loss.backward()")
    assert "AMP103" not in codes_of(source + "    optimizer.step()\n")


def test_stepped_twice_is_reported_without_a_fix() -> None:
    source = (
        dedent(SCALED) + "    scaler.step(optimizer)\n    optimizer.step()\n    scaler.update()\n"
    )
    assert codes_of(source) == ["AMP103"]
    assert fixed(source) == source
