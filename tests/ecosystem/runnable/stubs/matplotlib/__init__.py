"""A stand-in for matplotlib in the runnable subset: plotting draws nothing.
matplotlib is not installed where the tests run, and they run headless."""

from __future__ import annotations

from typing import Callable


def _nothing(*args, **kwargs) -> None:
    return None


def __getattr__(name: str) -> Callable[..., None]:
    """`matplotlib.use`, `from matplotlib import cm`, ...: all do nothing."""
    if name.startswith("__"):
        raise AttributeError(name)
    return _nothing
