"""gymnasium.core as of 0.29: Env, Wrapper and the observation, reward and
action wrappers; reset returns (obs, info), step (obs, reward, terminated,
truncated, info)."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import numpy as np

ObsType = TypeVar("ObsType")
ActType = TypeVar("ActType")
WrapperObsType = TypeVar("WrapperObsType")
WrapperActType = TypeVar("WrapperActType")


class Env(Generic[ObsType, ActType]):
    metadata: dict[str, Any] = {"render_modes": ["rgb_array"], "render_fps": 30}
    render_mode = None
    spec = None
    action_space = None
    observation_space = None
    _np_random = None

    @property
    def np_random(self) -> np.random.Generator:
        if self._np_random is None:
            self._np_random = np.random.default_rng(
                0
            )  # deterministic, unlike gymnasium
        return self._np_random

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self._np_random = np.random.default_rng(seed)
        return None, {}

    def step(self, action):
        raise NotImplementedError

    def render(self):
        return None

    def close(self):
        pass

    @property
    def unwrapped(self) -> Env:
        return self

    def __enter__(self):
        return self

    def __exit__(self, *args):
        self.close()
        return False


class Wrapper(
    Env[WrapperObsType, WrapperActType],
    Generic[WrapperObsType, WrapperActType, ObsType, ActType],
):
    def __init__(self, env: Env):
        self.env = env
        self._action_space = None
        self._observation_space = None

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.env, name)

    @property
    def action_space(self):
        return (
            self.env.action_space if self._action_space is None else self._action_space
        )

    @action_space.setter
    def action_space(self, space):
        self._action_space = space

    @property
    def observation_space(self):
        return (
            self.env.observation_space
            if self._observation_space is None
            else self._observation_space
        )

    @observation_space.setter
    def observation_space(self, space):
        self._observation_space = space

    @property
    def np_random(self):
        return self.env.np_random

    @property
    def render_mode(self):
        return self.env.render_mode

    @property
    def spec(self):
        return self.env.spec

    @property
    def unwrapped(self) -> Env:
        return self.env.unwrapped

    def reset(self, *, seed=None, options=None):
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        return self.env.step(action)

    def render(self):
        return self.env.render()

    def close(self):
        return self.env.close()


class ObservationWrapper(Wrapper[WrapperObsType, ActType, ObsType, ActType]):
    def reset(self, *, seed=None, options=None):
        obs, info = self.env.reset(seed=seed, options=options)
        return self.observation(obs), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self.observation(obs), reward, terminated, truncated, info

    def observation(self, observation):
        raise NotImplementedError


class RewardWrapper(Wrapper[ObsType, ActType, ObsType, ActType]):
    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, self.reward(reward), terminated, truncated, info

    def reward(self, reward):
        raise NotImplementedError


class ActionWrapper(Wrapper[ObsType, WrapperActType, ObsType, ActType]):
    def step(self, action):
        return self.env.step(self.action(action))

    def action(self, action):
        raise NotImplementedError
