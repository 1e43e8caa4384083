"""When each rule may fire, decided on a file's text alone: the first test every
file meets, kept apart from the rules so that a file none could fire on costs
neither libcst nor the rules' import (a pre-commit hook on a commit without a
training step).

`TRIGGERS[code](clues)` is False only when no finding of that rule is possible
in the file `clues` describe.  It must be cheap (substring tests on
``clues.text`` first) and never False for a file with a finding: the suite
checks that on every fixture and catalogue example.
"""

from __future__ import annotations

import re
from typing import Callable

from amplint.prefilter import SourceClues

SYNTAX_ERROR = "AMP900"  # reported by the engine itself, on a file that does not parse
UNUSED_NOQA = "AMP901"  # reported by the engine after the rules (amplint/unused_noqa.py)
SCALER_NAME = re.compile(r"scaler", re.I)
# An autocast call whose first argument is anything but a plain type literal
# ("cuda"): an expression, a keyword, an indexed literal.  Torch's own code
# names autocast everywhere, but passes it a device expression rarely.
_AUTOCAST_DEVICE_ARGUMENT = re.compile(r"""autocast\s*\(\s*(?:[^\s"')]|["'][a-z_]+:)""")
_AUTOCAST_ALIAS = re.compile(r"autocast\s+as\b")


def _fp32_step(clues: SourceClues) -> bool:
    # A backward, and an optimizer step (also one given a closure, which
    # holds the backward) or a hand-written parameter update.
    return (
        clues.may_call("backward")
        and (
            clues.may_call("step")
            or clues.mentions("-=")
            or any(clues.may_call(update) for update in ("add_", "sub_", "copy_"))
        )
        and clues.backward_meets_update
    )


def _backward_in_autocast(clues: SourceClues) -> bool:
    return clues.may_call("backward") and clues.may_use("autocast")


def _scaled_step(clues: SourceClues) -> bool:
    """A scaled backward and a step: where a step can bypass the scaler (AMP103)
    and where a clip can run before unscale_ (AMP102), the clip being perhaps
    the project's own (`clip_gradient(optimizer, c)`), spelled any way."""
    return clues.may_call("scale") and clues.may_call("backward") and clues.may_call("step")


def _missing_scaler_update(clues: SourceClues) -> bool:
    return clues.mentions("caler") and clues.may_call("step") and clues.may_call("backward")


def _unscaled_backward(clues: SourceClues) -> bool:
    return (
        clues.mentions("caler")  # before the case-blind search, which reads every byte
        and SCALER_NAME.search(clues.text) is not None
        and clues.may_call("backward")
        and clues.may_call("step")
    )


def _float16_without_scaler(clues: SourceClues) -> bool:
    return clues.mentions("autocast") and clues.may_call("backward") and clues.may_call("step")


def _scaler_per_micro_step(clues: SourceClues) -> bool:
    return (
        clues.mentions("caler")
        and clues.may_call("backward")
        and clues.may_call("step")
        and (clues.may_call("update") or clues.may_call("unscale_"))
    )


def _double_unscale(clues: SourceClues) -> bool:
    return clues.mentions("unscale_") and clues.may_call("unscale_")


def _scaler_not_checkpointed(clues: SourceClues) -> bool:
    return (
        clues.mentions("caler")
        and any(clues.may_call(m) for m in ("scale", "unscale_", "update", "step"))
        and (clues.may_call("state_dict") or clues.may_call("load_state_dict"))
    )


def _loss_outside_autocast(clues: SourceClues) -> bool:
    return clues.mentions("autocast") and clues.may_call("backward")


def _manual_half(clues: SourceClues) -> bool:
    if not clues.mentions("autocast"):  # the rarest word first: `.to(` is everywhere
        return False
    casts = clues.may_call("half") or (
        clues.may_call("to") and (clues.mentions("float16") or clues.mentions("half"))
    )
    return clues.may_call("backward") and casts


