"""Classes of failure that `make shapes` found and that are still open.

Each names the class key (tests/shapes/shrink.py), the idiom that causes it (a
family of tests/shapes/grammar.py and its value), and the shrunk shape that
shows it.  A failure is expected only in a program with that idiom: the suite
fails on any other, and on an open class that no longer fails, so this list
can only shrink by fixing what it names.
"""

from __future__ import annotations

from dataclasses import dataclass

from tests.shapes.grammar import Shape


@dataclass(frozen=True)
class OpenClass:
    key: str
    family: str
    value: str
    shrunk: Shape
    why: str


OPEN: list[OpenClass] = [
    OpenClass(
        "silent FP32 step: no finding on _",
        "placement",
        "helper_backward",
        Shape(placement="helper_backward"),
        "a backward in a helper method (`optimize_parameters` -> `backward_G`) is no step "
        "for analysis/steps.py: the block with the optimizer step has no backward",
    ),
    OpenClass(
        "silent FP32 step: no finding on _",
        "placement",
        "inner_accumulation",
        Shape(placement="inner_accumulation"),
        "an inner accumulation loop holds the backward, its parent the step: neither "
        "block has both",
    ),
    OpenClass(
        "rewrite crashed: TypeError: Got unsupported ScalarType BFloat16",
        "after",
        "numpy_in_loop",
        Shape(after="numpy_in_loop"),
        "an output of the autocast region reaches `.numpy()`, which has no bfloat16",
    ),
]


def expected(key: str, shape: Shape) -> bool:
    """Whether a failure of class `key` in a program of `shape` is an open one."""
    return any(c.key == key and getattr(shape, c.family) == c.value for c in OPEN)


def unexpected(key: str, shape: Shape) -> bool:
    return not expected(key, shape)
