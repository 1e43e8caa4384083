"""Precision provenance and float16 hazards (analysis/precision.py): a step is
rewritten only where it is FP32 end to end and its forward pass can live in
float16.

Each fixture of fixtures/precision is one class of program that a rewrite
harmed.  The static tests hold AMP001's decline and its reason, and every
spelling of each class.  The run tests show the harm is real: the rewrite
amplint wrote before this analysis (the analysis switched off) runs under
verify's harness in CPU float16, where torch 2.13's GradScaler("cpu") really
scales and skips, and does not train; what amplint writes now (nothing in
float16, bfloat16 where only the range was in the way) trains.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from amplint.config import Settings
from tests.helpers import FIXTURES, dedent, findings_of, fixed, run_cli

PRECISION = FIXTURES / "precision"
CUDA_FP16 = Settings()
CPU_FP16 = Settings(dtype="float16", device_type="cpu")
CPU_BF16 = Settings(dtype="bfloat16", device_type="cpu")

# Programs whose precision is managed already: declined in every dtype, and
# never called FP32.
MANAGED = {
    "bf16_model.py": "the program casts to low precision itself (`model = TinyLM()",
    "layers_with_dtype.py": "the parameters are made in the dtype the program chooses",
    "own_fp16_switch.py": "the program has its own precision switch (`fp16`",
    "apex_beside.py": "apex's `amp.initialize(...)` still sets this program's precision",
    "trainer_owns_scaler.py": "`Trainer` (line 12) keeps a GradScaler of its own",
}
# Forward passes float16 cannot carry: declined for float16, bfloat16 written.
HAZARDS = {
    "log_sigmoid_negative_sampling.py": "takes the log of a sigmoid",
    "ema_codebook.py": "updates `self.embed` in place",
    "gan_bce.py": "`adversarial_loss` (nn.BCELoss) takes probabilities",
    "bce_loss.py": "`criterion` (nn.BCELoss) takes probabilities",
}


def _amp001(text: str, settings: Settings) -> list[str]:
    return [d.message for d in findings_of(text, settings) if d.code == "AMP001"]


def test_every_fixture_is_a_class_here() -> None:
    assert sorted(p.name for p in PRECISION.glob("*.py")) == sorted({**MANAGED, **HAZARDS})


@pytest.mark.parametrize("name", sorted(MANAGED))
def test_a_program_managing_its_precision_is_declined_and_not_called_fp32(name: str) -> None:
    source = (PRECISION / name).read_text(encoding="utf-8")
    for settings in (CUDA_FP16, CPU_FP16, CPU_BF16):
        (message,) = _amp001(source, settings)
        assert message.startswith("training step not rewritten: "), message
        assert MANAGED[name] in message
        assert "FP32;" not in message and "runs in FP32" not in message
        assert fixed(source, settings) == source


@pytest.mark.parametrize("name", sorted(HAZARDS))
def test_a_float16_hazard_is_declined_for_float16_and_bfloat16_is_written(name: str) -> None:
    source = (PRECISION / name).read_text(encoding="utf-8")
    for settings in (CUDA_FP16, CPU_FP16, Settings(dtype="auto")):
        (message,) = _amp001(source, settings)
        assert HAZARDS[name] in message and "--dtype bfloat16" in message
        assert fixed(source, settings) == source
    rewritten = fixed(source, CPU_BF16)
    assert 'torch.autocast("cpu", dtype=torch.bfloat16)' in rewritten
    assert "GradScaler" not in rewritten
    assert fixed(rewritten, CPU_BF16) == rewritten


def test_a_plain_fp32_step_that_suits_float16_is_still_rewritten() -> None:
    source = (FIXTURES / "fp32_steps" / "nested_loops.py").read_text(encoding="utf-8")
    (message,) = _amp001(source, CUDA_FP16)
    assert message.startswith("training step runs in FP32: ")
    assert 'scaler = torch.amp.GradScaler("cuda")' in fixed(source)


# Every spelling of a class: a few lines placed before a plain FP32 loop.
LOOP = """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    {setup}
    model = Net().cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        out = model(x)
        loss = F.cross_entropy(out, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    """


def _loop(setup: str) -> str:
    return dedent(LOOP).replace("{setup}", dedent(setup).strip())


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        ("model0 = Net().bfloat16()", "casts to low precision itself"),
        ("model0 = Net().half()", "casts to low precision itself"),
        ("model0 = Net().to(dtype=torch.bfloat16)", "casts to low precision itself"),
        ("model0 = Net().to('cuda', torch.float16)", "casts to low precision itself"),
        ("torch.set_default_dtype(torch.bfloat16)", "made in the dtype the program chooses"),
        ("torch.set_default_dtype(DTYPE)", "made in the dtype the program chooses"),
        ("head = nn.Linear(4, 4, dtype=torch.float16)", "made in the dtype the program chooses"),
        ("emb = nn.Embedding(9, 4, dtype=cfg.dtype)", "made in the dtype the program chooses"),
        ("m = Auto.from_pretrained(p, torch_dtype=dt)", "made in the dtype the program chooses"),
        ("if args.fp16:\n    setup_fp16()", "own precision switch (`args.fp16`"),
        ("if not cfg.use_amp:\n    pass", "own precision switch (`cfg.use_amp`"),
        ("if args.precision == 16:\n    pass", "own precision switch (`args.precision`"),
        ("net = Net(half_precision=opts.half_precision)", "`opts.half_precision`"),
        ("net = Net(mixed_precision=flag)", "own precision switch (`mixed_precision`"),
        ("y = a if self.bf16 else b", "own precision switch (`self.bf16`"),
        ("s = torch.matmul(q.float(), k.float().t())", "keeps a matrix product in float32"),
        ("s = q.float() @ k.float().t()", "keeps a matrix product in float32"),
        ("p.grad.nan_to_num_(nan=0.0)", "the gradients are sanitised by hand"),
        ("g = torch.nan_to_num(p.grad)", "the gradients are sanitised by hand"),
        (
            "class Engine:\n    def __init__(self):\n        self.grad_scaler = GradScaler()\n"
            "engine = Engine()",
            "`Engine` (line 4) keeps a GradScaler of its own (`self.grad_scaler`)",
        ),
    ],
)
def test_each_spelling_of_managed_precision_is_seen(setup: str, reason: str) -> None:
    source = _loop(setup)
    (message,) = _amp001(source, CUDA_FP16)
    assert message.startswith("training step not rewritten: ") and reason in message, message
    assert fixed(source) == source


@pytest.mark.parametrize(
    "setup",
    [
        "if precision > best_precision:\n    best_precision = precision",  # a metric
        "ddp = create_ddp_model(model0, fp16_compression=args.fp16_compression)",
        "args = TrainingArguments(fp16=True)",  # a framework's constant setting
        "if mixed:\n    pass",  # PEFT's mixed adapters
        "if not torch.cuda.is_bf16_supported():\n    pass",  # asks the machine
        "if not torch.ops.mkldnn._is_mkldnn_bf16_supported():\n    pass",
        "x = batch.float()",
        "model0 = Net().to(torch.float32)",
        "torch.set_default_dtype(torch.float32)",
        "head = nn.Linear(4, 4, dtype=torch.float32)",
        "def export(m):\n    return m.half()",  # a sibling function's cast
        "clip = p.grad.norm()",
    ],
)
def test_what_only_looks_like_managed_precision_is_rewritten(setup: str) -> None:
    source = _loop(setup)
    assert "scaler.scale(loss).backward()" in fixed(source), _amp001(source, CUDA_FP16)


@pytest.mark.parametrize(
    "forward",
    [
        "loss = -torch.log(torch.sigmoid(out)).mean()",
        "loss = -out.sigmoid().log().mean()",
        "loss = -F.sigmoid(out).log().mean()",
        "loss = -torch.log(1 - torch.sigmoid(out)).mean()",
        "p = torch.sigmoid(out)\n    loss = -torch.log(p).mean()",
        "p = out.sigmoid()\n    loss = -p.log().mean()",
    ],
)
def test_each_spelling_of_the_log_of_a_sigmoid_is_a_float16_hazard(forward: str) -> None:
    source = dedent(LOOP).replace("{setup}", "").replace(
        "loss = F.cross_entropy(out, y)", forward
    )
    (message,) = _amp001(source, CUDA_FP16)
    assert "takes the log of a sigmoid" in message
    assert fixed(source) == source
    assert 'dtype=torch.bfloat16' in fixed(source, Settings(dtype="bfloat16"))


@pytest.mark.parametrize(
    ("squash", "hazard"),
    [
        ("y = torch.tanh(out)\n    loss = -torch.log(1 - y.pow(2) + 1e-6).mean()", True),
        ("y = out.tanh()\n    loss = -torch.log(2 * (1 - y ** 2) + 1e-6).mean()", True),
        ("y = torch.tanh(out)\n    loss = -torch.log(1 - y * y + 1e-6).mean()", True),
        ("loss = -torch.log(1 - torch.tanh(out).pow(2) + 1e-6).mean()", True),
        # Not a tanh; the stable form; a tanh whose square is no log's.
        ("y = torch.clamp(out, -0.5, 0.5)\n    loss = -torch.log(1 - y.pow(2)).mean()", False),
        ("loss = (2 * (math.log(2) - out - F.softplus(-2 * out))).mean()", False),
        ("y = torch.tanh(out)\n    loss = (1 - y.pow(2)).mean()", False),
    ],
)
def test_the_log_of_one_minus_tanh_squared_is_declined_in_every_dtype(
    squash: str, hazard: bool
) -> None:
    """SAC's squashed-Gaussian correction: cleanrl's SAC, rewritten, ran on the
    CPU with its log-probability biased (5.5 % of bfloat16 samples had tanh = 1,
    log(1e-6) = -13.8 added) and its Q losses 150 % off FP32's."""
    source = dedent(LOOP).replace("{setup}", "import math").replace(
        "loss = F.cross_entropy(out, y)", squash
    )
    for settings in (CUDA_FP16, CPU_BF16):
        if hazard:
            (message,) = _amp001(source, settings)
            assert "takes the log of 1 - tanh²" in message
            assert fixed(source, settings) == source
        else:
            assert "torch.autocast" in fixed(source, settings), _amp001(source, settings)


def test_logsigmoid_and_log_softmax_are_no_hazard() -> None:
    for forward in ("loss = -F.logsigmoid(out).mean()", "loss = -F.log_softmax(out, 1).mean()"):
        source = dedent(LOOP).replace("{setup}", "").replace(
            "loss = F.cross_entropy(out, y)", forward
        )
        assert "scaler.scale(loss).backward()" in fixed(source)


def test_state_updated_in_forward_but_never_multiplied_is_no_hazard() -> None:
    # BatchNorm-like running statistics: updated in place, only subtracted.
    source = dedent("""
        import torch
        import torch.nn as nn
        import torch.nn.functional as F


        class Norm(nn.Module):
            def forward(self, x):
                with torch.no_grad():
                    self.running_mean.mul_(0.9).add_(x.mean(0), alpha=0.1)
                return x - self.running_mean


        model = nn.Sequential(nn.Linear(4, 4), Norm()).cuda()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in loader:
            loss = F.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        """)
    assert "scaler.scale(loss).backward()" in fixed(source)
    hazard = source.replace("return x - self.running_mean", "return x @ self.running_mean")
    (message,) = _amp001(hazard, CUDA_FP16)
    assert "updates `self.running_mean` in place" in message


def test_a_cast_in_a_function_that_reaches_the_step_through_others_counts() -> None:
    """`main` casts the model it hands to a trainer whose `fit` calls the
    step: the cast reaches the step at two removes (found by `make shapes`)."""
    source = dedent("""
        import torch
        import torch.nn.functional as F


        class Trainer:
            def __init__(self, model):
                self.model = model
                self.optimizer = torch.optim.Adam(model.parameters())

            def train_step(self, x, y):
                loss = F.cross_entropy(self.model(x), y)
                loss.backward()
                self.optimizer.step()
                self.optimizer.zero_grad()

            def fit(self, loader):
                for x, y in loader:
                    self.train_step(x.cuda(), y.cuda())


        def main():
            model = Net().cuda().to(torch.bfloat16)
            Trainer(model).fit(loader)


        def export(model):
            return model.to(torch.bfloat16)
        """)
    for settings in (CUDA_FP16, CPU_BF16):
        (message,) = _amp001(source, settings)
        assert "casts to low precision itself (`model = Net().cuda().to(torch.bfloat16)`" in message
        assert fixed(source, settings) == source
    # `export` calls nothing that trains: its cast is its own business.
    plain = source.replace(".to(torch.bfloat16)", "")
    assert "self.scaler.scale(loss).backward()" in fixed(plain)


# A loop by hand over the optimizer a framework's trainer made and prepares
# (a course notebook's "overfit one batch" check after `trainer.train()`).
TRAINER_LOOP = """
    import torch
    {imports}

    trainer = {made}
    trainer.train()
    for _ in range(20):
        loss = trainer.model(**batch).loss
        loss.backward()
        {optimizer}.step()
        {optimizer}.zero_grad()
    """


@pytest.mark.parametrize(
    ("imports", "made", "optimizer", "framework"),
    [
        (
            "from transformers import Trainer",
            "Trainer(model, args, train_dataset=train)",
            "trainer.optimizer",
            "a transformers `trainer`",
        ),
        (
            "import transformers",
            "transformers.Seq2SeqTrainer(model, args)",
            "trainer.optimizer",
            "a transformers `trainer`",
        ),
    ],
)
def test_a_step_of_a_framework_trainers_optimizer_is_declined(
    imports: str, made: str, optimizer: str, framework: str
) -> None:
    source = (
        dedent(TRAINER_LOOP)
        .replace("{imports}", imports)
        .replace("{made}", made)
        .replace("{optimizer}", optimizer)
    )
    (message,) = _amp001(source, CUDA_FP16)
    assert message.startswith(f"training step not rewritten: `{optimizer}` is the optimizer of {framework}")
    assert "unscale its gradients twice" in message
    assert fixed(source) == source and fixed(source, CPU_BF16) == source


def test_fp16_is_not_switched_on_for_a_trainer_whose_optimizer_the_program_steps() -> None:
    """AMP004's side of the same class: `fp16=True` would have the Trainer
    prepare its optimizer with Accelerate's GradScaler, and the loop by hand
    after `trainer.train()` would then step unscaled gradients through it."""
    source = (
        dedent(TRAINER_LOOP)
        .replace("{imports}", "from transformers import Trainer, TrainingArguments")
        .replace("{made}", 'Trainer(model, TrainingArguments("out"))')
        .replace("{optimizer}", "trainer.optimizer")
    )
    (amp004,) = [d for d in findings_of(source, CUDA_FP16) if d.code == "AMP004"]
    assert amp004.fix is None
    assert "(not fixed: `trainer.optimizer.step()` steps the Trainer's optimizer by hand" in (
        amp004.message
    )
    assert "bf16=True" in fixed(source, Settings(dtype="bfloat16"))  # no scaler in bfloat16
    alone = source.replace("trainer.optimizer.step()", "pass").replace(
        "trainer.optimizer.zero_grad()", "pass"
    )
    assert "fp16=True" in fixed(alone)


def test_the_optimizer_of_a_trainer_of_the_programs_own_is_rewritten() -> None:
    source = (
        dedent(TRAINER_LOOP)
        .replace("{imports}", "from mytrainer import Trainer")
        .replace("{made}", "Trainer(model)")
        .replace("{optimizer}", "trainer.optimizer")
    )
    assert "scaler.step(trainer.optimizer)" in fixed(source)


# `if accumulate:` arms that compute the loss from the outputs of one model
# call above them; the loss written out calls no model itself (`make shapes`
# found such steps silent).
ARMS = """
    import torch

    model = Net().cuda()
    optimizer = torch.optim.Adam(model.parameters())
    for i, (x, y) in enumerate(loader):
        output = model(x.cuda())
        if ACCUMULATION > 1:
            loss = {loss} / ACCUMULATION
            loss.backward()
            if (i + 1) % ACCUMULATION == 0:
                optimizer.step()
                optimizer.zero_grad()
        else:
            loss = {loss}
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    """


def test_arms_computing_a_written_out_loss_from_the_outputs_above_are_a_step() -> None:
    squared = dedent(ARMS).replace("{loss}", "((output - y.cuda()) ** 2).mean()")
    rewritten = fixed(squared)
    assert rewritten.count("scaler.scale(loss).backward()") == 2
    assert 'with torch.autocast("cuda", dtype=torch.float16):\n        output = model(' in rewritten
    log_sigmoid = dedent(ARMS).replace("{loss}", "-torch.log(torch.sigmoid(output)).mean()")
    (message,) = _amp001(log_sigmoid, CUDA_FP16)
    assert "takes the log of a sigmoid" in message
    assert "dtype=torch.bfloat16" in fixed(log_sigmoid, Settings(dtype="bfloat16"))


def test_a_switch_in_another_module_counts_where_the_step_uses_it(tmp_path: Path) -> None:
    """The model module's `if self.fp16:` reaches a step that builds that
    model; a library module's unrelated switch does not."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "net.py").write_text(
        dedent("""
            import torch.nn as nn


            class Net(nn.Module):
                def __init__(self, fp16=False):
                    super().__init__()
                    self.fp16 = fp16
                    self.fc = nn.Linear(4, 4)

                def forward(self, x):
                    if self.fp16:
                        x = x.half()
                    return self.fc(x)


            def unrelated(cfg):
                if cfg.use_amp:
                    return 1


            def batches(n):
                return range(n)
            """)
    )
    train = dedent(LOOP).replace("{setup}", "from net import Net")
    (tmp_path / "train.py").write_text(train)
    result = run_cli("check", "--no-cache", tmp_path / "train.py")
    assert "own precision switch (`self.fp16` in `if self.fp16:`, net.py:11)" in result.stdout
    plain = train.replace("from net import Net", "from net import batches").replace(
        "Net()", "nn.Linear(4, 4)"
    )
    (tmp_path / "train.py").write_text(plain)
    assert "training step runs in FP32: " in run_cli("check", "--no-cache", tmp_path / "train.py").stdout


# ----------------------------------------------------------------- the runs


@pytest.fixture(scope="module")
def torch_installed() -> None:
    pytest.importorskip("torch")


def _run(script: Path, source: str, tmp_path: Path, *arguments: str, steps: int = 30) -> dict:
    """One run under verify's harness: what it measured, or {"error": ...}."""
    code = tmp_path / f"{script.stem}.{len(list(tmp_path.iterdir()))}.src"
    code.write_text(source, encoding="utf-8")
    out = code.with_suffix(".json")
    run = subprocess.run(
        [sys.executable, "-m", "amplint.verify.harness", "--source", str(code),
         "--script", str(script), "--steps", str(steps), "--out", str(out), "--", *arguments],
        capture_output=True, text=True, timeout=300, cwd=script.parent,
    )  # fmt: skip
    if not out.exists():
        return {"error": run.stderr[-3000:]}
    return json.loads(out.read_text(encoding="utf-8"))


def _without_the_analysis(source: str, settings: Settings, monkeypatch) -> str:
    """What amplint wrote before this analysis: AMP001 with it switched off."""
    import amplint.rules.fp32_step as fp32_step

    with monkeypatch.context() as patch:
        patch.setattr(fp32_step, "provenance", lambda step, facts: None)
        patch.setattr(fp32_step, "float16_hazard", lambda step, facts: None)
        return fixed(source, settings)


def _finite(result: dict) -> bool:
    return all(isinstance(loss, float) and math.isfinite(loss) for loss in result["losses"])


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", ["log_sigmoid_negative_sampling.py", "ema_codebook.py", "own_fp16_switch.py"]
)
def test_the_old_float16_rewrite_skips_most_steps_and_what_is_written_now_trains(
    name: str, tmp_path: Path, monkeypatch, torch_installed
) -> None:
    script = PRECISION / name
    source = script.read_text(encoding="utf-8")
    old = _without_the_analysis(source, CPU_FP16, monkeypatch)
    assert 'GradScaler("cpu")' in old
    before = _run(script, old, tmp_path)
    # A healthy scale search skips a handful while it lowers 65536; these skip
    # nearly every step, on losses that are inf or NaN.
    assert before["skipped_steps"] >= 25, before.get("error") or before["skipped_steps"]
    assert not _finite(before)
    original = _run(script, source, tmp_path)
    assert original["skipped_steps"] == 0 and _finite(original)
    assert fixed(source, CPU_FP16) == source  # now: declined, the program runs as it was
    if name in HAZARDS:
        bf16 = _run(script, fixed(source, CPU_BF16), tmp_path)
        assert bf16["skipped_steps"] == 0 and _finite(bf16), bf16.get("error")
        assert len(bf16["losses"]) == len(original["losses"])


