"""Every test gets its own result cache: an entry written under a monkeypatched
rule must not answer for the real one in a later test.  And none reads the
configuration of the user running it: amplint's own (~/.config/amplint) or
git's global excludes file would change which files a test sees."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("AMPLINT_CACHE_DIR", str(tmp_path_factory.mktemp("amplint_cache")))


@pytest.fixture(autouse=True)
def _no_user_configuration(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("xdg_config")))
    global_git = tmp_path_factory.mktemp("git") / "config"
    global_git.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(global_git))
