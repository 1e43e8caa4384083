"""What one module's text says about the whole program: where it wraps a
model in FSDP, where it compiles custom kernels.  Each project module is
asked, so each question looks for its words before it parses anything."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from amplint.project.source import ModuleSource, last_name


# One pattern a spelling, each starting with its word: CPython's re looks for
# a literal prefix first, where a leading `\b` or alternation makes it try
# every position (these read every module of the project: ten times slower).
def _word_then(word: str, then: str) -> re.Pattern[str]:
    """`word` (not the end of a longer name), then the pattern `then`."""
    return re.compile(rf"{word}(?<!\w{word}){then}")


_FSDP_WRAPS = [
    _word_then(wrapper, r"\s*\(") for wrapper in ("FullyShardedDataParallel", "FSDP", "fully_shard")
]
_FSDP_MIXED_PRECISION = [
    _word_then("MixedPrecision", r"\s*(?:Policy)?\s*\("),
    _word_then("mixed_precision", r"\s*="),
    _word_then("mp_policy", r"\s*="),
]


@dataclass(frozen=True)
class FsdpUse:
    """Where a module wraps a model in FSDP."""

    path: Path | None  # None for text with no file behind it
    line: int
    mixed_precision: bool  # the same module passes an FSDP mixed-precision policy
    # `fully_shard` (FSDP2): its gradients are DTensors, whose inf check the
    # plain GradScaler already reduces across ranks; FullyShardedDataParallel's
    # flat shards need ShardedGradScaler.
    composable: bool


def fsdp_use_in(text: str, path: Path | None = None) -> FsdpUse | None:
    """Where `text` wraps a model in FSDP (the wrapper called, not only named)."""
    if "FSDP" not in text and "FullyShardedDataParallel" not in text and "fully_shard" not in text:
        return None
    matches = [match for pattern in _FSDP_WRAPS if (match := pattern.search(text)) is not None]
    if not matches:
        return None
    first = min(matches, key=lambda match: match.start())
    return FsdpUse(
        path,
        text.count("\n", 0, first.start()) + 1,
        any(pattern.search(text) is not None for pattern in _FSDP_MIXED_PRECISION),
        first.group().startswith("fully_shard"),
    )


@dataclass(frozen=True)
class CustomKernel:
    """A project module that compiles C++/CUDA kernels when imported
    (`fused = load("fused", sources=[...])`, rosinality's StyleGAN2 ops) and
    has no `custom_fwd`: its autograd Functions hand autocast's float16
    activations and float32 parameters to one kernel, which reads both as one
    type (`data_ptr<scalar_t>()`) and raises."""

    path: Path
    line: int


# A call of `load` or `load_inline`, not their definition (torch's cpp_extension.py).
_LOAD_CALL = re.compile(r"(?<!def )load(?:_inline)?(?:[\s\\]|#[^\r\n]*[\r\n])*\(")


def custom_kernel_in(module: ModuleSource) -> CustomKernel | None:
    """Where `module` compiles kernels on import without `custom_fwd`, or None."""
    if "cpp_extension" not in module.text or "custom_fwd" in module.text:
        return None
    # The compile is a call of `load` or `load_inline`: spelled so before
    # the module is parsed (torch's own cpp_extension.py, which defines them,
    # is 3,000 lines).
    if _LOAD_CALL.search(module.text) is None or module.tree is None:
        return None
    statements = list(module.tree.body)
    for statement in module.tree.body:  # also under a top-level `try:` or `if`
        if isinstance(statement, (ast.Try, ast.If)):
            statements += statement.body
    for statement in statements:
        value = getattr(statement, "value", None)
        if (
            isinstance(statement, (ast.Assign, ast.AnnAssign, ast.Expr))
            and isinstance(value, ast.Call)
            and last_name(value.func) in ("load", "load_inline")
        ):
            return CustomKernel(module.path, statement.lineno)
    return None
