"""vwxyzjn/cleanrl td3_continuous_action: TD3 on Hopper-v4 (the gymnasium
stub's linear stand-in, with its 11 observations and 3 actions), learning from
step 100 rather than 25e3."""

import os
from pathlib import Path

REPO = "vwxyzjn/cleanrl"
PATH = "cleanrl/td3_continuous_action.py"
# Arguments through the tyro stub; a replay buffer of 10,000 rather than a million.
ARGV = ("--no-cuda", "--learning-starts", "100", "--buffer-size", "10000")
# cleanrl_utils sits at the repository's root, which `pip install -e .` puts on
# the path: the root (the script's parent directory) goes on PYTHONPATH, after the stubs.
ENV = {"PYTHONPATH": os.pathsep.join([str(Path(__file__).parent / "stubs"), ".."])}
STEPS = 20
