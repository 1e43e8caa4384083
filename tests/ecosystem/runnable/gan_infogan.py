"""eriklindernoren/PyTorch-GAN infogan: an InfoGAN (categorical and continuous
codes) on MNIST (the stub's), as is."""

REPO = "eriklindernoren/PyTorch-GAN"
PATH = "implementations/infogan/infogan.py"
# --img_size 16: float16 convolutions are slow on a CPU without float16 kernels
# (over ten seconds a step at the default 32).
ARGV = ("--n_epochs", "1", "--batch_size", "16", "--img_size", "16")
STEPS = 12  # iterations (of sixteen in the epoch): generator, discriminator and info steps
