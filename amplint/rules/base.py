"""What every rule is: a code, a test on the raw text that every file it can fire
on passes, and a check over the facts of a parsed module."""

from __future__ import annotations

import re
from typing import ClassVar, Iterator

from amplint.analysis import ModuleFacts
from amplint.config import Settings
from amplint.diagnostics import Diagnostic

# Between a receiver, the dot, the method name and its parenthesis Python allows
# spaces, line continuations and, inside brackets, newlines and comments.  A
# comment runs to its line break, so each character has one way to match:
# `#[^\n]*` alone would let a line of `####` split into 2**n comments.
_GAP = r"(?:[\s\\]|#[^\r\n]*[\r\n])*"


def mentions_method_call(text: str, method: str) -> bool:
    """Whether `text` may call `.method(...)`, however the call is spaced."""
    if f".{method}(" in text:
        return True
    return method in text and re.search(rf"\.{_GAP}{method}{_GAP}\(", text) is not None


class Rule:
    code: ClassVar[str]

    def may_fire(self, text: str) -> bool:
        """False only when no finding is possible in `text`.

        Called on every file before it is parsed, and a file no selected rule
        may fire on is never parsed, so this must be cheap (substring tests
        first) and must never be False for a file with a finding: the suite
        checks that on every fixture and catalogue example.
        """
        raise NotImplementedError

    def check(self, facts: ModuleFacts, settings: Settings) -> Iterator[Diagnostic]:
        raise NotImplementedError
