"""AMP120: manual autocast or a GradScaler against the module's FSDP
mixed-precision policy."""

from __future__ import annotations

import pytest

from tests.helpers import findings_of

HEADER = (
    "import torch\n"
    "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
    "from torch.distributed.fsdp import MixedPrecision\n"
    "from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard\n"
    "from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler\n\n"
)


def _script(policy: str, step: str) -> str:
    return (
        HEADER + f"policy = {policy}\n\n\n"
        "def train(model, loader, optimizer, use_fp16):\n"
        "    model = FSDP(model, mixed_precision=policy)\n" + step
    )


def _findings(text: str):
    return findings_of(text, codes=frozenset({"AMP120"}))


BF16 = "MixedPrecision(param_dtype=torch.bfloat16)"
FP16 = "MixedPrecision(param_dtype=torch.float16, reduce_dtype=torch.float16)"
REGION = "    with {autocast}:\n        loss = model(batch).sum()\n"


@pytest.mark.parametrize(
    ("policy", "autocast", "dtype"),
    [
        (BF16, 'torch.autocast("cuda")', "float16"),  # CUDA's default dtype
        (BF16, "torch.cuda.amp.autocast()", "float16"),
        (BF16, 'torch.autocast("cuda", dtype=torch.half)', "float16"),
        (FP16, 'torch.autocast("cuda", dtype=torch.bfloat16)', "bfloat16"),
        (FP16, 'torch.autocast("cpu")', "bfloat16"),  # the CPU's default
        ("MixedPrecisionPolicy(param_dtype=torch.bfloat16)", 'torch.autocast("cuda")', "float16"),
    ],
)
def test_autocast_in_the_other_dtype_is_reported(policy: str, autocast: str, dtype: str) -> None:
    [finding] = _findings(_script(policy, REGION.format(autocast=autocast)))
    assert f"this autocast region in {dtype}" in finding.message
    assert finding.span.line == 12  # the autocast call


@pytest.mark.parametrize("scaler", ['torch.amp.GradScaler("cuda")', 'ShardedGradScaler("cuda")'])
def test_a_scaler_under_a_bfloat16_policy_is_reported(scaler: str) -> None:
    region = REGION.format(autocast='torch.autocast("cuda", dtype=torch.bfloat16)')
    [finding] = _findings(_script(BF16, f"    scaler = {scaler}\n" + region))
    assert "needs no loss scaling" in finding.message


@pytest.mark.parametrize(
    ("policy", "step"),
    [
        # the same dtype: redundant, not wrong
        (BF16, REGION.format(autocast='torch.autocast("cuda", dtype=torch.bfloat16)')),
        (FP16, REGION.format(autocast='torch.autocast("cuda")')),
        # a float16 policy needs its (sharded) scaler
        (FP16, '    scaler = ShardedGradScaler("cuda")\n'),
        # a scaler switched at run time
        (BF16, '    scaler = ShardedGradScaler("cuda", enabled=use_fp16)\n'),
        (BF16, '    scaler = ShardedGradScaler("cuda", enabled=False)\n'),
        # dtypes held in variables are run-time choices
        ("MixedPrecision(param_dtype=dtype)", REGION.format(autocast='torch.autocast("cuda")')),
        (BF16, REGION.format(autocast='torch.autocast("cuda", dtype=amp_dtype)')),
        (BF16, REGION.format(autocast="torch.autocast(device_type, dtype=None)")),
        (BF16, REGION.format(autocast='torch.autocast("cuda", enabled=False)')),
        # a float32 policy is no mixed-precision policy
        (
            "MixedPrecision(param_dtype=torch.float32)",
            REGION.format(autocast='torch.autocast("cuda")'),
        ),
    ],
)
def test_left_alone(policy: str, step: str) -> None:
    assert not _findings(_script(policy, step))


def test_float16_autocast_keeps_its_scaler_under_a_bfloat16_policy() -> None:
    step = '    scaler = ShardedGradScaler("cuda")\n' + REGION.format(
        autocast='torch.autocast("cuda")'
    )
    [finding] = _findings(_script(BF16, step))
    assert "autocast region in float16" in finding.message  # the region, not the scaler


def test_policies_in_both_dtypes_are_a_choice() -> None:
    # llama-recipes keeps fpSixteen and bfSixteen side by side; a flag picks.
    text = (
        HEADER + f"fp16_policy = {FP16}\nbf16_policy = {BF16}\n\n\n"
        "def train(model, use_fp16):\n"
        "    model = FSDP(model, mixed_precision=fp16_policy if use_fp16 else bf16_policy)\n"
        '    with torch.autocast("cuda"):\n        return model(batch)\n'
    )
    assert not _findings(text)


def test_a_module_without_a_policy_is_not_read() -> None:
    text = HEADER.replace("MixedPrecision", "Other") + 'scaler = torch.amp.GradScaler("cuda")\n'
    assert not _findings(text)
