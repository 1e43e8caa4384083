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


# -- AMP119: a half model, no autocast, a GradScaler ------------------------------
HALF_WITH_SCALER = dedent("""
    import torch


    def main(loader, fp16):
        model = torch.nn.Linear(4, 2)
        {cast}
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cuda")
        for x, y in loader:
            scaler.scale(torch.nn.functional.mse_loss(model(x), y)).backward()
            scaler.step(optimizer)
            scaler.update()
        {after}
""")


@pytest.mark.parametrize(
    ("cast", "after", "codes"),
    [
        ("model.half()", "", ["AMP119"]),
        ("model = model.to(dtype=torch.float16)", "", ["AMP119"]),
        ("model.to(torch.bfloat16)", "", []),  # bfloat16 gradients unscale fine
        ("if fp16: model.half()", "", []),  # the author's switch
        ("", "model.half()", []),  # after training, in the same function
        ("", "export = model.half()", []),
        ("data = torch.zeros(3).half()", "", []),  # not the model
    ],
)
def test_a_half_model_under_a_scaler(cast: str, after: str, codes: list[str]) -> None:
    text = HALF_WITH_SCALER.format(cast=cast, after=after)
    assert [c for c in codes_of(text) if c in ("AMP111", "AMP119")] == codes


def test_amp111_keeps_the_cast_an_autocast_region_reads() -> None:
    text = HALF_WITH_SCALER.format(cast="model.half()", after="").replace(
        "scaler.scale(torch.nn.functional.mse_loss(model(x), y)).backward()",
        'with torch.autocast("cuda"):\n'
        "            loss = torch.nn.functional.mse_loss(model(x), y)\n"
        "        scaler.scale(loss).backward()",
    )
    assert "AMP119" not in codes_of(text) and "AMP111" in codes_of(text)
