"""Part of the tensorboard stub (see tensorboard/__init__.py)."""
