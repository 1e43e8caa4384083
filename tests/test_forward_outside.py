"""AMP124: an autocast block that computes only the loss, from a model call
made above it in full precision (issue 60: the program gets no speedup and no
rule said so)."""

from __future__ import annotations

import pytest

from amplint.config import Settings
from tests.helpers import codes_of, dedent, findings_of, fixed

STEP = """
import torch
import torch.nn.functional as F


def train(model, loader, optimizer, scaler):
    for inputs, targets in loader:
{above}
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = {loss}
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
"""


def _step(above: str, loss: str = "F.cross_entropy(outputs, targets)") -> str:
    return dedent(STEP).format(above=above, loss=loss)


def test_a_model_call_above_a_loss_only_block_is_moved_into_it_and_runs() -> None:
    source = _step("        outputs = model(inputs)")
    (finding,) = [d for d in findings_of(source) if d.code == "AMP124"]
    assert finding.message.startswith(
        "`outputs = model(inputs)` runs the model before the autocast block, in full precision"
    )
    assert fixed(source) == source  # unsafe: only with --unsafe-fixes
    result = fixed(source, unsafe=True)
    assert (
        '        with torch.autocast("cpu", dtype=torch.bfloat16):\n'
        "            outputs = model(inputs)\n"
        "            loss = F.cross_entropy(outputs, targets)\n"
    ) in result
    assert "AMP124" not in codes_of(result) and fixed(result, unsafe=True) == result
    torch = pytest.importorskip("torch")
    namespace: dict = {}
    exec(result, namespace)
    model = torch.nn.Linear(4, 3)
    dtypes = []
    model.register_forward_hook(lambda module, args, output: dtypes.append(output.dtype))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    namespace["train"](model, [(torch.randn(8, 4), torch.randint(0, 3, (8,)))], optimizer, scaler)
    assert dtypes == [torch.bfloat16]  # the model ran under autocast


@pytest.mark.parametrize(
    "above, loss",
    [
        ("        pass", "F.cross_entropy(model(inputs), targets)"),  # the block runs the model
        ("        noise = torch.randn(8, 4)", "F.cross_entropy(model(inputs + noise), targets)"),
        (
            "        with torch.no_grad():\n            soft = teacher(inputs)",
            "F.kl_div(model(inputs).log_softmax(-1), soft, reduction='batchmean')",
        ),
        ("        inputs = inputs.to('cpu')", "F.cross_entropy(model(inputs), targets)"),
    ],
)
def test_a_block_that_runs_the_model_or_reads_data_is_left_alone(above: str, loss: str) -> None:
    assert "AMP124" not in codes_of(_step(above, loss))


def test_statements_between_are_said_and_nothing_moves() -> None:
    source = _step("        outputs = model(inputs)\n        optimizer.zero_grad()")
    (finding,) = [d for d in findings_of(source) if d.code == "AMP124"]
    assert finding.fix is None
    assert finding.message.endswith("(not fixed: other statements stand between them)")


def test_a_gan_generator_run_above_the_critic_s_loss_block_is_found() -> None:
    source = dedent("""
        import torch


        def train(generator, critic, batches, opt_d, scaler):
            for real, z in batches:
                fake = generator(z)
                with torch.autocast("cuda"):
                    loss_d = critic(fake.detach()).mean() - critic(real).mean()
                scaler.scale(loss_d).backward()
                scaler.step(opt_d)
                scaler.update()
        """)
    (finding,) = [d for d in findings_of(source, Settings()) if d.code == "AMP124"]
    assert finding.message.startswith("`fake = generator(z)` runs the model before")
