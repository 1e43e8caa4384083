"""AMP203 on a loss-scaler object (issue 40): timm's `ApexScaler` shape.

fixtures/apex/loss_scaler_object offers apex and native AMP (`--amp-impl`), keeps
its autocast in a name (`amp_autocast = suppress`, `partial(torch.autocast,
...)` for native), and hands each loss to an object whose `__call__` runs
`amp.scale_loss`, clips apex's master parameters and steps; a package
re-exports the class.  The migration gives the class the GradScaler as
instance state, its step the scaler's calls (unscale_ before the clip, update
only on the micro-steps that step), and turns the autocast switch on where
amp.initialize ran.  Executed on the CPU (`--device-type cpu --dtype float16`,
so the GradScaler really scales): the migrated apex path updates the weights
exactly as the program's own native-AMP path does, resumes from a checkpoint
apex wrote and from one it wrote itself.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.helpers import FIXTURES, assert_matches_golden, run_cli
from tests.test_apex import findings, fixed_unsafe, recorded_run

PROJECT = FIXTURES / "apex" / "loss_scaler_object"
EXPECTED = FIXTURES / "apex" / "expected" / "loss_scaler_object"
MODULES = ("train.py", "scalers/amp.py", "scalers/__init__.py")
CPU_FLOAT16 = ("--device-type", "cpu", "--dtype", "float16")


def _texts(project: Path) -> dict[str, str]:
    return {name: (project / name).read_text(encoding="utf-8") for name in MODULES}


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    project = tmp_path_factory.mktemp("migrated") / "loss_scaler_object"
    shutil.copytree(PROJECT, project)
    (project / "pyproject.toml").write_text("", encoding="utf-8")
    result = run_cli("fix", "--apply", "--unsafe-fixes", "--no-cache", *CPU_FLOAT16, project)
    assert result.exit_code == 0, result.output
    assert "Fixed 8 findings in 2 files" in result.output
    return project


@pytest.mark.parametrize("name", MODULES)
def test_the_program_is_migrated_as_pinned(migrated: Path, name: str) -> None:
    assert_matches_golden((migrated / name).read_text(encoding="utf-8"), EXPECTED / name)


def test_the_class_holds_the_scaler_and_the_switch_is_turned_on(migrated: Path) -> None:
    texts = _texts(migrated)
    scalers, train = texts["scalers/amp.py"], texts["train.py"]
    assert "amp.scale_loss" not in scalers and "amp.master_params" not in scalers
    assert "self.grad_scaler.unscale_(optimizer)\n                clip_gradients(" in scalers
    assert (
        '    amp_autocast = partial(torch.autocast, device_type="cpu", dtype=torch.float16)\n'
        "        loss_scaler = ApexScaler(grad_scaler=grad_scaler)\n"
    ) in train
    assert "amp.initialize" not in train


def test_a_second_fix_changes_nothing(migrated: Path) -> None:
    before = _texts(migrated)
    result = run_cli("fix", "--apply", "--unsafe-fixes", "--no-cache", *CPU_FLOAT16, migrated)
    assert result.exit_code == 0, result.output
    assert _texts(migrated) == before
    assert run_cli("check", "--no-cache", *CPU_FLOAT16, migrated).exit_code == 0


def test_without_the_switch_the_program_stops_and_names_it(tmp_path: Path) -> None:
    project = tmp_path / "loss_scaler_object"
    shutil.copytree(PROJECT, project)
    (project / "pyproject.toml").write_text("", encoding="utf-8")
    train = project / "train.py"
    train.write_text(
        train.read_text(encoding="utf-8").replace("    amp_autocast = suppress\n", ""),
        encoding="utf-8",
    )
    before = {name: (project / name).read_text(encoding="utf-8") for name in MODULES}
    result = run_cli("fix", "--apply", "--unsafe-fixes", "--no-cache", project)
    assert "no name in `main` switches between `nullcontext`/`suppress`" in result.output
    assert {name: (project / name).read_text(encoding="utf-8") for name in MODULES} == before


def _run(project: Path, *arguments: str) -> dict:
    return recorded_run(project / "train.py", *arguments, printed="epoch 1 loss")


def _weights(path: Path) -> dict:
    import torch

    return torch.load(path)["model"]


@pytest.mark.slow
def test_the_migrated_apex_path_updates_exactly_as_native_amp(migrated: Path) -> None:
    torch = pytest.importorskip("torch")
    apex = _run(migrated, "--amp-impl", "apex", "--checkpoint", "apex.pt")
    # Its own GradScaler, on and scaling each of 12 losses; autocast on each forward.
    assert apex["scaler_enabled"] == [True] and apex["scaled"] == 12
    assert apex["autocast"] == [["cpu", "torch.float16"]] * 12
    native = _run(migrated, "--amp-impl", "native", "--checkpoint", "native.pt")
    assert native["scaled"] == 12
    fp32 = _run(migrated, "--amp-impl", "none", "--checkpoint", "fp32.pt")
    assert fp32["scaler_enabled"] == [False] and fp32["scaled"] == 0 and not fp32["autocast"]
    apex_weights, native_weights = _weights(migrated / "apex.pt"), _weights(migrated / "native.pt")
    for name, weight in apex_weights.items():
        assert torch.equal(weight, native_weights[name]), name  # the same updates, bit for bit
    # and float16 did change them: the check can fail
    fp32_weights = _weights(migrated / "fp32.pt")
    assert any(not torch.equal(apex_weights[n], fp32_weights[n]) for n in apex_weights)


@pytest.mark.slow
def test_resume_from_checkpoints_written_before_and_after_the_migration(migrated: Path) -> None:
    torch = pytest.importorskip("torch")
    _run(migrated, "--amp-impl", "native", "--checkpoint", "start.pt")
    start = torch.load(migrated / "start.pt")
    # As apex wrote it: `amp.state_dict()` is {"loss_scaler0": {...}} under "amp",
    # which a GradScaler cannot load: the model and optimizer resume, the scale starts anew.
    apex_written = {
        "model": start["model"],
        "optimizer": start["optimizer"],
        "amp": {"loss_scaler0": {"loss_scale": 1024.0, "unskipped": 7}},
    }
    torch.save(apex_written, migrated / "apex_written.pt")
    _run(migrated, "--amp-impl", "apex", "--resume", "apex_written.pt", "--checkpoint", "a.pt")
    assert torch.load(migrated / "a.pt")["amp"]["scale"] == 65536.0
    # As the migrated program writes it: the scale it saved is the scale it resumes with.
    after = dict(
        apex_written,
        amp={
            "scale": 1024.0,
            "growth_factor": 2.0,
            "backoff_factor": 0.5,
            "growth_interval": 2000,
            "_growth_tracker": 0,
        },
    )
    torch.save(after, migrated / "after.pt")
    _run(migrated, "--amp-impl", "apex", "--resume", "after.pt", "--checkpoint", "b.pt")
    resumed = torch.load(migrated / "b.pt")
    assert resumed["amp"]["scale"] == 1024.0 and resumed["amp"]["_growth_tracker"] == 6


EVALUATE = """\
import argparse
from contextlib import suppress
from functools import partial

