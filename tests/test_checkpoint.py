"""AMP109: checkpoints without the GradScaler's state."""

from __future__ import annotations

import pytest

from amplint.analysis.checkpoints import scaler_key
from tests.helpers import codes_of, dedent, findings_of, fixed

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
    (finding,) = [d for d in findings_of(source) if d.code == "AMP109"]
    assert finding.message.endswith(
        "not rewritten: `scaler` is made after this line; make it before, beside the optimizer"
    )


@pytest.mark.parametrize(
    "made",
    [
        'torch.amp.GradScaler("cuda") if use_amp else None',
        'None if not use_amp else torch.amp.GradScaler("cuda")',
    ],
)
def test_a_scaler_that_may_be_none_is_saved_behind_a_test(made: str) -> None:
    """`GradScaler() if args.amp else None`: `scaler.state_dict()` would raise
    in the run with AMP off, the default of most such scripts."""
    source = dedent(f"""
        import torch
        def main(model, loader, use_amp=False):
            optimizer = torch.optim.AdamW(model.parameters())
            scaler = {made}
            for x, y in loader:
                with torch.autocast("cuda", enabled=use_amp):
                    loss = model(x, y)
                if scaler is not None:
                    scaler.scale(loss).backward()
                    scaler.step(optimizer)
                    scaler.update()
                else:
                    loss.backward()
                    optimizer.step()
            torch.save({{"model": model.state_dict(), "optimizer": optimizer.state_dict()}}, "c.pt")
        """)
    assert '"scaler": scaler.state_dict() if scaler is not None else None}' in fixed(source)


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


# -- a checkpoint helper the scaler has to be passed to ---------------------------------
HELPERS = """
import torch


def save_checkpoint(model, optimizer, path):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)


def load_checkpoint(path, model, optimizer):
    checkpoint = torch.load(path)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])


def train(model, optimizer, loader, path, resume):
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**EXPONENT)
    if resume:
        load_checkpoint(path, model, optimizer)
    for x, y in loader:
        with torch.autocast("cpu", dtype=torch.float16):
            loss = torch.nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    save_checkpoint(model, optimizer, path)
    return scaler
"""


def _helpers(exponent: int) -> str:
    return dedent(HELPERS).replace("EXPONENT", str(exponent))


def test_a_helper_that_takes_the_optimizer_takes_the_scaler_too() -> None:
    source = _helpers(10)
    assert codes_of(source).count("AMP109") == 2
    result = fixed(source)
    assert "def save_checkpoint(model, optimizer, path, *, scaler=None):\n" in result
    assert '"scaler": scaler.state_dict() if scaler is not None else None}' in result
    assert "def load_checkpoint(path, model, optimizer, *, scaler=None):\n" in result
    assert (
        '    if scaler is not None and checkpoint.get("scaler"):\n'
        '        scaler.load_state_dict(checkpoint["scaler"])\n'
    ) in result
    assert "        load_checkpoint(path, model, optimizer, scaler=scaler)\n" in result
    assert "    save_checkpoint(model, optimizer, path, scaler=scaler)\n" in result
    assert "AMP109" not in codes_of(result)
    assert fixed(result) == result


