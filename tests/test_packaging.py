"""The wheel ships the catalogue and runs without torch in a fresh environment."""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.helpers import REPO

# Builds a wheel and installs it into a fresh environment.
pytestmark = pytest.mark.slow

DEPRECATED = "import torch\nscaler = torch.cuda.amp.GradScaler()\n"


def _run(*args: str | Path, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, **kwargs)


@pytest.fixture(scope="module")
def installed_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv (no torch) with amplint installed from a freshly built wheel."""
    work = tmp_path_factory.mktemp("wheel")
    built = _run(sys.executable, "-m", "build", "--wheel", "--outdir", work / "dist", REPO)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (work / "dist").glob("amplint-*.whl")
    venv.EnvBuilder(with_pip=True).create(work / "env")
    python = work / "env" / "bin" / "python"
    installed = _run(python, "-m", "pip", "install", "--quiet", wheel)
    assert installed.returncode == 0, installed.stderr[-3000:]
    return work / "env" / "bin"


def test_rule_document_comes_from_the_installed_package(
    installed_wheel: Path, tmp_path: Path
) -> None:
    # Run outside the repository so nothing can be read from the checkout.
    result = _run(installed_wheel / "amplint", "rule", "AMP201", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    document = (REPO / "rules" / "AMP201.md").read_text(encoding="utf-8")
    assert result.stdout.startswith("# AMP201 ")
    assert document.split("\n## ", 1)[1] in result.stdout  # the explanation, as written
    where = _run(
        installed_wheel / "python",
        "-c",
        "import amplint.catalog as c; print(c.catalog_dir())",
        cwd=tmp_path,
    )
    assert "site-packages/amplint/_catalogue" in where.stdout


def test_check_and_fix_run_without_torch_installed(installed_wheel: Path, tmp_path: Path) -> None:
    probe = _run(installed_wheel / "python", "-c", "import torch", cwd=tmp_path)
    assert probe.returncode != 0, "torch must not be a dependency of the core install"
    (tmp_path / "train.py").write_text(DEPRECATED)
    assert _run(installed_wheel / "amplint", "check", "train.py", cwd=tmp_path).returncode == 1
    assert (
        _run(
            installed_wheel / "python", "-m", "amplint", "fix", "--apply", ".", cwd=tmp_path
        ).returncode
        == 0
    )
    assert (
        tmp_path / "train.py"
    ).read_text() == 'import torch\nscaler = torch.amp.GradScaler("cuda")\n'


def test_check_and_fix_never_import_torch(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(DEPRECATED)
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from amplint.cli import main\n"
        f"CliRunner().invoke(main, ['check', {str(tmp_path)!r}])\n"
        f"CliRunner().invoke(main, ['fix', '--apply', {str(tmp_path)!r}])\n"
        "assert 'torch' not in sys.modules, 'check/fix imported torch'\n"
    )
    result = _run(sys.executable, "-c", code)
    assert result.returncode == 0, result.stderr
    assert "torch.amp.GradScaler" in (tmp_path / "train.py").read_text()
