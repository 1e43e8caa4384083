"""A file no rule could fire on costs neither libcst, black nor the rules'
import: the pre-commit hook's common case (#24), pinned so that it cannot
quietly regress."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from amplint import rules, triggers
from amplint.rules.base import Rule
from tests.helpers import dedent

HEAVY = ("libcst", "black", "amplint.engine", "amplint.rules", "amplint.analysis")
# Loaded only for the files that need them: notebooks, apex programs.
OCCASIONAL = ("amplint.notebook", "amplint.project.apex")
# Check `paths` in this child process, as `amplint check` would, with its
# analyses run here rather than in a worker (so that this process loads what
# they need); print the heavy modules it loaded and the exit code.
PROBE = """
import json, sys
from click.testing import CliRunner
from amplint import runner
from amplint.cli import main
runner.ISOLATED = False
result = CliRunner().invoke(main, ["check", *sys.argv[2:]])
heavy = sorted({m for m in sys.modules if m.split(".")[0] in {"libcst", "black"}
                or any(m == h or m.startswith(h + ".") for h in json.loads(sys.argv[1]))})
print(json.dumps({"exit": result.exit_code, "heavy": heavy}))
"""


def _loaded(*args: str) -> dict:
    probe = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(HEAVY + OCCASIONAL), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert probe.returncode == 0, probe.stderr
    return json.loads(probe.stdout.splitlines()[-1])


@pytest.mark.parametrize("cache", [(), ("--no-cache",)])
def test_checking_a_file_nothing_could_fire_on_loads_no_libcst(
    tmp_path: Path, cache: tuple
) -> None:
    plain = tmp_path / "utils.py"
    plain.write_text(dedent("""
        import torch

        def count_parameters(model: torch.nn.Module) -> int:
            return sum(p.numel() for p in model.parameters() if p.requires_grad)
        """))
    assert _loaded(str(plain), *cache) == {"exit": 0, "heavy": []}


def test_a_file_with_a_training_step_still_loads_them(tmp_path: Path) -> None:
    """The probe sees the heavy modules when they are needed: it can fail."""
    step = tmp_path / "train.py"
    step.write_text(dedent("""
        for x, y in loader:
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
        """))
    loaded = _loaded(str(step), "--no-cache")
    assert (
        loaded["exit"] == 1 and "libcst" in loaded["heavy"] and "amplint.engine" in loaded["heavy"]
    )
    # Only AMP001's trigger lets this file through: the other rules' modules
    # (the apex migration among them) and the analyses only they read are not
    # imported.
    assert "amplint.rules.fp32_step" in loaded["heavy"]
    others = {"amplint.rules.apex", "amplint.rules.framework_fp32", "amplint.rules.scaler_step"}
    others |= {"amplint.analysis.frameworks", "amplint.analysis.fsdp_policy", *OCCASIONAL}
    assert others.isdisjoint(loaded["heavy"])


def test_every_rule_has_a_trigger_and_every_trigger_a_code() -> None:
    assert triggers.ALL_CODES == rules.ALL_CODES
    # A rule's trigger lives in amplint.triggers, not in an override: the
    # engine asks it by code before the rule's module is loaded.
    assert all(type(rule).may_fire is Rule.may_fire for rule in rules.RULES)
    # And each rule reports the code it is registered under.
    assert tuple(rule.code for rule in rules.RULES) == rules.RULE_CODES
