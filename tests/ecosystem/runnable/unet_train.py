"""milesial/Pytorch-UNet train.py: the UNet on 24 generated 32 x 32 images and
their two-class masks (Carvana's layout), with the script's own --amp."""

REPO = "milesial/Pytorch-UNet"
PATH = "train.py"
# A small batch, one epoch of 11 steps (22 training images), the script's AMP on;
# bilinear upsampling, the script's smaller UNet (17 M parameters, not 31 M).
ARGV = ("--epochs", "1", "--batch-size", "2", "--amp", "--bilinear")
EDITS = (
    # wandb is not installed; its run, histograms and images become a mock.
    ("import wandb\n", "from unittest import mock\nwandb = mock.MagicMock()\n"),
    # The torchvision stub has no transforms.functional; the script never uses it.
    ("import torchvision.transforms.functional as TF\n", ""),
)


def _image(number: int) -> str:
    """A 32 x 32 plain-text PPM (P3), which PIL reads as an RGB image."""
    pixels = (
        f"{(x * 8 + number * 5) % 256} {(y * 8) % 256} {(x * y + number) % 256}"
        for y in range(32)
        for x in range(32)
    )
    return "P3\n32 32\n255\n" + "\n".join(pixels) + "\n"


def _mask(number: int) -> str:
    """Its mask, a plain-text PGM (P2): a disc of 255 on 0."""
    values = (
        "255" if (x - 16) ** 2 + (y - 16) ** 2 < (6 + number % 8) ** 2 else "0"
        for y in range(32)
        for x in range(32)
    )
    return "P2\n32 32\n255\n" + "\n".join(values) + "\n"


# Carvana's layout: data/imgs/ID.ext and data/masks/ID_mask.ext.
FILES = {f"data/imgs/{n:02d}.ppm": _image(n) for n in range(24)}
FILES |= {f"data/masks/{n:02d}_mask.pgm": _mask(n) for n in range(24)}
STEPS = 6  # a second a step on one core, with an evaluation every other step
