"""gymnasium.spaces, as far as the runnable subset's scripts use them: Box and
Discrete with seed, sample, contains, shape, dtype, n, low and high; the other
kinds exist for isinstance checks.  An unseeded space samples as if seeded with
0, so that runs repeat (real gymnasium seeds it from the OS)."""

from __future__ import annotations

import numpy as np


class Space:
    def __init__(self, shape=None, dtype=None, seed=None):
        self._shape = None if shape is None else tuple(shape)
        self.dtype = None if dtype is None else np.dtype(dtype)
        self._np_random = None
        self.seed(seed)

    @property
    def shape(self):
        return self._shape

    @property
    def np_random(self) -> np.random.Generator:
        return self._np_random

    def seed(self, seed=None):
        self._np_random = np.random.default_rng(0 if seed is None else seed)
        return [seed]

    def sample(self, mask=None):
        raise NotImplementedError

    def __contains__(self, x) -> bool:
        return self.contains(x)


class Box(Space):
    def __init__(self, low, high, shape=None, dtype=np.float32, seed=None):
        dtype = np.dtype(dtype)
        if shape is None:
            shape = np.shape(low) if np.shape(low) else np.shape(high)
        shape = tuple(shape)
        self.low = (
            np.full(shape, low, dtype=dtype)
            if np.isscalar(low)
            else np.asarray(low, dtype)
        )
        self.high = (
            np.full(shape, high, dtype=dtype)
            if np.isscalar(high)
            else np.asarray(high, dtype)
        )
        super().__init__(shape, dtype, seed)

    def is_bounded(self) -> bool:
        return bool(np.all(np.isfinite(self.low)) and np.all(np.isfinite(self.high)))

    def sample(self, mask=None):
        if np.issubdtype(self.dtype, np.integer):
            return self.np_random.integers(self.low, self.high, endpoint=True).astype(
                self.dtype
            )
        low = np.where(np.isfinite(self.low), self.low, -1.0)
        high = np.where(np.isfinite(self.high), self.high, 1.0)
        return self.np_random.uniform(low, high, size=self.shape).astype(self.dtype)

    def contains(self, x) -> bool:
        x = np.asarray(x)
        return x.shape == self.shape and bool(
            np.all(x >= self.low) and np.all(x <= self.high)
        )

    def __repr__(self) -> str:
        return f"Box({self.low.min()}, {self.high.max()}, {self.shape}, {self.dtype})"


class Discrete(Space):
    def __init__(self, n, seed=None, start=0):
        self.n = np.int64(n)
        self.start = np.int64(start)
        super().__init__((), np.int64, seed)

    def sample(self, mask=None):
        return self.start + self.np_random.integers(self.n)

    def contains(self, x) -> bool:
        return int(self.start) <= int(x) < int(self.start + self.n)

    def __repr__(self) -> str:
        return f"Discrete({self.n})"


class MultiDiscrete(Space):
    def __init__(self, nvec, dtype=np.int64, seed=None):
        self.nvec = np.asarray(nvec, dtype=dtype)
        super().__init__(self.nvec.shape, dtype, seed)

    def sample(self, mask=None):
        return self.np_random.integers(self.nvec).astype(self.dtype)

    def contains(self, x) -> bool:
        x = np.asarray(x)
        return x.shape == self.shape and bool(np.all((x >= 0) & (x < self.nvec)))


class MultiBinary(Space):
    def __init__(self, n, seed=None):
        self.n = n
        super().__init__((n,) if np.isscalar(n) else n, np.int8, seed)

    def sample(self, mask=None):
        return self.np_random.integers(0, 2, size=self.shape, dtype=self.dtype)


class Dict(Space):
    def __init__(self, spaces=None, seed=None, **kwargs):
        self.spaces = dict(spaces or {}, **kwargs)
        super().__init__(None, None, seed)

    def sample(self, mask=None):
        return {key: space.sample() for key, space in self.spaces.items()}


def batch_space(space: Space, n: int) -> Space:
    """The space of `n` stacked samples of `space` (a vector env's)."""
    if isinstance(space, Box):
        low = np.repeat(space.low[np.newaxis], n, axis=0)
        high = np.repeat(space.high[np.newaxis], n, axis=0)
        return Box(low, high, dtype=space.dtype)
    if isinstance(space, Discrete):
        return MultiDiscrete(np.full(n, space.n))
    if isinstance(space, MultiDiscrete):
        return MultiDiscrete(np.repeat(space.nvec[np.newaxis], n, axis=0))
    raise NotImplementedError(f"batch_space({space!r})")


def flatten_space(space: Space) -> Box:
    if isinstance(space, Box):
        return Box(space.low.flatten(), space.high.flatten(), dtype=space.dtype)
    raise NotImplementedError(f"flatten_space({space!r})")
