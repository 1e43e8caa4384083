"""The environments the runnable subset's scripts make, as small numpy
simulations that run in microseconds a step and repeat from their seed:

    CartPole-v0/v1               gymnasium's cart-pole physics (Euler), 200/500 steps
    Pendulum-v1                  gymnasium's pendulum, 200 steps
    MountainCarContinuous-v0     gymnasium's continuous mountain car, 999 steps
    Hopper-v4, HalfCheetah-v4,   no MuJoCo here: a stable linear system with the
    Walker2d-v4, Ant-v4, ...     real one's observation and action shapes, float64
                                 observations like MuJoCo's, 1000 steps
    *NoFrameskip-v4 (Atari)      a 210x160x3 uint8 frame of moving blocks, four
                                 actions (NOOP, FIRE, RIGHT, LEFT), five lives
"""

from __future__ import annotations

import math

import numpy as np

from gymnasium.core import Env
from gymnasium.spaces import Box, Discrete


class CartPoleEnv(Env):
    def __init__(self, render_mode=None):
        self.gravity, self.masscart, self.masspole = 9.8, 1.0, 0.1
        self.total_mass = self.masspole + self.masscart
        self.length = 0.5
        self.polemass_length = self.masspole * self.length
        self.force_mag, self.tau = 10.0, 0.02
        self.theta_threshold_radians = 12 * 2 * math.pi / 360
        self.x_threshold = 2.4
        high = np.array(
            [
                self.x_threshold * 2,
                np.finfo(np.float32).max,
                self.theta_threshold_radians * 2,
                np.finfo(np.float32).max,
            ],
            dtype=np.float32,
        )
        self.action_space = Discrete(2)
        self.observation_space = Box(-high, high, dtype=np.float32)
        self.render_mode = render_mode
        self.state = None

    def step(self, action):
        x, x_dot, theta, theta_dot = self.state
        force = self.force_mag if int(action) == 1 else -self.force_mag
        costheta, sintheta = math.cos(theta), math.sin(theta)
        temp = (
            force + self.polemass_length * theta_dot**2 * sintheta
        ) / self.total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * costheta**2 / self.total_mass)
        )
        xacc = temp - self.polemass_length * thetaacc * costheta / self.total_mass
        x, x_dot = x + self.tau * x_dot, x_dot + self.tau * xacc
        theta, theta_dot = theta + self.tau * theta_dot, theta_dot + self.tau * thetaacc
        self.state = (x, x_dot, theta, theta_dot)
        terminated = bool(
            abs(x) > self.x_threshold or abs(theta) > self.theta_threshold_radians
        )
        return np.array(self.state, dtype=np.float32), 1.0, terminated, False, {}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.state = self.np_random.uniform(low=-0.05, high=0.05, size=(4,))
        return np.array(self.state, dtype=np.float32), {}


class PendulumEnv(Env):
    def __init__(self, render_mode=None, g=10.0):
        self.max_speed, self.max_torque, self.dt = 8.0, 2.0, 0.05
        self.g, self.m, self.l = g, 1.0, 1.0
        high = np.array([1.0, 1.0, self.max_speed], dtype=np.float32)
        self.action_space = Box(
            -self.max_torque, self.max_torque, shape=(1,), dtype=np.float32
        )
        self.observation_space = Box(-high, high, dtype=np.float32)
        self.render_mode = render_mode

    def step(self, u):
        th, thdot = self.state
        u = float(np.clip(u, -self.max_torque, self.max_torque)[0])
        angle = ((th + np.pi) % (2 * np.pi)) - np.pi
        costs = angle**2 + 0.1 * thdot**2 + 0.001 * u**2
        newthdot = (
            thdot
            + (3 * self.g / (2 * self.l) * np.sin(th) + 3.0 / (self.m * self.l**2) * u)
            * self.dt
        )
        newthdot = np.clip(newthdot, -self.max_speed, self.max_speed)
        self.state = np.array([th + newthdot * self.dt, newthdot])
        return self._obs(), -costs, False, False, {}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        high = np.array([np.pi, 1.0])
        self.state = self.np_random.uniform(low=-high, high=high)
        return self._obs(), {}

    def _obs(self):
        th, thdot = self.state
        return np.array([np.cos(th), np.sin(th), thdot], dtype=np.float32)