import torch
from apex import amp


def main(model, loader, use_amp):
    amp_autocast = suppress
    if use_amp == "native":
        amp_autocast = partial(torch.autocast, device_type="cuda", dtype=torch.bfloat16)
    if use_amp == "apex":
        model = amp.initialize(model, opt_level="O1")
    for batch in loader:
        with amp_autocast():
            output = model(batch)
        print(output.dtype)
"""


def test_inference_turns_the_programs_switch_on_where_apex_initialized() -> None:
    after = fixed_unsafe(EVALUATE)
    assert (
        '    if use_amp == "apex":\n'
        '        amp_autocast = partial(torch.autocast, device_type="cuda", dtype=torch.float16)\n'
    ) in after
    assert "from apex" not in after and "enabled=" not in after


def test_inference_never_nests_an_autocast_that_would_turn_the_programs_off() -> None:
    # Two switches: which one to turn on is a guess, and `with torch.autocast(...,
    # enabled=use_amp == "apex")` inside `amp_autocast()` would turn native AMP off.
    text = EVALUATE.replace(
        "    amp_autocast = suppress\n",
        "    amp_autocast = suppress\n    other = suppress\n    other = torch.autocast\n    print(other)\n",
    )
    (message,) = findings(text)
    assert "its forward passes run under an autocast of the program's own" in message
    assert fixed_unsafe(text) == text
