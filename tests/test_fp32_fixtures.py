"""AMP001 on realistic training scripts: pinned rewrites that still train.

Each script in fixtures/fp32_steps prints `loss <value>` per step. After the
rewrite it runs on the CPU twice: with the defaults (cuda autocast and scaler
disable themselves, so every loss is identical to the original's) and rewritten
for `--device-type cpu --dtype bfloat16` (AMP active: losses finite, and falling
where the original's fall). Scripts in fixtures/not_steps must come out of
`fix` unchanged. AMPLINT_UPDATE_GOLDEN=1 rewrites the pinned outputs.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from amplint.config import Settings
from tests.helpers import FIXTURES, assert_matches_golden, fixed, printed_losses

STEPS = sorted((FIXTURES / "fp32_steps").glob("*.py"))
NOT_STEPS = sorted((FIXTURES / "not_steps").glob("*.py"))
EXPECTED = FIXTURES / "fp32_steps" / "expected"
BF16_CPU = Settings(dtype="bfloat16", device_type="cpu")


def _expected(script: Path) -> Path:
    return EXPECTED / script.name


def test_fixture_families_are_there() -> None:
    assert len(STEPS) >= 10 and len(NOT_STEPS) >= 7


@pytest.mark.parametrize("script", STEPS, ids=[s.stem for s in STEPS])
def test_rewrite_matches_the_pinned_output(script: Path) -> None:
    assert_matches_golden(fixed(script.read_text(encoding="utf-8")), _expected(script))


@pytest.mark.parametrize("script", STEPS, ids=[s.stem for s in STEPS])
def test_rewrite_is_idempotent(script: Path) -> None:
    expected = _expected(script).read_text(encoding="utf-8")
    assert fixed(expected) == expected
    bf16 = fixed(script.read_text(encoding="utf-8"), BF16_CPU)
    assert fixed(bf16, BF16_CPU) == bf16


@pytest.mark.parametrize("script", NOT_STEPS, ids=[s.stem for s in NOT_STEPS])
def test_not_a_convertible_step_is_left_unchanged(script: Path) -> None:
    source = script.read_text(encoding="utf-8")
    assert fixed(source) == source
    assert fixed(source, BF16_CPU) == source


@pytest.fixture(scope="module")
def torch_installed() -> None:
    pytest.importorskip("torch")


@pytest.mark.slow
@pytest.mark.parametrize("script", STEPS, ids=[s.stem for s in STEPS])
def test_rewritten_with_defaults_trains_identically_on_cpu(script: Path, torch_installed) -> None:
    assert printed_losses(_expected(script)) == printed_losses(script)


@pytest.mark.slow
@pytest.mark.parametrize("script", STEPS, ids=[s.stem for s in STEPS])
def test_rewritten_for_cpu_bfloat16_trains(script: Path, tmp_path: Path, torch_installed) -> None:
    rewritten = tmp_path / script.name
    rewritten.write_text(fixed(script.read_text(encoding="utf-8"), BF16_CPU), encoding="utf-8")
    assert 'autocast("cpu", dtype=torch.bfloat16)' in rewritten.read_text()
    original, amp = printed_losses(script), printed_losses(rewritten)
    assert all(math.isfinite(value) for value in amp)
    assert len(amp) == len(original)
    if original[-1] < original[0]:
        assert amp[-1] < amp[0], f"bf16 loss did not fall: {amp[0]} -> {amp[-1]}"


FP16_CPU = Settings(dtype="float16", device_type="cpu")


@pytest.mark.slow
@pytest.mark.parametrize("script", STEPS, ids=[s.stem for s in STEPS])
def test_rewritten_for_cpu_float16_runs_a_real_scaler(
    script: Path, tmp_path: Path, torch_installed
) -> None:
    # torch 2.13 enables GradScaler("cpu"): it scales, unscales, skips and
    # updates for real, so a missing update() after a step on some path, a
    # second unscale_ or a step on an optimizer it never saw raises here.
    rewritten = tmp_path / script.name
    rewritten.write_text(fixed(script.read_text(encoding="utf-8"), FP16_CPU), encoding="utf-8")
    assert 'GradScaler("cpu")' in rewritten.read_text()
    amp = printed_losses(rewritten)
    assert len(amp) == len(printed_losses(script))
    assert math.isfinite(amp[-1])


@pytest.mark.slow
def test_a_resumed_run_loads_checkpoints_of_disabled_and_enabled_scalers(
    tmp_path: Path, torch_installed
) -> None:
    # per_epoch_train saves the scaler with the optimizer after the rewrite.
    # The CUDA rewrite's scaler is disabled on the CPU and saves an empty state,
    # which the CPU float16 rewrite's enabled scaler would refuse to load
    # ("The source state dict is empty"); the guarded restore skips it.  Then
    # the enabled scaler's own checkpoint loads for real.
    source = (FIXTURES / "fp32_steps" / "per_epoch_train.py").read_text(encoding="utf-8")
    (tmp_path / "train_cuda.py").write_text(fixed(source), encoding="utf-8")
    (tmp_path / "train_cpu16.py").write_text(fixed(source, FP16_CPU), encoding="utf-8")
    checkpoint = str(tmp_path / "checkpoint.pt")
    for script, extra in (
        ("train_cuda.py", ["--epochs", "1"]),
        ("train_cpu16.py", ["--resume", "--epochs", "2"]),
        ("train_cpu16.py", ["--resume", "--epochs", "3"]),
    ):
        run = subprocess.run(
            [sys.executable, script, "--checkpoint", checkpoint, *extra],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, run.stderr[-2000:]
        assert f"epoch {extra[-1]}:" in run.stdout


@pytest.mark.slow
def test_a_clip_on_every_micro_step_clips_the_same_under_a_real_scaler(
    tmp_path: Path, torch_installed
) -> None:
    """The rewrite clips the scaled gradients with the threshold times the
    scale: with GradScaler("cpu") scaling by 65536, SGD (which, unlike Adam,
    shows every factor in its updates) follows the FP32 run step by step.  The
    same rewrite with the threshold left unscaled clips 65536 times too hard
    and does not."""
    script = FIXTURES / "fp32_steps" / "clip_every_micro_step.py"
    rewritten = fixed(script.read_text(encoding="utf-8"), FP16_CPU)
    scaled_threshold = "CLIP_GRAD * scaler.get_scale()"
    assert scaled_threshold in rewritten and "unscale_" not in rewritten
    right, wrong = tmp_path / "right.py", tmp_path / "wrong.py"
    right.write_text(rewritten, encoding="utf-8")
    wrong.write_text(rewritten.replace(scaled_threshold, "CLIP_GRAD"), encoding="utf-8")
    fp32 = printed_losses(script)

    def follows(losses: tuple[float, ...]) -> bool:
        return all(abs(a - b) <= 0.01 * abs(a) for a, b in zip(fp32, losses))

    assert follows(printed_losses(right))
    assert not follows(printed_losses(wrong))


@pytest.mark.slow
def test_optimizers_stepped_in_a_loop_are_unscaled_in_a_loop_before_the_clips(
    tmp_path: Path, torch_installed
) -> None:
    """Each optimizer steps through the scaler in its loop and is unscaled, in a
    loop of its own, before the clips (themselves in a loop): under a real CPU
    scaler SGD follows the FP32 run.  Without that unscale loop the clips see
    gradients 65536 times too large, clip far too hard, and it does not."""
    script = FIXTURES / "fp32_steps" / "optimizers_in_a_loop.py"
    rewritten = fixed(script.read_text(encoding="utf-8"), FP16_CPU)
    unscale = "    for optimizer in optimizers.values():\n        scaler.unscale_(optimizer)\n"
    assert (
        unscale in rewritten
        and "        scaler.step(optimizer)\n    scaler.update()\n" in rewritten
    )
    right, wrong = tmp_path / "right.py", tmp_path / "wrong.py"
    right.write_text(rewritten, encoding="utf-8")
    wrong.write_text(rewritten.replace(unscale, ""), encoding="utf-8")
    fp32 = printed_losses(script)

    def follows(losses: tuple[float, ...]) -> bool:
        return len(losses) == len(fp32) and all(
            abs(a - b) <= 0.01 * abs(a) for a, b in zip(fp32, losses)
        )

    assert follows(printed_losses(right))
    assert not follows(printed_losses(wrong))


@pytest.mark.slow
def test_a_norm_logged_on_every_micro_step_is_the_fp32_norm_under_a_real_scaler(
    tmp_path: Path, torch_installed
) -> None:
    """The project's `get_grad_norm` (a p-norm by hand) logs the norm of the
    gradients on every micro-step, where they are still scaled: the rewrite
    divides its result by the scale, and under a real CPU scaler (65536) the
    logged norms follow the FP32 run's.  Without the division they are 65536
    times larger."""
    script = FIXTURES / "fp32_steps" / "norm_log_every_micro_step.py"
    rewritten = fixed(script.read_text(encoding="utf-8"), FP16_CPU)
    divided = "get_grad_norm(model.parameters()) / scaler.get_scale()"
    assert divided in rewritten and "unscale_" not in rewritten
    right, wrong = tmp_path / "right.py", tmp_path / "wrong.py"
    right.write_text(rewritten, encoding="utf-8")
    wrong.write_text(rewritten.replace(divided, "get_grad_norm(model.parameters())"))

    def norms(path: Path) -> list[float]:
        printed = subprocess.run(
            [sys.executable, path.name], cwd=path.parent, capture_output=True, text=True
        )
        assert printed.returncode == 0, printed.stderr[-2000:]
        return [float(line.split()[1]) for line in printed.stdout.splitlines() if "norm" in line]

    fp32 = norms(script)

    def follows(logged: list[float]) -> bool:
        return len(logged) == len(fp32) and all(
            abs(a - b) <= 0.02 * abs(a) for a, b in zip(fp32, logged)
        )

    assert follows(norms(right))
    assert not follows(norms(wrong))
    assert printed_losses(right)[-1] < printed_losses(right)[0]


def test_a_loop_amplint_rewrote_makes_no_twin_of_the_next() -> None:
    """Two trainings written alike, both FP32: the fix rewrites one in a round,
    and the next round must not take the other for the deliberate baseline of
    the loop amplint just wrote (only a loop the user wrote in mixed precision
    makes a twin).  The recipe's own AMP loop still does, in any round: a
    checkpoint fix in the first round leaves its baseline alone."""
    recipe = (FIXTURES / "not_steps" / "amp_recipe_baseline.py").read_text(encoding="utf-8")
    both_fp32 = recipe.replace(
        '        with torch.autocast(device_type=device, dtype=torch.float16, enabled=use_amp):\n'
        "            output = net(input)\n"
        "            loss = loss_fn(output, target)\n"
        "        scaler.scale(loss).backward()\n"
        "        scaler.step(opt)\n"
        "        scaler.update()\n",
        "        output = net(input)\n"
        "        loss = loss_fn(output, target)\n"
        "        loss.backward()\n"
        "        opt.step()\n",
    )
    assert both_fp32 != recipe
    result = fixed(both_fp32)
    assert result.count("autocast(") == 2  # the two loops, each rewritten
    saved = recipe + '\ntorch.save({"model": net.state_dict(), "optimizer": opt.state_dict()}, "c.pt")\n'
    result = fixed(saved)
    assert '"scaler": scaler.state_dict()' in result
    assert result.count("autocast(") == 1  # the baseline stays FP32
