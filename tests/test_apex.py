"""AMP203 / AMP204: apex.amp and the rest of apex's precision tooling, migrated.

The fixtures are realistic apex scripts; their migrations are pinned, stable,
free of apex, and run under torch on the CPU with apex not installed.  The
smaller cases below pin each mapping and each refusal.

Set AMPLINT_UPDATE_GOLDEN=1 to rewrite the pinned outputs after a reviewed change.
"""

from __future__ import annotations

import importlib.util
import json
import re
from contextlib import nullcontext
import subprocess
import sys
from pathlib import Path

import libcst as cst
import pytest

from amplint.analysis.imports import ImportMap
from amplint.config import Settings
from amplint.diagnostics import Applicability
from amplint.engine import fix_text, lint_text
from tests.helpers import (
    ALL,
    FIXTURES,
    assert_matches_golden,
    codes_of,
    dedent,
    findings_of,
    fixed,
    run_cli,
)

SCRIPTS = sorted((FIXTURES / "apex").glob("*.py"))
EXPECTED = FIXTURES / "apex" / "expected"
ids = [script.stem for script in SCRIPTS]


def findings(text: str, settings: Settings | None = None) -> list[str]:
    return [
        f"{d.span.line}:{d.span.column} {d.code} {'[*] ' if d.fix else ''}{d.message}"
        for d in lint_text(text, ALL, settings or Settings())
    ]


def fixed_unsafe(text: str, settings: Settings | None = None) -> str:
    return fixed(text, settings, unsafe=True)


# -- the fixtures ------------------------------------------------------------------
def test_there_are_the_fixtures_the_issue_names() -> None:
    assert [script.stem for script in SCRIPTS] == [
        "accumulation_arms_norm",
        "attention_op_lists",
        "bert_finetune_accum",
        "builder_returns_optimizer",
        "checkpoint_amp_state",
        "clipper_master_params",
        "detector_float32_kernels",
        "float_function_custom_op",
        "gan_num_losses",
        "guarded_profiled_step",
        "imagenet_ddp_prefetch",
        "o2_master_weights",
        "private_loss_scaler",
        "resume_closure",
    ]


@pytest.mark.parametrize("script", SCRIPTS, ids=ids)
def test_findings_are_pinned(script: Path) -> None:
    report = "\n".join(findings(script.read_text(encoding="utf-8"))) + "\n"
    assert_matches_golden(report, EXPECTED / f"{script.stem}.findings.txt")


@pytest.mark.parametrize("script", SCRIPTS, ids=ids)
def test_fix_matches_the_pinned_output(script: Path) -> None:
    migrated = fixed_unsafe(script.read_text(encoding="utf-8"))
    assert_matches_golden(migrated, EXPECTED / script.name)


@pytest.mark.parametrize("script", SCRIPTS, ids=ids)
def test_migration_is_idempotent_clean_and_free_of_apex(script: Path) -> None:
    migrated = (EXPECTED / script.name).read_text(encoding="utf-8")
    assert fixed_unsafe(migrated) == migrated
    assert codes_of(migrated) == []
    imported = ImportMap.of(cst.parse_module(migrated)).statements
    assert not [binding for binding in imported if binding.target.split(".")[0] == "apex"]


# Fixtures whose migration is exact: a safe fix.
EXACT = {
    "builder_returns_optimizer",
    "clipper_master_params",
    "private_loss_scaler",
    "resume_closure",
}


@pytest.mark.parametrize("script", SCRIPTS, ids=ids)
def test_each_fixture_needs_unsafe_fixes_and_says_why(script: Path) -> None:
    """Every fixture but the exact ones uses something with no exact torch.amp
    counterpart (O2, a run-time opt_level, num_losses, half_function, apex DDP's
    options)."""
    text = script.read_text(encoding="utf-8")
    if script.stem in EXACT:
        assert "AMP203" not in codes_of(fixed(text))
        return
    assert "AMP203" in codes_of(fixed(text))  # safe fixes alone leave apex.amp in place
    unsafe = [
        d
        for d in lint_text(text, ALL, Settings())
        if d.fix is not None and d.fix.applicability is Applicability.UNSAFE
    ]
    assert unsafe
    assert any("not exact:" in d.message or "dropped" in d.message for d in unsafe)


# A prelude that makes sure apex cannot be imported, and records what the
# migrated script asks torch.amp for (on a CPU-only machine a CUDA GradScaler
# and CUDA autocast turn themselves off, so only the request shows the flag).
RECORDER = r"""
import json, runpy, sys
sys.modules["apex"] = None
import torch
seen = {"scaler_enabled": [], "scaled": 0, "autocast": []}
make_scaler, scale = torch.amp.GradScaler.__init__, torch.amp.GradScaler.scale
def recording_scaler(self, *args, **kwargs):
    seen["scaler_enabled"].append(bool(kwargs.get("enabled", True)))
    make_scaler(self, *args, **kwargs)
def recording_scale(self, outputs):
    seen["scaled"] += 1
    return scale(self, outputs)
make_autocast = torch.autocast.__init__
def recording_autocast(self, device_type, dtype=None, enabled=True, cache_enabled=None):
    seen["autocast"].append([device_type, str(dtype)])
    make_autocast(self, device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
torch.amp.GradScaler.__init__, torch.amp.GradScaler.scale = recording_scaler, recording_scale
torch.autocast.__init__ = recording_autocast
script, sys.argv = sys.argv[1], sys.argv[1:]
runpy.run_path(script, run_name="__main__")
print("AMPLINT-SEEN " + json.dumps(seen))
"""

# The flag that turns apex off in each script, where it has one.
FP32_FLAGS = {
    "accumulation_arms_norm": ["--opt-level", "O0"],
    "attention_op_lists": ["--no-fp16"],
    "guarded_profiled_step": ["--no-amp"],
    "bert_finetune_accum": ["--no_fp16"],
    "builder_returns_optimizer": ["--no-fp16"],
    "checkpoint_amp_state": ["--opt-level", "O0"],
    "clipper_master_params": ["--no-amp"],
    "detector_float32_kernels": ["--no-fp16"],
    "float_function_custom_op": ["--opt_level", "O0"],
    "gan_num_losses": ["--no-amp"],
    "imagenet_ddp_prefetch": ["--opt-level", "O0"],
    "o2_master_weights": None,  # a dataclass config, fp16=True
    "private_loss_scaler": ["--no-fp16"],
    "resume_closure": ["--no-amp"],
}


def recorded_run(script: Path, *arguments: str, printed: str | None = None) -> dict:
    """Run `script` in its folder under RECORDER, without apex; what it saw of
    GradScalers and autocast.  `printed`: a line the script must print."""
    run = subprocess.run(
        [sys.executable, "-c", RECORDER, script.name, *arguments],
        cwd=script.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "ModuleNotFoundError" not in run.stderr
    assert printed is None or printed in run.stdout
    line = next(line for line in run.stdout.splitlines() if line.startswith("AMPLINT-SEEN "))
    return json.loads(line[len("AMPLINT-SEEN ") :])


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS, ids=ids)
def test_migrated_script_runs_without_apex_with_fp16_on(script: Path) -> None:
    pytest.importorskip("torch")
    seen = recorded_run(EXPECTED / script.name)
    assert seen["scaler_enabled"] and all(seen["scaler_enabled"])
    assert seen["scaled"] > 0  # every backward went through the scaler
    assert seen["autocast"] and all(
        entry == ["cuda", "torch.float16"] for entry in seen["autocast"]
    )


CPU_FLOAT16 = Settings(device_type="cpu", dtype="float16")


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS, ids=ids)
def test_migrated_for_the_cpu_the_scaler_really_scales(script: Path, tmp_path: Path) -> None:
    """`--device-type cpu --dtype float16`: every scaler and autocast the
    migration writes is the CPU's, and torch 2.13's GradScaler("cpu") scales,
    unscales and skips for real, so a wrong recipe raises here as on a GPU."""
    pytest.importorskip("torch")
    result = fix_text(script.read_text(encoding="utf-8"), ALL, CPU_FLOAT16, unsafe=True)
    written = ('GradScaler("cuda"', 'autocast("cuda"', 'device_type="cuda"')
    assert not any(call in result.text for call in written)  # apex itself cannot import
    migrated = tmp_path / script.name
    migrated.write_text(result.text, encoding="utf-8")
    seen = recorded_run(migrated)
    assert seen["scaler_enabled"] and all(seen["scaler_enabled"])
    assert seen["scaled"] > 0
    # custom_fwd turns autocast off inside the op it guards: ["cpu", "None"].
    assert ["cpu", "torch.float16"] in seen["autocast"]
    assert all(device == "cpu" for device, _ in seen["autocast"])


@pytest.mark.slow
@pytest.mark.parametrize("script", [s for s in SCRIPTS if FP32_FLAGS[s.stem]], ids=lambda s: s.stem)
def test_the_fp32_flag_still_turns_mixed_precision_off(script: Path) -> None:
    pytest.importorskip("torch")
    seen = recorded_run(EXPECTED / script.name, *FP32_FLAGS[script.stem])
    assert seen["scaler_enabled"] and not any(seen["scaler_enabled"])


def test_fix_reports_every_finding_the_one_migration_resolved(tmp_path: Path) -> None:
    script = tmp_path / "gan.py"
    script.write_text((FIXTURES / "apex" / "gan_num_losses.py").read_text(encoding="utf-8"))
    result = run_cli("fix", "--apply", "--unsafe-fixes", "--no-cache", script)
    assert "Fixed 4 findings in 1 file; 0 remaining." in result.output


def test_fix_says_how_many_more_unsafe_fixes_would_apply(tmp_path: Path) -> None:
    script = tmp_path / "gan.py"
    script.write_text((FIXTURES / "apex" / "gan_num_losses.py").read_text(encoding="utf-8"))
    shown = run_cli("fix", "--no-cache", script)
    assert "4 would remain. 4 more fixable with --unsafe-fixes." in shown.output
    applied = run_cli("fix", "--apply", "--no-cache", script)
    assert "0 findings in 0 files; 4 remaining. 4 more fixable with --unsafe-fixes." in (
        applied.output
    )
    unsafe = run_cli("fix", "--no-cache", "--unsafe-fixes", script)
    assert "more fixable" not in unsafe.output


# -- AMP203, case by case ------------------------------------------------------------
LOOP = """
    for inputs, targets in loader:
        optimizer.zero_grad()
        loss = criterion(model(inputs), targets)
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()
"""
MIGRATED_LOOP = """
    for inputs, targets in loader:
        optimizer.zero_grad()
        with torch.autocast("cuda", dtype=torch.float16{enabled}):
            loss = criterion(model(inputs), targets)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
"""


def _train(setup: str, loop: str = LOOP, imports: str = "import torch\nfrom apex import amp\n"):
    return imports + "\n\ndef train(model, optimizer, loader, criterion, args):\n" + setup + loop


