"""The Python API over paths, and the command line as its client: `check` and
`fix` run `api.check_paths` / `api.fix_paths` and report their records."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from amplint import api
from tests.helpers import REPO, dedent, run_cli

NOTEBOOK = REPO / "fixtures" / "notebooks" / "cuda_amp_scaler.ipynb"
DEPRECATED = dedent("""
    import torch

    scaler = torch.cuda.amp.GradScaler()
    """)
FP32_STEP = REPO / "fixtures" / "fp32_steps" / "nested_loops.py"


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "pkg").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[tool.amplint]\n", encoding="utf-8")
    (root / "pkg" / "scaler.py").write_text(DEPRECATED, encoding="utf-8")
    shutil.copy(FP32_STEP, root / "pkg" / "train.py")
    (root / "pkg" / "broken.py").write_bytes(b"\xff\xfe not utf-8 \x00")
    shutil.copy(NOTEBOOK, root / "explore.ipynb")
    return root


def _json_record(path: Path, finding: api.Finding) -> dict:
    """What `check --output-format json` says of a finding, from its API record."""
    fix = finding.fix
    return {
        "path": str(path),
        "code": finding.code,
        "message": finding.message,
        "cell": finding.cell,
        "line": finding.range.start.line,
        "column": finding.range.start.column,
        "end_line": finding.range.end.line,
        "end_column": finding.range.end.column,
        "fix": None if fix is None else "safe" if fix.safe else "unsafe",
    }


def test_check_paths_gives_what_check_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _tree(tmp_path)
    monkeypatch.chdir(root)
    run = api.check_paths([Path(".")], cache=False)
    assert [result.path.as_posix() for result in run.files] == [
        "explore.ipynb",
        "pkg/broken.py",
        "pkg/scaler.py",
        "pkg/train.py",
    ]
    broken = run.files[1]
    assert broken.error is not None and broken.findings == ()
    from_api = [_json_record(r.path, f) for r in run.files for f in r.findings]
    assert {record["code"] for record in from_api} >= {"AMP001", "AMP201"}
    assert any(record["cell"] is not None for record in from_api)  # the notebook's

    printed = run_cli("check", "--no-cache", "--output-format", "json", ".")
    from_cli = [
        {**record, "fix": record["fix"] and record["fix"]["applicability"]}
        for record in json.loads(printed.stdout)
    ]
    for record in from_cli:
        del record["name"]
    assert from_cli == from_api
    assert f"{broken.path}: {broken.error}" in printed.stderr


def test_each_fix_has_its_edits_where_asked_and_a_notebook_edits_its_cells(
    tmp_path: Path,
) -> None:
    root = _tree(tmp_path)
    without = api.check_paths([root / "pkg" / "scaler.py"], cache=False)
    [finding] = without.files[0].findings
    assert finding.fix is not None and finding.fix.safe and finding.fix.edits is None

    with_edits = api.check_paths([root / "pkg" / "scaler.py"], edits=True, cache=False)
    [finding] = with_edits.files[0].findings
    fixed = api.fix_paths([root / "pkg" / "scaler.py"], cache=False).files[0].fixed_text
    assert api.apply_edits(DEPRECATED, finding.fix.edits) == fixed != DEPRECATED

    # A notebook's edits are in its cells' lines, as its findings are.
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": "# Training"},
        _code_cell("import torch\n%matplotlib inline"),
        _code_cell("x = 1\nscaler = torch.cuda.amp.GradScaler()"),
    ]
    text = json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    [finding] = api.check_source(text, root / "explore.ipynb")
    assert finding.cell == 3 and finding.range.start == api.Location(2, 10)
    assert [edit.cell for edit in finding.fix.edits] == [3]
    fixed_notebook = json.loads(api.fix_source(text, root / "explore.ipynb").text)
    fixed_cell = "".join(fixed_notebook["cells"][2]["source"])
    assert api.apply_edits(cells[2]["source"], finding.fix.edits) == fixed_cell
    assert "torch.amp.GradScaler" in fixed_cell


def _code_cell(source: str) -> dict:
    return {
        "cell_type": "code",
        "execution_count": None,
        "metadata": {},
        "outputs": [],
        "source": source,
    }


def test_fix_paths_writes_as_fix_does_and_says_what_it_fixed(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    shown = api.fix_paths([root / "pkg"], cache=False)
    scaler = next(f for f in shown.files if f.path.name == "scaler.py")
    assert [f.code for f in scaler.fixed] == ["AMP201"] and scaler.fixed_text is not None
    assert (root / "pkg" / "scaler.py").read_text(encoding="utf-8") == DEPRECATED  # not written

    written = api.fix_paths([root / "pkg"], write=True, cache=False)
    assert (root / "pkg" / "scaler.py").read_text(encoding="utf-8") == scaler.fixed_text
    assert [f.error is not None for f in written.files] == [True, False, False]  # broken.py
    again = api.fix_paths([root / "pkg"], write=True, cache=False)
    assert all(f.fixed == () and f.fixed_text is None for f in again.files)


def test_check_paths_tells_what_is_worth_a_word(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    run = api.check_paths([tmp_path / "empty"], cache=False)
    assert run.files == ()
    assert run.warnings == (f"{tmp_path / 'empty'}: no Python file or notebook to check here",)
    with pytest.raises(ValueError, match="jobs"):
        api.check_paths([tmp_path], jobs=0)


def test_check_and_fix_report_the_records_the_api_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command line is a client of the API: what `api.check_paths` and
    `api.fix_paths` return is what `check` and `fix` print."""
    path = tmp_path / "train.py"
    path.write_text("import torch\n", encoding="utf-8")
    where = api.Range(api.Location(1, 1), api.Location(1, 6))
    invented = api.Finding(
        "AMP201", "a finding only the API returned", where, api.SuggestedFix(True, "mend it")
    )

    def check_paths(paths, settings=None, **how):
        return api.Run((api.FileResult(path, (invented,)),), ("a word from the API",))

    def fix_paths(paths, settings=None, **how):
        return api.FixRun((api.FixedFile(path, remaining=(invented,)),))

    monkeypatch.setattr(api, "check_paths", check_paths)
    monkeypatch.setattr(api, "fix_paths", fix_paths)
    checked = run_cli("check", path)
    assert f"{path}:1:1: AMP201 [*] a finding only the API returned" in checked.stdout
    assert "a word from the API" in checked.stderr
    assert checked.exit_code == 1
    fixed = run_cli("fix", "--output-format", "json", path)
    assert json.loads(fixed.stdout)[0]["message"] == "a finding only the API returned"


def test_the_api_takes_paths_as_str_or_pathlike(tmp_path: Path) -> None:
    # `api.check_paths(["src"])` crashed on a str; a bare str is one path.
    import os

    (tmp_path / "train.py").write_text("import torch\nscaler = torch.cuda.amp.GradScaler()\n")
    spellings = [[str(tmp_path)], str(tmp_path), [tmp_path], [os.fsencode(tmp_path).decode()]]
    for spelled in spellings:
        run = api.check_paths(spelled, cache=False)
        assert [f.code for result in run.files for f in result.findings] == ["AMP201"], spelled
    assert api.fix_paths(str(tmp_path), cache=str(tmp_path / "cache")).files[0].fixed
    assert api.check_source("x = 1\n", str(tmp_path / "x.py")) == []
    assert api.load_settings(str(tmp_path)).root is not None
    with pytest.raises(TypeError, match="a path is a str or os.PathLike"):
        api.check_paths([3])
