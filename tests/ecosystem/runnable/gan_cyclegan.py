"""eriklindernoren/PyTorch-GAN cyclegan: CycleGAN (two ResNet generators, two
PatchGAN discriminators) on a few small generated images, at 32 pixels with one
residual block."""

import random

REPO = "eriklindernoren/PyTorch-GAN"
PATH = "implementations/cyclegan/cyclegan.py"
# --n_cpu 0: batches load in the script's process; --decay_epoch 0: the linear
# decay must start before the one epoch ends (the script asserts it).
ARGV = (
    "--n_epochs", "1", "--decay_epoch", "0", "--img_height", "32", "--img_width", "32",
    "--n_residual_blocks", "1", "--n_cpu", "0",
)


def _ppm(seed: int, size: int = 16) -> str:
    """A `size`-pixel square of random colours as a plain-text PPM (P3) image,
    which PIL opens like any image file."""
    rng = random.Random(seed)
    pixels = " ".join(str(rng.randrange(256)) for _ in range(size * size * 3))
    return f"P3\n{size} {size}\n255\n{pixels}\n"


# monet2photo's place: unaligned A and B images, for training and for the samples.
_COUNTS = {"train": 12, "test": 2}
FILES = {
    f"data/monet2photo/{mode}/{domain}/{index}.ppm": _ppm(seed)
    for seed, (mode, domain, index) in enumerate(
        (mode, domain, index)
        for mode, count in _COUNTS.items()
        for domain in "AB"
        for index in range(count)
    )
}
STEPS = 8  # iterations: a generator step and a step of each discriminator
