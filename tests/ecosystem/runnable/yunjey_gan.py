"""yunjey/pytorch-tutorial: a GAN of two MLPs on MNIST (the stub's), two epochs."""

REPO = "yunjey/pytorch-tutorial"
PATH = "tutorials/03-advanced/generative_adversarial_network/main.py"
# The loop reshapes each batch to batch_size rows, so the stub's 256 images
# must split evenly: 100 would leave a batch of 56.
EDITS = (("batch_size = 100\n", "batch_size = 32\n"),)
STEPS = 16  # iterations (a discriminator step and a generator step count as one)
# The discriminator ends in nn.Sigmoid and trains with nn.BCELoss: amplint
# declines float16 (the CUDA default's dtype too) and says why.
_FINDING = "takes probabilities"
DECLINED = {"default": _FINDING, "fp16": _FINDING}
