"""vwxyzjn/cleanrl dqn: DQN on CartPole-v1 (the gymnasium stub's), learning
from step 100 rather than 10,000."""

import os
from pathlib import Path

REPO = "vwxyzjn/cleanrl"
PATH = "cleanrl/dqn.py"
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
