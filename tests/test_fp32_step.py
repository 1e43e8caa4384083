"""AMP001: which blocks are FP32 training steps, and what the rewrite inserts."""

from __future__ import annotations

from dataclasses import replace

import pytest

from amplint.config import Settings
from amplint.engine import lint_text
from tests.helpers import ALL, codes_of, dedent, findings_of, fixed

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


def _notebook_messages(cells: list[str]) -> list[str]:
    """AMP001's messages for a notebook of these code cells, read from its file."""
    import tempfile
    from pathlib import Path

    from amplint.api import check_paths
    from tests.test_notebooks import code_cell, notebook_json

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "tutorial.ipynb"
        path.write_text(notebook_json([code_cell(cell) for cell in cells]))
        [result] = check_paths([path]).files
        return [f.message for f in result.findings if f.code == "AMP001"]


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
    # The GPU's own bfloat16, not is_bf16_supported(), which counts emulation (a V100).
    assert (
        "    amp_dtype = (\n"
        "        torch.bfloat16\n"
        "        if (torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 0))\n"
        "        else torch.float16\n"
        "    )\n"
    ) in result
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
                if aux:
                    loss = criterion(model(x), y) + aux_loss(x)
                else:
                    loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
            """,
            "`criterion` (nn.BCELoss) raises under CUDA autocast and its loss is computed "
            "in a compound statement",
        ),
        (
            """
            import torch.nn.functional as F
            for x, y in loader:
                loss = sum(F.binary_cross_entropy(model(p), y) for p in x)
                loss.backward()
                optimizer.step()
            """,
            "`F.binary_cross_entropy` raises under CUDA autocast and its loss is computed in "
            "a comprehension or lambda",
        ),
        (
            """
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
            fully_shard(model, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16))
            for x, y in loader:
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
            """,
            "the model is wrapped in FSDP with a mixed-precision policy (line 2)",
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
    # A BCE loss under bfloat16: in float16 it is declined first, for the range
    # (analysis/precision.py), before CUDA autocast's refusal is looked at.
    settings = Settings(dtype="bfloat16") if "raises under CUDA autocast" in reason else Settings()
    (message,) = _messages(source, settings)
    assert reason in message
    assert fixed(source, settings) == source


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


FSDP_STEP = """
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import {wrapper}

    def main(model, loader):
        dist.init_process_group("nccl")
        model = {wrapper}(model.cuda())
        optimizer = torch.optim.AdamW(model.parameters())
        for x, y in loader:
            loss = criterion(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    """


def test_fully_sharded_data_parallel_gets_the_sharded_scaler_beside_its_import() -> None:
    result = fixed(dedent(FSDP_STEP.format(wrapper="FullyShardedDataParallel")))
    assert result.startswith(
        "import torch\n"
        "import torch.distributed as dist\n"
        "from torch.distributed.fsdp import FullyShardedDataParallel\n"
        "from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler\n"
    )
    assert 'ShardedGradScaler("cuda") if dist.is_initialized() else' in " ".join(result.split())
    assert fixed(result) == result


@pytest.mark.parametrize("wrapper", ["fully_shard", "DistributedDataParallel"])
def test_fully_shard_and_ddp_keep_the_plain_scaler(wrapper: str) -> None:
    # fully_shard's DTensor gradients: the plain GradScaler's inf check is
    # reduced across ranks by DTensor itself (PyTorch tests FSDP2 with it).
    source = dedent(FSDP_STEP.format(wrapper=wrapper))
    if wrapper == "DistributedDataParallel":
        source = source.replace("torch.distributed.fsdp", "torch.nn.parallel")
    result = fixed(source)
    assert 'scaler = torch.amp.GradScaler("cuda")' in result
    assert "Sharded" not in result


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


@pytest.mark.parametrize(
    ("target", "scaler", "autocast"),
    [
        ((2, 2), "torch.cuda.amp.GradScaler()", 'torch.autocast("cuda", dtype=torch.float16)'),
        ((1, 9), "torch.cuda.amp.GradScaler()", "torch.cuda.amp.autocast()"),
    ],
)
def test_target_torch_below_2_3_gets_cudas_own_scaler(
    target: tuple[int, int], scaler: str, autocast: str
) -> None:
    settings = replace(Settings(), target_torch=target)
    after = fixed(LOOP, settings)
    assert scaler in after and autocast in after
    assert _messages(after, settings) == [] and fixed(after, settings) == after


@pytest.mark.parametrize(
    ("settings", "reason"),
    [
        (Settings(target_torch=(2, 2), device_type="mps"), "a GradScaler for mps needs torch 2.3"),
        (Settings(target_torch=(1, 9), dtype="bfloat16"), "needs torch 1.10 (torch.autocast)"),
        (Settings(target_torch=(1, 5)), "torch.cuda.amp needs torch 1.6"),
    ],
)
def test_target_torch_without_a_spelling_says_which(settings: Settings, reason: str) -> None:
    (message,) = _messages(LOOP, settings)
    assert reason in message
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
                optimizer.zero_grad()
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
                optimizer.zero_grad()
        """)
    migrated = fixed(before)
    assert "scaler.scale(loss).backward(retain_graph=True)" in migrated
    assert "            scaler.scale(loss).backward()\n" in migrated


CPU_TUTORIAL = dedent("""
    import torch
    import torch.nn as nn

    x = torch.linspace(-1, 1, 100).unsqueeze(1)
    y = x.pow(2) + 0.2 * torch.rand(x.size())
    net = nn.Sequential(nn.Linear(1, 10), nn.ReLU(), nn.Linear(10, 1))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.2)
    loss_func = nn.MSELoss()

    for t in range(200):
        prediction = net(x)
        loss = loss_func(prediction, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    """)


def test_a_script_that_never_leaves_the_cpu_gets_a_message_not_cuda_autocast() -> None:
    (message,) = _messages(CPU_TUTORIAL)
    assert "never moves its model or data off the CPU" in message
    assert fixed(CPU_TUTORIAL) == CPU_TUTORIAL
    # Asked for the CPU, it is rewritten for the CPU.
    cpu = fixed(CPU_TUTORIAL, Settings(device_type="cpu", dtype="bfloat16"))
    assert 'with torch.autocast("cpu", dtype=torch.bfloat16):' in cpu
    # One `.to(device)` and the CUDA rewrite applies, as it does to a step
    # whose optimizer comes from a caller (set up where the GPU may be chosen).
    moved = CPU_TUTORIAL.replace("nn.Linear(10, 1))", "nn.Linear(10, 1)).to(device)")
    assert 'torch.autocast("cuda"' in fixed(moved)
    assert 'torch.autocast("cuda"' in fixed(LOOP)


# A tutorial's first cells train a toy on the CPU; a later one uses the GPU.
CPU_TOY_THEN_GPU = CPU_TUTORIAL + dedent("""

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = nn.Linear(784, 10).to(device)
    adam = torch.optim.Adam(model.parameters())
    for images, labels in [(torch.randn(8, 784), torch.randint(0, 10, (8,)))]:
        images, labels = images.to(device), labels.to(device)
        gpu_loss = nn.functional.cross_entropy(model(images), labels)
        adam.zero_grad()
        gpu_loss.backward()
        adam.step()
    """)


