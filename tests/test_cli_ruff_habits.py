"""The options and files a ruff user reaches for, with ruff's meaning."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from amplint.catalog import load_catalog
from amplint.diagnostics import Diagnostic, Span
from amplint.noqa import noqa_filter
from tests.helpers import dedent, run_cli

# AMP202 on line 2, AMP201 on line 3.
CPU_AND_CUDA = "import torch\na = torch.cpu.amp.autocast()\nb = torch.cuda.amp.autocast()\n"


def _records(*args: str | Path) -> list[dict]:
    """The JSON records of `check` with `args`, which must run (exit 0 or 1)."""
    result = run_cli("check", "--no-cache", "--output-format", "json", *args)
    assert result.exit_code in (0, 1), result.stderr
    return json.loads(result.stdout)


def _codes(*args: str | Path) -> list[str]:
    return sorted(record["code"] for record in _records(*args))


def _named_codes(*args: str | Path) -> list[tuple[str, str]]:
    """(file name, code) of each finding, sorted."""
    return sorted((Path(record["path"]).name, record["code"]) for record in _records(*args))


def _checked(*args: str | Path) -> list[str]:
    """The names of the files with findings, sorted."""
    return sorted({Path(record["path"]).name for record in _records(*args)})


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


def test_a_negated_per_file_pattern_covers_the_files_it_does_not_match(tree: Path) -> None:
    # ruff's `!`: AMP201 ignored everywhere but under src/, from the table, the
    # `extend-` table added to it, and the command line.
    (tree / "src").mkdir()
    (tree / "src" / "s.py").write_text(CPU_AND_CUDA)
    (tree / "amplint.toml").write_text('[per-file-ignores]\n"!src/*" = ["AMP201"]\n')
    kept = [("a.py", "AMP202"), ("s.py", "AMP201"), ("s.py", "AMP202")]
    assert _named_codes(tree) == kept
    (tree / "amplint.toml").write_text(
        '[per-file-ignores]\n"!src/*" = ["AMP201"]\n'
        '[extend-per-file-ignores]\n"a.py" = ["AMP202"]\n'
    )
    assert _named_codes(tree) == kept[1:]
    (tree / "amplint.toml").unlink()
    assert _named_codes("--per-file-ignores", "!src/*:AMP202", tree) == [
        ("a.py", "AMP201"),
        ("s.py", "AMP201"),
        ("s.py", "AMP202"),
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


# -- check --fix, --diff and friends --------------------------------------------
# AMP201 has a safe fix; AMP111's `.half()` under autocast is reported, not fixed.
FIXABLE = "import torch\nscaler = torch.cuda.amp.GradScaler()\n"
FIXED = 'import torch\nscaler = torch.amp.GradScaler("cuda")\n'


@pytest.fixture
def fixable(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text(FIXABLE)
    return tmp_path


def test_check_fix_writes_the_fixes_and_reports_what_is_left(fixable: Path) -> None:
    result = run_cli("check", "--no-cache", "--fix", fixable)
    assert (fixable / "train.py").read_text() == FIXED
    assert result.exit_code == 0
    assert "Found 1 finding (1 fixed, 0 remaining)." in result.stdout
    again = run_cli("check", "--no-cache", "--fix", fixable)
    assert again.exit_code == 0 and "All checks passed." in again.stdout


def test_check_fix_show_fixes_and_exit_non_zero_on_fix(fixable: Path) -> None:
    result = run_cli(
        "check", "--no-cache", "--fix", "--show-fixes", "--exit-non-zero-on-fix", fixable
    )
    assert result.exit_code == 1
    assert f"{fixable / 'train.py'}: fixed 1" in result.stdout
    assert "AMP201 torch.cuda.amp.GradScaler -> torch.amp.GradScaler" in result.stdout
    nothing_left = run_cli("check", "--no-cache", "--fix", "--exit-non-zero-on-fix", fixable)
    assert nothing_left.exit_code == 0


def test_check_diff_prints_the_patch_and_writes_nothing(fixable: Path) -> None:
    result = run_cli("check", "--no-cache", "--diff", fixable)
    assert result.exit_code == 1
    assert (fixable / "train.py").read_text() == FIXABLE
    assert '+scaler = torch.amp.GradScaler("cuda")' in result.stdout
    assert "Would fix 1 finding in 1 file." in result.stderr
    (fixable / "train.py").write_text(FIXED)
    assert run_cli("check", "--no-cache", "--diff", fixable).exit_code == 0


def test_check_fix_takes_unsafe_fixes(tmp_path: Path) -> None:
    script = tmp_path / "loss.py"
    script.write_text(dedent("""
        import torch
        import torch.nn.functional as F


        def train(model, loader, optimizer, scaler):
            for inputs, targets in loader:
                with torch.autocast("cuda", dtype=torch.float16):
                    logits = model(inputs)
                loss = F.cross_entropy(logits, targets)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
        """))
    (tmp_path / "old.py").write_text(FIXABLE)
    before = script.read_text()
    safe = run_cli("check", "--no-cache", "--fix", "--select", "AMP110,AMP201", tmp_path)
    assert "Found 2 findings (1 fixed, 1 remaining). 1 more fixable with --unsafe-fixes." in (
        safe.stdout
    )
    safe = run_cli("check", "--no-cache", "--fix", "--select", "AMP110", tmp_path)
    assert safe.exit_code == 1 and script.read_text() == before
    assert "1 more fixable with `amplint fix --apply --unsafe-fixes`" in safe.stdout
    unsafe = run_cli(
        "check", "--no-cache", "--fix", "--unsafe-fixes", "--select", "AMP110", tmp_path
    )
    assert unsafe.exit_code == 0, unsafe.stdout
    assert "        loss = F.cross_entropy(logits, targets)" in script.read_text()


@pytest.mark.parametrize(
    "flags", [("--fix", "--diff"), ("--add-noqa", "--fix"), ("--show-files", "--show-settings")]
)
def test_check_modes_that_exclude_each_other_are_an_error(fixable: Path, flags) -> None:
    result = run_cli("check", "--no-cache", *flags, fixable)
    assert result.exit_code == 2
    assert "do not go together" in result.stderr
    assert (fixable / "train.py").read_text() == FIXABLE


def test_check_fix_on_standard_input_prints_the_fixed_source() -> None:
    from click.testing import CliRunner

    from amplint.cli import main

    result = CliRunner().invoke(main, ["check", "--fix", "-"], input=FIXABLE)
    assert result.stdout == FIXED


# -- output: a file, quiet, silent, colour --------------------------------------
def test_output_file_takes_the_report(tree: Path) -> None:
    report = tree / "out" / "report.json"
    report.parent.mkdir()
    result = run_cli("check", "--no-cache", "--output-format", "json", "-o", report, tree)
    assert result.exit_code == 1
    assert result.stdout == ""
    assert sorted(r["code"] for r in json.loads(report.read_text())) == ["AMP201", "AMP202"]


def test_fix_output_file_takes_the_patch(fixable: Path) -> None:
    patch = fixable / "fix.patch"
    result = run_cli("fix", "--no-cache", "--color", "always", "-o", patch, fixable / "train.py")
    assert result.exit_code == 1 and result.stdout == ""
    assert patch.read_text().count("+scaler") == 1 and "\x1b[" not in patch.read_text()
    assert "Would fix 1 finding in 1 file" in result.stderr


def test_output_file_that_cannot_be_written_is_an_error(tree: Path) -> None:
    result = run_cli("check", "--output-file", tree / "missing" / "report.txt", tree)
    assert result.exit_code == 2
    assert "cannot write" in result.stderr


def test_quiet_prints_the_findings_alone_and_silent_nothing(tree: Path) -> None:
    loud = run_cli("check", "--no-cache", tree)
    quiet = run_cli("check", "--no-cache", "-q", tree)
    silent = run_cli("check", "--no-cache", "--silent", tree)
    assert "Found 2 findings" in loud.stdout
    assert quiet.stdout.splitlines() == loud.stdout.splitlines()[:-1]
    assert silent.stdout == ""
    assert loud.exit_code == quiet.exit_code == silent.exit_code == 1
    (tree / "a.py").write_text("x = 1\n")
    assert run_cli("check", "--no-cache", "-q", tree).stdout == ""


def test_fix_quiet_and_silent(fixable: Path) -> None:
    quiet = run_cli("fix", "--no-cache", "-q", fixable)
    assert "+scaler" in quiet.stdout and "Would fix" not in quiet.stderr
    silent = run_cli("fix", "--no-cache", "-s", fixable)
    assert silent.stdout == "" and silent.stderr == "" and silent.exit_code == 1


@pytest.mark.parametrize(("choice", "styled"), [("always", True), ("never", False)])
def test_color_always_and_never(tree: Path, monkeypatch, choice: str, styled: bool) -> None:
    monkeypatch.setenv("NO_COLOR" if choice == "always" else "FORCE_COLOR", "1")
    result = run_cli("check", "--no-cache", "--color", choice, tree)
    assert ("\x1b[" in result.stdout) is styled


def test_the_fix_diff_is_coloured_where_colour_is_on(fixable: Path) -> None:
    coloured = run_cli("fix", "--no-cache", "--color", "always", fixable)
    assert "\x1b[32m+scaler" in coloured.stdout and "\x1b[31m-scaler" in coloured.stdout
    plain = run_cli("fix", "--no-cache", fixable)
    assert "\x1b[" not in plain.stdout and "+scaler" in plain.stdout


# -- fix: output formats and --exit-zero ----------------------------------------
def test_fix_output_format_json_lists_what_remains(tmp_path: Path) -> None:
    # AMP114 (binary_cross_entropy under autocast) has no fix: it remains.
    (tmp_path / "a.py").write_text(dedent("""
        import torch
        import torch.nn.functional as F


        def train(model, loader, optimizer):
            scaler = torch.cuda.amp.GradScaler()
            for x, y in loader:
                with torch.autocast("cuda"):
                    loss = F.binary_cross_entropy(torch.sigmoid(model(x)), y)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
        """))
    shown = run_cli("fix", "--no-cache", "--output-format", "json", tmp_path)
    assert [r["code"] for r in json.loads(shown.stdout)] == ["AMP114"]
    assert "Would fix 1 finding" in shown.stderr
    applied = run_cli("fix", "--no-cache", "--apply", "--output-format", "json", tmp_path)
    assert [r["code"] for r in json.loads(applied.stdout)] == ["AMP114"]
    assert "Fixed 1 finding in 1 file; 1 remaining." in applied.stderr
    assert 'torch.amp.GradScaler("cuda")' in (tmp_path / "a.py").read_text()


def test_fix_exit_zero(fixable: Path) -> None:
    assert run_cli("fix", "--no-cache", fixable).exit_code == 1
    assert run_cli("fix", "--no-cache", "--exit-zero", fixable).exit_code == 0


# -- show settings, show files --------------------------------------------------
def _shown(*args: str | Path) -> dict[str, tuple[str, str | None]]:
    """`check --show-settings`: each setting's value and where it came from."""
    result = run_cli("check", "--show-settings", *args)
    assert result.exit_code == 0, result.stderr
    shown = {}
    for line in result.stdout.splitlines():
        name, rest = line[:17].strip(), line[18:]
        value, _, origin = rest.partition(" # ")
        shown[name] = (value.strip(), origin or None)
    return shown


