"""AMP007: an mmengine config whose optimizer wrapper trains in FP32 (issue
60: mmengine had no rule beside Accelerate, Lightning, the HF Trainer,
DeepSpeed and Colossal-AI)."""

from __future__ import annotations

import pytest

from amplint.config import Settings
from tests.helpers import codes_of, dedent, findings_of, fixed

CONFIG = """
optim_wrapper = dict(
    type="OptimWrapper",
    optimizer=dict(type="SGD", lr=0.1, momentum=0.9, weight_decay=0.0001),
)
"""
RUNNER = """
from mmengine.runner import Runner

runner = Runner(model=model, train_dataloader=loader,
                optim_wrapper=dict(type='OptimWrapper', optimizer=dict(type='SGD', lr=0.001)))
runner.train()
"""
LITERAL = 'optim_wrapper = {"type": "OptimWrapper", "optimizer": {"type": "AdamW", "lr": 1e-4}}\n'


@pytest.mark.parametrize("source", [CONFIG, RUNNER, LITERAL], ids=["config", "runner", "literal"])
def test_the_fp32_wrapper_becomes_the_amp_one(source: str) -> None:
    source = dedent(source)
    assert codes_of(source) == ["AMP007"]
    result = fixed(source)
    assert "AmpOptimWrapper" in result and "'OptimWrapper'" not in result
    assert '"OptimWrapper"' not in result and codes_of(result) == []
    bfloat16 = fixed(source, Settings(dtype="bfloat16"))
    assert "bfloat16" in bfloat16 and codes_of(bfloat16, Settings(dtype="bfloat16")) == []


def test_bfloat16_adds_the_dtype_laid_out_as_the_config_is() -> None:
    assert fixed(dedent(CONFIG), Settings(dtype="bfloat16")) == dedent("""
        optim_wrapper = dict(
            type="AmpOptimWrapper",
            optimizer=dict(type="SGD", lr=0.1, momentum=0.9, weight_decay=0.0001),
            dtype="bfloat16",
        )
        """)


@pytest.mark.parametrize(
    "source",
    [
        'optim_wrapper = dict(type="AmpOptimWrapper", optimizer=dict(type="SGD"))\n',
        'other = dict(type="OptimWrapper")\n',
        # No type: a child config's override, merged over its base's wrapper.
        '_base_ = ["base.py"]\noptim_wrapper = dict(optimizer=dict(lr=0.01))  # OptimWrapper\n',
    ],
)
def test_mixed_precision_or_another_config_is_left_alone(source: str) -> None:
    assert codes_of(source) == []


def test_the_imported_class_or_auto_is_reported_without_a_fix() -> None:
    source = dedent("""
        from mmengine.optim import OptimWrapper

        optim_wrapper = dict(type=OptimWrapper, optimizer=dict(type="SGD"))
        """)
    (finding,) = findings_of(source)
    assert finding.fix is None and finding.message.endswith("(not fixed: the class is imported)")
    (auto,) = findings_of(dedent(CONFIG), Settings(dtype="auto"))
    assert auto.fix is None and "a config cannot ask the GPU" in auto.message
