"""vwxyzjn/cleanrl ppo_atari: PPO's Nature CNN on Breakout (the gymnasium stub's
stand-in: 210x160 RGB frames, through the script's Atari wrappers to 4 x 84 x 84),
on 4 environments with 32-step rollouts rather than 8 with 128."""

import os
from pathlib import Path

REPO = "vwxyzjn/cleanrl"
PATH = "cleanrl/ppo_atari.py"
# Arguments through the tyro stub: 4 minibatches of 32 rather than of 256.
ARGV = ("--no-cuda", "--num-envs", "4", "--num-steps", "32")
# cleanrl_utils sits at the repository's root, which `pip install -e .` puts on
# the path: the root (the script's parent directory) goes on PYTHONPATH, after the stubs.
ENV = {"PYTHONPATH": os.pathsep.join([str(Path(__file__).parent / "stubs"), ".."])}
STEPS = 15
