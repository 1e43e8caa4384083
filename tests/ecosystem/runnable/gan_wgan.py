"""eriklindernoren/PyTorch-GAN wgan: a Wasserstein GAN with weight clipping on
MNIST (the stub's), as is: a critic step each batch, a generator step every
fifth (its default --n_critic)."""

REPO = "eriklindernoren/PyTorch-GAN"
PATH = "implementations/wgan/wgan.py"
ARGV = ("--n_epochs", "1", "--batch_size", "16")
STEPS = 12  # iterations (of sixteen in the epoch)
