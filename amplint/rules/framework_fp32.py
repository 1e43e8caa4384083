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
from dataclasses import replace
from typing import ClassVar, Iterator

import libcst as cst

from amplint.analysis.code_text import code_only
from amplint.analysis import ModuleFacts
from amplint.analysis.autocast import keyword_value
from amplint.analysis.precision import float16_obstacle, trainer_optimizer_stepped_by_hand
from amplint.analysis.forward import takes_gradients_in_forward
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
# What `fabric run --precision` sets for the processes it starts (lightning/fabric/cli.py).
_FABRIC_LAUNCHED = "LT_PRECISION"


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


def _dtype(setup: FrameworkSetup, settings: Settings) -> str:
    """The dtype a switch for `setup` asks for: the settings', bfloat16 where
    only bfloat16 fits the set-up or `--dtype auto` targets the CPU."""
    if setup.bfloat16_only or (settings.dtype == "auto" and settings.device_type == "cpu"):
        return "bfloat16"
    return settings.dtype


def _differentiates(facts: ModuleFacts) -> str | None:
    how = takes_gradients_in_forward(facts.module, facts.imports)
    if how is None:
        return None
    return (
        f"the module takes gradients inside its forward pass with {how}, on a loss the "
        "framework's float16 scaler never scales; `--dtype bfloat16` writes the bfloat16 "
        "switch"
    )


def _trains(text: str, method: str) -> bool:
    return re.search(rf"\.\s*{method}\s*\(", text) is not None


