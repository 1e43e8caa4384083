"""AMP106: float16 autocast around a training step that has no GradScaler."""

from __future__ import annotations

import pytest

from tests.helpers import codes_of, dedent, findings_of, fixed

TEMPLATE = """
import torch
def train(model, loader, optimizer, criterion):
    for x, y in loader:
        with {region}:
            loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
"""


def _source(region: str) -> str:
    return dedent(TEMPLATE.format(region=region))


@pytest.mark.parametrize(
    "region",
    [
        'torch.autocast("cuda")',  # CUDA's default dtype is float16
        'torch.autocast(device_type="cuda", dtype=torch.float16)',
        'torch.amp.autocast("cuda:0", dtype=torch.half)',
        "torch.cuda.amp.autocast()",
    ],
)
def test_float16_regions_get_a_scaler(region: str) -> None:
    source = _source(region)
    assert "AMP106" in codes_of(source)
    result = fixed(source)
    assert '    scaler = torch.amp.GradScaler("cuda")\n    for x, y in loader:' in result
    assert "scaler.scale(loss).backward()" in result
    assert "scaler.step(optimizer)\n        scaler.update()" in result
    assert "autocast(" in result  # the region stays (AMP201/AMP116 may respell it)
    assert "AMP106" not in codes_of(result)


@pytest.mark.parametrize(
    "region",
    [
        'torch.autocast("cuda", dtype=torch.bfloat16)',
        'torch.autocast("cpu")',
        "torch.cpu.amp.autocast()",
        'torch.autocast("cuda", enabled=False)',
        "torch.autocast(device_type, dtype=torch.float16)",  # device chosen at run time
        'torch.autocast("cuda", dtype=amp_dtype)',  # dtype chosen at run time
    ],
)
def test_regions_that_need_no_scaler_or_may_not_are_silent(region: str) -> None:
    assert "AMP106" not in codes_of(_source(region))


def test_a_module_that_names_a_loss_scaler_is_left_alone() -> None:
    # timm-style: the scaler is a callable that scales and steps inside
    source = _source('torch.autocast("cuda")') + dedent("""
        def other(loss, optimizer, loss_scaler):
            loss_scaler(loss, optimizer)
        """)
    assert "AMP106" not in codes_of(source)


def test_a_backward_before_the_region_is_not_from_it() -> None:
    source = dedent("""
        import torch
        def train(model, loader, optimizer, criterion):
            for x, y in loader:
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                with torch.autocast("cuda"):
                    metrics = model(x)
        """)
    assert "AMP106" not in codes_of(source)


def test_a_method_step_keeps_its_scaler_on_the_instance() -> None:
    source = dedent("""
        import torch
        class Trainer:
            def __init__(self, model):
                self.model = model
                self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

            def train_step(self, x, y):
                with torch.autocast("cuda"):
                    loss = self.model(x).sum()
                loss.backward()
                self.optimizer.step()
        """)
    result = fixed(source)
    assert (
        'self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n        self.scaler = torch.amp.GradScaler("cuda")\n'
        in result
    )
    assert "self.scaler.scale(loss).backward()" in result
    assert fixed(result) == result


def test_under_fsdp_the_scaler_is_sharded() -> None:
    source = "from torch.distributed.fsdp import FullyShardedDataParallel\n" + _source(
        'torch.autocast("cuda")'
    ).replace(
        "for x, y in loader:", "model = FullyShardedDataParallel(model)\n    for x, y in loader:"
    )
    assert "AMP106" in codes_of(source)
    result = fixed(source)
    assert "from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler\n" in result
    flat = " ".join(result.split())
    assert 'ShardedGradScaler("cuda") if torch.distributed.is_initialized() else' in flat
    assert fixed(result) == result


WARMUP_THEN_SCALED = """
import torch

model = torch.nn.Linear(4, 1).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = [(torch.randn(8, 4), torch.randn(8, 1))]

for x, y in loader:
    with torch.autocast("cuda"):
        loss = torch.nn.functional.mse_loss(model(x.cuda()), y.cuda())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
{between}
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast("cuda"):
        loss = torch.nn.functional.mse_loss(model(x.cuda()), y.cuda())
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
"""


