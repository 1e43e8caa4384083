"""vwxyzjn/cleanrl ppo_continuous_action: PPO on HalfCheetah-v4 (the gymnasium
stub's linear stand-in, with its 17 observations and 6 actions, through the
script's normalizing wrappers), with minibatches of the script's 64 from a
rollout of 512 steps rather than 2048."""

REPO = "vwxyzjn/cleanrl"
PATH = "cleanrl/ppo_continuous_action.py"
# Through the tyro stub: a quarter of the rollout, a quarter of the minibatches.
ARGV = ("--no-cuda", "--num-steps", "512", "--num-minibatches", "8")
STEPS = 20
