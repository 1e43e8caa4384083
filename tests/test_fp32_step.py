"""AMP001: which blocks are FP32 training steps, and what the rewrite inserts."""

from __future__ import annotations

from dataclasses import replace

import pytest

from amplint.config import Settings
from amplint.engine import lint_text
from tests.helpers import ALL, codes_of, dedent, fixed

LOOP = dedent("""
    import torch


    def train(model, loader, optimizer):
        for x, y in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
    """)


def _messages(text: str, settings: Settings | None = None) -> list[str]:
    return [d.message for d in lint_text(text, ALL, settings or Settings()) if d.code == "AMP001"]


def test_float16_default() -> None:
    assert fixed(LOOP) == dedent("""
        import torch


        def train(model, loader, optimizer):
            scaler = torch.amp.GradScaler("cuda")
            for x, y in loader:
                optimizer.zero_grad()
                with torch.autocast("cuda", dtype=torch.float16):
                    loss = torch.nn.functional.mse_loss(model(x), y)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
        """)


def test_bfloat16_needs_no_scaler() -> None:
    result = fixed(LOOP, Settings(dtype="bfloat16", device_type="cpu"))
    assert 'with torch.autocast("cpu", dtype=torch.bfloat16):' in result
    assert "GradScaler" not in result and "loss.backward()" in result
    assert fixed(result, Settings(dtype="bfloat16", device_type="cpu")) == result


def test_auto_picks_the_dtype_at_run_time() -> None:
    result = fixed(LOOP, Settings(dtype="auto"))
    assert (
        "amp_dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16" in result
    )
    assert 'scaler = torch.amp.GradScaler("cuda", enabled=amp_dtype == torch.float16)' in result
    assert 'with torch.autocast("cuda", dtype=amp_dtype):' in result


def test_torch_alias_and_missing_import() -> None:
    aliased = fixed(
        LOOP.replace("import torch\n", "import torch as th\n").replace("torch.nn", "th.nn")
    )
    assert 'scaler = th.amp.GradScaler("cuda")' in aliased
    assert "import torch\n" not in aliased
    without_torch = LOOP.replace("torch.nn.functional", "F").replace(
        "import torch\n", "import torch.nn.functional as F\n"
    )
    assert "import torch\n" not in without_torch
    assert fixed(without_torch).startswith("import torch\nimport torch.nn.functional as F\n")


def test_scaler_name_avoids_names_in_use() -> None:
    result = fixed(LOOP.replace("for x, y in loader:", "scaler = 2\n    for x, y in loader:"))
    assert 'grad_scaler = torch.amp.GradScaler("cuda")' in result
    assert "grad_scaler.scale(loss).backward()" in result


def test_second_run_changes_nothing_and_reports_nothing() -> None:
    once = fixed(LOOP)
    assert fixed(once) == once
    assert codes_of(once) == []


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        (
            """
            import torch
            optimizer = torch.optim.LBFGS(model.parameters())
            for x, y in loader:
                def closure():
                    optimizer.zero_grad()
                    loss = criterion(model(x), y)
                    loss.backward()
                    return loss
                optimizer.step(closure)
            """,
            "`optimizer.step(closure)` cannot go through a GradScaler (it refuses closures)",
        ),
        (
            """
            import torch.nn as nn
            criterion = nn.BCELoss()
            for x, y in loader:
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
            """,
            "`criterion` (nn.BCELoss) raises under CUDA autocast",
        ),
        (
            """
            import torch.nn.functional as F
            for x, y in loader:
                loss = F.binary_cross_entropy(torch.sigmoid(model(x)), y)
                loss.backward()
                optimizer.step()
            """,
            "`F.binary_cross_entropy` raises under CUDA autocast",
        ),
        (
            """
            from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
            model = FSDP(model)
            for x, y in loader:
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
            """,
            "FSDP needs torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler",
        ),
        (
            """
            for x, y in loader:
                loss = criterion(model(x), y)
                loss.backward()
                with torch.no_grad():
                    for p in model.parameters():
                        p.data.add_(p.grad, alpha=-lr)
            """,
            "parameters are updated by hand",
        ),
        (
            """
            class Trainer(Base):
                def training_step(self, batch):
                    loss = self.criterion(self.model(batch.x), batch.y)
                    loss.backward()
                    self.optimizer.step()
            """,
            "`Trainer` has no __init__ to create the GradScaler in",
        ),
        (
            """
            for x, y in loader:
                criterion(model(x), y).backward()
                optimizer.step()
            """,
            "the forward pass runs inside `criterion(model(x), y).backward()`",
        ),
        (
            """
            def backward_step(loss, optimizer):
                loss.backward()
                optimizer.step()
            """,
            "`loss` comes from the caller",
        ),
    ],
)
def test_reported_but_not_rewritten(source: str, reason: str) -> None:
    source = dedent(source)
    (message,) = _messages(source)
    assert reason in message
    assert fixed(source) == source


def test_fsdp_with_bfloat16_is_rewritten() -> None:
    source = dedent("""
        import torch
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        for x, y in loader:
            loss = criterion(FSDP(model)(x), y)
            loss.backward()
            optimizer.step()
        """)
    assert "torch.autocast" in fixed(source, Settings(dtype="bfloat16"))


