"""`amplint verify` on the CPU: parity with bfloat16, and a clear answer with
its documented exit code for every way a run can go wrong."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from amplint.verify.compare import (
    Comparison,
    Thresholds,
    default_warmup,
    inactive_amp,
    median_step_s,
)
from tests.helpers import FIXTURES, dedent, run_cli

VERIFY = FIXTURES / "verify"
CPU_BF16 = ("--device-type", "cpu", "--dtype", "bfloat16", "--steps", "10")
SMALL_RESNET = ("--batch-size", "8", "--image-size", "32", "--width", "8")
SMALL_GPT = ("--layers", "2", "--d-model", "64", "--heads", "4", "--seq-len", "32")
SMALL_GPT += ("--batch-size", "2", "--vocab", "256")


def _cuda() -> bool:
    probe = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
        capture_output=True,
        text=True,
    )
    return probe.stdout.strip() == "True"


@pytest.mark.parametrize(
    "script, script_args",
    [("resnet_style.py", SMALL_RESNET), ("gpt_style.py", SMALL_GPT)],
)
def test_bundled_examples_keep_parity_on_the_cpu(script: str, script_args: tuple) -> None:
    result = run_cli("verify", VERIFY / script, *CPU_BF16, "--json", "--", *script_args)
    report = json.loads(result.stdout)
    assert result.exit_code == 0, report
    assert report["parity_ok"] is True and report["passed"] is True
    assert report["device"] == "cpu" and report["dtype"] == "bfloat16" and report["steps"] == 10
    for run in ("baseline", "amp"):
        assert len(report[run]["losses"]) == 10
        assert report[run]["median_step_s"] > 0
        assert report[run]["skipped_steps"] == 0
        assert report[run]["peak_mem_bytes"] is None  # no CUDA: nothing to measure
    assert report["speedup"] > 0 and report["speed_meaningful"] is False
    assert report["mem_ratio"] is None
    assert report["rewrite"] == ["AMP001 autocast (bfloat16) around the forward pass"]


def test_the_table_says_the_speed_is_not_meaningful_on_the_cpu() -> None:
    result = run_cli("verify", VERIFY / "gpt_style.py", *CPU_BF16, "--", *SMALL_GPT)
    assert result.exit_code == 0
    assert "speedup" in result.stdout and "(not meaningful: no CUDA)" in result.stdout
    assert "verdict: passed" in result.stdout
    assert "cpu, bfloat16, 10 steps" in result.stdout  # what the AMP run trained under
    assert "TF32" not in result.stdout  # a CUDA setting: noise on a CPU


def test_a_script_that_diverges_under_amp_fails_with_exit_1() -> None:
    result = run_cli("verify", VERIFY / "diverging.py", *CPU_BF16, "--json")
    report = json.loads(result.stdout)
    assert result.exit_code == 1
    assert report["parity_ok"] is False and report["passed"] is False
    assert report["loss_gap"] > 1.0
    assert "loss parity" in report["problems"][0]


def test_a_crash_names_the_run_and_shows_its_error() -> None:
    result = run_cli("verify", VERIFY / "crashes.py", *CPU_BF16)
    assert result.exit_code == 1
    assert "the baseline run crashed (exit status 1) after 3 of 10 steps" in result.stderr
    assert "ValueError: sample 3 is corrupt" in result.stderr
    assert "harness.py" not in result.stderr  # the script's traceback, not ours


def test_a_hang_is_killed_after_the_timeout() -> None:
    result = run_cli("verify", VERIFY / "hangs.py", *CPU_BF16, "--timeout", "5")
    assert result.exit_code == 1
    assert "the baseline run hung: no end within --timeout 5 s (killed after 2 of 10 steps)" in (
        result.stderr
    )


def test_no_training_step_is_nothing_to_verify() -> None:
    result = run_cli("verify", VERIFY / "evaluate_only.py", *CPU_BF16)
    assert result.exit_code == 3
    assert "nothing to verify: amplint would not change" in result.stderr


def test_too_few_steps_are_reported_with_how_many_ran() -> None:
    args = ("--", "--steps", "4", *SMALL_RESNET)
    result = run_cli("verify", VERIFY / "resnet_style.py", *CPU_BF16, *args)
    assert result.exit_code == 1
    assert "the baseline run ended after 4 of 10 steps" in result.stdout


@pytest.mark.skipif(_cuda(), reason="CUDA is available here")
def test_cuda_amp_without_cuda_is_nothing_to_verify() -> None:
    result = run_cli("verify", VERIFY / "gpt_style.py", "--steps", "10", "--", *SMALL_GPT)
    assert result.exit_code == 3
    assert "no CUDA device, so AMP would be inactive" in result.stderr
    assert "--device-type cpu --dtype bfloat16" in result.stderr


@pytest.mark.skipif(_cuda(), reason="CUDA is available here")
def test_options_that_do_not_reach_a_migrated_autocast_are_nothing_to_verify() -> None:
    """The rewrite of a torch.cuda.amp script keeps "cuda": asking for the CPU
    does not move it, and two FP32 runs must not be reported as "cpu,
    bfloat16 ... passed"."""
    result = run_cli("verify", VERIFY / "cuda_amp_1x.py", *CPU_BF16)
    assert result.exit_code == 3
    assert result.stderr.strip() == (
        "amplint: error: nothing to verify: AMP was inactive in both runs (in the rewrite, "
        "autocast (cuda, float16) and GradScaler (cuda) were disabled, as this machine has no "
        "CUDA device); --device-type cpu and --dtype bfloat16 shape only the autocast amplint "
        "adds, and this rewrite (AMP201) keeps the device the script names"
    )


