"""What every rule is: a code, the text that must be present for it to fire, and
a check over the facts of a parsed module."""

from __future__ import annotations

import re
from typing import ClassVar, Iterator

from amplint.analysis import ModuleFacts
from amplint.config import Settings
from amplint.diagnostics import Diagnostic


class Rule:
    code: ClassVar[str]
    # A regex over the file's text: a file it does not match cannot fire the
    # rule, and a file no selected rule's trigger matches is never parsed.
    trigger: ClassVar[re.Pattern[str]]

    def check(self, facts: ModuleFacts, settings: Settings) -> Iterator[Diagnostic]:
        raise NotImplementedError
