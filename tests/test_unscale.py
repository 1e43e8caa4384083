"""AMP102: clipping gradients that are still scaled, and the unscale_ put before it."""

from __future__ import annotations

import textwrap

import pytest

from tests.helpers import codes_of, dedent, fixed


def _step(clip_block: str, head: str = "import torch\n") -> str:
    return head + dedent("""
        for x, y in loader:
            with torch.autocast("cuda"):
                loss = criterion(model(x), y)
            scaler.scale(loss).backward()
        """) + textwrap.indent(dedent(clip_block), "    ")


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (
            """
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(optimizer)
                scaler.update()
            """,
            """
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(optimizer)
                scaler.update()
            """,
        ),
        (  # the norm is kept for logging; the comment stays with the clip
            """

                # bound the update
                grad_norm = nn.utils.clip_grad_value_(model.parameters(), 0.5)
                scaler.step(optimizer)
                scaler.update()
            """,
            """

                scaler.unscale_(optimizer)
                # bound the update
                grad_norm = nn.utils.clip_grad_value_(model.parameters(), 0.5)
                scaler.step(optimizer)
                scaler.update()
            """,
        ),
        (  # accumulation: only at the boundary, where the clip is
            """
                if (i + 1) % accumulation == 0:
                    if max_norm > 0:
                        clip_grad_norm_(model.parameters(), max_norm)
                    scaler.step(optimizer)
                    scaler.update()
            """,
            """
                if (i + 1) % accumulation == 0:
                    if max_norm > 0:
                        scaler.unscale_(optimizer)
                        clip_grad_norm_(model.parameters(), max_norm)
                    scaler.step(optimizer)
                    scaler.update()
            """,
        ),
        (  # two optimizers stepped after one clip: both unscaled
            """
                clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(backbone_opt)
                scaler.step(head_opt)
                scaler.update()
            """,
            """
                scaler.unscale_(backbone_opt)
                scaler.unscale_(head_opt)
                clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(backbone_opt)
                scaler.step(head_opt)
                scaler.update()
            """,
        ),
    ],
)
def test_unscale_goes_right_before_the_clip(before: str, after: str) -> None:
    head = "import torch\nfrom torch import nn\nfrom torch.nn.utils import clip_grad_norm_\n"
    source = _step(before, head)
    assert codes_of(source) == ["AMP102"]
    result = fixed(source)
    assert result == _step(after, head)
    assert fixed(result) == result


def test_a_gan_unscales_each_optimizer_before_its_own_clip() -> None:
    source = dedent("""
        import torch
        from torch.nn.utils import clip_grad_norm_
        for real in loader:
            with torch.autocast("cuda"):
                d_loss = critic(real, generator(noise()))
            scaler.scale(d_loss).backward()
            clip_grad_norm_(critic.parameters(), 1.0)
            scaler.step(opt_d)
            with torch.autocast("cuda"):
                g_loss = -critic(real, generator(noise())).mean()
            scaler.scale(g_loss).backward()
            clip_grad_norm_(generator.parameters(), 1.0)
            scaler.step(opt_g)
            scaler.update()
        """)
    result = fixed(source)
    assert result.count("scaler.unscale_(opt_d)\n    clip_grad_norm_(critic") == 1
    assert result.count("scaler.unscale_(opt_g)\n    clip_grad_norm_(generator") == 1
    assert "unscale_" not in result.replace("scaler.unscale_(opt_d)", "").replace(
        "scaler.unscale_(opt_g)", ""
    )


@pytest.mark.parametrize(
    "tail",
    [
        # the recipe
        """
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        """,
        # accelerate and friends unscale inside their own clip
        """
        accelerator.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        """,
        # a linear edit commutes with the scale
        """
        for p in model.parameters():
            p.grad.div_(world_size)
        scaler.step(optimizer)
        scaler.update()
        """,
        # the clip is on the path without a scaler
        """
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
        """,
        # a helper of the user's, which may unscale: not for a guess
        """
        clip_gradients(model, scaler, optimizer)
        scaler.step(optimizer)
        scaler.update()
        """,
    ],
)
def test_silent(tail: str) -> None:
    assert "AMP102" not in codes_of(_step(tail))


