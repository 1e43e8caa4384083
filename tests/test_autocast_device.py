"""AMP116: what counts as a torch.device or an indexed device string."""

from __future__ import annotations

import pytest

from tests.helpers import codes_of, dedent, fixed


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ('torch.autocast(torch.device("cuda:1"))', 'torch.autocast("cuda")'),
        ("torch.autocast(torch.device(kind))", "torch.autocast(torch.device(kind).type)"),
        ("torch.amp.autocast(device_type='xpu:0')", "torch.amp.autocast(device_type='xpu')"),
        (
            "torch.autocast(torch.device('cpu') if cpu else torch.device('cuda'))",
            "torch.autocast((torch.device('cpu') if cpu else torch.device('cuda')).type)",
        ),
    ],
)
def test_inline_devices(before: str, after: str) -> None:
    assert fixed(f"import torch\n{before}\n") == f"import torch\n{after}\n"


def test_a_name_bound_only_to_devices() -> None:
    source = dedent("""
        from torch import autocast, device as Device

        def run(model, x, gpu):
            dev = Device("cuda")
            if not gpu:
                dev = Device("cpu")
            with autocast(dev):
                return model(x)
        """)
    assert fixed(source) == source.replace("autocast(dev)", "autocast(dev.type)")


@pytest.mark.parametrize(
    "source",
    [
        # a parameter, an attribute, a string from elsewhere: not provably a device
        "def f(device):\n    with torch.autocast(device):\n        pass\n",
        "with torch.autocast(self.device):\n    pass\n",
        "with torch.autocast(args.device):\n    pass\n",
        # one binding is not a torch.device
        'dev = torch.device("cuda")\nif cpu:\n    dev = "cpu"\nwith torch.autocast(dev):\n    pass\n',
        # bound by an import or a loop
        "from config import dev\nwith torch.autocast(dev):\n    pass\n",
        'for dev in ("cpu", "cuda"):\n    with torch.autocast(dev):\n        pass\n',
        # plain types, and f-strings amplint does not evaluate
        'with torch.autocast("cuda"):\n    pass\n',
        'with torch.autocast(f"{kind}:0"):\n    pass\n',
        # not torch's autocast
        'from mylib import autocast\nwith autocast("cuda:0"):\n    pass\n',
    ],
)
def test_silent(source: str) -> None:
    assert "AMP116" not in codes_of("import torch\n" + source)
