"""Where a module hands its training to a framework, and the precision it asks for.

Accelerate's `Accelerator(mixed_precision=...)`, Lightning's `Trainer(precision=...)`
and Fabric's `Fabric(precision=...)`, HuggingFace's `TrainingArguments(fp16=..., bf16=...)`
(and the TRL configs that subclass it) and DeepSpeed's config (the dict or JSON
file `deepspeed.initialize` is given) each choose the precision of a loop the
user never writes.  Every one of them defaults to FP32.

Only what the code spells is judged: a value computed at run time
(`mixed_precision=args.mixed_precision`, `Trainer(**cfg)`) is the user's
choice made elsewhere, and so is an explicit FP32 (`mixed_precision="no"`,
`precision="32-true"`, `fp16=False`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import libcst as cst

from amplint.analysis.autocast import keyword_value
from amplint.analysis.imports import ImportMap, dotted_name
from amplint.analysis.scopes import Scope, ScopedVisitor
from amplint.analysis.statements import string_value

ACCELERATORS = frozenset({"accelerate.Accelerator", "accelerate.accelerator.Accelerator"})
LIGHTNING_TRAINERS = frozenset(
    {"lightning.Trainer", "lightning.pytorch.Trainer", "pytorch_lightning.Trainer"}
)
# Fabric takes the Trainer's `precision` strings, but the user writes the loop:
# it trains where the module calls `fabric.backward(loss)`, not `.fit(`.
LIGHTNING_FABRICS = frozenset(
    {"lightning.Fabric", "lightning.fabric.Fabric", "lightning_fabric.Fabric"}
)
# TrainingArguments and the TRL configs built on it (same fp16/bf16 fields).
TRAINING_ARGUMENTS = frozenset(
    {
        "transformers.TrainingArguments",
        "transformers.Seq2SeqTrainingArguments",
        "transformers.training_args.TrainingArguments",
        *(f"trl.{name}Config" for name in ("SFT", "DPO", "GRPO", "ORPO", "KTO", "CPO", "Reward")),
    }
)
HF_TRAINERS = frozenset(
    {
        "transformers.Trainer",
        "transformers.Seq2SeqTrainer",
        *(f"trl.{name}Trainer" for name in ("SFT", "DPO", "GRPO", "ORPO", "KTO", "CPO", "Reward")),
    }
)
LIGHTNING_MODULES = frozenset(
    {
        "lightning.LightningModule",
        "lightning.pytorch.LightningModule",
        "pytorch_lightning.LightningModule",
    }
)
DEEPSPEED_INITIALIZE = frozenset({"deepspeed.initialize"})
BOOSTERS = frozenset({"colossalai.booster.Booster", "colossalai.booster.booster.Booster"})
# Colossal-AI plugins that control the precision themselves: the Booster then
# drops its own `mixed_precision` (with a warning) and the plugin's `precision=`
# decides, "fp16" by default.  TorchFSDPPlugin controls it through FSDP's own
# mixed-precision policy; TorchDDPPlugin, or no plugin, leaves it to the Booster.
PRECISION_PLUGINS = frozenset(
    {"GeminiPlugin", "LowLevelZeroPlugin", "HybridParallelPlugin", "MoeHybridParallelPlugin"}
)
FSDP_PLUGIN = "TorchFSDPPlugin"
PLAIN_PLUGINS = frozenset({"TorchDDPPlugin"})

# Lightning precisions that are FP32 (or wider): anything else is a lower one.
_LIGHTNING_FULL = frozenset({"32", "32-true", "64", "64-true"})
# DeepSpeed config sections that lower the precision of the engine's model.
DEEPSPEED_PRECISION_KEYS = ("fp16", "bf16", "bfloat16", "amp", "torch_autocast")


class Precision(enum.Enum):
    MIXED = "mixed"  # the code turns a lower precision on
    FULL = "full"  # the code chooses FP32 explicitly
    UNSET = "unset"  # nothing said: the framework's default, FP32
    UNKNOWN = "unknown"  # decided at run time, or by something not read here


@dataclass(frozen=True, eq=False)
class FrameworkSetup:
    """One call that sets a framework up, and the precision it asks for."""

    # "accelerate", "lightning", "fabric", "transformers", "deepspeed" or "colossalai"
    framework: str
    call: cst.Call
    precision: Precision
    scope: Scope
    # Why only bfloat16 mixed precision fits this set-up, or None: the call
    # keeps training on the CPU (`Accelerator(cpu=True)`, `Trainer(accelerator=
    # "cpu")`, `TrainingArguments(use_cpu=True)`), where float16 autocast is
    # slow or refused, or uses a strategy that refuses "16-mixed".
    bfloat16_only: str | None = None
    pins_cpu: bool = False  # the call keeps training on the CPU (see bfloat16_only)
    # DeepSpeed: the dict literal its config is (the one a fix edits), or the
    # JSON file it names; TrainingArguments(deepspeed=...) also names one.
    config: cst.Dict | None = None
    config_file: Path | None = None
    # For the messages: the lower precision named ("bf16-mixed", "fp16").
    spelled: str | None = None
    # Colossal-AI: the plugin's class name, where the code shows which it is.
    plugin: str | None = None


def literal(node: cst.BaseExpression) -> object:
    """The value of a string, number, True/False/None literal; `_NOT_LITERAL` else."""
    if isinstance(node, cst.SimpleString):
        value = string_value(node)
        return _NOT_LITERAL if value is None else value
    if isinstance(node, cst.Integer):
        return int(node.value)
    if isinstance(node, cst.Name) and node.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[node.value]
    return _NOT_LITERAL


_NOT_LITERAL = object()


def _splats(call: cst.Call) -> bool:
    return any(arg.star for arg in call.args)


def _accelerator_precision(call: cst.Call) -> tuple[Precision, str | None]:
    value = keyword_value(call, "mixed_precision")
    if value is None:
        if keyword_value(call, "fp16") is not None:  # accelerate < 1.0
            return Precision.UNKNOWN, None
        # `Accelerator(True, False, "fp16")`: mixed_precision is the third.
        positional = [arg for arg in call.args if arg.keyword is None]
        if _splats(call) or len(positional) >= 3:
            return Precision.UNKNOWN, None
        return Precision.UNSET, None
    launched = _launched_default(value)
    if launched is not None:
        value = launched  # the launcher's choice, else this default: AMP002's fix
    spelled = literal(value)
    if spelled is None or spelled == "no":
        return (Precision.UNSET if launched is not None else Precision.FULL), None
    if isinstance(spelled, str):
        return Precision.MIXED, spelled
    if isinstance(value, cst.IfExp):  # `"bf16" if <GPU has it> else "fp16"`
        branches = [literal(value.body), literal(value.orelse)]
        if all(isinstance(b, str) and b != "no" for b in branches):
            return Precision.MIXED, branches[0]
    return Precision.UNKNOWN, None


def _launched_default(value: cst.BaseExpression) -> cst.BaseExpression | None:
    """The default of `os.environ.get("ACCELERATE_MIXED_PRECISION", default)`:
    what `accelerate launch` sets, read first, as AMP002's fix writes it."""
    if not (
        isinstance(value, cst.Call)
        and (dotted_name(value.func) or "").endswith("environ.get")
        and len(value.args) == 2
        and not any(arg.keyword or arg.star for arg in value.args)
    ):
        return None
    if literal(value.args[0].value) != "ACCELERATE_MIXED_PRECISION":
        return None
    return value.args[1].value


