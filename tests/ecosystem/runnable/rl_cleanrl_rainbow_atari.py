"""vwxyzjn/cleanrl rainbow_atari: Rainbow (noisy dueling C51, prioritized
n-step replay) on Breakout (the gymnasium stub's stand-in: 210x160 RGB frames,
through the script's Atari wrappers to 4 x 84 x 84), learning from step 100
rather than 80,000."""

import os
from pathlib import Path

REPO = "vwxyzjn/cleanrl"
PATH = "cleanrl/rainbow_atari.py"
# Arguments through the tyro stub; a replay buffer of 1,024 frames rather than a million.
ARGV = ("--no-cuda", "--learning-starts", "100", "--buffer-size", "1024")
# cleanrl_utils sits at the repository's root, which `pip install -e .` puts on
# the path: the root (the script's parent directory) goes on PYTHONPATH, after the stubs.
ENV = {"PYTHONPATH": os.pathsep.join([str(Path(__file__).parent / "stubs"), ".."])}
# Its buffer stores each one-environment array as an element, which NumPy 2 (installed
# here; cleanrl pins NumPy 1) refuses: the one environment's action, reward and end go in.
EDITS = (
    (
        "rb.add(obs, actions, rewards, real_next_obs, terminations)",
        "rb.add(obs, actions[0], rewards[0], real_next_obs, terminations[0])",
    ),
)
STEPS = 15
# Its priorities come from `loss_per_sample...numpy()`, bfloat16 under bfloat16
# autocast, which NumPy cannot hold: amplint declines bfloat16, and says why.
# bfloat16: its priorities go through `.numpy()`; float16 (the default's too): the
# target projection's index_add_ (see rl_cleanrl_c51.py).
_WRITE = "writes what the forward pass computes into a tensor by a tensor index"
DECLINED = {
    "default": _WRITE,
    "bf16": "hands NumPy a tensor the forward pass computes",
    "fp16": _WRITE,
}
