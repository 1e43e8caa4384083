"""AMP002-AMP004 against the real frameworks: a small FP32 script per framework
is fixed by amplint (`--device-type cpu --dtype bfloat16`, which all three run
on the CPU), then run; the framework reports the precision the fix asked for
and the model's forward pass really runs in bfloat16.

check and fix never import the frameworks (tests/test_frameworks.py); these
tests need the test extra, which pins the versions they were checked with.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import dedent, run_cli

pytestmark = pytest.mark.slow

# A Linear that remembers the dtype it computed in: Accelerate hands the
# prepared model's outputs back in float32, so the output alone cannot tell.
TINY = dedent("""
    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 2)
            self.forward_dtype = None

        def forward(self, x, labels=None):
            out = self.layer(x)
            self.forward_dtype = out.dtype
            if labels is None:
                return out
            return {"loss": torch.nn.functional.mse_loss(out.float(), labels), "logits": out}
""")

SCRIPTS = {
    "accelerate": dedent("""
        import torch
        from accelerate import Accelerator
        {tiny}

        def main():
            accelerator = Accelerator(cpu=True)
            model = Tiny()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            model, optimizer = accelerator.prepare(model, optimizer)
            x, y = torch.randn(8, 4), torch.randn(8, 2)
            loss = torch.nn.functional.mse_loss(model(x).float(), y)
            accelerator.backward(loss)
            optimizer.step()
            print(f"set={{accelerator.mixed_precision}} forward={{model.forward_dtype}}")


        if __name__ == "__main__":
            main()
    """),
    "lightning": dedent("""
        import lightning as L
        import torch
        {tiny}

        class Lit(L.LightningModule):
            def __init__(self):
                super().__init__()
                self.tiny = Tiny()

            def training_step(self, batch, batch_idx):
                x, y = batch
                return self.tiny(x, y)["loss"]

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)


        if __name__ == "__main__":
            data = torch.utils.data.TensorDataset(torch.randn(8, 4), torch.randn(8, 2))
            trainer = L.Trainer(
                accelerator="cpu",
                max_steps=1,
                logger=False,
                enable_checkpointing=False,
                enable_progress_bar=False,
                enable_model_summary=False,
            )
            lit = Lit()
            trainer.fit(lit, torch.utils.data.DataLoader(data, batch_size=4))
            print(f"set={{trainer.precision}} forward={{lit.tiny.forward_dtype}}")
    """),
    "fabric": dedent("""
        import lightning as L
        import torch
        {tiny}

        if __name__ == "__main__":
            fabric = L.Fabric(accelerator="cpu", devices=1)
            model = Tiny()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            model, optimizer = fabric.setup(model, optimizer)
            x, y = torch.randn(8, 4), torch.randn(8, 2)
            loss = torch.nn.functional.mse_loss(model(x).float(), y)
            fabric.backward(loss)
            optimizer.step()
            print(f"set={{fabric.strategy.precision.precision}} forward={{model.forward_dtype}}")
    """),
    "transformers": dedent("""
        import sys

        import torch
        from transformers import Trainer, TrainingArguments
        {tiny}

        if __name__ == "__main__":
            data = [{{"x": torch.randn(4), "labels": torch.randn(2)}} for _ in range(8)]
            args = TrainingArguments(
                output_dir=sys.argv[1],
                use_cpu=True,
                max_steps=1,
                per_device_train_batch_size=4,
                report_to=[],
                save_strategy="no",
            )
            model = Tiny()
            trainer = Trainer(model=model, args=args, train_dataset=data)
            trainer.train()
            print(f"set={{args.bf16}} forward={{model.forward_dtype}}")
    """),
}
EXPECTED = {
    "accelerate": (
        'mixed_precision=os.environ.get("ACCELERATE_MIXED_PRECISION", "bf16")',
        "set=bf16 forward=torch.bfloat16",
    ),
    "lightning": ('precision="bf16-mixed"', "set=bf16-mixed forward=torch.bfloat16"),
    "fabric": (
        'precision=os.environ.get("LT_PRECISION", "bf16-mixed")',
        "set=bf16-mixed forward=torch.bfloat16",
    ),
    "transformers": ("bf16=True", "set=True forward=torch.bfloat16"),
}


def _run(script: Path, tmp_path: Path, launcher: list[str] | None = None, env=None) -> str:
    result = subprocess.run(
        [*(launcher or [sys.executable]), script.name, str(tmp_path / "out")],
        cwd=script.parent,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("framework", sorted(SCRIPTS))
def test_the_fixed_script_trains_in_the_precision_the_fix_set(
    framework: str, tmp_path: Path
) -> None:
    script = tmp_path / f"train_{framework}.py"
    script.write_text(SCRIPTS[framework].format(tiny=TINY))
    assert "forward=torch.float32" in _run(script, tmp_path)  # FP32 before

    result = run_cli("fix", "--apply", "--device-type", "cpu", "--dtype", "bfloat16", script)
    assert result.exit_code == 0, result.output
    switch, printed = EXPECTED[framework]
    assert switch in script.read_text()
    assert _run(script, tmp_path) == printed


# `accelerate launch` on the CPU, one process, with the user's config kept out
# of the test (HF_HOME): what a launch flag or a config file sets is all it sees.
ACCELERATE = str(Path(sys.executable).with_name("accelerate"))


def _accelerate_launch(*options: str) -> list[str]:
    return [
        ACCELERATE,
        "launch",
        "--cpu",
        "--num_processes",
        "1",
        "--num_machines",
        "1",
        "--dynamo_backend",
        "no",
        *options,
    ]


def test_the_accelerate_fix_keeps_what_the_launcher_and_its_config_choose(
    tmp_path: Path,
) -> None:
    """An explicit `mixed_precision="bf16"` overrides `accelerate launch
    --mixed_precision no` and the user's config; the fix reads the variable the
    launcher sets first, so each way of choosing at launch still decides, and a
    plain `python train.py` trains in mixed precision."""
    script = tmp_path / "train.py"
    script.write_text(SCRIPTS["accelerate"].format(tiny=TINY))
    result = run_cli("fix", "--apply", "--device-type", "cpu", "--dtype", "bfloat16", script)
    assert result.exit_code == 0, result.output
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf")}
    env.pop("ACCELERATE_MIXED_PRECISION", None)
    fp32 = "set=no forward=torch.float32"
    assert _run(script, tmp_path, env=env) == "set=bf16 forward=torch.bfloat16"
    assert _run(script, tmp_path, env={**env, "ACCELERATE_MIXED_PRECISION": "no"}) == fp32
    flag = _accelerate_launch("--mixed_precision", "no")
    assert _run(script, tmp_path, flag, env) == fp32
    config = tmp_path / "accelerate.yaml"
    config.write_text(
        "compute_environment: LOCAL_MACHINE\ndistributed_type: 'NO'\nmixed_precision: 'no'\n"
        "num_processes: 1\nnum_machines: 1\nuse_cpu: true\n"
    )
    from_config = [ACCELERATE, "launch", "--config_file", str(config)]
    assert _run(script, tmp_path, from_config, env) == fp32
    # What the fix avoids: a literal argument wins over the launcher.
    literal = script.read_text().replace(
        'os.environ.get("ACCELERATE_MIXED_PRECISION", "bf16")', '"bf16"'
    )
    script.write_text(literal)
    assert _run(script, tmp_path, flag, env) == "set=bf16 forward=torch.bfloat16"


def test_fabric_s_fix_keeps_the_precision_fabric_run_asks_for(tmp_path: Path) -> None:
    """`fabric run --precision X` hands X over in LT_PRECISION (with
    LT_CLI_USED=1), and Fabric raises on a `precision=` that differs ("conflicts
    with the value ... set through the CLI"): the fix reads it first, so the
    launcher still decides and a plain run trains in mixed precision."""
    script = tmp_path / "train.py"
    script.write_text(SCRIPTS["fabric"].format(tiny=TINY))
    result = run_cli("fix", "--apply", "--device-type", "cpu", "--dtype", "bfloat16", script)
    assert result.exit_code == 0, result.output
    env = {key: value for key, value in os.environ.items() if not key.startswith("LT_")}
    assert _run(script, tmp_path, env=env) == "set=bf16-mixed forward=torch.bfloat16"
    launched = {**env, "LT_CLI_USED": "1", "LT_PRECISION": "32-true"}
    assert _run(script, tmp_path, env=launched) == "set=32-true forward=torch.float32"
    # What the fix avoids: a literal argument the launcher's conflicts with.
    literal = script.read_text().replace('os.environ.get("LT_PRECISION", "bf16-mixed")', '"bf16-mixed"')
    script.write_text(literal)
    refused = subprocess.run(
        [sys.executable, script.name, str(tmp_path / "out")],
        cwd=script.parent,
        capture_output=True,
        text=True,
        timeout=300,
        env=launched,
    )
    assert refused.returncode != 0 and "set through the CLI" in refused.stderr


@pytest.mark.parametrize("framework", sorted(SCRIPTS))
def test_a_set_up_pinned_to_the_cpu_gets_bfloat16_whatever_the_dtype_setting(
    framework: str, tmp_path: Path
) -> None:
    """Each script's set-up keeps training on the CPU (`cpu=True`,
    `accelerator="cpu"`, `use_cpu=True`): with `--device-type cpu` and the
    default `--dtype float16` the fix still writes bfloat16, the precision
    those frameworks run there (float16 is left off by Accelerate, swapped
    with a warning by Lightning, refused by the HuggingFace Trainer).  Under
    the CUDA defaults it is reported and left alone."""
    script = tmp_path / f"train_{framework}.py"
    source = SCRIPTS[framework].format(tiny=TINY)
    script.write_text(source)
    assert run_cli("fix", "--apply", script).exit_code == 1
    assert script.read_text() == source
    result = run_cli("fix", "--apply", "--device-type", "cpu", script)
    assert result.exit_code == 0, result.output
    switch, printed = EXPECTED[framework]
    assert switch in script.read_text()
    assert _run(script, tmp_path) == printed