def booster_precision(call: cst.Call, plugin: cst.Call | None) -> tuple[Precision, str | None]:
    """What a Colossal-AI `Booster(mixed_precision=..., plugin=...)` trains in;
    `plugin` is the plugin's construction where the code shows it."""
    positional = [arg for arg in call.args if arg.keyword is None]
    if _splats(call) or len(positional) >= 2:  # Booster(device, mixed_precision, plugin)
        return Precision.UNKNOWN, None
    if keyword_value(call, "plugin") is not None:
        name = plugin_name(plugin)
        if name is None or name == FSDP_PLUGIN:
            return Precision.UNKNOWN, None
        if name in PRECISION_PLUGINS:
            chosen = keyword_value(plugin, "precision")
            if chosen is None:
                return Precision.MIXED, f'{name}\'s default "fp16"'
            spelled = literal(chosen)
            if spelled == "fp32":
                return Precision.FULL, None
            if isinstance(spelled, str):
                return Precision.MIXED, f'{name}(precision="{spelled}")'
            return Precision.UNKNOWN, None
    value = keyword_value(call, "mixed_precision")
    if value is None:
        return Precision.UNSET, None
    spelled = literal(value)
    if spelled is None:
        return Precision.FULL, None
    if isinstance(spelled, str):
        return Precision.MIXED, spelled
    if isinstance(value, cst.Call) and (dotted_name(value.func) or "").endswith("MixedPrecision"):
        return Precision.MIXED, dotted_name(value.func)
    return Precision.UNKNOWN, None


