"""MorvanZhou/PyTorch-Tutorial 304: a regression trained before it is saved; as
is, since the run stops (after STEPS steps) before the plots, which need numpy."""

REPO = "MorvanZhou/PyTorch-Tutorial"
PATH = "tutorial-contents/304_save_reload.py"
