"""`amplint verify` on the CPU: parity with bfloat16, and a clear answer with
its documented exit code for every way a run can go wrong."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from amplint.config import Settings
from amplint.verify import EXIT_ERROR, VerifyError, runs
from amplint.verify.compare import (
    MAX_BAND,
    MIN_BAND,
    Comparison,
    Thresholds,
    active_autocast,
    default_warmup,
    inactive_amp,
    median_step_s,
    update_band,
    update_ratios,
)
from amplint.verify.report import text_report
from tests.helpers import FIXTURES, dedent, run_cli

# Runs training scripts under the harness: seconds per test.
pytestmark = pytest.mark.slow

VERIFY = FIXTURES / "verify"
CPU_BF16 = ("--device-type", "cpu", "--dtype", "bfloat16", "--steps", "10")
SMALL_RESNET = ("--batch-size", "8", "--image-size", "32", "--width", "8")
SMALL_GPT = ("--layers", "2", "--d-model", "64", "--heads", "4", "--seq-len", "32")
SMALL_GPT += ("--batch-size", "2", "--vocab", "256")
# What a parity check on the CPU says of the rewrite it checked.
CPU_CHECK_NOTE = (
    "verified the rewrite for --device-type cpu --dtype bfloat16; `amplint fix` with this "
    "configuration writes the one for cuda and float16, which this run did not check"
)


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
    # Evidence a user can show: what was run, and every step of every run.
    assert report["schema_version"] == 2 and report["command"][:2] == ["amplint", "verify"]
    for run in ("baseline", "amp"):
        assert len(report[run]["step_times_s"]) == 9 and report[run]["skipped_at"] == []
        assert len(report[run]["losses_by_optimizer"]) == 10
    assert report["baseline"]["loss_scales"] == [None] * 10  # bfloat16: no scaler
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
    assert report["update_parity_ok"] is False  # its gradients drift apart with the loss
    assert report["problems"][1].startswith("update parity: at step ")


def test_a_crash_names_the_run_and_shows_its_error() -> None:
    result = run_cli("verify", VERIFY / "crashes.py", *CPU_BF16)
    assert result.exit_code == 1
    assert "the baseline run crashed (exit status 1) after 3 of 10 steps" in result.stderr
    # The script's own stderr, one line each (a traceback is not escaped into one line).
    assert "\n    ValueError: sample 3 is corrupt: expected 8 features, found 7\n" in result.stderr
    assert "harness.py" not in result.stderr  # the script's traceback, not ours


def test_a_hang_is_killed_after_the_timeout() -> None:
    # The timeout must leave room for importing torch and two steps on a loaded CI machine
    # (2 cores, another test worker beside it): 5 s once stopped the run at 0 of 10 steps.
    # It failed once more on a 16-core GPU machine running 14 test workers: the
    # count says how far the run got, and a machine too loaded to import torch
    # in time kills it before step 2; the kill and its message are what count.
    # 15 s, not 30: the suite's time matters too, and the count may be 0.
    result = run_cli("verify", VERIFY / "hangs.py", *CPU_BF16, "--timeout", "15")
    assert result.exit_code == 1
    assert re.search(
        r"the baseline run hung: no end within --timeout 15 s \(killed after [0-2] of 10 steps\)",
        result.stderr,
    ), result.stderr[-2000:]


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


def test_a_data_parallel_script_keeps_parity_on_every_rank() -> None:
    """torchrun, two CPU processes, gloo: each rank is measured and compared."""
    args = ("--nproc-per-node", "2", *CPU_BF16, "--json")
    result = run_cli("verify", VERIFY / "ddp_train.py", *args)
    report = json.loads(result.stdout)
    assert result.exit_code == 0, report
    assert report["ranks"] == 2 and report["passed"] and report["parity_ok"]
    assert [rank["steps"] for rank in report["per_rank"]] == [[10, 10], [10, 10]]
    assert all(rank["loss_gap"] <= 0.05 for rank in report["per_rank"])
    assert report["loss_gap"] == max(rank["loss_gap"] for rank in report["per_rank"])
    slowest = max(rank["median_step_s"][0] for rank in report["per_rank"])
    assert report["baseline"]["median_step_s"] == slowest
    assert report["rewrite"] == ["AMP001 autocast (bfloat16) around the forward pass"]


def test_a_rank_that_crashes_is_named_with_its_own_traceback(tmp_path: Path) -> None:
    script = tmp_path / "one_bad_rank.py"
    script.write_text(dedent("""
        import os
        import torch

        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(10):
            if step == 2 and os.environ["RANK"] == "1":
                raise ValueError("rank 1 cannot read its shard")
            loss = model(torch.randn(8, 4)).pow(2).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        """))
    result = run_cli("verify", script, "--nproc-per-node", "2", *CPU_BF16)
    assert result.exit_code == 1
    assert "rank 1 of the baseline run crashed (exit status 1) after 2 of 10 steps" in result.stderr
    assert "\n    ValueError: rank 1 cannot read its shard\n" in result.stderr


def _measured(name: str, *, tf32_on: bool = False) -> dict:
    """What the harness reports of one run on a CUDA machine (made up: no GPU here)."""
    step_ms = {"baseline": 40.0, "AMP": 10.0, "TF32": 20.0, "calibration": 40.0}[name]
    return {
        "finished": "steps",
        "steps": 10,
        "exit_status": 0,
        "losses": [2.0 - 0.1 * step for step in range(10)],
        "step_times_s": [step_ms / 1000] * 9,
        "skipped_steps": 0,
        "skipped_at": [],
        "peak_mem_bytes": 2 << 30 if name == "AMP" else 4 << 30,
        "device": "NVIDIA H200",
        "cuda_available": True,
        "torch": "2.13.0",
        "settings": {
            "matmul_allow_tf32": tf32_on or name == "TF32",
            "cudnn_allow_tf32": True,
            "matmul_precision": "tf32" if tf32_on or name == "TF32" else "none",
        },
        "autocast": (
            [{"device": "cuda", "dtype": "float16", "enabled": True, "regions": 10}]
            if name == "AMP"
            else []
        ),
        "scalers": [{"device": "cuda", "enabled": True}] if name == "AMP" else [],
        "rewritten_loaded": [],
        "environment": {
            "torch": "2.13.0",
            "cudnn_benchmark": False,
            "compiled": False,
            "gpu": "NVIDIA H200",
            "capability": "9.0",
            "bf16_native": True,
            "cuda": "12.8",
            "cudnn": 91002,
            "driver": 12080,
        },
    }


def _on_fake_cuda(monkeypatch: pytest.MonkeyPatch, measured=_measured, devices: int = 1) -> list:
    """runs.verify on a made-up CUDA machine with `devices` GPUs whose runs
    report `measured(name)`; the (run, harness options) started, in order."""
    started: list[tuple[str, list[str]]] = []

    def run_child(name, text, request, progress, workdir, modules=None, harness_options=()):
        started.append((name, list(harness_options)))
        return [measured(name)]

    monkeypatch.setattr(runs, "_cuda_devices", lambda: devices)
    monkeypatch.setattr(runs, "run_child", run_child)
    return started


def _request(script: str = "gpt_style.py", **fields) -> runs.Request:
    return runs.Request(
        script=VERIFY / script,
        script_args=fields.pop("script_args", ()),
        settings=fields.pop("settings", Settings()),
        unsafe=False,
        thresholds=Thresholds(steps=10, warmup=2, last=5, rtol=0.05, min_speedup=None),
        timeout_s=300,
        **fields,
    )


def test_more_processes_than_gpus_is_said_before_any_run_starts(monkeypatch) -> None:
    started = _on_fake_cuda(monkeypatch, devices=2)
    with pytest.raises(VerifyError) as raised:
        runs.verify(_request(nproc_per_node=4))
    assert raised.value.exit_code == EXIT_ERROR and started == []
    assert str(raised.value) == (
        "--nproc-per-node 4 starts a process per GPU, and this machine has 2 CUDA devices: "
        "use --nproc-per-node 2 or fewer"
    )
    runs.verify(_request(nproc_per_node=2))
    assert [name for name, _ in started][:2] == ["baseline", "AMP"]


@pytest.mark.parametrize("tf32_run", [True, False])
def test_on_cuda_a_third_run_shows_what_tf32_alone_buys(
    tf32_run: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = _on_fake_cuda(monkeypatch)
    outcome = runs.verify(_request(tf32_run=tf32_run))
    table = "\n".join(text_report(Path("gpt_style.py"), outcome))
    assert "TF32 matmul off (precision none), cuDNN TF32 on" in table  # on CUDA: shown
    assert (
        "  NVIDIA H200 (sm 9.0, bfloat16 native), CUDA 12.8, cuDNN 91002, driver 12080\n" in table
    )
    if not tf32_run:  # --no-tf32-run: update parity's band from another seed
        assert started == [("baseline", []), ("AMP", []), ("calibration", ["--seed", "1"])]
        assert "FP32+TF32" not in table and "TF32 alone" not in table
        return
    assert started == [("baseline", []), ("AMP", []), ("TF32", ["--tf32"])]
    assert outcome.comparison.speedup == 4.0 and outcome.comparison.tf32_speedup == 2.0
    assert "baseline         AMP   FP32+TF32" in table
    assert "speedup 4.00x (TF32 alone: 2.00x)" in table
    assert "gap 0.00% (noise floor 0.00%: the TF32 run)" in table
    assert "(not meaningful" not in table


@pytest.mark.parametrize(
    "amp_ms, tf32_ms, note",
    [
        (50.0, 20.0, "the AMP run was slower than the baseline (0.80x)"),
        (
            30.0,
            20.0,
            "the AMP run was slower than FP32 with TF32 (1.33x against 2.00x): TF32 alone is "
            'the better switch for this script, `torch.backends.cuda.matmul.fp32_precision = "tf32"` '
            "(not mixed with the legacy `allow_tf32` / `set_float32_matmul_precision`, which "
            "torch refuses to read after it)",
        ),
        (10.0, 20.0, None),
    ],
)
def test_amp_slower_than_what_it_is_compared_with_is_said(
    amp_ms: float, tf32_ms: float, note: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def measured(name: str) -> dict:
        run = _measured(name)
        step_ms = {"AMP": amp_ms, "TF32": tf32_ms}.get(name)
        if step_ms is not None:
            run["step_times_s"] = [step_ms / 1000] * 9
        return run

    _on_fake_cuda(monkeypatch, measured)
    outcome = runs.verify(_request())
    assert outcome.notes == ([note] if note else [])


def test_an_original_already_under_amp_is_said_to_compare_amp_with_amp(monkeypatch) -> None:
    def measured(name: str) -> dict:
        run = _measured(name)
        run["autocast"] = _measured("AMP")["autocast"]
        return run

    _on_fake_cuda(monkeypatch, measured)
    outcome = runs.verify(_request())
    assert outcome.notes == [
        "the original already trains under autocast or a GradScaler: this compares AMP with AMP"
    ]


def test_no_tf32_run_where_the_script_turns_tf32_on_itself(monkeypatch) -> None:
    started = _on_fake_cuda(monkeypatch, lambda name: _measured(name, tf32_on=True))
    outcome = runs.verify(_request())
    assert [name for name, _ in started] == ["baseline", "AMP", "calibration"]
    assert outcome.notes == ["no TF32 run: the script turns TF32 matmuls on itself"]


def test_a_loss_that_never_changes_is_noted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parity of a constant loss passes whatever the rewrite does."""
    _on_fake_cuda(monkeypatch, lambda name: {**_measured(name), "losses": [-0.0] * 10})
    assert runs.verify(_request(tf32_run=False)).notes == [
        "the baseline's loss is -0.0 at every step: parity says little here"
    ]