def test_a_scaler_made_after_the_loop_does_not_scale_it() -> None:
    """A name bound later does not exist earlier: the first phase backpropagates
    float16 unscaled, whatever the second phase does (issue 60)."""
    source = dedent(WARMUP_THEN_SCALED).format(between="")
    findings = [d for d in findings_of(source) if d.code == "AMP106"]
    assert [d.span.line for d in findings] == [10]
    result = fixed(source)
    assert "grad_scaler.scale(loss).backward()" in result
    assert "AMP106" not in codes_of(result) and fixed(result) == result


def test_a_scaler_made_after_the_loop_inside_its_function_does_not_scale_it() -> None:
    body = dedent(WARMUP_THEN_SCALED).format(between="").split("\n", 2)[2]
    source = "import torch\n\n\ndef main():\n" + "".join(
        f"    {line}\n" if line else "\n" for line in body.splitlines()
    )
    assert "AMP106" in codes_of(source)


def test_a_scaler_made_before_the_loop_may_scale_it_where_amplint_cannot_see() -> None:
    """A scaler named before the loop (or in it, or in another function) may
    be used by code amplint does not follow: still left alone."""
    source = dedent(WARMUP_THEN_SCALED).format(between="")
    scaler_first = source.replace(
        'scaler = torch.amp.GradScaler("cuda")\n', ""
    ).replace("loader = [", 'scaler = torch.amp.GradScaler("cuda")\nloader = [')
    assert "AMP106" not in codes_of(scaler_first)


def test_a_scaler_in_a_later_notebook_cell_does_not_scale_an_earlier_one(tmp_path) -> None:
    from tests.helpers import run_cli
    from tests.test_notebooks import code_cell, notebook_json

    source = dedent(WARMUP_THEN_SCALED).format(between="")
    first, second = source.split("scaler = torch.amp.GradScaler", 1)
    path = tmp_path / "phases.ipynb"
    cells = [code_cell(first), code_cell("scaler = torch.amp.GradScaler" + second)]
    path.write_text(notebook_json(cells))
    result = run_cli("check", "--no-cache", path)
    assert "AMP106" in result.stdout


STEP_HELPER = dedent("""
    import torch
    import torch.nn.functional as F


    def step(loss, optimizer):
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


    def main(model, loader):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in loader:
            with torch.autocast("cuda", dtype=torch.{dtype}):
                loss = F.cross_entropy(model(x), y)
            step(loss, optimizer)
    """)


def test_a_step_helper_called_under_autocast_is_the_callers_amp_step() -> None:
    # The helper's loss comes from callers that all run autocast: no FP32
    # step; in bfloat16 nothing is wrong, in float16 the scaler is missing.
    assert codes_of(STEP_HELPER.format(dtype="bfloat16")) == []
    # A `.step` attribute elsewhere (the scheduler's) is no other use of `step`.
    scheduled = STEP_HELPER.replace(
        "        step(loss, optimizer)\n", "        step(loss, optimizer)\n        scheduler.step()\n"
    )
    assert scheduled != STEP_HELPER and codes_of(scheduled.format(dtype="bfloat16")) == []
    float16 = STEP_HELPER.format(dtype="float16")
    assert codes_of(float16) == ["AMP106"]
    rewritten = fixed(float16)
    assert "def step(loss, optimizer, scaler):" in rewritten
    assert "    scaler.scale(loss).backward()\n    scaler.step(optimizer)\n" in rewritten
    assert "step(loss, optimizer, scaler)" in rewritten
    # Run on the CPU, where torch's GradScaler really scales: the optimizer
    # receives what the unscaled float16 step would have, to float16's precision.
    import torch

    runs = {}
    for name, code in (("original", float16), ("fixed", rewritten)):
        namespace: dict = {}
        exec(compile(code.replace('"cuda"', '"cpu"'), name, "exec"), namespace)
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 3)
        data = [(torch.randn(8, 4), torch.randint(0, 3, (8,))) for _ in range(3)]
        namespace["main"](model, data)
        runs[name] = model.weight.detach().clone()
    assert torch.allclose(runs["original"], runs["fixed"], atol=1e-2)
    # A helper also called without autocast stays an FP32 step, declined.
    mixed = float16 + "    step(F.mse_loss(model(x), y), optimizer)\n"
    assert codes_of(mixed) == ["AMP001"]
