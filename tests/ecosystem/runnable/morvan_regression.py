"""MorvanZhou/PyTorch-Tutorial 301: regression of a noisy parabola."""

REPO = "MorvanZhou/PyTorch-Tutorial"
PATH = "tutorial-contents/301_regression.py"
# The plot turns tensors into numpy arrays, and numpy is not installed here.
EDITS = (("    if t % 5 == 0:\n", "    if False:\n"),)