def test_why_amp_was_inactive() -> None:
    def run(autocast=(), scalers=(), cuda=False) -> dict:
        regions = [dict(zip(("device", "dtype", "enabled"), region)) for region in autocast]
        made = [dict(zip(("device", "enabled"), scaler)) for scaler in scalers]
        return {"autocast": regions, "scalers": made, "cuda_available": cuda}

    assert inactive_amp(run([("cpu", "bfloat16", True)])) is None
    assert inactive_amp(run(scalers=[("cuda", True)], cuda=True)) is None  # a half model
    assert inactive_amp(run()) == "no autocast region was entered and no GradScaler made"
    assert inactive_amp(run([("cpu", "bfloat16", False)])) == (
        "autocast (cpu, bfloat16) was disabled"  # enabled=False, from the script
    )
    assert inactive_amp(run([("cuda", "float16", False)], [("cuda", False)], cuda=True)) == (
        "autocast (cuda, float16) and GradScaler (cuda) were disabled"
    )
    assert inactive_amp(run([("cuda", "float16", False)])) == (
        "autocast (cuda, float16) was disabled, as this machine has no CUDA device"
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (("--steps", "10", "--warmup", "10"), "leaves no step to time"),
        (("--steps", "1"), "--steps"),
    ],
)
def test_usage_errors_exit_2(args: tuple, message: str) -> None:
    result = run_cli("verify", VERIFY / "gpt_style.py", *args)
    assert result.exit_code == 2
    assert message in result.output


def test_a_missing_script_exits_2(tmp_path: Path) -> None:
    result = run_cli("verify", tmp_path / "absent.py", *CPU_BF16)
    assert result.exit_code == 2
    assert "no such file" in result.stderr


def _harness(script: Path, *args) -> subprocess.CompletedProcess:
    """The harness in a child, as verify runs it: it patches torch for good."""
    command = [sys.executable, "-m", "amplint.verify.harness", "--source", str(script)]
    command += ["--script", str(script), *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, cwd=script.parent)


