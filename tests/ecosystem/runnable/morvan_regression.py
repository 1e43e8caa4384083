"""MorvanZhou/PyTorch-Tutorial 301: regression of a noisy parabola."""

REPO = "MorvanZhou/PyTorch-Tutorial"
PATH = "tutorial-contents/301_regression.py"
# The plot turns tensors into numpy arrays, and numpy is not installed here.
EDITS = (("    if t % 5 == 0:\n", "    if False:\n"),)
# That plot reads `prediction.data.numpy()`, which is bfloat16 under bfloat16
# autocast and NumPy cannot hold: amplint declines bfloat16 for the script as
# written (the edit above only stops the plot here), and says why.
DECLINED = {"bf16": "hands NumPy a tensor the forward pass computes"}