def test_a_cpu_toy_beside_gpu_code_is_declined_as_a_cpu_script_is() -> None:
    toy, gpu = _messages(CPU_TOY_THEN_GPU)
    assert "what `optimizer` trains is made on the CPU and never moved off it" in toy
    assert "not rewritten" not in gpu
    rewritten = fixed(CPU_TOY_THEN_GPU)
    assert rewritten.count('torch.autocast("cuda"') == 1
    assert CPU_TUTORIAL.split("for t in")[1] in rewritten  # the toy's loop as it was
    # The same toy in a notebook's cells.
    cells = [CPU_TUTORIAL, CPU_TOY_THEN_GPU[len(CPU_TUTORIAL) :]]
    found = _notebook_messages(cells)
    assert "never moved off it" in found[0] and "not rewritten" not in found[1]


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (("nn.Linear(10, 1))\n", "nn.Linear(10, 1))\nnet.to(device)\n"), "moved before the loop"),
        (("prediction = net(x)", "prediction = net(x.to(device))"), "data moved in the loop"),
        (("net = nn.Sequential(", "net = torch.load('n.pt') or nn.Sequential("), "loaded"),
        (("import torch.nn as nn\n", "import torch.nn as nn\ntorch.set_default_device('cuda')\n"), "a default device"),
        (("net = nn.Sequential(", "net = Toy() or nn.Sequential("), "a class of the file that moves itself"),
        (("net.parameters()", "params"), "parameters the proof does not follow"),
    ],
)
def test_a_cpu_toy_is_declined_only_where_its_model_provably_stays(change, why) -> None:
    toy = CPU_TOY_THEN_GPU.replace(*change) + dedent("""

        class Toy(nn.Module):
            def __init__(self):
                super().__init__()
                self.cuda()
        """)
    assert toy != CPU_TOY_THEN_GPU, why
    toy_message = _messages(toy)[0]
    assert "never moved off it" not in toy_message, why
    assert fixed(toy).count('torch.autocast("cuda"') == 2, why


ACCELERATE_LOOP = dedent("""
    import torch
    from accelerate import Accelerator


    def train(model, loader):
        accelerator = Accelerator({precision})
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        for batch in loader:
            loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    """)


def test_a_model_prepared_by_accelerate_is_left_to_its_accelerator() -> None:
    # The Accelerator made here: its switch is AMP002's finding, not a step's.
    plain = ACCELERATE_LOOP.format(precision="")
    assert _messages(plain) == []
    assert codes_of(plain) == ["AMP002"]
    assert 'mixed_precision=os.environ.get("ACCELERATE_MIXED_PRECISION", "fp16")' in fixed(plain)
    fp8 = ACCELERATE_LOOP.format(precision='mixed_precision="fp8"')
    assert _messages(fp8) == []  # mixed precision already, whatever the backward
    off = ACCELERATE_LOOP.format(precision='mixed_precision="no"')
    assert codes_of(off) == []  # FP32 chosen in so many words
    # An Accelerator made elsewhere: the step says where the switch is.
    given = plain.replace("model, loader):", "model, loader, accelerator):").replace(
        "    accelerator = Accelerator()\n", ""
    )
    (message,) = _messages(given)
    assert 'set `Accelerator(mixed_precision="bf16")`' in message
    assert fixed(given) == given


@pytest.mark.parametrize(
    ("loss_line", "expected"),
    [
        (
            "loss = F.binary_cross_entropy(torch.sigmoid(model(x)), y)",
            """
            with torch.autocast("cuda", dtype=torch.bfloat16):
                model_out = torch.sigmoid(model(x))
            loss = F.binary_cross_entropy(model_out.float(), y)
            """,
        ),
        (
            "loss = nn.BCELoss()(self_model(x).squeeze(1), y) + 0.1 * x.abs().mean()",
            """
            with torch.autocast("cuda", dtype=torch.bfloat16):
                self_model_out = self_model(x).squeeze(1)
            loss = nn.BCELoss()(self_model_out.float(), y) + 0.1 * x.abs().mean()
            """,
        ),
    ],
)
def test_an_autocast_unsafe_loss_is_computed_after_the_block_on_float_inputs(
    loss_line: str, expected: str
) -> None:
    source = dedent(f"""
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        for x, y in loader:
            {loss_line}
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        """)
    # bfloat16 keeps float32's range: only CUDA autocast's refusal is in the way.
    bf16 = Settings(dtype="bfloat16")
    result = fixed(source, bf16)
    indented = "".join(
        "    " + line if line.strip() else line for line in dedent(expected).splitlines(True)
    )
    assert indented in result
    assert fixed(result, bf16) == result
    (message,) = _messages(source, bf16)
    assert "so it is computed after the block on `.float()` inputs" in message
    assert "nn.BCEWithLogitsLoss" in message
    # float16 rounds probabilities near 0 and 1 to them, where BCE's gradient
    # overflows: declined, with the way out.
    (message,) = _messages(source)
    assert "takes probabilities, which float16 rounds to 0 or 1" in message
    assert "nn.BCEWithLogitsLoss, or use `--dtype bfloat16`" in message
    assert fixed(source) == source


GRADIENT_PENALTY = dedent("""
    import torch
    from torch import autograd


    def compute_gradient_penalty(D, real, fake):
        alpha = torch.rand(real.size(0), 1, device=real.device)
        mixed = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
        out = D(mixed)
        grads = autograd.grad(out, mixed, torch.ones_like(out), create_graph=True)[0]
        return ((grads.norm(2, dim=1) - 1) ** 2).mean()


    def train(D, G, loader, optimizer_D, device):
        for real in loader:
            real = real.to(device)
            fake = G(torch.randn(real.size(0), 8, device=device))
            penalty = compute_gradient_penalty(D, real, fake)
            d_loss = -D(real).mean() + D(fake).mean() + 10 * penalty
            d_loss.backward()
            optimizer_D.step()
    """)


def test_a_gradient_penalty_keeps_float16_from_rewriting_the_step() -> None:
    # WGAN-GP: autograd.grad inside the forward pass would see scaled outputs
    # under a GradScaler; bfloat16 needs no scaler and is rewritten.
    (message,) = _messages(GRADIENT_PENALTY)
    assert "`compute_gradient_penalty` takes gradients inside the forward pass" in message
    assert fixed(GRADIENT_PENALTY) == GRADIENT_PENALTY
    bf16 = fixed(GRADIENT_PENALTY, Settings(dtype="bfloat16"))
    assert 'with torch.autocast("cuda", dtype=torch.bfloat16):' in bf16


GRADIENT_PENALTY_METHOD = dedent("""
    import torch
    import torch.nn.functional as F


    class Discriminator:
        def __init__(self, net, device):
            self.net = net.to(device)
            self.optimizer = torch.optim.Adam(self.net.parameters())

        def penalty(self, real, fake):
            alpha = torch.rand(real.size(0), 1, device=real.device)
            mixed = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
            out = self.net(mixed)
            grads = torch.autograd.grad(out, mixed, torch.ones_like(out), create_graph=True)[0]
            return 10 * (grads.norm(2, dim=1) - 1).pow(2).mean()

        def update(self, pairs):
            for real, fake in pairs:
                loss = F.softplus(-self.net(real)).mean() + F.softplus(self.net(fake)).mean()
                pen = self.penalty(real, fake)
                self.optimizer.zero_grad()
                (loss + pen).backward()
                self.optimizer.step()
    """)


