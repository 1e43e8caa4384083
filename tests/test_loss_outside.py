"""AMP110: the loss computed after the autocast block, from its outputs."""

from __future__ import annotations

import pytest

from tests.helpers import codes_of, dedent, fixed

TEMPLATE = """
import torch
import torch.nn.functional as F
def train(model, loader, optimizer, scaler, criterion):
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
{inside}
{after}
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
"""


def _source(inside: str, after: str) -> str:
    indent = lambda lines: "\n".join(" " * 12 + line for line in lines.splitlines())  # noqa
    after_lines = "\n".join(" " * 8 + line for line in after.splitlines())
    return dedent(TEMPLATE).format(inside=indent(inside), after=after_lines)


def test_the_loss_and_what_it_reads_move_into_the_block() -> None:
    source = _source(
        "out = model(x)", "logits = head(out)\n# the loss\nloss = criterion(logits, y)"
    )
    assert "AMP110" in codes_of(source)
    assert fixed(source) == source  # unsafe: not without --unsafe-fixes
    result = fixed(source, unsafe=True)
    assert (
        "            out = model(x)\n"
        "            logits = head(out)\n"
        "            # the loss\n"
        "            loss = criterion(logits, y)\n"
        "        scaler.scale(loss).backward()\n"
    ) in result
    assert fixed(result, unsafe=True) == result
    assert "AMP110" not in codes_of(result)


@pytest.mark.parametrize(
    "inside, after",
    [
        ("outputs = model(x, labels=y)", "loss = outputs.loss"),  # HF: loss in the forward
        ("out = model(x)\nloss = criterion(out, y)", "loss = loss / 4"),  # arithmetic only
        ("logits = model(x)", "loss = F.cross_entropy(logits.float(), y)"),  # float32 on purpose
        ("logits = model(x)", "loss = criterion(logits.to(torch.float32), y)"),
        ("logits = model(x)", "aux = criterion(logits, y)\nloss = model.reg()"),  # not from it
    ],
)
def test_losses_that_belong_where_they_are_are_silent(inside: str, after: str) -> None:
    assert "AMP110" not in codes_of(_source(inside, after))


def test_a_module_with_bce_keeps_its_loss_outside() -> None:
    source = _source("probs = model(x).sigmoid()", "loss = F.binary_cross_entropy(probs, y)")
    assert "AMP110" not in codes_of(source)


def test_a_disabled_region_is_not_autocast() -> None:
    source = _source("logits = model(x)", "loss = criterion(logits, y)").replace(
        "dtype=torch.float16", "enabled=False"
    )
    assert "AMP110" not in codes_of(source)


def test_a_backward_between_the_block_and_the_loss_stops_the_search() -> None:
    source = dedent("""
        import torch
        def train(model, loader, optimizer, criterion):
            for x, y in loader:
                with torch.autocast("cpu"):
                    first = model(x)
                loss = criterion(first, y)
                aux.backward()
                loss = criterion(first, y)
                loss.backward()
                optimizer.step()
        """)
    assert "AMP110" in codes_of(source)
    assert codes_of(source).count("AMP110") == 1
