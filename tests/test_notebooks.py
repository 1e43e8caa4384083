"""Jupyter notebooks: the code cells are one module; positions name the cell;
a fix rewrites only the source lines it changes and keeps IPython syntax.

Set AMPLINT_UPDATE_GOLDEN=1 to rewrite the pinned outputs after a reviewed change.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from amplint.notebook import NotebookError, read_notebook
from tests.helpers import FIXTURES, REPO, assert_matches_golden, run_cli

FOLDER = FIXTURES / "notebooks"
EXPECTED = FOLDER / "expected"
# notebook -> what it must raise; manual_half's fix is unsafe
NOTEBOOKS = {
    "fp32_training.ipynb": {"AMP001"},
    "manual_half.ipynb": {"AMP111"},
    "backward_in_autocast.ipynb": {"AMP101", "AMP106"},
    "cuda_amp_scaler.ipynb": {"AMP201"},
}


def notebook_json(cells: list[dict], **metadata) -> str:
    """A notebook as Jupyter writes it."""
    document = {
        "cells": cells,
        "metadata": {"language_info": {"name": "python"}, **metadata},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return json.dumps(document, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def code_cell(source: str) -> dict:
    lines = source.splitlines(keepends=True)
    return {
        "cell_type": "code",
        "execution_count": None,
        "id": f"c{abs(hash(source)) % 10**6}",
        "metadata": {},
        "outputs": [],
        "source": lines,
    }


def markdown_cell(text: str) -> dict:
    return {"cell_type": "markdown", "id": "md", "metadata": {}, "source": [text]}


# -- the notebook as one module ---------------------------------------------------
def test_ipython_lines_are_masked_and_restored() -> None:
    source = (
        "%matplotlib inline\n"
        "!pip install -q tqdm \\\n"
        "    rich\n"
        "files = !ls data\n"
        "torch.randn?\n"
        "import torch\n"
        "for i in range(2):\n"
        "    %time x = torch.ones(i)"
    )
    notebook = read_notebook(notebook_json([markdown_cell("# Title"), code_cell(source)]))
    assert notebook.code.splitlines() == [
        "# <amplint: ipython 0>",
        "# <amplint: ipython 1>",
        "    # <amplint: ipython 2>",  # the continuation line, indented as written
        "# <amplint: ipython 3>",
        "# <amplint: ipython 4>",
        "import torch",
        "for i in range(2):",
        "    # <amplint: ipython 5>",
    ]
    assert notebook.cell_lines(2) == source.splitlines()
    assert notebook.with_code(notebook.code) == notebook.raw


def test_a_cell_that_spells_a_mark_cannot_pass_for_one() -> None:
    """A cell holding the literal mask comment got another cell's magic
    written into it; the marks now name a tag no cell spells."""
    forged = "# <amplint: ipython 0>\n# <amplint: cell 1>\nx = 1"
    notebook = read_notebook(notebook_json([code_cell("%matplotlib inline"), code_cell(forged)]))
    assert notebook.code.splitlines() == [
        "# <amplint-1: ipython 0>",
        "# <amplint-1: cell 2>",
        "# <amplint: ipython 0>",
        "# <amplint: cell 1>",
        "x = 1",
    ]
    assert notebook.cell_lines(2) == forged.splitlines()
    assert notebook.with_code(notebook.code) == notebook.raw


def test_a_forged_mark_survives_a_fix(tmp_path: Path) -> None:
    forged = "# <amplint: ipython 0>\nimport torch\nscaler = torch.cuda.amp.GradScaler()"
    path = tmp_path / "nb.ipynb"
    path.write_text(notebook_json([code_cell("%matplotlib inline"), code_cell(forged)]))
    assert run_cli("fix", "--apply", "--no-cache", path).exit_code == 0
    cells = json.loads(path.read_text())["cells"]
    assert "".join(cells[0]["source"]) == "%matplotlib inline"
    assert "".join(cells[1]["source"]) == forged.replace(
        "torch.cuda.amp.GradScaler()", 'torch.amp.GradScaler("cuda")'
    )


def test_cell_magics_keep_a_python_body_and_mask_any_other() -> None:
    notebook = read_notebook(
        notebook_json(
            [
                code_cell("%%time\nloss = model(x)"),
                code_cell("%%bash\nnvidia-smi\necho done"),
                code_cell("%%writefile train.py\nimport torch\n"),
            ]
        )
    )
    lines = notebook.code.splitlines()
    assert lines[:2] == ["# <amplint: ipython 0>", "loss = model(x)"]
    assert lines[2:6] == [
        "# <amplint: cell 2>",
        "# <amplint: ipython 1>",
        "# <amplint: ipython 2>",
        "# <amplint: ipython 3>",
    ]
    assert "import torch" not in notebook.code  # another file's code, not the notebook's
    assert notebook.with_code(notebook.code) == notebook.raw


def test_positions_are_the_cells_own() -> None:
    notebook = read_notebook(
        notebook_json(
            [markdown_cell("# Title"), code_cell("a = 1\nb = 2"), code_cell("c = 3\nd = 4\n")]
        )
    )
    # module: a, b, marker, c, d
    assert [notebook.position(line) for line in (1, 2, 4, 5)] == [(2, 1), (2, 2), (3, 1), (3, 2)]


def test_cells_that_moved_are_refused() -> None:
    notebook = read_notebook(notebook_json([code_cell("a = 1"), code_cell("b = 2")]))
    with pytest.raises(NotebookError, match="across notebook cells"):
        notebook.with_code(notebook.code.replace("# <amplint: cell 2>\n", ""))


@pytest.mark.parametrize(
    "raw, message",
    [
        ("{not json", "invalid JSON at line 1"),
        ('{"cells": 3}', "no list of cells"),
        (notebook_json([], language_info={"name": "julia"}), "a julia notebook"),
    ],
)
def test_unreadable_notebooks_are_one_line_errors(tmp_path: Path, raw: str, message: str) -> None:
    (tmp_path / "bad.ipynb").write_text(raw)
    result = run_cli("check", "--no-cache", tmp_path)
    assert result.exit_code == 2
    assert message in result.stderr


@pytest.mark.parametrize(
    "layout",
    [
        {"indent": 2},
        {"indent": 1, "ensure_ascii": True},
        {"separators": (",", ":")},  # Colab's downloads: compact, no final newline
    ],
)
def test_other_writers_layouts_are_kept(tmp_path: Path, layout: dict) -> None:
    document = json.loads((FOLDER / "fp32_training.ipynb").read_text())
    document["cells"][0]["source"] = ["# Entraînement 🧪"]  # escaped or not, kept
    raw = json.dumps(document, **layout)
    (tmp_path / "nb.ipynb").write_text(raw, encoding="utf-8")
    result = run_cli("fix", "--apply", "--no-cache", tmp_path)
    assert result.exit_code == 0, result.output
    fixed = json.loads((tmp_path / "nb.ipynb").read_text(encoding="utf-8"))
    assert 'scaler = torch.amp.GradScaler("cuda")' in "".join(fixed["cells"][4]["source"])
    assert (tmp_path / "nb.ipynb").read_text(encoding="utf-8") == json.dumps(fixed, **layout)


def test_a_layout_amplint_cannot_reproduce_is_checked_but_not_fixed(tmp_path: Path) -> None:
    raw = (FOLDER / "fp32_training.ipynb").read_text()
    odd = json.dumps(json.loads(raw), indent=3, separators=(" ,", ": "))
    (tmp_path / "nb.ipynb").write_text(odd)
    assert run_cli("check", "--no-cache", tmp_path).exit_code == 1
    result = run_cli("fix", "--apply", "--no-cache", tmp_path)
    assert result.exit_code == 2
    assert "JSON layout" in result.stderr
    assert (tmp_path / "nb.ipynb").read_text() == odd


def test_a_syntax_error_is_placed_in_its_cell(tmp_path: Path) -> None:
    raw = notebook_json(
        [
            markdown_cell("# T"),
            code_cell("import torch\nscaler = torch.cuda.amp.GradScaler()"),
            code_cell("x = (1,\ny = 2"),
        ]
    )
    (tmp_path / "nb.ipynb").write_text(raw)
    result = run_cli("check", "--no-cache", tmp_path)
    assert f"{tmp_path / 'nb.ipynb'}:cell 3:" in result.stdout
    assert "AMP900" in result.stdout


def test_top_level_await_as_ipython_allows_it(tmp_path: Path) -> None:
    loop = (FOLDER / "fp32_training.ipynb").read_text()
    document = json.loads(loop)
    document["cells"].insert(1, code_cell("import asyncio\nawait asyncio.sleep(0)"))
    (tmp_path / "nb.ipynb").write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n")
    result = run_cli("check", "--no-cache", tmp_path)
    assert "AMP001" in result.stdout and "AMP900" not in result.stdout


def test_jupyter_checkpoints_are_not_checked(tmp_path: Path) -> None:
    shutil.copy(FOLDER / "fp32_training.ipynb", tmp_path / "train.ipynb")
    (tmp_path / ".ipynb_checkpoints").mkdir()
    shutil.copy(FOLDER / "fp32_training.ipynb", tmp_path / ".ipynb_checkpoints" / "x.ipynb")
    result = run_cli("check", "--no-cache", tmp_path)
    assert result.stdout.count("AMP001") == 1


# -- the fixtures -----------------------------------------------------------------
def test_check_positions_name_the_cell(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    result = run_cli("check", "--no-cache", "fixtures/notebooks")
    assert result.exit_code == 1
    assert_matches_golden(result.stdout, EXPECTED / "check.txt")
    found: dict[str, set[str]] = {}
    for line in result.stdout.splitlines()[:-1]:
        match = re.match(r"fixtures/notebooks/(\S+):cell \d+:\d+:\d+: (AMP\d+)", line)
        assert match is not None, line
        found.setdefault(match.group(1), set()).add(match.group(2))
    assert found == NOTEBOOKS


def _source_line_ranges(raw: str) -> set[int]:
    """The 0-based lines of `raw` inside a cell's "source" list (indent=1 JSON)."""
    inside, lines = False, set()
    for number, line in enumerate(raw.splitlines()):
        if line.strip() == '"source": [':
            inside = True
        elif inside and line.strip() in ("]", "],"):
            inside = False
        elif inside:
            lines.add(number)
    return lines