def test_a_gradient_penalty_behind_a_method_keeps_float16_from_rewriting_the_step() -> None:
    # GAIL's `self.compute_grad_pen(...)`: the method, not the step, calls
    # autograd.grad; under a GradScaler its gradients would be scaled float16.
    (message,) = _messages(GRADIENT_PENALTY_METHOD)
    assert "`self.penalty` takes gradients inside the forward pass" in message
    assert fixed(GRADIENT_PENALTY_METHOD) == GRADIENT_PENALTY_METHOD
    bf16 = fixed(GRADIENT_PENALTY_METHOD, Settings(dtype="bfloat16"))
    assert 'with torch.autocast("cuda", dtype=torch.bfloat16):' in bf16


DQN = dedent("""
    import torch
    import torch.nn.functional as F


    def optimize(policy_net, target_net, optimizer, batch, gamma):
        states, actions, rewards, next_states, done = batch
        q = policy_net(states).gather(1, actions)
        next_values = torch.zeros(states.size(0), device=states.device)
        with torch.no_grad():
            next_values[~done] = target_net(next_states[~done]).max(1).values
        loss = F.smooth_l1_loss(q, (rewards + gamma * next_values).unsqueeze(1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


    def main(policy_net, target_net, memory, steps):
        policy_net, target_net = policy_net.cuda(), target_net.cuda()
        optimizer = torch.optim.AdamW(policy_net.parameters(), lr=1e-4)
        for _ in range(steps):
            optimize(policy_net, target_net, optimizer, memory.sample(128), 0.99)
    """)


def test_a_write_by_tensor_index_into_a_float32_tensor_keeps_autocast_out() -> None:
    # PyTorch's DQN tutorial: under autocast the target network's values are
    # float16 (bfloat16), and index_put_ into the float32 `next_values` raises.
    (message,) = _messages(DQN)
    assert "`next_values[~done] = ...` writes what the forward pass computes" in message
    assert fixed(DQN) == DQN
    assert fixed(DQN, Settings(dtype="bfloat16")) == DQN
    # The same writes by an int, a slice or a range counter copy, which converts;
    # an assignment of the region's values into a tensor made like them
    # (`zeros_like`) keeps their dtype: those steps are rewritten.
    for write in (
        "next_values[0] = target_net(next_states).max(1).values[0]",
        "next_values[:] = target_net(next_states).max(1).values",
        # A dict's key (stylegan2-ada's projector sets `param_group["lr"]` there).
        "optimizer.param_groups[0]['lr'] = max(0.1, gamma * rewards.mean().item())",
        "next_values = torch.zeros_like(q[:, 0])\n"
        "        next_values[~done] = target_net(next_states[~done]).max(1).values",
    ):
        text = DQN.replace(
            "next_values[~done] = target_net(next_states[~done]).max(1).values", write
        )
        assert "torch.autocast" in fixed(text), write


C51 = dedent("""
    import torch


    def train(q_network, target_network, optimizer, rb, args):
        q_network, target_network = q_network.cuda(), target_network.cuda()
        for step in range(args.steps):
            data = rb.sample(args.batch_size)
            with torch.no_grad():
                _, next_pmfs = target_network.get_action(data.next_observations)
                next_atoms = data.rewards + args.gamma * target_network.atoms
                b = (next_atoms.clamp(args.v_min, args.v_max) - args.v_min) / args.delta_z
                l, u = b.floor(), b.ceil()
                d_m_l = (u - b) * next_pmfs
                target_pmfs = torch.zeros_like(next_pmfs)
                for i in range(target_pmfs.size(0)):
                    target_pmfs[i].index_add_(0, l[i].long(), d_m_l[i])
            _, old_pmfs = q_network.get_action(data.observations, data.actions)
            loss = (-(target_pmfs * old_pmfs.clamp(min=1e-5).log()).sum(-1)).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    """)


def test_an_index_add_of_what_the_region_computes_keeps_autocast_out() -> None:
    """cleanrl's C51 and Rainbow project their target with `index_add_` into
    `zeros_like(next_pmfs)`: rewritten, both crashed on the CPU in float16 and
    bfloat16 (`make ecosystem`'s runnable subset): the value, promoted by the
    float32 atoms, is float32 where the tensor is low precision."""
    (message,) = _messages(C51)
    assert "`target_pmfs[i].index_add_(...)` writes what the forward pass computes" in message
    for settings in (Settings(), Settings(dtype="bfloat16", device_type="cpu")):
        assert fixed(C51, settings) == C51


def test_index_put_of_a_low_precision_value_into_float32_raises_under_autocast() -> None:
    # What the decline above rests on, in torch itself (CPU autocast, bfloat16).
    torch = pytest.importorskip("torch")
    linear = torch.nn.Linear(4, 3)
    mask = torch.tensor([True, False, True])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        values = linear(torch.randn(3, 4)).max(1).values
        target = torch.zeros(3)
        target[0:2] = values[0:2]  # a slice copies, converting
        with pytest.raises(RuntimeError, match="Index put requires the source and destination"):
            target[mask] = values[mask]
        # C51's projection: a tensor made like the outputs, a value promoted to float32.
        projected = torch.zeros_like(values)
        with pytest.raises(RuntimeError, match="must have the same scalar type"):
            projected.index_add_(0, torch.tensor([0, 1]), values[:2].float() * 0.5)


WGAN = dedent("""
    import torch


    def train(G, D, loader, n_critic, epochs):
        G, D = G.cuda(), D.cuda()
        opt_d = torch.optim.RMSprop(D.parameters(), lr=5e-5)
        opt_g = torch.optim.RMSprop(G.parameters(), lr=5e-5)
        for epoch in range(epochs):
            batches = iter(loader)
            for _ in range(len(loader) // n_critic):
                for _ in range(n_critic):
                    real = next(batches).cuda()
                    opt_d.zero_grad()
                    z = torch.randn(real.size(0), 100, device="cuda")
                    loss_d = D(G(z).detach()).mean() - D(real).mean()
                    loss_d.backward()
                    opt_d.step()
                opt_g.zero_grad()
                z = torch.randn(real.size(0), 100, device="cuda")
                loss_g = -D(G(z)).mean()
                loss_g.backward()
                opt_g.step()
    """)


def test_a_step_in_an_inner_loop_is_judged_on_its_own_amp_not_a_siblings() -> None:
    # WGAN: the critic steps n_critic times in an inner loop of the loop that
    # steps the generator. Once the generator's step had autocast, the critic's
    # was taken for mixed precision too: `fix` wrote one of the two and said
    # nothing was left.
    assert codes_of(WGAN) == ["AMP001", "AMP001"]
    rewritten = fixed(WGAN)
    assert rewritten.count("with torch.autocast(") == 2
    assert "scaler.scale(loss_d).backward()" in rewritten
    assert "scaler.scale(loss_g).backward()" in rewritten
    assert codes_of(rewritten) == []
    # The generator alone in AMP: the critic is still an FP32 step.
    generator_only = rewritten.replace(
        'with torch.autocast("cuda", dtype=torch.float16):\n'
        "                    loss_d = D(G(z).detach()).mean() - D(real).mean()\n"
        "                scaler.scale(loss_d).backward()\n"
        "                scaler.step(opt_d)\n"
        "                scaler.update()",
        "loss_d = D(G(z).detach()).mean() - D(real).mean()\n"
        "                loss_d.backward()\n"
        "                opt_d.step()",
    )
    assert generator_only.count("with torch.autocast(") == 1
    lines = generator_only.splitlines()
    [finding] = findings_of(generator_only)
    assert finding.code == "AMP001" and lines[finding.span.line - 1].strip() == "loss_d.backward()"
    # The critic's loop under the outer loop's autocast: mixed precision already.
    wrapped = WGAN.replace(
        "            for _ in range(n_critic):\n",
        '            with torch.autocast("cuda", dtype=torch.bfloat16):\n'
        "              for _ in range(n_critic):\n",
    )
    lines = wrapped.splitlines()
    assert [lines[d.span.line - 1].strip() for d in findings_of(wrapped) if d.code == "AMP001"] == [
        "loss_g.backward()"
    ]


