"""What a rule reports: a finding at a place, and optionally the fix for it."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Callable

import libcst as cst

SYNTAX_ERROR = "AMP900"


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


ModulePass = Callable[[cst.Module], cst.Module]


@dataclass(frozen=True, eq=False)
class Fix:
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
    code: str
    message: str
    span: Span
    fix: Fix | None = field(default=None, compare=False)

    def portable(self) -> Diagnostic:
        """This finding with its fix described but not carried: no libcst nodes
        or callables, so worker processes and the cache can hand it on."""
        if self.fix is None or not (self.fix.edits or self.fix.module_passes):
            return self
        return replace(
            self,
            fix=Fix(self.fix.applicability, self.fix.message, edits=(), partners=self.fix.partners),
        )