def test_files_the_baseline_writes_where_the_amp_run_can_read_them_are_noted(
    tmp_path: Path,
) -> None:
    """pytorch/examples' DDP tutorial resumes from snapshot.pt when it exists:
    a baseline that saved one would start the AMP run where it stopped."""
    script = tmp_path / "project" / "resumes.py"
    script.parent.mkdir()
    (script.parent / "data.txt").write_text("read, never written")
    script.write_text(dedent("""
        import os
        import torch

        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        if os.path.exists("checkpoints/last.pt"):
            model.load_state_dict(torch.load("checkpoints/last.pt"))
        os.makedirs("checkpoints", exist_ok=True)
        for step in range(6):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            torch.save(model.state_dict(), "checkpoints/last.pt")
        """))
    result = run_cli("verify", script, *CPU_BF16[:4], "--steps", "6", "--json")
    report = json.loads(result.stdout)  # passed or not: the AMP run began trained
    assert report["notes"] == [
        f"the baseline run wrote {os.path.join('checkpoints', 'last.pt')} beside the script; "
        "if the script resumes from what it wrote, the AMP run did not start from scratch",
        CPU_CHECK_NOTE,
    ]


def test_a_cpu_check_runs_on_the_cpu_on_a_machine_with_cuda(tmp_path: Path) -> None:
    """--device-type cpu: the runs see no CUDA device, so a script that picks
    CUDA when it sees one trains where the rewrite's CPU autocast applies (on
    an H100 the bundled examples ran on the GPU, the autocast cast nothing, and
    the check said "passed")."""
    script = tmp_path / "picks_cuda.py"
    script.write_text(dedent("""
        import os

        import torch

        if os.environ.get("CUDA_VISIBLE_DEVICES") != "" or torch.cuda.is_available():
            raise SystemExit("this run can see CUDA")
        model = torch.nn.Linear(8, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        for step in range(10):
            loss = model(torch.randn(16, 8)).pow(2).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        """))
    result = run_cli("verify", script, *CPU_BF16, "--json")
    report = json.loads(result.stdout)
    assert result.exit_code == 0, report
    assert report["amp"]["parameter_devices"] == ["cpu"]


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
    # An autocast for another device than the parameters' casts nothing.
    elsewhere = run([("cpu", "bfloat16", True)], cuda=True)
    elsewhere["parameter_devices"] = ["cuda"]
    assert inactive_amp(elsewhere) == (
        "autocast (cpu, bfloat16) was on, but the optimizer's parameters are on cuda, "
        "whose operations it does not cast"
    )
    assert active_autocast(elsewhere) == []
    elsewhere["parameter_devices"] = ["cpu", "cuda"]  # part of the model on each
    assert inactive_amp(elsewhere) is None
    # What the script itself turned off is not blamed on the machine.
    asked_off = run([("cuda", "float16", False)], [("cuda", False)])
    asked_off["autocast"][0]["asked"] = asked_off["scalers"][0]["asked"] = False
    assert inactive_amp(asked_off) == (
        "autocast (cuda, float16) and GradScaler (cuda) were disabled by the script "
        "(enabled=False)"
    )


def test_harness_records_what_the_script_asked_autocast_and_scalers_for(tmp_path: Path) -> None:
    """A CUDA GradScaler and autocast made with `enabled=False` on this
    CPU-only machine: off because the script said so, not for want of CUDA."""
    result, status = _harness_run(
        tmp_path,
        "off.py",
        """
        import torch

        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cuda", enabled=False)
        for step in range(2):
            with torch.autocast("cuda", dtype=torch.float16, enabled=False):
                loss = model(torch.randn(8, 4)).pow(2).mean()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
        """,
        "--steps",
        "5",
    )
    assert [s["asked"] for s in result["scalers"]] == [False]
    assert [region["asked"] for region in result["autocast"]] == [False]
    assert result["parameter_devices"] == ["cpu"]
    assert inactive_amp(result) == (
        "autocast (cuda, float16) and GradScaler (cuda) were disabled by the script "
        "(enabled=False)"
    )