class _FrameworkInFp32(Rule):
    # The frameworks of the rule, each with the method whose call shows the
    # module trains with it.
    trains_by: ClassVar[dict[str, str]]

    def check(self, facts: ModuleFacts, settings: Settings) -> Iterator[Diagnostic]:
        for framework, method in self.trains_by.items():
            mine = [setup for setup in facts.framework_setups if setup.framework == framework]
            unset = [setup for setup in mine if setup.precision is Precision.UNSET]
            if not unset or not _trains(facts.text, method):
                continue
            if len(unset) < len(mine):
                # Another set-up of the module chose (`if args.with_tracking:
                # Accelerator(mixed_precision=args.mixed_precision) else:
                # Accelerator()`, a benchmark's fp8 run beside its baseline): the
                # one left at the default is left so on purpose.
                continue
            for setup in unset:
                if _does_amp_by_hand(setup, facts.module):
                    continue  # the scope does AMP by hand (AMP118's question, not this)
                found = self.diagnostic(setup, facts, settings)
                if found is None:
                    continue
                obstacle = _dtype(setup, settings) != "bfloat16" and (
                    float16_obstacle(facts.code_text)
                    or _differentiates(facts)
                    or trainer_optimizer_stepped_by_hand(facts)
                )
                if setup.pins_cpu and settings.device_type != "cpu":
                    # As AMP001 declines a script that never leaves the CPU
                    # under settings made for CUDA.
                    obstacle = (
                        "this call keeps training on the CPU, and these settings are for "
                        "CUDA; `--device-type cpu` writes the bfloat16 switch"
                    )
                if obstacle and found.fix is not None:
                    # The switch would run the module's float16 breakers too.
                    found = replace(
                        found, message=f"{found.message} (not fixed: {obstacle})", fix=None
                    )
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
        None when that needs torch and the module has no name for it.  A set-up
        that only bfloat16 fits gets it whatever the settings say: on the CPU
        Accelerate leaves float16 off, Lightning swaps it for bfloat16 with a
        warning and the HuggingFace Trainer refuses it; Lightning's
        ModelParallelStrategy refuses "16-mixed"."""
        dtype = _dtype(setup, settings)
        if dtype == "auto":
            torch = facts.imports.name_for("torch", setup.scope)
            return pick(None, None, torch) if torch is not None else None
        return pick(dtype == "float16", dtype == "bfloat16", None)

    def string_switch(
        self, setup, facts, settings, keyword, float16, bfloat16
    ) -> tuple[str, Fix | None]:
        """What to set `keyword=` to, with the framework's string for the dtype
        (`float16` / `bfloat16` as the framework spells them), and the fix
        that sets it; no fix where the dtype needs torch and it has no name."""
        value = self.spelled(setup, facts, settings, _string_switch_value(float16, bfloat16))
        if value is None:
            return f"{bfloat16} where the GPU has it, else {float16}", None
        fix = _keyword_fix(
            setup,
            value,
            keyword,
            f"{keyword}={value} ({NUMERICS_NOTE})",
            line=facts.line_of(setup.call),
        )
        return value, fix

    def launcher_switch(
        self, setup, facts, settings, keyword_and_variable, strings, note
    ) -> tuple[str, Fix | None]:
        """`keyword=os.environ.get(VARIABLE, value)`: the switch that keeps a
        launcher's choice (`accelerate launch`, `fabric run`, which hand it
        over in VARIABLE and lose to an explicit argument, or refuse it), and
        the fix that writes it; `strings` are the framework's float16 and
        bfloat16 values.  No fix where the dtype needs torch and it has no
        name: the expression then shows bfloat16."""
        keyword, variable = keyword_and_variable
        value = self.spelled(setup, facts, settings, _string_switch_value(*strings))
        os_name = facts.imports.name_for("os", setup.scope) or "os"
        launched = f'{os_name}.environ.get("{variable}", {value or strings[1]})'
        if value is None:
            return launched, None
        fix = _keyword_fix(
            setup,
            launched,
            keyword,
            f"{keyword}={launched} ({NUMERICS_NOTE}; {note})",
            passes=(ensure_os_imported,) if os_name == "os" else (),
            line=facts.line_of(setup.call),
        )
        return launched, fix


def _bfloat16_only(setup: FrameworkSetup) -> str:
    """Why the switch is bfloat16 whatever `--dtype` says, for the message."""
    return f"; bfloat16, as {setup.bfloat16_only}" if setup.bfloat16_only else ""


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
    trains_by = {"accelerate": "backward"}

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
        launched, fix = self.launcher_switch(
            setup,
            facts,
            settings,
            ("mixed_precision", _ACCELERATE_LAUNCHED),
            ('"fp16"', '"bf16"'),
            "`accelerate launch` and its config still decide",
        )
        return Diagnostic(
            self.code,
            "the Accelerator trains in FP32 unless `accelerate launch` asks for mixed "
            "precision (its `--mixed_precision` flag, or the `accelerate config` it reads "
            "outside the project); no launch config of the project does. "
            f"`mixed_precision={launched}` keeps the launcher's choice and otherwise runs "
            "the forward pass under autocast, scaling the loss for you" + _bfloat16_only(setup),
            facts.span(setup.call),
            fix,
        )


class LightningInFp32(_FrameworkInFp32):
    code = "AMP003"
    trains_by = {"lightning": "fit", "fabric": "backward"}

    def diagnostic(self, setup, facts, settings):
        if setup.framework == "fabric":
            return self._fabric(setup, facts, settings)
        value, fix = self.string_switch(
            setup, facts, settings, "precision", '"16-mixed"', '"bf16-mixed"'
        )
        called = facts.module.code_for_node(setup.call.func)
        runs = (
            "runs the forward pass of the models it sets up under autocast, and for "
            "16-bit scales the loss in `fabric.backward`"
            if setup.framework == "fabric"
            else "runs each step under autocast"
        )
        return Diagnostic(
            self.code,
            f'`{called}(...)` trains in FP32 (`precision` defaults to "32-true"); '
            f"`precision={value}` {runs}" + _bfloat16_only(setup),
            facts.span(setup.call),
            fix,
        )


    def _fabric(self, setup, facts, settings) -> Diagnostic:
        """`fabric run --precision X` hands its choice over in LT_PRECISION, and
        Fabric refuses a `precision=` that differs from it ("conflicts with the
        value set through the CLI"): the fix reads it first, as AMP002 reads
        `accelerate launch`'s."""
        launched, fix = self.launcher_switch(
            setup,
            facts,
            settings,
            ("precision", _FABRIC_LAUNCHED),
            ('"16-mixed"', '"bf16-mixed"'),
            "`fabric run --precision` still decides",
        )
        called = facts.module.code_for_node(setup.call.func)
        return Diagnostic(
            self.code,
            f'`{called}(...)` trains in FP32 (`precision` defaults to "32-true") unless '
            "`fabric run --precision` asks for more; "
            f"`precision={launched}` keeps the launcher's choice and otherwise runs the "
            "forward pass of the models it sets up under autocast, and for 16-bit scales "
            "the loss in `fabric.backward`" + _bfloat16_only(setup),
            facts.span(setup.call),
            fix,
        )


class TrainingArgumentsInFp32(_FrameworkInFp32):
    code = "AMP004"
    trains_by = {"transformers": "train"}

    def diagnostic(self, setup, facts, settings):
        called = facts.module.code_for_node(setup.call.func)
        arguments = self.spelled(setup, facts, settings, _enabled_flags)
        shown = (
            ", ".join(f"{name}={code}" for name, code in arguments)
            if arguments is not None
            else "`bf16=True` where the GPU has it, else `fp16=True`"
        )
        if arguments is not None:
            shown = f"`{shown}`"
        message = (
            f"`{called}(...)` sets neither `fp16` nor `bf16`: the Trainer trains in FP32; "
            f"{shown} runs its steps under autocast" + _bfloat16_only(setup)
        )
        fix = None
        if keyword_value(setup.call, "deepspeed") is None:
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
    trains_by = {"deepspeed": "backward"}

    def check(self, facts: ModuleFacts, settings: Settings) -> Iterator[Diagnostic]:
        # A config named by TrainingArguments is trained by `trainer.train()`.
        for setup in facts.framework_setups:
            if setup.framework != "deepspeed" or setup.precision is not Precision.UNSET:
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


class BoosterInFp32(_FrameworkInFp32):
    code = "AMP006"
    trains_by = {"colossalai": "backward"}

    def diagnostic(self, setup, facts, settings):
        value, fix = self.string_switch(
            setup, facts, settings, "mixed_precision", '"fp16"', '"bf16"'
        )
        plugin = f"its plugin, {setup.plugin}," if setup.plugin else "with no plugin, it"
        return Diagnostic(
            self.code,
            f"the Colossal-AI Booster trains in FP32: {plugin} leaves the precision to the "
            f"Booster, and `mixed_precision` defaults to None; `mixed_precision={value}` runs "
            "the boosted model's forward pass under autocast and scales the loss in "
            "`booster.backward`",
            facts.span(setup.call),
            fix,
        )
