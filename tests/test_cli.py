"""The command line contract: exit codes, output formats, files and config."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from tests.helpers import REPO, dedent, run_cli

DEPRECATED = dedent("""
    import torch


    def train(model, batches, optimizer, use_amp):
        scaler = torch.cuda.amp.GradScaler(enabled=use_amp)
        for x, y in batches:
            with torch.cuda.amp.autocast(enabled=use_amp):
                loss = torch.nn.functional.mse_loss(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    """)
MIGRATED = DEPRECATED.replace(
    "torch.cuda.amp.GradScaler(", 'torch.amp.GradScaler("cuda", '
).replace("torch.cuda.amp.autocast(", 'torch.amp.autocast("cuda", ')
CLEAN = "import torch\n\nx = torch.ones(3)\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text(DEPRECATED)
    (tmp_path / "clean.py").write_text(CLEAN)
    return tmp_path


# -- check: exit codes and output -----------------------------------------------
def test_check_clean_exits_0(tmp_path: Path) -> None:
    (tmp_path / "clean.py").write_text(CLEAN)
    result = run_cli("check", tmp_path)
    assert result.exit_code == 0
    assert "All checks passed." in result.stdout


def test_check_findings_exit_1_with_rows_and_summary(project: Path) -> None:
    result = run_cli("check", project)
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    path = project / "train.py"
    assert lines[0] == (
        f"{path}:5:14: AMP201 [*] `torch.cuda.amp.GradScaler` is deprecated; "
        'use `torch.amp.GradScaler("cuda", ...)`'
    )
    assert lines[1].startswith(f"{path}:7:14: AMP201 [*] `torch.cuda.amp.autocast`")
    assert lines[-1] == "Found 2 findings (2 fixable with `amplint fix --apply`)."


def test_exit_zero(project: Path) -> None:
    assert run_cli("check", "--exit-zero", project).exit_code == 0


def test_missing_path_is_an_error_and_others_still_run(project: Path) -> None:
    result = run_cli("check", project / "nope.py", project / "train.py")
    assert result.exit_code == 2
    assert "nope.py: no such file or directory" in result.stderr
    assert "AMP201" in result.stdout


def test_bad_option_is_a_usage_error(project: Path) -> None:
    assert run_cli("check", "--output-format", "xml", project).exit_code == 2
    result = run_cli("check", "--select", "XYZ1", project)
    assert result.exit_code == 2
    assert "XYZ1" in result.stderr


def test_json_output_schema(project: Path) -> None:
    result = run_cli("check", "--output-format", "json", project)
    assert result.exit_code == 1
    records = json.loads(result.stdout)
    assert len(records) == 2
    first = records[0]
    assert first == {
        "code": "AMP201",
        "name": "deprecated-cuda-amp",
        "message": first["message"],
        "path": str(project / "train.py"),
        "cell": None,
        "line": 5,
        "column": 14,
        "end_line": 5,
        "end_column": 39,
        "fix": {
            "applicability": "safe",
            "message": 'torch.cuda.amp.GradScaler -> torch.amp.GradScaler("cuda", ...)',
        },
    }
    assert "torch.cuda.amp.GradScaler" in first["message"]


def test_json_fix_is_null_when_not_fixable(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("import torch\nctx = torch.cuda.amp.autocast(*flags)\n")
    records = json.loads(run_cli("check", "--output-format", "json", tmp_path).stdout)
    assert records[0]["fix"] is None
    assert "not fixed" in records[0]["message"]


def test_json_with_no_findings_is_an_empty_list(tmp_path: Path) -> None:
    (tmp_path / "clean.py").write_text(CLEAN)
    result = run_cli("check", "--output-format", "json", tmp_path)
    assert result.exit_code == 0
    assert json.loads(result.stdout) == []


# -- selection ------------------------------------------------------------------
CPU_AND_CUDA = "import torch\na = torch.cpu.amp.autocast()\nb = torch.cuda.amp.autocast()\n"


@pytest.mark.parametrize(
    ("options", "codes"),
    [
        ((), ["AMP202", "AMP201"]),
        (("--select", "AMP201"), ["AMP201"]),
        (("--select", "AMP2"), ["AMP202", "AMP201"]),
        (("--ignore", "AMP201"), ["AMP202"]),
        (("--ignore", "AMP2"), []),
        (("--select", "AMP201,AMP202", "--ignore", "AMP202"), ["AMP201"]),
    ],
)
def test_select_and_ignore(tmp_path: Path, options: tuple[str, ...], codes: list[str]) -> None:
    (tmp_path / "a.py").write_text(CPU_AND_CUDA)
    result = run_cli("check", "--output-format", "json", *options, tmp_path)
    assert [record["code"] for record in json.loads(result.stdout)] == codes


# -- noqa -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("comment", "reported"),
    [
        ("# noqa", False),
        ("# noqa: AMP201", False),
        ("# NOQA:AMP202,AMP201", False),
        ("# noqa: AMP202", True),
        ("# a comment", True),
    ],
)
def test_noqa(tmp_path: Path, comment: str, reported: bool) -> None:
    (tmp_path / "a.py").write_text(f"import torch\nctx = torch.cuda.amp.autocast()  {comment}\n")
    result = run_cli("check", tmp_path)
    assert ("AMP201" in result.stdout) == reported
    assert result.exit_code == (1 if reported else 0)


# -- config ---------------------------------------------------------------------
def _pyproject(root: Path, body: str) -> None:
    (root / "pyproject.toml").write_text("[tool.amplint]\n" + dedent(body))


def test_config_select_in_nearest_pyproject(tmp_path: Path) -> None:
    _pyproject(tmp_path, 'ignore = ["AMP201"]\n')
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text(CPU_AND_CUDA)
    result = run_cli("check", "--output-format", "json", tmp_path / "pkg")
    assert [r["code"] for r in json.loads(result.stdout)] == ["AMP202"]


def test_config_per_file_ignores_and_exclude(tmp_path: Path) -> None:
    _pyproject(
        tmp_path,
        """
        extend-exclude = ["legacy/"]
        [tool.amplint.per-file-ignores]
        "tests/*" = ["AMP2"]
        """,
    )
    for folder in ("tests", "legacy", "src"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "a.py").write_text(CPU_AND_CUDA)
    result = run_cli("check", "--output-format", "json", tmp_path)
    assert {r["path"] for r in json.loads(result.stdout)} == {str(tmp_path / "src" / "a.py")}


def test_explicit_config_file(tmp_path: Path) -> None:
    config = tmp_path / "custom.toml"
    config.write_text('select = ["AMP202"]\n')
    (tmp_path / "a.py").write_text(CPU_AND_CUDA)
    result = run_cli("check", "--config", config, "--output-format", "json", tmp_path)
    assert [r["code"] for r in json.loads(result.stdout)] == ["AMP202"]


def test_target_torch_from_config(tmp_path: Path) -> None:
    _pyproject(tmp_path, 'target-torch = "2.2"\n')
    (tmp_path / "a.py").write_text("import torch\ns = torch.cuda.amp.GradScaler()\n")
    result = run_cli("check", "--output-format", "json", tmp_path)
    # torch 2.2 has no torch.amp.GradScaler: the deprecated spelling is its own.
    assert json.loads(result.stdout) == []
    _pyproject(tmp_path, 'target-torch = "2.3"\n')
    result = run_cli("check", "--output-format", "json", tmp_path)
    assert [record["code"] for record in json.loads(result.stdout)] == ["AMP201"]


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ("selct = ['AMP2']\n", "unknown key `selct`"),
        ("select = 'AMP201'\nignore = 3\n", "`ignore` must be a list"),
        ("select = ['AMP7']\n", "`select` names `AMP7`"),
        ("target-torch = 2.4\n", "`target-torch` must be a version string"),
        ("target-torch = 'two'\n", "`target-torch` must be a version string"),
        ("exclude = 'build'\n", "`exclude` must be a list of strings"),
        ("[tool.amplint.per-file-ignores]\n'a.py' = ['NOPE1']\n", "matches no rule"),
        ("select = [\n", "invalid TOML"),
        ("exclude = ['[z-a]']\n", "`exclude` holds `[z-a]`, not a valid pattern"),
        ("extend-exclude = ['x/[9-0]']\n", "`extend-exclude` holds `x/[9-0]`"),
        ("[tool.amplint.per-file-ignores]\n'[z-a].py' = ['AMP2']\n", "`per-file-ignores` holds"),
        (f"target-torch = '2.{'9' * 5000}'\n", "`target-torch` must be a version string"),
    ],
)
def test_config_errors_name_the_key_and_exit_2(tmp_path: Path, body: str, named: str) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.amplint]\n" + body)
    (tmp_path / "a.py").write_text(CPU_AND_CUDA)
    result = run_cli("check", tmp_path)
    assert result.exit_code == 2
    assert named in result.stderr
    assert "pyproject.toml" in result.stderr


def test_missing_config_file_is_an_error(tmp_path: Path) -> None:
    result = run_cli("check", "--config", tmp_path / "none.toml", tmp_path)
    assert result.exit_code == 2
    assert "no such file" in result.stderr


# -- discovery ------------------------------------------------------------------
def test_discovery_skips_default_excludes_and_gitignored(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".gitignore").write_text("generated/\n*_pb2.py\n")
    for folder in (".venv", "build", "node_modules", "generated", "src"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "a.py").write_text(CPU_AND_CUDA)
    (tmp_path / "src" / "model_pb2.py").write_text(CPU_AND_CUDA)
    (tmp_path / "src" / "notes.txt").write_text(CPU_AND_CUDA)
    result = run_cli("check", "--output-format", "json", tmp_path)
    assert {r["path"] for r in json.loads(result.stdout)} == {str(tmp_path / "src" / "a.py")}


def test_a_file_named_on_the_command_line_is_always_checked(tmp_path: Path) -> None:
    (tmp_path / "build").mkdir()
    target = tmp_path / "build" / "a.py"
    target.write_text(CPU_AND_CUDA)
    assert run_cli("check", target).exit_code == 1


# -- bad input ------------------------------------------------------------------
def test_syntax_error_is_a_finding(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text("import torch\nwith torch.cuda.amp.autocast()\n    pass\n")
    (tmp_path / "train.py").write_text(DEPRECATED)
    result = run_cli("check", tmp_path)
    assert result.exit_code == 1
    assert f"{tmp_path / 'broken.py'}:2:31: AMP900 syntax error: expected ':'" in result.stdout
    assert "train.py:5:14: AMP201" in result.stdout


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"import torch\nx = '\xff\xfe'\n# torch.cuda.amp\n", "cannot decode as utf-8"),
        (b"\x7fELF\x00\x01\x02torch.cuda.amp", "binary file"),
        (b"# -*- coding: klingon -*-\nimport torch\n", "cannot decode"),
    ],
)
def test_unreadable_content_is_a_one_line_error(
    tmp_path: Path, content: bytes, message: str
) -> None:
    (tmp_path / "bad.py").write_bytes(content)
    (tmp_path / "train.py").write_text(DEPRECATED)
    result = run_cli("check", tmp_path)
    assert result.exit_code == 2
    errors = result.stderr.strip().splitlines()
    assert len(errors) == 1 and message in errors[0] and "bad.py" in errors[0]
    assert "train.py:5:14: AMP201" in result.stdout  # the other file is still checked


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "secret.py"
    target.write_text(DEPRECATED)
    (tmp_path / "train.py").write_text(DEPRECATED)
    if os.geteuid() == 0:  # root reads any file: make the read fail as it would for a user
        from amplint import files

        real_read_regular = files.read_regular

        def read_regular(path, *args, **kwargs) -> bytes:
            if Path(path).name == "secret.py":
                raise PermissionError(13, "Permission denied")
            return real_read_regular(path, *args, **kwargs)

        monkeypatch.setattr(files, "read_regular", read_regular)
    else:
        target.chmod(0)
    result = run_cli("check", tmp_path)
    assert result.exit_code == 2
    assert f"{target}: Permission denied" in result.stderr
    assert "train.py:5:14: AMP201" in result.stdout


def test_special_files_are_skipped(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.py")  # reading it would block forever
    (tmp_path / "train.py").write_text(DEPRECATED)
    result = run_cli("check", tmp_path)
    assert result.exit_code == 1
    assert "pipe.py" not in result.output
    named = run_cli("check", tmp_path / "pipe.py")
    assert named.exit_code == 2
    assert "not a regular file" in named.stderr


# -- fix ------------------------------------------------------------------------
def test_fix_shows_a_diff_and_writes_nothing(project: Path) -> None:
    result = run_cli("fix", project)
    assert result.exit_code == 1
    assert "-    scaler = torch.cuda.amp.GradScaler(enabled=use_amp)" in result.stdout
    assert '+    scaler = torch.amp.GradScaler("cuda", enabled=use_amp)' in result.stdout
    assert "Would fix 2 findings in 1 file" in result.stderr
    assert (project / "train.py").read_text() == DEPRECATED


def test_fix_with_nothing_to_do_exits_0(tmp_path: Path) -> None:
    (tmp_path / "clean.py").write_text(CLEAN)
    result = run_cli("fix", tmp_path)
    assert result.exit_code == 0
    assert result.stdout == ""


def test_fix_apply_writes_reports_and_is_idempotent(project: Path) -> None:
    result = run_cli("fix", "--apply", project)
    assert result.exit_code == 0, result.output
    assert (project / "train.py").read_text() == MIGRATED
    assert (project / "clean.py").read_text() == CLEAN
    assert f"{project / 'train.py'}: fixed 2" in result.stdout
    assert 'AMP201 torch.cuda.amp.autocast -> torch.amp.autocast("cuda", ...)' in result.stdout
    again = run_cli("fix", "--apply", project)
    assert again.exit_code == 0
    assert (project / "train.py").read_text() == MIGRATED
    assert run_cli("check", project).exit_code == 0


def test_fix_apply_exits_1_when_findings_remain(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(DEPRECATED + "ctx = torch.cuda.amp.autocast(*flags)\n")
    result = run_cli("fix", "--apply", tmp_path)
    assert result.exit_code == 1
    assert "AMP201" in result.stdout and "not fixed" in result.stdout
    assert "1 remaining" in result.stdout


def test_fix_accepts_unsafe_fixes(project: Path) -> None:
    result = run_cli("fix", "--apply", "--unsafe-fixes", project)
    assert result.exit_code == 0
    assert (project / "train.py").read_text() == MIGRATED


def test_fix_keeps_crlf_bom_and_mode(tmp_path: Path) -> None:
    target = tmp_path / "win.py"
    target.write_bytes(b"\xef\xbb\xbf" + DEPRECATED.replace("\n", "\r\n").encode())
    target.chmod(0o751)
    assert run_cli("fix", "--apply", tmp_path).exit_code == 0
    assert target.read_bytes() == b"\xef\xbb\xbf" + MIGRATED.replace("\n", "\r\n").encode()
    assert stat.S_IMODE(target.stat().st_mode) == 0o751
    assert [p.name for p in tmp_path.iterdir()] == ["win.py"]  # no temporary left behind


def test_fix_keeps_a_latin1_file_in_latin1(tmp_path: Path) -> None:
    header = "# -*- coding: latin-1 -*-\n# Entraînement\n"
    target = tmp_path / "fr.py"
    target.write_bytes((header + DEPRECATED).encode("latin-1"))
    assert run_cli("fix", "--apply", tmp_path).exit_code == 0
    assert target.read_bytes() == (header + MIGRATED).encode("latin-1")


def test_fix_refuses_a_file_it_cannot_round_trip(tmp_path: Path) -> None:
    # libcst does not reproduce lone-CR newlines; writing would corrupt the file.
    target = tmp_path / "mac.py"
    original = DEPRECATED.replace("\n", "\r").encode()
    target.write_bytes(original)
    result = run_cli("fix", "--apply", tmp_path)
    assert result.exit_code == 2
    assert "left unchanged" in result.stderr
    assert target.read_bytes() == original


def test_fix_reports_a_read_only_file(tmp_path: Path) -> None:
    directory = tmp_path / "ro"
    directory.mkdir()
    target = directory / "a.py"
    target.write_text(DEPRECATED)
    target.chmod(0o444)
    result = run_cli("fix", "--apply", directory)
    assert result.exit_code == 2
    assert "not writable" in result.stderr
    assert target.read_text() == DEPRECATED


def test_check_and_fix_never_execute_the_code_they_read(tmp_path: Path) -> None:
    marker = tmp_path / "executed"
    (tmp_path / "evil.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n"
        "import torch\n"
        "scaler = torch.cuda.amp.GradScaler()\n"
    )
    assert run_cli("check", tmp_path).exit_code == 1
    assert run_cli("fix", "--apply", tmp_path).exit_code == 0
    assert "torch.amp.GradScaler" in (tmp_path / "evil.py").read_text()
    assert not marker.exists()


def test_config_exclude_replaces_the_defaults(tmp_path: Path) -> None:
    _pyproject(tmp_path, 'exclude = ["vendored"]\n')
    for folder in ("build", "vendored"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "a.py").write_text(CPU_AND_CUDA)
    result = run_cli("check", "--output-format", "json", tmp_path)
    assert {r["path"] for r in json.loads(result.stdout)} == {str(tmp_path / "build" / "a.py")}


def test_force_exclude_applies_the_excludes_to_named_files(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.amplint]\nextend-exclude = ["legacy"]\n')
    (tmp_path / "legacy").mkdir()
    (tmp_path / "legacy" / "old.py").write_text(DEPRECATED)
    (tmp_path / "train.py").write_text(DEPRECATED)
    named = [tmp_path / "legacy" / "old.py", tmp_path / "train.py"]
    assert "old.py" in run_cli("check", "--no-cache", *named).stdout
    result = run_cli("check", "--no-cache", "--force-exclude", *named)
    assert "old.py" not in result.stdout and "train.py" in result.stdout


def test_a_config_value_longer_than_any_file_name_is_an_override_not_a_crash(
    tmp_path: Path,
) -> None:
    """`--config KEY=VALUE` longer than the system's file-name limit (255 bytes)
    was tested as a path first and crashed the run (issue 43: `OSError: File name
    too long`).  A valid one now applies; a bad one, or no KEY=VALUE at all, is
    exit 2 with a message."""
    (tmp_path / "a.py").write_text(CPU_AND_CUDA)
    pattern = "generated/" + "x" * 300 + "/*.py"
    applied = run_cli("check", "--config", f'extend-exclude = ["{pattern}"]', tmp_path)
    assert applied.exit_code == 1 and "AMP20" in applied.output  # ran, found its findings
    unknown = run_cli("check", "--config", f'select = ["{"A" * 300}"]', tmp_path)
    assert unknown.exit_code == 2 and "`select` names `AAAA" in unknown.output
    neither = run_cli("check", "--config", "x" * 300, tmp_path)
    assert neither.exit_code == 2 and "cannot read" in neither.output


def test_a_syntax_error_is_amp900_where_a_rule_would_look_as_the_readme_says(
    tmp_path: Path,
) -> None:
    # The README promised AMP900 for every file that does not parse, while a
    # file mentioning nothing a rule looks for passed: it now says which.
    (tmp_path / "notes.py").write_text("def broken(:\n    pass\n")
    (tmp_path / "train.py").write_text(
        "import torch\nscaler = torch.cuda.amp.GradScaler()\ndef broken(:\n    pass\n"
    )
    result = run_cli("check", "--no-cache", tmp_path)
    assert "train.py:3:12: AMP900" in result.stdout and "notes.py" not in result.stdout
    usage = (REPO / "docs" / "usage.md").read_text(encoding="utf-8")
    assert "a syntax error there passes unreported" in " ".join(usage.split())
