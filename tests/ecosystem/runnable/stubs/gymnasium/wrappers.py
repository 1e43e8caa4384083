"""gymnasium.wrappers as of 0.29, for single environments, as far as the
runnable subset's scripts use them.  RecordVideo records nothing."""

from __future__ import annotations

import time
from collections import deque

import numpy as np

from gymnasium.core import ActionWrapper, ObservationWrapper, RewardWrapper, Wrapper
from gymnasium.spaces import Box, flatten_space


class TimeLimit(Wrapper):
    def __init__(self, env, max_episode_steps: int):
        super().__init__(env)
        self._max_episode_steps = max_episode_steps
        self._elapsed_steps = None

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        self._elapsed_steps += 1
        if self._elapsed_steps >= self._max_episode_steps:
            truncated = True
        return observation, reward, terminated, truncated, info

    def reset(self, **kwargs):
        self._elapsed_steps = 0
        return self.env.reset(**kwargs)


class OrderEnforcing(Wrapper):
    pass


class PassiveEnvChecker(Wrapper):
    pass


class RecordEpisodeStatistics(Wrapper):
    """info["episode"] = {"r": return, "l": length, "t": seconds}, as arrays of
    one, at an episode's end."""

    def __init__(self, env, deque_size: int = 100):
        super().__init__(env)
        self.num_envs = 1
        self.episode_returns = np.zeros(1, dtype=np.float32)
        self.episode_lengths = np.zeros(1, dtype=np.int32)
        self.episode_start_times = np.zeros(1, dtype=np.float32)
        self.return_queue = deque(maxlen=deque_size)
        self.length_queue = deque(maxlen=deque_size)

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.episode_start_times = np.full(1, time.perf_counter(), dtype=np.float32)
        self.episode_returns[:] = 0
        self.episode_lengths[:] = 0
        return obs, info

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        self.episode_returns += reward
        self.episode_lengths += 1
        if terminated or truncated:
            info = dict(info)
            info["episode"] = {
                "r": self.episode_returns.copy(),
                "l": self.episode_lengths.copy(),
                "t": np.round(time.perf_counter() - self.episode_start_times, 6),
            }
            self.return_queue.extend(self.episode_returns)
            self.length_queue.extend(self.episode_lengths)
            self.episode_returns[:] = 0
            self.episode_lengths[:] = 0
        return observation, reward, terminated, truncated, info


class RecordVideo(Wrapper):
    def __init__(self, env, video_folder: str, *args, **kwargs):
        super().__init__(env)
        self.video_folder = video_folder


class FlattenObservation(ObservationWrapper):
    def __init__(self, env):
        super().__init__(env)
        self.observation_space = flatten_space(env.observation_space)

    def observation(self, observation):
        return np.asarray(observation).flatten()


class ClipAction(ActionWrapper):
    def __init__(self, env):
        super().__init__(env)
        shape = env.action_space.shape
        self.action_space = Box(
            -np.inf, np.inf, shape=shape, dtype=env.action_space.dtype
        )

    def action(self, action):
        return np.clip(action, self.env.action_space.low, self.env.action_space.high)


class TransformObservation(ObservationWrapper):
    def __init__(self, env, f):
        super().__init__(env)
        self.f = f

    def observation(self, observation):
        return self.f(observation)


class TransformReward(RewardWrapper):
    def __init__(self, env, f):
        super().__init__(env)
        self.f = f

    def reward(self, reward):
        return self.f(reward)


class RunningMeanStd:
    def __init__(self, epsilon=1e-4, shape=()):
        self.mean = np.zeros(shape, "float64")
        self.var = np.ones(shape, "float64")
        self.count = epsilon

    def update(self, x):
        batch_mean, batch_var, batch_count = (
            np.mean(x, axis=0),
            np.var(x, axis=0),
            x.shape[0],
        )
        delta = batch_mean - self.mean
        total = self.count + batch_count
        self.mean = self.mean + delta * batch_count / total
        m2 = (
            self.var * self.count
            + batch_var * batch_count
            + np.square(delta) * self.count * batch_count / total
        )
        self.var = m2 / total
        self.count = total


