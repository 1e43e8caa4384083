"""Every test gets its own result cache: an entry written under a monkeypatched
rule must not answer for the real one in a later test."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("AMPLINT_CACHE_DIR", str(tmp_path_factory.mktemp("amplint_cache")))