@pytest.fixture(scope="module")
def fixed_notebooks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("notebooks")
    for name in NOTEBOOKS:
        shutil.copy(FOLDER / name, folder / name)
    result = run_cli("fix", "--apply", "--unsafe-fixes", "--no-cache", folder)
    assert result.exit_code == 0, result.output
    return folder


@pytest.mark.parametrize("name", sorted(NOTEBOOKS))
def test_fixed_notebook_is_pinned_valid_and_changed_only_in_source_lines(
    fixed_notebooks: Path, name: str
) -> None:
    original = (FOLDER / name).read_text()
    fixed = (fixed_notebooks / name).read_text()
    assert_matches_golden(fixed, EXPECTED / name)
    nbformat.validate(nbformat.reads(fixed, as_version=4))
    before, after = original.splitlines(), fixed.splitlines()
    assert len(after) > 0 and fixed.endswith("\n")
    import difflib

    changed_before, changed_after = set(), set()
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, before, after).get_opcodes():
        if tag != "equal":
            changed_before |= set(range(i1, i2))
            changed_after |= set(range(j1, j2))
    assert changed_before | changed_after, "the fix changed nothing"
    assert changed_before <= _source_line_ranges(original)
    assert changed_after <= _source_line_ranges(fixed)
    # outputs, counts, ids and metadata as they were
    strip = lambda doc: [{k: v for k, v in c.items() if k != "source"} for c in doc["cells"]]
    assert strip(json.loads(fixed)) == strip(json.loads(original))
    # the IPython lines survived
    for line in ("%matplotlib inline", "!pip install -q tqdm", "%%time"):
        assert (line in original) == (line in fixed)


