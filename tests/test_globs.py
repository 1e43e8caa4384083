"""amplint.globs: gitignore semantics in linear time.

pathspec (a test dependency only) is the oracle for patterns without `!` and
without runs of three or more stars, where it and git agree; git's own rules
for re-including and for `***` are spelled out below.
"""

from __future__ import annotations

import time
import warnings

import pathspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amplint.globs import GlobError, PatternList

_SEGMENT_ATOMS = ["a", "b", "c", "*", "?", "[ab]", "[a-b]", "\\*"]
segments = st.lists(st.sampled_from(_SEGMENT_ATOMS), min_size=1, max_size=3).map("".join)
patterns = st.builds(
    lambda parts, lead, trail: ("/" if lead else "") + "/".join(parts) + ("/" if trail else ""),
    st.lists(st.one_of(segments, st.just("**")), min_size=1, max_size=3),
    st.booleans(),
    st.booleans(),
).filter(lambda pattern: "***" not in pattern)
paths = st.lists(
    st.sampled_from(["a", "b", "ab", "ba", "aab", "c", "*", "abc"]), min_size=1, max_size=4
).map("/".join)


@settings(max_examples=400, deadline=None)
@given(st.lists(patterns, min_size=1, max_size=3), paths, st.booleans())
def test_matches_as_pathspec_does(lines: list[str], path: str, is_dir: bool) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec = pathspec.GitIgnoreSpec.from_lines(lines)
    expected = spec.match_file(path + ("/" if is_dir else ""))
    assert PatternList(lines).matches(path, is_dir) == expected


@pytest.mark.parametrize(
    "lines, path, matched",
    [
        # Nothing inside an ignored directory can be re-included (gitignore(5)).
        (["build/", "!build/keep.py"], "build/keep.py", True),
        (["*.py", "!keep.py"], "src/keep.py", False),
        (["*.py", "!keep.py"], "src/other.py", True),
        # The last pattern that matches decides, for each directory on the way.
        (["data*", "!data_small"], "data_small/x.py", False),
        (["data*", "!data_small"], "data_large/x.py", True),
        # Three stars are two and a star: `***` is no `**`.
        (["a/***"], "a/b", True),
        (["a/***"], "a/b/c", True),  # through the directory a/b
        (["***/x"], "a/b/x", False),
        # Escapes, comments, blank lines and trailing spaces.
        (["\\#notes", "# a comment", "", "  "], "#notes", True),
        (["\\!important"], "!important", True),
        (["name  "], "name", True),
        (["name\\ "], "name ", True),
        # A directory-only pattern is no file pattern.
        (["logs/"], "logs", False),
        (["logs/"], "logs/today.py", True),
        # An unclosed bracket is a literal.
        (["[abc"], "[abc", True),
    ],
)
def test_git_semantics(lines: list[str], path: str, matched: bool) -> None:
    assert PatternList(lines).matches(path) == matched


def test_a_backwards_range_is_an_error_in_configuration_and_matches_nothing_elsewhere() -> None:
    with pytest.raises(GlobError, match="z-a"):
        PatternList(["[z-a]"], strict=True)
    assert not PatternList(["[z-a]"]).matches("m")
    assert PatternList(["[z-ax]"]).matches("x")


def test_many_stars_against_a_long_path_take_linear_time() -> None:
    """pathspec's regex for this pattern backtracks for minutes on such names."""
    pattern = PatternList(["*a*a*a*a*a*a*a*a*ab", "src/**/*a*a*a*a*a*a*ac/**"])
    path = "/".join(["a" * 255] * 16)
    start = time.perf_counter()
    assert not pattern.matches(path)
    assert time.perf_counter() - start < 1.0