def plugin_name(plugin: cst.Call | None) -> str | None:
    """The class name of a Colossal-AI plugin's construction, or None."""
    if plugin is None:
        return None
    name = (dotted_name(plugin.func) or "").rsplit(".", 1)[-1]
    known = PRECISION_PLUGINS | PLAIN_PLUGINS | {FSDP_PLUGIN}
    return name if name in known else None


def _lightning_precision(call: cst.Call) -> tuple[Precision, str | None]:
    value = keyword_value(call, "precision")
    accelerator = keyword_value(call, "accelerator")
    if value is None and accelerator is not None and literal(accelerator) == "tpu":
        # XLA takes only "32-true", "16-true" and "bf16-true", and runs FP32
        # matrix products in bfloat16 passes already: no switch to write.
        return Precision.UNKNOWN, None
    if value is None:
        if _splats(call) or keyword_value(call, "plugins") is not None:
            return Precision.UNKNOWN, None
        return Precision.UNSET, None
    spelled = literal(value)
    if spelled is _NOT_LITERAL or spelled is None:
        return Precision.UNKNOWN, None
    if str(spelled) in _LIGHTNING_FULL:
        return Precision.FULL, None
    return Precision.MIXED, str(spelled)


def _training_arguments_precision(call: cst.Call) -> tuple[Precision, str | None]:
    values = {name: keyword_value(call, name) for name in ("fp16", "bf16")}
    given = {name: literal(value) for name, value in values.items() if value is not None}
    if not given:
        return (Precision.UNKNOWN if _splats(call) else Precision.UNSET), None
    on = [name for name, value in given.items() if value is True]
    if on:
        return Precision.MIXED, on[0]
    if all(value is False for value in given.values()):
        return Precision.FULL, None
    return Precision.UNKNOWN, None


def deepspeed_dict_precision(config: dict) -> tuple[Precision, str | None]:
    """The precision a DeepSpeed config (as JSON gives it) asks for."""
    sections = [key for key in DEEPSPEED_PRECISION_KEYS if key in config]
    if not sections:
        return Precision.UNSET, None
    for key in sections:
        section = config[key]
        if not isinstance(section, dict):
            return Precision.UNKNOWN, None
        # DeepSpeed reads a section without `enabled` as disabled; "auto" is
        # filled in by the HuggingFace Trainer from its own fp16/bf16.
        enabled = section.get("enabled", False)
        if enabled is True:
            return Precision.MIXED, key
        if enabled is not False:
            return Precision.UNKNOWN, None
    return Precision.FULL, None


def _read_dict(node: cst.Dict) -> dict | None:
    """A dict literal as far as its keys and `enabled` flags are literals;
    None where its keys are not all known (`**defaults`)."""
    found: dict = {}
    for element in node.elements:
        if not isinstance(element, cst.DictElement):
            return None
        key = literal(element.key)
        if not isinstance(key, str):
            return None
        value = element.value
        if isinstance(value, cst.Dict):
            found[key] = _read_dict(value)
        elif isinstance(value, cst.Call) and dotted_name(value.func) == "dict":
            found[key] = {
                arg.keyword.value: literal(arg.value) for arg in value.args if arg.keyword
            }
        else:
            read = literal(value)
            found[key] = "<expression>" if read is _NOT_LITERAL else read
    return found


def _dict_precision(node: cst.Dict) -> tuple[Precision, str | None]:
    read = _read_dict(node)
    return (Precision.UNKNOWN, None) if read is None else deepspeed_dict_precision(read)


# Reads a JSON config a call names, relative to the module's directory or the
# project root; None when there is none to read.
ConfigReader = Callable[[str], tuple[Path, dict] | None]


