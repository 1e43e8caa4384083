"""AMP001 and AMP102 on gradient clips: a clip inside an expression, and a clip
on every micro-step of gradient accumulation, which a GradScaler cannot unscale
for (one unscale_ per optimizer step) and which takes the scale in its threshold
instead (analysis/clips.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from amplint.config import Settings
from tests.helpers import assert_declined, dedent, findings_of, fixed


def test_a_clip_inside_an_expression_is_unscaled_for() -> None:
    """`print(clip_grad_norm_(...).item())`: the clip is no whole statement,
    and is a clip all the same; the unscale_ goes before its line."""
    source = dedent("""
        import torch


        def train(model, loader, optimizer):
            for x, y in loader:
                optimizer.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x.cuda()), y.cuda())
                loss.backward()
                print(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).item())
                optimizer.step()
        """)
    migrated = fixed(source)
    assert (
        "        scaler.unscale_(optimizer)\n"
        "        print(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).item())\n"
    ) in migrated
    assert [d.code for d in findings_of(migrated)] == []


def test_a_project_clipper_inside_an_expression_is_unscaled_for() -> None:
    """`clip_gradient(params, c) if c > 0 else None`: the project's clipper
    in a conditional expression clamps what it is given; before this, the
    rewrite clamped scaled gradients (update parity caught it in make shapes)."""
    torch = pytest.importorskip("torch")
    source = dedent("""
        import torch


        def clip_gradient(params, grad_clip):
            for p in params:
                p.grad.data.clamp_(-grad_clip, grad_clip)


        def train(model, loader, optimizer, clip):
            for x, y in loader:
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                clipped = clip_gradient(model.parameters(), clip) if clip > 0 else None
                optimizer.step()
                optimizer.zero_grad()
        """)
    migrated = fixed(source, Settings(device_type="cpu", dtype="float16"))
    assert (
        "        scaler.unscale_(optimizer)\n"
        "        clipped = clip_gradient(model.parameters(), clip) if clip > 0 else None\n"
    ) in migrated
    weights = []
    for code in (source, migrated):
        namespace: dict = {}
        exec(compile(code, "train", "exec"), namespace)
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 4)
        data = [(torch.randn(8, 4), torch.randn(8, 4)) for _ in range(3)]
        namespace["train"](model, data, torch.optim.SGD(model.parameters(), lr=1.0), 0.01)
        weights.append(model.weight.detach().clone())
    assert torch.allclose(weights[0], weights[1], atol=1e-3)


ACCUMULATION = dedent("""
    import torch


    def train(model, loader, optimizer, accum, clip):
        for idx, (x, y) in enumerate(loader):
            loss = torch.nn.functional.mse_loss(model(x.cuda()), y.cuda()) / accum
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            if (idx + 1) % accum == 0:
                optimizer.step()
                optimizer.zero_grad()
            print(grad_norm)
    """)


def test_a_clip_on_every_micro_step_takes_the_scale_instead_of_an_unscale() -> None:
    """One unscale_ per optimizer step: before a clip that runs on every
    micro-step it would raise on the second.  The clip of scaled gradients
    with the threshold times the scale is the same clip; its norm is divided
    back.  AMP102 then has nothing to say about it."""
    migrated = fixed(ACCUMULATION)
    assert "unscale_" not in migrated
    assert (
        "        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip * "
        "scaler.get_scale()) / scaler.get_scale()\n"
    ) in migrated
    assert [d.code for d in findings_of(migrated)] == []
    inline = ACCUMULATION.replace(
        "grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)",
        "print(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=clip / 2).item())",
    ).replace("        print(grad_norm)\n", "")
    assert (
        "print((torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=(clip / 2) * "
        "scaler.get_scale()) / scaler.get_scale()).item())"
    ) in fixed(inline)


def test_a_clip_of_scaled_gradients_without_the_scale_is_still_amp102() -> None:
    scaled = dedent("""
        import torch


        def train(model, loader, optimizer, scaler, clip):
            for x, y in loader:
                with torch.autocast("cuda"):
                    loss = model(x).mean()
                scaler.scale(loss).backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
                scaler.step(optimizer)
                scaler.update()
        """)
    assert [d.code for d in findings_of(scaled)] == ["AMP102"]
    aware = scaled.replace("parameters(), clip)", "parameters(), clip * scaler.get_scale())")
    assert [d.code for d in findings_of(aware)] == []


def test_a_project_clipper_on_every_micro_step_is_declined() -> None:
    source = ACCUMULATION.replace(
        "torch.nn.utils.clip_grad_norm_(model.parameters(), clip)",
        "clip_gradients(model.parameters(), clip)",
    )
    assert_declined(
        source,
        "`clip_gradients(model.parameters(), clip)` hands the gradients to the project's own "
        "code on every micro-step while the optimizer steps under a condition: there they are "
        "still scaled (a GradScaler unscales once per optimizer step); move it to the "
        "accumulation boundary, or, if it only computes a norm, divide that by "
        "`scaler.get_scale()`",
    )


def test_a_clamp_by_hand_on_every_micro_step_is_declined() -> None:
    source = ACCUMULATION.replace(
        "        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)\n",
        "        for p in model.parameters():\n            p.grad.clamp_(-clip, clip)\n",
    ).replace("            print(grad_norm)\n", "")
    assert_declined(
        source,
        "`for p in model.parameters():` works on the gradients on every micro-step while the "
        "optimizer steps under a condition: a GradScaler unscales once per optimizer step, so "
        "move it to the accumulation boundary first",
    )


OPTIONAL_ENCODER = dedent("""
    import torch


    def clip_gradient(optimizer, grad_clip):
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad.data.clamp_(-grad_clip, grad_clip)


    def train(loader, encoder, decoder, criterion, enc_opt, dec_opt, grad_clip):
        for imgs, caps in loader:
            scores = decoder(encoder(imgs.cuda()))
            loss = criterion(scores, caps.cuda())
            dec_opt.zero_grad()
            if enc_opt is not None:
                enc_opt.zero_grad()
            loss.backward()
            clip_gradient(dec_opt, grad_clip)
            if enc_opt is not None:
                clip_gradient(enc_opt, grad_clip)
            dec_opt.step()
            if enc_opt is not None:
                enc_opt.step()


    def main(encoder, decoder, loader, fine_tune):
        dec_opt = torch.optim.Adam(decoder.parameters())
        enc_opt = torch.optim.Adam(encoder.parameters()) if fine_tune else None
        for epoch in range(10):
            train(loader, encoder, decoder, torch.nn.CrossEntropyLoss(), enc_opt, dec_opt, 5.0)
    """)


def test_an_optional_optimizer_is_no_accumulation_and_is_unscaled_where_it_exists() -> None:
    """sgrvinod's image captioning: `if encoder_optimizer is not None:` asks
    whether the encoder is fine-tuned, not whether this is an accumulation
    boundary. It was declined as a clip "on every micro-step"; the rewrite
    unscales each optimizer before its clip, the optional one under its test
    (unscale_(None) would raise)."""
    migrated = fixed(OPTIONAL_ENCODER)
    assert (
        "        scaler.scale(loss).backward()\n"
        "        scaler.unscale_(dec_opt)\n"
        "        if enc_opt is not None:\n"
        "            scaler.unscale_(enc_opt)\n"
        "        clip_gradient(dec_opt, grad_clip)\n"
    ) in migrated
    assert "        if enc_opt is not None:\n            scaler.step(enc_opt)\n" in migrated


@pytest.mark.slow
def test_the_optional_optimizers_rewrite_runs_with_and_without_it(tmp_path: Path) -> None:
    """The rewrite on the CPU with float16 (a GradScaler that really scales):
    it runs with the encoder's optimizer and without it, and trains as the
    original does."""
    runner = dedent("""

        if __name__ == "__main__":
            torch.manual_seed(0)
            encoder, decoder = torch.nn.Linear(8, 8), torch.nn.Linear(8, 4)
            batches = [(torch.randn(16, 8), torch.randint(0, 4, (16,))) for _ in range(5)]
            for fine_tune in (False, True):
                main(encoder, decoder, batches, fine_tune)
                print("weight", decoder.weight.sum().item())
        """)
    source = OPTIONAL_ENCODER.replace(".cuda()", "") + runner
    rewritten = fixed(source, Settings(device_type="cpu", dtype="float16"))
    assert "if enc_opt is not None:\n            scaler.unscale_(enc_opt)" in rewritten
    weights = []
    for name, text in (("original.py", source), ("rewritten.py", rewritten)):
        (tmp_path / name).write_text(text)
        run = subprocess.run(
            [sys.executable, name], cwd=tmp_path, capture_output=True, text=True, timeout=300
        )
        assert run.returncode == 0, run.stderr
        weights.append([float(line.split()[1]) for line in run.stdout.splitlines()])
    assert weights[1] == pytest.approx(weights[0], rel=1e-2, abs=1e-2)
