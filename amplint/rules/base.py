"""What every rule is: a code, a cheap test that every file it can fire on
passes, and a check over the facts of a parsed module."""

from __future__ import annotations

from typing import ClassVar, Iterator

from amplint.analysis import ModuleFacts
from amplint.config import Settings
from amplint.diagnostics import Diagnostic
from amplint.prefilter import SourceClues
from amplint.triggers import TRIGGERS


class Rule:
    code: ClassVar[str]

    def may_fire(self, clues: SourceClues) -> bool:
        """False only when no finding is possible in the file `clues` describe:
        the rule's trigger in amplint.triggers, kept apart so that deciding it
        needs neither libcst nor this module."""
        return TRIGGERS[self.code](clues)

    def check(self, facts: ModuleFacts, settings: Settings) -> Iterator[Diagnostic]:
        raise NotImplementedError
