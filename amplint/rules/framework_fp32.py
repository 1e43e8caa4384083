"""AMP002-AMP005: a framework set up to train in FP32, its default.

AMP001's family for the loops a framework writes: Accelerate, Lightning, the
HuggingFace Trainer and DeepSpeed each keep the forward pass, the loss scaling
and the optimizer step to themselves, and each has one switch for mixed
precision.  The fix sets that switch to the dtype of the settings (`--dtype`).
Like AMP001's, it changes numerics the user left at their default, and is
labelled the same way.

A set-up is judged only where the module shows it trains (`.backward(` for
Accelerate and DeepSpeed, `.fit(` for Lightning, `.train(` for the Trainer):
an Accelerator used for inference, a Trainer only `.test()`-ed, is left alone.
"""

from __future__ import annotations

import re
from typing import ClassVar, Iterator

import libcst as cst

from amplint.analysis.code_text import code_only
from amplint.analysis import ModuleFacts
from amplint.analysis.autocast import keyword_value
from amplint.analysis.frameworks import FrameworkSetup, Precision
from amplint.analysis.statements import assigned_name
from amplint.config import Settings
from amplint.diagnostics import Applicability, Diagnostic, Edit, Fix
from amplint.rules.base import Rule
from amplint.transforms.imports import ensure_os_imported
from amplint.transforms.torch_amp import bfloat16_in_hardware
from amplint.transforms.arguments import (
    append_dict_element,
    insert_argument,
    keyword_argument,
    one_per_line,
)
from amplint.transforms.insert_amp import LINE_LENGTH

NUMERICS_NOTE = "changes the numerics of training"
# What `accelerate launch` sets from its `--mixed_precision` flag or the config it
# reads, and what an Accelerator not given `mixed_precision` trains in.
_ACCELERATE_LAUNCHED = "ACCELERATE_MIXED_PRECISION"


# An autocast region or a GradScaler written by hand, or a loss it scales.
_MANUAL_AMP = re.compile(r"\bautocast\s*\(|\bGradScaler\s*\(|\.scale\s*\(")


def _does_amp_by_hand(setup: FrameworkSetup, module: cst.Module) -> bool:
    """Whether the code around `setup` runs autocast or a scaler itself: its
    function; in a script or notebook, whose module holds every section, the
    top-level statements that name what the set-up is bound to, and every
    function or class (any of them may be called with it)."""
    scope = setup.scope
    if not isinstance(scope, cst.Module):
        return _MANUAL_AMP.search(code_only(module.code_for_node(scope))) is not None
    bound = next((name for s in module.body if (name := assigned_name(s, setup.call))), None)
    for statement in module.body:
        text = code_only(module.code_for_node(statement))
        if not _MANUAL_AMP.search(text):
            continue
        if bound is None or isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            return True
        if re.search(rf"\b{re.escape(bound)}\b", text):
            return True
    return False


def _trains(text: str, method: str) -> bool:
    return re.search(rf"\.\s*{method}\s*\(", text) is not None


class _FrameworkInFp32(Rule):
    framework: ClassVar[str]
    trains_by: ClassVar[str]  # the method whose call shows the module trains

    def check(self, facts: ModuleFacts, settings: Settings) -> Iterator[Diagnostic]:
        mine = [setup for setup in facts.framework_setups if setup.framework == self.framework]
        unset = [setup for setup in mine if setup.precision is Precision.UNSET]
        if not unset or not _trains(facts.text, self.trains_by):
            return
        if len(unset) < len(mine):
            # Another set-up of the module chose (`if args.with_tracking:
            # Accelerator(mixed_precision=args.mixed_precision) else:
            # Accelerator()`, a benchmark's fp8 run beside its baseline): the
            # one left at the default is left so on purpose.
            return
        for setup in unset:
            if _does_amp_by_hand(setup, facts.module):
                continue  # the scope does AMP by hand (AMP118's question, not this)
            found = self.diagnostic(setup, facts, settings)
            if found is not None:
                yield found

    def diagnostic(
        self, setup: FrameworkSetup, facts: ModuleFacts, settings: Settings
    ) -> Diagnostic | None:
        raise NotImplementedError

    @staticmethod
    def spelled(setup: FrameworkSetup, facts: ModuleFacts, settings: Settings, pick):
        """The code for the settings' dtype, by `pick(float16, bfloat16, torch)`:
        `torch` is the module's name for torch where the dtype is chosen at run
        time (`--dtype auto` on CUDA: bfloat16 where the GPU has it), else None.
        None when that needs torch and the module has no name for it."""
        dtype = settings.dtype
        if dtype == "auto" and settings.device_type == "cpu":
            dtype = "bfloat16"
        if dtype == "auto":
            torch = facts.imports.name_for("torch", setup.scope)
            return pick(None, None, torch) if torch is not None else None
        return pick(dtype == "float16", dtype == "bfloat16", None)

    def string_switch(self, setup, facts, settings, keyword, float16, bfloat16) -> Fix | None:
        """The fix adding `keyword=` with the framework's string for the dtype
        (`float16` / `bfloat16` as the framework spells them), or None."""
        value = self.spelled(setup, facts, settings, _string_switch_value(float16, bfloat16))
        if value is None:
            return None
        return _keyword_fix(
            setup,
            value,
            keyword,
            f"{keyword}={value} ({NUMERICS_NOTE})",
            line=_line_of(setup, facts),
        )