SAC_SCRIPT = dedent("""
    import torch
    import torch.nn.functional as F

    if __name__ == "__main__":
        actor, critic = torch.nn.Linear(4, 2).cuda(), torch.nn.Linear(6, 1).cuda()
        actor_optimizer = torch.optim.Adam(actor.parameters())
        critic_optimizer = torch.optim.Adam(critic.parameters())
        for step in range(1000):
            obs = torch.randn(32, 4, device="cuda")
            value = critic(torch.cat([obs, actor(obs).detach()], 1))
            critic_loss = F.mse_loss(value, torch.zeros_like(value))
            critic_optimizer.zero_grad()
            critic_loss.backward()
            critic_optimizer.step()
            if step % 2 == 0:
                for _ in range(2):
                    actor_loss = -critic(torch.cat([obs, actor(obs)], 1)).mean()
                    actor_optimizer.zero_grad()
                    actor_loss.backward()
                    actor_optimizer.step()
    """)


def test_the_steps_of_one_loop_share_the_scaler_made_for_the_first() -> None:
    # cleanrl's SAC: the steps are fixed in two rounds; the second finds the
    # scaler the first made before the loop, in the script's `__main__` block,
    # and steps through it rather than making another beside it.
    rewritten = fixed(SAC_SCRIPT)
    assert rewritten.count("GradScaler(") == 1
    assert "scaler.scale(critic_loss).backward()" in rewritten
    assert "scaler.scale(actor_loss).backward()" in rewritten
    assert codes_of(rewritten) == []


SUMMED_LOSSES = dedent("""
    import torch
    import torch.nn.functional as F


    def train(D, loader, optimizer):
        D = D.cuda()
        for real, fake in loader:
            real, fake = real.cuda(), fake.cuda()
            real_d = D(real)
            fake_d = D(fake)
            loss_real = F.binary_cross_entropy_with_logits(real_d, torch.ones_like(real_d))
            loss_fake = F.binary_cross_entropy_with_logits(fake_d, torch.zeros_like(fake_d))
            optimizer.zero_grad()
            (loss_real + loss_fake).backward()
            optimizer.step()
    """)


def test_a_backward_of_a_sum_of_losses_has_each_losss_forward_pass_in_autocast() -> None:
    # GAIL's discriminator: the region was traced from the loss bound last, so
    # `real_d = D(real)` ran in float32 beside `fake_d` in float16.
    rewritten = fixed(SUMMED_LOSSES)
    assert (
        '        with torch.autocast("cuda", dtype=torch.float16):\n'
        "            real_d = D(real)\n"
        "            fake_d = D(fake)\n"
    ) in rewritten
    assert "scaler.scale(loss_real + loss_fake).backward()" in rewritten


KFAC_STATISTICS = dedent("""
    import torch


    class Agent:
        def __init__(self, net, lr, fisher_every):
            self.net = net.cuda()
            self.optimizer = torch.optim.SGD(net.parameters(), lr)
            self.fisher_every = fisher_every
            self.steps = 0

        def update(self, x, y):
            out = self.net(x)
            loss = (out - y).pow(2).mean()
            if self.steps % self.fisher_every == 0:
                fisher_loss = -out.mean()
                fisher_loss.backward(retain_graph=True)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            self.steps += 1
    """)


def test_a_backward_whose_gradients_are_cleared_unused_is_reported_not_rewritten() -> None:
    # ACKTR: the first backward feeds K-FAC's hooks, then zero_grad clears its
    # gradients before the step's own. It was dropped without a word (its
    # region, in the `if`, ran no model); scaled, K-FAC would read scaled
    # statistics.
    (message,) = _messages(KFAC_STATISTICS)
    assert "`fisher_loss.backward(retain_graph=True)` backpropagates through the forward" in message
    assert fixed(KFAC_STATISTICS) == KFAC_STATISTICS
    # A GAN's discriminator steps on its retained backward before the clear:
    # those gradients are used, and this is not the reason given.
    gan = dedent("""
        import torch
        import torch.nn.functional as F


        def train(G, D, loader, opt_g, opt_d):
            G, D = G.cuda(), D.cuda()
            for real, z in loader:
                fake = G(z.cuda())
                d_loss = F.softplus(-D(real.cuda())).mean() + F.softplus(D(fake)).mean()
                g_loss = F.softplus(-D(fake)).mean()
                opt_d.zero_grad()
                d_loss.backward(retain_graph=True)
                opt_d.step()
                opt_g.zero_grad()
                g_loss.backward()
                opt_g.step()
        """)
    assert not any("backpropagates through the forward" in m for m in _messages(gan))


MAML = dedent("""
    import learn2learn as l2l
    import torch


    def fast_adapt(batch, learner, loss, steps):
        data, labels = batch
        for _ in range(steps):
            learner.adapt(loss(learner(data), labels))
        return loss(learner(data), labels)


    def meta_train(model, tasks, iterations, device):
        maml = l2l.algorithms.MAML(model.to(device), lr=0.5, first_order=False)
        optimizer = torch.optim.Adam(maml.parameters(), 1e-3)
        loss = torch.nn.CrossEntropyLoss()
        for iteration in range(iterations):
            optimizer.zero_grad()
            learner = maml.clone()
            error = fast_adapt(tasks.sample(), learner, loss, 1)
            error.backward()
            optimizer.step()
    """)


def test_a_meta_learning_inner_step_keeps_float16_from_rewriting_the_step() -> None:
    """learn2learn's `learner.adapt(loss)` runs torch.autograd.grad on the
    inner loss, in the library: like a gradient penalty, under a GradScaler
    its gradients are taken on an unscaled float16 loss (Lightning's
    examples/fabric/meta_learning/train_torch.py was rewritten so)."""
    (message,) = _messages(MAML)
    assert "`fast_adapt` takes gradients inside the forward pass (a gradient penalty, a " in (
        message
    )
    assert fixed(MAML) == MAML
    # The same loop without learn2learn: `adapt` is some other method.
    plain = MAML.replace("import learn2learn as l2l\n", "").replace(
        "l2l.algorithms.MAML(model.to(device), lr=0.5, first_order=False)", "model.to(device)"
    )
    assert "GradScaler" in fixed(plain)
    assert "dtype=torch.bfloat16" in fixed(MAML, Settings(dtype="bfloat16"))


def test_a_target_network_average_is_not_an_update_by_hand() -> None:
    # DQN / SAC / TD3: the target network follows the online one by a Polyak
    # average of weights, not of gradients; the online network's step is AMP.
    source = dedent("""
        import torch
        import torch.nn.functional as F


        def learn(q_network, target_network, optimizer, batches, tau, device):
            for obs, target in batches:
                loss = F.mse_loss(q_network(obs.to(device)), target.to(device))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                for t, p in zip(target_network.parameters(), q_network.parameters()):
                    t.data.copy_(tau * p.data + (1.0 - tau) * t.data)
        """)
    assert "scaler.step(optimizer)" in fixed(source)
    by_hand = source.replace("tau * p.data + (1.0 - tau) * t.data", "t.data - 0.1 * p.grad")
    assert fixed(by_hand) == by_hand