def test_a_clip_on_the_unscaled_path_of_a_dual_path_loop_is_silent() -> None:
    source = dedent("""
        import torch
        def train_step(model, x, y, optimizer, scaler, max_norm):
            with torch.autocast("cuda", enabled=scaler is not None):
                loss = model(x, y)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.unscale_(optimizer)
            else:
                loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            if scaler is not None:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
        """)
    assert codes_of(source) == []


@pytest.mark.parametrize(
    ("test", "guard"),
    [
        ("scaler is not None", "scaler is not None"),
        ("scaler is None", "scaler is not None"),  # the scaler is used in the else
        ("args.fp16", "args.fp16"),
        ("not args.fp32", "not args.fp32"),
        ("args.amp and scaler", "args.amp and scaler"),
    ],
)
def test_a_clip_shared_by_both_paths_unscales_only_where_the_scaler_is(
    test: str, guard: str
) -> None:
    scaled, plain = "scaler.scale(loss).backward()", "loss.backward()"
    if test == "scaler is None":
        scaled, plain = plain, scaled
    template = """
    import torch
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = criterion(model(x), y)
        if {test}:
            {first}
        else:
            {second}
        {unscale}torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if {test}:
            {first_step}
        else:
            {second_step}
    """
    steps = ("scaler.step(optimizer)\n            scaler.update()", "optimizer.step()")
    if test == "scaler is None":
        steps = steps[::-1]
    fields = dict(test=test, first=scaled, second=plain, first_step=steps[0])
    fields["second_step"] = steps[1]
    source = dedent(template.format(unscale="", **fields))
    assert codes_of(source) == ["AMP102"]
    unscale = f"if {guard}:\n            scaler.unscale_(optimizer)\n        "
    assert fixed(source) == dedent(template.format(unscale=unscale, **fields))


@pytest.mark.parametrize(
    "clip",
    [
        "clip_gradient(optimizer, 0.5)",  # image-captioning tutorials' helper
        "clipper.step(model.parameters())",  # a clipping object of the project's
    ],
)
def test_the_projects_own_clipper_sees_unscaled_gradients(clip: str) -> None:
    """A helper handed the optimizer or the parameters may clamp or clip: like
    torch's clip it must see unscaled gradients, in the FP32 rewrite as in
    code that is AMP already."""
    amp = _step(f"""
        {clip}
        scaler.step(optimizer)
        scaler.update()
        """)
    assert "AMP102" in codes_of(amp)
    assert f"scaler.unscale_(optimizer)\n    {clip}" in fixed(amp)
    fp32 = dedent(f"""
        import torch
        for x, y in loader:
            x, y = x.cuda(), y.cuda()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            {clip}
            optimizer.step()
            optimizer.zero_grad()
        """)
    assert f"scaler.unscale_(optimizer)\n    {clip}" in fixed(fp32)


def test_a_clamp_before_the_clip_is_unscaled_first() -> None:
    """A clamp of `.grad` is no multiplication by a factor: on scaled gradients
    it clamps 65536 times too early, so the unscale_ goes before it, not
    between it and the clip.  A division by the world size may stay first."""
    fp32 = dedent("""
        import torch
        for x, y in loader:
            x, y = x.cuda(), y.cuda()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            for p in model.parameters():
                p.grad.div_(world_size)
            for p in model.parameters():
                p.grad.data.clamp_(-1.0, 1.0)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
        """)
    result = fixed(fp32)
    assert (
        "        p.grad.div_(world_size)\n"
        "    scaler.unscale_(optimizer)\n"
        "    for p in model.parameters():\n"
        "        p.grad.data.clamp_(-1.0, 1.0)\n"
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
    ) in result
    assert result.count("unscale_") == 1