@pytest.mark.slow
def test_the_old_rewrite_beside_a_trainers_scaler_clips_scaled_gradients(
    tmp_path: Path, monkeypatch, torch_installed
) -> None:
    """The trainer's helper unscales through its own (off) scaler, so the
    clip sees gradients 65536 times too large and the SGD updates shrink by
    that factor: update parity, not loss, shows it."""
    script = PRECISION / "trainer_owns_scaler.py"
    source = script.read_text(encoding="utf-8")
    old = _without_the_analysis(source, CPU_FP16, monkeypatch)
    assert "scaler.scale(loss).backward()" in old and "trainer.clip_gradients()" in old
    original, before = _run(script, source, tmp_path), _run(script, old, tmp_path)

    def update_norms(result: dict) -> list[float]:
        """The first parameter group's update norm at each optimizer step."""
        return [records[0]["update_norm"][0] for records in result["updates"] if records]

    ratios = [
        amp / fp32
        for fp32, amp in zip(update_norms(original), update_norms(before))
        if fp32 > 0 and amp > 0
    ]
    assert ratios and max(ratios) < 1e-3, ratios[:5]
    assert fixed(source, CPU_FP16) == source


APEX_STUB = '''
"""A stand-in for NVIDIA apex's amp.initialize, for the test: O0 leaves the
model in float32, O2 casts it to float16 as apex's O2 did."""


def initialize(model, optimizer, opt_level="O1"):
    if opt_level in ("O2", "O3"):
        model.half()
    return model, optimizer
'''


