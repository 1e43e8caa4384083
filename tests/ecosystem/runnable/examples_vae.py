"""pytorch/examples vae: a VAE on MNIST (the stub's 256 images), two short epochs
with their test passes."""

REPO = "pytorch/examples"
PATH = "vae/main.py"
# --no-accel keeps the model on the CPU where a GPU is present too.
ARGV = ("--epochs", "2", "--batch-size", "32", "--log-interval", "4", "--no-accel")
STEPS = 16  # eight steps an epoch
# The decoder ends in torch.sigmoid and the loss is F.binary_cross_entropy:
# amplint declines float16 (the CUDA default's dtype too) and says why.
_FINDING = "takes probabilities"
DECLINED = {"default": _FINDING, "fp16": _FINDING}