def test_literal_o1_is_a_safe_fix_with_an_unconditional_scaler() -> None:
    before = _train('    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n')
    after = _train(
        '    scaler = torch.amp.GradScaler("cuda")\n',
        MIGRATED_LOOP.format(enabled=""),
        imports="import torch\n",
    )
    assert fixed(before) == after


def test_the_device_type_setting_governs_the_migrated_scaler_and_autocast() -> None:
    before = _train('    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n')
    after = _train(
        '    scaler = torch.amp.GradScaler("cpu")\n',
        MIGRATED_LOOP.format(enabled="").replace('"cuda"', '"cpu"'),
        imports="import torch\n",
    )
    assert fixed(before, Settings(device_type="cpu", dtype="float16")) == after


CPU_BFLOAT16 = Settings(device_type="cpu", dtype="bfloat16")


def test_the_dtype_setting_bfloat16_autocasts_in_it_with_the_scaler_off() -> None:
    """bfloat16 needs no loss scaling (AMP112): the GradScaler that stands for
    apex's state is made off, and autocast takes bfloat16."""
    before = _train('    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n')
    after = _train(
        '    scaler = torch.amp.GradScaler("cpu", enabled=False)\n',
        MIGRATED_LOOP.format(enabled="").replace('"cuda"', '"cpu"').replace("float16", "bfloat16"),
        imports="import torch\n",
    )
    assert fixed(before, CPU_BFLOAT16) == after


def test_bfloat16_where_autocast_cannot_see_whether_initialize_ran_is_not_fixed() -> None:
    text = (FIXTURES / "apex" / "builder_returns_optimizer.py").read_text(encoding="utf-8")
    assert fixed(text, CPU_BFLOAT16, unsafe=True) == text
    assert any(
        "with --dtype bfloat16 the GradScaler is off, and the autocast in `main` cannot tell "
        "whether amp.initialize ran" in d.message
        for d in lint_text(text, ALL, CPU_BFLOAT16)
    )