@pytest.mark.slow
def test_the_old_rewrite_beside_apex_overrides_o0_and_breaks_o2(
    tmp_path: Path, monkeypatch, torch_installed
) -> None:
    script_dir = tmp_path / "program"
    (script_dir / "apex").mkdir(parents=True)
    (script_dir / "apex" / "__init__.py").write_text("")
    (script_dir / "apex" / "amp.py").write_text(APEX_STUB)
    source = (PRECISION / "apex_beside.py").read_text(encoding="utf-8")
    script = script_dir / "apex_beside.py"
    script.write_text(source)
    old = _without_the_analysis(source, CPU_FP16, monkeypatch)
    assert "amp.initialize(" in old and 'GradScaler("cpu")' in old
    runs = tmp_path / "runs"
    runs.mkdir()
    # O0 means FP32 to the program; the old rewrite ran autocast all the same.
    o0 = _run(script, old, runs, "--opt-level", "O0")
    assert any(region["enabled"] for region in o0["autocast"]), o0.get("error")
    assert not any(region["enabled"] for region in _run(script, source, runs)["autocast"])
    # O2 made the parameters float16, whose gradients a GradScaler refuses.
    o2 = _run(script, old, runs, "--opt-level", "O2")
    assert "error" in o2 or o2["steps"] == 0
    assert fixed(source, CPU_FP16) == source
