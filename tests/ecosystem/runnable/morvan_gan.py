"""MorvanZhou/PyTorch-Tutorial 406: a GAN learning to paint parabolas; as is."""

REPO = "MorvanZhou/PyTorch-Tutorial"
PATH = "tutorial-contents/406_GAN.py"
# Every 50 steps the plot reads `G_paintings.data.numpy()`, which is bfloat16
# under bfloat16 autocast and NumPy cannot hold.
DECLINED = {"bf16": "hands NumPy a tensor the forward pass computes"}