@pytest.mark.slow
def test_a_migration_for_bfloat16_runs_in_bfloat16_on_the_cpu(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    source = (FIXTURES / "apex" / "resume_closure.py").read_text(encoding="utf-8")
    script = tmp_path / "train.py"
    script.write_text(fixed_unsafe(source, CPU_BFLOAT16), encoding="utf-8")
    seen = recorded_run(script, "--steps", "3")
    assert seen["scaler_enabled"] == [False]
    assert seen["autocast"] == [["cpu", "torch.bfloat16"]] * 3
    off = recorded_run(script, "--steps", "1", *FP32_FLAGS["resume_closure"])
    assert off["autocast"] == [["cpu", "torch.bfloat16"]]  # made with enabled=args.amp, False


def test_opt_level_o0_disables_the_scaler_and_autocast() -> None:
    before = _train('    model, optimizer = amp.initialize(model, optimizer, opt_level="O0")\n')
    migrated = fixed(before)
    assert 'scaler = torch.amp.GradScaler("cuda", enabled=False)' in migrated
    assert "enabled=False):" in migrated


def test_the_flags_around_initialize_become_enabled() -> None:
    before = _train(
        "    if args.fp16 and not args.debug:\n"
        "        if args.amp:\n"
        '            model, optimizer = amp.initialize(model, optimizer, opt_level="O1", enabled=args.on)\n'
    )
    migrated = fixed(before)
    condition = "args.fp16 and not args.debug and args.amp and args.on"
    assert f'scaler = torch.amp.GradScaler("cuda", enabled={condition})' in migrated
    assert f"enabled={condition}):" in migrated


def test_an_else_branch_makes_the_scaler_disabled_there() -> None:
    before = _train(
        "    if args.fp32:\n"
        "        pass\n"
        "    else:\n"
        '        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n'
    )
    migrated = fixed(before)
    # The `if` still holds `pass`, so the scaler is made before it, for both branches.
    assert (
        'scaler = torch.amp.GradScaler("cuda", enabled=not args.fp32)\n    if args.fp32:'
        in migrated
    )


def test_the_fp32_branch_is_kept_whichever_side_apex_is_on() -> None:
    loop = """
    for inputs, targets in loader:
        loss = criterion(model(inputs), targets)
        if not args.fp16:
            loss.backward()
        else:
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
        optimizer.step()
"""
    before = _train(
        "    if args.fp16:\n"
        '        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n',
        loop,
    )
    migrated = fixed(before)
    assert "if not args.fp16" not in migrated
    assert "        scaler.scale(loss).backward()\n        scaler.step(optimizer)\n" in migrated
    assert 'scaler = torch.amp.GradScaler("cuda", enabled=args.fp16)' in migrated


def test_an_apex_branch_with_other_work_is_not_dropped() -> None:
    loop = """
    for inputs, targets in loader:
        loss = criterion(model(inputs), targets)
        if args.fp16:
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
            print("fp16 step")
        else:
            loss.backward()
        optimizer.step()
"""
    before = _train(
        '    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n', loop
    )
    migrated = fixed(before)
    assert 'print("fp16 step")' in migrated
    assert migrated.count("scaler.scale(loss).backward()") == 2


def test_an_apex_branch_in_an_elif_becomes_the_else_that_runs() -> None:
    # A research fork of transformers' Trainer (tests/trigger_audit.py found
    # it): `elif self.use_apex:` between native AMP and the FP32 fallback.
    # The branch migration puts statements where the `if` stood; as an
    # `elif` they are its `else:` (an internal error before).
    loop = """
    for inputs, targets in loader:
        loss = criterion(model(inputs), targets)
        if args.ddp:
            loss.backward()
        # apex
        elif args.fp16:
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
        else:
            loss.backward()
        optimizer.step()
"""
    before = _train(
        '    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n', loop
    )
    migrated = fixed(before)
    assert (
        "        if args.ddp:\n"
        "            scaler.scale(loss).backward()\n"
        "        # apex\n"
        "        else:\n"
        "            scaler.scale(loss).backward()\n"
        "        scaler.step(optimizer)\n"
    ) in migrated
    assert fixed(migrated) == migrated


_SETUP_AND_TRAIN = dedent("""
    import torch
    from apex import amp


    def setup(model, optimizer):
        return amp.initialize(model, optimizer, opt_level="O1")


    def train(model, optimizer, loader, criterion):
        for inputs, targets in loader:
            loss = criterion(model(inputs), targets)
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
            optimizer.step()
    """)


def test_a_helper_returning_initialize_returns_the_scaler_to_its_caller() -> None:
    before = _SETUP_AND_TRAIN + dedent("""

        def main(model, optimizer, loader, criterion):
            model, optimizer = setup(model, optimizer)
            train(model, optimizer, loader, criterion)
        """)
    migrated = fixed(before)
    assert (
        "def setup(model, optimizer):\n"
        '    scaler = torch.amp.GradScaler("cuda")\n'
        "    return model, optimizer, scaler\n"
    ) in migrated
    assert "    model, optimizer, scaler = setup(model, optimizer)\n" in migrated
    assert "    train(model, optimizer, loader, criterion, scaler=scaler)\n" in migrated
    assert "scaler.scale(loss).backward()" in migrated
    assert codes_of(migrated) == []


def test_a_helper_returning_initialize_with_no_caller_is_not_fixed() -> None:
    """Nothing in the program carries setup's scaler to train's step: the
    migration does not guess how a caller elsewhere will connect them."""
    assert fixed(_SETUP_AND_TRAIN, unsafe=True) == _SETUP_AND_TRAIN


def _not_fixed_because(text: str) -> list[str]:
    """The reasons AMP203 gives for not fixing `text`, which fix leaves as it is."""
    assert fixed(text, unsafe=True) == text
    return sorted({d.message.split("(not fixed: ", 1)[1] for d in lint_text(text, ALL, Settings())})


@pytest.mark.parametrize(
    "setup, call",
    [
        # The call keeps the tuple whole.
        ("", "    built = setup(model, optimizer)\n    train(*built, loader, criterion)\n"),
        # An early return of another shape.
        (
            "    if optimizer is None:\n        return model\n",
            "    model, optimizer = setup(model, optimizer)\n"
            "    train(model, optimizer, loader, criterion)\n",
        ),
    ],
)
def test_a_builder_the_scaler_cannot_return_through_makes_it_a_global(
    setup: str, call: str
) -> None:
    """In one module a global reaches every step, as apex's state did (across
    modules the migration stops: test_apex_project)."""
    text = _SETUP_AND_TRAIN.replace(
        "    return amp.initialize(", setup + "    return amp.initialize("
    )
    text += "\n\ndef main(model, optimizer, loader, criterion):\n" + call
    migrated = fixed(text)
    assert "def setup(model, optimizer):\n    global scaler\n" in migrated
    assert "scaler=scaler" not in migrated and "*, scaler" not in migrated
    assert "    return model, optimizer\n" in migrated
    assert codes_of(migrated) == []


def test_module_level_code_out_of_the_scalers_reach_is_named_with_what_to_do() -> None:
    text = (
        _SETUP_AND_TRAIN.replace(
            '    return amp.initialize(model, optimizer, opt_level="O1")',
            "    global MODEL, OPTIMIZER\n"
            '    MODEL, OPTIMIZER = amp.initialize(model, optimizer, opt_level="O1")',
        )
        + "\n\ntrain(MODEL, OPTIMIZER, [], None)\n"
    )
    assert _not_fixed_because(text) == [
        "this module calls `train` at module level, which needs the GradScaler, and the "
        "GradScaler is made in `setup` of this module, which no module-level call returns: "
        "make the optimizer and call amp.initialize in the function that runs the "
        "training, or return the optimizer to it)"
    ]


_INFERENCE = dedent("""
    import sys

    import torch
    from torch import nn


    def main(fp16):
        torch.manual_seed(0)
        vocoder = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4)).eval()
        if fp16:
            from apex import amp
            vocoder, _ = amp.initialize(vocoder, [], opt_level="O3")
        mel = torch.randn(2, 8)
        mel = mel.half() if fp16 else mel
        with torch.no_grad():
            print(vocoder(mel).dtype)


    if __name__ == "__main__":
        main("--fp16" in sys.argv)
    """)


def _assert_prints_the_dtype_of_each_flag(script: Path) -> None:
    """An inference script run with `--fp16` prints torch.float16, with `--fp32` torch.float32."""
    for flag, dtype in (("--fp16", "torch.float16"), ("--fp32", "torch.float32")):
        run = subprocess.run(
            [sys.executable, str(script), flag], capture_output=True, text=True, timeout=300
        )
        assert run.stdout.strip() == dtype, run.stderr[-2000:]


def test_an_o3_initialize_for_inference_becomes_half_and_says_what_differs(
    tmp_path: Path,
) -> None:
    (finding,) = findings(_INFERENCE)
    assert "use `model.half()` for O3, or torch.autocast around the forward passes" in finding
    assert "not exact: O3 also cast the model's floating-point inputs to float16" in finding
    assert fixed(_INFERENCE) == _INFERENCE  # not exact: an unsafe fix
    migrated = fixed_unsafe(_INFERENCE)
    assert (
        "    if fp16:\n        vocoder = vocoder.half()\n    mel = torch.randn(2, 8)\n"
    ) in migrated
    assert "amp" not in migrated and "GradScaler" not in migrated
    if importlib.util.find_spec("torch") is not None:
        script = tmp_path / "infer.py"
        script.write_text(migrated, encoding="utf-8")
        _assert_prints_the_dtype_of_each_flag(script)


_INFERENCE_O1 = _INFERENCE.replace("    mel = mel.half() if fp16 else mel\n", "")


@pytest.mark.parametrize(
    "initialize",
    [
        'vocoder = amp.initialize(vocoder, opt_level="O1")',
        "vocoder, _ = amp.initialize(vocoder, [])",
    ],
)
def test_an_o1_initialize_for_inference_becomes_autocast_around_the_forward_passes(
    initialize: str, tmp_path: Path
) -> None:
    """O1 patched torch for every later forward pass; autocast goes around each
    call of the model that follows in its function, enabled where the
    initialize ran.  Exact: a safe fix."""
    text = _INFERENCE_O1.replace(
        'vocoder, _ = amp.initialize(vocoder, [], opt_level="O3")', initialize
    )
    migrated = fixed(text)
    assert (
        "    with torch.no_grad():\n"
        '        with torch.autocast("cuda", dtype=torch.float16, enabled=fp16):\n'
        "            print(vocoder(mel).dtype)\n"
    ) in migrated
    assert "amp" not in migrated.replace("torch.amp", "") and "if fp16" not in migrated
    if importlib.util.find_spec("torch") is not None:
        script = tmp_path / "infer.py"
        script.write_text(fixed(text, CPU_FLOAT16), encoding="utf-8")
        _assert_prints_the_dtype_of_each_flag(script)


@pytest.mark.parametrize(
    "use, reason",
    [
        ("    evaluate(vocoder, mel)\n", "`evaluate(vocoder, mel)` hands `vocoder` to code"),
        ("    fp16 = False\n", "`fp16`, which says whether it ran, is bound again at line"),
        ("    models = [vocoder]\n", "`vocoder` is used at line"),
    ],
)
def test_an_o1_initialize_whose_forward_passes_are_not_all_seen_says_why(
    use: str, reason: str
) -> None:
    text = _INFERENCE_O1.replace(
        'vocoder, _ = amp.initialize(vocoder, [], opt_level="O3")',
        'vocoder = amp.initialize(vocoder, opt_level="O1")',
    ).replace("    mel = torch.randn(2, 8)\n", "    mel = torch.randn(2, 8)\n" + use)
    assert fixed(text, unsafe=True) == text
    (finding,) = findings(text)
    assert (
        '(not fixed: `amp.initialize(vocoder, opt_level="O1")` prepares a model for inference '
        "(no optimizer), which torch.amp does not do in one call: run its forward passes under "
        '`torch.autocast("cuda", dtype=torch.float16)`; amplint does not, as '
    ) in finding
    assert reason in finding


def test_a_static_loss_scale_starts_the_scaler_and_is_unsafe() -> None:
    before = _train(
        '    model, optimizer = amp.initialize(model, optimizer, opt_level="O1", loss_scale=512)\n'
    )
    assert fixed(before) == before  # unsafe: not applied without --unsafe-fixes
    assert 'torch.amp.GradScaler("cuda", init_scale=512)' in fixed_unsafe(before)
    (message,) = [f for f in findings(before) if "initialize" in f]
    assert "the static loss scale 512 becomes the GradScaler's initial scale" in message


def test_initialize_in_another_module_is_not_fixed() -> None:
    before = _train("")
    first, *_ = findings(before)
    assert "not fixed: no amp.initialize in this program" in first
    assert fixed_unsafe(before) == before


def test_a_scaled_loss_used_for_more_than_backward_is_not_fixed() -> None:
    loop = LOOP.replace(
        "scaled_loss.backward()", "scaled_loss.backward()\n            print(scaled_loss.item())"
    )
    before = _train(
        '    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n', loop
    )
    assert "is used for more than `scaled_loss.backward()`" in findings(before)[0]
    assert fixed_unsafe(before) == before


def test_a_backward_outside_any_training_step_is_not_fixed() -> None:
    before = dedent("""
        from apex import amp

        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")


        def backward(loss):
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
        """)
    assert "`loss.backward()` is not in a training step amplint can rewrite" in findings(before)[0]
    assert fixed_unsafe(before) == before


def test_target_torch_below_the_generic_scaler_gets_cudas_own() -> None:
    before = _train('    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n')
    settings = Settings(target_torch=(2, 2))
    after = fixed(before, settings)
    assert "torch.cuda.amp.GradScaler()" in after and "torch.amp.GradScaler" not in after
    assert 'torch.autocast("cuda", dtype=torch.float16)' in after
    assert findings(after, settings) == [] and fixed(after, settings) == after
    # Below torch 1.10, CUDA's autocast too; a CPU scaler has no spelling before 2.3.
    assert "torch.cuda.amp.autocast()" in fixed(before, Settings(target_torch=(1, 8)))
    cpu = Settings(target_torch=(2, 2), device_type="cpu")
    assert "a GradScaler for cpu needs torch 2.3" in findings(before, cpu)[0]
    assert fixed(before, cpu) == before


def test_private_amp_state_blocks_the_migration_and_is_amp204() -> None:
    loop = LOOP + "        print(amp._amp_state.opt_properties.opt_level)\n"
    before = _train(
        '    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n', loop
    )
    reported = findings(before)
    assert any(f.split()[1] == "AMP204" and "scaler.get_scale()" in f for f in reported)
    assert any(
        "`amp._amp_state.opt_properties.opt_level` uses apex's private state" in f
        for f in reported
        if f.split()[1] == "AMP203"
    )
    assert fixed_unsafe(before) == before


def test_the_loss_scale_read_from_private_state_becomes_get_scale() -> None:
    loop = LOOP + "        print(amp._amp_state.loss_scalers[0].loss_scale())\n"
    before = _train(
        '    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n', loop
    )
    assert "AMP204" not in [f.split()[1] for f in findings(before)]  # AMP203 migrates it
    migrated = fixed(before)
    assert "print(scaler.get_scale())" in migrated
    assert "_amp_state" not in migrated


def test_settings_of_apex_loss_scaler_become_the_gradscalers_keywords() -> None:
    """NVIDIA BERT sets the initial loss scale through apex's private state right
    after amp.initialize; apex's scale window is GradScaler's growth interval."""
    before = _train(
        "    if args.fp16:\n"
        '        model, optimizer = amp.initialize(model, optimizer, opt_level="O2")\n'
        "        amp._amp_state.loss_scalers[0]._loss_scale = args.init_loss_scale\n"
        "        amp._amp_state.loss_scalers[0]._scale_seq_len = 1000\n"
    )
    assert "AMP204" not in [f.split()[1] for f in findings(before)]  # AMP203 migrates them
    migrated = fixed_unsafe(before)
    assert (
        '    scaler = torch.amp.GradScaler("cuda", init_scale=args.init_loss_scale, '
        "growth_interval=1000, enabled=args.fp16)\n"
    ) in migrated
    assert "_amp_state" not in migrated


def test_a_setting_away_from_initialize_or_without_a_counterpart_is_named() -> None:
    initialize = '    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n'
    away = _train(initialize, LOOP + "    amp._amp_state.loss_scalers[0]._loss_scale = 8.0\n")
    assert fixed_unsafe(away) == away
    assert any(
        "`amp._amp_state.loss_scalers[0]._loss_scale = 8.0` sets apex's loss scaler away from "
        "the amp.initialize that made it; move it right after that call (the GradScaler made "
        "there takes `init_scale=`)" in f
        for f in findings(away)
    )
    ceiling = _train(initialize + "    amp._amp_state.loss_scalers[0]._max_loss_scale = 2.0**16\n")
    assert fixed_unsafe(ceiling) == ceiling
    assert any(
        "`amp._amp_state.loss_scalers[0]._max_loss_scale` uses apex's private state (AMP204) "
        "for more than the loss scale, with no GradScaler counterpart amplint knows" in f
        for f in findings(ceiling)
    )


def test_an_availability_assert_and_the_import_fallback_go() -> None:
    before = dedent("""
        import torch

        try:
            from apex import amp
        except ImportError:
            amp = None
            print("apex not found: FP32 only")


        def train(model, optimizer, loader, criterion, fp16):
            if fp16:
                assert amp is not None, "install apex for --fp16"
            model, optimizer = amp.initialize(model, optimizer, opt_level="O1", enabled=fp16)
            use_amp = amp is not None and fp16
            for inputs, targets in loader:
                optimizer.zero_grad()
                loss = criterion(model(inputs), targets)
                with amp.scale_loss(loss, optimizer) as scaled_loss:
                    scaled_loss.backward()
                optimizer.step()
            return use_amp
        """)
    migrated = fixed(before)
    assert "apex" not in migrated and "assert" not in migrated
    assert "try:" not in migrated and "FP32 only" not in migrated
    assert "use_amp = True and fp16" in migrated
    assert 'scaler = torch.amp.GradScaler("cuda", enabled=fp16)' in migrated


FUNCTION = """
class Exp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * y


"""


def test_half_function_on_a_function_wrapper_casts_inputs_to_float16() -> None:
    before = (
        "import torch\nfrom apex import amp\n\n"
        + FUNCTION
        + "@amp.half_function\ndef exp(x):\n    return Exp.apply(x)\n\n\n"
        + 'model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n'
    )
    migrated = fixed(before)
    assert (
        "    @staticmethod\n"
        '    @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float16)\n'
        "    def forward(ctx, x):"
    ) in migrated
    assert '    @staticmethod\n    @torch.amp.custom_bwd(device_type="cuda")\n' in migrated
    assert "\n\n\ndef exp(x):\n    return Exp.apply(x)\n" in migrated


FLOAT32_HELPER = dedent('''
    def float32_inputs(function):
        """`function` called with its float16 / bfloat16 tensor arguments cast to
        float32: for ops that take float32 only, under autocast."""

        def as_float32(value):
            if isinstance(value, torch.Tensor) and value.dtype in (torch.float16, torch.bfloat16):
                return value.float()
            return value

        @functools.wraps(function)
        def called(*args, **kwargs):
            args = [as_float32(value) for value in args]
            return function(*args, **{key: as_float32(value) for key, value in kwargs.items()})

        return called
    ''')


def test_float_function_on_a_compiled_op_or_a_plain_def_goes_through_a_helper() -> None:
    """maskrcnn-benchmark's `nms = amp.float_function(_C.nms)` and
    `@amp.float_function` on a module's `forward`: apex called them with half
    tensor arguments cast to float32; a helper written once does the same."""
    before = dedent("""
        import torch
        from apex import amp
        from package import _C

        nms = amp.float_function(_C.nms)


        class Pool(torch.nn.Module):
            @amp.float_function
            def forward(self, x, rois):
                return _C.pool(x, rois)


        def train(model, optimizer, loader):
            model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
            for x, rois in loader:
                optimizer.zero_grad()
                loss = model(x, rois).sum()
                with amp.scale_loss(loss, optimizer) as scaled_loss:
                    scaled_loss.backward()
                optimizer.step()
        """)
    migrated = fixed_unsafe(before)
    assert migrated.startswith("import functools\nimport torch\nfrom package import _C\n\n")
    assert "\n\n" + FLOAT32_HELPER + "\n\nnms = float32_inputs(_C.nms)\n" in migrated
    assert "    @float32_inputs\n    def forward(self, x, rois):\n" in migrated
    assert "apex" not in migrated and codes_of(migrated) == []


def test_the_float32_helper_casts_half_tensors_only() -> None:
    torch = pytest.importorskip("torch")
    import functools

    namespace = {"torch": torch, "functools": functools}
    exec(FLOAT32_HELPER, namespace)
    seen = namespace["float32_inputs"](lambda *args, **kwargs: (args, kwargs))
    half, double = torch.ones(2, dtype=torch.float16), torch.ones(2, dtype=torch.float64)
    (a, b, c), kwargs = seen(half, double, 3, k=half.bfloat16())
    assert (a.dtype, b.dtype, c, kwargs["k"].dtype) == (
        torch.float32,
        torch.float64,
        3,
        torch.float32,
    )


def test_float_function_as_a_call_on_a_wrapper() -> None:
    before = (
        "import torch\nfrom apex import amp\n\n"
        + FUNCTION
        + "def exp(x):\n    return Exp.apply(x)\n\n\nexp = amp.float_function(exp)\n"
        + 'model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n'
    )
    migrated = fixed(before)
    assert "cast_inputs=torch.float32" in migrated
    assert "exp = " not in migrated


def test_register_float_function_casts_each_call_in_the_module() -> None:
    before = dedent("""
        import torch
        from apex import amp

        amp.register_float_function(torch, "softmax")
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")


        def head(x):
            return torch.softmax(x + 1, dim=-1)
        """)
    migrated = fixed(before)
    assert "return torch.softmax((x + 1).float(), dim=-1)" in migrated
    assert "register" not in migrated


def test_register_float_function_with_several_tensor_arguments_is_not_fixed() -> None:
    before = dedent("""
        import torch
        from apex import amp

        amp.register_float_function(torch, "add")
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
        z = torch.add(x, y)
        """)
    assert "cast its tensor inputs to float32 by hand" in findings(before)[0]
    assert fixed_unsafe(before) == before


def test_disable_casts_becomes_a_disabled_autocast() -> None:
    before = dedent("""
        import torch
        from apex import amp

        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
        with amp.disable_casts():
            y = model(x)
        """)
    assert 'with torch.autocast("cuda", enabled=False):\n    y = model(x)\n' in fixed(before)


def test_other_apex_modules_are_left_alone() -> None:
    text = dedent("""
        from apex.optimizers import FusedAdam
        from apex.normalization import FusedLayerNorm

        optimizer = FusedAdam(model.parameters())
        norm = FusedLayerNorm(64)
        """)
    assert codes_of(text) == []


def test_a_function_named_amp_that_is_not_apex_is_left_alone() -> None:
    text = dedent("""
        import my_project.amp as amp

        model, optimizer = amp.initialize(model, optimizer)
        """)
    assert codes_of(text) == []


# -- AMP204 ---------------------------------------------------------------------------
def test_apex_ddp_with_positional_options_is_not_fixed() -> None:
    text = "import apex\n\nmodel = apex.parallel.DistributedDataParallel(model, 2**20)\n"
    (message,) = findings(text)
    assert "AMP204" in message and "not fixed: its positional arguments" in message


def test_a_ddp_reference_is_replaced_safely() -> None:
    before = dedent("""
        import torch
        from apex.parallel import DistributedDataParallel


        def unwrap(model):
            return model.module if isinstance(model, DistributedDataParallel) else model
        """)
    after = dedent("""
        import torch


        def unwrap(model):
            return model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model
        """)
    assert fixed(before) == after


def test_convert_syncbn_model_is_a_safe_fix_and_channel_last_is_dropped() -> None:
    before = dedent("""
        from apex.parallel import convert_syncbn_model

        model = convert_syncbn_model(model, channel_last=True)
        """)
    after = dedent("""
        import torch

        model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
        """)
    assert fixed(before) == after
    assert "`channel_last` is dropped" in findings(before)[0]


def test_fp16_utils_and_apex_syncbatchnorm_are_reported_without_a_fix() -> None:
    text = dedent("""
        from apex.fp16_utils import FP16_Optimizer, network_to_half
        import apex

        model = network_to_half(model)
        optimizer = FP16_Optimizer(optimizer, dynamic_loss_scale=True)
        bn = apex.parallel.SyncBatchNorm(64)
        """)
    reported = findings(text)
    assert [f.split()[1] for f in reported] == ["AMP204"] * 3
    assert all("[*]" not in f for f in reported)
    assert "use `torch.nn.SyncBatchNorm`" in reported[2]
    assert fixed_unsafe(text) == text


def test_apex_ddp_without_apex_options_is_a_safe_fix() -> None:
    before = "import apex\n\nmodel = apex.parallel.DistributedDataParallel(model)\n"
    after = "import torch\n\nmodel = torch.nn.parallel.DistributedDataParallel(model)\n"
    assert fixed(before) == after


def test_a_star_import_from_fp16_utils_binds_apex_names() -> None:
    text = "from apex.fp16_utils import *\n\noptimizer = FP16_Optimizer(optimizer)\n"
    (message,) = findings(text)
    assert message.startswith("3:13 AMP204 `FP16_Optimizer`: apex.fp16_utils was removed")
    assert "a torch.amp.GradScaler" in message
    assert fixed_unsafe(text) == text  # the star stays while a name it binds is read


def test_a_star_import_goes_with_the_last_name_it_bound() -> None:
    before = dedent("""
        import torch

        try:
            from apex.fp16_utils import *
        except ImportError:
            pass


        def log(loss):
            return to_python_float(loss)
        """)
    after = dedent("""
        import torch


        def log(loss):
            return loss.item()
        """)
    assert fixed(before) == after


def test_a_star_import_binding_nothing_read_goes() -> None:
    before = "import torch\nfrom apex.fp16_utils import *\n\nx = torch.ones(1)\n"
    (message,) = findings(before)
    assert message == (
        "2:6 AMP204 [*] `apex.fp16_utils`: apex.fp16_utils was removed from apex in 2025; "
        "nothing it exports is used here"
    )
    assert fixed(before) == "import torch\n\nx = torch.ones(1)\n"


def test_a_star_of_another_module_binds_nothing() -> None:
    text = "from apex.contrib import *\n\noptimizer = FP16_Optimizer(optimizer)\n"
    assert not [f for f in findings(text) if "FP16_Optimizer" in f]


def test_a_feature_probe_of_apex_amp_is_not_private_state() -> None:
    text = dedent("""
        try:
            from apex import amp
        except ImportError:
            amp = None


        def state():
            if "state_dict" in amp.__dict__:
                return amp.state_dict()
        """)
    reported = findings(text)
    assert [f.split()[1] for f in reported] == ["AMP203", "AMP203"]
    assert "private" not in reported[0]


def test_full_output_shows_the_shared_diff_once(tmp_path: Path) -> None:
    script = tmp_path / "o2.py"
    script.write_text((FIXTURES / "apex" / "o2_master_weights.py").read_text(encoding="utf-8"))
    result = run_cli("check", "--output-format", "full", "--no-cache", script)
    assert result.output.count("+    scaler = torch.amp.GradScaler(") == 1
    assert f"(the diff shown at {script.as_posix()}:75:28)" in result.output


def test_delay_unscale_under_accumulation_steps_at_the_boundary() -> None:
    before = dedent("""
        import torch
        from apex import amp

        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
        for i, (inputs, targets) in enumerate(loader):
            loss = criterion(model(inputs), targets) / accumulation
            delay = (i + 1) % accumulation != 0
            with amp.scale_loss(loss, [optimizer], delay_unscale=delay) as scaled_loss:
                scaled_loss.backward()
            if (i + 1) % accumulation == 0:
                optimizer.step()
                optimizer.zero_grad()
        """)
    after = dedent("""
        import torch

        scaler = torch.amp.GradScaler("cuda")
        for i, (inputs, targets) in enumerate(loader):
            with torch.autocast("cuda", dtype=torch.float16):
                loss = criterion(model(inputs), targets) / accumulation
            delay = (i + 1) % accumulation != 0
            scaler.scale(loss).backward()
            if (i + 1) % accumulation == 0:
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
        """)
    assert fixed(before) == after


def test_a_notebook_is_migrated_cell_by_cell(tmp_path: Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    cells = [
        "import torch\nfrom apex import amp",
        "model = torch.nn.Linear(4, 2)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        'model, optimizer = amp.initialize(model, optimizer, opt_level="O1")',
        "%%time\nfor step in range(3):\n    optimizer.zero_grad()\n"
        "    loss = model(torch.randn(8, 4)).pow(2).mean()\n"
        "    with amp.scale_loss(loss, optimizer) as scaled_loss:\n"
        "        scaled_loss.backward()\n    optimizer.step()",
    ]
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(cell) for cell in cells]
    path = tmp_path / "apex.ipynb"
    nbformat.write(notebook, path)
    result = run_cli("fix", "--apply", "--no-cache", path)
    assert "Fixed 2 findings in 1 file; 0 remaining." in result.output
    migrated = nbformat.read(path, as_version=4)
    nbformat.validate(migrated)
    assert [cell.source for cell in migrated.cells] == [
        "import torch",
        "model = torch.nn.Linear(4, 2)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        'scaler = torch.amp.GradScaler("cuda")',
        "%%time\nfor step in range(3):\n    optimizer.zero_grad()\n"
        '    with torch.autocast("cuda", dtype=torch.float16):\n'
        "        loss = model(torch.randn(8, 4)).pow(2).mean()\n"
        "    scaler.scale(loss).backward()\n    scaler.step(optimizer)\n    scaler.update()",
    ]


def test_a_clip_on_every_micro_step_under_accumulation_takes_the_scale() -> None:
    """apex unscaled the accumulated master gradients on each micro-step (Swin's
    train_one_epoch); a GradScaler unscales once per optimizer step, so the
    clip of the scaled gradients takes the scale in its threshold: the same clip."""
    before = dedent("""
        import torch
        from apex import amp


        def train(model, optimizer, loader, criterion, accumulation):
            model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
            for index, (inputs, targets) in enumerate(loader):
                loss = criterion(model(inputs), targets) / accumulation
                with amp.scale_loss(loss, optimizer) as scaled_loss:
                    scaled_loss.backward()
                torch.nn.utils.clip_grad_norm_(amp.master_params(optimizer), 1.0)
                if (index + 1) % accumulation == 0:
                    optimizer.step()
                    optimizer.zero_grad()
        """)
    migrated = fixed_unsafe(before)
    assert "apex" not in migrated and "unscale_" not in migrated
    # (the parameters grew the call past black's line length: an argument per line)
    assert "\n            1.0 * scaler.get_scale(),\n        )\n" in migrated
    assert codes_of(migrated) == []


# apex's O1 without `amp.scale_loss` (an optional apex, its losses never
# scaled) still ran the step in mixed precision: the migration completes that
# step too, so what stops AMP001 from completing it stops the migration.
_O1_UNSCALED = """
    import torch

    try:
        from apex import amp
    except ImportError:
        amp = None


    def clip_gradient(optimizer, limit):
        for group in optimizer.param_groups:
            for param in group["params"]:
                param.grad.data.clamp_(-limit, limit)


    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.Adam(model.parameters())
    if amp is not None:
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    seen = []
    for i, (x, y) in enumerate(loader):
        output = model(x)
        seen.append(output.detach().cpu().numpy())
        loss = torch.nn.functional.cross_entropy(output, y)
        loss.backward()
        {touch}
        if (i + 1) % 2 == 0:
            optimizer.step()
            optimizer.zero_grad()
    """


def test_an_unscaled_o1_step_is_migrated_only_where_amp001_could_complete_it() -> None:
    """Found by `make shapes`: a clamp on every micro-step got one unscale_ per
    micro-step ("unscale_() has already been called"); bfloat16 handed NumPy
    the forward pass's bfloat16 outputs."""
    clamped = dedent(_O1_UNSCALED).replace("{touch}", "clip_gradient(optimizer, 0.01)")
    assert fixed_unsafe(clamped) == clamped
    (reason,) = _apex_not_fixed_because(clamped, Settings())
    assert reason.startswith("`clip_gradient(optimizer, 0.01)` hands the gradients")
    plain = dedent(_O1_UNSCALED).replace("        {touch}\n", "")
    migrated = fixed_unsafe(plain)
    assert "apex" not in migrated and "scaler.scale(loss).backward()" in migrated
    bfloat16 = Settings(dtype="bfloat16")
    assert fixed(plain, bfloat16, unsafe=True) == plain
    (reason,) = _apex_not_fixed_because(plain, bfloat16)
    assert reason.startswith("`output.detach().cpu().numpy()` hands NumPy a tensor")


def _apex_not_fixed_because(text: str, settings: Settings) -> set[str]:
    return {
        d.message.split("(not fixed: ", 1)[1]
        for d in lint_text(text, ALL, settings)
        if d.code == "AMP203"
    }


def test_a_try_importing_other_apex_modules_with_amp_stays() -> None:
    """Only a `try` that imports apex.amp alone goes with its fallback: one that
    also imports apex's fp16 utilities still guards names the code uses."""
    before = dedent("""
        import torch

        try:
            from apex import amp
            from apex import fp16_utils as amp_utils
        except ImportError:
            amp = amp_utils = None


        def train(model, optimizer, loader, criterion):
            model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
            for inputs, targets in loader:
                optimizer.zero_grad()
                loss = criterion(model(inputs), targets)
                with amp.scale_loss(loss, optimizer) as scaled_loss:
                    scaled_loss.backward()
                optimizer.step()
            return amp_utils.to_python_float(loss)
        """)
    migrated = fixed(before)
    assert "scaler.scale(loss).backward()" in migrated  # migrated, and
    assert "from apex import fp16_utils as amp_utils" in migrated  # the guard kept
    assert "except ImportError:" in migrated


RESUME_THEN_INITIALIZE = _train(
    "    if args.checkpoint is not None:\n"
    '        optimizer.load_state_dict(args.checkpoint["optimizer"])\n'
    "    if args.fp16:\n"
    '        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n'
)


def test_a_resume_before_initialize_gets_the_scaler_made_before_it() -> None:
    # yolov5 restores the optimizer, then calls amp.initialize: a scaler made
    # where initialize ran could not be restored with it (AMP109 would stay).
    result = fixed(RESUME_THEN_INITIALIZE)
    assert (
        '    scaler = torch.amp.GradScaler("cuda", enabled=args.fp16)\n'
        "    if args.checkpoint is not None:\n"
        '        optimizer.load_state_dict(args.checkpoint["optimizer"])\n'
        '        if args.checkpoint.get("scaler"):\n'
        '            scaler.load_state_dict(args.checkpoint["scaler"])\n'
        "\n"
        "    for inputs, targets in loader:\n"
    ) in result
    assert "amp." not in result.replace("torch.amp.", "")
    assert codes_of(result) == []


def test_a_resume_before_the_flag_is_set_keeps_the_migration_back() -> None:
    # `enabled=use_amp` could not be read before `use_amp` is bound
    source = RESUME_THEN_INITIALIZE.replace(
        "    if args.fp16:\n", "    use_amp = args.fp16\n    if use_amp:\n"
    )
    result = fix_text(source, ALL, Settings(), unsafe=True)
    assert result.text == source
    refused = [d.message for d in result.remaining if d.code == "AMP203"]
    assert refused and all("would leave AMP109" in message for message in refused)


def test_autocast_covers_the_model_call_made_before_a_profiler_step() -> None:
    # `profiler.step()` between forward and loss is no optimizer step: stopping
    # there left the model outside autocast (no speed-up at all).
    source = _train(
        '    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n',
        LOOP.replace(
            "        loss = criterion(model(inputs), targets)\n",
            "        outputs = model(inputs)\n"
            "        profiler.step()\n"
            "        torch.cuda.synchronize()\n"
            "        loss = criterion(outputs, targets)\n",
        ),
    )
    assert (
        '        with torch.autocast("cuda", dtype=torch.float16):\n'
        "            outputs = model(inputs)\n"
        "            profiler.step()\n"
        "            torch.cuda.synchronize()\n"
        "            loss = criterion(outputs, targets)\n"
        "        scaler.scale(loss).backward()\n"
    ) in fixed(source)


@pytest.mark.parametrize(
    "line, ends",
    [
        ("optimizer.step()", True),
        ("self.opt_d.step()", True),
        ("scaler.step(optimizer)", True),
        ("loss_d.backward()", True),
        ("profiler.step()", False),
        ("prof.step()", False),
        ("lr_scheduler.step()", False),
    ],
)
def test_which_step_calls_end_the_forward_region(line: str, ends: bool) -> None:
    from amplint.analysis.forward import ends_forward_search

    assert ends_forward_search(cst.parse_statement(line + "\n")) is ends


def test_initialize_in_both_arms_of_an_if_makes_one_scaler_enabled_by_either() -> None:
    # Two scalers, one per arm, left the first dead and the second's
    # condition alone deciding: O2 runs trained in FP32.
    source = _train(
        '    if args.opt_level == "O2":\n'
        '        model, optimizer = amp.initialize(model, optimizer, opt_level="O2")\n'
        "    else:\n"
        '        model, optimizer = amp.initialize(model, optimizer, opt_level="O1", '
        "enabled=args.fp16)\n"
    )
    result = fixed(source, unsafe=True)
    assert result.count("GradScaler(") == 1
    assert (
        "def train(model, optimizer, loader, criterion, args):\n"
        '    scaler = torch.amp.GradScaler("cuda", enabled=args.opt_level == "O2" or args.fp16)\n'
        "\n"
        "    for inputs, targets in loader:\n"
    ) in result
    assert codes_of(result) == [] and fixed(result, unsafe=True) == result


@pytest.mark.parametrize(
    ("arms", "enabled"),
    [
        # both arms share `enabled=args.amp`: the flag alone, not `o2 and amp or not o2 and amp`
        (("args.o2", "args.amp"), "args.amp"),
        # `enabled=True` is no condition: the first arm enables it alone
        (("args.o2", "True"), "args.o2 or args.amp"),
    ],
)
def test_what_both_arms_share_is_factored_out_of_enabled(arms, enabled) -> None:
    test, first = arms
    source = _train(
        f"    if {test}:\n"
        f'        model, optimizer = amp.initialize(model, optimizer, opt_level="O1", enabled={first})\n'
        "    else:\n"
        '        model, optimizer = amp.initialize(model, optimizer, opt_level="O1", '
        "enabled=args.amp)\n"
    )
    made = [line.strip() for line in fixed(source).splitlines() if "GradScaler(" in line]
    assert made == [f'scaler = torch.amp.GradScaler("cuda", enabled={enabled})']


def test_initialize_twice_in_sequence_is_not_fixed() -> None:
    source = _train(
        '    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n'
        "    model = torch.compile(model)\n"
        '    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n'
    )
    result = fix_text(source, ALL, Settings(), unsafe=True)
    assert result.text == source
    assert any("runs more than once in one scope" in d.message for d in result.remaining)


def test_a_restore_of_amp_state_skips_apex_checkpoints_and_loads_new_ones() -> None:
    torch = pytest.importorskip("torch")
    source = _train(
        '    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n'
        "    if args.resume:\n"
        '        amp.load_state_dict(torch.load(args.resume)["amp"])\n'
    )
    result = fixed(source)
    guard = (
        '        amp_state = torch.load(args.resume)["amp"]\n'
        '        if amp_state and "loss_scaler0" not in amp_state:  # not apex\'s state, not empty\n'
        "            scaler.load_state_dict(amp_state)\n"
    )
    assert guard in result
    # The guard, run against what checkpoints hold: apex's state and a disabled
    # scaler's {} are skipped (load_state_dict raises on both), a GradScaler's loads.
    restore = dedent(guard.split("\n", 1)[1])
    saved = torch.amp.GradScaler("cpu", init_scale=128.0).state_dict()
    for state, scale in (
        ({"loss_scaler0": {"loss_scale": 512.0, "unskipped": 7}}, 65536.0),
        ({}, 65536.0),
        (saved, 128.0),
    ):
        scaler = torch.amp.GradScaler("cpu")
        exec(restore, {"scaler": scaler, "amp_state": state})
        assert scaler.get_scale() == scale
        unguarded = pytest.raises((KeyError, RuntimeError)) if state is not saved else nullcontext()
        with unguarded:
            torch.amp.GradScaler("cpu").load_state_dict(state)


def test_to_python_float_becomes_item_and_its_import_goes() -> None:
    before = dedent("""
        from apex.fp16_utils import to_python_float

        def log(meter, loss, a, b):
            meter.update(to_python_float(loss.data), 4)
            return to_python_float(a + b)
        """)
    after = dedent("""
        def log(meter, loss, a, b):
            meter.update(loss.data.item(), 4)
            return (a + b).item()
        """)
    assert fixed(before) == after


def test_each_fp16_utils_name_says_what_replaces_it() -> None:
    text = dedent("""
        from apex.fp16_utils import FP16_Optimizer, network_to_half, prep_param_lists

        model = network_to_half(model)
        model_params, master_params = prep_param_lists(model)
        optimizer = FP16_Optimizer(optimizer, dynamic_loss_scale=True)
        """)
    reported = findings(text)
    assert "keep the model in float32 and run its forward pass under torch.autocast" in (
        reported[0]
    )
    assert "no master copy is needed" in reported[1]
    assert "a torch.amp.GradScaler: `scaler.scale(loss).backward()`" in reported[2]


def test_a_probe_for_a_mapped_member_holds_and_its_if_folds() -> None:
    # timm's ApexScaler asks the installed apex whether it has state_dict
    source = _train(
        '    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n'
        "    if 'load_state_dict' in amp.__dict__:\n"
        "        amp.load_state_dict(args.state)\n"
        '    has_state = hasattr(amp, "state_dict")\n'
        '    if "float_function" not in amp.__dict__:\n'
        '        print("old apex")\n'
    )
    result = fixed(source)
    assert (
        '    scaler = torch.amp.GradScaler("cuda")\n'
        '    if args.state and "loss_scaler0" not in args.state:'
    ) in result
    assert "    has_state = True\n" in result
    assert "old apex" not in result and "amp." not in result.replace("torch.amp.", "")
    assert codes_of(result) == []


def test_a_probe_for_a_member_with_no_mapping_blocks_the_migration() -> None:
    source = _train(
        '    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n'
        '    if hasattr(amp, "lists"):\n'
        '        print("apex lists")\n'
    )
    assert fixed(source, unsafe=True) == source


def test_an_if_testing_whether_apex_imported_keeps_the_branch_that_runs() -> None:
    source = _train(
        "    if amp is None:\n"
        '        raise ImportError("install apex")\n'
        "    if amp is not None:\n"
        '        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n'
        "    else:\n"
        '        print("fp32")\n'
    )
    result = fixed(source)
    assert (
        "def train(model, optimizer, loader, criterion, args):\n"
        '    scaler = torch.amp.GradScaler("cuda")\n'
        "\n"
        "    for inputs, targets in loader:\n"
    ) in result
    assert codes_of(result) == []


# NVIDIA's Tacotron 2 ran softmax in float16 under apex O1 this way.
TACOTRON_LISTS = (
    'amp.lists.functional_overrides.FP32_FUNCS.remove("softmax")\n'
    'amp.lists.functional_overrides.FP16_FUNCS.append("softmax")\n'
)


def test_op_list_edits_go_and_say_what_autocast_does_instead() -> None:
    before = _train('    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n')
    before = before.replace("from apex import amp\n", "from apex import amp\n" + TACOTRON_LISTS)
    reported = [f for f in findings(before) if "amp.lists" in f]
    assert len(reported) == 2 and all("[*]" in f for f in reported)
    assert all(
        "autocast runs `softmax` in float32 (its op lists cannot be edited)" in f for f in reported
    )
    assert "apex's edit stopped forcing it to float32" in reported[0]
    assert "apex's edit forced it to float16" in reported[1]
    assert fixed(before) == before  # not exact: softmax stays float32
    migrated = fixed_unsafe(before)
    assert "lists" not in migrated and "apex" not in migrated


def test_an_op_list_edit_autocast_already_matches_is_a_safe_fix() -> None:
    before = _train('    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n')
    before = before.replace(
        "from apex import amp\n",
        "from apex import amp\n\n"
        "# keep the attention softmax in float32\n"
        "if amp is not None:\n"
        '    amp.lists.functional_overrides.FP32_FUNCS.extend(["softmax", "log_softmax"])\n',
    )
    migrated = fixed(before)
    assert "apex" not in migrated and "if amp" not in migrated and "FP32_FUNCS" not in migrated


@pytest.mark.parametrize(
    "edit",
    [
        "amp.lists.functional_overrides.FP16_FUNCS = []",
        "amp.lists.functional_overrides.FP16_FUNCS.append(name)",
        "ops = amp.lists.torch_overrides.FP32_FUNCS",
    ],
)
def test_other_uses_of_the_op_lists_are_not_fixed(edit: str) -> None:
    before = _train('    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n')
    before = before.replace("from apex import amp\n", f"from apex import amp\n{edit}\n")
    assert fixed_unsafe(before) == before


def test_an_if_holding_an_availability_assert_and_initialize_goes_whole() -> None:
    before = _train(
        "    if args.fp16:\n"
        '        assert amp is not None, "install apex"\n'
        '        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n'
    )
    migrated = fixed(before)
    assert "pass" not in migrated and "if args.fp16" not in migrated
    assert 'scaler = torch.amp.GradScaler("cuda", enabled=args.fp16)' in migrated


# -- no half migration ------------------------------------------------------------
HALF = _train(
    '    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n'
    "    model = ApexDDP(model)\n",
    imports="import torch\nfrom apex import amp\n"
    "from apex.parallel import DistributedDataParallel as ApexDDP\n",
)


def test_apex_ddp_is_held_while_the_amp_migration_is_blocked() -> None:
    """apex.amp stays (its step passes a closure, which a GradScaler refuses):
    apex's DDP stays beside it, unfixed, and `check` shows no `[*]` on it."""
    blocked = HALF.replace("optimizer.step()", "optimizer.step(lambda: None)")
    reported = findings(blocked)
    (ddp,) = [f for f in reported if " AMP204 " in f]
    assert "[*]" not in ddp
    assert "(not fixed: held with the apex.amp migration, which is not fixed: " in ddp
    assert fixed_unsafe(blocked) == blocked


def test_apex_ddp_goes_in_the_same_fix_as_the_amp_migration() -> None:
    findings_of_half = [
        d for d in lint_text(HALF, ALL, Settings()) if d.code in ("AMP203", "AMP204")
    ]
    assert {d.code for d in findings_of_half} == {"AMP203", "AMP204"}
    assert len({id(d.fix) for d in findings_of_half}) == 1  # one fix, applied or refused whole
    migrated = fixed(HALF)
    assert "apex" not in migrated
    assert "model = torch.nn.parallel.DistributedDataParallel(model)" in migrated
    assert 'scaler = torch.amp.GradScaler("cuda")' in migrated


def test_check_marks_the_migration_fixable_only_when_fix_writes_it() -> None:
    """The step goes through a scaler object of another module (timm's
    ApexScaler): the GradScaler the migration makes would be left unused, which
    `fix` refuses, so `check` shows no `[*]` either and says why."""
    source = dedent("""
        import torch
        from apex import amp
        from mylib import ApexScaler


        def main(model, optimizer, loader):
            model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
            loss_scaler = ApexScaler()
            for x, y in loader:
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss_scaler(loss, optimizer)
        """)
    (finding,) = findings(source)
    assert " AMP203 `amp.initialize`" in finding and "[*]" not in finding
    assert finding.endswith("(not fixed: the rewrite would leave `scaler` assigned but never used)")
    assert fixed_unsafe(source) == source


# -- leftovers a reviewer would point at --------------------------------------------
def test_master_params_as_the_sole_argument_takes_no_second_parentheses() -> None:
    before = _train(
        '    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n'
        "    params = list(amp.master_params(optimizer))\n"
    )
    migrated = fixed_unsafe(before)
    assert 'params = list(p for group in optimizer.param_groups for p in group["params"])\n' in (
        migrated
    )


def test_an_import_of_amp_under_an_if_goes_with_its_fallback() -> None:
    """`if cuda: from apex import amp else: amp = None`, and the availability
    probes of both the set-up and the step (`if amp is not None:` around an
    apex branch beside an FP32 one): nothing of apex is left, no `if` holding
    only `pass`, and no internal error from the two plans for one `if`."""
    before = dedent("""
        import torch

        if torch.cuda.is_available():
            from apex import amp
        else:
            amp = None


        def train(model, optimizer, loader):
            if amp is not None:
                model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
            for x in loader:
                loss = model(x).sum()
                if amp is not None:
                    with amp.scale_loss(loss, optimizer) as scaled_loss:
                        scaled_loss.backward()
                else:
                    loss.backward()
                optimizer.step()
                optimizer.zero_grad()
        """)
    migrated = fixed_unsafe(before)
    assert "amp" not in migrated.replace("torch.amp", "") and "pass" not in migrated
    assert migrated.startswith("import torch\n\n\ndef train(model, optimizer, loader):\n")
    assert codes_of(migrated) == []


def test_a_comment_about_apex_goes_with_the_initialize_it_described() -> None:
    before = _train(
        "    # mixed precision: initialize apex amp (O1)\n"
        "    # keep this before the DDP wrapper\n"
        '    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n'
    )
    migrated = fixed_unsafe(before)
    assert (
        "    # keep this before the DDP wrapper\n" '    scaler = torch.amp.GradScaler("cuda")\n'
    ) in migrated
    assert "apex" not in migrated


# The fixtures that checkpoint, each with the key its migration saves the
# scaler under: each takes `--checkpoint PATH --steps N` and prints "resumed"
# when it restores.
RESUMABLE = {
    "builder_returns_optimizer": "scaler",
    "clipper_master_params": "scaler",
    "private_loss_scaler": "amp",  # the key apex's own state was saved under
    "resume_closure": "scaler",
}


@pytest.mark.slow
@pytest.mark.parametrize("name", RESUMABLE)
def test_a_migrated_fixture_resumes_from_checkpoints_before_and_after(
    name: str, tmp_path: Path
) -> None:
    """A checkpoint written before the migration (apex's layout: no scaler in
    it) resumes with a fresh scaler; one written after restores the scale the
    CPU's float16 GradScaler reached.  With fp16 off, the disabled scaler saves
    an empty state, and a resume from it skips the restore."""
    torch = pytest.importorskip("torch")
    migrated = fixed_unsafe((FIXTURES / "apex" / f"{name}.py").read_text("utf-8"), CPU_FLOAT16)
    assert not re.search(r"^\s*(from\s+apex[\w.]*\s+import|import\s+apex)", migrated, re.M)
    script = tmp_path / "train.py"
    script.write_text(migrated, encoding="utf-8")
    checkpoint = tmp_path / "last.pt"

    def train(*arguments: str) -> str:
        run = subprocess.run(
            [sys.executable, "-c", RECORDER, script.name, "--checkpoint", str(checkpoint)]
            + list(arguments),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        return run.stdout

    key = RESUMABLE[name]
    train("--steps", "0")
    fresh = torch.load(checkpoint)[key]["scale"]  # where a new scaler starts
    checkpoint.unlink()
    train("--steps", "4")
    after = torch.load(checkpoint)
    assert after[key]["scale"] > 0  # the enabled CPU scaler saved its state
    # As apex wrote it: no scaler in it, or apex's own loss-scaler state.
    apex_state = {"loss_scalers": [{"loss_scale": 4.0, "unskipped": 0}]}
    for apex_layout in (
        {k: v for k, v in after.items() if k != key},
        {**after, key: {"loss_scaler0": apex_state}},
    ):
        if key == "scaler" and key in apex_layout:
            continue  # apex never saved its state under the key the migration chose
        torch.save(apex_layout, checkpoint)
        assert "resumed" in train("--steps", "0")  # nothing to restore: starts afresh
        assert torch.load(checkpoint)[key]["scale"] == fresh
    written = torch.load(checkpoint)
    written[key]["scale"] = 1024.0  # a scale a fresh scaler would not have
    torch.save(written, checkpoint)
    assert "resumed" in train("--steps", "0")
    assert torch.load(checkpoint)[key]["scale"] == 1024.0  # restored, then saved again

    off = FP32_FLAGS[name]
    checkpoint.unlink()
    train("--steps", "2", *off)
    assert torch.load(checkpoint)[key] == {}  # disabled: nothing to restore
    assert "resumed" in train("--steps", "2", *off)


@pytest.mark.slow
@pytest.mark.parametrize("clip", ["0", "0.05"])
def test_norms_logged_on_micro_steps_of_a_migrated_trainer_are_the_fp32_ones(
    clip: str, tmp_path: Path
) -> None:
    """Swin's shape, migrated for the CPU with float16: the norm logged on
    every micro-step (torch's clip of apex's master parameters, or the
    project's `get_grad_norm`) is read from gradients the real GradScaler
    still scales, so the migration divides it by the scale; with the scaler
    off (`--opt-level O0`) nothing scales.  Both runs log the same norms, with
    and without accumulation; and the run resumes from its own checkpoint."""
    pytest.importorskip("torch")
    migrated = fixed_unsafe(
        (FIXTURES / "apex" / "accumulation_arms_norm.py").read_text("utf-8"), CPU_FLOAT16
    )
    script = tmp_path / "train.py"
    script.write_text(migrated, encoding="utf-8")

    def norms(*arguments: str) -> list[float]:
        checkpoint = tmp_path / "fresh.pt"
        checkpoint.unlink(missing_ok=True)
        run = subprocess.run(
            [sys.executable, script.name, "--checkpoint", str(checkpoint), "--clip", clip]
            + list(arguments),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, run.stderr[-3000:]
        return [float(line.rsplit(" ", 1)[1]) for line in run.stdout.splitlines() if "norm" in line]

    for accumulation in ("1", "2"):
        fp16 = norms("--accumulation", accumulation)
        fp32 = norms("--accumulation", accumulation, "--opt-level", "O0")
        assert len(fp16) == len(fp32) == 8
        assert all(abs(a - b) <= 0.02 * abs(b) for a, b in zip(fp16, fp32)), (fp16, fp32)
    checkpoint = tmp_path / "last.pt"
    for _ in range(2):
        run = subprocess.run(
            [sys.executable, script.name, "--checkpoint", str(checkpoint), "--steps", "4"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, run.stderr[-3000:]
    assert "resumed" in run.stdout


# apex's first API in an evaluation script (maskrcnn-benchmark's test_net.py
# and its forks): the model runs in a library function the script calls.
_FIRST_API = dedent("""
    import sys

    import torch
    from apex import amp


    def evaluate(model, batches):
        with torch.no_grad():
            return [model(x).dtype for x in batches]


    def main(fp16):
        torch.manual_seed(0)
        model = torch.nn.Linear(8, 4)
        # Initialize mixed-precision if necessary
        handle = amp.init(enabled=fp16, verbose=False)

        batches = [torch.randn(2, 8) for _ in range(2)]
        print(evaluate(model, batches)[0])


    if __name__ == "__main__":
        main("--fp16" in sys.argv)
    """)


def test_apex_first_api_puts_the_rest_of_its_function_under_autocast(tmp_path: Path) -> None:
    """amp.init patched torch for everything after it, forward passes in
    code the function calls included: its counterpart is one autocast over the
    rest of the function.  Exact for inference: a safe fix."""
    migrated = fixed(_FIRST_API)
    assert (
        "    model = torch.nn.Linear(8, 4)\n"
        "    # Initialize mixed-precision if necessary\n"
        '    with torch.autocast("cuda", dtype=torch.float16, enabled=fp16):\n'
        "        batches = [torch.randn(2, 8) for _ in range(2)]\n"
        "        print(evaluate(model, batches)[0])\n"
        "\n\n"
        'if __name__ == "__main__":\n'
    ) in migrated
    assert "apex" not in migrated and "handle" not in migrated
    if importlib.util.find_spec("torch") is not None:
        script = tmp_path / "test_net.py"
        script.write_text(fixed(_FIRST_API, CPU_FLOAT16), encoding="utf-8")
        _assert_prints_the_dtype_of_each_flag(script)


@pytest.mark.parametrize(
    "change, reason",
    [
        (
            ("[0])\n", "[0])\n    handle.wrap_optimizer(None)\n"),
            "its handle `handle` is used: a loss is scaled through it",
        ),
        (
            ("    handle = amp.init(", "    if fp16:\n        handle = amp.init("),
            "it is not a statement of a function's own body",
        ),
        (("verbose=False", "allow_banned=True"), "it is given allow_banned"),
        (
            (
                "\n    batches = [torch.randn(2, 8) for _ in range(2)]\n"
                "    print(evaluate(model, batches)[0])\n",
                "",
            ),
            "nothing follows it in `main`",
        ),
    ],
)
def test_apex_first_api_that_cannot_be_followed_names_what_to_write(
    change: tuple[str, str], reason: str
) -> None:
    text = _FIRST_API.replace(*change)
    assert text != _FIRST_API
    assert fixed(text, unsafe=True) == text
    (finding,) = findings(text)
    assert (
        "is apex's first API, which cast every op of the "
        'process as O1 does: run the forward passes under `torch.autocast("cuda", '
        "dtype=torch.float16)` instead, and scale a training loss with a torch.amp.GradScaler; "
        f"amplint does not, as {reason})"
    ) in finding


_APEX_ONLY_ACCUMULATION = dedent("""
    import sys

    import torch
    from apex import amp


    def main(fp32, accumulate):
        torch.manual_seed(0)
        model = torch.nn.Linear(8, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
        for step in range(6):
            inputs, targets = torch.randn(4, 8), torch.randn(4, 1)
            loss = torch.nn.functional.mse_loss(model(inputs), targets)
            if fp32:
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            else:
                if step % accumulate == 0:
                    with amp.scale_loss(loss, optimizer) as scaled_loss:
                        scaled_loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()
                else:
                    with amp.scale_loss(loss, optimizer, delay_unscale=True) as scaled_loss:
                        scaled_loss.backward()
            print("loss", loss.item())


    if __name__ == "__main__":
        main("--fp32" in sys.argv, 2)
    """)


@pytest.mark.slow
def test_an_apex_branch_with_accumulation_the_fp32_branch_lacks_is_kept(tmp_path: Path) -> None:
    """The accumulation under `if step % accumulate == 0:` is apex's branch's
    own: it is migrated in place, not replaced by the FP32 branch, and each
    stepping path updates the scaler after its step (a micro-step that steps
    nothing must not: GradScaler.update() raises there)."""
    pytest.importorskip("torch")
    migrated = fixed(_APEX_ONLY_ACCUMULATION, CPU_FLOAT16)
    assert "if step % accumulate == 0:" in migrated
    assert migrated.count("scaler.update()") == 2
    script = tmp_path / "train.py"
    script.write_text(migrated, encoding="utf-8")
    seen = recorded_run(script)
    assert seen["scaler_enabled"] == [True] and seen["scaled"] == 6
    assert recorded_run(script, "--fp32")["scaled"] == 6


# amp.initialize in a method the caller may skip (XLM's `init_amp`).
_INIT_AMP_METHOD = dedent("""
    import sys

    import torch
    from torch import nn
    from apex import amp


    class Trainer:
        def __init__(self, model, optimizer, fp16):
            self.model = model
            self.optimizer = optimizer
            if fp16:
                self.init_amp()

        def init_amp(self):
            self.model, self.optimizer = amp.initialize(self.model, self.optimizer, opt_level="O1")

        def step(self, x, y):
            self.optimizer.zero_grad()
            loss = nn.functional.mse_loss(self.model(x), y)
            with amp.scale_loss(loss, self.optimizer) as scaled_loss:
                scaled_loss.backward()
            self.optimizer.step()
            return loss.item()


    if __name__ == "__main__":
        torch.manual_seed(0)
        model = nn.Linear(6, 1)
        trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), "--fp16" in sys.argv)
        x, y = torch.randn(16, 6), torch.randn(16, 1)
        for _ in range(3):
            print("loss", trainer.step(x, y))
    """)


@pytest.mark.slow
def test_initialize_in_a_method_the_caller_may_skip_leaves_a_scaler_off_until_then(
    tmp_path: Path,
) -> None:
    """Until `init_amp()` runs, apex's state was inactive and scale_loss passed
    the loss through; the migrated `__init__` makes the scaler off, init_amp
    replaces it, and autocast asks it.  Without the default, the run with fp16
    off raised AttributeError on `self.scaler`."""
    pytest.importorskip("torch")
    migrated = fixed(_INIT_AMP_METHOD, CPU_FLOAT16)
    assert '        self.scaler = torch.amp.GradScaler("cpu", enabled=False)\n' in migrated
    assert migrated.index("enabled=False)") < migrated.index("self.model = model")
    assert "enabled=self.scaler.is_enabled()" in migrated
    script = tmp_path / "train.py"
    script.write_text(migrated, encoding="utf-8")
    off = recorded_run(script)
    assert off["scaler_enabled"] == [False] and off["scaled"] == 3
    on = recorded_run(script, "--fp16")
    assert on["scaler_enabled"] == [False, True] and on["scaled"] == 3
    assert on["autocast"] == [["cpu", "torch.float16"]] * 3


# XLM's trainer in small: init_amp() only when amp >= 0; optimize(loss) steps the
# optimizers in a loop on its FP32 path and in another on its accumulation path.
_XLM_SHAPED = dedent("""
    import sys

    import torch
    from torch import nn
    from torch.nn.utils import clip_grad_norm_
    import apex


    class Trainer:
        def __init__(self, amp, accumulate):
            self.amp, self.accumulate, self.n_iter = amp, accumulate, 0
            self.encoder, self.decoder = nn.Linear(6, 8), nn.Linear(8, 3)
            self.optimizers = {
                name: torch.optim.SGD(getattr(self, name).parameters(), lr=0.1)
                for name in ("encoder", "decoder")
            }
            if amp >= 0:
                self.init_amp()

        def init_amp(self):
            names = list(self.optimizers)
            models, optimizers = apex.amp.initialize(
                [self.encoder, self.decoder],
                [self.optimizers[k] for k in names],
                opt_level="O%i" % self.amp,
            )
            self.encoder, self.decoder = models
            self.optimizers = dict(zip(names, optimizers))

        def optimize(self, loss):
            names = list(self.optimizers)
            optimizers = [self.optimizers[k] for k in names]
            if self.amp == -1:
                for optimizer in optimizers:
                    optimizer.zero_grad()
                loss.backward()
                for name in names:
                    clip_grad_norm_(getattr(self, name).parameters(), 1.0)
                for optimizer in optimizers:
                    optimizer.step()
            else:
                if self.n_iter % self.accumulate == 0:
                    with apex.amp.scale_loss(loss, optimizers) as scaled_loss:
                        scaled_loss.backward()
                    for name in names:
                        clip_grad_norm_(apex.amp.master_params(self.optimizers[name]), 1.0)
                    for optimizer in optimizers:
                        optimizer.step()
                        optimizer.zero_grad()
                else:
                    with apex.amp.scale_loss(loss, optimizers, delay_unscale=True) as scaled_loss:
                        scaled_loss.backward()
            self.n_iter += 1

        def classify_step(self, x, y):
            loss = nn.functional.cross_entropy(self.decoder(self.encoder(x)), y)
            self.optimize(loss)
            return loss.item()


    if __name__ == "__main__":
        torch.manual_seed(0)
        trainer = Trainer(int(sys.argv[1]), 2)
        x, y = torch.randn(16, 6), torch.randint(0, 3, (16,))
        for _ in range(6):
            print("loss", trainer.classify_step(x, y))
    """)


@pytest.mark.slow
def test_an_xlm_shaped_trainer_migrates_and_runs_each_path(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    migrated = fixed_unsafe(_XLM_SHAPED, CPU_FLOAT16)
    assert "apex" not in migrated
    assert migrated.count("self.scaler.update()") == 2  # one after each path's loop
    assert migrated.count("self.scaler.unscale_(optimizer)") == 2
    script = tmp_path / "train.py"
    script.write_text(migrated, encoding="utf-8")
    fp32 = recorded_run(script, "-1")  # no init_amp: the scaler made off in __init__
    assert fp32["scaler_enabled"] == [False] and fp32["scaled"] == 6
    o0 = recorded_run(script, "0")
    assert o0["scaler_enabled"] == [False, False]
    o1 = recorded_run(script, "1")  # accumulation over 2: 3 steps, 3 micro-steps
    assert o1["scaler_enabled"] == [False, True] and o1["scaled"] == 6
    assert o1["autocast"] == [["cpu", "torch.float16"]] * 6


_XLM_WITH_SUBCLASS = (
    _XLM_SHAPED.replace(
        'if __name__ == "__main__":',
        "class TranslationTrainer(Trainer):\n"
        "    def translate_step(self, x, y):\n"
        "        loss = nn.functional.cross_entropy(self.decoder(self.encoder(x)), y)\n"
        "        self.optimize(loss)\n"
        "        return loss.item()\n\n\n"
        'if __name__ == "__main__":',
    )
    .replace("trainer = Trainer(", "trainer = TranslationTrainer(")
    .replace(
        'print("loss", trainer.classify_step(x, y))',
        'print("loss", trainer.classify_step(x, y), trainer.translate_step(x, y))',
    )
)


def test_a_subclass_calling_the_step_method_gets_autocast_at_its_calls_too() -> None:
    """XLM's EncDecTrainer calls `self.optimize(loss)` too: apex ran its forward
    passes in float16, so autocast goes at its calls as at those in `Trainer`,
    reading the scaler the instance holds."""
    migrated = fixed_unsafe(_XLM_WITH_SUBCLASS)
    assert (
        "    def translate_step(self, x, y):\n"
        '        with torch.autocast("cuda", dtype=torch.float16, enabled=self.scaler.is_enabled()):\n'
        "            loss = nn.functional.cross_entropy(self.decoder(self.encoder(x)), y)\n"
        "        self.optimize(loss)\n"
    ) in migrated
    assert "apex" not in migrated


@pytest.mark.slow
def test_a_migrated_subclass_runs_its_forward_passes_under_autocast(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    script = tmp_path / "train.py"
    script.write_text(fixed_unsafe(_XLM_WITH_SUBCLASS, CPU_FLOAT16), encoding="utf-8")
    o1 = recorded_run(script, "1")
    assert o1["scaler_enabled"] == [False, True] and o1["scaled"] == 12
    assert o1["autocast"] == [["cpu", "torch.float16"]] * 12


def test_a_subclass_overriding_the_step_method_keeps_the_migration_back() -> None:
    text = _XLM_WITH_SUBCLASS.replace(
        "class TranslationTrainer(Trainer):\n",
        "class TranslationTrainer(Trainer):\n"
        "    def optimize(self, loss):\n"
        "        super().optimize(loss)\n\n",
    )
    assert fixed_unsafe(text) == text
    assert any("`TranslationTrainer` overrides `optimize`" in f for f in findings(text))


def test_a_def_nested_in_a_builder_keeps_its_own_return() -> None:
    text = _SETUP_AND_TRAIN.replace(
        "    return amp.initialize(",
        '    def describe():\n        return "sgd"\n\n    return amp.initialize(',
    ) + dedent(
        """

        def main(model, optimizer, loader, criterion):
            model, optimizer = setup(model, optimizer)
            train(model, optimizer, loader, criterion)
        """
    )
    migrated = fixed(text)
    assert '        return "sgd"\n' in migrated
    assert "    return model, optimizer, scaler\n" in migrated


def test_every_removed_apex_parallel_member_is_reported() -> None:
    """All of apex.parallel went in 2025: LARC and create_syncbn_process_group
    are reported, with what replaces them, beside the rewritten lines, so
    "0 would remain" is never said of a file that still imports apex.parallel."""
    source = dedent("""
        import torch
        import apex
        from apex.parallel.LARC import LARC
        from apex.parallel import DistributedDataParallel as ApexDDP


        def build(model, args):
            optimizer = LARC(torch.optim.SGD(model.parameters(), lr=0.1))
            group = apex.parallel.create_syncbn_process_group(args.group_size)
            model = apex.parallel.convert_syncbn_model(model, process_group=group)
            return ApexDDP(model), optimizer
        """)
    messages = [d.message for d in findings_of(source) if d.code == "AMP204"]
    assert len(messages) == 4
    assert any(m.startswith("`LARC`: apex.parallel was removed") and "trust_clip" in m for m in messages)
    assert any("`torch.distributed.new_group(ranks)`" in m for m in messages)
    result = fixed(source)
    assert codes_of(result).count("AMP204") == 2  # LARC and the process group remain, said


def test_an_unused_apex_amp_import_beside_native_amp_is_removed() -> None:
    source = dedent("""
        import torch
        from apex import amp


        def train(model, loader, optimizer, scaler):
            for x, y in loader:
                with torch.autocast("cuda"):
                    loss = model(x, y)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
        """)
    (finding,) = [d for d in findings_of(source) if d.code == "AMP204"]
    assert finding.message == (
        "`amp` is imported from apex.amp, removed from apex in 2025, and nothing uses it: "
        "the import fails where apex is gone"
    )
    result = fixed(source)
    assert "apex" not in result and fixed(result) == result
    # A `try` that probes for apex fails as it means to: left alone.
    probe = source.replace(
        "from apex import amp\n",
        "try:\n    from apex import amp\n    HAS_APEX = True\nexcept ImportError:\n    HAS_APEX = False\n",
    )
    assert "AMP204" not in codes_of(probe)


def test_apex_ddp_imported_in_one_branch_beside_torch_s_is_replaced() -> None:
    source = dedent("""
        import torch

        fp16 = True
        if fp16:
            from apex.parallel import DistributedDataParallel as DDP
        else:
            from torch.nn.parallel import DistributedDataParallel as DDP


        def wrap(model):
            return DDP(model)
        """)
    (finding,) = [d for d in findings_of(source) if d.code == "AMP204"]
    assert "in one branch; the other imports another `DDP`: import torch's in both" in (
        finding.message
    )
    result = fixed(source)
    assert "apex" not in result
    assert result.count("from torch.nn.parallel import DistributedDataParallel as DDP") == 2
    assert codes_of(result) == [] and fixed(result) == result


CLIPPER_AT_BOUNDARY = dedent("""
    import torch
    from apex import amp


    def clip_gradient(params, grad_clip):
        for p in params:
            if p.grad is not None:
                p.grad.data.clamp_(-grad_clip, grad_clip)


    def train(model, loader, optimizer, accum):
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
        for i, (x, y) in enumerate(loader):
            loss = torch.nn.functional.mse_loss(model(x), y) / accum
            with amp.scale_loss(loss, optimizer, delay_unscale=(i + 1) % accum != 0) as scaled:
                scaled.backward()
            {clip}
            if (i + 1) % accum == 0:
                optimizer.step()
                optimizer.zero_grad()
    """)


@pytest.mark.parametrize(
    "clip",
    [
        "if (i + 1) % accum == 0:\n            clip_gradient(amp.master_params(optimizer), 0.01)",
        "with nullcontext():\n            if (i + 1) % accum == 0:\n"
        "                clip_gradient(amp.master_params(optimizer), 0.01)",
    ],
    ids=["an if of its own", "nested"],
)
def test_a_project_clipper_moved_to_the_boundary_is_migrated(clip: str) -> None:
    # AMP203 declines a clipper of amp.master_params on every micro-step and
    # says to move it to the accumulation boundary; moved under an `if` that
    # tests the same as the step's, it runs exactly when the step does.
    torch = pytest.importorskip("torch")
    before = CLIPPER_AT_BOUNDARY.replace("{clip}", clip)
    every_step = CLIPPER_AT_BOUNDARY.replace(
        "{clip}", "clip_gradient(amp.master_params(optimizer), 0.01)"
    )
    assert "move it to the accumulation boundary" in findings_of(every_step)[0].message
    migrated = fixed(before, unsafe=True)
    assert "apex" not in migrated and "scaler.unscale_(optimizer)\n" in migrated
    compile(migrated, "migrated", "exec")
    # On the CPU GradScaler, in float16, the optimizer receives the clipped,
    # unscaled gradients of an FP32 run with the clip at the boundary.
    fp32 = (
        migrated.replace("scaler.scale(loss).backward()", "loss.backward()")
        .replace("scaler.unscale_(optimizer)", "pass")
        .replace("scaler.step(optimizer)", "optimizer.step()")
        .replace("scaler.update()", "pass")
        .replace('torch.autocast("cuda", dtype=torch.float16)', "nullcontext()")
        .replace('torch.amp.GradScaler("cuda")', "None")
    )
    weights = []
    for code in (migrated.replace('"cuda"', '"cpu"'), fp32):
        namespace = {"nullcontext": nullcontext}
        exec(compile(code, "run", "exec"), namespace)
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 4)
        optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
        data = [(torch.randn(8, 4), torch.randn(8, 4)) for _ in range(4)]
        namespace["train"](model, data, optimizer, 2)
        weights.append(model.weight.detach().clone())
    assert torch.allclose(weights[0], weights[1], atol=1e-3)


def test_master_params_as_the_sole_argument_of_a_long_line_still_parses() -> None:
    # The generator that replaces amp.master_params is the sole argument of
    # `list(...)`; laid out one argument per line, it takes no trailing comma
    # (`list(p for ...,)` does not parse).
    before = CLIPPER_AT_BOUNDARY.replace(
        "{clip}",
        "if (i + 1) % accum == 0:\n"
        "            clip_gradient(list(amp.master_params(optimizer)), "
        "grad_clip=args.grad_clip_threshold_value_for_the_model)",
    )
    migrated = fixed(before, unsafe=True)
    assert "apex" not in migrated
    assert (
        "clip_gradient(list(\n"
        '                p for group in optimizer.param_groups for p in group["params"]\n'
        "            ), grad_clip=args.grad_clip_threshold_value_for_the_model)\n"
    ) in migrated
    compile(migrated, "migrated", "exec")
