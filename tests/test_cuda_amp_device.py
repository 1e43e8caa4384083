"""AMP122: CUDA's autocast or GradScaler in a script that never trains on CUDA,
where both turn themselves off (issue 42's torch 2.9-2.13 bullet: a bare
`GradScaler()` on a script that runs on the MPS silently disables itself)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import codes_of, dedent, fixed

MPS_OR_CPU = 'torch.device("mps" if torch.backends.mps.is_available() else "cpu")'

SCRIPT = """
    import torch

    device = {device}
    model = torch.nn.Linear(4, 2).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = {scaler}
    for _ in range(3):
        x, y = torch.randn(8, 4).to(device), torch.randn(8, 2).to(device)
        with {autocast}:
            loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    print("trained", scaler.is_enabled())
    """


def _script(
    device: str = MPS_OR_CPU,
    scaler: str = "torch.amp.GradScaler()",
    autocast: str = 'torch.autocast("cuda", dtype=torch.float16)',
) -> str:
    return dedent(SCRIPT.format(device=device, scaler=scaler, autocast=autocast))


def test_cuda_amp_on_an_mps_script_gets_the_scripts_device() -> None:
    before = _script()
    assert codes_of(before) == ["AMP122", "AMP122"]
    assert fixed(before) == before  # unsafe: mixed precision starts running on the MPS
    after = fixed(before, unsafe=True)
    assert 'scaler = torch.amp.GradScaler(device.type, enabled=device.type != "cpu")' in after
    assert (
        'with torch.autocast(device.type, dtype=torch.float16, enabled=device.type != "cpu"):'
        in after
    )
    assert codes_of(after) == [] and fixed(after, unsafe=True) == after
    # It runs, here on the CPU fallback, where both stay off as CUDA's did.
    run = subprocess.run([sys.executable, "-c", after], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "trained False" in run.stdout


@pytest.mark.parametrize(
    ("scaler", "autocast", "written"),
    [
        # The user's own `enabled=` is kept, joined with the CPU fallback's.
        (
            "torch.amp.GradScaler(enabled=use_amp)",
            'torch.autocast("cuda", enabled=use_amp or forced)',
            [
                'torch.amp.GradScaler(device.type, enabled=use_amp and device.type != "cpu")',
                "torch.autocast(device.type, dtype=torch.float16, "
                'enabled=(use_amp or forced) and device.type != "cpu")',
            ],
        ),
        # A dtype given by position stays the dtype; the other settings stay.
        (
            'torch.amp.GradScaler("cuda", init_scale=1024.0)',
            'torch.autocast("cuda", torch.bfloat16)',
            [
                "torch.amp.GradScaler(device.type, init_scale=1024.0, "
                'enabled=device.type != "cpu")',
                'torch.autocast(device.type, torch.bfloat16, enabled=device.type != "cpu")',
            ],
        ),
    ],
)
def test_what_the_user_wrote_is_kept(scaler: str, autocast: str, written: list[str]) -> None:
    after = fixed(_script(scaler=scaler, autocast=autocast), unsafe=True)
    for line in written:
        assert line in after
    assert codes_of(after) == []


@pytest.mark.parametrize(
    "device",
    [
        'torch.device("cuda" if torch.cuda.is_available() else "cpu")',  # CUDA may be there
        "torch.accelerator.current_accelerator()",  # CUDA on a CUDA machine
        "args.device",  # not shown
    ],
)
def test_a_script_that_may_train_on_cuda_is_left_alone(device: str) -> None:
    assert "AMP122" not in codes_of(_script(device=device))


def test_the_scripts_device_already_named_is_left_alone() -> None:
    good = _script(
        scaler='torch.amp.GradScaler(device.type, enabled=device.type != "cpu")',
        autocast="torch.autocast(device.type, dtype=torch.float16)",
    )
    assert codes_of(good) == []


def test_where_the_device_cannot_be_read_it_is_reported_not_fixed() -> None:
    text = dedent(f"""
        import torch


        def make_scaler():
            return torch.amp.GradScaler()


        def main(loader):
            device = {MPS_OR_CPU}
            model = torch.nn.Linear(4, 2).to(device)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            scaler = make_scaler()
            for x, y in loader:
                with torch.autocast("cuda", dtype=torch.float16):
                    loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
                optimizer.zero_grad()
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
        """)
    assert codes_of(text) == ["AMP122", "AMP122"]
    after = fixed(text, unsafe=True)
    assert "    return torch.amp.GradScaler()\n" in after  # `device` is main's alone
    assert "with torch.autocast(device.type, dtype=torch.float16," in after
    assert codes_of(after) == ["AMP122"]


def test_an_unused_cuda_scaler_is_completed_on_the_scripts_device_in_two_rounds() -> None:
    """AMP001 will not reuse the scaler while it is CUDA's (it would stay off);
    AMP122 gives it the script's device, and AMP001 then reuses it: one scaler."""
    fp32 = dedent(f"""
        import torch

        device = {MPS_OR_CPU}
        model = torch.nn.Linear(4, 2).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler()
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        """)
    assert sorted(codes_of(fp32)) == ["AMP001", "AMP122"]
    after = fixed(fp32, unsafe=True)
    assert after.count("GradScaler(") == 1
    assert "scaler.scale(loss).backward()" in after
    assert "torch.autocast(device.type," in after
    assert codes_of(after) == []


def test_the_device_given_by_keyword_is_read_as_by_position() -> None:
    """`GradScaler(device="cuda")` and `autocast(device_type="cuda")`: the
    scaler's `device=` names where it scales, not where the data lives, so it no
    longer hides the script's device (both were silent before)."""
    before = _script(
        scaler='torch.amp.GradScaler(device="cuda")',
        autocast='torch.autocast(device_type="cuda", dtype=torch.float16)',
    )
    assert codes_of(before) == ["AMP122", "AMP122"]
    after = fixed(before, unsafe=True)
    assert 'torch.amp.GradScaler(device=device.type, enabled=device.type != "cpu")' in after
    assert "torch.autocast(device_type=device.type, dtype=torch.float16, enabled=" in after
    assert codes_of(after) == []
    run = subprocess.run([sys.executable, "-c", after], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    # Data moved to a CUDA literal still says CUDA may be where it runs.
    cuda_too = before.replace(".to(device)\n", '.to("cuda")\n', 1)
    assert cuda_too != before and "AMP122" not in codes_of(cuda_too)
