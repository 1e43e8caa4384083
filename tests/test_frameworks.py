"""AMP002-AMP005: frameworks set up to train in FP32.

None of the frameworks is imported: check and fix read the code only.  The
executed counterparts (the fixed scripts construct their framework objects
with the setting) are in tests/test_frameworks_installed.py.

Set AMPLINT_UPDATE_GOLDEN=1 to rewrite the pinned outputs after a reviewed change.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from amplint.config import Settings
from tests.helpers import (
    FIXTURES,
    assert_matches_golden,
    codes_of,
    dedent,
    findings_of,
    fixed,
    run_cli,
)

FOLDER = FIXTURES / "frameworks"
FRAMEWORK_CODES = {"AMP002", "AMP003", "AMP004", "AMP005", "AMP006"}
FIRING = {
    "accelerate_glue.py": "AMP002",
    "lightning_classifier.py": "AMP003",
    "fabric_cpu_loop.py": "AMP003",
    "colossalai_ddp_cifar.py": "AMP006",
    "hf_trainer_finetune.py": "AMP004",
    "deepspeed_zero2.py": "AMP005",
}
SILENT = ["frameworks_mixed_ok.py", "accelerate_inference.py"]


def _text(name: str) -> str:
    return (FOLDER / name).read_text(encoding="utf-8")


# A set-up pinned to the CPU is rewritten for the CPU only (as AMP001 declines
# a script that never leaves the CPU under the CUDA defaults).
FIXTURE_SETTINGS = {"fabric_cpu_loop.py": Settings(device_type="cpu")}


@pytest.mark.parametrize("name", sorted(FIRING))
def test_each_framework_fixture_fires_its_rule_and_is_fixed_as_pinned(name: str) -> None:
    settings = FIXTURE_SETTINGS.get(name, Settings())
    assert codes_of(_text(name), settings) == [FIRING[name]]
    result = fixed(_text(name), settings)
    assert_matches_golden(result, FOLDER / "expected" / name)
    assert fixed(result, settings) == result
    assert not FRAMEWORK_CODES & set(codes_of(result, settings))


def test_a_set_up_pinned_to_the_cpu_is_not_rewritten_for_cuda() -> None:
    """`Fabric(accelerator="cpu")` under the CUDA defaults: reported, with the
    setting that rewrites it, and left as it is, as AMP001 leaves a script
    that never leaves the CPU."""
    (finding,) = findings_of(_text("fabric_cpu_loop.py"))
    assert finding.fix is None
    assert finding.message.endswith(
        "(not fixed: this call keeps training on the CPU, and these settings are for CUDA; "
        "`--device-type cpu` writes the bfloat16 switch)"
    )


@pytest.mark.parametrize("name", SILENT)
def test_mixed_precision_or_a_choice_made_elsewhere_is_left_alone(name: str) -> None:
    assert codes_of(_text(name)) == []


# What `--dtype auto` asks of the GPU: bfloat16 in hardware, not emulated.
_NATIVE_BF16 = "(torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 0))"


@pytest.mark.parametrize(
    ("settings", "accelerate", "lightning", "arguments", "deepspeed"),
    [
        (
            Settings(dtype="bfloat16"),
            'mixed_precision=os.environ.get("ACCELERATE_MIXED_PRECISION", "bf16")',
            'precision="bf16-mixed"',
            "bf16=True,",
            '"bf16": {"enabled": True},',
        ),
        (
            Settings(dtype="auto"),
            'mixed_precision=os.environ.get("ACCELERATE_MIXED_PRECISION", '
            f'"bf16" if {_NATIVE_BF16} else "fp16")',
            f'precision="bf16-mixed" if {_NATIVE_BF16} else "16-mixed"',
            None,  # the fixture has no name for torch
            f'"fp16": {{"enabled": not {_NATIVE_BF16}}},',
        ),
        (
            Settings(dtype="auto", device_type="cpu"),
            'mixed_precision=os.environ.get("ACCELERATE_MIXED_PRECISION", "bf16")',
            'precision="bf16-mixed"',
            "bf16=True,",
            '"bf16": {"enabled": True},',
        ),
    ],
    ids=["bfloat16", "auto", "cpu-auto"],
)
def test_the_switch_follows_the_dtype_setting(
    settings: Settings, accelerate: str, lightning: str, arguments: str | None, deepspeed: str
) -> None:
    assert accelerate in fixed(_text("accelerate_glue.py"), settings)
    assert lightning in fixed(_text("lightning_classifier.py"), settings)
    hf = _text("hf_trainer_finetune.py")
    if arguments is None:
        assert fixed(hf, settings) == hf  # reported: the run-time choice needs torch
        assert codes_of(hf, settings) == ["AMP004"]
    else:
        assert arguments in fixed(hf, settings)
    assert deepspeed in fixed(_text("deepspeed_zero2.py"), settings)


@pytest.mark.parametrize(
    ("call", "precision"),
    [
        ("Accelerator()", None),
        ('Accelerator(mixed_precision="fp8")', "mixed"),
        ("Accelerator(mixed_precision=None)", "full"),
        ("Accelerator(True, False, 'fp16')", "unknown"),
        ("Accelerator(fp16=True)", "unknown"),
        ("L.Trainer(precision=32)", "full"),
        ('L.Trainer(precision="bf16-true")', "mixed"),
        ("L.Fabric(devices=2)", None),
        ("TrainingArguments('o', bf16=args.bf16)", "unknown"),
        ("TrainingArguments('o', fp16=False, bf16=True)", "mixed"),
        ("SFTConfig(output_dir='o')", None),
        ("TrainingArguments('o', **vars(args))", "unknown"),
        ('deepspeed.initialize(config={"amp": {"enabled": True}})', "mixed"),
        ('deepspeed.initialize(config={"fp16": {"loss_scale": 0}})', "full"),
        ('deepspeed.initialize(config={"fp16": fp16_section})', "unknown"),
        ('deepspeed.initialize(config={"bf16": dict(enabled=True)})', "mixed"),
        ('deepspeed.initialize(config={"bf16": {"enabled": use_bf16}})', "unknown"),
        ('deepspeed.initialize(config_params={"train_batch_size": 8})', None),
        ('deepspeed.initialize(config="missing.json")', "unknown"),
    ],
)
def test_what_each_set_up_asks_for(call: str, precision: str | None) -> None:
    from amplint.analysis import ModuleFacts
    import libcst as cst

    text = dedent("""
        import deepspeed
        import lightning as L
        from accelerate import Accelerator
        from transformers import TrainingArguments
        from trl import SFTConfig

        x = {call}
    """).format(call=call)
    (setup,) = ModuleFacts(cst.parse_module(text), text).framework_setups
    assert setup.precision.value == (precision or "unset")


def test_a_set_up_is_judged_only_where_the_module_trains() -> None:
    text = dedent("""
        import lightning as L
        from transformers import TrainingArguments

        args = TrainingArguments("out")
        L.Trainer().test(model, dm)
    """)
    assert codes_of(text) == []
    assert codes_of(text + "L.Trainer().fit(model, dm)\n") == ["AMP003", "AMP003"]
    assert codes_of(text + "trainer.train()\n") == ["AMP004"]


def test_names_that_are_not_the_frameworks_are_not_judged() -> None:
    # The user's own Trainer class, an Accelerator of another package.
    text = dedent("""
        from mylib import Accelerator, Trainer

        accelerator = Accelerator()
        Trainer().fit(model)
        accelerator.backward(loss)
    """)
    assert codes_of(text) == []


def test_a_deepspeed_dict_named_twice_is_not_edited() -> None:
    text = dedent("""
        import deepspeed

        config = {"train_batch_size": 8}
        config = {"train_batch_size": 16, "bf16": {"enabled": True}}
        engine, *_ = deepspeed.initialize(model=model, config=config)
        engine.backward(loss)
    """)
    assert codes_of(text) == []


def test_arguments_naming_a_deepspeed_config_are_reported_not_fixed() -> None:
    text = dedent("""
        from transformers import TrainingArguments

        args = TrainingArguments("out", deepspeed="ds.json")
        trainer.train()
    """)
    assert codes_of(text) == ["AMP004"]
    assert fixed(text) == text


def test_amp001_leaves_a_step_under_an_accelerator_made_here_to_amp002() -> None:
    text = _text("accelerate_glue.py").replace(
        "accelerator.backward(outputs.loss)", "outputs.loss.backward()"
    )
    assert codes_of(text) == ["AMP002"]


# -- the project's configs ------------------------------------------------------
def _copy(tmp_path: Path, project: str) -> Path:
    target = tmp_path / project
    shutil.copytree(FOLDER / project, target)
    return target


@pytest.mark.parametrize("project", ["launch_config", "launch_script"])
def test_an_accelerate_launch_config_of_the_project_turns_it_on(
    tmp_path: Path, project: str
) -> None:
    root = _copy(tmp_path, project)
    assert run_cli("check", "--no-cache", root).exit_code == 0
    for config in [*root.rglob("*.yaml"), *root.rglob("*.sh")]:
        config.write_text(config.read_text().replace("bf16", "no").replace("fp16", "no"))
    result = run_cli("check", "--no-cache", root)
    assert result.exit_code == 1
    assert "AMP002" in result.output


def test_a_launch_config_of_a_project_nested_inside_does_not_count(tmp_path: Path) -> None:
    _copy(tmp_path, "launch_config")
    (tmp_path / ".git").mkdir()
    shutil.copy(FOLDER / "accelerate_glue.py", tmp_path / "train.py")
    result = run_cli("check", "--no-cache", tmp_path / "train.py")
    assert "AMP002" in result.output


def test_a_cached_answer_is_dropped_when_the_launch_config_changes(tmp_path: Path) -> None:
    root = _copy(tmp_path, "launch_config")
    cache = ["--cache-dir", tmp_path / "cache"]
    assert run_cli("check", *cache, root).exit_code == 0
    config = root / "configs" / "accelerate_fsdp.yaml"
    config.write_text(config.read_text().replace("mixed_precision: bf16", "mixed_precision: 'no'"))
    assert "AMP002" in run_cli("check", *cache, root).output


def test_a_deepspeed_json_config_is_read_and_reported(tmp_path: Path) -> None:
    root = _copy(tmp_path, "deepspeed_json")
    result = run_cli("check", "--no-cache", "--output-format", "json", root)
    (finding,) = json.loads(result.output)
    assert finding["code"] == "AMP005"
    assert "ds_config.json" in finding["message"]
    assert finding["fix"] is None
    config = root / "ds_config.json"
    contents = json.loads(config.read_text())
    config.write_text(json.dumps({**contents, "bf16": {"enabled": True}}))
    assert run_cli("check", "--no-cache", root).exit_code == 0


# -- AMP118: manual AMP under a framework's own -----------------------------------
MANUAL_AMP = {
    "accelerate_own_scaler.py": "scales the loss in `accelerator.backward`",
    "hf_trainer_autocast.py": "runs `compute_loss` under its own autocast",
    "lightning_own_autocast.py": "runs `training_step` under its own autocast",
    "deepspeed_own_autocast.py": "`torch_autocast` section",
}


@pytest.mark.parametrize("name", sorted(MANUAL_AMP))
def test_manual_amp_under_a_mixed_precision_framework_is_reported(name: str) -> None:
    text = _text(name)
    (finding,) = [d for d in findings_of(text) if d.code == "AMP118"]
    assert MANUAL_AMP[name] in finding.message
    assert fixed(text) == text or "AMP118" in codes_of(fixed(text))


@pytest.mark.parametrize(
    ("name", "switch_off"),
    [
        ("accelerate_own_scaler.py", ('mixed_precision="fp16"', 'mixed_precision="no"')),
        ("hf_trainer_autocast.py", ("bf16=True", "bf16=False")),
        ("lightning_own_autocast.py", ('precision="16-mixed"', 'precision="32-true"')),
        ("deepspeed_own_autocast.py", ('"bf16": {"enabled": True}', '"bf16": {"enabled": False}')),
    ],
)
def test_the_same_code_under_a_framework_left_in_fp32_is_silent(
    name: str, switch_off: tuple[str, str]
) -> None:
    text = _text(name)
    assert switch_off[0] in text
    assert "AMP118" not in codes_of(text.replace(*switch_off))


def test_manual_amp_the_framework_does_not_cover_is_left_alone() -> None:
    assert "AMP118" not in codes_of(_text("framework_amp_ok.py"))


def test_an_accelerate_launch_config_makes_an_own_scaler_a_second_one(tmp_path: Path) -> None:
    root = _copy(tmp_path, "launch_config")
    (root / "train.py").write_text(
        _text("accelerate_own_scaler.py").replace(
            'Accelerator(mixed_precision="fp16")', "Accelerator()"
        )
    )
    result = run_cli("check", "--no-cache", root)
    assert "AMP118" in result.output and "configs/accelerate_fsdp.yaml" in result.output


def test_a_comment_after_the_last_argument_or_entry_stays_on_its_line() -> None:
    arguments = dedent("""
        from transformers import TrainingArguments

        args = TrainingArguments(
            "out",
            label_names=["labels"],  # where the labels are
        )
        trainer.train()
    """)
    assert '    label_names=["labels"],  # where the labels are\n    fp16=True,\n)' in fixed(
        arguments
    )
    config = dedent("""
        import deepspeed

        config = {
            "train_batch_size": 8,  # global
        }
        engine, *_ = deepspeed.initialize(model=model, config=config)
        engine.backward(loss)
    """)
    assert '    "train_batch_size": 8,  # global\n    "fp16": {"enabled": True},\n}' in fixed(
        config
    )


def test_an_accelerator_beside_one_that_chose_or_under_manual_amp_is_left_alone() -> None:
    branches = dedent("""
        from accelerate import Accelerator

        if args.with_tracking:
            accelerator = Accelerator(mixed_precision=args.mixed_precision, log_with="wandb")
        else:
            accelerator = Accelerator()
        accelerator.backward(loss)
    """)
    assert codes_of(branches) == []
    manual = dedent("""
        import torch
        from accelerate import Accelerator


        def baseline(model, loader):
            accelerator = Accelerator()
            model.to(accelerator.device)
            for batch in loader:
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = model(**batch).loss
                loss.backward()
    """)
    assert "AMP002" not in codes_of(manual)


def test_a_launch_config_that_says_no_is_where_the_switch_is(tmp_path: Path) -> None:
    root = _copy(tmp_path, "launch_config")
    config = root / "configs" / "accelerate_fsdp.yaml"
    config.write_text(config.read_text().replace("mixed_precision: bf16", "mixed_precision: 'no'"))
    result = run_cli("check", "--no-cache", root)
    assert "configs/accelerate_fsdp.yaml:10) sets `mixed_precision: 'no'`" in result.output
    assert "[*]" not in result.output  # the YAML is not edited


def test_a_launch_config_of_a_sibling_example_does_not_count(tmp_path: Path) -> None:
    root = _copy(tmp_path, "launch_config")
    for example in ("glue", "fsdp"):
        (root / example).mkdir()
    (root / "train.py").rename(root / "glue" / "train.py")
    (root / "configs" / "accelerate_fsdp.yaml").rename(root / "fsdp" / "accelerate.yaml")
    assert "AMP002" in run_cli("check", "--no-cache", root / "glue" / "train.py").output
    (root / "fsdp" / "accelerate.yaml").rename(root / "glue" / "accelerate.yaml")
    assert run_cli("check", "--no-cache", root / "glue" / "train.py").exit_code == 0


# A notebook (or script) of two sections: a plain loop, then the same training
# through Accelerate; its module holds both.
TWO_SECTIONS = dedent("""
    import torch
    from accelerate import Accelerator

    scaler = torch.amp.GradScaler("cuda")
    for batch in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(**batch).loss
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()

    accelerator = Accelerator()
    model, optimizer = accelerator.prepare(model, optimizer)
    for batch in loader:
        loss = model(**batch).loss
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
""")


def test_manual_amp_in_another_section_of_a_module_is_not_the_accelerators() -> None:
    # The plain loop's autocast neither silences AMP002 nor, once the
    # Accelerator is mixed, counts as a second scaler beside it (AMP118).
    assert codes_of(TWO_SECTIONS) == ["AMP002"]
    result = fixed(TWO_SECTIONS)
    assert (
        "accelerator = Accelerator(\n"
        '    mixed_precision=os.environ.get("ACCELERATE_MIXED_PRECISION", "fp16"),\n'
        ")\n"
    ) in result
    assert codes_of(result) == []


def test_manual_amp_in_the_accelerators_own_section_still_counts() -> None:
    own = TWO_SECTIONS.replace(
        "    accelerator.backward(loss)\n", "    accelerator.backward(scaler.scale(loss))\n"
    )
    assert "AMP002" not in codes_of(own)  # it scales by hand: not a plain FP32 Accelerator
    mixed = own.replace("Accelerator()", 'Accelerator(mixed_precision="fp16")')
    assert "AMP118" in codes_of(mixed)
    # A scaler made at the top and read in the Accelerator's loop is beside it.
    read = TWO_SECTIONS.replace(
        "    optimizer.step()\n    optimizer.zero_grad()\n",
        "    scaler.step(optimizer)\n    optimizer.zero_grad()\n",
    ).replace("Accelerator()", 'Accelerator(mixed_precision="fp16")')
    assert "AMP118" in codes_of(read)


FABRIC_WITH_SCALER = dedent("""
    import lightning as L
    import torch


    def run(model, loader):
        fabric = L.Fabric(precision="16-mixed")
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer = fabric.setup(model, optimizer)
        scaler = torch.amp.GradScaler("cuda")
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            fabric.backward(scaler.scale(loss))
            scaler.step(optimizer)
            scaler.update()
    """)


def test_a_scaler_of_its_own_beside_a_mixed_fabric_is_amp118() -> None:
    (finding,) = [d.message for d in findings_of(FABRIC_WITH_SCALER) if d.code == "AMP118"]
    assert "where Lightning Fabric already trains in mixed precision (16-mixed" in finding
    assert "scales the loss in `fabric.backward`" in finding
    # Fabric in FP32 with the same loop scales by hand: not AMP003's to switch.
    assert codes_of(FABRIC_WITH_SCALER.replace('precision="16-mixed"', "")) == []


def test_a_fabric_that_never_trains_is_left_alone() -> None:
    inference = dedent("""
        import lightning as L


        def predict(model, batch):
            fabric = L.Fabric(accelerator="cuda")
            model = fabric.setup(model)
            return model(batch)
        """)
    assert codes_of(inference) == []
    assert codes_of(inference + "\n\ndef fit(model):\n    model.fit()\n") == []


# Colossal-AI's own shapes: a helper that runs `booster.backward`, and the
# boosted optimizer's `optimizer.backward(loss)` (its examples/language/palm).
BOOSTED_HELPER = dedent("""
    import torch
    from colossalai.booster import Booster


    def run_forward_backward(model, optimizer, criterion, batch, booster):
        optimizer.zero_grad()
        loss = criterion(model(batch["x"]), batch["y"])
        booster.backward(loss, optimizer)
        return loss


    def train(model, optimizer, criterion, loader, booster):
        for batch in loader:
            loss = run_forward_backward(model, optimizer, criterion, batch, booster)
            optimizer.step()
    """)
BOOSTED_OPTIMIZER = dedent("""
    import torch


    def train(model, optimizer, loader):
        for batch in loader:
            optimizer.zero_grad()
            loss = model(batch)
            optimizer.backward(loss)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            optimizer.step()
    """)


@pytest.mark.parametrize("text", [BOOSTED_HELPER, BOOSTED_OPTIMIZER], ids=["helper", "optimizer"])
def test_a_loop_whose_backward_a_framework_owns_is_never_an_fp32_step(text: str) -> None:
    """AMP001 said "the backward runs in `run_forward_backward(...)`" and
    "cannot find where `optimizer` is computed": both backwards are the
    framework's, which scales the loss in the precision it was set up with."""
    assert "AMP001" not in codes_of(text)
    # A helper with a plain backward is still a step split across functions.
    plain = text.replace("booster.backward(loss, optimizer)", "loss.backward()").replace(
        "optimizer.backward(loss)", "loss.backward()"
    )
    assert "AMP001" in codes_of(plain)


