"""eriklindernoren/PyTorch-GAN stargan: StarGAN (a conditional ResNet generator,
a WGAN-GP critic with an attribute head) on small generated CelebA stand-ins,
at 64 pixels (the least the critic's six halvings allow) with one residual block."""

import random

REPO = "eriklindernoren/PyTorch-GAN"
PATH = "implementations/stargan/stargan.py"
# --n_cpu 0: batches load in the script's process.
ARGV = (
    "--n_epochs", "1", "--batch_size", "2", "--img_height", "64", "--img_width", "64",
    "--residual_blocks", "1", "--n_cpu", "0",
)


def _ppm(seed: int, size: int = 4) -> str:
    """A `size`-pixel square of random colours as a plain-text PPM (P3) image,
    which PIL opens by its content, whatever the file's name says."""
    rng = random.Random(seed)
    pixels = " ".join(str(rng.randrange(256)) for _ in range(size * size * 3))
    return f"P3\n{size} {size}\n255\n{pixels}\n"


# img_align_celeba's place.  The dataset keeps the last 2,000 images (in name
# order) for validation and trains on those before them: 2,016 images train on 16.
_NAMES = [f"{index:06d}.jpg" for index in range(2016)]
_ATTRIBUTES = ["Black_Hair", "Blond_Hair", "Brown_Hair", "Male", "Young"]
_LABELS = random.Random(0)
FILES = {f"data/img_align_celeba/{name}": _ppm(seed) for seed, name in enumerate(_NAMES)}
FILES["data/img_align_celeba/list_attr_celeba.txt"] = "\n".join(
    [str(len(_NAMES)), " ".join(_ATTRIBUTES)]
    + [
        " ".join([name] + [_LABELS.choice(("1", "-1")) for _ in _ATTRIBUTES])
        for name in _NAMES
    ]
) + "\n"
STEPS = 8  # iterations: a critic step each, a generator step every fifth (its --n_critic)
# The gradient penalty takes gradients inside the forward pass, which a
# GradScaler would leave scaled: amplint declines float16 (the default's CUDA
# float16 too), and says why.
_FINDING = "takes gradients inside the forward pass"
DECLINED = {"default": _FINDING, "fp16": _FINDING}
