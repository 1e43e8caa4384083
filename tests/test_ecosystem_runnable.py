"""The runnable subset's adapters (tests/ecosystem_runnable.py), read without
the clones: each is well formed and names scripts of the corpus.  Running them
is `make ecosystem`'s."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ecosystem_runnable import AdapterError, export, load_adapters


def test_the_runnable_subset_holds_at_least_fifty_scripts_of_the_corpus() -> None:
    adapters = load_adapters()
    assert len(adapters) >= 50
    assert len({(adapter.repo, adapter.path) for adapter in adapters}) == len(adapters)


def _adapter(directory: Path, text: str) -> None:
    (directory / "probe.py").write_text(text, encoding="utf-8")


def test_a_misspelt_field_or_a_module_outside_the_corpus_is_an_error(tmp_path: Path) -> None:
    script = 'REPO = "karpathy/minGPT"\nPATH = "projects/adder/adder.py"\n'
    _adapter(tmp_path, script + 'REWRITE = ("mingpt/trainer.py",)\n')
    (adapter,) = load_adapters(tmp_path)
    assert adapter.rewrite == ("mingpt/trainer.py",)
    _adapter(tmp_path, script + 'REWRITES = ("mingpt/trainer.py",)\n')
    with pytest.raises(AdapterError, match="unknown REWRITES"):
        load_adapters(tmp_path)
    _adapter(tmp_path, script + 'REWRITE = ("mingpt/utils.py",)\n')
    with pytest.raises(AdapterError, match="karpathy/minGPT:mingpt/utils.py is not in the corpus"):
        load_adapters(tmp_path)


def test_the_gpu_check_s_corpus_rows_are_adapters_and_a_missing_clone_is_not_exported(
    tmp_path: Path,
) -> None:
    """`make verify-gpu` exports its corpus rows' trees where the clones are;
    each row names an adapter, and a clone that is not here is said, not
    exported as an empty tree."""
    from tests.verify_table import CORPUS_ROWS

    names = sorted({name for name, _, _ in CORPUS_ROWS})
    assert set(names) <= {adapter.name for adapter in load_adapters()}
    problems = export(tmp_path / "no-clones", names, tmp_path / "out")
    assert len(problems) == len(names)
    assert all("no clone of" in problem for problem in problems)
    assert not (tmp_path / "out").exists()
    with pytest.raises(AdapterError, match="no adapter named nonesuch"):
        export(tmp_path / "no-clones", ["nonesuch"], tmp_path / "out")


def test_make_ecosystem_without_clones_says_where_they_come_from(tmp_path: Path) -> None:
    # A fresh clone has no clones: the run used to skip every repository and
    # exit 0, a pass that checked nothing.
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "tests.ecosystem", "--clones", str(tmp_path), "--no-runs"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "make ecosystem checked nothing: no clone" in done.stderr
    assert "git clone --bare https://github.com/" in done.stderr and str(tmp_path) in done.stderr