def test_harness_counts_skipped_steps_and_records_unscaled_losses(tmp_path: Path) -> None:
    """A scale so large that every scaled gradient overflows: the scaler skips
    each optimizer step, the harness counts them, and the losses it records
    are the unscaled ones."""
    script = tmp_path / "overflow.py"
    script.write_text(dedent("""
        import torch

        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**127, growth_interval=1000)
        x, y = torch.randn(8, 4) * 100, torch.randn(8, 1) * 100  # gradients near 1e4
        for step in range(3):
            loss = torch.nn.functional.mse_loss(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
            print(loss.item())
        """))
    out = tmp_path / "result.json"
    status = _harness(script, "--steps", "5", "--out", out)
    assert status.returncode == 0, status.stderr
    result = json.loads(out.read_text())
    printed = [float(line) for line in status.stdout.split()]
    assert result["finished"] == "script" and result["steps"] == 3
    assert result["skipped_steps"] == 3 and result["skipped_at"] == [0, 1, 2]
    assert result["losses"] == pytest.approx(printed)  # unscaled, and unchanged: no update ran
    assert result["loss_scale"] == 2.0**124  # halved once per skipped step


def test_harness_counts_each_step_of_the_old_scaler_once(tmp_path: Path) -> None:
    """torch.cuda.amp.GradScaler inherits scale and step from torch.amp's: when
    the base class was wrapped first (set order, so about every other run),
    the subclass was wrapped on top of the wrapper and each step counted twice.
    Several runs, started at once, so that a chance order cannot hide it."""
    script = tmp_path / "legacy.py"
    script.write_text(dedent("""
        import torch

        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.cuda.amp.GradScaler()  # no CUDA here: disabled, steps still run
        for step in range(3):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
        """))
    runs = []
    for index in range(6):
        out = tmp_path / f"result{index}.json"
        command = [sys.executable, "-m", "amplint.verify.harness", "--source", str(script)]
        command += ["--script", str(script), "--steps", "10", "--out", str(out)]
        runs.append((out, subprocess.Popen(command, cwd=tmp_path, stderr=subprocess.PIPE)))
    for out, process in runs:
        _, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, stderr
        result = json.loads(out.read_text())
        assert (result["finished"], result["steps"], len(result["losses"])) == ("script", 3, 3)


def test_harness_records_what_autocast_and_scalers_did(tmp_path: Path) -> None:
    script = tmp_path / "regions.py"
    script.write_text(dedent("""
        import torch

        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu", enabled=False)

        @torch.autocast("cpu", dtype=torch.bfloat16)  # entered through the decorator
        def forward(x):
            return model(x)

        for step in range(2):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=step > 0):
                loss = forward(torch.randn(8, 4)).float().pow(2).mean()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
        """))
    out = tmp_path / "result.json"
    status = _harness(script, "--steps", "5", "--out", out)
    assert status.returncode == 0, status.stderr
    result = json.loads(out.read_text())
    assert result["autocast"] == [
        {"device": "cpu", "dtype": "bfloat16", "enabled": False, "regions": 1},
        {"device": "cpu", "dtype": "bfloat16", "enabled": True, "regions": 3},
    ]
    assert result["scalers"] == [{"device": "cpu", "enabled": False}]


def test_harness_reads_tf32_settings_a_script_made_with_the_new_api(tmp_path: Path) -> None:
    """Once a script sets `fp32_precision`, reading torch's legacy allow_tf32
    flags raises: the harness reading them crashed after the script ran."""
    script = tmp_path / "tf32.py"
    script.write_text(dedent("""
        import torch

        torch.backends.cuda.matmul.fp32_precision = "tf32"
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(2):
            model(torch.randn(8, 4)).pow(2).mean().backward()
            optimizer.step()
        """))
    out = tmp_path / "result.json"
    status = _harness(script, "--steps", "5", "--out", out)
    assert status.returncode == 0, status.stderr
    settings = json.loads(out.read_text())["settings"]
    assert settings["matmul_allow_tf32"] is True and settings["matmul_precision"] == "tf32"
    assert settings["cudnn_allow_tf32"] is True  # torch's default for convolutions


