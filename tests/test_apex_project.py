"""AMP203 across a project: apex.amp's state spans modules, so one migration
rewrites every module of the program or none.

fixtures/apex/apex_trainer is the shape real apex projects have: the entry
script calls `amp.initialize`, the training step in trainer.py calls
`amp.scale_loss`, and utils.py wraps apex's loss-scaler state in a class.  Its
migration is pinned, runs on the CPU without apex with --fp16 on and off, and
is written only when every module of it can be.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.helpers import FIXTURES, assert_matches_golden, dedent, run_cli
from tests.test_apex import recorded_run

PROJECT = FIXTURES / "apex" / "apex_trainer"
EXPECTED = FIXTURES / "apex" / "expected" / "apex_trainer"
MODULES = ("train.py", "trainer.py", "utils.py")


def _copy(tmp_path: Path) -> Path:
    """The project in a directory of its own, marked as a project root."""
    project = tmp_path / "apex_trainer"
    shutil.copytree(PROJECT, project)
    (project / "pyproject.toml").write_text("", encoding="utf-8")
    return project


def _texts(project: Path) -> dict[str, str]:
    return {name: (project / name).read_text(encoding="utf-8") for name in MODULES}


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    project = _copy(tmp_path_factory.mktemp("migrated"))
    result = run_cli("fix", "--apply", "--no-cache", project)
    assert result.exit_code == 0, result.output
    assert "Fixed 7 findings in 3 files" in result.output
    return project


@pytest.mark.parametrize("name", MODULES)
def test_every_module_is_migrated_as_pinned(migrated: Path, name: str) -> None:
    assert_matches_golden((migrated / name).read_text(encoding="utf-8"), EXPECTED / name)


def test_the_scaler_travels_as_the_optimizer_does_and_no_global(migrated: Path) -> None:
    texts = _texts(migrated)
    assert not re.search(r"^\s*global ", "".join(texts.values()), re.M)
    assert not re.search(r"^\s*(from|import) apex", "".join(texts.values()), re.M)
    # Made where amp.initialize ran, handed to the trainer and the wrapper.
    assert 'grad_scaler = torch.amp.GradScaler("cuda", enabled=args.fp16)' in texts["train.py"]
    assert "Trainer(model, optimizer, max_norm=1.0, grad_scaler=grad_scaler)" in texts["train.py"]
    assert "def __init__(self, model, optimizer, max_norm, *, grad_scaler):" in texts["trainer.py"]
    assert "return self.grad_scaler.get_scale()" in texts["utils.py"]


def test_a_second_fix_changes_nothing(migrated: Path) -> None:
    before = _texts(migrated)
    result = run_cli("fix", "--apply", "--unsafe-fixes", "--no-cache", migrated)
    assert result.exit_code == 0, result.output
    assert _texts(migrated) == before


def _run(project: Path, *arguments: str, printed: str = "epoch 1 loss") -> dict:
    return recorded_run(project / "train.py", *arguments, printed=printed)


@pytest.mark.slow
def test_the_migrated_project_trains_without_apex_with_fp16_on(migrated: Path) -> None:
    pytest.importorskip("torch")
    seen = _run(migrated, "--fp16", "--checkpoint", "checkpoint.pt")
    assert seen["scaler_enabled"] == [True]
    assert seen["scaled"] == 8  # two epochs of four steps, each through the scaler
    assert seen["autocast"] and all(e == ["cuda", "torch.float16"] for e in seen["autocast"])
    assert (migrated / "checkpoint.pt").is_file()


@pytest.mark.slow
def test_the_migrated_project_trains_in_fp32_with_fp16_off(migrated: Path) -> None:
    pytest.importorskip("torch")
    seen = _run(migrated)
    assert seen["scaler_enabled"] == [False]


def test_naming_one_module_writes_nothing_and_names_the_others(tmp_path: Path) -> None:
    project = _copy(tmp_path)
    before = _texts(project)
    result = run_cli("fix", "--apply", "--no-cache", project / "train.py")
    assert _texts(project) == before
    assert "Fixed" not in result.output or "Fixed 0" in result.output
    assert "not among the paths named" in result.output
    assert "trainer.py" in result.output and "utils.py" in result.output


def test_one_module_that_cannot_migrate_holds_back_the_others(tmp_path: Path) -> None:
    project = _copy(tmp_path)
    utils = project / "utils.py"
    utils.write_text(
        utils.read_text(encoding="utf-8")
        + "\n\ndef opt_properties():\n    return amp._amp_state.opt_properties\n",
        encoding="utf-8",
    )
    before = _texts(project)
    result = run_cli("fix", "--apply", "--unsafe-fixes", "--no-cache", project)
    assert _texts(project) == before
    findings = [line for line in result.output.splitlines() if "AMP203" in line]
    assert findings
    others = [line for line in findings if "utils.py:" not in line.split(" ")[0]]
    assert others and all("which is not fixed: `amp._amp_state" in line for line in others)


def test_a_check_says_the_same_as_the_fix(tmp_path: Path) -> None:
    project = _copy(tmp_path)
    result = run_cli("check", "--no-cache", "--output-format", "concise", project / "trainer.py")
    assert "not among the paths named" in result.output
    result = run_cli("check", "--no-cache", "--output-format", "concise", project)
    assert "[*]" in result.output and "not fixed" not in result.output


ENTRY = """
import torch
from apex import amp