@pytest.fixture
def trainer_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the driver and its `regressor` package, as the working directory."""
    project = tmp_path / "project"
    shutil.copytree(VERIFY / "trainer_package", project)
    (project / "tools").mkdir()
    (project / "tools" / "sweep.py").write_text(dedent("""
        import torch

        def fit(model, batches, optimizer):
            for x, y in batches:
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
        """))
    monkeypatch.chdir(project)
    return project


def test_a_driver_whose_step_is_in_a_package_says_where_it_is(trainer_package: Path) -> None:
    result = run_cli("verify", "train.py", *CPU_BF16)
    assert result.exit_code == 3
    assert result.stderr.strip() == (
        "amplint: error: nothing to verify: amplint would not change train.py (no findings); "
        "the training step is in what it imports: regressor/engine.py (AMP001); verify it as "
        "the script uses it with --rewrite regressor/engine.py"
    )
    # Rewritten with float16, the step needs a GradScaler beside the optimizer
    # of train.py: amplint reports it and rewrites nothing.
    result = run_cli("verify", "train.py", "--device-type", "cpu", "--steps", "10")
    assert result.exit_code == 3
    assert result.stderr.strip().endswith(
        "what it imports has findings amplint does not rewrite: regressor/engine.py (AMP001)"
    )


def test_rewrite_verifies_a_package_step_as_its_driver_uses_it(trainer_package: Path) -> None:
    result = run_cli("verify", "train.py", "--rewrite", "regressor/", *CPU_BF16, "--json")
    report = json.loads(result.stdout)
    assert result.exit_code == 0, report
    assert report["rewrite"] == [
        "regressor/engine.py: AMP001 autocast (bfloat16) around the forward pass"
    ]
    assert report["passed"] and report["notes"] == [CPU_CHECK_NOTE]
    assert report["baseline"]["autocast"] == []
    assert report["amp"]["autocast"] == [
        {"device": "cpu", "dtype": "bfloat16", "enabled": True, "asked": True, "regions": 10}
    ]
    # The rewrite ran from memory: nothing cached in __pycache__ holds it, so
    # the package still runs as written.
    imported = subprocess.run(
        [
            sys.executable,
            "-c",
            "import regressor.engine as e; print(e.train_one_epoch.__code__.co_names)",
        ],
        capture_output=True,
        text=True,
        cwd=trainer_package,
    )
    assert imported.returncode == 0 and "autocast" not in imported.stdout
    assert "autocast" not in (trainer_package / "regressor" / "engine.py").read_text()


def test_rewritten_modules_the_run_never_imports_are_named(trainer_package: Path) -> None:
    args = ("verify", "train.py", "--rewrite", "regressor", "--rewrite", "tools", *CPU_BF16)
    result = run_cli(*args)
    assert result.exit_code == 0
    assert "  note: rewritten, but never imported by the AMP run: tools/sweep.py" in result.stdout
    result = run_cli("verify", "train.py", "--rewrite", "tools", *CPU_BF16)
    assert result.exit_code == 3
    assert "the script is unchanged and the AMP run imported none of the rewritten modules " in (
        result.stderr
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


def _harness_run(tmp_path: Path, name: str, source: str, *args) -> tuple:
    """`source` as `tmp_path/name` under the harness, which must exit 0: what
    it measured, and the finished process (for what the script printed)."""
    script = tmp_path / name
    script.write_text(dedent(source))
    out = tmp_path / "result.json"
    status = _harness(script, *args, "--out", out)
    assert status.returncode == 0, status.stderr
    return json.loads(out.read_text()), status


def test_harness_counts_skipped_steps_and_records_unscaled_losses(tmp_path: Path) -> None:
    """A scale so large that every scaled gradient overflows: the scaler skips
    each optimizer step, the harness counts them, and the losses it records
    are the unscaled ones."""
    result, status = _harness_run(
        tmp_path,
        "overflow.py",
        """
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
        """,
        "--steps",
        "5",
    )
    printed = [float(line) for line in status.stdout.split()]
    assert result["finished"] == "script" and result["steps"] == 3
    assert result["skipped_steps"] == 3 and result["skipped_at"] == [0, 1, 2]
    assert result["losses"] == pytest.approx(printed)  # unscaled, and unchanged: no update ran
    assert result["loss_scale"] == 2.0**124  # halved once per skipped step
    assert result["loss_scales"] == [2.0**127, 2.0**126, 2.0**125]  # the one each step ran with


def test_a_script_error_raised_through_a_harness_hook_shows_no_harness_frame(
    tmp_path: Path,
) -> None:
    """`loss.backward()` goes through the harness's hook: an error torch
    raises there shows the script's line and torch's, not the hook's."""
    script = tmp_path / "no_grad.py"
    script.write_text(dedent("""
        import torch

        loss = torch.ones(1).sum()  # nothing requires grad
        loss.backward()
        """))
    status = _harness(script, "--steps", "2", "--out", tmp_path / "result.json")
    assert status.returncode == 1
    assert "does not require grad" in status.stderr
    assert 'no_grad.py", line 4, in <module>' in status.stderr
    assert "harness.py" not in status.stderr


def test_harness_counts_a_gan_iteration_once_with_each_optimizer_s_loss(tmp_path: Path) -> None:
    """A critic and a generator step in each iteration: one iteration, not two
    steps; the loss compared is the critic's (the optimizer that steps first),
    and each optimizer's own mean loss is kept beside it."""
    result, status = _harness_run(
        tmp_path,
        "gan.py",
        """
        import torch

        torch.manual_seed(0)
        critic, generator = torch.nn.Linear(4, 1), torch.nn.Linear(2, 4)
        critic_opt = torch.optim.SGD(critic.parameters(), lr=0.01)
        generator_opt = torch.optim.SGD(generator.parameters(), lr=0.01)
        for step in range(3):
            fake = generator(torch.randn(8, 2))
            critic_loss = critic(fake.detach()).mean() - critic(torch.randn(8, 4)).mean()
            critic_opt.zero_grad()
            critic_loss.backward()
            critic_opt.step()
            generator_loss = 10 - critic(fake).mean()
            generator_opt.zero_grad()
            generator_loss.backward()
            generator_opt.step()
            print(critic_loss.item(), generator_loss.item())
        """,
        "--steps",
        "10",
    )
    printed = [[float(v) for v in line.split()] for line in status.stdout.splitlines()]
    assert result["steps"] == 3
    assert result["losses"] == pytest.approx([critic for critic, _ in printed])
    # An iteration ends at the critic's step: the generator's loss of the one
    # before it comes with it.
    by_optimizer = result["losses_by_optimizer"]
    assert list(by_optimizer[0]) == ["0"] and sorted(by_optimizer[1]) == ["0", "1"]
    assert by_optimizer[1]["1"] == pytest.approx(printed[0][1])


def test_harness_reads_the_scale_of_a_scaler_local_to_a_function(tmp_path: Path) -> None:
    """The usual script makes its GradScaler in `main()`, whose frame is gone
    when the harness writes its result: the scale is read all the same."""
    script = tmp_path / "local.py"
    script.write_text(dedent("""
        import torch


        def main():
            model = torch.nn.Linear(4, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
            for step in range(3):
                loss = model(torch.randn(8, 4)).pow(2).mean()
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()


        main()
        """))
    out = tmp_path / "result.json"
    status = _harness(script, "--steps", "5", "--out", out)
    assert status.returncode == 0, status.stderr
    assert json.loads(out.read_text())["loss_scale"] == 1024.0


