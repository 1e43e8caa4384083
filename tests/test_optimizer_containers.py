"""Optimizers kept in a container: a dict (`optims["d"].step()`), a list
entry (`optimizers[0]`), a namespace (`optims.d.step()`: SimpleNamespace,
StarGAN v2's Munch), on the instance or in a local taken from it.  A step of
each is an FP32 training step like any other: AMP001 rewrites it, the scaler
steps the optimizer as the code spells it, and the rewrite runs."""

from __future__ import annotations

import pytest

from amplint.config import Settings
from tests.helpers import codes_of, dedent, fixed

GAN = """
import types

import torch
import torch.nn as nn


class GANTrainer:
    def __init__(self, generator, discriminator):
        self.generator = generator
        self.discriminator = discriminator
        self.optims = {made}

    def train(self, batches):
        {local}
        for real, z in batches:
            fake = self.generator(z)
            d_loss = self.discriminator(real).mean() - self.discriminator(fake.detach()).mean()
            {d}.zero_grad()
            d_loss.backward()
            {d}.step()

            g_loss = -self.discriminator(fake).mean()
            {g}.zero_grad()
            g_loss.backward()
            torch.nn.utils.clip_grad_norm_(self.generator.parameters(), 1.0)
            {g}.step()
            self.losses.append((d_loss.item(), g_loss.item()))


def main():
    torch.manual_seed(0)
    trainer = GANTrainer(nn.Linear(4, 8), nn.Linear(8, 1))
    trainer.losses = []
    batches = [(torch.randn(16, 8), torch.randn(16, 4)) for _ in range(4)]
    before = [p.detach().clone() for p in trainer.generator.parameters()]
    trainer.train(batches)
    return trainer.losses, before, list(trainer.generator.parameters())
"""

ADAM = "torch.optim.Adam({}.parameters(), lr=1e-3)"
_DICT = '{"g": %s, "d": %s}' % (ADAM.format("generator"), ADAM.format("discriminator"))
_LIST = "[%s, %s]" % (ADAM.format("generator"), ADAM.format("discriminator"))
_NAMESPACE = "types.SimpleNamespace(g=%s, d=%s)" % (
    ADAM.format("generator"),
    ADAM.format("discriminator"),
)
SPELLINGS = {
    "dict on the instance": (_DICT, "pass", 'self.optims["g"]', 'self.optims["d"]'),
    "dict in a local": (_DICT, "optims = self.optims", 'optims["g"]', 'optims["d"]'),
    "list in a local": (_LIST, "optimizers = self.optims", "optimizers[0]", "optimizers[1]"),
    "namespace on the instance": (_NAMESPACE, "pass", "self.optims.g", "self.optims.d"),
    # StarGAN v2: `nets, optims = self.nets, self.optims` (this crashed the fix).
    "namespace in a local": (_NAMESPACE, "optims = self.optims", "optims.g", "optims.d"),
}


def _source(spelling: str) -> str:
    made, local, g, d = SPELLINGS[spelling]
    return dedent(GAN).format(made=made, local=local, g=g, d=d)


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_a_step_of_an_optimizer_in_a_container_is_rewritten_and_runs(spelling) -> None:
    source = _source(spelling)
    assert codes_of(source).count("AMP001") == 1
    settings = Settings(device_type="cpu", dtype="float16")
    result = fixed(source, settings)
    _, _, g, d = SPELLINGS[spelling]
    assert f"scaler.step({d})" in result and f"scaler.step({g})" in result
    assert f"scaler.unscale_({g})" in result  # before the clip
    assert codes_of(result, settings) == []
    torch = pytest.importorskip("torch")
    namespace: dict = {}
    exec(compile(result, "gan.py", "exec"), namespace)
    losses, before, after = namespace["main"]()
    assert len(losses) == 4 and all(map(torch.isfinite, torch.tensor(losses).flatten()))
    assert any(not torch.equal(old, new) for old, new in zip(before, after))


def test_a_container_of_something_else_is_no_optimizer() -> None:
    """`opt.models["g"].step()`: `opt` is the argparse options here, and a
    subscript by a computed key names no one optimizer."""
    source = dedent("""
        import torch
        def train(opt, model, loader, optimizers, i):
            for x, y in loader:
                loss = model(x, y)
                loss.backward()
                opt.models["g"].step()
                optimizers[i].step()
        """)
    assert "AMP001" not in codes_of(source)
