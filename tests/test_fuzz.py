"""Generated and mutated programs never crash the engine or make it write
broken code.

Two sources: hypothesmith's programs from Python's grammar (with a training
step appended, so the prefilter lets them through to the analysis), and the
fixtures with lines deleted, duplicated, swapped or re-indented.  For each:
`analyse_source` answers with findings or a clean per-file error; a fixed text
parses, and fixing it again changes nothing.

CI runs a few hundred examples.  A long run:

    AMPLINT_FUZZ_EXAMPLES=20000 .venv/bin/python -m pytest tests/test_fuzz.py -p no:cacheprovider
"""

from __future__ import annotations

import ast
import encodings.aliases
import json
import os
from pathlib import Path

import hypothesmith
import libcst as cst
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amplint.config import Settings
from amplint.engine import FixError, analyse_source, fix_text
from amplint.files import SourceError, SourceFile, encode_source, source_from_bytes
from amplint.rules import ALL_CODES
from tests.helpers import FIXTURES

# hypothesmith compiles what it generates; its SyntaxWarnings are not ours.
pytestmark = pytest.mark.filterwarnings("ignore::SyntaxWarning")

EXAMPLES = int(os.environ.get("AMPLINT_FUZZ_EXAMPLES", "150"))
CODES = frozenset(ALL_CODES)
STEP = """
import torch
for x, y in loader:
    with torch.cuda.amp.autocast():
        loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
"""
FIXTURE_TEXTS = [path.read_text(encoding="utf-8") for path in sorted(FIXTURES.rglob("*.py"))]
fuzz_settings = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def _assert_engine_holds(text: str, settings_: Settings) -> None:
    for fixing in (False, True):
        report = analyse_source(
            SourceFile(Path("fuzz.py"), text, "utf-8"), CODES, settings_, fixing
        )
        assert report.error is None or report.error.startswith(
            ("not fixed", "not analysed")
        ), report.error
        if report.fixed_text is None:
            continue
        ast.parse(report.fixed_text)
        cst.parse_module(report.fixed_text)
        try:
            again = fix_text(report.fixed_text, CODES, settings_)
        except FixError as error:  # pragma: no cover - the failure message shows it
            raise AssertionError(f"second fix refused: {error}") from None
        assert again.text == report.fixed_text, "a second fix changed the text"


@pytest.mark.slow
@fuzz_settings
@given(program=hypothesmith.from_grammar(), dtype=st.sampled_from(["float16", "bfloat16"]))
def test_generated_programs(program: str, dtype: str) -> None:
    _assert_engine_holds(program + "\n" + STEP, Settings(dtype=dtype))
    _assert_engine_holds(STEP + "\n" + program, Settings(dtype=dtype))


@st.composite
def mutated_fixtures(draw) -> str:
    lines = draw(st.sampled_from(FIXTURE_TEXTS)).splitlines(keepends=True)
    for _ in range(draw(st.integers(1, 4))):
        if not lines:
            break
        index = draw(st.integers(0, len(lines) - 1))
        mutation = draw(st.sampled_from(["delete", "duplicate", "swap", "indent", "dedent"]))
        if mutation == "delete":
            del lines[index]
        elif mutation == "duplicate":
            lines.insert(index, lines[index])
        elif mutation == "swap":
            other = draw(st.integers(0, len(lines) - 1))
            lines[index], lines[other] = lines[other], lines[index]
        elif mutation == "indent":
            lines[index] = "    " + lines[index]
        elif lines[index].startswith("    "):
            lines[index] = lines[index][4:]
    return "".join(lines)


@pytest.mark.slow
@fuzz_settings
@given(text=mutated_fixtures(), dtype=st.sampled_from(["float16", "bfloat16", "auto"]))
def test_mutated_fixtures(text: str, dtype: str) -> None:
    _assert_engine_holds(text, Settings(dtype=dtype))


# -- notebooks: valid JSON, any types ----------------------------------------------
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=8,
)
_NOTEBOOK_KEYS = [
    ("nbformat",),
    ("metadata",),
    ("metadata", "language_info"),
    ("metadata", "language_info", "name"),
    ("cells",),
    ("cells", 0),
    ("cells", 0, "cell_type"),
    ("cells", 0, "source"),
    ("cells", 0, "source", 1),
    ("cells", 1, "source"),
]


def _valid_notebook() -> dict:
    step = STEP.strip("\n").splitlines(keepends=True)
    return {
        "cells": [
            {"cell_type": "code", "metadata": {}, "outputs": [], "source": step},
            {"cell_type": "code", "metadata": {}, "outputs": [], "source": "%time loss.item()"},
        ],
        "metadata": {"language_info": {"name": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


@st.composite
def notebooks_of_wrong_types(draw) -> str:
    """A notebook with one to three of its places replaced by any JSON value."""
    document = _valid_notebook()
    for _ in range(draw(st.integers(1, 3))):
        *parents, key = draw(st.sampled_from(_NOTEBOOK_KEYS))
        container = document
        try:
            for parent in parents:
                container = container[parent]
            if isinstance(container, list) and not (0 <= key < len(container)):
                continue
            container[key] = draw(json_values)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier replacement took this place's parent away
    return json.dumps(document, indent=1) + "\n"


@fuzz_settings
@given(text=notebooks_of_wrong_types())
def test_notebooks_of_wrong_types(text: str) -> None:
    """Read as a SourceFile or refused with SourceError; analysed and fixed
    without an exception; a fixed notebook is JSON whose code parses."""
    try:
        source = source_from_bytes(Path("fuzz.ipynb"), text.encode())
    except SourceError:
        return
    for fixing in (False, True):
        report = analyse_source(source, CODES, Settings(), fixing)
        assert report.error is None or report.error.startswith(("not fixed", "not analysed"))
        if report.fixed_text is not None:
            fixed = source_from_bytes(Path("fuzz.ipynb"), report.fixed_text.encode())
            ast.parse(fixed.code)


# -- codec cookies ---------------------------------------------------------------------
CODEC_NAMES = sorted(set(encodings.aliases.aliases.values()) | {"utf-8", "utf-7", "hex", "rot13"})


@fuzz_settings
@given(
    codec=st.sampled_from(CODEC_NAMES) | st.text(min_size=1, max_size=12),
    body=st.sampled_from([STEP.encode(), b"", b"x = '\xe9\xff'\n"]) | st.binary(max_size=40),
)
def test_codec_cookies(codec: str, body: bytes) -> None:
    """Any cookie: a SourceFile or SourceError, never another exception; a
    file said to round-trip encodes back to its bytes exactly."""
    cookie = f"# -*- coding: {codec} -*-\n".encode("utf-8", "surrogatepass")
    raw = cookie + body
    try:
        source = source_from_bytes(Path("fuzz.py"), raw)
    except SourceError:
        return
    if source.round_trips:
        assert encode_source(source.text, source.encoding) == raw
    report = analyse_source(source, CODES, Settings(), fixing=True)
    assert report.error is None or report.error.startswith(("not fixed", "not analysed"))
    if report.fixed_text is not None:
        assert source.round_trips
        encode_source(report.fixed_text, source.encoding)  # the rewrite can be written