def test_harness_does_not_time_the_set_up_before_the_first_step(tmp_path: Path) -> None:
    """A script that takes a second to set up and then steps fast: its step
    times are the steps', one per step after the first, none of them the
    second of set-up (which `--steps 2` once reported as its median step)."""
    result, status = _harness_run(
        tmp_path,
        "slow_start.py",
        """
        import time

        import torch

        time.sleep(1.0)  # loading data, building the model
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(3):
            model(torch.randn(8, 4)).pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
        """,
        "--steps",
        "2",
    )
    assert result["steps"] == 2 and len(result["step_times_s"]) == 1
    assert result["step_times_s"][0] < 0.5
    assert median_step_s(result, default_warmup(2)) < 0.5


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
    result, status = _harness_run(
        tmp_path,
        "regions.py",
        """
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
        """,
        "--steps",
        "5",
    )
    assert result["autocast"] == [
        {"device": "cpu", "dtype": "bfloat16", "enabled": False, "asked": False, "regions": 1},
        {"device": "cpu", "dtype": "bfloat16", "enabled": True, "asked": True, "regions": 3},
    ]
    assert result["scalers"] == [
        {
            "device": "cpu",
            "enabled": False,
            "asked": False,
            "init_scale": None,  # a disabled scaler keeps none
            "growth_interval": None,
        }
    ]


def test_harness_reads_tf32_settings_a_script_made_with_the_new_api(tmp_path: Path) -> None:
    """Once a script sets `fp32_precision`, reading torch's legacy allow_tf32
    flags raises: the harness reading them crashed after the script ran."""
    settings, status = _harness_run(
        tmp_path,
        "tf32.py",
        """
        import torch

        torch.backends.cuda.matmul.fp32_precision = "tf32"
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(2):
            model(torch.randn(8, 4)).pow(2).mean().backward()
            optimizer.step()
        """,
        "--steps",
        "5",
    )
    settings = settings["settings"]
    assert settings["matmul_allow_tf32"] is True and settings["matmul_precision"] == "tf32"
    assert settings["cudnn_allow_tf32"] is True  # torch's default for convolutions


def test_harness_tf32_run_sets_the_switch_a_script_can_still_read(tmp_path: Path) -> None:
    script = tmp_path / "reads.py"
    script.write_text(dedent("""
        import torch

        # A script that reads either API after the harness turned TF32 on.
        print(torch.backends.cuda.matmul.allow_tf32, torch.backends.cuda.matmul.fp32_precision)
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model(torch.randn(8, 4)).pow(2).mean().backward()
        optimizer.step()
        """))
    out = tmp_path / "result.json"
    status = _harness(script, "--steps", "5", "--out", out, "--tf32")
    assert status.returncode == 0, status.stderr
    assert status.stdout.split() == ["True", "tf32"]
    settings = json.loads(out.read_text())["settings"]
    assert settings["matmul_allow_tf32"] is True and settings["cudnn_allow_tf32"] is True


def test_harness_stops_after_the_steps_asked_for(tmp_path: Path) -> None:
    result, status = _harness_run(
        tmp_path,
        "forever.py",
        """
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
        """,
        "--steps",
        "4",
    )
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
    comparison = Comparison([baseline], [amp], thresholds, speed_meaningful=True)
    assert median_step_s(baseline, 2) == 2.0  # a slow first step (warm-up) is not timed
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
    comparison = Comparison([baseline], [amp], thresholds, speed_meaningful=False)
    assert comparison.loss_gap == 0.0 and comparison.passed
    del amp["skipped_at"]  # as a step-by-step comparison would see it
    assert Comparison([baseline], [amp], thresholds, speed_meaningful=False).loss_gap > 0.2


def test_comparison_fails_on_nan_and_on_a_slow_rewrite() -> None:
    thresholds = Thresholds(steps=3, warmup=1, last=2, rtol=0.05, min_speedup=1.5)
    baseline = _run([3, 2, 1.0], [1.0, 1.0])
    amp = _run([3, 2, "nan"], [1.0, 1.0])
    comparison = Comparison([baseline], [amp], thresholds, speed_meaningful=True)
    assert not comparison.parity_ok and not comparison.passed
    reasons = comparison.reasons()
    assert reasons[0] == (
        "the AMP run did not train: its loss is not finite at 1 of 3 steps, first at step 2, "
        "the baseline's at none: the forward pass overflows, which no loss scale mends"
    )
    assert reasons[1] == "speedup 1.00x is below --min-speedup 1.5"


def test_an_amp_run_whose_every_step_was_skipped_fails_and_says_so() -> None:
    """Every scaled gradient overflowed: the GradScaler skipped each step and
    no update happened, so there is no loss after an update to compare.  The
    verdict failed with no reason; it names the cause now."""
    thresholds = Thresholds(steps=4, warmup=1, last=2, rtol=0.05, min_speedup=None)
    baseline = _run([4, 3, 2, 1.0], [1.0, 1.0, 1.0])
    amp = _run([4, 4, 4, 4.0], [1.0, 1.0, 1.0])
    amp["skipped_at"], amp["skipped_steps"] = [0, 1, 2, 3], 4
    comparison = Comparison([baseline], [amp], thresholds, speed_meaningful=False)
    assert not comparison.passed
    assert comparison.reasons() == [
        "the AMP run made no update: its GradScaler skipped all 4 steps (the scaled "
        "gradients held inf or NaN at every scale it tried)"
    ]


def _skipping(losses: list, skipped_at: list[int], **scaler) -> dict:
    run = _run(losses, [1.0] * (len(losses) - 1))
    run["skipped_at"], run["skipped_steps"] = skipped_at, len(skipped_at)
    run["scalers"] = [{"device": "cpu", "enabled": True, **scaler}]
    return run


FALLING = [20.0 - step * 0.5 for step in range(20)]


@pytest.mark.parametrize(
    ("skipped_at", "scaler", "trained"),
    [
        # Each skip halves the scale: at most log2(65,536) = 16 from 65,536 to
        # 1, plus one for a spike, plus one per growth interval gone through.
        ([], {}, True),
        (list(range(5)), {}, True),
        ([1, 2, 3, 4], {}, True),  # the search starts late: the first update grew the gradients
        (list(range(17)), {}, True),
        (list(range(18)), {}, False),  # the scale fell below 1
        (list(range(11)), {"init_scale": 2.0**10}, True),
        (list(range(12)), {"init_scale": 2.0**10}, False),
        (list(range(1, 19)), {"growth_interval": 5}, True),  # four intervals: four more
        # The case: one update, then every step skipped.
        (list(range(1, 20)), {}, False),
    ],
)
def test_a_run_trained_when_its_scaler_skipped_no_more_than_a_healthy_scaler(
    skipped_at: list[int], scaler: dict, trained: bool
) -> None:
    thresholds = Thresholds(steps=20, warmup=1, last=3, rtol=0.05, min_speedup=None)
    baseline = _run(FALLING, [1.0] * 19)
    # The losses at the updates follow the baseline's: parity alone would pass.
    losses, updates = [], iter(FALLING)
    current = next(updates)
    for step in range(20):
        losses.append(current)
        if step not in skipped_at:
            current = next(updates, current)
    amp = _skipping(losses, skipped_at, **scaler)
    comparison = Comparison([baseline], [amp], thresholds, speed_meaningful=False)
    assert comparison.passed is trained, comparison.reasons()
    if not trained:
        (reason,) = comparison.reasons()
        assert reason.startswith(
            f"the AMP run did not train: its GradScaler skipped {len(skipped_at)} of 20 steps, "
            "more than a healthy scaler's"
        )
        assert f"first held inf or NaN at step {skipped_at[0]}" in reason


def test_nineteen_of_twenty_steps_skipped_with_an_infinite_loss_fails_naming_them() -> None:
    """The verdict that said "passed": one update (step 0, as the baseline's),
    then a float16 forward pass that is -inf at every step.  The losses at
    updates were one, identical; now the skipped steps and the loss decide."""
    thresholds = Thresholds(steps=20, warmup=1, last=3, rtol=0.05, min_speedup=None)
    baseline = _run(FALLING, [1.0] * 19)
    amp = _skipping([FALLING[0]] + ["-inf"] * 19, list(range(1, 20)))
    amp["first_non_finite"] = {"step": 2, "module": "Net()", "inputs_finite": True}
    comparison = Comparison([baseline], [amp], thresholds, speed_meaningful=False)
    assert not comparison.passed
    assert comparison.reasons()[0] == (
        "the AMP run did not train: its GradScaler skipped 19 of 20 steps; its loss is not "
        "finite at 19 of 20 steps, first at step 1, the baseline's at none: the forward pass "
        "overflows, which no loss scale mends; the first inf/NaN of the forward pass came out "
        "of `Net()` at step 2"
    )