def test_cpu_float16_is_declined_for_recurrent_layers() -> None:
    source = dedent("""
        import torch
        import torch.nn as nn

        model = nn.LSTM(8, 16, batch_first=True).to(device)
        head = nn.Linear(16, 1).to(device)
        optimizer = torch.optim.Adam([*model.parameters(), *head.parameters()])
        for x, y in loader:
            out, _ = model(x.to(device))
            loss = nn.functional.mse_loss(head(out[:, -1]), y.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        """)
    cpu16 = Settings(device_type="cpu", dtype="float16")
    (message,) = _messages(source, cpu16)
    assert "`nn.LSTM` has no float16 kernel on most CPUs" in message
    assert fixed(source, cpu16) == source
    assert 'autocast("cpu", dtype=torch.bfloat16)' in fixed(
        source, Settings(device_type="cpu", dtype="bfloat16")
    )
    assert 'autocast("cuda", dtype=torch.float16)' in fixed(source)


@pytest.mark.parametrize(
    ("model_code", "words"),
    [
        (
            "scores = scores.masked_fill(mask == 0, -1e10)",
            "`masked_fill(..., -1e10)` cannot hold its value in float16",
        ),
        (
            "gram = torch.mm(f, f.t()) / f.numel()",
            "a Gram matrix sums products over whole feature maps and overflows float16",
        ),
    ],
)
def test_float16_obstacles_in_the_module_are_reported_and_bfloat16_still_rewrites(
    model_code: str, words: str
) -> None:
    source = dedent(f"""
        import torch


        def features(model, x, mask):
            f = scores = model(x)
            {model_code}
            return scores


        def train(model, loader, optimizer, device):
            for x, mask in loader:
                loss = features(model, x.to(device), mask).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        """)
    (message,) = _messages(source)
    assert words in message
    assert fixed(source) == source
    assert "torch.bfloat16" in fixed(source, Settings(dtype="bfloat16"))
    # A fill float16 can hold is no obstacle.
    if "masked_fill" in model_code:
        held = source.replace("-1e10", "-1e4")
        assert "GradScaler" in fixed(held)


def test_a_model_loaded_in_bfloat16_is_left_as_it_is() -> None:
    source = dedent("""
        import torch
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained("m", torch_dtype=torch.bfloat16).to("cuda")
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
        for batch in loader:
            loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        """)
    for settings in (Settings(), Settings(dtype="bfloat16")):
        (message,) = _messages(source, settings)
        assert message.startswith("training step not rewritten: the parameters are made")
        assert "`model = AutoModelForCausalLM.from_pretrained(" in message
        assert "runs in FP32" not in message
        assert fixed(source, settings) == source


def test_the_update_stays_under_the_condition_every_step_shares() -> None:
    # TD3: nothing steps before `learning_starts`, the actor every n-th step.
    # The update goes after the actor's `if`, inside the learning branch: after
    # the whole branch it would run on iterations with no step and raise.
    source = dedent("""
        import torch
        import torch.nn.functional as F


        def train(actor, critic, rb, args, device, q_optimizer, actor_optimizer):
            for global_step in range(args.total_timesteps):
                rb.add(actor(torch.zeros(3, device=device)))
                if global_step > args.learning_starts:
                    data = rb.sample(args.batch_size)
                    q_loss = F.mse_loss(critic(data.observations), data.rewards)
                    q_optimizer.zero_grad()
                    q_loss.backward()
                    q_optimizer.step()
                    if global_step % args.policy_frequency == 0:
                        actor_loss = -critic(data.observations, actor(data.observations)).mean()
                        actor_optimizer.zero_grad()
                        actor_loss.backward()
                        actor_optimizer.step()
        """)
    result = fixed(source)
    assert (
        "                scaler.step(actor_optimizer)\n" "            scaler.update()\n"
    ) in result
    assert result.count("scaler.update()") == 1
    # Both losses, each computed in its own suite, are under autocast.
    assert result.count("with torch.autocast(") == 2
    assert (
        '                with torch.autocast("cuda", dtype=torch.float16):\n'
        "                    actor_loss = "
    ) in result


DEVICE_SCRIPT = """
    import torch

    device = {device}
    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        loss = criterion(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    """


@pytest.mark.parametrize(
    "device, autocast, scaler",
    [
        # PyTorch's quickstart: a string, whichever accelerator or the CPU.
        (
            "torch.accelerator.current_accelerator().type if torch.accelerator.is_available() "
            'else "cpu"',
            'torch.autocast(device, dtype=torch.float16, enabled=device != "cpu")',
            'torch.amp.GradScaler(device, enabled=device != "cpu")',
        ),
        (
            'torch.device("mps" if torch.backends.mps.is_available() else "cpu")',
            'torch.autocast(device.type, dtype=torch.float16, enabled=device.type != "cpu")',
            'torch.amp.GradScaler(device.type, enabled=device.type != "cpu")',
        ),
        (  # an indexed string is no device type: torch.device reads it
            'f"xpu:{rank}" if torch.xpu.is_available() else "cpu"',
            "torch.autocast(torch.device(device).type, dtype=torch.float16, "
            'enabled=torch.device(device).type != "cpu")',
            "torch.amp.GradScaler(torch.device(device).type, "
            'enabled=torch.device(device).type != "cpu")',
        ),
        (  # only an accelerator, never the CPU: nothing to switch off
            "torch.accelerator.current_accelerator()",
            "torch.autocast(device.type, dtype=torch.float16)",
            "torch.amp.GradScaler(device.type)",
        ),
        # CUDA or the CPU: "cuda" says it, and CUDA autocast turns itself off.
        (
            'torch.device("cuda" if torch.cuda.is_available() else "cpu")',
            'torch.autocast("cuda", dtype=torch.float16)',
            'torch.amp.GradScaler("cuda")',
        ),
        # Nothing the module shows: the default.
        ("args.device", 'torch.autocast("cuda", dtype=torch.float16)', 'GradScaler("cuda")'),
    ],
)
def test_autocast_follows_the_device_the_script_proves(
    device: str, autocast: str, scaler: str
) -> None:
    result = fixed(dedent(DEVICE_SCRIPT.format(device=device)))
    flat = " ".join(result.split()).replace("( ", "(").replace(" )", ")")
    assert autocast in flat
    assert scaler in flat
    assert fixed(result) == result


def test_a_device_type_given_by_the_user_wins_over_the_script() -> None:
    source = dedent(DEVICE_SCRIPT.format(device='torch.device("mps")'))
    result = fixed(source, Settings(device_type="cpu", dtype="bfloat16"))
    assert 'torch.autocast("cpu", dtype=torch.bfloat16)' in result


def test_two_devices_or_a_cuda_call_prove_nothing() -> None:
    two = DEVICE_SCRIPT.format(device='"mps"').replace(
        "x, y = x.to(device), y.to(device)", 'x, y = x.to(device), y.to("xpu")'
    )
    assert 'torch.autocast("cuda"' in fixed(dedent(two))
    cuda_call = DEVICE_SCRIPT.format(device='"mps"').replace(
        "model = Net().to(device)", "model = Net().cuda()"
    )
    assert 'torch.autocast("cuda"' in fixed(dedent(cuda_call))


