"""AMP111: float16 casts by hand next to autocast."""

from __future__ import annotations

import pytest

from tests.helpers import codes_of, dedent, fixed

TEMPLATE = """
import torch
def train(model, loader, optimizer, device):
{setup}
    for x, y in loader:
{prepare}
        with torch.autocast("cuda"):
            loss = model(x, y)
        loss.backward()
        optimizer.step()
"""


def _source(setup: str = "pass", prepare: str = "pass") -> str:
    return dedent(TEMPLATE).format(setup="    " + setup, prepare="        " + prepare)


@pytest.mark.parametrize(
    "setup, prepare, expected_setup, expected_prepare",
    [
        ("model.half()", "pass", None, "pass"),  # a statement left empty goes
        ("model = model.cuda().half()", "pass", "model = model.cuda()", "pass"),
        ("pass", "x = x.to(device, torch.float16)", "pass", "x = x.to(device)"),
        ("pass", "x = x.to(device, dtype=torch.half)", "pass", "x = x.to(device)"),
        ("pass", "x = x.to(torch.float16)", "pass", None),
        ("pass", "x = x.half()", "pass", None),
    ],
)
def test_the_cast_is_found_and_the_unsafe_fix_takes_it_out(
    setup, prepare, expected_setup, expected_prepare
) -> None:
    source = _source(setup, prepare)
    assert "AMP111" in codes_of(source)
    assert fixed(source) == fixed(source, unsafe=False)
    assert setup in fixed(source) and prepare in fixed(source)  # reported only
    result = fixed(source, unsafe=True)
    for original, expected in ((setup, expected_setup), (prepare, expected_prepare)):
        if original != "pass":
            assert original not in result
        if expected not in (None, "pass"):
            assert expected in result
    assert "AMP111" not in codes_of(result)
    assert fixed(result, unsafe=True) == result


@pytest.mark.parametrize(
    "setup, prepare",
    [
        ("pass", "if half: x = x.half()"),  # the author's switch
        ("other = other.half()", "pass"),  # not read by the region
        ("pass", "x = x.to(device)"),  # no dtype
        ("pass", "x = x.to(device, torch.bfloat16)"),  # not float16
    ],
)
def test_casts_that_are_choices_or_elsewhere_are_silent(setup: str, prepare: str) -> None:
    assert "AMP111" not in codes_of(_source(setup, prepare))


def test_a_cast_after_the_region_is_of_its_results() -> None:
    source = _source().replace(
        "        loss.backward()", "        x = x.half()\n        loss.backward()"
    )
    assert "AMP111" not in codes_of(source)


def test_a_step_without_autocast_is_silent() -> None:
    source = _source("model.half()").replace('with torch.autocast("cuda"):', "if True:")
    assert "AMP111" not in codes_of(source)