def _string_switch_value(float16: str, bfloat16: str):
    """A `pick` for `spelled`: the framework's string for the dtype, or both
    chosen by the GPU at run time."""

    def pick(fp16: bool, bf16: bool, torch: str | None) -> str:
        if torch:
            return f"{bfloat16} if {bfloat16_in_hardware(torch)} else {float16}"
        return float16 if fp16 else bfloat16

    return pick


def _enabled_flags(fp16: bool, bf16: bool, torch: str | None) -> list[tuple[str, str]]:
    """The (flag, value) pairs that turn the dtype on: TrainingArguments'
    `bf16=True`, a DeepSpeed section's `"enabled": True`; both, chosen by the
    GPU, for a dtype picked at run time."""
    if torch:
        supported = bfloat16_in_hardware(torch)
        return [("bf16", supported), ("fp16", f"not {supported}")]
    return [("fp16" if fp16 else "bf16", "True")]


def _line_of(setup: FrameworkSetup, facts: ModuleFacts) -> str:
    """The line the set-up call starts on."""
    return facts.text.splitlines()[facts.span(setup.call).line - 1]


def _keyword_fix(
    setup: FrameworkSetup,
    code: str,
    name: str,
    message: str,
    passes: tuple = (),
    line: str = "",
) -> Fix:
    """The fix adding `name=code` to the set-up call; a call on one `line` that
    would outgrow it gets an argument per line, as black would lay it out."""
    value = cst.parse_expression(code)
    longer = len(line.rstrip()) + len(f", {name}={code}") > LINE_LENGTH

    def rewrite(call: cst.Call) -> cst.Call:
        call = insert_argument(call, len(call.args), keyword_argument(name, value))
        return (
            one_per_line(call)
            if longer and "\n" not in cst.Module([]).code_for_node(call)
            else call
        )

    return Fix(Applicability.SAFE, message, (Edit(setup.call, rewrite),), module_passes=passes)


class AcceleratorInFp32(_FrameworkInFp32):
    code = "AMP002"
    framework = "accelerate"
    trains_by = "backward"

    def diagnostic(self, setup, facts, settings):
        project = facts.project
        launch = project.launch_precision() if project is not None else None
        if launch is not None and launch.enabled:
            return None  # `accelerate launch` turns it on from the config
        if launch is not None:
            # The launch config decides, in FP32: the switch to turn is there.
            where = f"{project.relative(launch.path)}:{launch.line}"
            return Diagnostic(
                self.code,
                f"the Accelerator trains in FP32: its launch config ({where}) sets "
                "`mixed_precision: 'no'`; `bf16` (or `fp16`) there runs the forward pass "
                "under autocast and scales the loss for you",
                facts.span(setup.call),
            )
        # An explicit argument beats `accelerate launch --mixed_precision` and the
        # user's `accelerate config` (both reach the Accelerator through this
        # variable, read only when the argument is None): the fix reads it first.
        value = self.spelled(setup, facts, settings, _string_switch_value('"fp16"', '"bf16"'))
        fix = None
        if value is not None:
            os_name = facts.imports.name_for("os", setup.scope) or "os"
            launched = f'{os_name}.environ.get("{_ACCELERATE_LAUNCHED}", {value})'
            fix = _keyword_fix(
                setup,
                launched,
                "mixed_precision",
                f"mixed_precision={launched} ({NUMERICS_NOTE}; `accelerate launch` and its "
                "config still decide)",
                passes=(ensure_os_imported,) if os_name == "os" else (),
                line=_line_of(setup, facts),
            )
        return Diagnostic(
            self.code,
            "the Accelerator trains in FP32 unless `accelerate launch` asks for mixed "
            "precision (its `--mixed_precision` flag, or the `accelerate config` it reads "
            "outside the project); no launch config of the project does. "
            f'`mixed_precision=os.environ.get("{_ACCELERATE_LAUNCHED}", "bf16")` (or "fp16") '
            "keeps the launcher's choice and otherwise runs the forward pass under autocast, "
            "scaling the loss for you",
            facts.span(setup.call),
            fix,
        )