class _SetupFinder(ScopedVisitor):
    def __init__(self, imports: ImportMap, read_config: ConfigReader | None) -> None:
        super().__init__()
        self.imports = imports
        self.read_config = read_config
        self.found: list[FrameworkSetup] = []
        # name -> the value assigned to it, per scope; None where it is assigned
        # more than once (which value reaches the call is not known)
        self._bound: dict[int, dict[str, cst.BaseExpression | None]] = {}

    def enter_scope(self, scope: Scope) -> None:
        self._bound[id(scope)] = {}

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            if isinstance(target.target, cst.Name):
                known = self._bound[id(self.scope)]
                name = target.target.value
                known[name] = node.value if name not in known else None

    def _value_of(self, value: cst.BaseExpression | None) -> cst.BaseExpression | None:
        """`value`, or what the name it is was bound to once, in the nearest scope."""
        if isinstance(value, cst.Name):
            for scope in reversed(self.scopes):
                known = self._bound.get(id(scope), {})
                if value.value in known:
                    return known[value.value]
        return value

    def _construction(self, value: cst.BaseExpression | None) -> cst.Call | None:
        """`value` as the call that made it: itself, or the one its name is bound to."""
        value = self._value_of(value)
        return value if isinstance(value, cst.Call) else None

    def visit_Call(self, node: cst.Call) -> None:
        called = self.imports.resolve(node.func, self.scope)
        if called is None:
            return
        if called in ACCELERATORS:
            self._add("accelerate", node, *_accelerator_precision(node))
        elif called in LIGHTNING_TRAINERS:
            self._add("lightning", node, *_lightning_precision(node))
        elif called in LIGHTNING_FABRICS:
            self._add("fabric", node, *_lightning_precision(node))
        elif called in TRAINING_ARGUMENTS:
            self._add("transformers", node, *_training_arguments_precision(node))
            config = keyword_value(node, "deepspeed")
            if config is not None:
                self._add_deepspeed(node, config)
        elif called in BOOSTERS:
            plugin = self._construction(keyword_value(node, "plugin"))
            precision, spelled = booster_precision(node, plugin)
            self._add("colossalai", node, precision, spelled, plugin=plugin_name(plugin))
        elif called in DEEPSPEED_INITIALIZE:
            config = keyword_value(node, "config") or keyword_value(node, "config_params")
            if config is None:  # `args=args`: the command line names the file
                self._add("deepspeed", node, Precision.UNKNOWN, None)
            else:
                self._add_deepspeed(node, config)

    def _add_deepspeed(self, call: cst.Call, config: cst.BaseExpression) -> None:
        bound = self._value_of(config)  # the dict literal itself, or the one a name holds
        if isinstance(bound, cst.Dict):
            self._add("deepspeed", call, *_dict_precision(bound), config=bound)
            return
        spelled = literal(config)
        read = self.read_config(spelled) if isinstance(spelled, str) and self.read_config else None
        if read is None:
            self._add("deepspeed", call, Precision.UNKNOWN, None)
            return
        path, contents = read
        self._add("deepspeed", call, *deepspeed_dict_precision(contents), config_file=path)

    def _add(self, framework, call, precision, spelled, **where) -> None:
        bfloat16_only = None
        if _pins_cpu(framework, call):
            bfloat16_only = "this call keeps training on the CPU, where float16 is slow or refused"
        elif framework in ("lightning", "fabric"):
            strategy = self._construction(keyword_value(call, "strategy"))
            name = (dotted_name(strategy.func) or "").rsplit(".", 1)[-1] if strategy else ""
            if name in _BFLOAT16_STRATEGIES:
                bfloat16_only = f'Lightning refuses "16-mixed" with its {name}'
        self.found.append(
            FrameworkSetup(
                framework,
                call,
                precision,
                self.scope,
                bfloat16_only=bfloat16_only,
                pins_cpu=_pins_cpu(framework, call),
                spelled=spelled,
                **where,
            )
        )


# The keyword, and its literal value, by which each framework's set-up call
# keeps training on the CPU.
_CPU_PINS = {
    "accelerate": (("cpu", True),),
    "lightning": (("accelerator", "cpu"),),
    "fabric": (("accelerator", "cpu"),),
    "transformers": (("use_cpu", True), ("no_cuda", True)),
}


# Lightning strategies whose mixed precision can only be bfloat16: its
# connector accepts "32-true", "bf16-mixed", "bf16-true", "16-true" there.
_BFLOAT16_STRATEGIES = frozenset({"ModelParallelStrategy"})


def _pins_cpu(framework: str, call: cst.Call) -> bool:
    for keyword, value in _CPU_PINS.get(framework, ()):
        given = keyword_value(call, keyword)
        if given is not None and literal(given) == value:
            return True
    return False


def find_framework_setups(
    module: cst.Module, imports: ImportMap, read_config: ConfigReader | None = None
) -> list[FrameworkSetup]:
    """Every framework set-up call of the module, in source order."""
    finder = _SetupFinder(imports, read_config)
    finder.walk(module)
    return finder.found