def test_a_booster_whose_plugin_controls_the_precision_is_not_fp32() -> None:
    text = _text("colossalai_ddp_cifar.py")
    for plugin in (
        "GeminiPlugin()",
        "LowLevelZeroPlugin(stage=2)",
        "HybridParallelPlugin(tp_size=2)",
    ):
        controlled = text.replace("TorchDDPPlugin()", plugin).replace(
            "import TorchDDPPlugin", f"import {plugin.split('(')[0]}"
        )
        assert codes_of(controlled) == [], plugin
    fp32 = text.replace("TorchDDPPlugin()", 'LowLevelZeroPlugin(precision="fp32")').replace(
        "import TorchDDPPlugin", "import LowLevelZeroPlugin"
    )
    assert codes_of(fp32) == []  # FP32 chosen in so many words
    unknown = text.replace("TorchDDPPlugin()", "make_plugin(args)")
    assert codes_of(unknown) == []  # a plugin the code does not show
    splat = text.replace("Booster(plugin=plugin)", "Booster(plugin=plugin, **booster_kwargs)")
    assert codes_of(splat) == []


def test_a_booster_precision_a_plugin_drops_is_amp121_and_apex_is_amp206() -> None:
    text = _text("colossalai_ddp_cifar.py")
    gemini = text.replace("TorchDDPPlugin()", "GeminiPlugin()").replace(
        "import TorchDDPPlugin", "import GeminiPlugin"
    )
    ignored = gemini.replace(
        "Booster(plugin=plugin)", 'Booster(mixed_precision="bf16", plugin=plugin)'
    )
    (finding,) = [d for d in findings_of(ignored) if d.code == "AMP121"]
    assert (
        '`mixed_precision="bf16"` is ignored: the Booster\'s plugin, GeminiPlugin'
        in finding.message
    )
    kept = text.replace("Booster(plugin=plugin)", 'Booster(mixed_precision="bf16", plugin=plugin)')
    assert codes_of(kept) == []  # TorchDDPPlugin leaves it to the Booster
    apex = text.replace(
        "Booster(plugin=plugin)", "Booster(plugin=plugin, mixed_precision='fp16_apex')"
    )
    assert codes_of(apex) == ["AMP206"]
    assert "mixed_precision='fp16')" in fixed(apex)
    assert codes_of(fixed(apex)) == []


