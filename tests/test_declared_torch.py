"""The torch floor a project declares is the default target-torch (issue 42):
no fix writes an API the versions the project supports lack, and
`--show-settings` says where target-torch came from."""

from __future__ import annotations

from pathlib import Path

import pytest

from amplint.declared_torch import declared_torch_floor
from tests.helpers import dedent, run_cli


@pytest.mark.parametrize(
    "requirement, floor",
    [
        ("torch>=1.8", (1, 8)),
        ("torch >= 1.8.0, <2", (1, 8)),
        ("torch==1.13.1+cu117", (1, 13)),
        ("torch~=2.1.0", (2, 1)),
        ('torch[opt]>=2.0 ; python_version > "3.8"', (2, 0)),
        ("Torch>=1.7  # the CUDA 11 wheels", (1, 7)),
        ("torch<2", None),  # no lower bound
        ("torch", None),
        ("torchvision>=0.9", None),  # another package
        ("torch is needed >= 1.0", None),  # prose
    ],
)
def test_a_requirement_line_gives_its_lower_bound(
    requirement: str, floor: tuple[int, int] | None, tmp_path: Path
) -> None:
    (tmp_path / "requirements.txt").write_text(f"numpy\n{requirement}\n", encoding="utf-8")
    declared = declared_torch_floor(tmp_path)
    assert (declared.version if declared else None) == floor


@pytest.mark.parametrize(
    "name, text",
    [
        ("pyproject.toml", '[project]\nname = "p"\ndependencies = ["numpy", "torch>=1.9"]\n'),
        ("pyproject.toml", '[tool.poetry.dependencies]\npython = "^3.9"\ntorch = "^1.9"\n'),
        ("pyproject.toml", '[tool.poetry.dependencies]\ntorch = {version = ">=1.9.1"}\n'),
        ("setup.py", 'from setuptools import setup\nsetup(install_requires=["torch>=1.9"])\n'),
        ("setup.cfg", "[options]\ninstall_requires =\n    numpy\n    torch>=1.9\n"),
    ],
)
def test_each_way_of_declaring_torch_is_read(name: str, text: str, tmp_path: Path) -> None:
    (tmp_path / name).write_text(text, encoding="utf-8")
    (tmp_path / "src").mkdir()  # a run started below the project's root finds it
    declared = declared_torch_floor(tmp_path / "src")
    assert declared is not None and declared.version == (1, 9)
    assert declared.where.startswith(f"{name}: ")


def test_optional_extras_and_other_projects_are_not_read(tmp_path: Path) -> None:
    # amplint's own shape: torch only for an extra declares no floor.
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "p"\ndependencies = []\n'
        '[project.optional-dependencies]\nverify = ["torch>=2.3"]\n',
        encoding="utf-8",
    )
    assert declared_torch_floor(tmp_path) is None
    # The nearest project wins: a parent's requirements are another project's.
    (tmp_path / "requirements.txt").write_text("torch>=1.8\n", encoding="utf-8")
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "setup.cfg").write_text("[metadata]\nname = inner\n", encoding="utf-8")
    assert declared_torch_floor(inner) is None
    assert declared_torch_floor(tmp_path).version == (1, 8)
    # The lowest floor among a project's files.
    (tmp_path / "requirements-cuda11.txt").write_text("torch==1.7.1\n", encoding="utf-8")
    assert declared_torch_floor(tmp_path).where == "requirements-cuda11.txt: torch==1.7.1"


# A version-guarded scaler: the fallback is the only one torch 1.8 runs.
GUARDED = dedent("""
    import torch


    def make_scaler():
        if hasattr(torch.amp, "GradScaler"):
            return torch.amp.GradScaler("cuda")
        return torch.cuda.amp.GradScaler()
    """)


def test_a_declared_floor_keeps_the_old_torch_fallback_and_says_where(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "requirements.txt").write_text("torch>=1.8\n", encoding="utf-8")
    (tmp_path / "scaler.py").write_text(GUARDED, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    shown = run_cli("check", "--show-settings", ".")
    assert "target-torch      1.8 " in shown.output
    assert "# requirements.txt: torch>=1.8" in shown.output
    result = run_cli("fix", "--apply", "--no-cache", ".")
    assert (tmp_path / "scaler.py").read_text(encoding="utf-8") == GUARDED
    assert "AMP201" not in result.output  # torch 1.8's own spelling
    # A configuration that says otherwise wins, and says so.
    (tmp_path / "amplint.toml").write_text('target-torch = "2.4"\n', encoding="utf-8")
    shown = run_cli("check", "--show-settings", ".").output
    assert "target-torch      2.4 " in shown and "amplint.toml" in shown.split("target-torch")[1]
    run_cli("fix", "--apply", "--no-cache", ".")
    assert "torch.cuda.amp" not in (tmp_path / "scaler.py").read_text(encoding="utf-8")


def test_an_fp32_step_in_a_project_on_old_torch_gets_that_torchs_spelling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    step = dedent("""
        import torch


        def train(model, loader, optimizer):
            for x, y in loader:
                loss = torch.nn.functional.mse_loss(model(x.cuda()), y.cuda())
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
        """)
    (tmp_path / "setup.py").write_text('setup(install_requires=["torch>=1.10"])\n')
    (tmp_path / "train.py").write_text(step, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    result = run_cli("fix", "--apply", "--no-cache", ".")
    fixed = (tmp_path / "train.py").read_text(encoding="utf-8")
    assert "scaler = torch.cuda.amp.GradScaler()" in fixed, result.output
    assert 'with torch.autocast("cuda", dtype=torch.float16):' in fixed
    assert run_cli("check", "--no-cache", ".").exit_code == 0  # nothing of ours left
    # Below torch.cuda.amp itself there is nothing to write, and the floor is named.
    (tmp_path / "setup.py").write_text('setup(install_requires=["torch>=1.5"])\n')
    (tmp_path / "train.py").write_text(step, encoding="utf-8")
    result = run_cli("check", "--no-cache", ".")
    assert (
        "torch.cuda.amp needs torch 1.6, above target-torch 1.5 (setup.py: torch>=1.5)"
    ) in result.output
