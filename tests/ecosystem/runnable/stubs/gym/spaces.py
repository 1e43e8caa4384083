"""gym.spaces for the gym stub: gymnasium's (the stub's), but Discrete samples
Python ints, as old gym's did."""

from gymnasium.spaces import Box, Dict, MultiBinary, MultiDiscrete, Space
from gymnasium.spaces import Discrete as _Discrete


class Discrete(_Discrete):
    def sample(self, mask=None):
        return int(super().sample())


__all__ = ["Box", "Dict", "Discrete", "MultiBinary", "MultiDiscrete", "Space"]
