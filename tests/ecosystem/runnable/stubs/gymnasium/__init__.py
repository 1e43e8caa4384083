"""A stand-in for gymnasium 0.29 (the version cleanrl pins) in the runnable
subset, where gymnasium is not installed: make() builds the small numpy
simulations of gymnasium/envs.py, wrapped as gymnasium wraps them (a TimeLimit);
spaces, vector.SyncVectorEnv and wrappers follow 0.29's API: reset returns
(obs, info), step (obs, reward, terminated, truncated, info).  Everything is
seeded: an unseeded environment or space starts from seed 0."""

from __future__ import annotations

from gymnasium import spaces, vector, wrappers
from gymnasium.core import (
    ActionWrapper,
    Env,
    ObservationWrapper,
    RewardWrapper,
    Wrapper,
)
from gymnasium.envs import env_and_limit

__version__ = "0.29.1"


class EnvSpec:
    def __init__(self, env_id: str, max_episode_steps):
        self.id = env_id
        self.max_episode_steps = max_episode_steps


def make(id: str, max_episode_steps=None, render_mode=None, **kwargs) -> Env:
    env, limit = env_and_limit(id, render_mode=render_mode, **kwargs)
    env.spec = EnvSpec(id, max_episode_steps or limit)
    if env.spec.max_episode_steps is not None:
        env = wrappers.TimeLimit(env, env.spec.max_episode_steps)
    return env


__all__ = ["ActionWrapper", "Env", "ObservationWrapper", "RewardWrapper", "Wrapper"]
__all__ += ["make", "spaces", "vector", "wrappers"]