def test_a_scaler_for_the_scripts_device_comes_after_the_device() -> None:
    # PEFT's examples make the optimizer first, then pick the device.
    source = dedent("""
        import torch

        model = Net()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        device = torch.accelerator.current_accelerator()
        model = model.to(device)
        for x, y in loader:
            loss = criterion(model(x.to(device)), y.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        """)
    result = fixed(source)
    assert (
        "device = torch.accelerator.current_accelerator()\n"
        "scaler = torch.amp.GradScaler(device.type)\n"
    ) in result
    assert "torch.autocast(device.type, dtype=torch.float16)" in result


def test_a_device_the_scalers_scope_cannot_read_declines_where_cuda_never_runs() -> None:
    """The scaler lives in __init__; `device` is a local of train only.  A
    "cuda" scaler and autocast there would stay off on the script's MPS or
    CPU: a rewrite that claims mixed precision and runs none, so it is
    declined; a device that may be CUDA (torch.accelerator's) keeps "cuda"."""
    source = dedent('''
        """Mentioning GradScaler in a docstring uses none."""
        import torch


        class Trainer:
            def __init__(self, model):
                self.model = model
                self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

            def train(self, loader):
                device = torch.device("mps" if torch.backends.mps.is_available() else "cpu")
                self.model.to(device)
                for x, y in loader:
                    loss = criterion(self.model(x.to(device)), y.to(device))
                    self.optimizer.zero_grad()
                    loss.backward()
                    self.optimizer.step()
        ''')
    assert fixed(source) == source
    (message,) = _messages(source)
    assert (
        "the script trains on `device` (cpu or mps), which the scope the GradScaler must "
        'live in cannot read, and a "cuda" one would stay off: make it with `device.type` '
        "where `device` is known"
    ) in message
    accelerator = source.replace(
        'torch.device("mps" if torch.backends.mps.is_available() else "cpu")',
        "torch.accelerator.current_accelerator()",
    )
    result = fixed(accelerator)
    assert 'self.scaler = torch.amp.GradScaler("cuda")' in result
    assert 'with torch.autocast("cuda", dtype=torch.float16):' in result


def test_a_docstring_naming_gradscaler_does_not_hide_the_scripts_device() -> None:
    source = '"""Trains with a GradScaler, some day."""\n' + dedent(
        DEVICE_SCRIPT.format(
            device='torch.device("mps" if torch.backends.mps.is_available() else "cpu")'
        )
    )
    assert 'torch.amp.GradScaler(device.type, enabled=device.type != "cpu")' in fixed(source)


ADALORA_SCRIPT = """
    import torch

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step, batch in enumerate(loader):
        batch = {k: v.to("cuda") for k, v in batch.items()}
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        lr_scheduler.step()
        model.base_model.update_and_allocate(global_step)
        optimizer.zero_grad()
        global_step += 1
    """


def test_adalora_reading_gradients_after_the_step_gets_no_scaler() -> None:
    source = dedent(ADALORA_SCRIPT)
    (message,) = _messages(source)
    assert "`model.base_model.update_and_allocate(...)` (AdaLoRA) reads the gradients" in message
    assert fixed(source) == source
    # bfloat16 has no scaler and no skipped steps: rewritten.
    assert "with torch.autocast(" in fixed(source, Settings(dtype="bfloat16"))


def test_every_step_of_a_module_follows_the_scripts_device() -> None:
    # Two trainings in one notebook: the first rewrite's GradScaler must not
    # send the second back to "cuda".
    one = DEVICE_SCRIPT.format(device="torch.accelerator.current_accelerator()")
    source = dedent(one + one.split("model = Net().to(device)\n", 1)[1])
    result = fixed(source)
    assert result.count("torch.autocast(device.type, dtype=torch.float16)") == 2
    assert result.count("torch.amp.GradScaler(device.type)") == 2


def test_a_reused_scaler_keeps_its_device_and_autocast_agrees() -> None:
    source = dedent(DEVICE_SCRIPT.format(device="torch.accelerator.current_accelerator()"))
    source = source.replace(
        "for x, y in loader:", "scaler = torch.cuda.amp.GradScaler()\nfor x, y in loader:"
    )
    result = fixed(source)
    assert 'with torch.autocast("cuda", dtype=torch.float16):' in result
    assert result.count("GradScaler(") == 1


def test_a_loop_that_never_clears_its_gradients_gets_no_scaler() -> None:
    # peft's multitask notebook: no zero_grad anywhere, gradients add up.
    source = dedent("""
        import torch

        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        for batch in loader:
            loss = model(**send_to_device(batch)).loss
            loss.backward()
            optimizer.step()
            scheduler.step()
        """)
    (message,) = _messages(source)
    assert "the loop never clears its gradients (no `zero_grad()`)" in message
    assert fixed(source) == source
    assert "with torch.autocast(" in fixed(source, Settings(dtype="bfloat16"))
    for clearing in ("optimizer.zero_grad()", "model.zero_grad(set_to_none=True)"):
        cleared = source.replace(
            "    optimizer.step()\n", f"    optimizer.step()\n    {clearing}\n"
        )
        assert "scaler.step(optimizer)" in fixed(cleared)


# -- a step whose loss comes from the caller: `self.optimize(loss)` ----------------
OPTIMIZE = """\
import torch


class Trainer:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer

    def optimize(self, loss):
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
"""


def test_autocast_goes_where_each_caller_in_the_class_computes_the_loss() -> None:
    source = OPTIMIZE + (
        "\n    def step(self, x, y):\n"
        "        loss = torch.nn.functional.mse_loss(self.model(x), y)\n"
        "        self.optimize(loss)\n"
    )
    rewritten = fixed(source)
    assert (
        '        with torch.autocast("cuda", dtype=torch.float16):\n'
        "            loss = torch.nn.functional.mse_loss(self.model(x), y)\n"
        "        self.optimize(loss)\n"
    ) in rewritten
    assert "        self.scaler.scale(loss).backward()\n" in rewritten


@pytest.mark.parametrize(
    ("callers", "reason"),
    [
        ("", "the forward pass that computes it runs in the code that calls `optimize`"),
        (
            "\n    def fit(self, losses):\n        for loss in losses:\n            self.optimize(loss)\n",
            "`self.optimize(...)` in `fit`: ",
        ),
        (
            "\n    def hooks(self):\n        return [self.optimize]\n",
            "`self.optimize` is used other than called",
        ),
        (
            "\n    def step(self, x, y):\n"
            "        with torch.autocast('cuda'):\n"
            "            loss = (self.model(x) - y).pow(2).mean()\n"
            "        self.optimize(loss)\n"
            "\n    def plain(self, x, y):\n"
            "        self.optimize((self.model(x) - y).pow(2).mean())\n",
            "runs under autocast already",
        ),
    ],
    ids=["no caller", "loss not computed there", "passed on", "one caller under autocast"],
)
def test_a_step_whose_callers_cannot_all_take_autocast_is_not_rewritten(callers, reason) -> None:
    source = OPTIMIZE + callers
    (finding,) = [d.message for d in lint_text(source, ALL, Settings()) if d.code == "AMP001"]
    assert "not rewritten" in finding and reason in finding
    assert fixed(source) == source


def test_a_step_method_whose_every_caller_runs_autocast_is_their_amp_step() -> None:
    # No FP32 step: the callers' autocast is its forward pass.  In float16
    # (CUDA's default) it lacks a scaler, AMP106's finding, fixed on the instance.
    caller = (
        "\n    def step(self, x, y):\n"
        "        with torch.autocast('cuda'{dtype}):\n"
        "            loss = (self.model(x) - y).pow(2).mean()\n"
        "        self.optimize(loss)\n"
    )
    assert codes_of(OPTIMIZE + caller.format(dtype=", dtype=torch.bfloat16")) == []
    float16 = OPTIMIZE + caller.format(dtype="")
    assert codes_of(float16) == ["AMP106"]
    assert "        self.scaler.scale(loss).backward()\n" in fixed(float16)