from models import make_model


def main(loader):
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    for x, y in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()
"""


def test_two_scripts_sharing_a_module_without_apex_migrate_each_on_its_own(
    tmp_path: Path,
) -> None:
    # waveglow's train.py and inference.py both import mel2samp: apex's state
    # does not flow between them, so neither waits for the other.
    (tmp_path / "pyproject.toml").write_text("", encoding="utf-8")
    (tmp_path / "models.py").write_text(
        "import torch\n\n\ndef make_model():\n    return torch.nn.Linear(4, 2)\n", encoding="utf-8"
    )
    for name in ("pretrain.py", "finetune.py"):
        (tmp_path / name).write_text(ENTRY.lstrip(), encoding="utf-8")
    result = run_cli("fix", "--apply", "--no-cache", tmp_path / "pretrain.py")
    assert "Fixed 2 findings in 1 file" in result.output, result.output
    assert "apex" not in (tmp_path / "pretrain.py").read_text(encoding="utf-8")
    assert "amp.initialize" in (tmp_path / "finetune.py").read_text(encoding="utf-8")


EVALUATE = """
import torch


def evaluate(model, batch, args):
    with torch.no_grad():
        x = batch.half() if args.fp16 else batch
        return model(x)
"""


@pytest.mark.parametrize(
    ("cast", "migrates"),
    [
        ("batch.half() if args.fp16 else batch", False),
        ("batch.to(torch.float16) if args.fp16 else batch", False),
        ("batch.half() if half else batch", True),  # cast beside `model.half()`: its own
        ("batch.half() if batch.is_cuda else batch", True),
    ],
)
def test_a_cast_to_float16_under_the_programs_switch_beside_the_steps_holds_back_apex(
    tmp_path: Path, cast: str, migrates: bool
) -> None:
    """XLM's evaluator casts its encoder's output with `.half() if params.fp16`:
    under apex (O1's casts of every call, O2's half model) that met float16
    weights; after the migration the evaluation runs outside autocast, and
    meets float32 ones.  The entry script imports the evaluator beside the step."""
    (tmp_path / "pyproject.toml").write_text("", encoding="utf-8")
    (tmp_path / "models.py").write_text(
        "import torch\n\n\ndef make_model():\n    return torch.nn.Linear(4, 2)\n", encoding="utf-8"
    )
    (tmp_path / "evaluation.py").write_text(
        EVALUATE.lstrip().replace("batch.half() if args.fp16 else batch", cast), encoding="utf-8"
    )
    entry = ENTRY.lstrip().replace(
        "from models import make_model\n", "from evaluation import evaluate\nfrom models import make_model\n"
    )
    (tmp_path / "train.py").write_text(entry, encoding="utf-8")
    result = run_cli("fix", "--apply", "--no-cache", tmp_path / "train.py")
    migrated = "apex" not in (tmp_path / "train.py").read_text(encoding="utf-8")
    assert migrated is migrates, result.output
    if not migrates:
        assert f"(not fixed: `x = {cast}` (evaluation.py:6) casts to float16 under the " in (
            result.output
        )


def test_two_scripts_sharing_an_apex_module_migrate_together(tmp_path: Path) -> None:
    project = _copy(tmp_path)
    (project / "eval_train.py").write_text(
        (project / "train.py").read_text(encoding="utf-8"), encoding="utf-8"
    )
    result = run_cli("fix", "--apply", "--no-cache", project / "train.py")
    assert "Fixed" not in result.output or "Fixed 0" in result.output
    assert "eval_train.py" in result.output and "not among the paths named" in result.output


# XLM's shape: amp.initialize in a method of the trainer, one `optimize(loss)`
# for every objective, each objective's forward pass in its own method.
TRAINER_WITH_OPTIMIZE = """\
import sys

