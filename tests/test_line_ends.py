"""Lines as Python numbers them.  str.splitlines also breaks at a form feed
(GNU style's page break, which real modules hold), \\x1c-\\x1e, \\x85, \\u2028
and \\u2029; Python's tokenizer, libcst and so every finding's line do not.
What shows, diffs or measures source lines must count as Python does."""

from __future__ import annotations

import ast
import shutil
import subprocess
from pathlib import Path

import pytest

from amplint.diagnostics import source_lines
from amplint.project.source import definitions_mentioning
from tests.helpers import run_cli

# Each character str.splitlines breaks at and Python does not.
OTHER_BREAKS = ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@pytest.mark.parametrize("other", OTHER_BREAKS)
@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"])
def test_source_lines_number_lines_as_python_does(other: str, end: str) -> None:
    text = end.join(["import torch", f"# a page {other} break", f"s = '{other}'", "x = 1", ""])
    tree = ast.parse(text)
    lines = source_lines(text)
    assert [lines[node.lineno - 1] for node in tree.body[1:]] == [f"s = '{other}'", "x = 1"]
    assert "".join(source_lines(text, keepends=True)) == text
    assert len(source_lines(text, keepends=True)) == len(lines) == 4
    plain = text.replace(other, " ")
    assert source_lines(plain) == plain.splitlines()  # the same where nothing differs


def test_definitions_keep_their_module_lines_after_a_form_feed() -> None:
    text = "import torch.nn.functional as F\n\x0c\n\ndef bce(x, y):\n"
    text += "    return F.binary_cross_entropy(x, y)\n"
    found = definitions_mentioning(text, frozenset({"binary_cross_entropy"}))
    assert {name: node.lineno for name, node in found.items()} == {"bce": 4}


SCRIPT = (
    "import torch\n"
    "\x0c\n"
    "scaler = torch.cuda.amp.GradScaler()  # \x0c and \u2028 in a comment\n"
    "x = 1\n"
)


def test_full_shows_the_line_a_finding_is_on(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text(SCRIPT, encoding="utf-8")
    shown = run_cli("check", "--no-cache", "--output-format", "full", path).stdout
    assert "  3 | scaler = torch.cuda.amp.GradScaler()" in shown
    # Shown, not sent: the form feed as its picture, the separator escaped.
    assert '+scaler = torch.amp.GradScaler("cuda")  # \u240c and \\u2028 in a comment' in shown


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to apply the patch")
def test_the_diff_fix_prints_applies_as_a_patch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("train.py").write_text(SCRIPT, encoding="utf-8")
    diff = run_cli("fix", "--no-cache", "train.py").stdout
    run_cli("fix", "--no-cache", "--apply", "train.py")
    fixed = Path("train.py").read_text(encoding="utf-8")
    Path("train.py").write_text(SCRIPT, encoding="utf-8")
    applied = subprocess.run(["git", "apply", "-"], input=diff, capture_output=True, text=True)
    assert applied.returncode == 0, applied.stderr
    assert Path("train.py").read_text(encoding="utf-8") == fixed != SCRIPT
