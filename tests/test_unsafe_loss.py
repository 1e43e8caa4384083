"""AMP114: losses that CUDA autocast refuses, found only where autocast may be CUDA."""

from __future__ import annotations

import pytest

from tests.helpers import codes_of, dedent, fixed

TEMPLATE = """
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn import BCELoss
{setup}
def step(model, x, y, device_type):
    with {region}:
        probs = torch.sigmoid(model(x))
        loss = {loss}
    return loss
"""


def _source(loss: str, region: str = 'torch.autocast("cuda")', setup: str = "") -> str:
    return dedent(TEMPLATE.format(loss=loss, region=region, setup=setup))


@pytest.mark.parametrize(
    ("loss", "setup"),
    [
        ("F.binary_cross_entropy(probs, y)", ""),
        ("torch.binary_cross_entropy(probs, y)", ""),
        ("nn.BCELoss()(probs, y)", ""),
        ("criterion(probs, y)", "criterion = BCELoss(reduction='sum')"),
        (
            "loss_fn.bce(probs, y)",
            "class Holder:\n    pass\nloss_fn = Holder()\nloss_fn.bce = nn.BCELoss()",
        ),
    ],
)
def test_unsafe_losses_in_a_cuda_region_are_reported(loss: str, setup: str) -> None:
    source = _source(loss, setup=setup)
    assert codes_of(source) == ["AMP114"]
    assert fixed(source) == source  # reported only


@pytest.mark.parametrize(
    "region",
    [
        "torch.cuda.amp.autocast()",
        'torch.amp.autocast(device_type="cuda", dtype=torch.bfloat16)',
        "torch.autocast(device_type)",  # chosen at run time: may be CUDA
        'torch.autocast("cuda:0")',
    ],
)
def test_every_region_that_may_be_cuda_counts(region: str) -> None:
    codes = codes_of(_source("F.binary_cross_entropy(probs, y)", region))
    assert "AMP114" in codes


@pytest.mark.parametrize(
    ("loss", "region", "setup"),
    [
        ("F.binary_cross_entropy(probs, y)", 'torch.autocast("cpu")', ""),
        ("F.binary_cross_entropy(probs, y)", "torch.cpu.amp.autocast()", ""),
        ("F.binary_cross_entropy(probs, y)", 'torch.autocast("cuda", enabled=False)', ""),
        ("F.binary_cross_entropy_with_logits(model(x), y)", 'torch.autocast("cuda")', ""),
        ("nn.BCEWithLogitsLoss()(model(x), y)", 'torch.autocast("cuda")', ""),
        # bound to BCELoss in one place and something else in another: a guess
        (
            "criterion(probs, y)",
            'torch.autocast("cuda")',
            "criterion = BCELoss()\ncriterion = nn.MSELoss()",
        ),
        # a parameter: whatever the caller passes
        ("y(probs, x)", 'torch.autocast("cuda")', ""),
        # the loss runs in an FP32 region nested in the autocast one
        (
            'F.mse_loss(probs, y)\n        with torch.autocast("cuda", enabled=False):\n'
            "            extra = F.binary_cross_entropy(probs.float(), y)",
            'torch.autocast("cuda")',
            "",
        ),
        # defined in the region, called elsewhere
        ("lambda p, t: F.binary_cross_entropy(p, t)", 'torch.autocast("cuda")', ""),
    ],
)
def test_silent(loss: str, region: str, setup: str) -> None:
    assert "AMP114" not in codes_of(_source(loss, region, setup))
