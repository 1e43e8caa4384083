"""vwxyzjn/cleanrl c51: categorical DQN on CartPole-v1 (the gymnasium stub's),
learning from step 100 rather than 10,000."""

import os
from pathlib import Path

REPO = "vwxyzjn/cleanrl"
PATH = "cleanrl/c51.py"
# Arguments through the tyro stub; a smaller batch, and a target network synced every 100 steps.
ARGV = (
    "--no-cuda",
    "--total-timesteps",
    "1000",
    "--learning-starts",
    "100",
    "--batch-size",
    "32",
    "--target-network-frequency",
    "100",
)
# cleanrl_utils sits at the repository's root, which `pip install -e .` puts on
# the path: the root (the script's parent directory) goes on PYTHONPATH, after the stubs.
ENV = {"PYTHONPATH": os.pathsep.join([str(Path(__file__).parent / "stubs"), ".."])}
STEPS = 20
# The target projection's index_add_ takes a value promoted to float32 into a
# tensor made like the low-precision outputs: amplint declines every dtype
# (rewritten, both CPU runs crashed: "must have the same scalar type").
_WRITE = "writes what the forward pass computes into a tensor by a tensor index"
DECLINED = {"default": _WRITE, "bf16": _WRITE, "fp16": _WRITE}