def test_a_non_finite_loss_the_baseline_has_too_is_no_sign_against_amp() -> None:
    thresholds = Thresholds(steps=4, warmup=1, last=2, rtol=0.05, min_speedup=None)
    baseline = _run([4, "inf", 2, 1.0], [1.0] * 3)
    amp = _skipping([4, "inf", 2, 1.0], [1])
    comparison = Comparison([baseline], [amp], thresholds, speed_meaningful=False)
    assert comparison.inconclusive is not None
    assert not any("did not train" in reason for reason in comparison.reasons())


def test_an_overflow_driven_by_the_data_fails_naming_the_skipped_steps_and_the_layer() -> None:
    """Nothing in the code shows it (amplint rewrites it): counts up to 1e5
    overflow float16 in the first Linear from the second batch on."""
    result = run_cli(
        "verify",
        VERIFY / "overflows_fp16.py",
        "--device-type",
        "cpu",
        "--dtype",
        "float16",
        "--steps",
        "20",
        "--json",
    )
    report = json.loads(result.stdout)
    assert result.exit_code == 1 and report["passed"] is False
    (reason,) = report["problems"]
    assert reason.startswith("the AMP run did not train: its GradScaler skipped 20 of 20 steps;")
    assert "its loss is not finite at 19 of 20 steps, first at step 1" in reason
    assert (
        "the first inf/NaN of the forward pass came out of "
        "`Linear(in_features=512, out_features=64, bias=True)` at step 1"
    ) in reason


def test_ranks_are_compared_one_by_one_and_timed_by_the_slowest() -> None:
    thresholds = Thresholds(steps=4, warmup=1, last=2, rtol=0.05, min_speedup=None)
    baseline = [_run([4, 3, 2, 1.0], [1.0, 2.0, 2.0]), _run([4, 3, 2, 2.0], [1.0, 3.0, 3.0])]
    amp = [_run([4, 3, 2, 1.0], [1.0, 1.0, 1.0]), _run([4, 3, 2, 2.4], [1.0, 1.5, 1.5])]
    comparison = Comparison(baseline, amp, thresholds, speed_meaningful=True)
    assert comparison.baseline_median == 3.0 and comparison.amp_median == 1.5  # rank 1's
    assert comparison.speedup == 2.0
    assert comparison.rank_gaps == [0.0, pytest.approx(0.1)]
    assert comparison.loss_gap == pytest.approx(0.1) and not comparison.passed
    assert comparison.reasons() == [
        "loss parity on rank 1: the AMP run's mean loss over the last 2 updates differs from "
        "the baseline's by 10.0% (allowed: 5.0%, --rtol)"
    ]
    amp[0]["losses"][-1] = "nan"
    assert comparison.reasons()[0].startswith(
        "the AMP run did not train on rank 0: its loss is not finite at 1 of 4 steps"
    )


def test_the_tf32_run_stands_beside_the_comparison_without_deciding_it() -> None:
    thresholds = Thresholds(steps=4, warmup=1, last=2, rtol=0.05, min_speedup=None)
    baseline, amp = _run([4, 3, 2, 1.0], [9.0, 4.0, 4.0]), _run([4, 3, 2, 1.0], [9.0, 1.0, 1.0])
    tf32 = _run([4, 3, 2, 1.5], [9.0, 2.0, 2.0])  # far off: a report, not a failure
    comparison = Comparison([baseline], [amp], thresholds, True, tf32=[tf32])
    assert comparison.speedup == 4.0 and comparison.tf32_speedup == 2.0
    assert comparison.tf32_gap == pytest.approx(0.25 / 1.5) and comparison.passed
    document = comparison.as_json("NVIDIA H200", "float16")
    assert document["tf32"]["median_step_s"] == 2.0 and document["tf32_speedup"] == 2.0
    assert Comparison([baseline], [amp], thresholds, True).as_json("cpu", "bf16")["tf32"] is None


def test_default_warmup() -> None:
    assert [default_warmup(steps) for steps in (2, 10, 50, 500)] == [1, 2, 10, 10]


def test_progress_names_the_run_and_its_step() -> None:
    seen: list[tuple[str, int, int]] = []
    request = _request(
        "resnet_style.py",
        script_args=SMALL_RESNET,
        settings=Settings(dtype="bfloat16", device_type="cpu"),
    )
    outcome = runs.verify(request, progress=lambda *report: seen.append(report))
    assert outcome.comparison.passed
    assert {name for name, _, _ in seen} == {"baseline", "AMP", "calibration"}
    assert all(total == 10 and 0 <= done <= 10 for _, done, total in seen)


def _updates(*grad_norms) -> list:
    """What the harness records of one optimizer per step: None for a step the
    scaler skipped; the update norm and largest gradient follow the norm."""
    return [
        (
            None
            if norm is None
            else [
                {
                    "optimizer": "Adam",
                    "grad_norm": [norm],
                    "grad_max": [norm / 4],
                    "update_norm": [1e-3],
                }
            ]
        )
        for norm in grad_norms
    ]


def test_update_parity_aligns_out_skipped_steps_and_names_the_first_step_outside() -> None:
    thresholds = Thresholds(steps=4, warmup=1, last=2, rtol=0.05, min_speedup=None)
    baseline, amp = _run([4, 3, 2, 1.0], [1.0] * 3), _run([4, 3, 2, 1.0], [1.0] * 3)
    baseline["updates"] = _updates(2.0, 1.5, 1.0, 0.8)
    # The scaler skips the first step: the AMP run is an update behind, its
    # k-th update compared with the baseline's k-th.
    amp["updates"] = _updates(None, 2.0, 1.5 / 65536, 1.01)
    comparison = Comparison([baseline], [amp], thresholds, speed_meaningful=False)
    assert [ratio.step for ratio in update_ratios(baseline, amp)] == [1] * 3 + [2] * 3 + [3] * 3
    assert comparison.parity_ok and not comparison.update_parity_ok and not comparison.passed
    assert comparison.reasons() == [
        "update parity: at step 2 Adam received a gradient norm 1.53e-05x the baseline's "
        "(allowed: 0.25x to 4x); 1 of 3 steps outside"
    ]
    amp["updates"][2] = None  # had the scaler skipped it
    assert comparison.update_parity_ok and comparison.passed


def test_update_parity_band_is_calibrated_on_a_run_amp_has_nothing_to_do_with() -> None:
    baseline, calibration = {"updates": _updates(1.0, 1.0)}, {"updates": _updates(1.0, 1.0)}
    assert update_band(baseline, None) == update_band(baseline, calibration) == MIN_BAND
    calibration["updates"] = _updates(1.0, 5.0)  # another seed, another trajectory
    assert update_band(baseline, calibration) == 10.0
    calibration["updates"] = _updates(1e-3, 1.0)
    assert update_band(baseline, calibration) == MAX_BAND  # never as wide as a loss scale


