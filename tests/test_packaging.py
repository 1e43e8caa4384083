"""The wheel ships the catalogue and runs without torch in a fresh environment."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.helpers import REPO

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

# Builds a wheel and installs it into a fresh environment.
pytestmark = pytest.mark.slow

DEPRECATED = "import torch\nscaler = torch.cuda.amp.GradScaler()\n"


def _run(*args: str | Path, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, **kwargs)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel freshly built from this checkout."""
    work = tmp_path_factory.mktemp("dist")
    built = _run(sys.executable, "-m", "build", "--wheel", "--outdir", work, REPO)
    assert built.returncode == 0, built.stderr[-3000:]
    (found,) = work.glob("amplint-*.whl")
    return found


@pytest.fixture(scope="module")
def installed_wheel(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    """A fresh venv (no torch) with amplint installed from a freshly built wheel."""
    work = tmp_path_factory.mktemp("wheel")
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


# -- the Pythons the package names ------------------------------------------
def _oldest_python() -> tuple[int, int]:
    """The oldest Python pyproject.toml's requires-python admits (">=3.10")."""
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    major, minor = declared.removeprefix(">=").split(".")[:2]
    return int(major), int(minor)


def _interpreter(version: tuple[int, int]) -> Path | None:
    """A Python of `version` that runs: one pyenv installed, or on PATH (where
    pyenv's shim for a version it does not select only says so)."""
    name = f"python{version[0]}.{version[1]}"
    versions = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = sorted(versions.glob(f"{version[0]}.{version[1]}.*/bin/{name}"), reverse=True)
    if shutil.which(name):
        candidates.append(Path(shutil.which(name)))
    for candidate in candidates:
        said = _run(candidate, "-c", "import sys; print(*sys.version_info[:2])")
        if said.returncode == 0 and said.stdout.split() == [str(part) for part in version]:
            return candidate
    return None


def _venv_of(python: Path, where: Path) -> Path:
    made = _run(python, "-m", "venv", where)
    assert made.returncode == 0, made.stderr
    return where / "bin"


def test_the_oldest_python_named_installs_the_wheel_and_runs_it(
    wheel: Path, tmp_path: Path
) -> None:
    oldest = _oldest_python()
    python = _interpreter(oldest)
    if python is None:
        pytest.skip(f"no Python {oldest[0]}.{oldest[1]} on this machine")
    bin_dir = _venv_of(python, tmp_path / "env")
    installed = _run(bin_dir / "python", "-m", "pip", "install", "--quiet", wheel)
    assert installed.returncode == 0, installed.stderr[-3000:]
    script = REPO / "fixtures" / "fp32_steps" / "nested_loops.py"
    there = _run(bin_dir / "amplint", "check", "--no-cache", script, cwd=tmp_path)
    here = _run(sys.executable, "-m", "amplint", "check", "--no-cache", script, cwd=tmp_path)
    assert (there.returncode, there.stdout) == (here.returncode, here.stdout) == (1, here.stdout)
    assert "AMP001" in there.stdout


def test_the_python_before_it_is_refused_at_install(wheel: Path, tmp_path: Path) -> None:
    major, minor = _oldest_python()
    python = _interpreter((major, minor - 1))
    if python is None:
        pytest.skip(f"no Python {major}.{minor - 1} on this machine")
    bin_dir = _venv_of(python, tmp_path / "env")
    refused = _run(bin_dir / "python", "-m", "pip", "install", "--no-deps", wheel)
    assert refused.returncode != 0
    assert "requires a different Python" in refused.stderr + refused.stdout


def test_the_wheel_carries_its_license_and_its_typing_marker(wheel: Path) -> None:
    # The metadata said MIT with no license text; without py.typed, mypy told
    # users of the annotated API `import-untyped`.
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    assert "amplint/py.typed" in names
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names), names
    license_text = next(n for n in names if n.endswith("licenses/LICENSE"))
    assert "MIT License" in zipfile.ZipFile(wheel).read(license_text).decode()