class NormalizeObservation(Wrapper):
    def __init__(self, env, epsilon: float = 1e-8):
        super().__init__(env)
        self.obs_rms = RunningMeanStd(shape=self.observation_space.shape)
        self.epsilon = epsilon

    def normalize(self, obs):
        self.obs_rms.update(obs)
        return (obs - self.obs_rms.mean) / np.sqrt(self.obs_rms.var + self.epsilon)

    def step(self, action):
        obs, rews, terminateds, truncateds, infos = self.env.step(action)
        return self.normalize(np.array([obs]))[0], rews, terminateds, truncateds, infos

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return self.normalize(np.array([obs]))[0], info


class NormalizeReward(Wrapper):
    def __init__(self, env, gamma: float = 0.99, epsilon: float = 1e-8):
        super().__init__(env)
        self.return_rms = RunningMeanStd(shape=())
        self.returns = np.zeros(1)
        self.gamma, self.epsilon = gamma, epsilon

    def step(self, action):
        obs, rews, terminateds, truncateds, infos = self.env.step(action)
        rews = np.array([rews])
        self.returns = self.returns * self.gamma * (1 - terminateds) + rews
        self.return_rms.update(self.returns)
        rews = rews / np.sqrt(self.return_rms.var + self.epsilon)
        return obs, rews[0], terminateds, truncateds, infos


class ResizeObservation(ObservationWrapper):
    """Nearest-neighbour resizing (gymnasium uses OpenCV's area interpolation)."""

    def __init__(self, env, shape):
        super().__init__(env)
        self.shape = (shape, shape) if isinstance(shape, int) else tuple(shape)
        old = env.observation_space
        self.observation_space = Box(
            0, 255, shape=self.shape + old.shape[2:], dtype=old.dtype
        )

    def observation(self, observation):
        rows = np.arange(self.shape[0]) * observation.shape[0] // self.shape[0]
        columns = np.arange(self.shape[1]) * observation.shape[1] // self.shape[1]
        return observation[rows][:, columns]


class GrayScaleObservation(ObservationWrapper):
    def __init__(self, env, keep_dim: bool = False):
        super().__init__(env)
        self.keep_dim = keep_dim
        shape = env.observation_space.shape[:2] + ((1,) if keep_dim else ())
        self.observation_space = Box(0, 255, shape=shape, dtype=np.uint8)

    def observation(self, observation):
        gray = (
            observation.astype(np.float32)
            @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
        ).astype(np.uint8)
        return gray[..., np.newaxis] if self.keep_dim else gray


class LazyFrames:
    def __init__(self, frames, lz4_compress: bool = False):
        self._frames = list(frames)

    def __array__(self, dtype=None, copy=None):
        array = np.stack(self._frames, axis=0)
        return array if dtype is None else array.astype(dtype)

    def __len__(self):
        return len(self._frames)

    def __getitem__(self, index):
        return self._frames[index]

    @property
    def shape(self):
        return (len(self._frames),) + np.shape(self._frames[0])


class FrameStack(ObservationWrapper):
    def __init__(self, env, num_stack: int, lz4_compress: bool = False):
        super().__init__(env)
        self.num_stack = num_stack
        self.frames = deque(maxlen=num_stack)
        old = env.observation_space
        low = np.repeat(old.low[np.newaxis], num_stack, axis=0)
        high = np.repeat(old.high[np.newaxis], num_stack, axis=0)
        self.observation_space = Box(low, high, dtype=old.dtype)

    def observation(self, observation):
        return LazyFrames(self.frames)

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        self.frames.append(observation)
        return self.observation(None), reward, terminated, truncated, info

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        for _ in range(self.num_stack):
            self.frames.append(obs)
        return self.observation(None), info