def _scaler_with_bfloat16(clues: SourceClues) -> bool:
    return (
        clues.mentions("caler")
        and clues.may_call("scale")
        and clues.may_use("autocast")
        # `dtype=torch.bfloat16`, or CPU autocast (`device_type="cpu"`: a string).
        and (clues.mentions("bfloat16") or clues.mentions("cpu"))
    )


def _zero_grad_before_scaler_step(clues: SourceClues) -> bool:
    return clues.mentions("caler") and clues.may_call("zero_grad") and clues.may_call("scale")


def _unsafe_loss_under_autocast(clues: SourceClues) -> bool:
    # The loss is called, or its class is (`criterion = nn.BCELoss()`), in a
    # region an autocast call opens.
    return (
        (clues.mentions("BCELoss") or clues.mentions("binary_cross_entropy"))
        and clues.may_call_name("autocast")
        and (clues.may_call_name("BCELoss") or clues.may_call_name("binary_cross_entropy"))
    )


def _scaler_step_with_closure(clues: SourceClues) -> bool:
    return clues.mentions("caler") and clues.may_call("step")


# A device string with an index, quoted: what AMP116 finds besides a torch.device.
_INDEXED_DEVICE_LITERAL = re.compile(r"""["'][a-z_]+:\d+["']""")


def _autocast_device_type(clues: SourceClues) -> bool:
    text = clues.text
    return (
        clues.mentions("autocast")
        and (
            _AUTOCAST_DEVICE_ARGUMENT.search(text) is not None
            or _AUTOCAST_ALIAS.search(text) is not None
        )
        and clues.may_use("autocast")
        and clues.may_call_name("autocast")
        # The device given is a torch.device, which a call made somewhere
        # (`torch.device("cuda")`, bound to a name), or a literal "cuda:0".
        and (clues.may_call_name("device") or _INDEXED_DEVICE_LITERAL.search(text) is not None)
    )


_GRAD_SCALER_CALL = re.compile(r"GradScaler\s*\(")


def _plain_scaler_under_fsdp(clues: SourceClues) -> bool:
    # FSDP may wrap the model in another module of the program: the scaler's
    # module need not name it.
    text = clues.text
    return (
        clues.mentions("GradScaler")
        and _GRAD_SCALER_CALL.search(text) is not None
        and clues.may_use("GradScaler")
    )


# What torch.cuda.amp / torch.cpu.amp export and warn about; anything else there
# (amp_definitely_not_available) is not deprecated and is left alone.
DEPRECATED_MEMBERS = {
    "cuda": ("autocast", "GradScaler", "custom_fwd", "custom_bwd"),
    "cpu": ("autocast", "GradScaler"),
}


def _deprecated_amp(device: str) -> Callable[[SourceClues], bool]:
    # `torch.cuda.amp` is reached through its dotted name, through
    # `from torch.cuda import amp`, or through an alias of torch.cuda
    # (`import torch.cuda as tc`, `from torch import cuda as c`).
    # Each pattern starts with a literal, which lets `re` skip ahead by
    # substring search: a leading `\b` or an alternation made it 40x slower.
    dotted = f"{device}.amp"
    other_spellings = (
        re.compile(rf"{device}[\s\\]+as\b"),
        re.compile(rf"torch\.{device}[\s\\]+import\b"),
    )

    def may_fire(clues: SourceClues) -> bool:
        text = clues.text
        spelled = clues.mentions(dotted) or (
            clues.mentions(device)
            and any(pattern.search(text) is not None for pattern in other_spellings)
        )
        return (
            spelled
            and clues.may_reference("amp")
            and clues.may_reach_amp_member(*DEPRECATED_MEMBERS[device])
        )

    return may_fire


# Any of torch's per-device autocast state functions (AMP205), as text; the
# analysis asks it too before it walks a module.
DEPRECATED_STATE_SPELLED = re.compile(
    r"(?:get|set|is)_autocast_(?:gpu|cpu|xla|ipu)_(?:dtype|enabled)"
)


