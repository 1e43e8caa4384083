"""Runs one training script in this process and measures it: the child side of
`amplint verify`.

    python -m amplint.verify.harness --source S --script PATH --steps N --out R.json -- ARGS

`--source` holds the code to run (the original script, or amplint's rewrite of
it); it runs as ``__main__`` with ``__file__`` and ``sys.argv[0]`` set to
`--script`, from the script's directory, so its relative imports and paths work.
`--rewritten` maps project modules to their rewrite: an import finder serves
that text in place of the file (never cached as bytecode), so a trainer
module runs rewritten under the driver that uses it.

What is measured goes through torch's own hooks rather than through the code:
a global optimizer step hook counts iterations, one per step of the first
optimizer to step (a GAN's critic and generator steps are one iteration);
`GradScaler.step` is wrapped to count the steps the scaler skipped (inf/NaN
gradients, no optimizer step);
`Tensor.backward` and `GradScaler.scale` record each step's loss (unscaled);
global optimizer step pre- and post-hooks record what each optimizer step
received, per parameter group (the gradients' norm and largest magnitude, as
the optimizer reads them: after a GradScaler's unscaling) and the norm of the
update it applied, so the parent can compare what two runs trained on, not
only their losses; entering `torch.autocast` records its device, dtype and
whether it is enabled, so the parent can tell a rewrite whose AMP never
switched on.  After `--steps`
steps the harness stops the script by raising an exception the script's own
``except Exception`` cannot catch, and writes the JSON.
"""

from __future__ import annotations

import argparse
import builtins
import importlib.abc
import importlib.machinery
import inspect
import json
import linecache
import math
import os
import random
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path

# Exit status of a harness that could not start the script (bad arguments,
# unreadable source): the parent reports it as an internal error.
HARNESS_ERROR = 70
NEEDS_TORCH = (
    "amplint verify needs torch in this Python: pip install 'amplint[verify]' "
    "(on a machine without a GPU, the CPU build is a tenth of the download: "
    "pip install torch --index-url https://download.pytorch.org/whl/cpu first)"
)


class StopTraining(BaseException):
    """Raised from the step hook once enough steps ran; not an Exception, so a
    script's ``except Exception`` lets it through."""


