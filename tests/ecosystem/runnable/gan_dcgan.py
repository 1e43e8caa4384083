"""eriklindernoren/PyTorch-GAN dcgan: a convolutional GAN on MNIST (the stub's),
as is, at its 32-pixel default."""

REPO = "eriklindernoren/PyTorch-GAN"
PATH = "implementations/dcgan/dcgan.py"
ARGV = ("--n_epochs", "1", "--batch_size", "16")
STEPS = 12  # iterations (of sixteen in the epoch), a generator and a discriminator step each
# The discriminator ends in nn.Sigmoid() and is trained with nn.BCELoss: amplint
# declines float16 (the default's CUDA float16 too), and says why.
DECLINED = {"default": "takes probabilities", "fp16": "takes probabilities"}
