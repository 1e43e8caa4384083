"""Test files get no fix that changes the numerics of training: their
assertions may hold FP32 values (`assert loss == 0.8751...`).  They are
reported, with why, unless `rewrite-tests = true` says to rewrite them."""

from __future__ import annotations

from pathlib import Path

import pytest

from amplint.config import Settings
from tests.helpers import run_cli

STEP = """
import torch


def test_training_reduces_the_loss():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 4), torch.randn(32, 1)
    for _ in range(5):
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 1.0
"""
CPU = ("--device-type", "cpu", "--dtype", "bfloat16")
TEST_FILES = ("tests/test_train.py", "test/helpers.py", "test_train.py", "train_test.py", "conftest.py")


@pytest.mark.parametrize(
    "relative, is_test",
    [(name, True) for name in TEST_FILES]
    + [("train.py", False), ("src/testing.py", False), ("contest.py", False)],
)
def test_what_is_a_test_file(tmp_path: Path, relative: str, is_test: bool) -> None:
    settings = Settings(root=tmp_path)
    assert settings.is_test_file(tmp_path / relative) is is_test
    # The root's own parents do not count: a project checked out under tests/.
    inside = Settings(root=tmp_path / "tests" / "project")
    assert inside.is_test_file(tmp_path / "tests" / "project" / "train.py") is False


def test_a_test_file_is_reported_and_left_alone_unless_configured(tmp_path: Path) -> None:
    for relative in ("train.py", *TEST_FILES):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(STEP)
    result = run_cli("check", *CPU, tmp_path)
    assert result.stdout.count("AMP001") == 6
    assert result.stdout.count("(not fixed: a test file, whose assertions may hold FP32") == 5
    assert "Found 6 findings (1 fixable" in result.stdout
    fixed = run_cli("fix", "--apply", *CPU, tmp_path)
    assert fixed.exit_code == 1  # findings remain
    assert "torch.autocast" in (tmp_path / "train.py").read_text()
    assert all((tmp_path / relative).read_text() == STEP for relative in TEST_FILES)
    # Configured: rewritten too; and the cache does not answer for the other setting.
    (tmp_path / "pyproject.toml").write_text("[tool.amplint]\nrewrite-tests = true\n")
    assert "Found 5 findings (5 fixable" in run_cli("check", *CPU, tmp_path).stdout
    (tmp_path / "pyproject.toml").write_text("[tool.amplint]\nrewrite-tests = false\n")
    assert "Found 5 findings.\n" in run_cli("check", *CPU, tmp_path).stdout


def test_rewrite_tests_must_be_true_or_false(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.amplint]\nrewrite-tests = "yes"\n')
    (tmp_path / "train.py").write_text(STEP)
    result = run_cli("check", tmp_path)
    assert result.exit_code == 2
    assert "`rewrite-tests` must be true or false" in result.stderr