class Recorder:
    def __init__(self, torch, steps: int, progress_path: str | None, warmup: int = 0) -> None:
        self.torch = torch
        self.cuda = torch.cuda.is_available()
        self.limit = steps
        # After this many iterations the peak memory is reset: the training
        # window's peak, not the first iterations' (cuDNN autotuning workspaces).
        self.warmup = warmup
        self.compiled = False  # the script called torch.compile
        self.loader_batch_sizes: list = []  # each DataLoader's batch_size, as made
        self.progress_path = progress_path
        self.steps = 0
        self.skipped = 0
        self.skipped_at: list[int] = []  # the steps (from 0) the scaler skipped
        self.losses: list = []  # one per step, as tensors until the end (no sync per step)
        self.step_times: list[float] = []
        self._pending: list = []  # losses backpropagated since the last optimizer step
        self._lead: int | None = None  # the number of the first optimizer to step
        self._iteration_losses: dict[int, list] = {}  # optimizer number -> its losses
        # Per iteration: each optimizer's mean loss, by its number.
        self.losses_by_optimizer: list[dict[int, object]] = []
        # Per iteration: the loss scale it ran with (a tensor until the end),
        # None without an enabled GradScaler.
        self.loss_scales: list = []
        self._scaled: dict[int, object] = {}  # id(scaled loss) -> the unscaled loss
        self._last = None  # the time of the last step event (on the CPU)
        self._events: list = []  # a CUDA event at each step's end (on CUDA)
        # Every GradScaler made, kept alive: the usual one is a local of a
        # function whose frame is gone when the result is written.
        self.scalers: list = []
        self.scalers_made: list[dict] = []  # each one's device and whether it is enabled
        # (device, dtype, enabled) -> autocast regions entered so
        self.autocast: dict[tuple[str, str, bool], int] = {}
        # Per step: what the optimizer received (see UpdateRecord), None for a
        # step the scaler skipped; tensors until the end.
        self.updates: list[list[UpdateRecord] | None] = []
        self._received: list[UpdateRecord] = []  # optimizer steps since the last step event
        self._before: dict[int, tuple[UpdateRecord, list]] = {}  # id(optimizer) -> parameters
        self._optimizers: dict[int, int] = {}  # id(optimizer) -> its number, in order made
        # Per optimizer number: how many times it was stepped (updated or
        # skipped), and which of those steps (from 0) were skipped.  With a
        # skip plan (--skip-steps), the steps to skip in a run without a
        # scaler: the FP32 run that skips what the AMP run's GradScaler did.
        self._calls: dict[int, int] = {}
        self.skipped_calls: dict[int, list[int]] = {}
        self.skip_plan: dict[int, set[int]] = {}
        self.forced_skips: set[int] = set()  # id(optimizer) of a step the plan just skipped
        # The device types of the parameters the optimizers stepped: an
        # autocast for another device casts none of their operations.
        self.parameter_devices: set[str] = set()
        # After a step its scaler skipped, the next forward pass is watched
        # (a global module forward hook that reads each output, a
        # synchronisation per module on CUDA, so only then) for the first
        # module whose output holds inf or NaN: where the overflow is.
        self._watch = None  # the hook's handle while watching
        self.first_non_finite: dict | None = None

    # -- events ------------------------------------------------------------------
    def backward(self, tensor) -> None:
        if tensor.numel() != 1:
            return  # a vector-Jacobian product, not a loss
        loss = self._scaled.pop(id(tensor), tensor)
        self._pending.append(loss.detach().float().reshape(()))

    def scaled(self, loss, scaled) -> None:
        if hasattr(loss, "numel") and loss.numel() == 1:
            self._scaled[id(scaled)] = loss

    def autocast_entered(self, region) -> None:
        dtype = str(getattr(region, "fast_dtype", None)).removeprefix("torch.")
        key = (
            str(getattr(region, "device", "?")),
            dtype,
            bool(getattr(region, "_enabled", False)),
            bool(getattr(region, _ASKED, True)),
        )
        self.autocast[key] = self.autocast.get(key, 0) + 1

    def optimizer_made(self, optimizer) -> int:
        """The optimizer's number, in the order the run made them: the same in
        two runs of one script, whichever steps their scalers skipped."""
        return self._optimizers.setdefault(id(optimizer), len(self._optimizers))

    def forced_skip(self, optimizer) -> bool:
        """Whether the step `optimizer` just took was one the plan skipped (once)."""
        if id(optimizer) in self.forced_skips:
            self.forced_skips.discard(id(optimizer))
            return True
        return False

    def planned_skip(self, optimizer) -> bool:
        """Whether the skip plan skips this step of `optimizer`."""
        number = self.optimizer_made(optimizer)
        return self._calls.get(number, 0) in self.skip_plan.get(number, ())

    def optimizer_stepping(self, optimizer) -> None:
        """Before `optimizer` updates its parameters: the gradients it sees,
        and a copy of the parameters to measure the update against."""
        torch = self.torch
        record = UpdateRecord(type(optimizer).__name__, self.optimizer_made(optimizer))
        copies = []
        for group in optimizer.param_groups:
            with_grad = [p for p in group["params"] if p.grad is not None]
            self.parameter_devices.update(p.device.type for p in with_grad)
            grads = [_dense(p.grad).detach().float() for p in with_grad]
            if grads:
                norms = torch.stack([torch.linalg.vector_norm(g) for g in grads])
                record.grad_norms.append(torch.linalg.vector_norm(norms))
                record.grad_maxes.append(torch.stack([g.abs().max() for g in grads]).max())
            else:
                record.grad_norms.append(None)
                record.grad_maxes.append(None)
            copies.append([(p, p.detach().clone()) for p in with_grad])
        self._before[id(optimizer)] = (record, copies)

    def optimizer_stepped(self, optimizer) -> None:
        torch = self.torch
        record, copies = self._before.pop(id(optimizer), (None, None))
        if record is None:
            return
        for group in copies:
            deltas = [torch.linalg.vector_norm((p.detach() - old).float()) for p, old in group]
            record.update_norms.append(
                torch.linalg.vector_norm(torch.stack(deltas)) if deltas else None
            )
        self._received.append(record)

    def _watch_forward(self, on: bool) -> None:
        if on and self._watch is None:
            self._watch = self.torch.nn.modules.module.register_module_forward_hook(
                self.forward_output
            )
        elif not on and self._watch is not None:
            self._watch.remove()
            self._watch = None

    def forward_output(self, module, inputs, output) -> None:
        """A watched module's forward pass ended: the first module whose output
        holds inf or NaN is recorded, with whether its inputs did already
        (then the overflow came from code outside modules)."""
        if self.first_non_finite is not None:
            return
        torch = self.torch
        if not any(not bool(torch.isfinite(t).all()) for t in _float_tensors(output)):
            return
        self.first_non_finite = {
            "step": self.steps,
            "module": _described(module),
            "inputs_finite": all(bool(torch.isfinite(t).all()) for t in _float_tensors(inputs)),
        }
        self._watch_forward(False)

    def _scale(self):
        """The scale of the last enabled GradScaler made, copied on its device
        (no synchronisation), or None."""
        for scaler in reversed(self.scalers):
            scale = getattr(scaler, "_scale", None) if scaler.is_enabled() else None
            if scale is not None:
                return scale.detach().clone()
        return None

    def step(self, optimizer, skipped: bool) -> None:
        """`optimizer` stepped, or its GradScaler skipped the step.  The losses
        backpropagated since the last step are its own.  An iteration ends at
        each step of the lead optimizer, the first to step in the run: a GAN's
        critic and generator steps are one iteration, not two."""
        number = self.optimizer_made(optimizer)
        call = self._calls.get(number, 0)
        self._calls[number] = call + 1
        if skipped:
            self.skipped_calls.setdefault(number, []).append(call)
        if self._pending:
            self._iteration_losses.setdefault(number, []).extend(self._pending)
            self._pending = []
        if self._lead is None:
            self._lead = number
        if number != self._lead:
            return
        self.steps += 1
        self.updates.append(None if skipped else self._received)
        self._received = []
        if skipped:
            self.skipped += 1
            self.skipped_at.append(self.steps - 1)
        # Watch the forward pass after a skipped step; one that was finite
        # ends the watch (the skip was the scale search's, in the backward).
        self._watch_forward(skipped and self.first_non_finite is None)
        means = {
            made: self.torch.stack(losses).mean()
            for made, losses in sorted(self._iteration_losses.items())
        }
        self._iteration_losses = {}
        self.losses_by_optimizer.append(means)
        self.loss_scales.append(self._scale())
        if self._lead in means:
            self.losses.append(means[self._lead])
        elif self.losses:
            self.losses.append(self.losses[-1])
        else:
            self.losses.append(self.torch.tensor(float("nan")))
        self._scaled.clear()
        # step_times[i] is step i + 1's time, from the end of step i: the
        # script's imports and set-up before its first step are no step.  On
        # CUDA an event on the stream marks each step's end, read once at the
        # end: a synchronisation per step would stall the CPU's queueing of
        # the next step's kernels and time a slower program than the script.
        if self.cuda:
            event = self.torch.cuda.Event(enable_timing=True)
            event.record()
            self._events.append(event)
        else:
            now = time.perf_counter()
            if self._last is not None:
                self.step_times.append(now - self._last)
            self._last = now
        if self.cuda and self.steps == self.warmup:
            self.torch.cuda.reset_peak_memory_stats()
        if self.progress_path is not None:
            try:
                Path(self.progress_path).write_text(str(self.steps))
            except OSError:
                pass
        if self.steps >= self.limit:
            raise StopTraining

    # -- the result --------------------------------------------------------------
    def result(self, finished: str) -> dict:
        torch = self.torch
        self._watch_forward(False)  # the hook is global: never left behind
        if self._events:
            torch.cuda.synchronize()
            self.step_times = [
                start.elapsed_time(end) / 1000.0  # milliseconds
                for start, end in zip(self._events, self._events[1:])
            ]
        losses = [float(loss) for loss in self.losses]
        scales = [scaler.get_scale() for scaler in self.scalers if scaler.is_enabled()]
        return {
            "finished": finished,  # "steps": stopped after --steps; "script": it ended first
            "steps": self.steps,
            "skipped_steps": self.skipped,
            "skipped_at": self.skipped_at,
            "skipped_calls": {str(number): calls for number, calls in self.skipped_calls.items()},
            "losses": [loss if math.isfinite(loss) else str(loss) for loss in losses],
            "loss_scales": [None if scale is None else float(scale) for scale in self.loss_scales],
            "losses_by_optimizer": [
                {str(number): _json_float(float(loss)) for number, loss in means.items()}
                for means in self.losses_by_optimizer
            ],
            "step_times_s": self.step_times,
            "peak_mem_bytes": torch.cuda.max_memory_allocated() if self.cuda else None,
            # What the caching allocator held: what the process took from the GPU.
            "peak_reserved_bytes": torch.cuda.max_memory_reserved() if self.cuda else None,
            "loss_scale": scales[-1] if scales else None,
            "device": torch.cuda.get_device_name() if self.cuda else "cpu",
            "cuda_available": self.cuda,
            "torch": torch.__version__,
            "settings": precision_settings(torch),
            "environment": environment(torch, self.cuda, self.compiled),
            "loader_batch_sizes": self.loader_batch_sizes,
            # `asked`: what the script's `enabled=` said; torch turns off by
            # itself a CUDA autocast or GradScaler where there is no CUDA.
            "autocast": [
                {
                    "device": device,
                    "dtype": dtype,
                    "enabled": enabled,
                    "asked": asked,
                    "regions": count,
                }
                for (device, dtype, enabled, asked), count in sorted(self.autocast.items())
            ],
            "scalers": self.scalers_made,
            "parameter_devices": sorted(self.parameter_devices),
            "first_non_finite": self.first_non_finite,
            "updates": [
                None if records is None else [record.as_json() for record in records]
                for records in self.updates
            ],
        }


