"""What in a module's own code float16 cannot carry, whatever writes the AMP:
AMP001's rewrite and the framework switches (AMP002-AMP006) alike decline
float16 there and say why; bfloat16, with float32's range, still goes.

The module's code is read as text with comments and strings blanked
(analysis/code_text.py): a fill value, a Gram matrix.  Gradients taken in the
forward pass are found in the code itself (analysis/forward.py).
"""

from __future__ import annotations

import re
from functools import lru_cache

# `masked_fill(mask, -1e10)`: a fill value float16 cannot hold (its largest is
# 65504) raises once the scores it fills are float16 under autocast.
_FILL_VALUE = re.compile(r"masked_fill_?\([^()]*,\s*(-?\s*\d[\d.]*(?:[eE][+-]?\d+)?)\s*\)")
FLOAT16_MAX = 65504.0
# Gram matrices of style transfer sum products over whole feature maps: in
# float16 they overflow to inf, every step is skipped and nothing trains.
_GRAM = re.compile(r"\bgram(?:_matrix|\b)", re.I)
# The same computed without the word: a feature map reshaped to (channels,
# pixels) by a statement of its own (`f = f.view(c, h * w)`) times its own
# transpose (`torch.mm(f, f.t())`).  A product of an embedding with itself
# (SimCLR's similarities of normalised vectors) is no such reshape, and small.
_SELF_PRODUCT = re.compile(
    r"(?:\b(?:torch\.)?(?:mm|bmm|matmul)\(\s*(?P<a>\w+)\s*,\s*(?P=a)"
    r"|\b(?P<b>\w+)\s*@\s*(?P=b)"
    r"|\b(?P<c>\w+)\.(?:mm|bmm|matmul)\(\s*(?P=c))"
    r"\s*\.\s*(?:t\(\s*\)|T\b|mT\b|transpose\([^()]*\))"
)


def _gram_product(text: str) -> str | None:
    """The name of the first reshaped feature map multiplied by its own transpose."""
    for match in _SELF_PRODUCT.finditer(text):
        name = match.group("a") or match.group("b") or match.group("c")
        reshaped = rf"^[ \t]*{name}\s*=\s*[\w.]+\.(?:view|reshape)\((?:[^()\n]|\([^()\n]*\))*\)\s*$"
        if re.search(reshaped, text, re.M):
            return name
    return None


@lru_cache(maxsize=16)
def float16_obstacle(text: str) -> str | None:
    """What in the module's own code float16 autocast would break, or None;
    `text` is code only (comments and strings blanked: analysis/code_text.py).
    Asked once per step, answered once per module."""
    for match in _FILL_VALUE.finditer(text):
        try:
            value = float(match.group(1).replace(" ", ""))
        except ValueError:
            continue
        if abs(value) > FLOAT16_MAX:
            return (
                f"`masked_fill(..., {match.group(1)})` cannot hold its value in float16 and "
                "raises under autocast: fill with `torch.finfo(x.dtype).min`, or use "
                "`--dtype bfloat16`"
            )
    feature_map = _gram_product(text)
    if feature_map is not None or _GRAM.search(text):
        spelled = f" (`{feature_map}` times its own transpose)" if feature_map else ""
        return (
            f"a Gram matrix{spelled} sums products over whole feature maps and overflows "
            "float16 (every step skipped): compute it in float32, or use `--dtype bfloat16`"
        )
    return None
