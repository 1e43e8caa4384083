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


# Empty: every class found so far is fixed (the note lists them, with
# the fixture each left behind).  A class found and not fixed at once goes here.
OPEN: list[OpenClass] = []


def expected(key: str, shape: Shape) -> bool:
    """Whether a failure of class `key` in a program of `shape` is an open one."""
    return any(c.key == key and getattr(shape, c.family) == c.value for c in OPEN)


def unexpected(key: str, shape: Shape) -> bool:
    return not expected(key, shape)