@pytest.mark.parametrize(
    "source",
    [
        # reinforcement learning: env.step is not an optimizer
        """
        for episode in range(10):
            obs, done = env.reset(), False
            while not done:
                obs, reward, done = env.step(policy(obs))
        """,
        # evaluation
        """
        with torch.no_grad():
            for x, y in loader:
                total += criterion(model(x), y).item()
        """,
        # a framework owns precision
        """
        for batch in loader:
            loss = model(**batch).loss
            accelerator.backward(loss)
            optimizer.step()
        """,
        """
        for batch in loader:
            loss = model_engine(batch)
            model_engine.backward(loss)
            model_engine.step()
        """,
        # already mixed precision: the misuse rules' business
        """
        for x, y in loader:
            with torch.autocast("cuda"):
                loss = criterion(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        """,
        # a toy step on a bare parameter (tests do this): no model runs
        """
        import torch
        p = torch.nn.Parameter(torch.zeros(3))
        opt = torch.optim.SGD([p], lr=0.1)
        p.sum().backward()
        opt.step()
        """,
        # a scheduler is not an optimizer
        """
        for x in loader:
            out = model(x)
            scheduler.step()
        """,
        # optimizer wrappers forward a closure or a context id they are given;
        # the backward is the caller's (torch.distributed.optim does this). The
        # gradient helper's backward takes these past the prefilter.
        """
        class Wrapped:
            def step(self, closure=None):
                return self.optim.step(closure)

        def grad_norm(model, loss):
            loss.backward()
            return sum(p.grad.norm() for p in model.parameters())
        """,
        """
        def _local_step(local_optim, autograd_ctx_id):
            local_optim.step(autograd_ctx_id)

        def grad_norm(model, loss):
            loss.backward()
            return sum(p.grad.norm() for p in model.parameters())
        """,
        """
        def save(model, optim):
            optim.step(closure=None)
            torch.save(model.state_dict(), "m.pt")

        def grad_norm(model, loss):
            loss.backward()
            return sum(p.grad.norm() for p in model.parameters())
        """,
    ],
)
def test_not_a_training_step(source: str) -> None:
    source = dedent(source)
    assert "AMP001" not in codes_of(source)
    assert fixed(source) == source


def test_settings_validate_dtype_and_device_type(tmp_path) -> None:
    from tests.helpers import run_cli

    (tmp_path / "pyproject.toml").write_text('[tool.amplint]\ndtype = "fp8"\n')
    (tmp_path / "a.py").write_text(LOOP)
    result = run_cli("check", tmp_path)
    assert (
        result.exit_code == 2 and "`dtype` must be one of float16, bfloat16, auto" in result.stderr
    )
    (tmp_path / "pyproject.toml").write_text('[tool.amplint]\ndevice-type = "CUDA!"\n')
    assert "`device-type` must be" in run_cli("check", tmp_path).stderr


def test_cli_dtype_and_device_type_options(tmp_path) -> None:
    from tests.helpers import run_cli

    (tmp_path / "a.py").write_text(LOOP)
    result = run_cli("fix", "--apply", "--dtype", "bfloat16", "--device-type", "cpu", tmp_path)
    assert result.exit_code == 0, result.output
    assert 'torch.autocast("cpu", dtype=torch.bfloat16)' in (tmp_path / "a.py").read_text()


def test_target_torch_below_2_3_keeps_float16_unfixed() -> None:
    settings = replace(Settings(), target_torch=(2, 2))
    (message,) = _messages(LOOP, settings)
    assert "torch.amp.GradScaler needs torch 2.3" in message
    assert fixed(LOOP, settings) == LOOP


def test_two_loops_in_one_function_get_a_scaler_each() -> None:
    source = dedent("""
        import torch


        def main(model, pretrain_loader, finetune_loader, optimizer):
            for x, y in pretrain_loader:
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            for x, y in finetune_loader:
                loss = torch.nn.functional.l1_loss(model(x), y)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
        """)
    result = fixed(source)
    assert result.count("torch.autocast(") == 2
    assert 'scaler = torch.amp.GradScaler("cuda")' in result
    assert 'grad_scaler = torch.amp.GradScaler("cuda")' in result
    assert "grad_scaler.scale(loss).backward()" in result
    assert fixed(result) == result


def test_loss_arithmetic_in_ifs_after_the_forward_stays_outside_autocast() -> None:
    """HF's run_glue: `if n_gpu > 1: loss = loss.mean()` between forward and backward."""
    before = dedent("""
        import torch


        def train(model, loader, optimizer, args):
            for batch in loader:
                outputs = model(**batch)
                loss = outputs[0]
                if args.n_gpu > 1:
                    loss = loss.mean()
                if args.gradient_accumulation_steps > 1:
                    loss = loss / args.gradient_accumulation_steps
                loss.backward()
                optimizer.step()
        """)
    migrated = fixed(before)
    assert (
        '        with torch.autocast("cuda", dtype=torch.float16):\n'
        "            outputs = model(**batch)\n"
        "            loss = outputs[0]\n"
        "        if args.n_gpu > 1:\n"
    ) in migrated
    assert "        scaler.scale(loss).backward()\n" in migrated


def test_one_backward_in_each_branch_of_an_if_is_one_step() -> None:
    before = dedent("""
        import torch


        def train(model, loader, optimizer, retain):
            for inputs, targets in loader:
                loss = torch.nn.functional.mse_loss(model(inputs), targets)
                if retain:
                    loss.backward(retain_graph=True)
                else:
                    loss.backward()
                optimizer.step()
        """)
    migrated = fixed(before)
    assert "scaler.scale(loss).backward(retain_graph=True)" in migrated
    assert "            scaler.scale(loss).backward()\n" in migrated