def _float_tensors(value, depth: int = 0) -> list:
    """The floating-point tensors in a module's inputs or output (a tensor, or
    tuples, lists and dicts of them, a few levels deep)."""
    if hasattr(value, "is_floating_point"):
        return [value] if value.is_floating_point() else []
    if depth > 3:
        return []
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _float_tensors(item, depth + 1)]
    return []


def _described(module) -> str:
    """A module as the verdict names it: its class and its settings."""
    try:
        extra = module.extra_repr()
    except Exception:  # noqa: BLE001 - a user's module: its repr is a courtesy
        extra = ""
    shown = f"{type(module).__name__}({extra})"
    return shown if len(shown) <= 100 else shown[:97] + "...)"


def _json_float(value: float) -> float | str:
    return value if math.isfinite(value) else str(value)


class UpdateRecord:
    """What one optimizer step received, per parameter group: the norm and the
    largest magnitude of the gradients it read, and the norm of the change it
    made to the parameters.  None for a group with no gradient."""

    def __init__(self, optimizer: str, index: int) -> None:
        self.optimizer = optimizer
        self.index = index  # which of the run's optimizers, numbered as made
        self.grad_norms: list = []
        self.grad_maxes: list = []
        self.update_norms: list = []

    def as_json(self) -> dict:
        return {
            "optimizer": self.optimizer,
            "index": self.index,
            "grad_norm": [_number(value) for value in self.grad_norms],
            "grad_max": [_number(value) for value in self.grad_maxes],
            "update_norm": [_number(value) for value in self.update_norms],
        }


