"""AMP103: which optimizer steps bypass the scaler, and how they are rerouted."""

from __future__ import annotations

import pytest

from tests.helpers import codes_of, dedent, findings_of, fixed

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


# -- AMP105 -----------------------------------------------------------------------
STEPPED = """
import torch
for x, y in loader:
    with torch.autocast("cuda"):
        loss = criterion(model(x), y)
    {backward}
    self.grad_scaler.step(optimizer)
    self.grad_scaler.update()
"""


@pytest.mark.parametrize(
    ("backward", "scaled"),
    [
        ("loss.backward()", "self.grad_scaler.scale(loss).backward()"),
        ("(loss / 4).backward()", "self.grad_scaler.scale(loss / 4).backward()"),
        (
            "loss.backward(retain_graph=True)",
            "self.grad_scaler.scale(loss).backward(retain_graph=True)",
        ),
    ],
)
def test_unscaled_backward_is_scaled(backward: str, scaled: str) -> None:
    source = dedent(STEPPED.format(backward=backward))
    assert codes_of(source) == ["AMP105"]
    assert fixed(source) == dedent(STEPPED.format(backward=scaled))


@pytest.mark.parametrize(
    "source",
    [
        STEPPED.format(backward="self.grad_scaler.scale(loss).backward()"),
        # no scaler step: AMP001's business
        "for x, y in loader:\n    loss = f(model(x))\n    loss.backward()\n    optimizer.step()\n",
        # two scalers stepping: which one is meant is a guess
        "for x in loader:\n    loss = model(x)\n    loss.backward()\n"
        "    scaler_a.step(opt_a)\n    scaler_b.step(opt_b)\n",
    ],
)
def test_unscaled_backward_silent(source: str) -> None:
    assert "AMP105" not in codes_of("import torch\n" + dedent(source))


# -- both paths in one loop: `if scaler is not None: ... else: ...` ---------------
DUAL_PATH = """
import torch
for x, y in loader:
    with torch.autocast("cuda", enabled=scaler is not None):
        loss = criterion(model(x), y)
    if {test}:
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    {otherwise}:
        loss.backward()
        optimizer.step()
"""


@pytest.mark.parametrize(
    ("test", "otherwise"),
    [
        ("scaler is not None", "else"),
        ("scaler is not None", "elif scaler is None"),
        ("not (scaler is None)", "else"),
        ("args.amp", "elif not args.amp"),
        ("args.amp", "elif args.debug:\n        pass\n    else"),
    ],
)
def test_branches_of_one_test_are_never_paired(test: str, otherwise: str) -> None:
    assert codes_of(dedent(DUAL_PATH.format(test=test, otherwise=otherwise))) == []


def test_the_same_test_twice_splits_the_paths() -> None:
    source = """
    import torch
    def train_step(self, batch):
        loss = self.model(**batch).loss
        if self.use_amp:
            self.scaler.scale(loss).backward()
        else:
            loss.backward()
        if self.use_amp:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
    """
    assert codes_of(dedent(source)) == []


def test_another_test_does_not_split_the_paths() -> None:
    source = dedent(DUAL_PATH.format(test="scaler is not None", otherwise="if args.debug"))
    assert codes_of(source) == ["AMP105", "AMP103"]


def test_a_shared_step_after_a_guarded_scaled_backward_is_reported_not_rewritten() -> None:
    # `scaler.step(optimizer)` would break the path where `scaler` is None
    source = dedent("""
        import torch
        for x, y in loader:
            with torch.autocast("cuda", enabled=scaler is not None):
                loss = criterion(model(x), y)
            if scaler is not None:
                scaler.scale(loss).backward()
            else:
                loss.backward()
            optimizer.step()
        """)
    assert codes_of(source) == ["AMP103"]
    assert fixed(source) == source


def test_a_shared_backward_before_a_guarded_scaler_step_is_reported_not_rewritten() -> None:
    source = dedent("""
        import torch
        for x, y in loader:
            with torch.autocast("cuda", enabled=scaler is not None):
                loss = criterion(model(x), y)
            loss.backward()
            if scaler is not None:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
        """)
    assert codes_of(source) == ["AMP105"]
    assert fixed(source) == source


@pytest.mark.parametrize("exit_", ["continue", "break", "raise RuntimeError('fp32')"])
def test_an_early_exit_splits_the_paths(exit_: str) -> None:
    source = f"""
    import torch
    for x, y in loader:
        with torch.autocast("cuda", enabled=scaler is not None):
            loss = criterion(model(x), y)
        if scaler is None:  # plain fp32 path
            loss.backward()
            optimizer.step()
            {exit_}
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    """
    assert codes_of(dedent(source)) == []
    # without the exit both paths run in one iteration
    assert codes_of(dedent(source.replace(exit_, "pass"))) == ["AMP105", "AMP103"]


SECOND_STEP_AFTER = """
import torch


def train(model, loader, optimizer, scaler):
    for x, y in loader:
        with torch.autocast("cpu", dtype=torch.float16):
            loss = torch.nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        optimizer.step()
        scaler.update()
        optimizer.zero_grad()
"""


def test_a_second_step_after_the_scaler_s_says_what_it_does() -> None:
    """After `scaler.step(optimizer)` the gradients are unscaled already: the
    harm of a second `optimizer.step()` is the second update (and one applied
    on a step the scaler skipped), not scaled gradients, which the message
    said (issue 60).  Shown by running it: SGD moves the weights twice."""
    (finding,) = [d for d in findings_of(dedent(SECOND_STEP_AFTER)) if d.code == "AMP103"]
    assert finding.message == (
        "`optimizer.step()` steps `optimizer` a second time, after `scaler.step(optimizer)`: "
        "the same gradients, which the scaler unscaled, are applied twice, and on a step the "
        "scaler skipped for inf/NaN they are applied anyway; remove it"
    )
    torch = pytest.importorskip("torch")
    namespace: dict = {}
    exec(dedent(SECOND_STEP_AFTER), namespace)
    moved = []
    for twice in (False, True):
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1)
        before = model.weight.detach().clone()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8)
        loader = [(torch.randn(8, 4), torch.randn(8, 1))]
        if twice:
            namespace["train"](model, loader, optimizer, scaler)
        else:
            for x, y in loader:
                with torch.autocast("cpu", dtype=torch.float16):
                    loss = torch.nn.functional.mse_loss(model(x), y)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
        moved.append(model.weight.detach() - before)
    assert torch.allclose(moved[1], 2 * moved[0], rtol=1e-3, atol=1e-6)
