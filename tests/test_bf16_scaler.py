"""AMP112: a GradScaler over bfloat16 autocast."""

from __future__ import annotations

import pytest

from tests.helpers import codes_of, dedent, fixed

TEMPLATE = """
import torch
def train(model, loader, optimizer, criterion, dtype):
    scaler = {scaler}
    for x, y in loader:
        with {region}:
            loss = criterion(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
"""


def _source(region: str, scaler: str = 'torch.amp.GradScaler("cuda")') -> str:
    return dedent(TEMPLATE.format(region=region, scaler=scaler))


@pytest.mark.parametrize(
    "region",
    [
        'torch.autocast("cuda", dtype=torch.bfloat16)',
        'torch.autocast(device_type="cpu")',  # CPU autocast defaults to bfloat16
        'torch.autocast("cpu:0")',  # torch takes the index and ignores it
        "torch.cpu.amp.autocast()",
        'torch.amp.autocast("xpu", dtype=torch.bfloat16)',
    ],
)
def test_a_scaler_over_bf16_is_disabled_by_the_unsafe_fix(region: str) -> None:
    source = _source(region)
    assert "AMP112" in codes_of(source)
    assert fixed(source) == fixed(source, unsafe=False)  # nothing without --unsafe-fixes
    result = fixed(source, unsafe=True)
    assert 'GradScaler("cuda", enabled=False)' in result
    assert "AMP112" not in codes_of(result)
    assert fixed(result, unsafe=True) == result


@pytest.mark.parametrize(
    ("region", "scaler"),
    [
        ('torch.autocast("cuda")', 'torch.amp.GradScaler("cuda")'),  # float16
        ('torch.autocast("cuda", dtype=torch.float16)', 'torch.amp.GradScaler("cuda")'),
        ('torch.autocast("cuda", dtype=dtype)', 'torch.amp.GradScaler("cuda")'),  # run time
        (
            'torch.autocast("cpu", dtype=torch.bfloat16)',
            'torch.amp.GradScaler("cpu", enabled=False)',
        ),
        ('torch.autocast("cpu", enabled=False)', 'torch.amp.GradScaler("cpu")'),
    ],
)
def test_silent(region: str, scaler: str) -> None:
    assert "AMP112" not in codes_of(_source(region, scaler))


def test_a_conditional_scaler_is_reported_without_a_fix() -> None:
    source = _source(
        'torch.autocast("cuda", dtype=torch.bfloat16)',
        'torch.amp.GradScaler("cuda", enabled=use_amp)',
    )
    assert "AMP112" in codes_of(source)
    assert fixed(source, unsafe=True) == source


def test_a_step_with_a_float16_region_as_well_is_silent() -> None:
    source = _source('torch.autocast("cuda", dtype=torch.bfloat16)').replace(
        "        scaler.scale(loss).backward()\n",
        '        scaler.scale(loss).backward()\n        with torch.autocast("cuda"):\n'
        "            aux = criterion(model(x), y)\n        scaler.scale(aux).backward()\n",
    )
    assert "AMP112" not in codes_of(source)
