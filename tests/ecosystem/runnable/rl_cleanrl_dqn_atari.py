"""vwxyzjn/cleanrl dqn_atari: DQN's Nature CNN on Breakout (the gymnasium stub's
stand-in: 210x160 RGB frames, through the script's Atari wrappers to 4 x 84 x 84),
learning from step 100 rather than 80,000."""

import os
from pathlib import Path

REPO = "vwxyzjn/cleanrl"
PATH = "cleanrl/dqn_atari.py"
# Arguments through the tyro stub; a replay buffer of 1,000 frames rather than a million.
ARGV = ("--no-cuda", "--learning-starts", "100", "--buffer-size", "1000")
# cleanrl_utils sits at the repository's root, which `pip install -e .` puts on
# the path: the root (the script's parent directory) goes on PYTHONPATH, after the stubs.
ENV = {"PYTHONPATH": os.pathsep.join([str(Path(__file__).parent / "stubs"), ".."])}
STEPS = 15
