"""eriklindernoren/PyTorch-GAN wgan_gp: a Wasserstein GAN with a gradient
penalty on MNIST (the stub's), as is: a critic step each batch, a generator
step every fifth (its default --n_critic)."""

REPO = "eriklindernoren/PyTorch-GAN"
PATH = "implementations/wgan_gp/wgan_gp.py"
ARGV = ("--n_epochs", "1", "--batch_size", "16")
STEPS = 12  # iterations (of sixteen in the epoch)
# The gradient penalty takes gradients inside the forward pass, which a
# GradScaler would leave scaled: amplint declines float16 (the default's CUDA
# float16 too), and says why.
_FINDING = "takes gradients inside the forward pass"
DECLINED = {"default": _FINDING, "fp16": _FINDING}
