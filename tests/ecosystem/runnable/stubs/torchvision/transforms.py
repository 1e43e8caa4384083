"""torchvision's transforms on float CHW tensors (what the stub datasets yield):
the geometric ones do what torchvision's do, on the tensor.  ToTensor and
Resize also take a PIL image (what a repository's own image-folder dataset
yields), and hand on a float CHW tensor in [0, 1]."""

from __future__ import annotations

import random
from typing import Callable, Sequence, Union

import torch
import torch.nn.functional as F

Size = Union[int, Sequence[int]]


def _pair(size: Size) -> tuple[int, int]:
    return (size, size) if isinstance(size, int) else (size[0], size[1])


def _tensor(image) -> torch.Tensor:
    """A PIL image as torchvision's ToTensor makes it (float CHW in [0, 1]); a
    tensor as it is."""
    if isinstance(image, torch.Tensor):
        return image
    import numpy

    array = torch.from_numpy(numpy.array(image, dtype=numpy.float32) / 255)
    return array.unsqueeze(0) if array.dim() == 2 else array.permute(2, 0, 1).contiguous()


class Compose:
    def __init__(self, transforms: Sequence[Callable]) -> None:
        self.transforms = list(transforms)

    def __call__(self, image):
        for transform in self.transforms:
            image = transform(image)
        return image


class Lambda:
    def __init__(self, function: Callable) -> None:
        self.function = function

    def __call__(self, image):
        return self.function(image)


class ToTensor:
    """The stub datasets already yield float tensors in [0, 1]; a PIL image
    becomes one."""

    def __call__(self, image) -> torch.Tensor:
        return _tensor(image)


class Normalize:
    def __init__(self, mean: Sequence[float], std: Sequence[float], inplace: bool = False) -> None:
        self.mean = torch.tensor(mean).view(-1, 1, 1)
        self.std = torch.tensor(std).view(-1, 1, 1)

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        # torchvision computes in the image's dtype, whatever the mean's (a NumPy float64 array).
        return (image - self.mean.to(image.dtype)) / self.std.to(image.dtype)


class Pad:
    def __init__(self, padding: int, fill: float = 0) -> None:
        self.padding, self.fill = padding, fill

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        return F.pad(image, (self.padding,) * 4, value=self.fill)


class RandomCrop:
    def __init__(self, size: Size, padding: int = 0) -> None:
        self.size, self.padding = _pair(size), padding

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        if self.padding:
            image = F.pad(image, (self.padding,) * 4)
        height, width = self.size
        top = random.randint(0, image.shape[-2] - height)
        left = random.randint(0, image.shape[-1] - width)
        return image[..., top : top + height, left : left + width]


class CenterCrop:
    def __init__(self, size: Size) -> None:
        self.size = _pair(size)

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        height, width = self.size
        top = (image.shape[-2] - height) // 2
        left = (image.shape[-1] - width) // 2
        return image[..., top : top + height, left : left + width]


class Resize:
    """Bilinear, whatever `interpolation` asks for."""

    def __init__(self, size: Size, interpolation=None) -> None:
        self.size = size

    def __call__(self, image) -> torch.Tensor:
        image = _tensor(image)
        if isinstance(self.size, int):  # the shorter side becomes `size`
            height, width = image.shape[-2:]
            scale = self.size / min(height, width)
            size = (round(height * scale), round(width * scale))
        else:
            size = _pair(self.size)
        return F.interpolate(image.unsqueeze(0), size=size, mode="bilinear").squeeze(0)


class RandomResizedCrop(Resize):
    """A plain resize: the scale and aspect ratio drawn by torchvision do not
    matter for synthetic images."""

    def __init__(self, size: Size) -> None:
        super().__init__(_pair(size))


class RandomHorizontalFlip:
    def __init__(self, p: float = 0.5) -> None:
        self.p = p

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        return image.flip(-1) if random.random() < self.p else image


class RandomApply:
    def __init__(self, transforms: Sequence[Callable], p: float = 0.5) -> None:
        self.transforms, self.p = list(transforms), p

    def __call__(self, image):
        if random.random() < self.p:
            for transform in self.transforms:
                image = transform(image)
        return image


def _gray(image: torch.Tensor) -> torch.Tensor:
    weights = torch.tensor([0.299, 0.587, 0.114]).view(-1, 1, 1)
    return (image * weights).sum(-3, keepdim=True) if image.shape[-3] == 3 else image


class ColorJitter:
    """Brightness, contrast and saturation, each by a random factor in
    [1 - x, 1 + x]; the hue is left as it is."""

    def __init__(
        self, brightness: float = 0, contrast: float = 0, saturation: float = 0, hue: float = 0
    ) -> None:
        self.brightness, self.contrast, self.saturation = brightness, contrast, saturation

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        def factor(amount: float) -> float:
            return random.uniform(max(0.0, 1 - amount), 1 + amount)

        image = image * factor(self.brightness)
        mean = _gray(image).mean()
        image = mean + (image - mean) * factor(self.contrast)
        gray = _gray(image)
        image = gray + (image - gray) * factor(self.saturation)
        return image.clamp(0, 1)


class RandomGrayscale:
    def __init__(self, p: float = 0.1) -> None:
        self.p = p

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        if random.random() < self.p:
            return _gray(image).expand_as(image).clone()
        return image
