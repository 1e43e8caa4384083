"""AMP119 matches a float16 cast, an optimizer and a GradScaler step only when
they name the same variable: test classes and scripts reuse `model` and
`optimizer` in every function, and a cast in one method once blocked the
rewrite of its sibling's training step ("the rewrite would leave AMP119", in
torch's own distributed_test.py)."""

from __future__ import annotations

from tests.helpers import codes_of, dedent, fixed

SIBLINGS = dedent("""
    import torch
    import torch.nn as nn


    class Tests:
        def test_half(self):
            model = nn.Linear(2, 2)
            model = model.half()
            out = model(torch.randn(2, 2, dtype=torch.float16))
            out.sum().backward()

        def test_training(self, loader):
            model = nn.Linear(2, 2).cuda()
            ddp_optim = torch.optim.SGD(model.parameters(), lr=0.1)
            for x in loader:
                ddp_optim.zero_grad()
                loss = model(x).sum()
                loss.backward()
                ddp_optim.step()
    """)


def test_a_cast_in_a_sibling_function_does_not_block_the_rewrite() -> None:
    rewritten = fixed(SIBLINGS)
    assert "scaler.step(ddp_optim)" in rewritten
    assert "AMP119" not in codes_of(rewritten)


CAST_IN_MAIN = dedent("""
    import torch
    import torch.nn as nn


    def train(model, optimizer, scaler, loader):
        for x in loader:
            optimizer.zero_grad()
            loss = model(x).sum()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()


    def main(loader):
        model = nn.Linear(2, 2).cuda().half()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cuda")
        train(model, optimizer, scaler, loader)
    """)


def test_a_cast_is_still_seen_through_the_parameters_of_a_training_function() -> None:
    assert "AMP119" in codes_of(CAST_IN_MAIN)


SHARED_ATTRIBUTE = dedent("""
    import torch
    import torch.nn as nn


    class Trainer:
        def __init__(self):
            self.model = nn.Linear(2, 2).cuda()
            self.model.half()
            self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
            self.scaler = torch.amp.GradScaler("cuda")

        def step(self, x):
            self.optimizer.zero_grad()
            loss = self.model(x).sum()
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
    """)


def test_an_attribute_is_one_variable_across_its_class_s_methods() -> None:
    assert "AMP119" in codes_of(SHARED_ATTRIBUTE)
