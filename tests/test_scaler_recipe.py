"""AMP104 (update missing or early), AMP108 (double unscale), AMP113 (zero_grad
before the scaler step), AMP115 (scaler.step with a closure)."""

from __future__ import annotations

import textwrap

import pytest

from tests.helpers import codes_of, dedent, fixed

HEAD = """
import torch
for x, y in loader:
    with torch.autocast("cuda"):
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()
"""


def _loop(tail: str) -> str:
    return dedent(HEAD) + textwrap.indent(dedent(tail), "    ")


# -- AMP104 -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("scaler.step(optimizer)\n", "scaler.step(optimizer)\nscaler.update()\n"),
        (
            "if (i + 1) % accumulation == 0:\n"
            "    scaler.step(optimizer)\n"
            "    optimizer.zero_grad()\n",
            "if (i + 1) % accumulation == 0:\n"
            "    scaler.step(optimizer)\n"
            "    scaler.update()\n"
            "    optimizer.zero_grad()\n",
        ),
        (
            "scaler.step(opt_d)\nscaler.step(opt_g)\nlog(loss)\n",
            "scaler.step(opt_d)\nscaler.step(opt_g)\nscaler.update()\nlog(loss)\n",
        ),
    ],
)
def test_a_missing_update_goes_after_the_last_step(before: str, after: str) -> None:
    assert codes_of(_loop(before)) == ["AMP104"]
    assert fixed(_loop(before)) == _loop(after)
    assert fixed(_loop(after)) == _loop(after)


def test_an_update_anywhere_else_in_the_module_silences_it() -> None:
    # the caller, or another method, may update once per iteration
    source = _loop("scaler.step(optimizer)\n") + "\ndef end_of_iteration():\n    scaler.update()\n"
    assert "AMP104" not in codes_of(source)


def test_an_update_of_another_functions_own_scaler_does_not_count() -> None:
    # Per scaler, not per module: `finetune` makes its own scaler and never
    # lets it out, so `pretrain`'s update of its own `scaler` is not this one's.
    source = dedent("""
        import torch


        def pretrain(model, loader, optimizer):
            scaler = torch.amp.GradScaler("cuda")
            for x in loader:
                with torch.autocast("cuda"):
                    loss = model(x).mean()
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()


        def finetune(model, loader, optimizer):
            scaler = torch.amp.GradScaler("cuda")
            for x in loader:
                with torch.autocast("cuda"):
                    loss = model(x).mean()
                scaler.scale(loss).backward()
                scaler.step(optimizer)
        """)
    assert codes_of(source) == ["AMP104"]
    assert fixed(source).count("scaler.update()") == 2
    # Handed to a helper, the scaler may be updated there: not for a guess.
    escaped = source.replace(
        "scaler.step(optimizer)\n", "scaler.step(optimizer)\n        end(scaler)\n"
    )
    assert "AMP104" not in codes_of(escaped)


def test_an_update_between_backward_and_step_moves_after_the_last_step() -> None:
    source = dedent("""
        import torch
        for x in loader:
            with torch.autocast("cuda"):
                d_loss, g_loss = losses(model(x))
            scaler.scale(d_loss).backward(retain_graph=True)
            scaler.scale(g_loss).backward()
            scaler.step(opt_d)
            scaler.update()
            scaler.step(opt_g)
        """)
    assert codes_of(source) == ["AMP104"]
    assert fixed(source) == source.replace(
        "    scaler.update()\n    scaler.step(opt_g)\n",
        "    scaler.step(opt_g)\n    scaler.update()\n",
    )


def test_an_early_update_before_another_one_is_removed() -> None:
    # the update after the last step is there already: only the early one goes
    source = dedent("""
        import torch
        for x in loader:
            with torch.autocast("cuda"):
                d_loss, g_loss = losses(model(x))
            scaler.scale(d_loss).backward(retain_graph=True)
            scaler.scale(g_loss).backward()
            scaler.step(opt_d)
            scaler.update()
            scaler.step(opt_g)
            scaler.update()
        """)
    assert codes_of(source) == ["AMP104"]
    assert fixed(source) == source.replace(
        "    scaler.update()\n    scaler.step(opt_g)", "    scaler.step(opt_g)"
    )


@pytest.mark.parametrize(
    "source",
    [
        # the recipe
        HEAD + "    scaler.step(optimizer)\n    scaler.update()\n",
        # a GAN updating after each of its optimizers: each backward runs after the
        # update before it, so every gradient is divided by the scale it was multiplied by
        """
        import torch
        for x in loader:
            with torch.autocast("cuda"):
                d_loss = critic(x)
            scaler.scale(d_loss).backward()
            scaler.step(opt_d)
            scaler.update()
            with torch.autocast("cuda"):
                g_loss = -critic(generator(z)).mean()
            scaler.scale(g_loss).backward()
            scaler.step(opt_g)
            scaler.update()
        """,
        # update on the other path
        HEAD + "    if scaler is not None:\n        scaler.step(optimizer)\n"
        "        scaler.update()\n    else:\n        optimizer.step()\n",
    ],
)
def test_update_silent(source: str) -> None:
    assert "AMP104" not in codes_of(dedent(source))


