"""A stand-in for the old gym (0.8 to 0.25) in the runnable subset, where it is
not installed: reset() returns the observation, step() (observation, reward,
done, info), Discrete spaces sample Python ints.  The simulations are the
gymnasium stub's (gymnasium/envs.py); unseeded, they start from seed 0."""

from __future__ import annotations

from gym import spaces
from gym.spaces import Discrete
from gymnasium import envs as _envs
from gymnasium.core import Env


class CartPoleEnv(_envs.CartPoleEnv):
    def __init__(self, render_mode=None):
        super().__init__(render_mode)
        self.action_space = Discrete(2)

    def seed(self, seed=None):
        super().reset(seed=seed)
        return [seed]

    def reset(self, **kwargs):
        return super().reset(**kwargs)[0]

    def step(self, action):
        observation, reward, terminated, _, info = super().step(action)
        return observation, reward, terminated, info

    def render(self, mode="human"):
        return None


class TimeLimit:
    """make()'s wrapper: done after the id's step limit; `unwrapped` is the env."""

    def __init__(self, env, max_episode_steps: int):
        self.env, self._max_episode_steps, self._elapsed_steps = (
            env,
            max_episode_steps,
            0,
        )

    def __getattr__(self, name: str):
        return getattr(self.env, name)

    @property
    def unwrapped(self):
        return self.env

    def reset(self, **kwargs):
        self._elapsed_steps = 0
        return self.env.reset(**kwargs)

    def step(self, action):
        observation, reward, done, info = self.env.step(action)
        self._elapsed_steps += 1
        if self._elapsed_steps >= self._max_episode_steps:
            done, info = True, dict(info, **{"TimeLimit.truncated": not done})
        return observation, reward, done, info


_ENVS = {"CartPole-v0": (CartPoleEnv, 200), "CartPole-v1": (CartPoleEnv, 500)}


def make(id: str, **kwargs):
    if id not in _ENVS:
        raise KeyError(f"the gym stub has no environment {id!r}")
    cls, limit = _ENVS[id]
    return TimeLimit(cls(**kwargs), limit)


__version__ = "0.8.1"
__all__ = ["Env", "make", "spaces"]
