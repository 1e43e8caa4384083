"""eriklindernoren/PyTorch-GAN began: a boundary-equilibrium GAN (an
autoencoder discriminator) on MNIST (the stub's)."""

REPO = "eriklindernoren/PyTorch-GAN"
PATH = "implementations/began/began.py"
# --img_size 16: float16 convolutions are slow on a CPU without float16 kernels
# (several seconds a step at the default 32).
ARGV = ("--n_epochs", "1", "--batch_size", "16", "--img_size", "16")
EDITS = (
    # The convergence measure, printed after the steps, indexes a 0-dim tensor,
    # which PyTorch 0.4 and later refuse.
    ("torch.abs(diff)).data[0]", "torch.abs(diff)).item()"),
)
STEPS = 12  # iterations (of sixteen in the epoch), a generator and a discriminator step each