def test_harness_stops_after_the_steps_asked_for(tmp_path: Path) -> None:
    script = tmp_path / "forever.py"
    script.write_text(dedent("""
        import torch

        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        while True:
            try:
                loss = model(torch.ones(1, 2)).sum()
                loss.backward()
                optimizer.step()
            except Exception:  # a script's own catch-all must not swallow the stop
                pass
        """))
    out = tmp_path / "result.json"
    status = _harness(script, "--steps", "4", "--out", out)
    assert status.returncode == 0, status.stderr
    result = json.loads(out.read_text())
    assert result["finished"] == "steps" and result["steps"] == 4 and result["exit_status"] == 0


def _run(losses, times, peak=None) -> dict:
    return {
        "losses": losses,
        "step_times_s": times,
        "skipped_steps": 0,
        "steps": len(losses),
        "peak_mem_bytes": peak,
    }


def test_comparison_figures() -> None:
    thresholds = Thresholds(steps=6, warmup=2, last=2, rtol=0.05, min_speedup=2.0)
    baseline = _run([5, 4, 3, 2, 1.0, 1.0], [9, 2.0, 2.0, 2.0, 2.0], peak=1000)
    amp = _run([5, 4, 3, 2, 1.0, 1.02], [9, 1.0, 1.0, 1.0, 1.0], peak=600)
    comparison = Comparison(baseline, amp, thresholds, speed_meaningful=True)
    assert median_step_s(baseline, 2) == 2.0  # the first interval (start-up) is never timed
    assert comparison.speedup == 2.0 and comparison.mem_ratio == 0.6
    assert comparison.loss_gap == pytest.approx(0.01)
    assert comparison.parity_ok and comparison.passed


def test_parity_compares_losses_after_as_many_updates() -> None:
    # The scaler skips its first two steps while it lowers its scale: the AMP
    # run's losses repeat there and then follow the baseline's two steps late.
    # Step by step that is a 20 % gap on a falling loss; update by update, none.
    thresholds = Thresholds(steps=8, warmup=1, last=3, rtol=0.05, min_speedup=None)
    falling = [8.0, 6.0, 4.5, 3.4, 2.5, 1.9, 1.4, 1.05]
    baseline = _run(falling, [1.0] * 7)
    amp = _run([8.0, 8.0, 8.0, *falling[1:6]], [1.0] * 7)
    amp["skipped_at"], amp["skipped_steps"] = [0, 1], 2
    comparison = Comparison(baseline, amp, thresholds, speed_meaningful=False)
    assert comparison.loss_gap == 0.0 and comparison.passed
    del amp["skipped_at"]  # as a step-by-step comparison would see it
    assert Comparison(baseline, amp, thresholds, speed_meaningful=False).loss_gap > 0.2


def test_comparison_fails_on_nan_and_on_a_slow_rewrite() -> None:
    thresholds = Thresholds(steps=3, warmup=1, last=2, rtol=0.05, min_speedup=1.5)
    baseline = _run([3, 2, 1.0], [1.0, 1.0])
    amp = _run([3, 2, "nan"], [1.0, 1.0])
    comparison = Comparison(baseline, amp, thresholds, speed_meaningful=True)
    assert not comparison.parity_ok and not comparison.passed
    reasons = comparison.reasons()
    assert reasons[0] == "the AMP loss is not finite (NaN or inf)"
    assert reasons[1] == "speedup 1.00x is below --min-speedup 1.5"


def test_default_warmup() -> None:
    assert [default_warmup(steps) for steps in (2, 10, 50, 500)] == [1, 2, 10, 10]


def test_progress_names_the_run_and_its_step() -> None:
    from amplint.config import Settings
    from amplint.verify import runs

    seen: list[tuple[str, int, int]] = []
    request = runs.Request(
        script=VERIFY / "resnet_style.py",
        script_args=SMALL_RESNET,
        settings=Settings(dtype="bfloat16", device_type="cpu"),
        unsafe=False,
        thresholds=Thresholds(steps=10, warmup=2, last=5, rtol=0.05, min_speedup=None),
        timeout_s=300,
    )
    outcome = runs.verify(request, progress=lambda *report: seen.append(report))
    assert outcome.comparison.passed
    assert {name for name, _, _ in seen} == {"baseline", "AMP"}
    assert all(total == 10 and 0 <= done <= 10 for _, done, total in seen)