class LightningInFp32(_FrameworkInFp32):
    code = "AMP003"
    framework = "lightning"
    trains_by = "fit"

    def diagnostic(self, setup, facts, settings):
        fix = self.string_switch(setup, facts, settings, "precision", '"16-mixed"', '"bf16-mixed"')
        called = facts.module.code_for_node(setup.call.func)
        return Diagnostic(
            self.code,
            f'`{called}(...)` trains in FP32 (`precision` defaults to "32-true"); '
            '`precision="bf16-mixed"` (or "16-mixed") runs each step under autocast',
            facts.span(setup.call),
            fix,
        )


class TrainingArgumentsInFp32(_FrameworkInFp32):
    code = "AMP004"
    framework = "transformers"
    trains_by = "train"

    def diagnostic(self, setup, facts, settings):
        called = facts.module.code_for_node(setup.call.func)
        message = (
            f"`{called}(...)` sets neither `fp16` nor `bf16`: the Trainer trains in FP32; "
            "`bf16=True` (or `fp16=True`) runs its steps under autocast"
        )
        fix = None
        if keyword_value(setup.call, "deepspeed") is None:
            arguments = self.spelled(
                setup,
                facts,
                settings,
                _enabled_flags,
            )
            if arguments is not None:
                fix = _arguments_fix(setup, arguments)
        else:
            # The DeepSpeed config must then say the same: left to the user.
            message += ", and the DeepSpeed config it names the same"
        return Diagnostic(self.code, message, facts.span(setup.call), fix)


def _arguments_fix(setup: FrameworkSetup, arguments: list[tuple[str, str]]) -> Fix:
    def rewrite(call: cst.Call) -> cst.Call:
        for name, code in arguments:
            value = keyword_argument(name, cst.parse_expression(code))
            call = insert_argument(call, len(call.args), value)
        return call

    shown = ", ".join(f"{name}={code}" for name, code in arguments)
    return Fix(Applicability.SAFE, f"{shown} ({NUMERICS_NOTE})", (Edit(setup.call, rewrite),))


class DeepSpeedInFp32(_FrameworkInFp32):
    code = "AMP005"
    framework = "deepspeed"
    trains_by = "backward"

    def check(self, facts: ModuleFacts, settings: Settings) -> Iterator[Diagnostic]:
        # A config named by TrainingArguments is trained by `trainer.train()`.
        for setup in facts.framework_setups:
            if setup.framework != self.framework or setup.precision is not Precision.UNSET:
                continue
            by_trainer = setup.config is None and setup.config_file is not None
            if _trains(facts.text, "backward") or (by_trainer and _trains(facts.text, "train")):
                yield self.diagnostic(setup, facts, settings)

    def diagnostic(self, setup, facts, settings):
        advice = '`"bf16": {"enabled": True}` (or "fp16") runs the engine in mixed precision'
        if setup.config is None:
            where = facts.project.relative(setup.config_file) if facts.project else "the file"
            return Diagnostic(
                self.code,
                f"the DeepSpeed config {where} enables neither fp16 nor bf16: the engine "
                f"trains in FP32; {advice}",
                facts.span(setup.call),
            )
        entries = self.spelled(
            setup,
            facts,
            settings,
            _enabled_flags,
        )
        fix = None
        if entries is not None:

            def rewrite(config: cst.Dict) -> cst.Dict:
                for key, enabled in entries:
                    entry = cst.DictElement(
                        cst.SimpleString(f'"{key}"'),
                        cst.parse_expression(f'{{"enabled": {enabled}}}'),
                    )
                    config = append_dict_element(config, entry)
                return config

            shown = ", ".join(f'"{key}": {{"enabled": {enabled}}}' for key, enabled in entries)
            fix = Fix(
                Applicability.SAFE, f"{shown} ({NUMERICS_NOTE})", (Edit(setup.config, rewrite),)
            )
        return Diagnostic(
            self.code,
            f"the DeepSpeed config enables neither fp16 nor bf16: the engine trains in FP32; "
            f"{advice}",
            facts.span(setup.call),
            fix,
        )