def test_manual_amp_beside_a_mixed_booster_is_amp118() -> None:
    text = _text("colossalai_ddp_cifar.py").replace(
        "Booster(plugin=plugin)", 'Booster(plugin=plugin, mixed_precision="fp16")'
    )
    assert codes_of(text) == []
    scaled = text.replace(
        "        outputs = model(images)\n        loss = criterion(outputs, labels)\n",
        '        with torch.autocast("cuda"):\n'
        "            outputs = model(images)\n            loss = criterion(outputs, labels)\n",
    )
    assert codes_of(scaled) == ["AMP118"]


def test_a_switch_to_float16_is_not_written_where_the_module_breaks_float16() -> None:
    """A gradient penalty, or learn2learn's `adapt`, takes gradients on a loss
    the framework's float16 scaler never scales; a fill value beyond 65504
    raises in float16.  bfloat16 has float32's range: its switch is written."""
    fabric = _text("fabric_cpu_loop.py").replace('accelerator="cpu", ', "")
    penalty = fabric.replace(
        "            fabric.backward(loss)\n",
        "            grads = torch.autograd.grad(loss, images, create_graph=True)[0]\n"
        "            fabric.backward(loss + grads.pow(2).mean())\n",
    )
    (finding,) = findings_of(penalty)
    assert finding.fix is None
    assert finding.message.endswith(
        "(not fixed: the module takes gradients inside its forward pass with "
        "`torch.autograd.grad` (a gradient penalty), on a loss the framework's float16 "
        "scaler never scales; `--dtype bfloat16` writes the bfloat16 switch)"
    )
    launched = 'precision=os.environ.get("LT_PRECISION", "{}")'
    assert launched.format("bf16-mixed") in fixed(penalty, Settings(dtype="bfloat16"))
    assert launched.format("16-mixed") in fixed(fabric)  # no penalty: fixed
    maml = "import learn2learn as l2l\n" + fabric.replace("model(images)", "model.adapt(images)")
    (finding,) = findings_of(maml)
    assert "with learn2learn's `adapt` (a meta-learning inner step)" in finding.message
    filled = fabric.replace("model(images)", "model(images).masked_fill(images > 9, -1e10)")
    (finding,) = findings_of(filled)
    assert "(not fixed: `masked_fill(..., -1e10)` cannot hold its value in float16" in (
        finding.message
    )


