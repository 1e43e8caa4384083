"""The runnable subset's adapters (tests/ecosystem_runnable.py), read without
the clones: each is well formed and names scripts of the corpus.  Running them
is `make ecosystem`'s."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ecosystem_runnable import AdapterError, load_adapters


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