def test_show_settings(tree: Path) -> None:
    (tree / "amplint.toml").write_text('ignore = ["AMP1"]\ndtype = "bfloat16"\n')
    shown = _shown("--extend-ignore", "AMP203", "--config", "file-time-limit = 30", tree)
    config = str(tree / "amplint.toml")
    assert shown["configuration"] == (config, None)
    assert shown["ignore"] == ("AMP1", config)
    assert shown["extend-ignore"] == ("AMP203", "--extend-ignore")
    assert shown["dtype"] == ("bfloat16", config)
    assert shown["file-time-limit"] == ("30 s", "--config file-time-limit = 30")
    assert shown["select"] == ("AMP", "default")
    enabled = shown["enabled rules"][0]
    assert "AMP001" in enabled and "AMP203" not in enabled


def test_show_settings_for_a_file_says_what_it_gets_and_from_where(tree: Path) -> None:
    (tree / "pyproject.toml").write_text(
        '[tool.amplint]\nextend-ignore = ["AMP203"]\nper-file-ignores = {"a.py" = ["AMP202"]}\n'
    )
    (tree / "legacy").mkdir()
    (tree / "legacy" / "amplint.toml").write_text(
        'extend = "../pyproject.toml"\nextend-ignore = ["AMP201"]\n'
    )
    (tree / "legacy" / "a.py").write_text("x = 1\n")
    shown = _shown(tree / "legacy" / "a.py", "--dtype", "bfloat16")
    base, nested = str(tree / "pyproject.toml"), str(tree / "legacy" / "amplint.toml")
    assert shown["file"] == (str(tree / "legacy" / "a.py"), None)
    assert shown["configuration"] == (nested, None)
    assert shown["extend-ignore"] == ("AMP203, AMP201", f"{base} [tool.amplint] + {nested}")
    assert shown["dtype"] == ("bfloat16", "--dtype")
    # Its per-file-ignores (read from legacy/, where a.py matches) apply to it.
    assert "AMP202" not in shown["enabled rules"][0] and "AMP205" in shown["enabled rules"][0]
    whole = _shown(tree)  # a directory: the run's own
    assert whole["configuration"] == (base, None) and "file" not in whole


