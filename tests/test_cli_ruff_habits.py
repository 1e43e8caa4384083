"""The options and files a ruff user reaches for, with ruff's meaning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import run_cli

# AMP202 on line 2, AMP201 on line 3.
CPU_AND_CUDA = "import torch\na = torch.cpu.amp.autocast()\nb = torch.cuda.amp.autocast()\n"


def _codes(*args: str | Path) -> list[str]:
    result = run_cli("check", "--no-cache", "--output-format", "json", *args)
    assert result.exit_code in (0, 1), result.stderr
    return sorted(record["code"] for record in json.loads(result.stdout))


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "a.py").write_text(CPU_AND_CUDA)
    return tmp_path


# -- configuration files found as ruff.toml is ----------------------------------
@pytest.mark.parametrize("name", ["amplint.toml", ".amplint.toml"])
def test_an_amplint_toml_is_found_like_ruff_toml(tree: Path, name: str) -> None:
    (tree / "sub").mkdir()
    (tree / "sub" / "a.py").write_text(CPU_AND_CUDA)
    (tree / name).write_text('select = ["AMP202"]\n')
    assert _codes(tree / "sub") == ["AMP202"]


def test_the_nearest_configuration_wins_and_amplint_toml_before_pyproject(tree: Path) -> None:
    (tree / "pyproject.toml").write_text('[tool.amplint]\nselect = ["AMP201"]\n')
    assert _codes(tree) == ["AMP201"]
    (tree / "amplint.toml").write_text('select = ["AMP202"]\n')
    assert _codes(tree) == ["AMP202"]
    (tree / ".amplint.toml").write_text('ignore = ["AMP2"]\n')
    assert _codes(tree) == []


def test_a_pyproject_without_an_amplint_table_is_passed_over(tree: Path) -> None:
    (tree / "sub").mkdir()
    (tree / "sub" / "a.py").write_text(CPU_AND_CUDA)
    (tree / "sub" / "pyproject.toml").write_text("[tool.black]\nline-length = 100\n")
    (tree / "amplint.toml").write_text('select = ["AMP201"]\n')
    assert _codes(tree / "sub") == ["AMP201"]


def test_config_takes_a_pyproject_style_file_of_any_name(tree: Path) -> None:
    config = tree / "lint-settings.toml"
    config.write_text('[tool.black]\nline-length = 100\n[tool.amplint]\nselect = ["AMP202"]\n')
    assert _codes("--config", config, tree) == ["AMP202"]


# -- --config KEY=VALUE ---------------------------------------------------------
def test_config_overrides_lay_over_the_file(tree: Path) -> None:
    (tree / "amplint.toml").write_text('select = ["AMP202"]\n')
    assert _codes("--config", 'select = ["AMP201"]', tree) == ["AMP201"]
    assert _codes("--config", "ignore=['AMP202']", "--config", "select=['AMP2']", tree) == [
        "AMP201"
    ]


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ("select = [", "not a file, nor a TOML `KEY = VALUE` override"),
        ("selec = ['AMP2']", "unknown key `selec`"),
        ("select = ['AMP7']", "`select` names `AMP7`"),
        ("nothere.toml", "no such file"),
    ],
)
def test_a_bad_config_value_is_named_and_exits_2(tree: Path, value: str, named: str) -> None:
    result = run_cli("check", "--config", value, tree)
    assert result.exit_code == 2
    assert named in result.stderr


def test_two_config_files_are_an_error(tree: Path) -> None:
    for name in ("one.toml", "two.toml"):
        (tree / name).write_text("select = ['AMP2']\n")
    result = run_cli("check", "--config", tree / "one.toml", "--config", tree / "two.toml", tree)
    assert result.exit_code == 2
    assert "give one" in result.stderr


# -- extend-select / extend-ignore ----------------------------------------------
def test_extend_select_and_extend_ignore_in_the_configuration(tree: Path) -> None:
    (tree / "amplint.toml").write_text('select = ["AMP1"]\nextend-select = ["AMP202"]\n')
    assert _codes(tree) == ["AMP202"]
    (tree / "amplint.toml").write_text('extend-ignore = ["AMP201"]\n')
    assert _codes(tree) == ["AMP202"]


def test_extend_select_and_extend_ignore_on_the_command_line(tree: Path) -> None:
    (tree / "amplint.toml").write_text('select = ["AMP1"]\n')
    assert _codes(tree) == []
    assert _codes("--extend-select", "AMP201", tree) == ["AMP201"]
    assert _codes("--extend-ignore", "AMP201", "--select", "AMP2", tree) == ["AMP202"]


def test_select_on_the_command_line_replaces_the_configurations_extend_select(tree: Path) -> None:
    (tree / "amplint.toml").write_text('select = ["AMP1"]\nextend-select = ["AMP202"]\n')
    assert _codes("--select", "AMP201", tree) == ["AMP201"]
    assert _codes("--select", "AMP201", "--extend-select", "AMP202", tree) == [
        "AMP201",
        "AMP202",
    ]


# -- excludes and per-file-ignores on the command line --------------------------
def test_exclude_and_extend_exclude_on_the_command_line(tree: Path) -> None:
    for folder in ("legacy", "third_party"):
        (tree / folder).mkdir()
        (tree / folder / "b.py").write_text(CPU_AND_CUDA)
    assert len(_codes(tree)) == 6
    assert len(_codes("--extend-exclude", "legacy/,third_party", tree)) == 2
    # --exclude replaces the defaults too: a build/ directory is checked again.
    (tree / "build").mkdir()
    (tree / "build" / "c.py").write_text(CPU_AND_CUDA)
    assert len(_codes(tree)) == 6
    assert len(_codes("--exclude", "legacy", tree)) == 6


def test_per_file_ignores_on_the_command_line(tree: Path) -> None:
    (tree / "tests").mkdir()
    (tree / "tests" / "t.py").write_text(CPU_AND_CUDA)
    result = run_cli(
        "check", "--no-cache", "--output-format", "json", "--per-file-ignores", "tests/*:AMP2", tree
    )
    assert {r["path"] for r in json.loads(result.stdout)} == {str(tree / "a.py")}
    only_one = run_cli(
        "check",
        "--no-cache",
        "--output-format",
        "json",
        "--per-file-ignores",
        "tests/*:AMP201",
        "--per-file-ignores",
        "a.py:AMP201,AMP202",
        tree,
    )
    assert [(Path(r["path"]).name, r["code"]) for r in json.loads(only_one.stdout)] == [
        ("t.py", "AMP202")
    ]


@pytest.mark.parametrize(
    ("value", "named"),
    [("tests", "is not PATTERN:CODES"), ("tests/*:NOPE1", "matches no rule"), (":AMP2", "is not")],
)
def test_a_bad_per_file_ignore_is_named(tree: Path, value: str, named: str) -> None:
    result = run_cli("check", "--per-file-ignores", value, tree)
    assert result.exit_code == 2
    assert named in result.stderr


def test_a_bad_exclude_pattern_is_named(tree: Path) -> None:
    result = run_cli("check", "--extend-exclude", "x/[9-0]", tree)
    assert result.exit_code == 2
    assert "`extend-exclude` holds `x/[9-0]`" in result.stderr
