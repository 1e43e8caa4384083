"""torch's gradient clips, read for their threshold.

On gradients still multiplied by the loss scale S, `clip_grad_norm_(params,
max_norm * S)` clips exactly as `clip_grad_norm_(params, max_norm)` clips the
unscaled ones (the norm and the threshold both carry S), and returns S times
the unscaled norm; `clip_grad_value_(params, v * S)` likewise.  That is how a
clip that runs on every micro-step of gradient accumulation keeps its meaning
under a GradScaler, which may unscale only once per optimizer step.
"""

from __future__ import annotations

import libcst as cst

from amplint.analysis.imports import dotted_name
from amplint.analysis.statements import method_name, positional_args
from amplint.analysis.visitor import descendants

# The keyword of each clip's threshold; it comes after the parameters in the
# function, first in FSDP's method.
_THRESHOLDS = {
    "clip_grad_norm_": "max_norm",
    "clip_grad_norm": "max_norm",
    "clip_grad_value_": "clip_value",
}


def clip_threshold(call: cst.Call, method: bool) -> cst.Arg | None:
    """The argument holding the threshold of `call`, torch's clip function
    (`method` False: `torch.nn.utils.clip_grad_norm_(params, 1.0)`) or a
    wrapper's clip method (FSDP's `model.clip_grad_norm_(1.0)`); None where it
    cannot be told."""
    keyword = _THRESHOLDS.get(_clip_name(call) or "")
    if keyword is None:
        return None
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == keyword:
            return arg
    positional = positional_args(call)
    index = 0 if method else 1
    return positional[index] if len(positional) > index else None


def returns_norm(call: cst.Call) -> bool:
    """Whether the clip returns the gradients' total norm (clip_grad_value_ returns None)."""
    return (_clip_name(call) or "").startswith("clip_grad_norm")


def scale_aware(threshold: cst.Arg, scaler: str) -> bool:
    """Whether a clip's threshold reads `scaler`'s scale (`max_norm *
    scaler.get_scale()`)."""
    return any(
        isinstance(node, cst.Call)
        and method_name(node) == "get_scale"
        and dotted_name(node.func.value) == scaler
        for node in descendants(threshold.value)
    )


def _clip_name(call: cst.Call) -> str | None:
    if isinstance(call.func, cst.Name):
        return call.func.value
    return method_name(call)
