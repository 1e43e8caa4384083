"""What a rule reports: a finding at a place, and optionally the fix for it;
and what a run reports of one file.  Light on purpose: the cache, the reports
and the CLI read these where libcst is never imported."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from amplint.triggers import SYNTAX_ERROR

if TYPE_CHECKING:
    import libcst as cst

    from amplint.files import SourceFile

__all__ = ["SYNTAX_ERROR", "Applicability", "Span", "Edit", "ModulePass", "Fix", "Diagnostic"]
__all__ += ["FileReport", "is_applicable", "LINE_BREAK", "source_lines"]


# Where Python's tokenizer, and so libcst and a Span, end a line (not
# str.splitlines, which also breaks at form feeds and other separators).
LINE_BREAK = re.compile(r"\r\n|\r|\n")
# What str.splitlines also breaks at, which Python does not end a line with
# (a form feed, GNU style's page break, is the one source files hold).
_OTHER_BREAKS = re.compile("[\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
_LINE_WITH_END = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")


def source_lines(text: str, keepends: bool = False) -> list[str]:
    """`text`'s lines as Python numbers them (ended by \\r\\n, \\r or \\n), as
    str.splitlines gives them where the text holds no other break it knows."""
    if _OTHER_BREAKS.search(text) is None:
        return text.splitlines(keepends)
    if keepends:
        return _LINE_WITH_END.findall(text)
    lines = LINE_BREAK.split(text)
    if lines[-1] == "":
        lines.pop()
    return lines


class Applicability(str, enum.Enum):
    SAFE = "safe"  # keeps behaviour: applied by `fix`
    UNSAFE = "unsafe"  # may change numerics: applied only with --unsafe-fixes


@dataclass(frozen=True)
class Span:
    """1-based lines and columns; the end column points just past the node."""

    line: int
    column: int
    end_line: int
    end_column: int
    # In a notebook: the cell (numbered as editors number all cells, from 1);
    # the lines are then the cell's own.
    cell: int | None = None


@dataclass(frozen=True, eq=False)
class Edit:
    """Replace `target` (a node of the tree the rule saw) by ``rewrite(node)``.

    `rewrite` receives the target with its children already rewritten by other
    edits, so edits on nested nodes compose instead of clobbering each other.
    """

    target: cst.CSTNode
    rewrite: Callable[[cst.CSTNode], cst.CSTNode]


ModulePass = Callable[["cst.Module"], "cst.Module"]


@dataclass(frozen=True, eq=False)
class Fix:
    """What a finding's fix does: its edits, its passes and the files it rewrites with it."""

    applicability: Applicability
    message: str  # what the fix does, in a few words: shown by `fix --apply`
    edits: tuple[Edit, ...]
    # Whole-module passes run once after all edits of a round, e.g. adding an
    # import the edits need or removing the ones they left unused.
    module_passes: tuple[ModulePass, ...] = ()
    # Other files (paths) the same change rewrites, each by its own fix: the
    # runner writes them all or none (an apex.amp migration spans a program).
    partners: tuple[str, ...] = ()


@dataclass(frozen=True)
class Diagnostic:
    """A finding: a code, a message, where it is and the fix, if any."""

    code: str
    message: str
    span: Span
    fix: Fix | None = field(default=None, compare=False)
    # The lines of the code the finding is about, when wider than its span (a
    # training step flagged on its backward): a `# noqa` naming the code on any
    # of them silences it too (amplint.noqa).
    about_lines: tuple[int, int] | None = field(default=None, compare=False)

    def portable(self) -> Diagnostic:
        """This finding with its fix described but not carried: no libcst nodes
        or callables, so worker processes and the cache can hand it on."""
        if self.fix is None or not (self.fix.edits or self.fix.module_passes):
            return self
        return replace(
            self,
            fix=Fix(self.fix.applicability, self.fix.message, edits=(), partners=self.fix.partners),
        )


def is_applicable(diagnostic: Diagnostic, unsafe: bool) -> bool:
    fix = diagnostic.fix
    return fix is not None and (unsafe or fix.applicability is Applicability.SAFE)


@dataclass
class FileReport:
    """What a run found and did in one file."""

    path: Path
    diagnostics: list[Diagnostic] = field(default_factory=list)  # what remains
    applied: list[Diagnostic] = field(default_factory=list)  # what fix carried out
    source: SourceFile | None = None
    fixed_text: str | None = None  # set only when fixing changed something
    error: str | None = None
    # What `check` reports on the source as read: the result worth caching.
    # None when it was not computed (an error, or the prefilter ruled it out).
    found: list[Diagnostic] | None = None
    # Asked for by `--output-format full`: each fixable finding's fix carried
    # out alone, as the code it gives (for a notebook, its cells as one module).
    previews: dict[Diagnostic, str] = field(default_factory=dict)
    # The other project modules the findings came from (path -> sha256), so a
    # cached result is served only while they are unchanged.
    depends_on: dict[str, str] = field(default_factory=dict)
