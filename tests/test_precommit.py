"""The pre-commit hooks, driven by the real `pre-commit` tool: `try-repo`
installs this checkout into a hook environment (core dependencies only, no
torch) and runs it on a git repository holding an FP32 training loop."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import FIXTURES, REPO, dedent

# Installs hook environments: seconds per test.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("git") is None, reason="needs git"),
]

FP32_LOOP = dedent("""
    import torch


    def train(model, loader, optimizer, epochs):
        for epoch in range(epochs):
            for x, y in loader:
                optimizer.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(x), y)
                loss.backward()
                optimizer.step()
    """)


def _git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=env)


@pytest.fixture(scope="module")
def environment(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    home = tmp_path_factory.mktemp("pre-commit-home")
    return {
        **os.environ,
        "PRE_COMMIT_HOME": str(home),
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
        "NO_COLOR": "1",
    }


@pytest.fixture(scope="module")
def hook_repo(tmp_path_factory: pytest.TempPathFactory, environment: dict[str, str]) -> Path:
    """This checkout as it is on disk, committed: try-repo reads commits, and
    would miss files not yet added."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split("\0")
    copy = tmp_path_factory.mktemp("amplint-repo")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    subprocess.run(["git", "init", "-q"], cwd=copy, check=True)
    subprocess.run(["git", "add", "."], cwd=copy, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "snapshot"], cwd=copy, env=environment, check=True)
    return copy


def _try_hook(
    project: Path, repo: Path, hook: str | None, env: dict[str, str]
) -> subprocess.CompletedProcess:
    """Run `hook` of `repo` (every hook, in order, where None) on `project`."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pre_commit",
            "try-repo",
            str(repo),
            *([hook] if hook else []),
            "--all-files",
        ],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_check_fails_fix_rewrites_then_both_pass(
    tmp_path: Path, environment: dict[str, str], hook_repo: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(FP32_LOOP)
    shutil.copy(FIXTURES / "notebooks" / "cuda_amp_scaler.ipynb", project / "explore.ipynb")
    (project / "legacy").mkdir()
    (project / "legacy" / "old.py").write_text(FP32_LOOP)
    (project / "pyproject.toml").write_text('[tool.amplint]\nextend-exclude = ["legacy"]\n')
    _git(project, "init", "-q")
    _git(project, "add", ".")
    _git(project, "commit", "-q", "-m", "init", env=environment)

    check = _try_hook(project, hook_repo, "amplint", environment)
    assert check.returncode == 1, check.stdout + check.stderr
    assert "train.py:9:13: AMP001" in check.stdout
    assert "explore.ipynb:cell 5:3:10: AMP201" in check.stdout
    assert "legacy" not in check.stdout  # excluded, although pre-commit names it

    fix = _try_hook(project, hook_repo, "amplint-fix", environment)
    assert fix.returncode == 1  # pre-commit fails a hook that modified files
    assert "files were modified by this hook" in fix.stdout
    assert "scaler.scale(loss).backward()" in (project / "train.py").read_text()
    assert "torch.cuda.amp.GradScaler(" not in (project / "explore.ipynb").read_text()
    assert (project / "legacy" / "old.py").read_text() == FP32_LOOP

    # Installed the way users do: a config naming the repository and a revision.
    revision = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=hook_repo, check=True, capture_output=True, text=True
    ).stdout.strip()
    (project / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {hook_repo.as_uri()}\n    rev: {revision}\n"
        "    hooks:\n      - id: amplint-fix\n      - id: amplint\n"
    )
    again = subprocess.run(
        [sys.executable, "-m", "pre_commit", "run", "--all-files"],
        cwd=project,
        env=environment,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.count("Passed") == 2


def test_the_hook_environment_has_no_torch(environment: dict[str, str]) -> None:
    """Runs after the test above has built the environment."""
    home = Path(environment["PRE_COMMIT_HOME"])
    site_packages = list(home.glob("repo*/py_env-*/lib/python*/site-packages"))
    assert site_packages, "no hook environment was built"
    for folder in site_packages:
        assert (folder / "libcst").is_dir()
        assert not (folder / "torch").exists()


def test_a_program_split_over_modules_is_fixed_in_one_run(
    tmp_path: Path, environment: dict[str, str], hook_repo: Path
) -> None:
    # An apex program over three modules (one migration rewrites them all)
    # among more files than pre-commit puts in one batch when it runs a hook
    # in parallel: every module of the program must reach the same run, or
    # each batch refuses its half ("not among the paths named").
    project = tmp_path / "project"
    project.mkdir()
    for module in (FIXTURES / "apex" / "apex_trainer").glob("*.py"):
        shutil.copy(module, project / module.name)
    for index in range(7):
        (project / f"tz_{index}.py").write_text(f"def helper(x):\n    return x + {index}\n")
    _git(project, "init", "-q")
    _git(project, "add", ".")
    _git(project, "commit", "-q", "-m", "init", env=environment)

    fix = _try_hook(project, hook_repo, "amplint-fix", environment)
    assert "not among the paths named" not in fix.stdout, fix.stdout
    assert fix.returncode == 1 and "files were modified by this hook" in fix.stdout
    for name in ("train.py", "trainer.py", "utils.py"):
        assert "from apex import amp" not in (project / name).read_text(), name
    check = _try_hook(project, hook_repo, "amplint", environment)
    assert check.returncode == 0, check.stdout + check.stderr


def test_committed_file_names_that_look_like_options_stay_file_names(
    tmp_path: Path, hook_repo: Path, environment: dict[str, str]
) -> None:
    """pre-commit appends file names after the entry: a committed `-otarget.py`
    was read as `-o target.py` (the report overwrote target.py) and one named
    `--exclude=*.py` silenced the hook; the entries end with `--` now.  Both
    hooks in one run (check, then fix): had check written its report over
    target.py, fix would find no loop to rewrite there."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "target.py").write_text(FP32_LOOP)
    (project / "-otarget.py").write_text("x = 1\n")
    (project / "--exclude=*.py").write_text("y = 2\n")
    _git(project, "init", "-q")
    _git(project, "add", "--", ".")
    _git(project, "commit", "-q", "-m", "hostile names", env=environment)
    result = _try_hook(project, hook_repo, None, environment)
    assert result.returncode == 1, result.stdout
    assert "target.py" in result.stdout and "AMP001" in result.stdout  # not silenced
    assert "scaler.scale(loss).backward()" in (project / "target.py").read_text()
    assert (project / "-otarget.py").read_text() == "x = 1\n"
