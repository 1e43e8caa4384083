"""Names amplint gives what it adds (a GradScaler, a dtype), free where they go.

Pure text: the project model (which never imports libcst) picks the same name
for a module's scaler as the rewrite of that module does.
"""

from __future__ import annotations

import re
from typing import Sequence

SCALER_NAMES = ("scaler", "grad_scaler", "amp_scaler")
DTYPE_NAMES = ("amp_dtype", "autocast_dtype")  # where the dtype is chosen at run time


def free_name(candidates: Sequence[str], text: str, prefix: str = "") -> str:
    """The first of `candidates` that `text` does not spell (after `prefix`)."""
    for name in candidates:
        if not re.search(rf"(?<![\w.]){re.escape(prefix + name)}\b", text):
            return name
    return candidates[-1] + "_"
