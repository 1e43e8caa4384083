"""Gitignore-style patterns, matched in time linear in the pattern and the path.

The semantics are git's (gitignore(5)): `*` and `?` stay within a path
segment, `[...]` is a character class, `**` spans segments, a pattern with a
slash before its end is anchored at its base directory, one ending in a slash
matches directories only, `!` re-includes, and the last pattern that matches
decides.  Everything below a directory that is matched is matched too.

Translating globs to backtracking regular expressions (as pathspec does) costs
time exponential in the stars of a segment: `*a*a*a*a*a*a*a*a*ab` against a
long name ran for minutes.  Here a segment is matched by the classic
two-pointer wildcard algorithm (only the last star is ever backtracked), and
`**` by a set of reachable positions: no input takes more than about
pattern length x path length steps per directory of the path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Union


class GlobError(ValueError):
    """A pattern that is not a valid glob (a character range backwards)."""


_STAR = "*"
_ANY = "?"


@dataclass(frozen=True)
class _Class:
    """`[...]`: single characters and ranges, maybe negated."""

    negated: bool
    chars: frozenset[str]
    ranges: tuple[tuple[str, str], ...]

    def matches(self, char: str) -> bool:
        inside = char in self.chars or any(low <= char <= high for low, high in self.ranges)
        return inside != self.negated


# A segment's tokens: _STAR, _ANY, a literal character (a 1-string that is
# neither, or any 1-string after an escape) or a class.
_Token = Union[str, _Class, "_Literal"]


@dataclass(frozen=True)
class _Literal:
    """An escaped character, which may be `*` or `?` itself."""

    char: str


_DOUBLE_STAR = ("**",)  # a whole segment `**`: any number of segments


@dataclass(frozen=True)
class Pattern:
    """One gitignore-style pattern, split into path segments."""

    segments: tuple[tuple[_Token, ...], ...]  # _DOUBLE_STAR for `**`
    negated: bool
    directories_only: bool

    def matches(self, parts: list[str], is_dir: bool) -> bool:
        """Whether the pattern matches the whole path of `parts` (its segments)."""
        if self.directories_only and not is_dir:
            return False
        reached = {0}  # how many of `parts` the pattern so far can consume
        last = len(self.segments) - 1
        for index, segment in enumerate(self.segments):
            if segment is _DOUBLE_STAR:
                # `a/**` matches what is inside a, and a itself as a directory
                # (which ignores the same files); elsewhere `**` may be empty.
                low = min(reached) + (1 if index == last and not is_dir else 0)
                reached = set(range(low, len(parts) + 1))
            else:
                reached = {
                    consumed + 1
                    for consumed in reached
                    if consumed < len(parts) and _segment_matches(segment, parts[consumed])
                }
            if not reached:
                return False
        return len(parts) in reached


def parse_pattern(line: str, strict: bool = False) -> Pattern | None:
    """The pattern on one line of a .gitignore-style list; None for a blank
    line or a comment.  `strict` (configuration, not a .gitignore file):
    a backwards range raises GlobError instead of matching nothing."""
    line = _strip_trailing_spaces(line.rstrip("\r\n"))
    if not line or line.startswith("#"):
        return None
    negated = line.startswith("!")
    if negated:
        line = line[1:]
    directories_only = line.endswith("/") and not line.endswith("\\/")
    line = line.rstrip("/") if directories_only else line
    if not line:
        return None
    anchored = "/" in line
    parts = line.lstrip("/").split("/") if anchored else [line]
    segments = tuple(
        _DOUBLE_STAR if part == "**" else _tokens(part, strict) for part in parts if part != ""
    )
    if not anchored:
        segments = (_DOUBLE_STAR, *segments)
    return Pattern(segments, negated, directories_only)


def _strip_trailing_spaces(line: str) -> str:
    stripped = line.rstrip(" ")
    if stripped.endswith("\\") and len(stripped) < len(line):
        return stripped + " "  # an escaped space is kept
    return stripped


def _tokens(segment: str, strict: bool) -> tuple[_Token, ...]:
    tokens: list[_Token] = []
    index = 0
    while index < len(segment):
        char = segment[index]
        if char == "\\" and index + 1 < len(segment):
            tokens.append(_Literal(segment[index + 1]))
            index += 2
            continue
        if char == "[":
            parsed = _character_class(segment, index + 1, strict)
            if parsed is not None:
                token, index = parsed
                tokens.append(token)
                continue
        if char == _STAR and tokens and tokens[-1] == _STAR:
            index += 1  # `**` inside a segment is one star
            continue
        tokens.append(char)
        index += 1
    return tuple(tokens)


def _character_class(segment: str, start: int, strict: bool) -> tuple[_Class, int] | None:
    """The class whose body starts at `start`, and the index after its `]`;
    None when no `]` closes it (then `[` is a literal)."""
    index = start
    negated = index < len(segment) and segment[index] in "!^"
    if negated:
        index += 1
    chars: set[str] = set()
    ranges: list[tuple[str, str]] = []
    first = True
    while index < len(segment):
        char = segment[index]
        if char == "]" and not first:
            return _Class(negated, frozenset(chars), tuple(ranges)), index + 1
        first = False
        if char == "\\" and index + 1 < len(segment):
            index += 1
            char = segment[index]
        if index + 2 < len(segment) and segment[index + 1] == "-" and segment[index + 2] != "]":
            high = segment[index + 2]
            if high < char:
                if strict:
                    raise GlobError(f"the range {char}-{high} in `[` runs backwards")
            else:
                ranges.append((char, high))
            index += 3
            continue
        chars.add(char)
        index += 1
    return None


def _one(token: _Token, char: str) -> bool:
    if token == _ANY:
        return True
    if isinstance(token, _Class):
        return token.matches(char)
    if isinstance(token, _Literal):
        return token.char == char
    return token == char


def _segment_matches(tokens: tuple[_Token, ...], name: str) -> bool:
    """Whether `name` (one path segment) matches: the two-pointer wildcard
    match, which on a mismatch moves only the last star on by one."""
    token_index = name_index = 0
    star_token, star_name = -1, 0
    while name_index < len(name):
        if token_index < len(tokens) and tokens[token_index] == _STAR:
            star_token, star_name = token_index, name_index
            token_index += 1
        elif token_index < len(tokens) and _one(tokens[token_index], name[name_index]):
            token_index += 1
            name_index += 1
        elif star_token >= 0:
            star_name += 1
            token_index, name_index = star_token + 1, star_name
        else:
            return False
    while token_index < len(tokens) and tokens[token_index] == _STAR:
        token_index += 1
    return token_index == len(tokens)


class PatternList:
    """Patterns read in order; as in git, a path is matched when the last
    pattern that matches it is not negated, or when a directory above it is
    matched (nothing inside an ignored directory can be re-included)."""

    def __init__(self, lines: Iterable[str], strict: bool = False) -> None:
        parsed = (parse_pattern(line, strict) for line in lines)
        self.patterns = [pattern for pattern in parsed if pattern is not None]

    def matches(self, relative: str, is_dir: bool = False) -> bool:
        """Whether `relative` (a POSIX path below the patterns' base) is matched."""
        parts = [part for part in relative.split("/") if part]
        return any(
            self._decides(parts[:length], is_dir or length < len(parts))
            for length in range(1, len(parts) + 1)
        )

    def _decides(self, parts: list[str], is_dir: bool) -> bool:
        for pattern in reversed(self.patterns):
            if pattern.matches(parts, is_dir):
                return not pattern.negated
        return False