def test_the_passed_scaler_survives_a_resume_and_other_callers_still_work(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    # Two runs of the rewritten module: the second starts from a scale 2**10
    # away from the first's and must come back to where the first left off.
    namespace: dict = {}
    exec(compile(fixed(_helpers(10)), "first", "exec"), namespace)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = [(torch.randn(8, 4), torch.randn(8, 2)) for _ in range(3)]
    path = tmp_path / "checkpoint.pt"
    first = namespace["train"](model, optimizer, loader, path, resume=False)
    assert torch.load(path)["scaler"]["scale"] == first.get_scale()
    second: dict = {}
    exec(compile(fixed(_helpers(20)), "second", "exec"), second)
    resumed = second["train"](model, optimizer, [], path, resume=True)
    assert resumed.get_scale() == first.get_scale()
    # A caller that has no scaler (another script) saves and loads as before.
    second["save_checkpoint"](model, optimizer, path)
    assert torch.load(path)["scaler"] is None
    second["load_checkpoint"](path, model, optimizer)


def test_a_call_before_the_scaler_exists_does_not_pass_it() -> None:
    source = _helpers(10)
    source = source.replace(
        '    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)\n'
        "    if resume:\n"
        "        load_checkpoint(path, model, optimizer)\n",
        "    if resume:\n"
        "        load_checkpoint(path, model, optimizer)\n"
        '    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)\n',
    )
    result = fixed(source)
    assert "def save_checkpoint(model, optimizer, path, *, scaler=None):\n" in result
    assert "def load_checkpoint(path, model, optimizer):\n" in result  # no caller has it
    assert codes_of(result) == ["AMP109"]


def test_a_helper_that_reads_a_global_optimizer_is_not_given_the_scaler() -> None:
    # the scaler travels as the optimizer does: here neither is an argument
    source = _helpers(10)
    source = source.replace(
        "def save_checkpoint(model, optimizer, path):", "def save_checkpoint(model, path):"
    ).replace("save_checkpoint(model, optimizer, path)", "save_checkpoint(model, path)")
    result = fixed(source)
    assert "def save_checkpoint(model, path):\n" in result
    assert "AMP109" in codes_of(result)


def test_a_scaler_parameter_defaulting_to_none_is_guarded() -> None:
    source = _source("""
        def save(model, optimizer, path, scaler=None):
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
        """)
    assert '"scaler": scaler.state_dict() if scaler is not None else None}' in fixed(source)


def test_a_checkpoint_holding_the_model_itself_is_a_checkpoint() -> None:
    # waveglow saves the module object next to the optimizer's state
    source = _source("""
        def save(model, optimizer, scaler, iteration, path):
            torch.save({"model": model, "iteration": iteration,
                        "optimizer": optimizer.state_dict()}, path)
        """)
    result = fixed(source)
    assert (
        '"optimizer": optimizer.state_dict(),\n                "scaler": scaler.state_dict()}'
        in (result)
    )


def test_the_optimizer_state_alone_is_not_a_checkpoint() -> None:
    source = _source("""
        def save(optimizer, scaler, path):
            torch.save({"optimizer": optimizer.state_dict()}, path)
        """)
    assert "AMP109" not in codes_of(source)


def test_a_conditional_optimizer_state_is_mirrored_for_the_scaler() -> None:
    # yolov5 drops the optimizer's state from its last checkpoint
    source = _source("""
        def save(model, optimizer, scaler, final_epoch, path):
            ckpt = {"model": model, "optimizer": None if final_epoch else optimizer.state_dict()}
            torch.save(ckpt, path)
        """)
    result = fixed(source)
    assert '"scaler": None if final_epoch else scaler.state_dict()}' in result
    assert "AMP109" not in codes_of(result)


TRAINER = """
from typing import Optional, Union

import torch


class Trainer:
{attribute}
    def __init__(self, model, optimizer, use_amp=False{parameter}):
        self.model = model
        self.optimizer = optimizer
{binding}
        if use_amp:
            self._scaler = torch.amp.GradScaler("cpu")

    def train_step(self, x, y):
        self.optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self._scaler is not None):
            loss = torch.nn.functional.mse_loss(self.model(x), y)
        if self._scaler is not None:
            self._scaler.scale(loss).backward()
            self._scaler.step(self.optimizer)
            self._scaler.update()
        else:
            loss.backward()
            self.optimizer.step()
        return loss.item()

    def save(self, path):
        torch.save({{"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}}, path)


def main(path, use_amp):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), use_amp)
    trainer.train_step(torch.randn(8, 4), torch.randn(8, 1))
    trainer.save(path)
"""

# Every spelling of "the scaler may be None" (issue 60: the annotated ones
# got an unguarded `self._scaler.state_dict()`, and every run without AMP
# crashed at its first checkpoint).
OPTIONAL_SCALERS = {
    "plain None": ("", "", "        self._scaler = None"),
    "Optional[...]": ("", "", "        self._scaler: Optional[torch.amp.GradScaler] = None"),
    "typing.Optional": ("", "", "        self._scaler: typing.Optional[torch.amp.GradScaler] = None"),
    "X | None": ("", "", "        self._scaler: torch.amp.GradScaler | None = None"),
    "Union[X, None]": ("", "", "        self._scaler: Union[torch.amp.GradScaler, None] = None"),
    "string annotation": ("", "", '        self._scaler: "Optional[torch.amp.GradScaler]" = None'),
    "class attribute": ("    _scaler: Optional[torch.amp.GradScaler] = None\n", "", "        pass"),
    "plain class attribute": ("    _scaler = None\n", "", "        pass"),
    "parameter defaulting to None": ("", ", scaler=None", "        self._scaler = scaler"),
    "annotated parameter": (
        "",
        ", scaler: Optional[torch.amp.GradScaler] = None",
        "        self._scaler = scaler",
    ),
}


@pytest.mark.parametrize("spelling", OPTIONAL_SCALERS)
def test_a_scaler_that_may_be_none_is_guarded_however_it_is_spelled(spelling, tmp_path) -> None:
    """One class, every spelling: the checkpoint's scaler entry is guarded, and
    the rewrite runs, with AMP off (the default) and on, saving the state."""
    attribute, parameter, binding = OPTIONAL_SCALERS[spelling]
    source = dedent(TRAINER).format(attribute=attribute, parameter=parameter, binding=binding)
    if "typing.Optional" in source:
        source = source.replace("from typing import", "import typing\nfrom typing import")
    result = fixed(source)
    assert (
        '"scaler": self._scaler.state_dict() if self._scaler is not None else None}' in result
    ), result
    torch = pytest.importorskip("torch")
    namespace: dict = {}
    exec(compile(result, "trainer.py", "exec"), namespace)
    for use_amp in (False, True):
        namespace["main"](tmp_path / f"{use_amp}.pt", use_amp)
        saved = torch.load(tmp_path / f"{use_amp}.pt", weights_only=False)
        assert (saved["scaler"] is not None) is use_amp


def test_a_scaler_that_cannot_be_none_is_saved_unguarded() -> None:
    """An annotation without None, and a scaler always made: no guard."""
    source = dedent(TRAINER).format(
        attribute="",
        parameter="",
        binding='        self._scaler: torch.amp.GradScaler = torch.amp.GradScaler("cpu")',
    )
    assert '"scaler": self._scaler.state_dict()}' in fixed(source)
