"""AMP107: scaler.unscale_ / update on every micro-step of accumulation."""

from __future__ import annotations

from tests.helpers import codes_of, dedent, fixed

TEMPLATE = """
import torch
def train(model, loader, optimizer, criterion, scaler, k=4):
    for i, (x, y) in enumerate(loader):
        with torch.autocast("cuda"):
            loss = criterion(model(x), y) / k
        scaler.scale(loss).backward()
{body}
"""


def _source(body: str) -> str:
    return dedent(TEMPLATE).format(body="\n".join(" " * 8 + line for line in body.splitlines()))


def test_an_update_on_every_micro_step_moves_after_the_step() -> None:
    source = _source(
        "if (i + 1) % k == 0:\n"
        "    scaler.step(optimizer)\n"
        "    optimizer.zero_grad()\n"
        "scaler.update()"
    )
    assert codes_of(source).count("AMP107") == 1
    result = fixed(source)
    assert result.endswith(
        "            scaler.step(optimizer)\n"
        "            scaler.update()\n"
        "            optimizer.zero_grad()\n"
    )
    assert fixed(result) == result
    assert "AMP107" not in codes_of(result)


def test_an_update_already_under_the_guard_is_not_added_twice() -> None:
    source = _source(
        "if (i + 1) % k == 0:\n"
        "    scaler.step(optimizer)\n"
        "    scaler.update()\n"
        "scaler.update()"
    )
    assert "AMP107" in codes_of(source)
    assert fixed(source).count("scaler.update()") == 1


def test_unscale_and_its_clipping_move_to_the_top_of_the_guard() -> None:
    source = _source(
        "scaler.unscale_(optimizer)\n"
        "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
        "if i % args.grad_accum_steps == 0:\n"
        "    scaler.step(optimizer)\n"
        "    scaler.update()"
    )
    assert "AMP107" in codes_of(source)
    result = fixed(source)
    assert (
        "        if i % args.grad_accum_steps == 0:\n"
        "            scaler.unscale_(optimizer)\n"
        "            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
        "            scaler.step(optimizer)\n"
    ) in result
    assert fixed(result) == result


def test_unscale_away_from_the_guard_is_only_reported() -> None:
    source = _source(
        "scaler.unscale_(optimizer)\n"
        "log(loss)\n"
        "if (i + 1) % k == 0:\n"
        "    scaler.step(optimizer)\n"
        "    scaler.update()"
    )
    assert "AMP107" in codes_of(source)
    assert fixed(source) == source


def test_guards_that_are_not_accumulation_are_left_alone() -> None:
    # a step that depends on a warm-up flag: not a micro-step boundary
    source = _source(
        "scaler.unscale_(optimizer)\n"
        "if not warming_up:\n"
        "    scaler.step(optimizer)\n"
        "scaler.update()"
    )
    assert "AMP107" not in codes_of(source)


def test_every_call_under_the_guard_is_silent() -> None:
    source = _source(
        "if (i + 1) % k == 0:\n"
        "    scaler.unscale_(optimizer)\n"
        "    scaler.step(optimizer)\n"
        "    scaler.update()\n"
        "if i % 100 == 0:\n"
        "    print(loss.item())"
    )
    assert "AMP107" not in codes_of(source)