def _deprecated_autocast_state(clues: SourceClues) -> bool:
    if not clues.mentions("_autocast_"):
        return False
    # Called: torch's own overrides.py names every one of them in a table.
    return any(
        clues.may_call(name) or (clues.mentions(f"{name}(") and clues.may_use(name))
        for name in set(DEPRECATED_STATE_SPELLED.findall(clues.text))
    )


# The framework set-up calls (analysis/frameworks.py): by name, and the
# configurations by the end of their name (`TrainingArguments`, `SFTConfig`).
FRAMEWORK_SETUPS = ("Accelerator", "Trainer", "Fabric", "Booster", "initialize")
FRAMEWORK_CONFIGS = ("Arguments", "Config")
# The same, as text (the analysis asks it before it walks a module).
FRAMEWORK_SPELLED = re.compile(
    rf"\b(?:{'|'.join(FRAMEWORK_SETUPS)}|\w*TrainingArguments|\w+Config)\s*\("
)


# The framework rules read set-up calls (analysis/frameworks.py): `Accelerator(`,
# `Trainer(`, `deepspeed.initialize(`, a config named by `TrainingArguments(`.
def _accelerator_in_fp32(clues: SourceClues) -> bool:
    return (
        clues.mentions("Accelerator")
        and clues.may_call("backward")
        and clues.may_call_name("Accelerator")
    )


def _lightning_in_fp32(clues: SourceClues) -> bool:
    # A Trainer trains by `.fit(`, a Fabric loop by `fabric.backward(`.
    return (
        clues.mentions("lightning")
        and (clues.may_call("fit") or clues.may_call("backward"))
        and (clues.may_call_name("Trainer") or clues.may_call_name("Fabric"))
    )


def _training_arguments_in_fp32(clues: SourceClues) -> bool:
    return (
        (clues.mentions("Arguments") or clues.mentions("Config"))
        and clues.may_call("train")
        and clues.may_call_ending(*FRAMEWORK_CONFIGS)
    )


def _deepspeed_in_fp32(clues: SourceClues) -> bool:
    return (
        clues.mentions("deepspeed")
        and (clues.may_call("backward") or clues.may_call("train"))
        and (clues.may_call_name("initialize") or clues.may_call_ending(*FRAMEWORK_CONFIGS))
    )


def _booster_in_fp32(clues: SourceClues) -> bool:
    return (
        clues.mentions("Booster") and clues.may_call("backward") and clues.may_call_name("Booster")
    )


def _mmengine_optim_wrapper(clues: SourceClues) -> bool:
    return clues.mentions("OptimWrapper") and clues.mentions("optim_wrapper")


def _booster_precision(clues: SourceClues) -> bool:
    return clues.mentions("Booster") and clues.mentions("mixed_precision")


def _manual_amp_under_framework(clues: SourceClues) -> bool:
    # An autocast or scaler call (`scaler.scale(loss)` handed to a framework's
    # backward is one) beside a framework's set-up call.
    return (
        (clues.mentions("autocast") or clues.mentions("Scaler"))
        and (
            clues.may_call_name("autocast")
            or clues.may_call("scale")
            or clues.may_call_ending("GradScaler")
        )
        and (
            any(clues.may_call_name(setup) for setup in FRAMEWORK_SETUPS)
            or clues.may_call_ending(*FRAMEWORK_CONFIGS)
        )
    )


def _half_model_with_scaler(clues: SourceClues) -> bool:
    return (
        clues.mentions("Scaler")
        and (clues.may_call("half") or clues.mentions("float16") or clues.mentions("half"))
        and (clues.may_call("step") or clues.may_call("unscale_"))
    )


def _amp_against_fsdp_policy(clues: SourceClues) -> bool:
    return clues.mentions("MixedPrecision") and (
        clues.mentions("autocast") or clues.mentions("Scaler")
    )


def _apex_amp(clues: SourceClues) -> bool:
    return clues.mentions("apex") and clues.may_use("amp")