def test_update_parity_sees_a_clamp_of_scaled_gradients_that_loss_parity_misses(
    tmp_path: Path,
) -> None:
    """The project's own helper clamps gradients still multiplied by the loss
    scale: after GradScaler.step unscales them, Adam receives them 65536
    times too small, and normalises its steps so that the loss follows the
    FP32 run's for 40 steps.  Unscaled first, the same code passes both."""
    original = (VERIFY / "scaled_clip" / "train.py").read_text()
    wrong = (VERIFY / "scaled_clip" / "wrong_amp.py").read_text()
    right = wrong.replace(
        "        clip_gradient(optimizer, 5.0)",
        "        scaler.unscale_(optimizer)\n        clip_gradient(optimizer, 5.0)",
    )
    assert right != wrong
    request = _request("scaled_clip/train.py")
    request = runs.Request(**{**request.__dict__, "thresholds": Thresholds(40, 1, 10, 0.05, None)})

    def run(name: str, text: str, *options: str) -> dict:
        return runs.run_child(name, text, request, None, tmp_path, harness_options=options)

    baseline = run("baseline", original)
    calibration = run("calibration", original, "--seed", "1")
    verdicts = {}
    for name, text in (("wrong", wrong), ("right", right)):
        amp = run(name, text)
        assert amp[0]["skipped_steps"] == 0 and amp[0]["steps"] == 40
        verdicts[name] = Comparison(
            baseline,
            amp,
            request.thresholds,
            False,
            calibration=calibration,
            calibrated_by="an FP32 run with another seed",
        )
    wrong_verdict, right_verdict = verdicts["wrong"], verdicts["right"]
    assert wrong_verdict.parity_ok, wrong_verdict.loss_gap  # the loss cannot tell
    assert not wrong_verdict.update_parity_ok and not wrong_verdict.passed
    (reason,) = wrong_verdict.reasons()
    assert reason.startswith("update parity: at step 0 Adam received a gradient norm ")
    assert "calibrated on an FP32 run with another seed); 40 of 40 steps outside" in reason
    assert right_verdict.parity_ok and right_verdict.update_parity_ok and right_verdict.passed


def test_update_parity_aligns_each_optimizer_with_itself() -> None:
    """Four optimizers stepped in turn (MorvanZhou's optimizer comparison), the
    scaler skipping the first one's first step: each optimizer's k-th update
    is compared with its own k-th, never with its neighbour's."""

    def update(index: int, norm: float) -> list[dict]:
        figures = {"grad_norm": [norm], "grad_max": [norm], "update_norm": [norm]}
        return [{"optimizer": "SGD" if index == 0 else "RMSprop", "index": index, **figures}]

    baseline = {"updates": [update(0, 1.0), update(1, 100.0), update(0, 1.0), update(1, 100.0)]}
    amp = {"updates": [None, update(1, 100.0), update(0, 1.0), update(1, 100.0)]}
    ratios = update_ratios(baseline, amp)
    assert {ratio.ratio for ratio in ratios} == {1.0}
    assert [ratio.step for ratio in ratios] == [1] * 3 + [2] * 3 + [3] * 3


class _FakeCuda:
    """torch.cuda on a machine that has a GPU: a device clock the test moves,
    and events that read it when recorded."""

    def __init__(self) -> None:
        self.now_ms = 0.0
        self.synchronized = 0
        self.reset_at: list[float] = []  # when the peak memory was reset
        cuda = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                self.at: float | None = None

            def record(self) -> None:
                self.at = cuda.now_ms

            def elapsed_time(self, end: "Event") -> float:
                return end.at - self.at

        self.Event = Event

    def is_available(self) -> bool:
        return True

    def synchronize(self) -> None:
        self.synchronized += 1

    def max_memory_allocated(self) -> int:
        return 1 << 20

    def max_memory_reserved(self) -> int:
        return 3 << 20

    def reset_peak_memory_stats(self) -> None:
        self.reset_at.append(self.now_ms)

    def get_device_name(self) -> str:
        return "Fake GPU"

    def get_device_capability(self) -> tuple[int, int]:
        return (7, 0)  # a V100: bfloat16 only emulated


class _TorchWithCuda:
    """torch, with `cuda` replaced."""

    def __init__(self, torch, cuda: _FakeCuda) -> None:
        self._torch, self.cuda = torch, cuda

    def __getattr__(self, name: str):
        return getattr(self._torch, name)


def test_on_cuda_steps_are_timed_by_events_read_once_at_the_end() -> None:
    """No synchronisation per step (it would stall the queueing of the next
    step's kernels and time a slower program): an event at each step's end,
    read after one synchronisation when the result is written."""
    torch = pytest.importorskip("torch")
    from amplint.verify.harness import Recorder

    cuda = _FakeCuda()
    recorder = Recorder(_TorchWithCuda(torch, cuda), steps=10, progress_path=None)
    optimizer = object()
    for step_ms in (900.0, 5.0, 7.0, 9.0):  # set-up, then three steps
        cuda.now_ms += step_ms
        recorder.backward(torch.tensor(1.0))
        recorder.step(optimizer, skipped=False)
    assert cuda.synchronized == 0
    result = recorder.result("steps")
    assert cuda.synchronized == 1
    assert result["step_times_s"] == pytest.approx([0.005, 0.007, 0.009])
    assert result["device"] == "Fake GPU" and result["peak_mem_bytes"] == 1 << 20
    environment = result["environment"]
    assert environment["gpu"] == "Fake GPU" and environment["capability"] == "7.0"
    assert environment["bf16_native"] is False and environment["compiled"] is False


def test_on_cuda_peak_memory_is_the_training_window_s_and_reserved_is_beside_it() -> None:
    """The peak is reset once the warm-up iterations ran (cuDNN autotuning
    takes workspaces the training does not); what the caching allocator
    reserved is reported beside what tensors allocated."""
    torch = pytest.importorskip("torch")
    from amplint.verify.harness import Recorder

    cuda = _FakeCuda()
    recorder = Recorder(_TorchWithCuda(torch, cuda), steps=10, progress_path=None, warmup=2)
    optimizer = object()
    for _ in range(4):
        cuda.now_ms += 10.0
        recorder.step(optimizer, skipped=False)
    assert cuda.reset_at == [20.0]  # after the second iteration, once
    result = recorder.result("steps")
    assert result["peak_mem_bytes"] == 1 << 20 and result["peak_reserved_bytes"] == 3 << 20


def test_harness_says_when_the_script_compiled_its_model(tmp_path: Path) -> None:
    environment, status = _harness_run(
        tmp_path,
        "compiled.py",
        """
        import torch

        model = torch.compile(torch.nn.Linear(4, 1), backend="eager")
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(2):
            model(torch.randn(8, 4)).pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
        """,
        "--steps",
        "5",
    )
    environment = environment["environment"]
    assert environment["compiled"] is True and ("gpu" in environment) is _cuda()


