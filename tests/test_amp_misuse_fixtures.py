"""Golden tests on realistic scripts with AMP mistakes: each firing fixture is
fixed as pinned, runs on the CPU afterwards, and a second fix changes nothing;
each silent fixture draws no misuse finding.

Set AMPLINT_UPDATE_GOLDEN=1 to rewrite the pinned outputs after a reviewed change.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from amplint.catalog import load_catalog
from tests.helpers import FIXTURES, assert_matches_golden, codes_of, fixed

FOLDER = FIXTURES / "amp_misuse"
EXPECTED = FOLDER / "expected"
# fixture -> the codes it must raise (an empty set: a fixture that must stay silent)
FIXTURES_AND_CODES = {
    "backward_inside_autocast.py": {"AMP101"},
    "clip_before_unscale.py": {"AMP102"},
    "step_bypasses_scaler.py": {"AMP103"},
    "missing_scaler_update.py": {"AMP104"},
    "gan_early_update.py": {"AMP104"},
    # pretrain() updates its own scaler; finetune() never updates its own
    "scaler_per_function.py": {"AMP104"},
    "unscaled_backward.py": {"AMP105"},
    "fp16_without_scaler.py": {"AMP106"},
    # bf16 on the GPU, CPU autocast, a dtype picked at run time, evaluation
    "autocast_without_scaler_ok.py": set(),
    "scaler_per_microstep.py": {"AMP107"},
    # the recipe under the boundary, an early `continue`, a boundary flag
    "scaler_accumulation_ok.py": set(),
    "double_unscale.py": {"AMP108"},
    "checkpoint_without_scaler.py": {"AMP109"},
    # the scaler saved under its own key, a weights-only export
    "checkpoint_ok.py": set(),
    "loss_outside_autocast.py": {"AMP110"},
    # HF outputs.loss, a float32 loss on purpose, arithmetic on a loss made inside
    "loss_in_autocast_ok.py": set(),
    "zero_grad_before_step.py": {"AMP113"},
    "lbfgs_closure_scaler.py": {"AMP115"},
    "bce_under_autocast.py": {"AMP114"},
    "manual_half.py": {"AMP111"},
    # a half copy for export, a flag-chosen cast, float16 features stored
    "manual_half_ok.py": set(),
    "bf16_with_scaler.py": {"AMP112"},
    # BCEWithLogitsLoss in the region, BCELoss in an FP32 region and on the CPU
    "bce_safe_regions.py": set(),
    # accumulation, clipping after unscale_, scaler in checkpoints: all correct
    "correct_torch_amp.py": set(),
    # a scaler that may be None (both paths, early return), a GAN clipping twice
    "optional_scaler_trainer.py": set(),
    "autocast_device_object.py": {"AMP116"},
    "autocast_device_strings.py": {"AMP116"},
    "autocast_device_ok.py": set(),
    "half_model_scaler.py": {"AMP119"},
    "fsdp_plain_scaler.py": {"AMP117"},
    "fsdp_policy_conflict.py": {"AMP120"},
    # a bfloat16 policy with bfloat16 autocast: redundant, not wrong
    "fsdp_policy_ok.py": set(),
}
# What the original fixture dies of, for those that crash before the fix.
CRASHES_BEFORE_THE_FIX = {
    "autocast_device_object.py": "Expected `device_type` of type `str`",
    "unscaled_backward.py": "Attempted step but _scale is None",
    "missing_scaler_update.py": "step() has already been called since the last update()",
    "scaler_per_function.py": "step() has already been called since the last update()",
    "double_unscale.py": "unscale_() has already been called on this optimizer",
    "scaler_per_microstep.py": "unscale_() has already been called on this optimizer",
    "manual_half.py": "Attempting to unscale FP16 gradients",
    "zero_grad_before_step.py": "No inf checks were recorded for this optimizer",
    "lbfgs_closure_scaler.py": "Closure use is not currently supported",
    "half_model_scaler.py": "Attempting to unscale FP16 gradients",
    "fsdp_policy_conflict.py": "loss is not finite at step 1",
}
MISUSE_CODES = {f"AMP1{n:02}" for n in range(1, 21)}
REPORT_ONLY = {code for code, doc in load_catalog().items() if doc.fix == "none"}
UNSAFE = {code for code, doc in load_catalog().items() if doc.fix == "unsafe"}
FIXED = sorted(name for name, codes in FIXTURES_AND_CODES.items() if codes - REPORT_ONLY)
REPORTED = sorted(
    name for name, codes in FIXTURES_AND_CODES.items() if codes and codes <= REPORT_ONLY
)


def test_every_fixture_is_listed() -> None:
    assert sorted(p.name for p in FOLDER.glob("*.py")) == sorted(FIXTURES_AND_CODES)


@pytest.mark.parametrize("name", sorted(FIXTURES_AND_CODES))
def test_fixture_raises_exactly_its_codes(name: str) -> None:
    text = (FOLDER / name).read_text(encoding="utf-8")
    assert set(codes_of(text)) & MISUSE_CODES == FIXTURES_AND_CODES[name]


@pytest.mark.parametrize("name", FIXED)
def test_fix_matches_the_pinned_output_and_settles(name: str) -> None:
    unsafe = bool(FIXTURES_AND_CODES[name] & UNSAFE)
    result = fixed((FOLDER / name).read_text(encoding="utf-8"), unsafe=unsafe)
    assert_matches_golden(result, EXPECTED / name)
    assert fixed(result, unsafe=unsafe) == result
    assert not set(codes_of(result)) & MISUSE_CODES


def _run(script: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, script.name], cwd=script.parent, capture_output=True, text=True
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "script",
    [EXPECTED / name for name in FIXED]
    + [FOLDER / n for n, c in FIXTURES_AND_CODES.items() if not c],
    ids=lambda path: f"{path.parent.name}/{path.name}",
)
def test_fixed_and_silent_scripts_run_on_the_cpu(script: Path) -> None:
    pytest.importorskip("torch")
    result = _run(script)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.parametrize("name", REPORTED)
def test_report_only_fixtures_are_left_as_they_are(name: str) -> None:
    text = (FOLDER / name).read_text(encoding="utf-8")
    assert fixed(text) == text
    assert not (EXPECTED / name).exists()


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CRASHES_BEFORE_THE_FIX))
def test_the_original_crashes_as_the_rule_says(name: str) -> None:
    pytest.importorskip("torch")
    result = _run(FOLDER / name)
    assert result.returncode != 0
    assert CRASHES_BEFORE_THE_FIX[name] in result.stderr


def _largest_weight_change(script: Path) -> float:
    result = _run(script)
    assert result.returncode == 0, result.stderr[-3000:]
    return float(result.stdout.rsplit("largest weight change", 1)[1])


@pytest.mark.slow
def test_clipping_scaled_gradients_stalls_training_until_fixed() -> None:
    pytest.importorskip("torch")
    stalled = _largest_weight_change(FOLDER / "clip_before_unscale.py")
    trained = _largest_weight_change(EXPECTED / "clip_before_unscale.py")
    assert trained > 1000 * stalled


@pytest.mark.slow
def test_the_moved_loss_is_computed_in_float32() -> None:
    pytest.importorskip("torch")
    before = _run(FOLDER / "loss_outside_autocast.py")
    after = _run(EXPECTED / "loss_outside_autocast.py")
    assert "computed in torch.bfloat16" in before.stdout  # autocast is active on the CPU
    assert "computed in torch.float32" in after.stdout, after.stderr[-3000:]


@pytest.mark.slow
def test_the_fixed_checkpoint_resumes_the_loss_scale() -> None:
    pytest.importorskip("torch")
    before = _run(FOLDER / "checkpoint_without_scaler.py").stdout
    after = _run(EXPECTED / "checkpoint_without_scaler.py").stdout
    assert "saved at scale 8192.0, resumed at 1024.0" in before
    assert "saved at scale 8192.0, resumed at 8192.0" in after


@pytest.mark.slow
def test_the_sharded_scaler_keeps_the_ranks_in_step() -> None:
    # Two gloo ranks on the CPU: the head's gradients overflow in one rank's
    # shard only, so with the plain scaler that rank alone skips and backs off.
    pytest.importorskip("torch")
    before = _run(FOLDER / "fsdp_plain_scaler.py")
    after = _run(EXPECTED / "fsdp_plain_scaler.py")
    assert "[4096.0, 1024.0]: ranks disagree" in before.stdout, before.stderr[-3000:]
    assert "[2048.0, 2048.0]: ranks agree" in after.stdout, after.stderr[-3000:]