import torch
from torch import nn
from apex import amp


class Trainer:
    def __init__(self, model, optimizer, fp16):
        self.model = model
        self.optimizer = optimizer
        self.criterion = nn.CrossEntropyLoss()
        if fp16:
            self.model, self.optimizer = amp.initialize(model, optimizer, opt_level="O1")

    def optimize(self, loss):
        self.optimizer.zero_grad()
        with amp.scale_loss(loss, self.optimizer) as scaled_loss:
            scaled_loss.backward()
        torch.nn.utils.clip_grad_norm_(amp.master_params(self.optimizer), 1.0)
        self.optimizer.step()

    def classify_step(self, x, y):
        loss = self.criterion(self.model(x), y)
        self.optimize(loss)
        return loss.item()

    def smooth_step(self, x, y):
        logits = self.model(x)
        loss = 0.5 * self.criterion(logits, y) + 0.1 * logits.pow(2).mean()
        self.optimize(loss)
        return loss.item()


if __name__ == "__main__":
    torch.manual_seed(0)
    model = nn.Linear(6, 3)
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), "--fp16" in sys.argv)
    x, y = torch.randn(16, 6), torch.randint(0, 3, (16,))
    for _ in range(3):
        print("loss", trainer.classify_step(x, y), trainer.smooth_step(x, y))
    print("scale", trainer.scaler.get_scale() if trainer.scaler.is_enabled() else None)
"""


@pytest.mark.slow
def test_initialize_in_a_method_keeps_the_scaler_on_the_instance_and_autocasts_the_callers(
    tmp_path: Path,
) -> None:
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER_WITH_OPTIMIZE, encoding="utf-8")
    result = run_cli("fix", "--apply", "--no-cache", script)
    assert result.exit_code == 0, result.output
    migrated = script.read_text(encoding="utf-8")
    assert 'self.scaler = torch.amp.GradScaler("cuda", enabled=fp16)' in migrated
    assert "global" not in migrated and "apex" not in migrated
    # autocast where each loss is computed, the scaler's calls in `optimize`
    autocast = 'with torch.autocast("cuda", dtype=torch.float16, enabled=self.scaler.is_enabled()):'
    assert migrated.count(autocast) == 2
    assert "        self.scaler.scale(loss).backward()\n        self.scaler.unscale_(" in migrated
    second = run_cli("fix", "--no-cache", script)
    assert second.output == "Would fix 0 findings in 0 files; 0 would remain.\n"
    pytest.importorskip("torch")
    for flags, enabled in ((["--fp16"], True), ([], False)):
        seen = recorded_run(script, *flags)
        assert seen["scaler_enabled"] == [enabled]
        assert seen["scaled"] == 6  # both objectives, three times, through the scaler
        assert seen["autocast"] == [["cuda", "torch.float16"]] * 6


# A builder in one module, the training loop in another: the scaler comes back
# from the builder with the optimizer and goes on to the trainer's step.
BUILDER = """\
import torch
from torch import nn
from apex import amp


