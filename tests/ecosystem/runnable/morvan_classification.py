"""MorvanZhou/PyTorch-Tutorial 302: two Gaussian clusters, classified."""

REPO = "MorvanZhou/PyTorch-Tutorial"
PATH = "tutorial-contents/302_classification.py"
# The plot turns tensors into numpy arrays, and numpy is not installed here.
EDITS = (("    if t % 2 == 0:\n", "    if False:\n"),)
