"""torchvision.utils: the image grid and file writers training scripts call
to show samples.  The grid is computed (a script may use it); writing a file
is skipped, since a sample image is no result of training."""

from __future__ import annotations

import torch


def make_grid(tensor, nrow: int = 8, padding: int = 2, normalize: bool = False, **_) -> torch.Tensor:
    """The images of `tensor` (N, C, H, W), `nrow` to a row, as one CHW image."""
    if isinstance(tensor, (list, tuple)):
        tensor = torch.stack(list(tensor))
    tensor = tensor.detach().float()
    if tensor.dim() == 3:
        tensor = tensor.unsqueeze(0)
    if normalize:
        low, high = tensor.min(), tensor.max()
        tensor = (tensor - low) / (high - low).clamp(min=1e-5)
    count, channels, height, width = tensor.shape
    columns = min(nrow, count)
    rows = (count + columns - 1) // columns
    grid = tensor.new_zeros(
        channels, rows * (height + padding) + padding, columns * (width + padding) + padding
    )
    for index in range(count):
        row, column = divmod(index, columns)
        top, left = row * (height + padding) + padding, column * (width + padding) + padding
        grid[:, top : top + height, left : left + width] = tensor[index]
    return grid


def save_image(tensor, fp, **kwargs) -> None:
    """Computes the grid `save_image` would write, and writes nothing."""
    make_grid(tensor, **{k: v for k, v in kwargs.items() if k in ("nrow", "padding", "normalize")})
