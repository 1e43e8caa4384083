"""AMP101: which backward calls count as inside autocast, and how blocks split."""

from __future__ import annotations

import pytest

from tests.helpers import codes_of, dedent, fixed


def test_a_block_with_only_the_backward_disappears() -> None:
    source = dedent("""
        import torch
        loss = model(torch.ones(2))
        # the backward
        with torch.autocast("cuda"):
            loss.backward()
        optimizer.step()
        """)
    assert fixed(source) == dedent("""
        import torch
        loss = model(torch.ones(2))
        # the backward
        loss.backward()
        optimizer.step()
        """)


def test_a_removal_that_would_orphan_the_torch_import_is_refused() -> None:
    # The self-check: the rewrite may not leave a name unused that was used.
    source = dedent("""
        import torch
        loss = model(x)
        with torch.autocast("cuda"):
            loss.backward()
        optimizer.step()
        """)
    assert fixed(source) == source


@pytest.mark.parametrize(
    "source",
    [
        # several context managers: moving statements out would leave the others
        'with torch.autocast("cuda"), record("step"):\n    loss = f(x)\n    loss.backward()\n',
        # the body on the with line
        'with torch.autocast("cuda"): loss = f(x); loss.backward()\n',
        # nested in a compound statement
        'with torch.autocast("cuda"):\n    loss = f(x)\n    if train:\n        loss.backward()\n',
    ],
)
def test_reported_without_a_fix(source: str) -> None:
    source = "import torch\n" + source
    assert codes_of(source) == ["AMP101"]
    assert fixed(source) == source


@pytest.mark.parametrize(
    "source",
    [
        'with torch.autocast("cuda", enabled=False):\n    loss.backward()\n',
        'with torch.autocast("cuda"):\n    def closure():\n        loss.backward()\n',
        'with torch.autocast("cuda"):\n    hook = lambda: loss.backward()\n',
        "with torch.no_grad():\n    loss.backward()\n",
        "from mylib import autocast\nwith autocast():\n    loss.backward()\n",
    ],
)
def test_silent(source: str) -> None:
    assert "AMP101" not in codes_of("import torch\n" + source)


def test_deprecated_autocast_counts_and_both_fixes_apply() -> None:
    source = dedent("""
        import torch
        from torch.cuda.amp import autocast

        with autocast():
            loss = model(x)
            loss.backward()
        """)
    assert sorted(codes_of(source)) == ["AMP101", "AMP201"]
    assert fixed(source) == dedent("""
        import torch

        with torch.amp.autocast("cuda"):
            loss = model(x)
        loss.backward()
        """)
