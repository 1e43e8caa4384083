"""AMP109: checkpoints without the GradScaler's state."""

from __future__ import annotations

import pytest

from amplint.analysis.checkpoints import scaler_key
from tests.helpers import codes_of, dedent, fixed

STEP = """
import torch
def train(model, loader, optimizer, scaler):
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = model(x, y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
{extra}
"""


def _source(extra: str) -> str:
    return dedent(STEP).format(extra=dedent(extra))


@pytest.mark.parametrize(
    "optimizer_key, expected",
    [
        ("optimizer", "scaler"),
        ("optimizer_state_dict", "scaler_state_dict"),
        ("opt_state", "scaler_state"),
        ("optim_sd", "scaler_sd"),
    ],
)
def test_the_scaler_key_is_spelled_like_the_optimizer_key(optimizer_key, expected) -> None:
    assert scaler_key(optimizer_key, set()) == expected
    assert scaler_key(optimizer_key, {expected}) == "grad_" + expected


def test_a_multi_line_checkpoint_gets_the_entry_on_its_own_line() -> None:
    source = _source("""
        def save(model, optimizer, scaler, path):
            state = {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),  # Adam moments
                "epoch": 3,
            }
            torch.save(state, path)
        """)
    assert "AMP109" in codes_of(source)
    result = fixed(source)
    assert (
        '        "optimizer": optimizer.state_dict(),  # Adam moments\n'
        '        "scaler": scaler.state_dict(),\n'
        '        "epoch": 3,\n'
    ) in result
    assert fixed(result) == result
    assert "AMP109" not in codes_of(result)


def test_an_entry_after_the_last_keeps_the_trailing_comma_and_the_comment() -> None:
    source = _source("""
        def save(model, optimizer, scaler, path):
            torch.save(
                {
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),  # Adam moments
                },
                path,
            )
        """)
    result = fixed(source)
    assert (
        '            "optimizer": optimizer.state_dict(),  # Adam moments\n'
        '            "scaler": scaler.state_dict(),\n'
        "        },\n"
    ) in result
    assert fixed(result) == result


def test_a_resume_is_guarded_for_old_checkpoints() -> None:
    source = _source("""
        def resume(model, optimizer, scaler, path):
            ckpt = torch.load(path)
            optimizer.load_state_dict(ckpt['opt_state'])
        """)
    result = fixed(source)
    assert (
        "    optimizer.load_state_dict(ckpt['opt_state'])\n"
        "    if ckpt.get('scaler_state'):\n"
        "        scaler.load_state_dict(ckpt['scaler_state'])\n"
    ) in result
    assert fixed(result) == result


def test_two_optimizers_from_one_checkpoint_restore_the_scaler_once() -> None:
    source = _source("""
        def resume(model, optim_g, optim_d, scaler, path):
            state = torch.load(path)
            optim_g.load_state_dict(state["optim_g"])
            optim_d.load_state_dict(state["optim_d"])
            return state["epoch"]
        """)
    result = fixed(source)
    assert (
        '    optim_d.load_state_dict(state["optim_d"])\n'
        '    if state.get("scaler"):\n'
        '        scaler.load_state_dict(state["scaler"])\n'
        '    return state["epoch"]\n'
    ) in result
    assert result.count("scaler.load_state_dict") == 1
    assert "AMP109" not in codes_of(result)


def test_a_scaler_out_of_reach_is_reported_without_a_fix() -> None:
    source = _source("""
        def save(model, optimizer, path):
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
        """)
    assert "AMP109" in codes_of(source)
    assert fixed(source) == source


@pytest.mark.parametrize(
    "extra",
    [
        # the scaler is saved somewhere already: the module knows its checkpoint
        """
        def save(model, optimizer, scaler, path):
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
            torch.save(scaler.state_dict(), path + ".scaler")
        """,
        # weights only: not a training checkpoint
        """
        def export(model, ema, path):
            torch.save({"model": model.state_dict(), "ema": ema.state_dict()}, path)
        """,
    ],
)
def test_complete_or_weights_only_checkpoints_are_silent(extra: str) -> None:
    assert "AMP109" not in codes_of(_source(extra))


def test_a_module_without_a_scaler_is_silent() -> None:
    source = dedent("""
        import torch
        def save(model, optimizer, path):
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
        """)
    assert "AMP109" not in codes_of(source)


def test_a_resume_before_the_scaler_exists_is_not_rewritten() -> None:
    # the restore would run before `scaler = ...`: a NameError
    source = dedent("""
        import torch
        def main(model, loader, path):
            optimizer = torch.optim.AdamW(model.parameters())
            checkpoint = torch.load(path)
            optimizer.load_state_dict(checkpoint["optimizer"])
            scaler = torch.amp.GradScaler("cuda")
            for x, y in loader:
                with torch.autocast("cuda"):
                    loss = model(x, y)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
        """)
    assert "AMP109" in codes_of(source)
    assert fixed(source) == source


def test_an_init_that_resumes_before_making_its_scaler_is_not_rewritten() -> None:
    source = dedent("""
        import torch
        class Trainer:
            def __init__(self, model, checkpoint):
                self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                self.optimizer.load_state_dict(checkpoint["optimizer"])
                self.scaler = torch.amp.GradScaler("cuda")

            def step(self, loss):
                self.scaler.scale(loss).backward()
                self.scaler.step(self.optimizer)
                self.scaler.update()
        """)
    assert "AMP109" in codes_of(source)
    assert fixed(source) == source