def test_a_conditional_clamp_before_an_unconditional_clip_unscales_on_every_path() -> None:
    fp32 = dedent("""
        import torch
        for x, y in loader:
            x, y = x.cuda(), y.cuda()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            if clamp:
                for p in model.parameters():
                    p.grad.data.clamp_(-1.0, 1.0)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
        """)
    result = fixed(fp32)
    assert "    scaler.unscale_(optimizer)\n    if clamp:\n" in result
    assert result.count("unscale_") == 1


def test_an_all_reduce_by_hand_stays_before_the_unscale() -> None:
    """cleanrl's multi-GPU PPO writes the all-reduced gradients back with
    `copy_`: linear in the scale, and every rank must reduce before it unscales."""
    fp32 = dedent("""
        import torch
        for x, y in loader:
            x, y = x.cuda(), y.cuda()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            if world_size > 1:
                flat = torch.cat([p.grad.view(-1) for p in model.parameters()])
                dist.all_reduce(flat)
                offset = 0
                for p in model.parameters():
                    p.grad.data.copy_(flat[offset : offset + p.numel()].view_as(p.grad) / world_size)
                    offset += p.numel()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
        """)
    result = fixed(fp32)
    assert "    scaler.unscale_(optimizer)\n    torch.nn.utils.clip_grad_norm_(" in result
    assert result.count("unscale_") == 1


_LOGGED_NORM = dedent("""
    import torch
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        log["grad_norm"] = torch.stack([g.norm() for g in grads]).norm().item()
        optimizer.step()
        optimizer.zero_grad()
    """)


def test_a_read_of_the_gradients_after_backward_sees_them_unscaled() -> None:
    """A logged gradient norm read the FP32 gradients; on a scaled step it would
    read them times 65536 unless they are unscaled first."""
    result = fixed(_LOGGED_NORM)
    assert (
        "    scaler.scale(loss).backward()\n"
        "    scaler.unscale_(optimizer)\n"
        "    grads = [p.grad for p in model.parameters() if p.grad is not None]\n"
    ) in result
    assert codes_of(result) == []


def test_a_test_against_none_or_a_reset_is_no_read_of_the_gradients() -> None:
    fp32 = _LOGGED_NORM.replace(
        "    grads = [p.grad for p in model.parameters() if p.grad is not None]\n"
        '    log["grad_norm"] = torch.stack([g.norm() for g in grads]).norm().item()\n',
        "    missing = [n for n, p in model.named_parameters() if p.grad is None]\n",
    ).replace(
        "    optimizer.zero_grad()\n", "    for p in model.parameters():\n        p.grad = None\n"
    )
    assert "unscale_" not in fixed(fp32)


_CLIP_IN_A_LOOP = dedent("""
    import torch
    from torch.nn.utils import clip_grad_norm_


    def train(models, optimizer, loader, clip):
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(models[1](models[0](x.cuda())), y.cuda())
            optimizer.zero_grad()
            loss.backward()
            for model in models:
                clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
    """)


def test_a_clip_inside_a_loop_is_a_clip_and_gets_the_unscale_before_its_loop() -> None:
    """Once missed: the loop's clips then ran on gradients 65536 times too large,
    and the step applied them clipped 65536 times too hard."""
    result = fixed(_CLIP_IN_A_LOOP)
    assert (
        "        scaler.scale(loss).backward()\n"
        "        scaler.unscale_(optimizer)\n"
        "        for model in models:\n"
        "            clip_grad_norm_(model.parameters(), clip)\n"
    ) in result
    assert codes_of(result) == []


def test_amp102_sees_a_clip_inside_a_loop_before_the_unscale() -> None:
    scaled = fixed(_CLIP_IN_A_LOOP).replace("        scaler.unscale_(optimizer)\n", "")
    assert codes_of(scaled) == ["AMP102"]
