"""What every rule is: a code, a cheap test that every file it can fire on
passes, and a check over the facts of a parsed module."""

from __future__ import annotations

from typing import ClassVar, Iterator

from amplint.analysis import ModuleFacts
from amplint.config import Settings
from amplint.diagnostics import Diagnostic
from amplint.prefilter import SourceClues


class Rule:
    code: ClassVar[str]

    def may_fire(self, clues: SourceClues) -> bool:
        """False only when no finding is possible in the file `clues` describe.

        Called on every file before it is parsed, and a file no selected rule
        may fire on is never parsed, so this must be cheap (substring tests
        on ``clues.text`` first) and must never be False for a file with a
        finding: the suite checks that on every fixture and catalogue example.
        """
        raise NotImplementedError

    def check(self, facts: ModuleFacts, settings: Settings) -> Iterator[Diagnostic]:
        raise NotImplementedError
