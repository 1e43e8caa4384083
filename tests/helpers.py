"""Shared helpers: run the engine on text, run the CLI in-process."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from functools import lru_cache
from pathlib import Path

from click.testing import CliRunner, Result

from amplint.cli import main
from amplint.config import Settings
from amplint.diagnostics import Diagnostic
from amplint.engine import fix_text, lint_text
from amplint.rules import ALL_CODES

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"
ALL = frozenset(ALL_CODES)

# Settings under which, together, every rule can fire: a trigger must hold for
# each (tests/test_prefilter.py, tests/trigger_audit.py).
EVERY_RULE_SETTINGS = [
    Settings(),
    Settings(dtype="bfloat16", device_type="cpu"),
    Settings(target_torch=(1, 10)),
    Settings(target_torch=(2, 13)),  # rules for what later torch documents (AMP123)
]


def dedent(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def findings_of(
    text: str, settings: Settings | None = None, codes: frozenset[str] = ALL
) -> list[Diagnostic]:
    return lint_text(text, codes, settings or Settings())


def codes_of(text: str, settings: Settings | None = None, codes: frozenset[str] = ALL) -> list[str]:
    return [d.code for d in findings_of(text, settings, codes)]


def fixed(text: str, settings: Settings | None = None, unsafe: bool = False) -> str:
    return fix_text(text, ALL, settings or Settings(), unsafe).text


def amp001_messages(text: str) -> list[str]:
    return [d.message for d in findings_of(text) if d.code == "AMP001"]


def assert_declined(text: str, reason: str) -> None:
    """One AMP001 finding, not rewritten for `reason`, and `fix` changes nothing."""
    (message,) = amp001_messages(text)
    assert message.endswith(f"not rewritten: {reason}"), message
    assert fixed(text) == text


TRAINING_FUNCTION = """
def train_{i}(model, loader, optimizer):
    for x, y in loader:
        loss = model(x).sub(y).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""


def training_functions(count: int) -> str:
    """A module of `count` FP32 training functions, each an AMP001 finding."""
    return "import torch\n" + "".join(TRAINING_FUNCTION.format(i=i) for i in range(count))


def dead_pid() -> int:
    """The id of a process that has ended (and, for now, of no other)."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def run_cli(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(arg) for arg in args], catch_exceptions=False)


def assert_matches_golden(result: str, golden: Path) -> None:
    """`result` equals the pinned file; AMPLINT_UPDATE_GOLDEN=1 rewrites the pin
    (review the git diff before committing it)."""
    if os.environ.get("AMPLINT_UPDATE_GOLDEN") == "1":
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(result, encoding="utf-8")
    assert result == golden.read_text(encoding="utf-8")


_LOSS = re.compile(r"^loss (\S+)$", re.M)


@lru_cache(maxsize=None)
def printed_losses(path: Path, *arguments: str) -> tuple[float, ...]:
    """Run a fixture script on the CPU; the `loss <value>` lines it printed."""
    run = subprocess.run(
        [sys.executable, path.name, *arguments],
        cwd=path.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, f"{path} failed:\n{run.stderr[-3000:]}"
    losses = tuple(float(value) for value in _LOSS.findall(run.stdout))
    assert losses, f"{path} printed no `loss <value>` lines"
    return losses
