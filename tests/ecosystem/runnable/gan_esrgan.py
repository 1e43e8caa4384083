"""eriklindernoren/PyTorch-GAN esrgan: ESRGAN (an RRDB generator, a relativistic
discriminator, a VGG-19 content loss: the stub's narrow, untrained VGG-19) on a
few small generated images, 8 pixels up to 32, with one residual block."""

import random

REPO = "eriklindernoren/PyTorch-GAN"
PATH = "implementations/esrgan/esrgan.py"
# --warmup_batches 2: two pixel-loss-only generator steps (500 by default), then
# the adversarial steps; --n_cpu 0: batches load in the script's process.
ARGV = (
    "--n_epochs", "1", "--batch_size", "2", "--hr_height", "32", "--hr_width", "32",
    "--residual_blocks", "1", "--warmup_batches", "2", "--n_cpu", "0",
)


def _ppm(seed: int, size: int = 8) -> str:
    """A `size`-pixel square of random colours as a plain-text PPM (P3) image,
    which PIL opens like any image file."""
    rng = random.Random(seed)
    pixels = " ".join(str(rng.randrange(256)) for _ in range(size * size * 3))
    return f"P3\n{size} {size}\n255\n{pixels}\n"


# img_align_celeba's place: 16 images, eight batches.
FILES = {f"data/img_align_celeba/{index:06d}.ppm": _ppm(index) for index in range(16)}
STEPS = 8  # iterations: two generator steps, then a generator and a discriminator step each
