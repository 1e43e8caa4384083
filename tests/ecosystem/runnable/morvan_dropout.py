"""MorvanZhou/PyTorch-Tutorial 503: two regressions, one with dropout, trained
side by side in one loop (both forward passes and losses above both
backwards: one autocast block, one GradScaler for both optimizers); as is."""

REPO = "MorvanZhou/PyTorch-Tutorial"
PATH = "tutorial-contents/503_dropout.py"