def _apex_other(clues: SourceClues) -> bool:
    # `amp`: an import of apex.amp that nothing uses is AMP204's.
    return clues.mentions("apex") and (
        clues.may_use("parallel")
        or clues.may_use("fp16_utils")
        or clues.mentions("_amp_state")
        or clues.may_use("amp")
    )


def _cuda_amp_on_other_device(clues: SourceClues) -> bool:
    # CUDA's autocast or GradScaler, and a model moved to a device the script
    # names (`.to(device)` or `device=`: analysis/device.py's proof).  Autocast
    # is CUDA's where it names "cuda" (its device type has no default); the
    # device-generic GradScaler is CUDA's by default (analysis/cuda_only_amp.py).
    return (clues.may_call("to") or clues.mentions("device")) and (
        (clues.may_use("GradScaler") and clues.may_call_ending("GradScaler"))
        or (
            (clues.mentions('"cuda"') or clues.mentions("'cuda'"))
            and clues.may_use("autocast")
            and clues.may_call_name("autocast")
        )
    )


def _compiled_backward_autocast(clues: SourceClues) -> bool:
    # A model compiled (torch.compile, nn.Module.compile, a decorator) and
    # run under autocast, with a backward.
    return clues.may_use("compile") and clues.may_use("autocast") and clues.may_call("backward")


def _unused_noqa(clues: SourceClues) -> bool:
    # Case-blind, as `# noqa` is; the rule is opt-in, so this reads a file only
    # when asked to.
    return "noqa" in clues.text.lower()


def _parses_or_not(clues: SourceClues) -> bool:
    # AMP900 needs a parse, and a file is parsed only for another rule.
    return False


TRIGGERS: dict[str, Callable[[SourceClues], bool]] = {
    "AMP001": _fp32_step,
    "AMP002": _accelerator_in_fp32,
    "AMP003": _lightning_in_fp32,
    "AMP004": _training_arguments_in_fp32,
    "AMP005": _deepspeed_in_fp32,
    "AMP006": _booster_in_fp32,
    "AMP007": _mmengine_optim_wrapper,
    "AMP101": _backward_in_autocast,
    "AMP102": _scaled_step,
    "AMP103": _scaled_step,
    "AMP104": _missing_scaler_update,
    "AMP105": _unscaled_backward,
    "AMP106": _float16_without_scaler,
    "AMP107": _scaler_per_micro_step,
    "AMP108": _double_unscale,
    "AMP109": _scaler_not_checkpointed,
    "AMP110": _loss_outside_autocast,
    "AMP124": _loss_outside_autocast,
    "AMP111": _manual_half,
    "AMP112": _scaler_with_bfloat16,
    "AMP113": _zero_grad_before_scaler_step,
    "AMP114": _unsafe_loss_under_autocast,
    "AMP115": _scaler_step_with_closure,
    "AMP116": _autocast_device_type,
    "AMP117": _plain_scaler_under_fsdp,
    "AMP118": _manual_amp_under_framework,
    "AMP119": _half_model_with_scaler,
    "AMP120": _amp_against_fsdp_policy,
    "AMP121": _booster_precision,
    "AMP122": _cuda_amp_on_other_device,
    "AMP123": _compiled_backward_autocast,
    "AMP201": _deprecated_amp("cuda"),
    "AMP202": _deprecated_amp("cpu"),
    "AMP203": _apex_amp,
    "AMP204": _apex_other,
    "AMP205": _deprecated_autocast_state,
    "AMP206": _booster_precision,
    SYNTAX_ERROR: _parses_or_not,
    UNUSED_NOQA: _unused_noqa,
}
# Every code amplint can report.
ALL_CODES: tuple[str, ...] = tuple(sorted(TRIGGERS))


def text_may_fire(text: str, codes: frozenset[str]) -> bool:
    """Whether the text alone leaves a finding of one of `codes` possible: the
    first, cheapest test, which costs about what reading the file does."""
    clues = SourceClues(text, compiled=False)
    return any(TRIGGERS[code](clues) for code in codes if code in TRIGGERS)
