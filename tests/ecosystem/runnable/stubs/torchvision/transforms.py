"""torchvision's transforms on float CHW tensors (what the stub datasets yield):
the geometric ones do what torchvision's do, on the tensor."""

from __future__ import annotations

import random
from typing import Callable, Sequence, Union

import torch
import torch.nn.functional as F

Size = Union[int, Sequence[int]]


def _pair(size: Size) -> tuple[int, int]:
    return (size, size) if isinstance(size, int) else (size[0], size[1])


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
    """The stub datasets already yield float tensors in [0, 1]."""

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        return image


class Normalize:
    def __init__(self, mean: Sequence[float], std: Sequence[float], inplace: bool = False) -> None:
        self.mean = torch.tensor(mean).view(-1, 1, 1)
        self.std = torch.tensor(std).view(-1, 1, 1)

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        return (image - self.mean) / self.std


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
    def __init__(self, size: Size) -> None:
        self.size = size

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
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