def test_a_model_parallel_strategy_gets_bf16_mixed() -> None:
    """Lightning raises on `precision="16-mixed"` with ModelParallelStrategy
    (its connector accepts "32-true", "bf16-mixed", "bf16-true", "16-true"),
    as Lightning's examples/fabric/tensor_parallel/train.py would have."""
    text = dedent("""
        import lightning as L
        import torch
        from lightning.fabric.strategies import ModelParallelStrategy


        def train(model, batches, parallelize):
            strategy = ModelParallelStrategy(parallelize_fn=parallelize, data_parallel_size=2)
            fabric = L.Fabric(accelerator="cuda", devices=4, strategy=strategy)
            fabric.launch()
            optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
            model, optimizer = fabric.setup(model, optimizer)
            for batch in batches:
                loss = model(batch).sum()
                fabric.backward(loss)
                optimizer.step()
        """)
    (finding,) = findings_of(text)
    assert finding.message.endswith(
        'bfloat16, as Lightning refuses "16-mixed" with its ModelParallelStrategy'
    )
    assert (
        '        strategy=strategy,\n        precision=os.environ.get("LT_PRECISION", "bf16-mixed"),\n    )'
        in fixed(text)
    )


def test_a_tpu_trainer_is_left_alone() -> None:
    # XLAPrecision raises on "16-mixed" and "bf16-mixed": no switch to write.
    text = _text("lightning_classifier.py").replace('accelerator="auto"', 'accelerator="tpu"')
    assert text != _text("lightning_classifier.py")
    assert codes_of(text) == []


