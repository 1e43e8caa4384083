"""Project functions that compute a norm of the gradients (project/gradient_norms.py):
their result on scaled gradients is the scale times the FP32 one, so a norm
logged on every micro-step of accumulation is divided by the scale."""

from __future__ import annotations

from pathlib import Path

import pytest

from amplint.config import Settings
from amplint.project.gradient_norms import gradient_norms_in
from amplint.project.source import ModuleSource
from amplint.engine import lint_text
from tests.helpers import ALL, dedent, fixed, run_cli

# Swin-Transformer's, by hand: Σ|g|^p, then its 1/p-th power.
BY_HAND = dedent("""
    def get_grad_norm(parameters, norm_type=2):
        if isinstance(parameters, torch.Tensor):
            parameters = [parameters]
        parameters = list(filter(lambda p: p.grad is not None, parameters))
        norm_type = float(norm_type)
        total_norm = 0
        for p in parameters:
            param_norm = p.grad.data.norm(norm_type)
            total_norm += param_norm.item() ** norm_type
        total_norm = total_norm ** (1. / norm_type)
        return total_norm
    """)
# MAE's and BEiT's: torch's norms of torch's norms, and a max-norm branch.
WITH_TORCH = dedent("""
    import torch
    from math import inf


    def get_grad_norm_(parameters, norm_type: float = 2.0) -> torch.Tensor:
        if isinstance(parameters, torch.Tensor):
            parameters = [parameters]
        parameters = [p for p in parameters if p.grad is not None]
        norm_type = float(norm_type)
        if len(parameters) == 0:
            return torch.tensor(0.)
        device = parameters[0].grad.device
        if norm_type == inf:
            total_norm = max(p.grad.detach().abs().max().to(device) for p in parameters)
        else:
            total_norm = torch.norm(
                torch.stack([torch.norm(p.grad.detach(), norm_type).to(device) for p in parameters]),
                norm_type,
            )
        return total_norm


    def rms(params):
        return (sum(p.grad.pow(2).sum() for p in params) / len(params)) ** 0.5


    def l2(params):
        return torch.sqrt(sum(p.grad.norm() ** 2 for p in params))
    """)


def norms(text: str) -> list[str]:
    return sorted(gradient_norms_in(ModuleSource(Path("m.py"), "m", text)))


def test_norms_by_hand_and_with_torch_are_of_degree_one() -> None:
    assert norms(BY_HAND) == ["get_grad_norm"]
    assert norms(WITH_TORCH) == ["get_grad_norm_", "l2", "rms"]


@pytest.mark.parametrize(
    "body",
    [
        "return sum(p.grad.pow(2).sum() for p in params)",  # the squared norm: degree two
        "return sum(p.grad.norm() for p in params) + 1",  # not homogeneous
        "return sum(p.norm() for p in params)",  # the parameters' norm, not the gradients'
        "return len([p for p in params if p.grad is not None])",  # a count: degree zero
        "torch.nn.utils.clip_grad_value_(params, 1.0)\n"
        "    return sum(p.grad.norm() for p in params)",  # clips on the way
        "for p in params:\n        p.grad.clamp_(-1, 1)\n"
        "    return sum(p.grad.norm() for p in params)",  # clamps on the way
        "for p in params:\n        p.grad = p.grad * 2\n"
        "    return sum(p.grad.norm() for p in params)",  # writes the gradients
        "n = sum(p.grad.norm() for p in params)\n    if n > 1:\n        return n\n"
        "    return 2 * n",  # a branch picked by the gradients' size
        "n = sum(p.grad.norm() for p in params)\n    log(n)\n    return n",  # unknown code
        "return norm_of([p.grad for p in params])",  # gradients given to unknown code
        "try:\n        return sum(p.grad.norm() for p in params)\n    except Exception:\n"
        "        return 0",  # statements it does not follow
    ],
)
def test_what_is_not_a_norm_of_the_gradients_is_not_taken_for_one(body: str) -> None:
    assert norms(f"import torch\n\n\ndef f(params):\n    {body}\n") == []


ACCUMULATION = dedent("""
    import torch
    {imports}


    def train(model, loader, optimizer, accumulation):
        for i, (x, y) in enumerate(loader):
            loss = torch.nn.functional.cross_entropy(model(x), y) / accumulation
            loss.backward()
            norm = {call}
            if (i + 1) % accumulation == 0:
                optimizer.step()
                optimizer.zero_grad()
            print(norm)
    """)


def test_a_norm_logged_on_every_micro_step_is_divided_by_the_scale() -> None:
    text = BY_HAND + ACCUMULATION.format(imports="", call="get_grad_norm(model.parameters())")
    assert "norm = get_grad_norm(model.parameters()) / scaler.get_scale()\n" in fixed(text)


def test_a_helper_that_is_no_norm_still_stops_the_rewrite_on_micro_steps() -> None:
    squared = "def sq(params):\n    return sum(p.grad.pow(2).sum() for p in params)\n"
    text = squared + ACCUMULATION.format(imports="", call="sq(model.parameters())")
    assert fixed(text) == text
    (finding,) = lint_text(text, ALL, Settings())
    assert "`sq(model.parameters())` hands the gradients to the project's own code" in (
        finding.message
    )


def test_a_norm_imported_from_another_module_of_the_project(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    (tmp_path / "utils.py").write_text("import torch\n\n\n" + BY_HAND)
    train = tmp_path / "train.py"
    train.write_text(
        ACCUMULATION.format(
            imports="\nfrom utils import get_grad_norm", call="get_grad_norm(model.parameters())"
        )
    )
    run_cli("fix", "--apply", "--no-cache", train)
    assert "norm = get_grad_norm(model.parameters()) / scaler.get_scale()\n" in train.read_text()
    # ... and a module-qualified call of it.
    train.write_text(
        ACCUMULATION.format(
            imports="\nimport utils", call="utils.get_grad_norm(model.parameters())"
        )
    )
    run_cli("fix", "--apply", "--no-cache", train)
    assert "utils.get_grad_norm(model.parameters()) / scaler.get_scale()\n" in train.read_text()