def test_words_in_comments_and_strings_decide_nothing() -> None:
    """A step is skipped or declined for what its code does, never for what a
    comment, a docstring or a log message says."""
    words = dedent('''
        """Features from n-grams; the Gram matrix is plotted elsewhere."""
        import torch


        def train(model, loader, optimizer):
            print("amp: off (autocast and GradScaler come later)")
            for x, y in loader:
                x, y = x.cuda(), y.cuda()
                # scores.masked_fill(mask, -1e10) overflows float16
                loss = torch.nn.functional.mse_loss(model(x), y)
                # scaler.scale(loss).backward()
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
        ''')
    result = fixed(words)
    assert "torch.autocast(" in result and ".scale(loss).backward()" in result
    code = words.replace("# scaler.scale(loss).backward()", "scores = x.masked_fill(x > 0, -1e10)")
    assert "masked_fill" in _messages(code, Settings())[0]  # the same words as code decline


def test_code_only_keeps_positions_and_blanks_comments_and_strings() -> None:
    from amplint.analysis.code_text import code_only

    text = 'x = "#autocast"  # scaler.scale(loss)\ny = f"{a}" + b"\\"" + """\nscaler\n"""\n'
    blanked = code_only(text)
    assert len(blanked) == len(text) and blanked.count("\n") == text.count("\n")
    assert "autocast" not in blanked and "scaler" not in blanked
    assert blanked.split() == ["x", "=", "y", "=", "+", "+"]


@pytest.mark.parametrize(
    "product, declined",
    [
        ("torch.mm(f, f.t())", True),  # style transfer, the word "gram" nowhere in the code
        ("torch.bmm(f, f.transpose(1, 2))", True),
        ("f @ f.mT", True),
        ("torch.mm(z, z.t())", False),  # SimCLR's similarities: no reshaped feature map
    ],
)
def test_a_gram_matrix_is_found_in_the_code_that_computes_it(product: str, declined: bool) -> None:
    source = dedent(f"""
        import torch


        def train(vgg, target, style, optimizer, steps):
            for step in range(steps):
                x = vgg(target.cuda())
                _, c, h, w = x.size()
                f = x.view(c, h * w)
                z = torch.nn.functional.normalize(vgg(style.cuda()).flatten(1), dim=1)
                loss = ({product}).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        """)
    (message,) = _messages(source)
    assert ("Gram matrix" in message) is declined
    assert ("`f` times its own transpose" in message) is declined


MICRO_BATCHES = dedent("""
    import torch


    def train(model, loader, optimizer):
        for x, y in loader:
            x, y = x.cuda(), y.cuda()
            for xs, ys in zip(x.chunk(4), y.chunk(4)):
                loss = torch.nn.functional.mse_loss(model(xs), ys) / 4
                loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
    """)


def test_micro_batches_in_an_inner_loop_are_one_step() -> None:
    """The backward in an inner loop over micro-batches, the step after it."""
    assert fixed(MICRO_BATCHES) == dedent("""
        import torch


        def train(model, loader, optimizer):
            scaler = torch.amp.GradScaler("cuda")
            for x, y in loader:
                x, y = x.cuda(), y.cuda()
                for xs, ys in zip(x.chunk(4), y.chunk(4)):
                    with torch.autocast("cuda", dtype=torch.float16):
                        loss = torch.nn.functional.mse_loss(model(xs), ys) / 4
                    scaler.scale(loss).backward()
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
        """)


def test_a_clip_inside_the_micro_batch_loop_is_declined() -> None:
    source = MICRO_BATCHES.replace(
        "            loss.backward()\n",
        "            loss.backward()\n"
        "            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n",
    )
    (message,) = _messages(source)
    assert message.endswith(
        "not rewritten: `torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)` edits the "
        "gradients inside the micro-batch loop, where a GradScaler leaves them scaled and no "
        "unscale_ can go before it: clip once, after the loop"
    )
    assert fixed(source) == source


def test_a_backward_in_a_helper_method_is_a_step_declined_with_why() -> None:
    """pix2pix and CycleGAN: `optimize_parameters` calls `backward_G`."""
    source = dedent("""
        import torch


        class Pix2Pix:
            def forward(self):
                self.fake = self.net(self.real.cuda())

            def backward_G(self):
                self.loss_G = torch.nn.functional.l1_loss(self.fake, self.target)
                self.loss_G.backward()

            def optimize_parameters(self):
                self.forward()
                self.optimizer_G.zero_grad()
                self.backward_G()
                self.optimizer_G.step()
        """)
    (finding,) = [d for d in findings_of(source) if d.code == "AMP001"]
    assert finding.span.line == 15  # on the call of the helper
    assert "the backward runs in `self.backward_G()`, a helper this step calls" in finding.message
    assert fixed(source) == source


def test_numpy_in_the_forward_pass_declines_bfloat16_only() -> None:
    source = dedent("""
        import torch


        def train(model, loader, optimizer, seen):
            for x, y in loader:
                output = model(x.cuda())
                seen.append(output.detach().cpu().numpy())
                loss = torch.nn.functional.cross_entropy(output, y.cuda())
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
        """)
    (message,) = _messages(source, Settings(dtype="bfloat16"))
    assert "`output.detach().cpu().numpy()` hands NumPy a tensor the forward pass computes" in (
        message
    )
    assert "torch.autocast(" in fixed(source)  # float16: NumPy holds it


RETURNS_ATTENTION = dedent("""
    import torch
    import torch.nn.functional as F


    def train(model, loader, optimizer):
        attention = None
        for x, y in loader:
            logits, attention = model(x.cuda())
            loss = F.cross_entropy(logits, y.cuda())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        return attention


    def main(model, loader, plot):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        attention = train(model, loader, optimizer)
        plot(attention[0].detach().cpu().numpy())
    """)


def test_a_forward_value_returned_to_numpy_declines_bfloat16_only() -> None:
    """A tutorial returns its attention maps from the training function and
    plots them after training: under bfloat16 autocast they are bfloat16,
    which `.numpy()` refuses (issue 60).  float16 NumPy holds."""
    (message,) = _messages(RETURNS_ATTENTION, Settings(dtype="bfloat16"))
    assert message.endswith(
        "`attention`, which the forward pass computes, leaves `train` (it returns it) as "
        "bfloat16 under autocast, and the module hands tensors to NumPy "
        "(`attention[0].detach().cpu().numpy()`), which cannot hold bfloat16: return "
        "`attention.float()`, or use `--dtype float16`"
    )
    assert "torch.autocast(" in fixed(RETURNS_ATTENTION)
    # Returning the loss (float32 under autocast), or no NumPy at all: no decline.
    for harmless in (
        RETURNS_ATTENTION.replace("return attention", "return loss.item()"),
        RETURNS_ATTENTION.replace(".detach().cpu().numpy()", ""),
    ):
        assert "torch.autocast(" in fixed(harmless, Settings(dtype="bfloat16"))