@pytest.mark.parametrize(
    "script",
    [
        # LightningCLI builds the Trainer from `--trainer.precision` or a config file.
        """
        import lightning as L
        from lightning.pytorch.cli import LightningCLI


        class Model(L.LightningModule):
            def training_step(self, batch, batch_idx):
                return self.layer(batch).sum()


        def main():
            LightningCLI(Model, trainer_defaults={"max_epochs": 3})
        """,
        # HfArgumentParser fills TrainingArguments from `--fp16` / `--bf16` or a JSON file.
        """
        from transformers import HfArgumentParser, Trainer, TrainingArguments


        def main():
            parser = HfArgumentParser((TrainingArguments,))
            (training_args,) = parser.parse_args_into_dataclasses()
            trainer = Trainer(model=model, args=training_args, train_dataset=data)
            trainer.train()
        """,
        # DeepSpeed reads `--deepspeed_config ds.json` from the command line.
        """
        import argparse

        import deepspeed


        def main():
            parser = deepspeed.add_config_arguments(argparse.ArgumentParser())
            args = parser.parse_args()
            engine, _, _, _ = deepspeed.initialize(args=args, model=model)
            for batch in loader:
                loss = engine(batch)
                engine.backward(loss)
                engine.step()
        """,
        # A Trainer whose precision is a flag of the script's own.
        """
        import argparse

        import lightning as L


        def main():
            parser = argparse.ArgumentParser()
            parser.add_argument("--precision", default="32-true")
            args = parser.parse_args()
            trainer = L.Trainer(max_epochs=3, precision=args.precision)
            trainer.fit(model, loader)
        """,
    ],
    ids=["lightning-cli", "hf-argument-parser", "deepspeed-config-arguments", "own-flag"],
)
def test_a_precision_the_launch_chooses_gets_no_switch_written(script: str) -> None:
    """Issue 42, launch settings win: where the precision comes from the command
    line or a config file the launch names, any value written into the script
    would override the user's choice; nothing is reported and nothing written."""
    text = dedent(script)
    assert not FRAMEWORK_CODES & set(codes_of(text))
    assert fixed(text, unsafe=True) == text
