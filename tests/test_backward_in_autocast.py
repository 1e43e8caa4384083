"""AMP101: which backward calls count as inside autocast, and how blocks split."""

from __future__ import annotations

import pytest

from tests.helpers import codes_of, dedent, findings_of, fixed


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


HELPER_BACKWARDS = """
import torch


class Model:
    def __init__(self, net, optimizer):
        self.net, self.optimizer = net, optimizer

    def backward_G(self):
        self.loss_G = self.net(self.x).mean()
        self.loss_G.backward()

    def report(self):
        return self.net.weight.norm()

    def optimize_parameters(self, x):
        self.x = x
        self.optimizer.zero_grad()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            self.report()
            self.backward_G()
        self.optimizer.step()


def step(loss, optimizer):
    loss.backward()
    optimizer.step()


def train(model, loader, optimizer):
    for x in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).mean()
            step(loss, optimizer)
"""


def test_a_backward_run_by_a_helper_the_block_calls_is_found() -> None:
    """pix2pix's `self.backward_G()`, a `step(loss, optimizer)` function:
    the backward runs inside the caller's autocast block though no
    `.backward()` is written there (issue 60).  Reported without a fix: the
    helper may compute its loss too, which the block should keep."""
    found = [d for d in findings_of(dedent(HELPER_BACKWARDS)) if d.code == "AMP101"]
    assert [d.message.split(" runs a backward")[0] for d in found] == [
        "`self.backward_G()`",
        "`step(loss, optimizer)`",
    ]
    assert all(d.fix is None for d in found)
    assert "(in `backward_G`)" in found[0].message and "(in `step`)" in found[1].message


def test_a_helper_without_a_backward_is_not_one() -> None:
    source = dedent(HELPER_BACKWARDS).replace("        self.loss_G.backward()\n", "")
    messages = [d.message for d in findings_of(source) if d.code == "AMP101"]
    assert not any("backward_G" in m for m in messages)