FORWARD_BEFORE_ARMS = dedent("""
    import torch
    import torch.nn.functional as F


    def train(model, loader, optimizer, accumulation, seen):
        for i, (x, y) in enumerate(loader):
            outputs = model(x.cuda())
            seen.append(outputs.detach().cpu().numpy())
            if accumulation > 1:
                loss = F.cross_entropy(outputs, y.cuda()) / accumulation
                loss.backward()
                if (i + 1) % accumulation == 0:
                    optimizer.step()
                    optimizer.zero_grad()
            else:
                loss = F.cross_entropy(outputs, y.cuda())
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
    """)


def test_the_model_call_above_the_arms_that_compute_the_loss_gets_autocast_too() -> None:
    """Swin-Transformer's step: one model call, then a loss in each arm of
    `if accumulation > 1:`.  Autocast goes around the model call (where the
    time goes) and around each arm's loss; not around the arm alone."""
    rewritten = fixed(FORWARD_BEFORE_ARMS)
    autocast = '    with torch.autocast("cuda", dtype=torch.float16):\n'
    assert autocast + "            outputs = model(x.cuda())\n" in rewritten
    assert (
        "    "
        + autocast
        + "                loss = F.cross_entropy(outputs, y.cuda()) / accumulation\n"
    ) in rewritten
    assert "    " + autocast + "                loss = F.cross_entropy(outputs, y.cuda())\n" in (
        rewritten
    )
    assert rewritten.count("scaler.update()") == 2


def test_numpy_after_the_forward_pass_declines_bfloat16_too() -> None:
    (message,) = _messages(FORWARD_BEFORE_ARMS, Settings(dtype="bfloat16"))
    assert "`outputs.detach().cpu().numpy()` hands NumPy a tensor the forward pass" in message


def test_an_attribute_set_above_the_arm_that_holds_the_step_stays_out_of_autocast() -> None:
    """cleanrl's Rainbow anneals `rb.beta = min(...)` at the top of each
    iteration, above the `if` that holds the whole step: that sets an
    attribute the step reads, and runs no model; no autocast goes there."""
    source = dedent("""
        import torch


        def train(q_network, rb, optimizer, steps, beta):
            for global_step in range(steps):
                rb.beta = min(1.0, beta + global_step / steps)
                if global_step > 10:
                    data = rb.sample(32)
                    loss = q_network(data.observations).mean()
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
        """)
    rewritten = fixed(source)
    assert "        rb.beta = min(1.0, beta + global_step / steps)\n        if" in rewritten
    assert rewritten.count("torch.autocast(") == 1


def test_numpy_of_the_loss_for_a_log_does_not_decline_bfloat16() -> None:
    """MorvanZhou's tutorials log `loss.data.numpy()`: autocast computes the
    loss in float32, so that works; `prediction.data.numpy()` would not."""
    source = dedent("""
        import torch


        def train(net, x, y, optimizer, history):
            for t in range(100):
                prediction = net(x)
                loss = torch.nn.functional.mse_loss(prediction, y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                history.append(loss.data.numpy())
        """)
    assert "torch.autocast(" in fixed(source, Settings(dtype="bfloat16", device_type="cpu"))
    plotted = source.replace("loss.data.numpy()", "prediction.data.numpy()")
    (message,) = _messages(plotted, Settings(dtype="bfloat16"))
    assert "`prediction.data.numpy()` hands NumPy a tensor the forward pass computes" in message


MPS_OR_CPU = 'torch.device("mps" if torch.backends.mps.is_available() else "cpu")'


def test_a_cuda_scaler_left_on_a_script_that_never_trains_on_cuda_is_not_reused() -> None:
    """`scaler = torch.amp.GradScaler()` is CUDA's: on the script's MPS or CPU it
    turns itself off, and autocast written to agree with it ("cuda") would too:
    a rewrite that claims mixed precision and runs none.  Declined, naming the
    scaler to write; once it is written, it is reused and autocast follows it."""
    script = dedent(DEVICE_SCRIPT.format(device=MPS_OR_CPU)).replace(
        "lr=0.1)\n", "lr=0.1)\nscaler = torch.amp.GradScaler()\n", 1
    )
    assert fixed(script) == script
    (message,) = _messages(script)
    assert (
        "the script trains on `device` (cpu or mps), and its GradScaler `scaler` is CUDA's, "
        "which stays off there: make it with `torch.amp.GradScaler(device.type)`"
    ) in message
    followed = script.replace("torch.amp.GradScaler()", "torch.amp.GradScaler(device.type)")
    after = fixed(followed)
    assert after.count("GradScaler(") == 1  # the user's, reused: no second scaler
    assert (
        'with torch.autocast(device.type, dtype=torch.float16, enabled=device.type != "cpu"):'
        in after
    )
    assert "scaler.scale(loss).backward()" in after and fixed(after) == after


def test_a_cuda_scaler_on_a_script_that_may_train_on_cuda_is_still_reused() -> None:
    script = dedent(DEVICE_SCRIPT.format(device="torch.accelerator.current_accelerator()"))
    script = script.replace("lr=0.1)\n", "lr=0.1)\nscaler = torch.amp.GradScaler()\n", 1)
    after = fixed(script)
    assert after.count("GradScaler(") == 1
    assert 'with torch.autocast("cuda", dtype=torch.float16):' in after


def test_two_networks_trained_side_by_side_get_one_region_and_one_scaler() -> None:
    """MorvanZhou's dropout tutorial: both forward passes and both losses,
    then both backwards and both steps.  The second loss is bound above the
    first backward; it was declined with "cannot find where `loss_drop` is
    computed", an internal limit (issue 60).  One autocast block covers both
    forward passes, as PyTorch's recipe for several models does."""
    source = dedent("""
        import torch


        def train(net_a, net_b, opt_a, opt_b, loss_func, x, y):
            for t in range(100):
                pred_a = net_a(x.cuda())
                pred_b = net_b(x.cuda())
                loss_a = loss_func(pred_a, y.cuda())
                loss_b = loss_func(pred_b, y.cuda())
                opt_a.zero_grad()
                opt_b.zero_grad()
                loss_a.backward()
                loss_b.backward()
                opt_a.step()
                opt_b.step()
        """)
    result = fixed(source)
    assert (
        '        with torch.autocast("cuda", dtype=torch.float16):\n'
        "            pred_a = net_a(x.cuda())\n"
        "            pred_b = net_b(x.cuda())\n"
        "            loss_a = loss_func(pred_a, y.cuda())\n"
        "            loss_b = loss_func(pred_b, y.cuda())\n"
    ) in result
    assert "scaler.scale(loss_a).backward()\n        scaler.scale(loss_b).backward()" in result
    assert result.count("scaler.update()") == 1
    assert fixed(result) == result


def test_a_decline_points_at_the_backward_it_is_about() -> None:
    # One step trains two networks; the generator's loss is the problem, so
    # the finding is on `loss_G.backward()`, not on the critic's backward.
    text = dedent("""
        import torch
        import torch.nn.functional as F


        def train(D, G, loader, opt_D, opt_G):
            for x in loader:
                loss_D = F.mse_loss(D(x), x)
                opt_D.zero_grad()
                loss_D.backward()
                opt_D.step()
                opt_G.zero_grad()
                loss_G.backward()
                opt_G.step()
                loss_G = F.mse_loss(D(G(x)), x)
        """)
    (finding,) = [d for d in lint_text(text, ALL, Settings()) if d.code == "AMP001"]
    assert text.splitlines()[finding.span.line - 1].strip() == "loss_G.backward()"
    assert "`loss_G` is computed below its backward" in finding.message