class Continuous_MountainCarEnv(Env):
    def __init__(self, render_mode=None, goal_velocity=0):
        self.min_position, self.max_position, self.max_speed = -1.2, 0.6, 0.07
        self.goal_position, self.goal_velocity, self.power = 0.45, goal_velocity, 0.0015
        low = np.array([self.min_position, -self.max_speed], dtype=np.float32)
        high = np.array([self.max_position, self.max_speed], dtype=np.float32)
        self.action_space = Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
        self.observation_space = Box(low, high, dtype=np.float32)
        self.render_mode = render_mode

    def step(self, action):
        position, velocity = self.state
        force = min(max(float(action[0]), -1.0), 1.0)
        velocity += force * self.power - 0.0025 * math.cos(3 * position)
        velocity = min(max(velocity, -self.max_speed), self.max_speed)
        position = min(max(position + velocity, self.min_position), self.max_position)
        if position == self.min_position and velocity < 0:
            velocity = 0
        terminated = bool(
            position >= self.goal_position and velocity >= self.goal_velocity
        )
        reward = (100.0 if terminated else 0.0) - math.pow(action[0], 2) * 0.1
        self.state = np.array([position, velocity], dtype=np.float32)
        return self.state, reward, terminated, False, {}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.state = np.array(
            [self.np_random.uniform(low=-0.6, high=-0.4), 0], dtype=np.float32
        )
        return np.array(self.state, dtype=np.float32), {}


class LinearControlEnv(Env):
    """A stand-in for a MuJoCo locomotion task: x' = 0.9 x + B tanh(a) + noise,
    rewarded for staying near 0 ("healthy"), terminated when it drifts off."""

    def __init__(self, obs_dim: int, act_dim: int, render_mode=None):
        self.action_space = Box(-1.0, 1.0, shape=(act_dim,), dtype=np.float32)
        self.observation_space = Box(
            -np.inf, np.inf, shape=(obs_dim,), dtype=np.float64
        )
        self.render_mode = render_mode
        self.B = np.random.default_rng(obs_dim * 100 + act_dim).normal(
            0, 0.3, (obs_dim, act_dim)
        )

    def step(self, action):
        action = np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0)
        noise = self.np_random.normal(0, 0.05, self.state.shape)
        self.state = 0.9 * self.state + self.B @ action + noise
        reward = 1.0 - float(np.mean(self.state**2)) - 0.001 * float(np.sum(action**2))
        terminated = bool(np.max(np.abs(self.state)) > 4.0)
        return self.state.copy(), reward, terminated, False, {}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.state = self.np_random.uniform(-0.1, 0.1, self.observation_space.shape)
        return self.state.copy(), {}


class _ALE:
    def __init__(self, env):
        self._env = env

    def lives(self) -> int:
        return self._env.lives


class AtariEnv(Env):
    """Blocks of brightness moving across a 210x160 RGB frame; each action
    shifts the paddle; a life is lost every 50 frames, the game ends after five."""

    def __init__(self, render_mode=None, **kwargs):
        self.action_space = Discrete(4)
        self.observation_space = Box(0, 255, shape=(210, 160, 3), dtype=np.uint8)
        self.render_mode = render_mode
        self.ale = _ALE(self)

    def get_action_meanings(self):
        return ["NOOP", "FIRE", "RIGHT", "LEFT"]

    def _frame(self):
        frame = np.zeros((210, 160, 3), dtype=np.uint8)
        row = (self.t * 3) % 190
        frame[row : row + 20, :, 0] = 200
        frame[190:200, self.paddle : self.paddle + 20, :] = 255
        frame[:, :, 1] = self.noise
        return frame

    def step(self, action):
        self.t += 1
        self.paddle = int(
            np.clip(self.paddle + {2: 8, 3: -8}.get(int(action), 0), 0, 140)
        )
        reward = float(abs(self.paddle - (self.t * 7) % 140) < 20)
        if self.t % 50 == 0:
            self.lives -= 1
        return self._frame(), reward, self.lives == 0, False, {"lives": self.lives}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.lives = 0, 5
        self.paddle = int(self.np_random.integers(0, 140))
        self.noise = self.np_random.integers(0, 30, size=(210, 160), dtype=np.uint8)
        return self._frame(), {"lives": self.lives}


_MUJOCO = {  # observation and action sizes of the MuJoCo tasks
    "Hopper": (11, 3),
    "HalfCheetah": (17, 6),
    "Walker2d": (17, 6),
    "Ant": (27, 8),
    "Humanoid": (376, 17),
    "InvertedPendulum": (4, 1),
    "Reacher": (11, 2),
    "Swimmer": (8, 2),
}


def env_and_limit(env_id: str, **kwargs) -> tuple[Env, int | None]:
    """The environment an id names, and its episodes' step limit."""
    name = env_id.split("/")[-1].rsplit("-v", 1)[0]
    if name == "CartPole":
        return CartPoleEnv(**kwargs), 200 if env_id.endswith("-v0") else 500
    if name == "Pendulum":
        return PendulumEnv(**kwargs), 200
    if name == "MountainCarContinuous":
        return Continuous_MountainCarEnv(**kwargs), 999
    if name in _MUJOCO:
        return LinearControlEnv(*_MUJOCO[name], **kwargs), 1000
    if name.endswith("NoFrameskip"):
        return AtariEnv(**kwargs), 108000
    raise KeyError(f"the gymnasium stub has no environment {env_id!r}")