def test_the_driver_version_is_what_nvidia_smi_says(tmp_path: Path, monkeypatch) -> None:
    """torch has no public call for the driver's version: nvidia-smi answers,
    and without it (or when it fails) the figure is left out, never the run."""
    from amplint.verify.harness import driver_version

    fake = tmp_path / "nvidia-smi"
    fake.write_text('#!/bin/sh\n[ "$1" = --query-gpu=driver_version ] && echo 580.159.04\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert driver_version() == "580.159.04"
    fake.write_text("#!/bin/sh\nexit 9\n")
    assert driver_version() is None
    fake.unlink()
    assert driver_version() is None


def test_make_verify_gpu_makes_a_dry_run_on_the_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`make verify-gpu` is prepared for the one GPU the project may get: here,
    with no CUDA, it says so in one line, runs the same code path on the CPU,
    writes its table and JSON, and exits 0 when every row is as expected.  The
    corpus rows come from an exported tree (the clones are not here in CI): a
    GAN with a sigmoid head, as `tests.ecosystem_runnable --export` writes it."""
    if _cuda():
        pytest.skip("a GPU is here: make verify-gpu runs for real")
    from tests import verify_table

    corpus = tmp_path / "corpus"
    tree = corpus / "examples_dcgan"
    (tree / "dcgan").mkdir(parents=True)
    shutil.copy(FIXTURES / "precision" / "gan_bce.py", tree / "dcgan" / "main.py")
    run = {"script": "dcgan/main.py", "argv": [], "env": {}, "steps": 20, "rewrite": []}
    run |= {"repo": "pytorch/examples", "commit": "0" * 40}
    (tree / verify_table.RUN_FILE).write_text(json.dumps(run), encoding="utf-8")
    rows = [row for row in verify_table.CORPUS_ROWS if row[0] == "examples_dcgan"]
    assert {row[2] for row in rows} == {"decline", "pass"}
    monkeypatch.setattr(verify_table, "CORPUS_ROWS", tuple(rows))

    status = verify_table.main(["--out", str(tmp_path / "out"), "--corpus", str(corpus)])
    out = capsys.readouterr().out
    assert status == 0, out[-3000:]
    assert out.splitlines()[0] == (
        "no CUDA device here: a dry run of the same code path on the CPU, not figures"
    )
    assert "| `resnet_style.py` | bfloat16 |" in out
    # The overflow only the data shows, in float16: verify fails it, as it must.
    assert "| `overflows_fp16.py` | float16 |" in out
    assert "| failed (must fail) |" in out
    # A sigmoid feeding BCELoss: declined in float16, with the reason; bfloat16 trains.
    assert "| `precision/gan_bce.py` | float16 |" in out
    assert "| `examples_dcgan (pytorch/examples@0000000) float16` | float16 |" in out
    assert out.count("declined (must decline)") == 2
    assert "(nn.BCELoss) takes probabilities" in out
    assert re.search(
        r"\| `examples_dcgan \(pytorch/examples@0000000\) bfloat16` .*\| passed \|", out
    )
    assert (tmp_path / "out" / "table.md").exists()
    assert (tmp_path / "out" / "02-gpt_style.json").exists()
    assert "samples/s |" in out and "tokens/s |" in out  # the throughput
    if importlib.util.find_spec("matplotlib") is not None:
        assert (tmp_path / "out" / "01-resnet_style.png").read_bytes()[:4] == b"\x89PNG"

    # A row that is not exported is named, and the check does not pass.
    monkeypatch.setattr(verify_table, "CORPUS_ROWS", (("yunjey_resnet", None, "pass"),))
    monkeypatch.setattr(verify_table, "bundled", lambda small: [])
    assert verify_table.main(["--out", str(tmp_path / "none"), "--corpus", str(corpus)]) == 1
    assert f"`yunjey_resnet`: not exported under {corpus}" in capsys.readouterr().out


def test_atol_passes_losses_near_zero_that_rtol_alone_fails() -> None:
    strict = Thresholds(steps=4, warmup=1, last=2, rtol=0.05, min_speedup=None)
    baseline = _run([1.0, 0.1, 0.001, 0.001], [1.0] * 3)
    amp = _run([1.0, 0.1, 0.002, 0.002], [1.0] * 3)  # 100 % apart, 0.001 away
    assert not Comparison([baseline], [amp], strict, speed_meaningful=False).parity_ok
    loose = Thresholds(steps=4, warmup=1, last=2, rtol=0.05, min_speedup=None, atol=0.01)
    comparison = Comparison([baseline], [amp], loose, speed_meaningful=False)
    assert comparison.parity_ok and comparison.reasons() == []


def test_the_calibration_run_s_gap_is_shown_as_the_noise_floor() -> None:
    thresholds = Thresholds(steps=4, warmup=1, last=2, rtol=0.05, min_speedup=None)
    baseline = _run([4, 3, 2, 1.0], [1.0] * 3)
    amp = _run([4, 3, 2, 1.01], [1.0] * 3)
    seeded = _run([4, 3, 2, 1.03], [1.0] * 3)
    comparison = Comparison(
        [baseline], [amp], thresholds, False, calibration=[seeded], calibrated_by="another seed"
    )
    assert comparison.noise_floor == pytest.approx(0.01)  # (2 + 1.03) / 2 against 1.5


def test_a_baseline_that_diverges_makes_the_verdict_inconclusive() -> None:
    """When the FP32 run itself diverges there is nothing to hold AMP to: not
    a failure of the rewrite, and not a pass."""
    thresholds = Thresholds(steps=4, warmup=1, last=2, rtol=0.05, min_speedup=None)
    baseline = _run([4, 30, 3e9, "nan"], [1.0] * 3)
    amp = _run([4, 3, 2, 1.0], [1.0] * 3)
    comparison = Comparison([baseline], [amp], thresholds, speed_meaningful=False)
    assert comparison.inconclusive == "the FP32 baseline itself diverged (NaN or inf loss)"
    assert comparison.as_json("cpu", "bfloat16")["inconclusive"] == comparison.inconclusive


def test_sparklines_share_one_scale_and_mark_what_is_not_finite() -> None:
    from amplint.verify.report import sparklines

    falling, flat = sparklines([[8.0, 6.0, 4.0, 2.0], [8.0, 8.0, "nan", 8.0]])
    assert falling == "█▆▃▁" and flat == "██!█"
    assert len(sparklines([list(range(100))], width=40)[0]) == 40


def test_plot_writes_the_runs_loss_and_step_time_to_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "runs.png"
    result = run_cli("verify", VERIFY / "gpt_style.py", *CPU_BF16, "--plot", png, "--", *SMALL_GPT)
    assert result.exit_code == 0, result.output
    assert f"plot: {png}" in result.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_says_what_to_install_before_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from amplint.verify import plot

    monkeypatch.setattr(plot, "plot_available", lambda: False)
    result = run_cli("verify", VERIFY / "gpt_style.py", "--plot", tmp_path / "runs.png")
    assert result.exit_code == 2
    assert "--plot needs matplotlib: pip install 'amplint[plot]'" in result.output


def test_repeated_rounds_interleave_and_report_the_median_and_spread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    step_ms = {"baseline": [40, 44, 36], "AMP": [10, 12, 30], "TF32": [20, 21, 19]}

    def measured(name: str) -> dict:
        kind, _, round_ = name.partition(", round ")
        run = _measured(kind)
        run["step_times_s"] = [step_ms[kind][int(round_ or 1) - 1] / 1000] * 9
        return run

    started = _on_fake_cuda(monkeypatch, measured)
    outcome = runs.verify(_request(repeat=3))
    assert [name for name, _ in started] == [
        "baseline",
        "AMP",
        "TF32",
        "baseline, round 2",
        "AMP, round 2",
        "TF32, round 2",
        "baseline, round 3",
        "AMP, round 3",
        "TF32, round 3",
    ]
    comparison = outcome.comparison
    assert comparison.baseline_median == 0.040 and comparison.amp_median == 0.012
    assert comparison.spread(comparison.amp) == pytest.approx(0.010)  # 11 to 21 ms
    assert comparison.timing_noise is None  # 10 ms of spread, 28 ms of difference
    table = "\n".join(text_report(Path("gpt_style.py"), outcome))
    assert "IQR over rounds" in table and "3 rounds, interleaved" in table


def test_a_speedup_smaller_than_the_spread_of_the_rounds_is_said_to_be_noise() -> None:
    thresholds = Thresholds(steps=3, warmup=1, last=1, rtol=0.05, min_speedup=None)
    runs_ = [_run([2, 1.0, 1.0], [1.0, 1.0])]
    comparison = Comparison(
        runs_,
        [_run([2, 1.0, 1.0], [1.0, 1.0])],
        thresholds,
        True,
        repeats={"baseline": [0.040, 0.041, 0.039], "AMP": [0.020, 0.060, 0.038]},
    )
    assert comparison.timing_noise == (
        "the repeated runs' step times spread more (IQR 20.0 ms) than the baseline's and the "
        "AMP run's differ (2.0 ms): the speedup is within the noise"
    )
    # Said once among the notes.
    assert runs._warnings(_request(), comparison, runs_[0]) == [comparison.timing_noise]


def test_throughput_from_a_given_batch_size_in_samples_or_tokens(monkeypatch) -> None:
    _on_fake_cuda(monkeypatch)
    outcome = runs.verify(_request(batch_size=32))
    comparison = outcome.comparison
    assert comparison.throughput(comparison.baseline) == pytest.approx(800.0)  # 32 / 40 ms
    assert comparison.throughput(comparison.amp) == pytest.approx(3200.0)
    table = "\n".join(text_report(Path("gpt_style.py"), outcome))
    assert "samples/s, 32 samples a step (--batch-size)" in table
    tokens = runs.verify(_request(batch_size=32, seq_len=1024)).comparison
    assert tokens.throughput(tokens.amp) == pytest.approx(3200.0 * 1024)


def test_harness_reads_the_batch_size_of_the_script_s_data_loader(tmp_path: Path) -> None:
    run, status = _harness_run(
        tmp_path,
        "loader.py",
        """
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in DataLoader(data, batch_size=8):
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
        """,
        "--steps",
        "10",
    )
    assert run["loader_batch_sizes"] == [8]
    thresholds = Thresholds(steps=4, warmup=1, last=2, rtol=0.05, min_speedup=None)
    comparison = Comparison([run], [run], thresholds, speed_meaningful=False)
    assert comparison.samples_per_step == (8, "the script's DataLoader")


def test_tf32_is_recommended_in_the_api_of_the_torch_the_runs_used() -> None:
    """torch 2.9 replaced allow_tf32 and set_float32_matmul_precision by the
    `fp32_precision` settings; torch 2.13 refuses to read the legacy ones after
    the new one is set, which the advice says."""
    assert runs.tf32_switch("2.8.1+cu126") == '`torch.set_float32_matmul_precision("high")`'
    assert runs.tf32_switch("") == '`torch.set_float32_matmul_precision("high")`'
    advice = runs.tf32_switch("2.13.0+cpu")
    assert advice.startswith('`torch.backends.cuda.matmul.fp32_precision = "tf32"`')
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import torch\n"
            'torch.backends.cuda.matmul.fp32_precision = "tf32"\n'
            "print(torch.backends.cuda.matmul.fp32_precision)\n"
            "torch.get_float32_matmul_precision()\n",
        ],
        capture_output=True,
        text=True,
    )
    assert probe.stdout.strip() == "tf32"
    assert probe.returncode != 0 and "mix of the legacy and new APIs" in probe.stderr


def test_a_declined_step_is_nothing_to_verify_and_verify_says_why() -> None:
    """A training step amplint declines to rewrite (a sigmoid feeding BCELoss,
    in float16) is nothing to compare: verify exits 3 with fix's reason, not
    with "it needs a training step"."""
    script = FIXTURES / "precision" / "gan_bce.py"
    result = run_cli("verify", script, "--device-type", "cpu", "--dtype", "float16")
    assert result.exit_code == 3
    assert "nothing to verify: amplint declines to rewrite the training step at" in result.stderr
    assert "gan_bce.py:58: training step runs in FP32; not rewritten:" in result.stderr
    assert "(nn.BCELoss) takes probabilities" in result.stderr
    assert "it needs a training step" not in result.stderr


def test_the_harness_skips_planned_steps_as_a_grad_scaler_would(tmp_path: Path) -> None:
    """--skip-steps: the FP32 run that skips what the AMP run's GradScaler
    skipped.  The planned step of the named optimizer updates nothing (its
    state neither), the gradients are left as they were, the other optimizer
    steps, and the skip is recorded as a GradScaler's would be."""
    result, status = _harness_run(
        tmp_path,
        "two.py",
        """
        import torch

        torch.manual_seed(0)
        first, second = torch.nn.Linear(4, 1), torch.nn.Linear(4, 1)
        a = torch.optim.Adam(first.parameters(), lr=0.1)
        b = torch.optim.SGD(second.parameters(), lr=0.1)
        x = torch.randn(8, 4)
        for step in range(3):
            a.zero_grad()
            b.zero_grad()
            first(x).pow(2).mean().backward()
            before = first.weight.detach().clone()
            a.step()
            kept = first.weight.grad is not None
            second(x).pow(2).mean().backward()
            b.step()
            print(step, bool(torch.equal(before, first.weight)), kept, int(a.state[first.weight]["step"]))
        """,
        "--steps",
        "5",
        "--skip-steps",
        json.dumps({"0": [1]}),
    )
    printed = [line.split() for line in status.stdout.splitlines()]
    # Step 1 of the first optimizer changed nothing, Adam's count of steps
    # neither; its gradients were there after it.
    assert printed == [
        ["0", "False", "True", "1"],
        ["1", "True", "True", "1"],
        ["2", "False", "True", "2"],
    ]
    assert result["skipped_at"] == [1] and result["skipped_steps"] == 1
    assert result["skipped_calls"] == {"0": [1]}
    assert result["updates"][1] is None and result["updates"][2] is not None


def test_parity_is_held_to_an_fp32_run_skipping_the_amp_run_s_skips() -> None:
    """A skipped step changes what follows, not only when: held to the
    baseline, an AMP run one RMSprop step behind fails; held to the FP32 run
    that skipped the same step, it passes, and a divergence still fails."""
    thresholds = Thresholds(steps=6, warmup=1, last=3, rtol=0.05, min_speedup=None)
    baseline = _run([9.0, 6.5, 5.0, 4.0, 3.0, 2.0], [1.0] * 5)
    amp = _run([9.0, 9.0, 7.5, 6.0, 4.8, 4.0], [1.0] * 5)
    amp |= {"skipped_at": [0], "skipped_steps": 1, "skipped_calls": {"0": [0]}}
    matched = _run([9.0, 9.0, 7.5, 6.0, 4.81, 4.0], [1.0] * 5)
    matched |= {"skipped_at": [0], "skipped_steps": 1, "skipped_calls": {"0": [0]}}
    assert not Comparison([baseline], [amp], thresholds, speed_meaningful=False).parity_ok
    comparison = Comparison([baseline], [amp], thresholds, False, matched=[matched])
    assert comparison.passed and comparison.loss_gap == pytest.approx(0.01 / 3 / 4.937, rel=0.01)
    assert comparison.matched_run == (
        "an FP32 run skipping the 1 optimizer step the GradScaler skipped"
    )
    diverged = {**amp, "losses": [9.0, 9.0, 7.5, 8.0, 9.0, 10.0]}
    failing = Comparison([baseline], [diverged], thresholds, False, matched=[matched])
    assert not failing.passed
    assert failing.reasons()[0].startswith(
        "loss parity: the AMP run's mean loss over the last 3 updates differs from that of "
        "an FP32 run skipping the 1 optimizer step the GradScaler skipped by "
    )


def test_verify_passes_a_run_that_only_lags_its_scale_search_s_skipped_steps() -> None:
    """skips_scale_search.py: the GradScaler's first scales overflow RMSprop's
    first gradients, and the AMP run takes its first large step late.  Against
    the baseline that is a 15 % loss gap (verify used to fail it); against the
    FP32 run that skipped the same steps, none."""
    result = run_cli(
        "verify",
        VERIFY / "skips_scale_search.py",
        "--device-type",
        "cpu",
        "--dtype",
        "float16",
        "--steps",
        "20",
        "--json",
    )
    assert result.exit_code == 0, result.stdout[-3000:]
    report = json.loads(result.stdout)
    skipped = report["amp"]["skipped_steps"]
    assert skipped >= 1 and report["matched"]["skipped_at"] == report["amp"]["skipped_at"]
    assert report["parity_reference"] == (
        f"an FP32 run skipping the {skipped} optimizer step{'s' * (skipped != 1)} "
        "the GradScaler skipped"
    )
    assert report["loss_gap"] < 0.01
    held_to_baseline = Comparison(
        [{**report["baseline"], "skipped_at": []}],
        [report["amp"]],
        Thresholds(steps=20, warmup=4, last=10, rtol=0.05, min_speedup=None),
        speed_meaningful=False,
    )
    assert held_to_baseline.loss_gap > 0.05
