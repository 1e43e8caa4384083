"""eriklindernoren/PyTorch-GAN cgan: a class-conditional GAN on MNIST (the
stub's), as is."""

REPO = "eriklindernoren/PyTorch-GAN"
PATH = "implementations/cgan/cgan.py"
ARGV = ("--n_epochs", "1", "--batch_size", "16")
STEPS = 12  # iterations (of sixteen in the epoch), a generator and a discriminator step each