@pytest.mark.parametrize("name", sorted(NOTEBOOKS))
def test_a_second_fix_changes_nothing(fixed_notebooks: Path, name: str, tmp_path: Path) -> None:
    shutil.copy(fixed_notebooks / name, tmp_path / name)
    result = run_cli("fix", "--unsafe-fixes", "--no-cache", tmp_path / name)
    assert result.exit_code == 0
    assert result.stdout == ""


def _as_script(notebook: Path) -> str:
    """The code cells as the kernel would run them, IPython lines left out."""
    document = json.loads(notebook.read_text())
    lines = []
    for cell in document["cells"]:
        if cell["cell_type"] == "code":
            for line in "".join(cell["source"]).splitlines():
                if not line.lstrip().startswith(("%", "!")):
                    lines.append(line)
    return "\n".join(lines) + "\n"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(NOTEBOOKS))
def test_the_rewritten_loop_runs_on_the_cpu(fixed_notebooks: Path, name: str) -> None:
    script = fixed_notebooks / (name + ".py")
    script.write_text(_as_script(fixed_notebooks / name))
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    run = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "loss" in run.stdout


def test_the_scaler_goes_to_the_cell_that_made_the_optimizer(fixed_notebooks: Path) -> None:
    cells = json.loads((fixed_notebooks / "fp32_training.ipynb").read_text())["cells"]
    (holder,) = [c for c in cells if any("GradScaler" in line for line in c["source"])]
    assert any("torch.optim." in line for line in holder["source"])


def test_a_notebook_from_stdin(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from amplint.cli import main

    raw = (FOLDER / "fp32_training.ipynb").read_bytes()
    runner = CliRunner()
    args = ["fix", "-", "--stdin-filename", str(tmp_path / "nb.ipynb"), "--no-cache"]
    result = runner.invoke(main, args, input=raw)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == (EXPECTED / "fp32_training.ipynb").read_text()