def build(fp16):
    model = nn.Linear(6, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    if fp16:
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    return model, optimizer
"""
TRAIN_WITH_BUILDER = """\
import sys

import torch
from torch import nn
from apex import amp

from builder import build


def main():
    torch.manual_seed(0)
    model, optimizer = build("--fp16" in sys.argv)
    x, y = torch.randn(16, 6), torch.randn(16, 1)
    for _ in range(3):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()
        print("loss", loss.item())


if __name__ == "__main__":
    main()
"""


@pytest.mark.slow
def test_a_builder_in_another_module_returns_the_scaler_to_the_training_loop(
    tmp_path: Path,
) -> None:
    (tmp_path / "pyproject.toml").write_text("", encoding="utf-8")
    (tmp_path / "builder.py").write_text(BUILDER, encoding="utf-8")
    (tmp_path / "train.py").write_text(TRAIN_WITH_BUILDER, encoding="utf-8")
    result = run_cli(
        "fix", "--apply", "--no-cache", "--device-type", "cpu", "--dtype", "float16", tmp_path
    )
    assert result.exit_code == 0, result.output
    builder = (tmp_path / "builder.py").read_text(encoding="utf-8")
    train = (tmp_path / "train.py").read_text(encoding="utf-8")
    assert '    scaler = torch.amp.GradScaler("cpu", enabled=fp16)\n' in builder
    assert "    return model, optimizer, scaler\n" in builder
    assert '    model, optimizer, scaler = build("--fp16" in sys.argv)\n' in train
    assert "        scaler.scale(loss).backward()\n" in train
    assert "apex" not in builder + train
    pytest.importorskip("torch")
    on = _run(tmp_path, "--fp16", printed="loss")
    assert on["scaler_enabled"] == [True] and on["scaled"] == 3
    off = _run(tmp_path, printed="loss")
    assert off["scaler_enabled"] == [False]


def test_a_builder_call_in_another_module_that_keeps_the_tuple_whole_stops_the_migration(
    tmp_path: Path,
) -> None:
    (tmp_path / "pyproject.toml").write_text("", encoding="utf-8")
    (tmp_path / "builder.py").write_text(BUILDER, encoding="utf-8")
    kept_whole = TRAIN_WITH_BUILDER.replace(
        '    model, optimizer = build("--fp16" in sys.argv)\n',
        '    built = build("--fp16" in sys.argv)\n    model, optimizer = built\n',
    )
    (tmp_path / "train.py").write_text(kept_whole, encoding="utf-8")
    result = run_cli("fix", "--apply", "--no-cache", tmp_path)
    assert "Fixed 0 findings" in result.output
    assert (tmp_path / "train.py").read_text(encoding="utf-8") == kept_whole
    assert (
        "`build` returns the GradScaler with the optimizer after the migration, and the call "
        'at line 12 does not unpack what it returns (`build("--fp16" in sys.argv)`): unpack '
        "it into names first"
    ) in result.output


def test_a_loss_scaler_object_without_an_autocast_switch_names_the_class_and_what_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """timm's shape without timm's `amp_autocast` name: train.py calls
    amp.initialize and hands each loss to a scaler object whose class,
    re-exported by a package, runs `amp.scale_loss`.  The class could take the
    GradScaler, but nothing says where its callers' forward passes get
    autocast: the message on train.py names the class and what is missing,
    and the class's module names train.py."""
    (tmp_path / "pyproject.toml").write_text("", encoding="utf-8")
    (tmp_path / "utils").mkdir()
    (tmp_path / "utils" / "__init__.py").write_text(
        "from .scalers import ApexScaler\n", encoding="utf-8"
    )
    (tmp_path / "utils" / "scalers.py").write_text(
        dedent("""
            from apex import amp


            class ApexScaler:
                def __call__(self, loss, optimizer):
                    with amp.scale_loss(loss, optimizer) as scaled_loss:
                        scaled_loss.backward()
                    optimizer.step()
            """),
        encoding="utf-8",
    )
    train = dedent("""
        import torch
        from apex import amp

        from utils import ApexScaler


        def main(model, optimizer, loader):
            model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
            loss_scaler = ApexScaler()
            for x, y in loader:
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss_scaler(loss, optimizer)
        """)
    (tmp_path / "train.py").write_text(train, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    result = run_cli("check", "--no-cache", ".")
    (line,) = [line for line in result.output.splitlines() if "train.py:" in line]
    assert line.endswith(
        "(not fixed: apex's O1 cast the forward passes of the losses `ApexScaler` "
        "(utils/scalers.py) scales, which run where its instances are called: they need "
        "torch.autocast there; amplint writes it through the program's own autocast switch "
        "(`amp_autocast = suppress`, else `partial(torch.autocast, ...)`), and no name in "
        "`main` switches between `nullcontext`/`suppress` and torch.autocast)"
    ), line
    assert "the same change rewrites train.py, which is not fixed" in result.output
