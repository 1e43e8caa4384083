"""Synthetic datasets under torchvision's names and signatures.

MNIST and CIFAR10 hold a few fixed random images (the same in every process,
whatever the global seed) as `data` and `targets`, laid out as torchvision lays
them out.  An item is a float CHW tensor in [0, 1]: torchvision's transforms
take such a tensor as they take a PIL image, and `transforms.ToTensor` passes
it through."""

from __future__ import annotations

from typing import Callable, Optional

import torch
from torch.utils.data import Dataset

Transform = Optional[Callable]


class _Images(Dataset):
    def __init__(self, transform: Transform, target_transform: Transform) -> None:
        self.transform = transform
        self.target_transform = target_transform

    def _item(self, index: int) -> tuple[torch.Tensor, int]:
        raise NotImplementedError

    def __getitem__(self, index: int):
        image, target = self._item(index)
        if self.transform is not None:
            image = self.transform(image)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return image, target


def _random_images(
    size: int, shape: tuple[int, ...], seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """`size` uint8 images of `shape` and labels below 10."""
    generator = torch.Generator().manual_seed(seed)
    data = torch.randint(0, 256, (size, *shape), generator=generator, dtype=torch.uint8)
    return data, torch.randint(0, 10, (size,), generator=generator)


class _StoredImages(_Images):
    """A few fixed random images of `SHAPE` (torchvision's layout of `data`)."""

    SHAPE: tuple[int, ...] = ()

    def __init__(
        self,
        root: str,
        train: bool = True,
        transform: Transform = None,
        target_transform: Transform = None,
        download: bool = False,
    ) -> None:
        super().__init__(transform, target_transform)
        self.train = train
        self.data, self.targets = _random_images(256 if train else 64, self.SHAPE, int(train))

    def __len__(self) -> int:
        return len(self.data)


class MNIST(_StoredImages):
    SHAPE = (28, 28)

    def _item(self, index: int) -> tuple[torch.Tensor, int]:
        return self.data[index].unsqueeze(0).float() / 255, int(self.targets[index])

    # The names torchvision kept from its first releases; tutorials still use them.
    @property
    def train_data(self) -> torch.Tensor:
        return self.data

    @property
    def train_labels(self) -> torch.Tensor:
        return self.targets

    test_data, test_labels = train_data, train_labels


class CIFAR10(_StoredImages):
    SHAPE = (32, 32, 3)

    def _item(self, index: int) -> tuple[torch.Tensor, int]:
        return self.data[index].permute(2, 0, 1).float() / 255, int(self.targets[index])


class FakeData(_Images):
    """torchvision's own synthetic dataset.  Items are made when asked for, so
    `size` may be ImageNet's."""

    def __init__(
        self,
        size: int = 1000,
        image_size: tuple[int, int, int] = (3, 224, 224),
        num_classes: int = 10,
        transform: Transform = None,
        target_transform: Transform = None,
        random_offset: int = 0,
    ) -> None:
        super().__init__(transform, target_transform)
        self.size, self.image_size, self.num_classes = size, image_size, num_classes
        self.random_offset = random_offset

    def __len__(self) -> int:
        return self.size

    def _item(self, index: int) -> tuple[torch.Tensor, int]:
        generator = torch.Generator().manual_seed(index + self.random_offset)
        image = torch.rand(self.image_size, generator=generator)
        return image, int(torch.randint(0, self.num_classes, (1,), generator=generator))


class CelebA(_Images):
    """CelebA's aligned faces (3 x 218 x 178) with their 40 binary attributes as
    the target; 256 images, made when asked for, whatever the split."""

    def __init__(
        self,
        root: str,
        split: str = "train",
        target_type: str = "attr",
        transform: Transform = None,
        target_transform: Transform = None,
        download: bool = False,
    ) -> None:
        super().__init__(transform, target_transform)
        self.split, self.target_type = split, target_type

    def __len__(self) -> int:
        return 256

    def _item(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(index)
        image = torch.rand((3, 218, 178), generator=generator)
        return image, torch.randint(0, 2, (40,), generator=generator)