def test_show_files_lists_what_would_be_checked(tree: Path) -> None:
    (tree / "build").mkdir()
    (tree / "build" / "gen.py").write_text("x = 1\n")
    (tree / "nb.ipynb").write_text(
        '{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'
    )
    result = run_cli("check", "--show-files", tree)
    assert result.exit_code == 0
    assert sorted(result.stdout.splitlines()) == [str(tree / "a.py"), str(tree / "nb.ipynb")]


# -- honest summaries -----------------------------------------------------------
def test_a_file_that_cannot_be_written_is_not_counted_as_fixed(tmp_path: Path) -> None:
    (tmp_path / "ok.py").write_text(FIXABLE)
    locked = tmp_path / "locked.py"
    locked.write_text(FIXABLE)
    locked.chmod(0o444)
    result = run_cli("fix", "--no-cache", "--apply", tmp_path)
    assert result.exit_code == 2
    assert f"{locked}: cannot write: file is not writable (read-only); 1 finding not fixed" in (
        result.stderr
    )
    assert "Fixed 1 finding in 1 file; 1 remaining." in result.stdout
    assert locked.read_text() == FIXABLE and (tmp_path / "ok.py").read_text() == FIXED


def test_a_directory_with_nothing_to_check_gets_a_warning(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "notes.txt").write_text("loss.backward()\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("x = 1\n")
    result = run_cli("check", "--no-cache", tmp_path / "docs", tmp_path / "src")
    assert result.exit_code == 0
    assert f"amplint: warning: {tmp_path / 'docs'}: no Python file or notebook" in result.stderr
    assert str(tmp_path / "src") not in result.stderr


# -- noqa: file level, any line of a span, --add-noqa ---------------------------
@pytest.mark.parametrize(
    ("comment", "left"),
    [
        ("# amplint: noqa", []),
        ("# amplint: noqa: AMP201", ["AMP202"]),
        ("  # AMPLINT: NOQA: amp201, AMP202", []),
        ("x = 1  # amplint: noqa", ["AMP201", "AMP202"]),  # not on a line of its own
        ('"""\n# amplint: noqa\n"""', ["AMP201", "AMP202"]),  # a line of a string
        ("# flake8: noqa", ["AMP201", "AMP202"]),
    ],
)
def test_file_level_noqa(tmp_path: Path, comment: str, left: list[str]) -> None:
    (tmp_path / "a.py").write_text(CPU_AND_CUDA + comment + "\n")
    assert _codes(tmp_path) == left


def test_a_noqa_on_any_line_of_a_multi_line_span_silences_it() -> None:
    # No rule of amplint's reports a span over several lines today; the
    # filter is held to it directly.
    text = "a = 1\nscaler = f(\n    x{}\n)\nafter = 2{}\n"
    finding = Diagnostic("AMP201", "m", Span(2, 10, 4, 2))
    assert noqa_filter(text.format("", ""), [finding]) == [finding]
    for comment in ("  # noqa: AMP201", "  # noqa"):
        assert noqa_filter(text.format(comment, ""), [finding]) == [], comment
    assert noqa_filter(text.format("  # noqa: AMP202", ""), [finding]) == [finding]
    assert noqa_filter(text.format("", "  # noqa"), [finding]) == [finding]


FP32_LOOP = dedent("""
    import torch


    def train(model, loader, optimizer):
        for x, y in loader:{for_line}
            loss = torch.nn.functional.mse_loss(model(x), y){loss_line}
            loss.backward(){backward_line}
            optimizer.step()
            optimizer.zero_grad()
        print("done"){after_line}
    """)


@pytest.mark.parametrize(
    ("where", "comment", "silenced"),
    [
        ("backward_line", "  # noqa", True),  # the line flagged
        ("backward_line", "  # noqa: AMP001", True),
        ("for_line", "  # noqa: AMP001", True),  # another line of the step's loop
        ("loss_line", "  # noqa: AMP001, AMP101", True),
        ("loss_line", "  # noqa: E501", False),
        ("loss_line", "  # noqa", False),  # bare, maybe for another linter: not the step
        ("after_line", "  # noqa: AMP001", False),  # after the loop
    ],
)
def test_a_step_is_silenced_by_its_code_on_any_line_of_its_loop(
    tmp_path: Path, where: str, comment: str, silenced: bool
) -> None:
    lines = dict.fromkeys(("for_line", "loss_line", "backward_line", "after_line"), "")
    (tmp_path / "train.py").write_text(FP32_LOOP.format(**{**lines, where: comment}))
    assert _codes(tmp_path) == ([] if silenced else ["AMP001"])


def test_add_noqa_silences_every_finding_and_changes_nothing_else(tmp_path: Path) -> None:
    text = dedent('''
        import torch

        a = torch.cpu.amp.autocast()
        b = torch.cuda.amp.autocast()  # noqa: AMP101
        c = (torch.cuda.amp.GradScaler(), """
        text""")
        d = torch.cuda.amp.GradScaler() \\
            if True else None
        ''')
    (tmp_path / "a.py").write_bytes(text.replace("\n", "\r\n").encode())
    (tmp_path / "clean.py").write_text("x = 1\n")
    result = run_cli("check", "--no-cache", "--add-noqa", tmp_path)
    assert result.exit_code == 0, result.output
    assert "Added 2 noqa directives in 1 file." in result.stdout
    for line in (5, 7):  # inside a string, before a backslash: said, not touched
        assert f"a.py:{line}: no room for a `# noqa` there" in result.stderr
    written = (tmp_path / "a.py").read_bytes().decode()
    assert written == text.replace("\n", "\r\n").replace(
        "a = torch.cpu.amp.autocast()", "a = torch.cpu.amp.autocast()  # noqa: AMP202"
    ).replace("# noqa: AMP101", "# noqa: AMP101, AMP201")
    assert (tmp_path / "clean.py").read_text() == "x = 1\n"
    assert _codes(tmp_path) == ["AMP201", "AMP201"]  # the two lines without room
    again = run_cli("check", "--no-cache", "--add-noqa", tmp_path)
    assert "Added 0 noqa directives in 0 files." in again.stdout


# -- the catalogue and the cache ------------------------------------------------
@pytest.mark.parametrize("name", ["fp32-training-step", "FP32_training_step", "amp001"])
def test_rule_by_code_or_name(name: str) -> None:
    result = run_cli("rule", name)
    assert result.exit_code == 0
    assert result.stdout.startswith("# AMP001 fp32-training-step\n\nFix is always available")


def test_an_unknown_rule_name_suggests_the_nearest() -> None:
    result = run_cli("rule", "fp32-trainng-step")
    assert result.exit_code == 2
    assert "did you mean `fp32-training-step`, AMP001?" in result.stderr


def test_rule_reads_the_same_on_a_terminal_and_piped(monkeypatch: pytest.MonkeyPatch) -> None:
    piped = run_cli("rule", "AMP201").stdout
    monkeypatch.setattr("amplint.cli.rules._on_terminal", lambda: True)
    assert run_cli("rule", "AMP201").stdout == piped  # bold title only where colour is on
    doc = load_catalog()["AMP201"]
    assert not piped.startswith("---") and "\nsummary:" not in piped
    assert piped.startswith(f"# {doc.code} {doc.name}\n\nFix is")
    assert doc.body.partition("\n")[2] in piped


def test_rule_all_and_json() -> None:
    catalog = load_catalog()
    every = run_cli("rule", "--all")
    assert every.stdout == "\n".join(run_cli("rule", code).stdout for code in catalog)
    assert run_cli("rule").exit_code == 2 and run_cli("rule", "AMP001", "--all").exit_code == 2
    one = json.loads(run_cli("rule", "AMP204", "--output-format", "json").stdout)
    assert one["code"] == "AMP204" and one["fix"] == catalog["AMP204"].fix
    assert one["explanation"].startswith("# AMP204")
    listed = json.loads(run_cli("rules", "--output-format", "json").stdout)
    assert [record["code"] for record in listed] == list(catalog)
    assert {record["name"] for record in listed} == {doc.name for doc in catalog.values()}


def test_clean_removes_amplints_caches_and_nothing_else(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tree / "sub").mkdir()
    (tree / "sub" / "b.py").write_text(CPU_AND_CUDA)
    monkeypatch.chdir(tree)
    elsewhere = tree.parent / f"{tree.name}-cache"
    assert run_cli("check", "--cache-dir", elsewhere, ".").exit_code == 1
    assert run_cli("check", ".").exit_code == 1
    fake = tree / "sub" / ".amplint_cache"
    fake.mkdir()
    (fake / "keep.txt").write_text("not amplint's")
    monkeypatch.setenv("AMPLINT_CACHE_DIR", str(elsewhere))
    result = run_cli("clean")
    assert result.exit_code == 0
    assert not (tree / ".amplint_cache").exists() and not elsewhere.exists()
    assert (fake / "keep.txt").exists()
    assert "does not look like amplint's cache" in result.stderr
    assert run_cli("clean").stdout.count("Removed") == 0


def test_a_colour_choice_ends_with_its_command(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # --color lives in amplint.terminal for the run; the next command in the
    # same process (an editor, a test) starts on auto again.
    monkeypatch.setattr("amplint.cli.rules._on_terminal", lambda: True)
    assert "\x1b[" in run_cli("check", "--no-cache", "--color", "always", tree).stdout
    assert "\x1b[" not in run_cli("rule", "AMP201").stdout


# -- output as ruff orders and chooses it ------------------------------------
def test_findings_come_by_path_whatever_order_the_paths_were_named_in(tree: Path) -> None:
    (tree / "sub").mkdir()
    (tree / "sub" / "b.py").write_text(CPU_AND_CUDA)
    (tree / "c.py").write_text(CPU_AND_CUDA)
    result = run_cli("check", "--no-cache", tree / "c.py", tree / "sub", tree / "a.py")
    shown = [line.split(":", 1)[0] for line in result.stdout.splitlines() if ": AMP" in line]
    named = [str(tree / "a.py")] * 2 + [str(tree / "c.py")] * 2 + [str(tree / "sub" / "b.py")] * 2
    assert shown == named
    records = json.loads(
        run_cli("check", "--no-cache", "--output-format", "json", tree / "c.py", tree).stdout
    )
    assert [(r["path"], r["line"]) for r in records] == [
        (path, row) for path in sorted(set(named)) for row in (2, 3)
    ]


def test_the_output_format_can_come_from_the_environment(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AMPLINT_OUTPUT_FORMAT", "json")
    records = json.loads(run_cli("check", "--no-cache", tree).stdout)
    assert sorted(record["code"] for record in records) == ["AMP201", "AMP202"]
    # An option on the command line wins, as with RUFF_OUTPUT_FORMAT.
    lines = run_cli("check", "--no-cache", "--output-format", "concise", tree).stdout
    assert lines.startswith(f"{tree / 'a.py'}:2:")
    assert "AMPLINT_OUTPUT_FORMAT" in run_cli("check", "--help").stdout


# -- what git ignores, as ruff skips it -----------------------------------------
@pytest.fixture
def repository(tree: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`tree` as a git repository (a.py, ignored.py, global.py, tool.py), with a
    home of its own: the user's git configuration is read from there."""
    for name in ("ignored.py", "global.py", "tool.py"):
        (tree / name).write_text(CPU_AND_CUDA)
    (tree / ".git" / "info").mkdir(parents=True)
    home = tree.parent / f"{tree.name}-home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    return tree


def test_git_info_exclude_and_the_global_excludes_file_are_honoured(
    repository: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    every = ["a.py", "global.py", "ignored.py", "tool.py"]
    assert _checked(repository) == every
    (repository / ".git" / "info" / "exclude").write_text("# local\nignored.py\n")
    assert _checked(repository) == ["a.py", "global.py", "tool.py"]
    home = Path(os.environ["HOME"])
    # git's default place for the global excludes file...
    (home / ".config" / "git").mkdir(parents=True)
    (home / ".config" / "git" / "ignore").write_text("global.py\n")
    assert _checked(repository) == ["a.py", "tool.py"]
    # ... and the one core.excludesFile names, `~` and all.
    (home / "my-ignores").write_text("tool.py\n")
    (home / ".gitconfig").write_text(
        '[user]\n\tname = t\n[core]\n\texcludesFile = "~/my-ignores"\n'
    )
    assert _checked(repository) == ["a.py", "global.py"]
    # GIT_CONFIG_GLOBAL names the global configuration instead, as for git.
    (home / "other-config").write_text("[core]\n\texcludesfile = ~/none\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / "other-config"))
    assert _checked(repository) == ["a.py", "global.py", "tool.py"]


def test_dot_ignore_files_are_honoured_in_a_repository_and_outside(
    repository: Path, tmp_path: Path
) -> None:
    (repository / ".ignore").write_text("tool.py\n")
    assert _checked(repository) == ["a.py", "global.py", "ignored.py"]
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "sub" / "x.py").write_text(CPU_AND_CUDA)
    (outside / "y.py").write_text(CPU_AND_CUDA)
    (outside / ".ignore").write_text("sub/\n")
    assert _checked(outside) == ["y.py"]


def test_respect_gitignore_false_reads_what_git_ignores(repository: Path) -> None:
    (repository / ".gitignore").write_text("ignored.py\n")
    (repository / ".ignore").write_text("tool.py\n")
    (repository / ".git" / "info" / "exclude").write_text("global.py\n")
    assert _checked(repository) == ["a.py"]
    every = ["a.py", "global.py", "ignored.py", "tool.py"]
    assert _checked("--no-respect-gitignore", repository) == every
    (repository / "amplint.toml").write_text("respect-gitignore = false\n")
    assert _checked(repository) == every
    assert _checked("--respect-gitignore", repository) == ["a.py"]  # the option wins
    shown = run_cli("check", "--show-settings", repository).stdout
    assert "respect-gitignore false" in " ".join(shown.split())
    (repository / "amplint.toml").write_text('respect-gitignore = "no"\n')
    bad = run_cli("check", "--no-cache", repository)
    assert bad.exit_code == 2 and "`respect-gitignore` must be true or false" in bad.stderr


# -- which fixes apply, as ruff's keys say --------------------------------------
# AMP201's fix is safe; AMP122's (a CUDA scaler in an MPS script) is unsafe.
MPS_SCRIPT = dedent("""
    import torch

    device = torch.device("mps" if torch.backends.mps.is_available() else "cpu")
    model = torch.nn.Linear(4, 4).to(device)
    scaler = torch.amp.GradScaler()
    """)


def test_unfixable_codes_are_reported_without_a_fix_and_never_fixed(tree: Path) -> None:
    (tree / "amplint.toml").write_text('unfixable = ["AMP202"]\n')
    records = json.loads(run_cli("check", "--no-cache", "--output-format", "json", tree).stdout)
    fixes = {record["code"]: record["fix"] for record in records}
    assert fixes["AMP202"] is None and fixes["AMP201"] is not None
    assert run_cli("check", "--no-cache", "--fix", tree).exit_code == 1
    text = (tree / "a.py").read_text()
    assert "torch.cpu.amp.autocast()" in text and "torch.cuda.amp" not in text
    (tree / "b.py").write_text(CPU_AND_CUDA)
    (tree / "amplint.toml").write_text('fixable = ["AMP202"]\n')  # only these
    run_cli("check", "--no-cache", "--fix", tree / "b.py")
    text = (tree / "b.py").read_text()
    assert "torch.cpu.amp" not in text and "torch.cuda.amp.autocast()" in text
    shown = " ".join(run_cli("check", "--show-settings", tree).stdout.split())
    assert "fixable AMP202" in shown and "unfixable (none)" in shown


def test_unsafe_fixes_from_the_configuration_and_the_option_over_it(tree: Path) -> None:
    script = tree / "mps.py"
    script.write_text(MPS_SCRIPT)
    assert run_cli("fix", "--no-cache", "--apply", script).exit_code == 1
    assert script.read_text() == MPS_SCRIPT  # unsafe: left
    (tree / "amplint.toml").write_text("unsafe-fixes = true\n")
    run_cli("fix", "--no-cache", "--apply", "--no-unsafe-fixes", script)
    assert script.read_text() == MPS_SCRIPT  # the option wins
    run_cli("fix", "--no-cache", "--apply", script)
    assert "GradScaler(device.type" in script.read_text()


def test_fix_only_fixes_and_reports_nothing_left(tree: Path) -> None:
    (tree / "mps.py").write_text(MPS_SCRIPT)
    result = run_cli("check", "--no-cache", "--fix-only", tree)
    assert result.exit_code == 0, result.output
    assert "AMP122" not in result.stdout  # left, not reported
    assert result.stdout.strip().endswith("Fixed 2 findings.")
    assert "torch.amp.autocast" in (tree / "a.py").read_text()
    again = run_cli("check", "--no-cache", "--fix-only", "--exit-non-zero-on-fix", tree)
    assert again.exit_code == 0 and again.stdout.strip().endswith("Fixed 0 findings.")


# -- the user's configuration, and none at all ---------------------------------
@pytest.fixture
def user_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An XDG config directory of the test's own, holding amplint's."""
    config_home = tmp_path / "xdg-config"
    (config_home / "amplint").mkdir(parents=True)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config_home))
    return config_home / "amplint"


def test_the_user_configuration_applies_where_no_project_has_one(
    tree: Path, user_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (user_home / "amplint.toml").write_text('select = ["AMP202"]\nextend-exclude = ["skip/"]\n')
    (tree / "skip").mkdir()
    (tree / "skip" / "b.py").write_text(CPU_AND_CUDA)
    monkeypatch.chdir(tree)  # the user's patterns are relative to where amplint runs
    assert _named_codes(tree) == [("a.py", "AMP202")]
    shown = " ".join(run_cli("check", "--show-settings", tree).stdout.split())
    assert f"configuration {user_home / 'amplint.toml'}" in shown
    (tree / "amplint.toml").write_text('select = ["AMP201"]\n')  # a project's wins
    assert _named_codes(tree) == [("a.py", "AMP201"), ("b.py", "AMP201")]


def test_isolated_reads_no_configuration_file(tree: Path, user_home: Path) -> None:
    (user_home / "amplint.toml").write_text('select = ["AMP202"]\n')
    (tree / "amplint.toml").write_text('select = ["AMP201"]\n')
    assert _named_codes("--isolated", tree) == [("a.py", "AMP201"), ("a.py", "AMP202")]
    overridden = _named_codes("--isolated", "--config", 'select = ["AMP202"]', tree)
    assert overridden == [("a.py", "AMP202")]
    refused = run_cli("check", "--isolated", "--config", tree / "amplint.toml", tree)
    assert refused.exit_code == 2 and "--isolated reads no configuration file" in refused.stderr


def test_extend_lays_a_configuration_over_another(tree: Path) -> None:
    # ruff's `extend`: the base first; a key replaces the base's value, an
    # `extend-` key adds to it; paths relative to the extending file, `~` too.
    (tree / "shared").mkdir()
    (tree / "shared" / "base.toml").write_text(
        'select = ["AMP2"]\nextend-ignore = ["AMP202"]\n'
        '[per-file-ignores]\n"legacy/*" = ["AMP201"]\n'
    )
    (tree / "legacy").mkdir()
    (tree / "legacy" / "old.py").write_text(CPU_AND_CUDA)
    (tree / "amplint.toml").write_text('extend = "shared/base.toml"\n')
    assert _named_codes(tree) == [("a.py", "AMP201")]
    (tree / "amplint.toml").write_text(
        'extend = "shared/base.toml"\nextend-ignore = ["AMP201"]\n'
        '[extend-per-file-ignores]\n"a.py" = ["AMP2"]\n'
    )
    assert _named_codes(tree) == []  # both ignores, both per-file tables
    (tree / "amplint.toml").write_text(  # replaces the base's table
        'extend = "shared/base.toml"\n[per-file-ignores]\n"nothing/*" = ["AMP1"]\n'
    )
    assert _named_codes(tree) == [("a.py", "AMP201"), ("old.py", "AMP201")]
    (tree / "shared" / "base.toml").write_text('extend = "../amplint.toml"\n')
    looped = run_cli("check", "--no-cache", tree)
    assert looped.exit_code == 2 and "`extend` goes round" in looped.stderr


# -- the closest configuration to each file, as ruff resolves it -------------------------
_DEPRECATED = "import torch\n\nscaler = torch.cuda.amp.GradScaler()\n"
_STEP = dedent("""
    def train(model, loader, optimizer):
        for x, y in loader:
            loss = model(x).sub(y).pow(2).mean()
            loss.backward()
            optimizer.step()
    """)


def _nested(tmp_path: Path, legacy_config: str) -> Path:
    (tmp_path / "pyproject.toml").write_text("[tool.amplint]\n")
    (tmp_path / "train.py").write_text(_DEPRECATED)
    (tmp_path / "legacy").mkdir()
    (tmp_path / "legacy" / "amplint.toml").write_text(legacy_config)
    (tmp_path / "legacy" / "old.py").write_text(_DEPRECATED + _STEP)
    return tmp_path


def _by_file(result) -> list[tuple[str, str]]:
    """(file name, code) of each finding in `check --output-format json`'s output."""
    return sorted(
        (Path(record["path"]).name, record["code"]) for record in json.loads(result.stdout)
    )


def test_each_file_gets_the_configuration_closest_to_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _nested(tmp_path, 'ignore = ["AMP201"]\n')
    monkeypatch.chdir(root)
    whole = run_cli("check", "--no-cache", "--output-format", "json", ".")
    assert _by_file(whole) == [("old.py", "AMP001"), ("train.py", "AMP201")]
    alone = run_cli("check", "--no-cache", "--output-format", "json", "legacy/old.py")
    assert _by_file(alone) == [("old.py", "AMP001")]  # `check .` and `check legacy/x.py` agree


def test_the_command_line_applies_over_every_closest_configuration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _nested(tmp_path, 'ignore = ["AMP201"]\n')
    monkeypatch.chdir(root)
    result = run_cli(
        "check", "--no-cache", "--output-format", "json", "--extend-ignore", "AMP001", "."
    )
    assert _by_file(result) == [("train.py", "AMP201")]


def test_unsafe_fixes_come_from_each_files_closest_configuration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "amplint.toml").write_text("")
    (tmp_path / "legacy").mkdir()
    (tmp_path / "legacy" / "amplint.toml").write_text("unsafe-fixes = true\n")
    for place in (tmp_path, tmp_path / "legacy"):
        (place / "mps.py").write_text(MPS_SCRIPT)
    monkeypatch.chdir(tmp_path)
    result = run_cli("fix", "--no-cache", "--apply", ".")
    assert "GradScaler(device.type" in (tmp_path / "legacy" / "mps.py").read_text()
    assert (tmp_path / "mps.py").read_text() == MPS_SCRIPT  # its configuration: safe only
    assert "1 more fixable with --unsafe-fixes." in result.output
    (tmp_path / "legacy" / "mps.py").write_text(MPS_SCRIPT)
    run_cli("fix", "--no-cache", "--apply", "--no-unsafe-fixes", ".")  # the option over both
    assert (tmp_path / "legacy" / "mps.py").read_text() == MPS_SCRIPT


def test_a_nested_configuration_excludes_its_own_files_unless_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _nested(tmp_path, 'extend-exclude = ["old.py"]\n')
    monkeypatch.chdir(root)
    whole = run_cli("check", "--no-cache", "--output-format", "json", ".")
    assert _by_file(whole) == [("train.py", "AMP201")]
    named = run_cli("check", "--no-cache", "--output-format", "json", "legacy/old.py")
    assert _by_file(named) == [("old.py", "AMP001"), ("old.py", "AMP201")]
    listed = run_cli("check", "--show-files", ".")
    assert "train.py" in listed.stdout and "old.py" not in listed.stdout


def test_a_configuration_named_on_the_command_line_serves_every_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _nested(tmp_path, 'ignore = ["AMP201"]\n')
    monkeypatch.chdir(root)
    for named in (["--config", "pyproject.toml"], ["--isolated"]):
        result = run_cli("check", "--no-cache", "--output-format", "json", *named, ".")
        assert _by_file(result) == [
            ("old.py", "AMP001"),
            ("old.py", "AMP201"),
            ("train.py", "AMP201"),
        ]


def test_a_broken_nested_configuration_is_an_error_for_its_files_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _nested(tmp_path, "ignore = [1]\n")
    monkeypatch.chdir(root)
    result = run_cli("check", "--no-cache", "--output-format", "json", ".")
    assert result.exit_code == 2 and _by_file(result) == [("train.py", "AMP201")]
    assert "legacy/old.py: its configuration: " in result.stderr
    assert "amplint.toml" in result.stderr
