"""yunjey/pytorch-tutorial: a VAE on MNIST (the stub's); as is."""

REPO = "yunjey/pytorch-tutorial"
PATH = "tutorials/03-advanced/variational_autoencoder/main.py"
STEPS = 12  # six epochs of two batches, each ending in its sampling pass
# The decoder ends in F.sigmoid and the loss is F.binary_cross_entropy:
# amplint declines float16 (the CUDA default's dtype too) and says why.
_FINDING = "takes probabilities"
DECLINED = {"default": _FINDING, "fp16": _FINDING}
