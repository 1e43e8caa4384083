"""What the README gives to copy works as written: the CI workflow, read as
YAML, its amplint commands run on a repository with a finding; the
configuration example, loaded as amplint loads a configuration."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

from tests.helpers import REPO

WORKFLOW_NAME = "# .github/workflows/amplint.yml"
FINDING = "import torch\n\nscaler = torch.cuda.amp.GradScaler()\n"


def _workflow() -> dict:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```yaml\n(.*?)```", readme, re.S)
    [block] = [block for block in blocks if block.startswith(WORKFLOW_NAME)]
    return yaml.safe_load(block)


def _steps(workflow: dict) -> list[dict]:
    [job] = workflow["jobs"].values()
    return job["steps"]


def test_the_github_workflow_is_a_workflow() -> None:
    workflow = _workflow()
    # PyYAML reads the bare key `on` as True, as YAML 1.1 says.
    assert workflow[True] == ["push", "pull_request"]
    assert workflow["permissions"]["security-events"] == "write"
    steps = _steps(workflow)
    used = [step["uses"].split("@")[0] for step in steps if "uses" in step]
    assert used == ["actions/checkout", "actions/setup-python", "github/codeql-action/upload-sarif"]
    upload = steps[-1]
    assert upload["if"] == "always()" and upload["with"]["sarif_file"] == "amplint.sarif"
    installs = [step["run"] for step in steps if "pip install" in step.get("run", "")]
    assert installs and "amplint @ git+" in installs[0]


def test_the_github_workflows_commands_run_as_written(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(FINDING)
    commands = [
        step["run"] for step in _steps(_workflow()) if step.get("run", "").startswith("amplint ")
    ]
    assert len(commands) == 2
    annotate, sarif = commands
    amplint = [sys.executable, "-m", "amplint"]
    run = subprocess.run(
        [*amplint, *shlex.split(annotate)[1:]], cwd=tmp_path, capture_output=True, text=True
    )
    assert run.returncode == 1  # a finding fails the job
    assert run.stdout.startswith("::error title=amplint (AMP201),file=train.py,line=3,")
    command, _, target = sarif.partition(" > ")
    run = subprocess.run(
        [*amplint, *shlex.split(command)[1:]], cwd=tmp_path, capture_output=True, text=True
    )
    assert run.returncode == 0  # --exit-zero: the upload step still gets the file
    (tmp_path / target).write_text(run.stdout)
    document = json.loads((tmp_path / target).read_text())
    assert document["version"] == "2.1.0"
    [result] = document["runs"][0]["results"]
    assert result["ruleId"] == "AMP201"


def test_the_readme_configuration_example_loads_as_written(tmp_path: Path) -> None:
    from amplint.config import load_settings
    from amplint.rules import ALL_CODES

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    [example] = [b for b in re.findall(r"```toml\n(.*?)```", readme, re.S) if "[tool.amplint]" in b]
    (tmp_path / "pyproject.toml").write_text(example)
    settings = load_settings(tmp_path / "pyproject.toml", ALL_CODES)
    assert settings.unfixable == () and settings.fixable == ("AMP",)
    assert ("!src/**", ("AMP001",)) in settings.per_file_ignores
    assert ("notebooks/*", ("AMP111",)) in settings.per_file_ignores


def test_the_verify_extra_says_how_to_get_the_cpu_build_of_torch() -> None:
    # `pip install ".[verify]"` pulled the CUDA build (4.5 minutes, 20 wheels)
    # with no word on the CPU one, in the README or in verify's own message.
    from amplint.verify.harness import NEEDS_TORCH

    cpu_index = "--index-url https://download.pytorch.org/whl/cpu"
    install = (REPO / "README.md").read_text(encoding="utf-8").split("## Install", 1)[1]
    block = install.split("```sh", 1)[1].split("```", 1)[0]
    assert '".[verify]"' in block and f"pip install torch {cpu_index}" in block
    assert cpu_index in NEEDS_TORCH
