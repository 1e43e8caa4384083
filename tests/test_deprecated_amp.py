"""AMP201/AMP202: every spelling of torch.cuda.amp / torch.cpu.amp real code uses."""

from __future__ import annotations

import pytest

from amplint.config import Settings
from tests.helpers import codes_of, dedent, fixed

MIGRATIONS = {
    "positional flag becomes enabled=": (
        """
        import torch
        with torch.cuda.amp.autocast(use_amp):
            y = model(x)
        """,
        """
        import torch
        with torch.amp.autocast("cuda", enabled=use_amp):
            y = model(x)
        """,
    ),
    "every positional autocast argument is named": (
        """
        import torch
        ctx = torch.cuda.amp.autocast(True, torch.bfloat16, False)
        """,
        """
        import torch
        ctx = torch.amp.autocast("cuda", enabled=True, dtype=torch.bfloat16, cache_enabled=False)
        """,
    ),
    "no-argument call": (
        """
        import torch
        ctx = torch.cuda.amp.autocast()
        """,
        """
        import torch
        ctx = torch.amp.autocast("cuda")
        """,
    ),
    "split call keeps one argument per line": (
        """
        import torch
        ctx = torch.cuda.amp.autocast(
            enabled=use_amp,  # from the config
            dtype=torch.float16,
        )
        """,
        """
        import torch
        ctx = torch.amp.autocast(
            "cuda",
            enabled=use_amp,  # from the config
            dtype=torch.float16,
        )
        """,
    ),
    "GradScaler keeps positional order after the device": (
        """
        import torch
        scaler = torch.cuda.amp.GradScaler(2.0**10, enabled=use_amp)
        """,
        """
        import torch
        scaler = torch.amp.GradScaler("cuda", 2.0**10, enabled=use_amp)
        """,
    ),
    "GradScaler with **kwargs": (
        """
        import torch
        scaler = torch.cuda.amp.GradScaler(**cfg.scaler)
        """,
        """
        import torch
        scaler = torch.amp.GradScaler("cuda", **cfg.scaler)
        """,
    ),
    "from-imports lose their unused names": (
        """
        import torch
        from torch.cuda.amp import autocast, GradScaler as Scaler
        scaler = Scaler()
        with autocast(enabled=True):
            pass
        """,
        """
        import torch
        scaler = torch.amp.GradScaler("cuda")
        with torch.amp.autocast("cuda", enabled=True):
            pass
        """,
    ),
    "import torch is added where the deprecated import was": (
        """
        def evaluate(model, x):
            from torch.cuda.amp import autocast
            with autocast():
                return model(x)
        """,
        """
        def evaluate(model, x):
            import torch
            with torch.amp.autocast("cuda"):
                return model(x)
        """,
    ),
    "a removed first line of a block takes the blank line after it along": (
        """
        import torch
        if scaler is None:
            from torch.cuda.amp import GradScaler

            scaler = GradScaler()
        """,
        """
        import torch
        if scaler is None:
            scaler = torch.amp.GradScaler("cuda")
        """,
    ),
    "a try block is no fallback just because something is called amp": (
        """
        import torch
        try:
            scaler = torch.cuda.amp.GradScaler(enabled=args.amp)
        except RuntimeError:
            scaler = None
        """,
        """
        import torch
        try:
            scaler = torch.amp.GradScaler("cuda", enabled=args.amp)
        except RuntimeError:
            scaler = None
        """,
    ),
    "from torch.cuda import amp": (
        """
        import torch
        from torch.cuda import amp
        with amp.autocast(enabled=False):
            pass
        """,
        """
        import torch
        with torch.amp.autocast("cuda", enabled=False):
            pass
        """,
    ),
    "import torch.cuda.amp as amp, torch not imported": (
        """
        import torch.cuda.amp as amp

        scaler = amp.GradScaler()
        """,
        """
        import torch

        scaler = torch.amp.GradScaler("cuda")
        """,
    ),
    "import torch as th": (
        """
        import torch as th
        with th.cuda.amp.autocast(dtype=th.float16):
            pass
        scaler = th.cpu.amp.GradScaler(enabled=False)
        """,
        """
        import torch as th
        with th.amp.autocast("cuda", dtype=th.float16):
            pass
        scaler = th.amp.GradScaler("cpu", enabled=False)
        """,
    ),
    "custom_fwd called and custom_bwd bare": (
        """
        import torch
        class Fn(torch.autograd.Function):
            @staticmethod
            @torch.cuda.amp.custom_fwd(cast_inputs=torch.float32)
            def forward(ctx, x):
                return x

            @staticmethod
            @torch.cuda.amp.custom_bwd
            def backward(ctx, grad):
                return grad
        """,
        """
        import torch
        class Fn(torch.autograd.Function):
            @staticmethod
            @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)
            def forward(ctx, x):
                return x

            @staticmethod
            @torch.amp.custom_bwd(device_type="cuda")
            def backward(ctx, grad):
                return grad
        """,
    ),
    "bare custom_fwd from a from-import": (
        """
        import torch
        from torch.cuda.amp import custom_fwd
        @custom_fwd
        def forward(ctx, x):
            return x
        """,
        """
        import torch
        @torch.amp.custom_fwd(device_type="cuda")
        def forward(ctx, x):
            return x
        """,
    ),
    "autocast as a decorator": (
        """
        import torch
        class Net(torch.nn.Module):
            @torch.cuda.amp.autocast()
            def forward(self, x):
                return x
        """,
        """
        import torch
        class Net(torch.nn.Module):
            @torch.amp.autocast("cuda")
            def forward(self, x):
                return x
        """,
    ),
    "references become callables with the device bound": (
        '''
        """Helpers."""
        import torch

        amp_autocast = torch.cuda.amp.autocast


        def scaler_factory():
            return torch.cuda.amp.GradScaler
        ''',
        '''
        """Helpers."""
        import functools
        import torch

        amp_autocast = functools.partial(torch.amp.autocast, device_type="cuda")


        def scaler_factory():
            return functools.partial(torch.amp.GradScaler, "cuda")
        ''',
    ),
    "type positions get the class": (
        """
        from typing import Optional
        import torch
        def step(scaler: Optional[torch.cuda.amp.GradScaler] = None) -> None:
            assert isinstance(scaler, (torch.cuda.amp.GradScaler, type(None)))
        """,
        """
        from typing import Optional
        import torch
        def step(scaler: Optional[torch.amp.GradScaler] = None) -> None:
            assert isinstance(scaler, (torch.amp.GradScaler, type(None)))
        """,
    ),
    "nested uses compose": (
        """
        import torch
        ctx = torch.cuda.amp.autocast(enabled=isinstance(s, torch.cuda.amp.GradScaler))
        """,
        """
        import torch
        ctx = torch.amp.autocast("cuda", enabled=isinstance(s, torch.amp.GradScaler))
        """,
    ),
    "a comment above a removed import stays": (
        """
        import torch
        # mixed precision
        from torch.cuda.amp import autocast
        x = 1
        with autocast():
            pass
        """,
        """
        import torch
        # mixed precision
        x = 1
        with torch.amp.autocast("cuda"):
            pass
        """,
    ),
    "parenthesised import keeps the names still used": (
        """
        import torch
        from torch.cuda.amp import (
            autocast,
            amp_definitely_not_available,
        )
        if not amp_definitely_not_available():
            ctx = autocast()
        """,
        """
        import torch
        from torch.cuda.amp import (
            amp_definitely_not_available,
        )
        if not amp_definitely_not_available():
            ctx = torch.amp.autocast("cuda")
        """,
    ),
}


