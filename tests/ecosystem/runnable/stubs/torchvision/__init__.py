"""A stand-in for torchvision in the runnable subset (tests/ecosystem_runnable.py):
the few datasets, transforms and models the adapted scripts use, over small
synthetic tensors.  torchvision itself is not installed where the tests run,
and the real datasets would have to be downloaded."""

from . import datasets, models, transforms, utils

__version__ = "0.0+stub"
__all__ = ["datasets", "models", "transforms", "utils"]