# -- AMP108 -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "extra",
    [
        "scaler.unscale_(optimizer)\nclip(model)\nscaler.unscale_(optimizer)\n",
        "scaler.unscale_(optimizer)\nscaler.unscale_(optimizer)  # to be sure\n",
    ],
)
def test_a_second_unscale_is_removed(extra: str) -> None:
    source = _loop(extra + "scaler.step(optimizer)\nscaler.update()\n")
    assert codes_of(source) == ["AMP108"]
    result = fixed(source)
    assert result.count("unscale_") == 1
    assert fixed(result) == result


def test_an_unscale_after_the_step_is_removed() -> None:
    source = _loop("scaler.step(optimizer)\nscaler.unscale_(optimizer)\nscaler.update()\n")
    assert codes_of(source) == ["AMP108"]
    assert fixed(source) == _loop("scaler.step(optimizer)\nscaler.update()\n")


def test_an_unscale_under_a_comment_is_reported_not_removed() -> None:
    source = _loop(
        "scaler.unscale_(optimizer)\n# unscale again for the clip\n"
        "scaler.unscale_(optimizer)\nscaler.step(optimizer)\nscaler.update()\n"
    )
    assert codes_of(source) == ["AMP108"]
    assert fixed(source) == source


@pytest.mark.parametrize(
    "tail",
    [
        # one per optimizer
        "scaler.unscale_(opt_a)\nscaler.unscale_(opt_b)\nscaler.step(opt_a)\n"
        "scaler.step(opt_b)\nscaler.update()\n",
        # the two are on different paths
        "if clip:\n    scaler.unscale_(optimizer)\n    clip_all()\nelse:\n"
        "    scaler.unscale_(optimizer)\nscaler.step(optimizer)\nscaler.update()\n",
        # an update between: a new iteration of the scaler
        "scaler.unscale_(optimizer)\nscaler.step(optimizer)\nscaler.update()\n"
        "scaler.unscale_(optimizer)\n",
    ],
)
def test_unscale_silent(tail: str) -> None:
    assert "AMP108" not in codes_of(_loop(tail))


# -- AMP113 -----------------------------------------------------------------------
@pytest.mark.parametrize("clear", ["optimizer.zero_grad()", "model.zero_grad(set_to_none=True)"])
def test_zero_grad_between_backward_and_step_is_reported(clear: str) -> None:
    source = _loop(f"{clear}\nscaler.step(optimizer)\nscaler.update()\n")
    assert codes_of(source) == ["AMP113"]
    assert fixed(source) == source


@pytest.mark.parametrize(
    "source",
    [
        HEAD + "    scaler.step(optimizer)\n    scaler.update()\n    optimizer.zero_grad()\n",
        # a GAN clearing the generator before its own backward
        """
        import torch
        for x in loader:
            with torch.autocast("cuda"):
                d_loss = critic(x)
            scaler.scale(d_loss).backward()
            opt_g.zero_grad()
            scaler.step(opt_d)
            with torch.autocast("cuda"):
                g_loss = -critic(generator(z)).mean()
            scaler.scale(g_loss).backward()
            scaler.step(opt_g)
            scaler.update()
        """,
        # another optimizer's zero_grad with one scaler-stepped optimizer
        HEAD + "    aux_optimizer.zero_grad()\n    scaler.step(optimizer)\n    scaler.update()\n",
    ],
)
def test_zero_grad_silent(source: str) -> None:
    assert "AMP113" not in codes_of(dedent(source))


# -- AMP115 -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "call", ["scaler.step(optimizer, closure)", "self.grad_scaler.step(opt, closure=closure)"]
)
def test_a_closure_through_the_scaler_is_reported(call: str) -> None:
    source = (
        "def train(optimizer, opt, scaler):\n"
        "    def closure():\n        return scaler.scale(loss()).backward()\n"
        f"    {call}\n"
    )
    assert codes_of(source) == ["AMP115"]


@pytest.mark.parametrize(
    "source",
    [
        "scaler.step(optimizer)\n",
        "optimizer.step(closure)\n",  # no scaler
        "env.step(action, render)\n",
        "scheduler.step(epoch, metrics)\n",
        # an optimizer wrapper forwarding the closure its caller gave (usually None)
        "class Wrapped:\n    def step(self, closure=None):\n"
        "        self.scaler.step(self.optimizer, closure)\n",
    ],
)
def test_closure_silent(source: str) -> None:
    assert "AMP115" not in codes_of(source)