@pytest.mark.parametrize("name", list(MIGRATIONS))
def test_migration(name: str) -> None:
    before, after = (dedent(text) for text in MIGRATIONS[name])
    assert fixed(before) == after
    assert fixed(after) == after  # a second run changes nothing
    assert not {"AMP201", "AMP202"} & set(codes_of(after))


UNTOUCHED = {
    "try torch.amp, fall back to torch.cuda.amp": """
        try:
            from torch.amp import GradScaler
        except ImportError:
            from torch.cuda.amp import GradScaler
        scaler = GradScaler()
        """,
    "attribute fallback in an except": """
        import torch
        try:
            scaler = torch.amp.GradScaler("cuda")
        except (AttributeError, TypeError):
            scaler = torch.cuda.amp.GradScaler()
        """,
    "fallback through an alias of torch": """
        import torch as th
        try:
            ctx = th.autocast("cuda")
        except AttributeError:
            ctx = th.cuda.amp.autocast()
        """,
    "version check": """
        import torch
        if TORCH_VERSION >= (2, 4):
            ctx = torch.amp.autocast("cuda")
        else:
            ctx = torch.cuda.amp.autocast()
        """,
    "hasattr check in a conditional expression": """
        import torch
        ctx = torch.amp.autocast("cuda") if hasattr(torch, "amp") else torch.cuda.amp.autocast()
        """,
    "not torch": """
        import apex
        from mylib.cuda.amp import autocast
        with autocast():
            pass
        x.cuda.amp.autocast()
        """,
    "an attribute named like the API": """
        from torch.cuda.amp import autocast
        with self.autocast():
            pass
        autocast_enabled = config.autocast
        """,
    "identity tests against the classes (torch._dynamo does this)": """
        import torch
        if func not in [torch.amp.autocast_mode.autocast, torch.cuda.amp.autocast]:
            raise AssertionError(func)
        device = "cuda" if func is torch.cuda.amp.autocast else "cpu"
        DEVICE_OF = {torch.cuda.amp.autocast: "cuda", torch.cpu.amp.autocast: "cpu"}
        """,
    "not deprecated": """
        import torch
        ok = torch.cuda.amp.common.amp_definitely_not_available()
        with torch.autocast("cuda"):
            pass
        """,
}