def _number(value) -> float | str | None:
    """A recorded tensor as JSON: a float, "nan" / "inf" as losses are, or None."""
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else str(number)


def _dense(grad):
    """A sparse gradient's values (an embedding's `sparse=True`), or the gradient."""
    return grad.coalesce().values() if grad.is_sparse else grad


def allow_tf32(torch) -> None:
    """The one-line switch a user would try before AMP.  Set through the
    legacy settings: a script that reads them later would raise had the
    new `fp32_precision` ones been set, while one that reads or sets the new
    ones works after these."""
    torch.set_float32_matmul_precision("high")
    torch.backends.cudnn.allow_tf32 = True


def environment(torch, cuda: bool, compiled: bool) -> dict:
    """What the figures depend on besides the code: the GPU and its software,
    whether it runs bfloat16 natively (compute capability 8.0 on; older GPUs
    emulate it, slowly), cuDNN autotuning, and whether the script compiled."""
    found = {
        "torch": torch.__version__,
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "compiled": compiled,
    }
    if not cuda:
        return found
    major, minor = torch.cuda.get_device_capability()
    return {
        **found,
        "gpu": torch.cuda.get_device_name(),
        "capability": f"{major}.{minor}",
        "bf16_native": major >= 8,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "driver": driver_version(),
    }


