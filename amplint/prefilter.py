"""What a file reveals before libcst parses it, for rules to rule it out cheaply.

libcst parses at about half a megabyte a second; most files never call
``.backward()`` or reach ``torch.cuda.amp``.  A rule first asks the text (a
substring test), then, for the files whose text mentions a name only in a
docstring or a comment, the names CPython's own compiler records: compiling
runs in C at more than ten times libcst's speed, and compiling is not running.

Each question has a text part, asked in the first pass (every file, no
compiling), and a part the compiled names settle.  A file CPython refuses (a
syntax error, syntax newer than this Python) is judged by the text part alone;
where a rule may fire on it, libcst reads it or says why it cannot (AMP900).
"""

from __future__ import annotations

import ast
import re
import types
import warnings
from functools import cached_property

from amplint.code_shape import COMPILER_KEEPS_DEAD_CODE_NAMES, backward_meets_update, code_names

# Between a receiver, the dot, the method name and its parenthesis Python allows
# spaces, line continuations and, inside brackets, newlines and comments.  A
# comment runs to its line break, so each character has one way to match:
# `#[^\n]*` alone would let a line of `####` split into 2**n comments.
_GAP = r"(?:[\s\\]|#[^\r\n]*[\r\n])*"


class SourceClues:
    """One file's text, and the names its code uses, computed on first use."""

    def __init__(self, text: str, compiled: bool = True) -> None:
        self.text = text
        # Without compiling, the text decides alone: a cheaper, looser first pass.
        self.compiled = compiled
        # Rules' triggers ask about the same words (`caler`, `autocast`) and
        # calls (`.backward(`, `.step(`): the answers are kept, each costs a
        # scan of the whole text.
        self._mentions: dict[str, bool] = {}
        self._calls: dict[str, bool] = {}

    def mentions(self, word: str) -> bool:
        """Whether the text holds `word` anywhere, code, string or comment."""
        answer = self._mentions.get(word)
        if answer is None:
            answer = self._mentions[word] = word in self.text
        return answer

    def may_call(self, method: str) -> bool:
        """Whether the code may call ``.method(...)``, however it is spaced.

        Calls never live in annotations, the one place a name written in code
        stays out of the code objects, so the compiled names settle it.
        """
        answer = self._calls.get(method)
        if answer is None:
            answer = self._calls[method] = self._may_call(method)
        return answer

    def _may_call(self, method: str) -> bool:
        text = self.text
        # The spaced spelling is searched for only where the name is followed
        # by its parenthesis: a pattern that starts with a literal lets `re`
        # skip ahead by substring search; one that starts with `\.` stops at
        # every dot of the file.
        spelled = f".{method}(" in text or (
            self.mentions(method)
            and re.search(rf"{method}{_GAP}\(", text) is not None
            and re.search(rf"\.{_GAP}{method}{_GAP}\(", text) is not None
        )
        if not spelled:
            return False
        names = self._code_names
        return names is None or method in names

    def may_use(self, name: str) -> bool:
        """Whether code that runs may use `name`: a variable, an attribute
        (``torch.autocast``), an imported name or a part of an imported module.
        Annotations do not count (see `may_reference` for them)."""
        if not self.mentions(name):
            return False
        names = self._code_names
        return names is None or any(name == part for used in names for part in used.split("."))

    def may_reference(self, attribute: str) -> bool:
        """Whether code (not a string or a comment) may name `attribute`: as an
        attribute (``x.amp``), an imported name or a part of an imported module.

        Annotations do not reach the code objects (a local variable's is never
        compiled), so when the compiled names lack it, the syntax tree decides.
        """
        return self.may_use(attribute) or (
            self.mentions(attribute) and self._tree_has_attribute(attribute)
        )

    @cached_property
    def _code_names(self) -> frozenset[str] | None:
        """Every name the compiled module and its functions, classes, lambdas
        and comprehensions load, store, import or look up as an attribute.

        None when the names cannot be trusted: a file this Python cannot
        compile (newer syntax, or a syntax error the parse will report), or a
        Python whose compiler drops dead code first.
        """
        code = self._trusted_code
        return None if code is None else code_names(code)

    @property
    def _trusted_code(self) -> types.CodeType | None:
        if not (self.compiled and COMPILER_KEEPS_DEAD_CODE_NAMES):
            return None
        return self._compiled[0]

    @property
    def too_deep_to_parse(self) -> str | None:
        """Why no parser should be given this file, or None.

        CPython's compiler stops with a RecursionError (or its 200-bracket
        limit) on code nested deeper than it can run, such as a sum of
        thousands of terms; libcst's native parser overflows its stack on the
        same code and takes the process down.
        """
        error = self._compiled[1]
        if isinstance(error, (RecursionError, MemoryError)):
            return f"nested too deeply for Python to compile ({error})"
        if isinstance(error, SyntaxError) and "too many nested" in str(error.msg):
            return f"nested too deeply for Python to compile ({error.msg})"
        return None

    @cached_property
    def _compiled(self) -> tuple[types.CodeType | None, BaseException | None]:
        """The compiled module, or the error compiling raised."""
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # invalid escapes and the like
                code = compile(self.text, "<amplint>", "exec", dont_inherit=True, optimize=0)
        except (SyntaxError, ValueError, RecursionError, MemoryError) as error:
            return None, error
        return code, None

    def may_call_name(self, name: str) -> bool:
        """Whether the code may call `name` (``name(...)``, ``x.name(...)``,
        ``partial(name, ...)`` is no call) or import it under another name,
        which the text cannot follow: ``torch.autocast("cuda")`` is a call,
        ``isinstance(v, torch.amp.autocast_mode.autocast)`` is not."""
        return self._spelled_called(name) and self.may_use(name)

    def may_call_ending(self, *suffixes: str) -> bool:
        """Whether the code may call a name that ends with one of `suffixes`
        (``ShardedGradScaler(...)`` for "GradScaler"), or import one under
        another name."""
        names = self._code_names
        return any(
            self._spelled_called(suffix, suffix=True)
            and (names is None or any(name.endswith(suffix) for name in names))
            for suffix in suffixes
        )

    def _spelled_called(self, name: str, suffix: bool = False) -> bool:
        if not self.mentions(name):
            return False
        # The literal first, so that `re` skips ahead by substring search; the
        # word boundary before a whole name (`is_autocast(` is no call of
        # autocast) after.
        for found in re.finditer(rf"{name}(?:{_GAP}\(|[\s\\]+as\b)", self.text):
            before = self.text[found.start() - 1 : found.start()]
            if suffix or not (before.isalnum() or before == "_"):
                return True
        return False

    def may_reach_amp_member(self, *members: str) -> bool:
        """Whether the code may reach one of `members` through a module named
        ``amp`` (``torch.cuda.amp.GradScaler``, ``amp.autocast`` after ``from
        torch.cuda import amp``, ``from torch.cpu.amp import autocast``), or
        import such a module under another name.  ``torch.cuda.amp.common``
        and ``torch.cuda.amp.autocast_mode.autocast`` reach none."""
        text = self.text
        if re.search(rf"amp{_GAP}import{_GAP}\*", text) is not None:
            return True
        spelled = re.search(rf"amp{_GAP}(?:\.{_GAP}(?:{'|'.join(members)})\b|import\b|as\b)", text)
        # Annotations count: `scaler: torch.cuda.amp.GradScaler` is a use to migrate.
        return spelled is not None and any(self.may_reference(member) for member in members)

    @cached_property
    def backward_meets_update(self) -> bool:
        """Whether some function, or the module's own code, may both call
        ``.backward()`` and update parameters (see amplint.code_shape).  Kept:
        `fix` asks the triggers of one text several times (its rounds, its
        self-check), and this reads the module's and class bodies' bytecode."""
        code = self._trusted_code
        return code is None or backward_meets_update(code)

    def _tree_has_attribute(self, attribute: str) -> bool:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                tree = ast.parse(self.text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return True
        return any(
            isinstance(node, ast.Attribute) and node.attr == attribute for node in ast.walk(tree)
        )
