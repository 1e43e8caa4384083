"""gymnasium.vector.SyncVectorEnv as of 0.29: environments stepped one after
another and reset on their own at an episode's end, the last observation and
info then in infos["final_observation"] and infos["final_info"]; infos is a
dict of arrays, one entry per environment, with a "_key" mask beside each key."""

from __future__ import annotations

from copy import deepcopy

import numpy as np

from gymnasium.spaces import batch_space


class VectorEnv:
    num_envs: int
    closed = False

    def close(self):
        if not self.closed:
            for env in getattr(self, "envs", ()):
                env.close()
        self.closed = True

    def __del__(self):
        pass

    def _add_info(self, infos: dict, info: dict, index: int) -> dict:
        for key, value in info.items():
            if key not in infos:
                if isinstance(value, (bool, int, float, np.number)) and not isinstance(
                    value, np.ndarray
                ):
                    array = np.zeros(self.num_envs, dtype=type(value))
                else:
                    array = np.array([None] * self.num_envs, dtype=object)
                infos[key], infos[f"_{key}"] = array, np.zeros(
                    self.num_envs, dtype=bool
                )
            infos[key][index], infos[f"_{key}"][index] = value, True
        return infos


class SyncVectorEnv(VectorEnv):
    def __init__(self, env_fns, observation_space=None, action_space=None, copy=True):
        self.envs = [env_fn() for env_fn in env_fns]
        self.num_envs = len(self.envs)
        self.copy = copy
        self.metadata = self.envs[0].metadata
        self.single_observation_space = self.envs[0].observation_space
        self.single_action_space = self.envs[0].action_space
        self.observation_space = observation_space or batch_space(
            self.single_observation_space, self.num_envs
        )
        self.action_space = action_space or batch_space(
            self.single_action_space, self.num_envs
        )
        self._rewards = np.zeros(self.num_envs, dtype=np.float64)
        self._terminateds = np.zeros(self.num_envs, dtype=np.bool_)
        self._truncateds = np.zeros(self.num_envs, dtype=np.bool_)

    @property
    def unwrapped(self):
        return self

    def seed(self, seed=None):
        pass

    def _stack(self, observations):
        return np.stack([np.asarray(obs) for obs in observations]).astype(
            self.single_observation_space.dtype, copy=False
        )

    def reset(self, *, seed=None, options=None):
        seeds = (
            [None] * self.num_envs
            if seed is None
            else (
                [seed + i for i in range(self.num_envs)]
                if isinstance(seed, int)
                else list(seed)
            )
        )
        self._terminateds[:], self._truncateds[:] = False, False
        observations, infos = [], {}
        for index, (env, single_seed) in enumerate(zip(self.envs, seeds)):
            observation, info = env.reset(seed=single_seed, options=options)
            observations.append(observation)
            infos = self._add_info(infos, info, index)
        return self._stack(observations), infos

    def step(self, actions):
        observations, infos = [], {}
        for index, (env, action) in enumerate(zip(self.envs, actions)):
            observation, reward, terminated, truncated, info = env.step(action)
            self._rewards[index] = reward
            self._terminateds[index], self._truncateds[index] = terminated, truncated
            if terminated or truncated:
                old_observation, old_info = observation, info
                observation, info = env.reset()
                info["final_observation"] = old_observation
                info["final_info"] = old_info
            infos = self._add_info(infos, info, index)
            observations.append(observation)
        observations = self._stack(observations)
        return (
            deepcopy(observations) if self.copy else observations,
            np.copy(self._rewards),
            np.copy(self._terminateds),
            np.copy(self._truncateds),
            infos,
        )

    def call(self, name, *args, **kwargs):
        results = []
        for env in self.envs:
            attribute = getattr(env, name)
            results.append(
                attribute(*args, **kwargs) if callable(attribute) else attribute
            )
        return tuple(results)

    def get_attr(self, name):
        return self.call(name)