def driver_version() -> str | None:
    """The NVIDIA driver's version as nvidia-smi prints it ("580.159.04"), or
    None: torch has no public call for it (torch 2.11 dropped the private one
    this read before, which is how the first GPU table came out without it)."""
    nvidia_smi = shutil.which("nvidia-smi")
    if nvidia_smi is None:
        return None
    try:
        answer = subprocess.run(
            [nvidia_smi, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    versions = answer.stdout.split()
    return versions[0] if answer.returncode == 0 and versions else None


def precision_settings(torch) -> dict:
    """The TF32 settings in force.  Where torch has the `fp32_precision`
    settings (2.9 on), they are what is read: once a script set them, reading
    the legacy `allow_tf32` flags raises ("a mix of the legacy and new APIs").
    A "none" precision inherits `torch.backends.fp32_precision`, and "none"
    there means torch's defaults: IEEE matmuls, TF32 cuDNN convolutions."""
    backends = torch.backends
    settings = {
        "cudnn_benchmark": backends.cudnn.benchmark,
        "cudnn_deterministic": backends.cudnn.deterministic,
    }
    matmul = getattr(backends.cuda.matmul, "fp32_precision", None)
    if matmul is None:
        return {
            "matmul_allow_tf32": backends.cuda.matmul.allow_tf32,
            "cudnn_allow_tf32": backends.cudnn.allow_tf32,
            "matmul_precision": torch.get_float32_matmul_precision(),
            **settings,
        }
    inherited = getattr(backends, "fp32_precision", "none")
    conv = backends.cudnn.conv.fp32_precision
    matmul, conv = (inherited if own == "none" else own for own in (matmul, conv))
    return {
        "matmul_allow_tf32": matmul == "tf32",
        "cudnn_allow_tf32": conv in ("tf32", "none"),
        "matmul_precision": matmul,
        **settings,
    }


def _instrument(torch, recorder: Recorder) -> None:
    from torch.optim.optimizer import (
        register_optimizer_step_post_hook,
        register_optimizer_step_pre_hook,
    )

    in_scaler_step = [0]
    # id(optimizer) -> its gradients, withheld from a step the skip plan skips:
    # without gradients every torch.optim optimizer leaves its parameters and
    # its state alone, as when a GradScaler does not call step().
    withheld: dict[int, list] = {}

    def before_optimizer_step(optimizer, args, kwargs) -> None:
        if recorder.planned_skip(optimizer):
            kept = [
                (parameter, parameter.grad)
                for group in optimizer.param_groups
                for parameter in group["params"]
                if parameter.grad is not None
            ]
            for parameter, _ in kept:
                parameter.grad = None
            withheld[id(optimizer)] = kept
            return
        recorder.optimizer_stepping(optimizer)

    def after_optimizer_step(optimizer, args, kwargs) -> None:
        kept = withheld.pop(id(optimizer), None)
        if kept is not None:
            for parameter, grad in kept:
                parameter.grad = grad
            recorder.forced_skips.add(id(optimizer))
        else:
            recorder.optimizer_stepped(optimizer)
        if not in_scaler_step[0]:
            recorder.step(optimizer, skipped=recorder.forced_skip(optimizer))

    register_optimizer_step_pre_hook(before_optimizer_step)
    register_optimizer_step_post_hook(after_optimizer_step)

    # Every torch.optim optimizer's __init__ ends in the base class's.
    original_optimizer_init = torch.optim.Optimizer.__init__

    def optimizer_init(self, *args, **kwargs):
        original_optimizer_init(self, *args, **kwargs)
        recorder.optimizer_made(self)

    torch.optim.Optimizer.__init__ = optimizer_init

    original_backward = torch.Tensor.backward

    def backward(self, *args, **kwargs):
        recorder.backward(self)
        return original_backward(self, *args, **kwargs)

    torch.Tensor.backward = backward

    scaler_classes = [torch.amp.GradScaler]
    legacy = getattr(getattr(torch.cuda, "amp", None), "GradScaler", None)
    if isinstance(legacy, type) and legacy not in scaler_classes:
        scaler_classes.append(legacy)  # a subclass of torch.amp.GradScaler since torch 2.3
    for cls in scaler_classes:
        _wrap_scaler(cls, recorder, in_scaler_step)

    loader = torch.utils.data.DataLoader
    original_loader_init = loader.__init__

    def loader_init(self, *args, **kwargs):
        original_loader_init(self, *args, **kwargs)
        size = getattr(self, "batch_size", None)
        recorder.loader_batch_sizes.append(size if isinstance(size, int) else None)

    loader.__init__ = loader_init

    original_compile = torch.compile

    def compile(*args, **kwargs):
        recorder.compiled = True
        return original_compile(*args, **kwargs)

    torch.compile = compile

    # torch.cuda.amp.autocast and torch.cpu.amp.autocast enter through it.
    autocast = torch.amp.autocast_mode.autocast
    original_enter = autocast.__enter__
    original_autocast_init = autocast.__init__

    def autocast_init(self, *args, **kwargs):
        setattr(self, _ASKED, _enabled_argument(original_autocast_init, self, args, kwargs))
        original_autocast_init(self, *args, **kwargs)

    autocast.__init__ = autocast_init

    def __enter__(self):
        entered = original_enter(self)
        recorder.autocast_entered(self)
        return entered

    autocast.__enter__ = __enter__


# The attribute an autocast region keeps its `enabled=` argument in.
_ASKED = "_amplint_enabled_asked"


def _enabled_argument(init, instance, args, kwargs) -> bool:
    """The `enabled=` a constructor was given (by name or position), True by
    default: what the script asked for, before torch turned off a CUDA one
    on a machine without CUDA."""
    try:
        bound = inspect.signature(init).bind(instance, *args, **kwargs)
    except (TypeError, ValueError):
        return bool(kwargs.get("enabled", True))
    return bool(bound.arguments.get("enabled", True))


def _wrap_scaler(cls, recorder: Recorder, in_scaler_step: list[int]) -> None:
    """Record what `cls`'s own methods do.  Only the methods `cls` defines
    itself are wrapped: one it inherits from a class wrapped already would
    be wrapped twice, and each step counted twice (the old
    torch.cuda.amp.GradScaler inherits `scale` and `step`)."""
    own = cls.__dict__
    original_init = cls.__init__

    def __init__(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        if not any(made is self for made in recorder.scalers):  # a subclass's init runs ours
            recorder.scalers.append(self)
            device, enabled = getattr(self, "_device", "cuda"), self.is_enabled()
            asked = _enabled_argument(original_init, self, args, kwargs)
            recorder.scalers_made.append(
                {
                    "device": device,
                    "enabled": enabled,
                    "asked": asked,
                    "init_scale": _number(getattr(self, "_init_scale", None)),
                    "growth_interval": getattr(self, "_growth_interval", None),
                }
            )

    cls.__init__ = __init__
    if "scale" in own:
        cls.scale = _recording_scale(own["scale"], recorder)
    if "step" in own:
        cls.step = _recording_step(own["step"], recorder, in_scaler_step)


def _recording_scale(original_scale, recorder: Recorder):

    def scale(self, outputs):
        scaled = original_scale(self, outputs)
        recorder.scaled(outputs, scaled)
        return scaled

    return scale


def _recording_step(original_step, recorder: Recorder, in_scaler_step: list[int]):
    def step(self, optimizer, *args, **kwargs):
        # The scaler calls optimizer.step() only when the gradients are finite:
        # a step without that call is a skipped one.
        ran = []
        hook = optimizer.register_step_post_hook(lambda *_: ran.append(True))
        in_scaler_step[0] += 1
        try:
            result = original_step(self, optimizer, *args, **kwargs)
        finally:
            in_scaler_step[0] -= 1
            hook.remove()
        recorder.step(optimizer, skipped=not ran or recorder.forced_skip(optimizer))
        return result

    return step


class RewrittenModules(importlib.abc.MetaPathFinder):
    """Finds modules as the finders after it do, and serves amplint's rewrite
    of those whose file is in `rewritten` (real path -> text)."""

    def __init__(self, rewritten: dict[str, str]) -> None:
        self.rewritten = rewritten
        self.loaded: list[str] = []  # the rewritten modules imported, by real path

    def find_spec(self, fullname, path, target=None):
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if not spec.has_location or spec.origin is None:
            return None
        real = os.path.realpath(spec.origin)
        text = self.rewritten.get(real)
        if text is None:
            return None  # found again by the finder that found it here
        self.loaded.append(real)
        spec.loader = _RewrittenLoader(fullname, spec.origin, text)
        spec.cached = None
        return spec


class _RewrittenLoader(importlib.machinery.SourceFileLoader):
    """Loads a module from its rewritten text: compiled each time, never read
    from or written to __pycache__ (the user's next plain run would load it)."""

    def __init__(self, fullname: str, path: str, text: str) -> None:
        super().__init__(fullname, path)
        self.text = text

    def get_source(self, fullname):
        return self.text

    def get_code(self, fullname):
        _show_in_tracebacks(self.path, self.text)
        return compile(self.text, self.path, "exec", dont_inherit=True)


def _show_in_tracebacks(path: str, text: str) -> None:
    """Tracebacks quote `text`, the code that ran, at `path` (no mtime: kept)."""
    linecache.cache[path] = (len(text), None, text.splitlines(keepends=True), path)


def _seed(torch, seed: int) -> None:
    random.seed(seed)
    try:
        import numpy
    except ImportError:
        pass
    else:
        numpy.random.seed(seed)
    torch.manual_seed(seed)  # seeds CUDA too


def _print_script_traceback(error: BaseException) -> None:
    """The script's traceback as the script alone would show it: no frame of
    the harness, neither its exec nor the hooks it put between the script and
    torch (`loss.backward()` goes through one), in any exception of the chain."""
    shown = traceback.TracebackException.from_exception(error)
    seen: set[int] = set()
    parts = [shown]
    while parts:
        part = parts.pop()
        if id(part) in seen:
            continue
        seen.add(id(part))
        part.stack = traceback.StackSummary.from_list(
            [frame for frame in part.stack if not _in_harness(frame.filename)]
        )
        parts += [p for p in (part.__cause__, part.__context__) if p is not None]
    print("".join(shown.format()), end="", file=sys.stderr)


_HARNESS_FILE = Path(__file__).resolve()


def _in_harness(filename: str) -> bool:
    try:
        return Path(filename).resolve() == _HARNESS_FILE
    except (OSError, ValueError):
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m amplint.verify.harness")
    parser.add_argument("--source", required=True, help="file holding the code to run")
    parser.add_argument("--script", required=True, help="the script it stands for")
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--out", required=True, help="where to write; {rank} is the rank")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup", type=int, default=0, help="iterations before the window")
    parser.add_argument("--progress")
    parser.add_argument("--rewritten", help="JSON: module path -> file holding its rewrite")
    parser.add_argument("--tf32", action="store_true", help="TF32 matmuls and convolutions")
    parser.add_argument(
        "--skip-steps",
        help="JSON: optimizer number -> the steps (from 0) of it to skip, as a GradScaler would",
    )
    parser.add_argument("script_args", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)
    script_args = options.script_args
    if script_args[:1] == ["--"]:
        script_args = script_args[1:]
    try:
        source = Path(options.source).read_text(encoding="utf-8")
        code = compile(source, options.script, "exec", dont_inherit=True)
        rewritten = {}
        if options.rewritten:
            for module, text in json.loads(Path(options.rewritten).read_text("utf-8")).items():
                rewritten[module] = Path(text).read_text(encoding="utf-8")
    except (OSError, SyntaxError, ValueError) as error:
        print(f"amplint verify harness: cannot load {options.source}: {error}", file=sys.stderr)
        return HARNESS_ERROR
    try:
        import torch
    except ImportError:
        print(NEEDS_TORCH, file=sys.stderr)
        return HARNESS_ERROR

    # Under torchrun each rank runs this harness; rank 0 tells the progress.
    rank = int(os.environ.get("RANK", "0"))
    progress = options.progress if rank == 0 else None
    recorder = Recorder(torch, options.steps, progress, options.warmup)
    if options.skip_steps:
        plan = json.loads(options.skip_steps)
        recorder.skip_plan = {int(number): set(calls) for number, calls in plan.items()}
    _seed(torch, options.seed)
    if options.tf32:
        allow_tf32(torch)
    _instrument(torch, recorder)
    script = Path(options.script).resolve()
    _show_in_tracebacks(options.script, source)
    modules = RewrittenModules(rewritten)
    if rewritten:
        sys.meta_path.insert(0, modules)
    sys.argv = [str(script), *script_args]
    sys.path.insert(0, str(script.parent))
    os.chdir(script.parent)
    namespace = {"__name__": "__main__", "__file__": str(script), "__builtins__": builtins}
    finished = "script"
    status = 0
    try:
        exec(code, namespace)
    except StopTraining:
        finished = "steps"
    except SystemExit as exit_:
        status = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        if status != 0:
            _print_script_traceback(exit_)
    except BaseException as error:
        _print_script_traceback(error)
        status = 1
    result = {**recorder.result(finished), "rank": rank, "rewritten_loaded": modules.loaded}
    with open(options.out.replace("{rank}", str(rank)), "w", encoding="utf-8") as handle:
        json.dump({**result, "exit_status": status}, handle)
    return status


if __name__ == "__main__":
    sys.exit(main())
