"""vwxyzjn/cleanrl ppo: PPO on four CartPole-v1 environments (the gymnasium
stub's), with the script's own sizes: 16 updates a rollout of 4 x 128 steps."""

REPO = "vwxyzjn/cleanrl"
PATH = "cleanrl/ppo.py"
ARGV = ("--no-cuda",)  # through the tyro stub
STEPS = 20
