"""How the torch.amp code amplint writes is spelled for the oldest torch the
project supports (target-torch, which a project declares with `torch>=X`).

torch 2.3 made the GradScaler device-generic (``torch.amp.GradScaler("cuda")``)
and 1.10 made autocast so (``torch.autocast("cuda", dtype=...)``).  Before
them the same objects were CUDA's own, ``torch.cuda.amp.GradScaler()`` (1.6)
and ``torch.cuda.amp.autocast()`` (1.6, float16 only until 1.10).  A fix for a
project that supports torch 1.8 writes what torch 1.8 has, as pyupgrade writes
what the target Python has: the older spelling still runs on every later torch
(with a FutureWarning since 2.4, which AMP201 leaves alone below 2.3 for the
same reason).

Each writer takes the device as Python (`'"cuda"'`, or an expression reading
the script's device) and the arguments after it; `obstacle` says why a
combination has no spelling at that floor.
"""

from __future__ import annotations

from typing import Iterable

from amplint.analysis.device import shown_types

CUDA_AMP_SINCE = (1, 6)  # torch.cuda.amp.GradScaler, torch.cuda.amp.autocast
AUTOCAST_SINCE = (1, 10)  # torch.autocast(device_type, dtype=...)
SCALER_SINCE = (2, 3)  # torch.amp.GradScaler(device)


def obstacle(
    target: tuple[int, int],
    target_shown: str,
    device_types: Iterable[str],
    dtype: str,
    scales: bool,
) -> str | None:
    """Why no autocast (and, where `scales`, GradScaler) for `device_types` in
    `dtype` can be written for torch `target`, or None.  A device that may be
    the CPU counts as CUDA here: the code written turns itself off there
    (`enabled=device != "cpu"`)."""
    types = set(device_types) - {"cpu"} if "cuda" in device_types else set(device_types)
    if target < CUDA_AMP_SINCE:
        return f"torch.cuda.amp needs torch 1.6, above target-torch {target_shown}"
    if scales and target < SCALER_SINCE and types != {"cuda"}:
        return (
            f"a GradScaler for {shown_types(types)} needs torch 2.3 (torch.amp.GradScaler), above "
            f"target-torch {target_shown}; before it only CUDA had one"
        )
    if target < AUTOCAST_SINCE and (types != {"cuda"} or dtype != "float16"):
        return (
            f"autocast for {shown_types(types)} in {dtype} needs torch 1.10 "
            f"(torch.autocast), above target-torch {target_shown}"
        )
    return None


def grad_scaler(torch: str, target: tuple[int, int], device: str, arguments: Iterable[str]) -> str:
    """`torch.amp.GradScaler(device, *arguments)`, or CUDA's own before 2.3
    (`obstacle` has made sure the device is CUDA's then)."""
    rest = list(arguments)
    if target < SCALER_SINCE:
        return f"{torch}.cuda.amp.GradScaler({', '.join(rest)})"
    return f"{torch}.amp.GradScaler({', '.join([device, *rest])})"


def autocast(
    torch: str, target: tuple[int, int], device: str, dtype: str | None, arguments: Iterable[str]
) -> str:
    """`torch.autocast(device, dtype=dtype, *arguments)` (no dtype where None:
    autocast's own), or CUDA's own float16 autocast before 1.10."""
    rest = list(arguments)
    if target < AUTOCAST_SINCE:
        return f"{torch}.cuda.amp.autocast({', '.join(rest)})"
    dtype_argument = [f"dtype={dtype}"] if dtype is not None else []
    return f"{torch}.autocast({', '.join([device, *dtype_argument, *rest])})"