@pytest.mark.parametrize("name", list(UNTOUCHED))
def test_left_alone(name: str) -> None:
    source = dedent(UNTOUCHED[name])
    assert codes_of(source) == []
    assert fixed(source) == source


def test_positional_star_args_are_reported_but_not_fixed() -> None:
    source = "import torch\nctx = torch.cuda.amp.autocast(*flags)\n"
    assert codes_of(source) == ["AMP201"]
    assert fixed(source) == source


@pytest.mark.parametrize(
    ("target", "fixed_members"),
    [
        ("1.9", set()),
        ("2.2", {"autocast"}),
        ("2.3", {"autocast", "GradScaler"}),
        ("2.4", {"autocast", "GradScaler", "custom_fwd"}),
    ],
)
def test_target_torch_limits_fixes(target: str, fixed_members: set[str]) -> None:
    from amplint.config import parse_torch_version

    source = dedent("""
        import torch
        a = torch.cuda.amp.autocast()
        b = torch.cuda.amp.GradScaler()
        c = torch.cuda.amp.custom_fwd(f)
        """)
    settings = Settings(target_torch=parse_torch_version(target, "test"))
    result = fixed(source, settings)
    for member in ("autocast", "GradScaler", "custom_fwd"):
        assert (f"torch.amp.{member}(" in result) == (member in fixed_members), member
    # what target-torch has no replacement for is its own spelling: not reported
    assert codes_of(source, settings) == ["AMP201"] * len(fixed_members)
    assert codes_of(result, settings) == []


def test_noqa_keeps_the_import_its_line_still_needs() -> None:
    source = dedent("""
        import torch
        from torch.cuda.amp import GradScaler, autocast
        scaler = GradScaler()  # noqa: AMP201
        with autocast():
            pass
        """)
    assert fixed(source) == dedent("""
        import torch
        from torch.cuda.amp import GradScaler
        scaler = GradScaler()  # noqa: AMP201
        with torch.amp.autocast("cuda"):
            pass
        """)


def test_cpu_and_cuda_have_their_own_codes() -> None:
    source = "import torch\na = torch.cpu.amp.autocast()\nb = torch.cuda.amp.autocast()\n"
    assert codes_of(source) == ["AMP202", "AMP201"]
