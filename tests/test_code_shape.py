"""The prefilter's questions about the compiled code (amplint/code_shape.py)
and about calls: what they let through and what they keep from libcst."""

from __future__ import annotations

import pytest

from amplint.code_shape import backward_meets_update
from amplint.prefilter import SourceClues
from amplint.rules import RULES
from tests.helpers import dedent

# torch's own sources: a Function's backward beside a gradient test.
AUTOGRAD_TEST = """
class Square(torch.autograd.Function):
    @staticmethod
    def backward(ctx, grad):
        return 2 * grad

def check_gradients(x):
    x.sum().backward()
    return x.grad
"""


def _meets(text: str) -> bool:
    return backward_meets_update(compile(dedent(text), "<test>", "exec"))


@pytest.mark.parametrize(
    "text",
    [
        # The plain step, in a loop at the module's level.
        """
        for x, y in loader:
            criterion(model(x), y).backward()
            optimizer.step()
        """,
        # A backward helper of the same class (pix2pix's `self.backward_G()`).
        """
        class Model:
            def backward_G(self):
                self.loss_G.backward()

            def optimize_parameters(self):
                self.forward()
                self.backward_G()
                self.optimizer_G.step()
        """,
        # A step split across two helpers (improved-diffusion's `run_step`).
        """
        class Loop:
            def forward_backward(self, batch):
                self.model(batch).mean().backward()

            def optimize(self):
                self.opt.step()

            def run_step(self, batch):
                self.forward_backward(batch)
                self.optimize()
        """,
        # A closure nested in the function that hands it to the optimizer.
        """
        def train(model, optimizer, x):
            def closure():
                optimizer.zero_grad()
                loss = model(x).sum()
                loss.backward()
                return loss
            optimizer.step(closure)
        """,
        # A closure that is a method, handed over by reference.
        """
        class Fit:
            def closure(self):
                loss = self.model(self.x).sum()
                loss.backward()
                return loss

            def fit(self):
                self.optimizer.step(self.closure)
        """,
        # An update by hand in a helper the loop calls.
        """
        def sgd(params, lr):
            for p in params:
                p.data -= lr * p.grad

        for x, y in loader:
            criterion(model(x), y).backward()
            sgd(model.parameters(), 0.1)
        """,
        # The backward in a loop function, the step in a module-level function it calls.
        """
        def update(optimizer):
            optimizer.step()

        def train(model, optimizer, loader):
            for x in loader:
                model(x).sum().backward()
                update(optimizer)
        """,
    ],
)
def test_a_backward_meets_an_update(text: str) -> None:
    assert _meets(text)


@pytest.mark.parametrize(
    "text",
    [
        # ... and a scheduler stepped, a counter decremented, elsewhere.
        AUTOGRAD_TEST + """
def advance(scheduler, counter):
    scheduler.step()
    counter -= 1
    return counter
""",
        # Two methods of a test class that share no name.
        """
        class TestAutograd:
            def test_backward(self):
                torch.ones(2, requires_grad=True).sum().backward()

            def test_env(self):
                env.step(0)
        """,
    ],
)
def test_a_backward_apart_from_every_update(text: str) -> None:
    assert not _meets(text)


@pytest.mark.parametrize(
    ("text", "called"),
    [
        ("with torch.autocast('cuda'):\n    pass\n", True),
        ("from torch import autocast as ac\nwith ac('cuda'):\n    pass\n", True),
        ("ok = isinstance(v, torch.amp.autocast_mode.autocast)\n", False),
        ("TABLE = {torch.autocast: 'autocast'}\n", False),
        ("# with torch.autocast('cuda'):\n", False),
    ],
)
def test_may_call_name(text: str, called: bool) -> None:
    assert SourceClues(text).may_call_name("autocast") is called


@pytest.mark.parametrize(
    ("text", "reached"),
    [
        ("scaler = torch.cuda.amp.GradScaler()\n", True),
        ("from torch.cuda import amp as gpu_amp\nscaler = gpu_amp.GradScaler()\n", True),
        ("import torch.cuda.amp as tca\n\n@tca.custom_fwd\ndef f(x):\n    return x\n", True),
        ("from torch.cuda.amp import GradScaler as Scaler\n", True),
        ("from torch.cuda.amp import *\n", True),
        ("scaler: torch.cuda.amp.GradScaler = make()\n", True),  # annotations count
        ("TABLE = {torch.cuda.amp.autocast_mode.autocast: 'cuda'}\n", False),
        ("from torch.cuda import amp\nok = amp.common.amp_definitely_not_available()\n", False),
    ],
)
def test_may_reach_amp_member(text: str, reached: bool) -> None:
    clues = SourceClues(text)
    assert clues.may_reach_amp_member("autocast", "GradScaler", "custom_fwd") is reached


def test_text_that_does_not_parse_decides_nothing() -> None:
    clues = SourceClues("def f(:\n    loss.backward()\n    torch.autocast('cuda')\n")
    assert clues.may_call_name("autocast") and clues.backward_meets_update


# What torch's own sources look like where they name AMP's words: each once
# took libcst and every rule's analysis (tests/bench.py, issue 44).
@pytest.mark.parametrize(
    "text",
    [
        """
        import torch

        def is_autocast(value):
            return isinstance(value, torch.amp.autocast_mode.autocast)

        def move(x, device):
            return x.to(device)
        """,
        """
        import torch

        DEVICE_OF = {
            torch.cuda.amp.autocast_mode.autocast: "cuda",
            torch.cpu.amp.autocast_mode.autocast: "cpu",
        }
        """,
        """
        import torch

        class CompileConfig:
            pass

        def compile_fx(graph):
            config = CompileConfig()
            enabled = torch.is_autocast_enabled
            return graph, config, enabled
        """,
        "import torch\n" + AUTOGRAD_TEST + "\ndef advance(scheduler):\n    scheduler.step()\n",
        # Autocast given a device type from a variable (AMP116 wants a
        # torch.device or "cuda:0"; AMP122 wants "cuda" named) beside `.to(`.
        """
        import torch

        def disable_autocast(device_types):
            for device_type in device_types:
                with torch.amp.autocast(device_type, enabled=False):
                    yield

        def move(x, device):
            return x.to(device)
        """,
        # A table of losses beside autocast: no loss is called.
        """
        import torch

        UNSAFE = (torch.nn.BCELoss, torch.nn.functional.binary_cross_entropy)

        def region_for(op):
            return torch.autocast if op in UNSAFE else None
        """,
    ],
)
def test_library_code_that_names_amp_is_not_parsed(text: str) -> None:
    clues = SourceClues(dedent(text))
    assert [rule.code for rule in RULES if rule.may_fire(clues)] == []
