"""eriklindernoren/PyTorch-GAN acgan: an auxiliary-classifier GAN on MNIST (the
stub's), as is."""

REPO = "eriklindernoren/PyTorch-GAN"
PATH = "implementations/acgan/acgan.py"
ARGV = ("--n_epochs", "1", "--batch_size", "16")
STEPS = 12  # iterations (of sixteen in the epoch), a generator and a discriminator step each
# The discriminator's validity head ends in nn.Sigmoid() and is trained with
# nn.BCELoss: amplint declines float16 (the default's CUDA float16 too), and says
# why.  bfloat16 too: the accuracy it prints hands NumPy the class head's
# nn.Softmax output, which CPU autocast leaves in bfloat16.  Only the original runs.
DECLINED = {
    "default": "takes probabilities",
    "bf16": "hands NumPy a tensor the forward pass computes",
    "fp16": "takes probabilities",
}
