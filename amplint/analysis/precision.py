"""Precision provenance and float16 hazards: before any AMP is written, is the
step FP32 end to end, and can its forward pass live in float16?

A rewrite to AMP changes a program's numerics, so it is written only where
both answers allow it.  `provenance` names what already manages the step's
precision: parameters made or cast in low precision, the program's own
precision switch, float32 kept on purpose where autocast would undo it, apex
still initialised, gradients sanitised by hand, an object of the program
owning a GradScaler.  `float16_hazard` names what float16 cannot carry in the
code autocast would cover: the log of a sigmoid, probabilities fed to BCELoss,
state the forward pass accumulates and multiplies by, fill values and Gram
matrices past float16's range.  bfloat16, with float32's range, is still
written where only a float16 hazard stands in the way; `low_precision_hazard`
names what neither carries (the log of 1 - tanh², where tanh rounds to 1), and
`bfloat16_obstacle` what bfloat16 alone cannot (NumPy, which has no bfloat16).

Everything is read from code (comments and strings blanked, so positions and
lines stay: analysis/code_text.py), in the step's module and in the modules
of its program that it imports (where its model is defined).  Each answer is
one line in the user's own names, saying what to do instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Callable, Iterator

import libcst as cst

from amplint.analysis.code_text import code_only
from amplint.analysis.imports import ImportMap, dotted_name
from amplint.analysis.scopes import ScopedVisitor
from amplint.analysis.statements import method_name, name_use
from amplint.analysis.visitor import Visitor, descendants, holds

if TYPE_CHECKING:
    from amplint.analysis import ModuleFacts
    from amplint.analysis.steps import TrainingStep

FLOAT16_MAX = 65504.0


@dataclass(frozen=True)
class ProgramCode:
    """One module's code as the analysis reads it: `text` is code only, and
    `lines` the source lines quoted back to the user."""

    where: str  # "" for the step's own module, else its path from the project root
    text: str
    lines: tuple[str, ...]

    def quote(self, offset: int) -> tuple[str, str]:
        """The source line holding `offset`, stripped, and where it is."""
        number = self.text.count("\n", 0, offset) + 1
        line = self.lines[number - 1].strip() if number <= len(self.lines) else ""
        place = f"{self.where}:{number}" if self.where else f"line {number}"
        return line, place

    @cached_property
    def names(self) -> frozenset[str]:
        """Every word the code spells: what `_reaches` asks of the step's module."""
        return frozenset(re.findall(r"\w+", self.text))


def program_code(facts: ModuleFacts) -> list[ProgramCode]:
    """The step's module, then each project module of its program that spells
    something this analysis looks for (a model module); made once per module
    (ModuleFacts.program_code)."""
    found = [ProgramCode("", facts.code_text, tuple(facts.text.splitlines()))]
    if facts.project is None:
        return found
    for source in facts.project.program_modules():
        if not _MAY_MATTER.search(source.text):
            continue  # the cheap test first: most modules never spell any of it
        found.append(
            ProgramCode(
                facts.project.relative(source.path),
                code_only(source.text),
                tuple(source.text.splitlines()),
            )
        )
    return found


_MAY_MATTER = re.compile(
    r"bfloat16|float16|half|dtype|fp16|bf16|amp|precision|sigmoid|GradScaler|\.float\(|"
    r"nan_to_num|_\(",
)


# ---------------------------------------------------------------- provenance

# A cast of a whole value to a low-precision dtype: `.half()`, `.bfloat16()`,
# `.to(torch.bfloat16)`, `.to(device, dtype=torch.float16)`.
_LOW_DTYPE = r"torch\.(?:bfloat16|float16|half)\b"
_CAST = re.compile(
    rf"\.(?:half|bfloat16)\(\s*\)|\.to\((?:[^()\n]|\([^()\n]*\))*?{_LOW_DTYPE}[^()\n]*\)"
)
# Parameters made in a dtype of the program's choosing: a layer or tensor
# built with `dtype=` anything but float32 (a configuration's `cfg["dtype"]`
# included), a model loaded with `torch_dtype=` other than float32, and a
# default dtype set for every tensor made after it.
_NOT_FLOAT32 = r"(?!torch\.float32\b|torch\.float\b|None\b)"
_LAYER_DTYPE = re.compile(
    rf"\b(?:nn\.)?(?:Linear|Embedding|Conv[123]d|LayerNorm|RMSNorm|Bilinear|LSTM|GRU|"
    rf"MultiheadAttention|Parameter)\((?:[^()\n]|\([^()\n]*\))*\bdtype\s*=\s*{_NOT_FLOAT32}[\w\[\].]+"
)
_LOADED_DTYPE = re.compile(rf"[(,]\s*torch_dtype\s*=\s*{_NOT_FLOAT32}[\w\[\].]+")
_DEFAULT_DTYPE = re.compile(rf"\bset_default_dtype\(\s*{_NOT_FLOAT32}[\w\[\].]+")

# A precision switch of the program's own: a name whose last part is one of
# these words (`args.fp16`, `self.use_amp`, `cfg.mixed_precision`), tested by
# an `if` or handed to a call by keyword.  `precision` compared by size is a
# metric (`if precision > best:`), not a switch.
_SWITCH_WORDS = {"fp16", "bf16", "amp", "precision", "autocast", "apex"}
# Parts that make a word a switch only together (`half_precision`,
# `mixed_precision`; `mixed` alone is PEFT's mixed adapters), and parts that
# say the switch is about something else: DDP's fp16 gradient compression
# changes what is communicated, not what the model computes.
_SWITCH_PAIRS = {("half", "precision"), ("mixed", "precision")}
_NOT_A_SWITCH = {"compression", "compress", "comm", "fp32", "tf32", "float32", "matmul"}
_DOTTED = re.compile(r"\b[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*")
_IF_TEST = re.compile(r"\bif\b(?P<test>[^:\n]*)(?::|\belse\b)")
_KEYWORD_ARGUMENT = re.compile(
    r"[(,]\s*(?P<keyword>\w+)\s*=\s*(?P<value>[A-Za-z_][\w.]*)\s*[,)]"
)
_CONSTANTS = {"True", "False", "None"}
_ORDERING = re.compile(r"[<>]")

# Gradients cleaned by hand (`p.grad.nan_to_num_()`, `torch.nan_to_num(p.grad)`):
# the inf a GradScaler must see to skip a step is gone before it looks.
_SANITISED = re.compile(
    r"\.grad\b[\w.]*\.nan_to_num_?\(|nan_to_num_?\([^()\n]*\.grad\b"
)

# float32 kept on purpose in a forward pass: a matrix product of `.float()`
# operands.  Autocast casts a matmul's inputs to float16 whatever they are;
# only `autocast(enabled=False)` around it keeps it float32.
_FLOAT_OPERAND = r"[\w.\]\)]*\.(?:float|double)\(\s*\)"
_FLOAT32_PRODUCT = re.compile(
    rf"\b(?:matmul|bmm|mm|einsum|baddbmm)\((?:[^()\n]|\([^()\n]*\))*?{_FLOAT_OPERAND}"
    rf"|{_FLOAT_OPERAND}[^\n@]*?@|@\s*{_FLOAT_OPERAND}"
)

# A GradScaler an object keeps (`self.scaler = GradScaler(...)`).
_OWNED_SCALER = re.compile(r"^[ \t]+self\.(?P<attribute>\w+)\s*=\s*[\w.]*GradScaler\(", re.M)


def provenance(step: TrainingStep, facts: ModuleFacts) -> str | None:
    """What already manages the step's precision, as the one line AMP001
    gives for not rewriting it; None where the step is FP32 end to end.  The
    first reason found, in this order: apex, an object's own scaler, a
    Trainer's optimizer, the program's own switch or dtype, a cast reaching
    the step, float32 kept on purpose or gradients sanitised."""
    program = facts.program_precision
    if program.apex is not None:
        return program.apex
    for code in program.code:
        owned = _owned_scaler(code, program.own, step)
        if owned is not None:
            return owned
    trainer = _trainer_optimizer(step, facts)
    if trainer is not None:
        return trainer
    if program.chosen is not None:
        return program.chosen
    cast = _whole_cast(program, step)
    if cast is not None:
        line, place = cast
        return (
            f"the program casts to low precision itself (`{line}`, {place}): its "
            "parameters or inputs are half precision already, and a GradScaler cannot "
            "unscale half-precision gradients; keep it, or drop the cast and run fix again"
        )
    return program.kept


class ProgramPrecision:
    """What the analysis finds of a module's program whatever the step: made
    once per module (ModuleFacts.program_precision), each part when first
    asked, however many steps the module holds (asked per step, a file of
    400 training functions took eight times as long to check)."""

    def __init__(self, facts: ModuleFacts) -> None:
        self.facts = facts
        self.code = facts.program_code
        self.own = self.code[0]

    @cached_property
    def apex(self) -> str | None:
        """apex's `amp.initialize` still run here."""
        apex = _apex_initialised(self.facts)
        if apex is None:
            return None
        return (
            f"apex's `{apex}` still sets this program's precision: migrate it to "
            "torch.amp first (AMP203 does, or says what stops it), then fix rewrites "
            "what is left"
        )

    @cached_property
    def chosen(self) -> str | None:
        """The program's own precision switch, else parameters made in a dtype
        it chooses."""
        for code in self.code:
            switch = _own_switch(code, self.own)
            if switch is not None:
                name, line, place = switch
                return (
                    f"the program has its own precision switch (`{name}` in `{line}`, "
                    f"{place}): with it off the step is FP32 on purpose, and autocast "
                    "written over it would run whatever the switch says; use that switch"
                )
        for code in self.code:
            for pattern in (_LAYER_DTYPE, _LOADED_DTYPE, _DEFAULT_DTYPE):
                match = _first_reaching(pattern, code, self.own)
                if match is not None:
                    spelled = match.group(0)  # from its keyword, not the comma before it
                    line, place = code.quote(match.end() - len(spelled.lstrip("(, \t\n")))
                    return (
                        f"the parameters are made in the dtype the program chooses (`{line}`, "
                        f"{place}), not in float32: it runs in that precision already; make "
                        "them float32 to have autocast pick per operation"
                    )
        return None

    @cached_property
    def kept(self) -> str | None:
        """float32 kept on purpose around a matrix product, else gradients
        sanitised by hand."""
        for code in self.code:
            island = _first_reaching(_FLOAT32_PRODUCT, code, self.own)
            if island is not None:
                line, place = code.quote(island.start())
                return (
                    f"`{line}` ({place}) keeps a matrix product in float32 on purpose, and "
                    "autocast runs it in low precision whatever its inputs are: wrap it in "
                    '`torch.autocast("cuda", enabled=False)` first, then fix rewrites the step'
                )
        sanitised = _SANITISED.search(self.own.text)
        if sanitised is None:
            return None
        line, place = self.own.quote(sanitised.start())
        return (
            f"the gradients are sanitised by hand (`{line}`, {place}), which hides the "
            "inf a GradScaler must see to skip a step: remove it before adding AMP"
        )

    @cached_property
    def casts(self) -> list[tuple[int, str | None]]:
        """Each cast to float16 or bfloat16 in the step's module: its offset and
        the function holding it (None at module level)."""
        text = self.own.text
        if "16" not in text and ".half(" not in text:
            return []
        found = []
        for match in _CAST.finditer(text):
            enclosing = _enclosing_function(text, match.start())
            found.append((match.start(), None if enclosing is None else enclosing[0]))
        return found

    @cached_property
    def _bodies(self) -> dict[str, list[str]]:
        """The step's module's functions by name: each body's text."""
        text = self.own.text
        bodies: dict[str, list[str]] = {}
        for match in _DEF.finditer(text):
            bodies.setdefault(match.group("name"), []).append(
                text[match.end() : _block_end(text, match)]
            )
        return bodies

    def callers(self, name: str) -> set[str]:
        """`name` and the functions of the step's module that call it, directly
        or through others of them (by name: `f(` or `.f(`)."""
        found, frontier = {name}, [name]
        while frontier:
            called = re.compile(rf"(?<![\w]){re.escape(frontier.pop())}\(")
            for caller, texts in self._bodies.items():
                if caller not in found and any(called.search(body) for body in texts):
                    found.add(caller)
                    frontier.append(caller)
        return found

    @cached_property
    def float16_hazard(self) -> str | None:
        """What float16 cannot carry in the program's code."""
        for code in self.code:
            found = (
                float16_obstacle(code.text) or _log_of_sigmoid(code) or _accumulated_state(code)
            )
            if found is not None:
                return found
        return None

    @cached_property
    def low_precision_hazard(self) -> str | None:
        """What neither float16 nor bfloat16 carries in the program's code."""
        for code in self.code:
            if "tanh" in code.text:
                found = _log_of_tanh_complement(code)
                if found is not None:
                    return found
        return None

    @cached_property
    def trainers(self) -> dict[str, cst.Assign]:
        """The names the module binds to a transformers Trainer."""
        if "Trainer" not in self.facts.text:
            return {}
        names = _TrainerNames(self.facts.imports)
        names.walk(self.facts.module)
        return names.made


def _trainer_optimizer(step: TrainingStep, facts: ModuleFacts) -> str | None:
    """A step of the optimizer a transformers (or TRL) Trainer owns, by hand
    (`trainer.optimizer.step()`): the Trainer prepares it with its own mixed
    precision (Accelerate's AcceleratedOptimizer steps through its own
    GradScaler), so a second scaler around it unscales twice.  (A module that
    makes a Lightning Trainer is the framework's: its steps are not rewritten.)"""
    trainers = facts.program_precision.trainers
    if not trainers:
        return None
    for optimizer_step in step.steps:
        spelled = dotted_name(optimizer_step.optimizer) or facts.module.code_for_node(
            optimizer_step.optimizer
        )
        head, _, rest = spelled.partition(".")
        if head in trainers and rest.startswith("optimizer"):
            return (
                f"`{spelled}` is the optimizer of a transformers `{head}` "
                f"(line {facts.span(trainers[head]).line}), "
                "which prepares it with its own mixed precision (through its own GradScaler "
                "when fp16 is on): a second GradScaler would unscale its gradients twice; "
                "train with the trainer, or make an optimizer of your own for this loop"
            )
    return None


def trainer_optimizer_stepped_by_hand(facts: ModuleFacts) -> str | None:
    """Why a transformers Trainer of the module must not get float16 mixed
    precision: the module also steps the Trainer's optimizer by hand
    (`trainer.optimizer.step()`, a debugging loop after `trainer.train()`),
    where Accelerate's GradScaler would unscale gradients no one scaled."""
    for name in facts.program_precision.trainers:
        stepped = re.search(rf"(?<![\w.]){re.escape(name)}\.optimizer\.step\(", facts.code_text)
        if stepped is not None:
            return (
                f"`{name}.optimizer.step()` steps the Trainer's optimizer by hand: with fp16 on "
                "the Trainer prepares it with Accelerate's GradScaler, whose step unscales "
                "gradients that loop never scaled (1/65,536 of each update)"
            )
    return None


class _TrainerNames(ScopedVisitor):
    """The names bound to a transformers Trainer (`trainer = Trainer(...)`),
    each with its assignment."""

    def __init__(self, imports: ImportMap) -> None:
        from amplint.analysis.frameworks import HF_TRAINERS  # on demand: few files ask

        super().__init__()
        self.imports = imports
        self.trainers = HF_TRAINERS
        self.made: dict[str, cst.Assign] = {}

    def visit_Assign(self, node: cst.Assign) -> None:
        if not isinstance(node.value, cst.Call):
            return
        called = self.imports.resolve(node.value.func, self.scope)
        if called not in self.trainers:
            return
        for target in node.targets:
            if isinstance(target.target, cst.Name):
                self.made[target.target.value] = node


def _apex_initialised(facts: ModuleFacts) -> str | None:
    """`amp.initialize(...)` as spelled where apex's state is made in this
    module, or None.  A program migrated whole (AMP203) asks no more of it."""
    for use in facts.apex.uses:
        if use.target == "apex.amp.initialize" and use.call is not None:
            return facts.module.code_for_node(use.call.func) + "(...)"
    return None


# A cast to float16 alone: apex's own low precision.
_FLOAT16_CAST = re.compile(
    r"\.half\(\s*\)|\.to\((?:[^()\n]|\([^()\n]*\))*?torch\.(?:float16|half)\b[^()\n]*\)"
)


def switched_float16_cast(text: str) -> tuple[int, str] | None:
    """The first cast to float16 in `text` that the program's own precision
    switch decides (`enc = enc.half() if params.fp16 else enc`, or under `if
    args.fp16:`), as (line number, line); None where there is none.  Under
    apex such a cast met apex's casts wherever it ran (O1 patched every call,
    O2 made the model half); autocast, covering only the training steps, does
    not meet it in evaluation."""
    if ".half(" not in text and "float16" not in text and "torch.half" not in text:
        return None
    code = code_only(text)
    lines = code.splitlines()
    for match in _FLOAT16_CAST.finditer(code):
        number = code.count("\n", 0, match.start()) + 1
        if any(_switch_in(test) for test in _tests_over(lines, number - 1)):
            return number, text.splitlines()[number - 1].strip()
    return None


def _tests_over(lines: list[str], index: int) -> Iterator[str]:
    """The conditions that decide line `index`: its own (`x if test else y`)
    and those of the `if`/`elif` headers enclosing it, innermost first."""
    line = lines[index]
    for match in _IF_TEST.finditer(line):
        yield match.group("test")
    indent = len(line) - len(line.lstrip())
    for above in reversed(lines[:index]):
        stripped = above.lstrip()
        if not stripped:
            continue
        depth = len(above) - len(stripped)
        if depth < indent:
            indent = depth
            header = re.match(r"(?:el)?if\b(?P<test>.*):\s*$", stripped)
            if header is not None:
                yield header.group("test")
            if depth == 0:
                return


def _switch_in(test: str) -> str | None:
    """The precision switch a condition reads, as spelled, or None.  A call
    asks the machine (`torch.cuda.is_bf16_supported()`), a switch is a value
    the program set; an ordering compares a metric (`if precision > best:`)."""
    if _ORDERING.search(test):
        return None
    for name in _DOTTED.finditer(test):
        called = test[name.end() :].lstrip().startswith("(")
        if not called and _is_switch(name.group(0)):
            return name.group(0)
    return None


def _whole_cast(program: ProgramPrecision, step: TrainingStep) -> tuple[str, str] | None:
    """The first cast to float16 or bfloat16 in the step's module that can
    reach the step, quoted: at module level, in a model's `__init__` or
    `forward`, in the step's function, or in a function that calls it, at
    any remove (`main` casting the model it hands to a trainer whose `fit`
    calls the step).  A sibling function's cast (another test of a test
    class) is that function's business."""
    if not program.casts:
        return None
    reaching = {"__init__", "forward"}
    if step.function is not None:
        reaching |= program.callers(step.function.name.value)
    for offset, enclosing in program.casts:
        if enclosing is None or enclosing in reaching:
            return program.own.quote(offset)
    return None


_DEF = re.compile(r"^(?P<indent>[ \t]*)(?:async[ \t]+)?def[ \t]+(?P<name>\w+)", re.M)


def _enclosing_function(text: str, offset: int) -> tuple[str, str] | None:
    """The name and text of the innermost function whose body holds `offset`."""
    found = None
    for match in _DEF.finditer(text, 0, offset):
        end = _block_end(text, match)
        if end > offset:
            found = (match.group("name"), text[match.start() : end])
    return found


def _block_end(text: str, header: re.Match) -> int:
    """Where the block opened by the `def` line `header` matched ends."""
    indent = len(header.group("indent"))
    body = text.find("\n", header.end()) + 1 or len(text)
    for line in re.finditer(r"^([ \t]*)\S", text[body:], re.M):
        if len(line.group(1)) <= indent:
            return body + line.start()
    return len(text)


def _own_switch(code: ProgramCode, own: ProgramCode) -> tuple[str, str, str] | None:
    """The first precision switch of the program's own in `code`: the name,
    its line and where.  In another module, only one in a class or function
    the step's module names reaches the step (a library's other switches do
    not)."""
    if not _SWITCH_SPELLED.search(code.text):
        return None
    for match in _IF_TEST.finditer(code.text):
        name = _switch_in(match.group("test"))
        if name is not None and _reaches(code, match.start(), own):
            line, place = code.quote(match.start())
            return name, line, place
    # By keyword, a value the program decides (`Net(fp16=args.fp16)`); a
    # constant (`TrainingArguments(fp16=True)`) is a framework's setting.
    for match in _KEYWORD_ARGUMENT.finditer(code.text):
        keyword, value = match.group("keyword"), match.group("value")
        if keyword in ("enabled", "dtype", "opt_level") or value in _CONSTANTS:
            continue  # autocast's and apex's own arguments: the step is AMP already
        if code is not own:
            continue  # another module hands on what its caller decides
        if _is_switch(keyword) or _is_switch(value):
            line, place = code.quote(match.start("keyword"))
            return (value if _is_switch(value) else keyword), line, place
    return None


_SWITCH_SPELLED = re.compile("|".join(sorted(_SWITCH_WORDS)), re.I)
_TOP_LEVEL_DEFINITION = re.compile(
    r"^(?P<kind>class|def|async def)\s+(?P<name>\w+)", re.M
)


def _top_level_definition(code: ProgramCode, offset: int) -> re.Match | None:
    """The last top-level `class` or `def` above `offset`: the one holding it,
    unless it stands in module-level code below that definition."""
    found = None
    for found in _TOP_LEVEL_DEFINITION.finditer(code.text, 0, offset):
        pass
    return found


def _reaches(code: ProgramCode, offset: int, own: ProgramCode) -> bool:
    """Whether what stands at `offset` of `code` is the step's module's own, or
    in a top-level class or function of another module that it names."""
    if code is own:
        return True
    definition = _top_level_definition(code, offset)
    return definition is not None and definition.group("name") in own.names


def _first_reaching(pattern: re.Pattern, code: ProgramCode, own: ProgramCode) -> re.Match | None:
    """The first match of `pattern` in `code` that reaches the step (`_reaches`)."""
    return next((m for m in pattern.finditer(code.text) if _reaches(code, m.start(), own)), None)


def _is_switch(name: str) -> bool:
    parts = name.rsplit(".", 1)[-1].lower().split("_")
    if _NOT_A_SWITCH.intersection(parts):
        return False
    return bool(_SWITCH_WORDS.intersection(parts)) or any(
        pair in zip(parts, parts[1:]) for pair in _SWITCH_PAIRS
    )


def _owned_scaler(code: ProgramCode, own: ProgramCode, step: TrainingStep) -> str | None:
    """A class of the program that keeps a GradScaler of its own, when the step
    is not one of its methods: the program runs its AMP through that object."""
    if "GradScaler" not in code.text:
        return None
    own_class = step.class_def.name.value if step.class_def is not None else None
    for match in _OWNED_SCALER.finditer(code.text):
        holder = _top_level_definition(code, match.start())
        if holder is None or holder.group("kind") != "class":
            continue
        name = holder.group("name")
        if (code is own and name == own_class) or not _reaches(code, match.start(), own):
            continue
        _, place = code.quote(holder.start())
        return (
            f"`{name}` ({place}) keeps a GradScaler of its own "
            f"(`self.{match.group('attribute')}`): the program runs its mixed precision "
            "through that object; turn AMP on there rather than beside it"
        )
    return None


# ------------------------------------------------------------ float16 hazards

# The log of a sigmoid written out: float16's sigmoid is 0 below a logit of
# about -16.6 (its smallest value is 6e-8), so the log is -inf.
_LOG_OF_SIGMOID = re.compile(
    r"\blog\(\s*(?:1\s*-\s*)?(?:torch\.|F\.|nn\.functional\.)?sigmoid\("
    r"|\.sigmoid\(\s*\)\s*\.log\(\s*\)"
)
_SIGMOID_CALL = re.compile(r"\bsigmoid\(")
_THEN_LOG = re.compile(r"\s*\.log\(\s*\)")
_BOUND_TO_SIGMOID = re.compile(r"^[ \t]*(?P<name>\w+)\s*=\s*[^\n]*\bsigmoid\(", re.M)

# State a forward pass accumulates (a moving-average codebook, updated in
# place under no_grad) and multiplies by.
_IN_PLACE = re.compile(
    r"\bself\.(?P<name>\w+)(?:\.data)?\.(?:mul_|add_|copy_|lerp_|addcmul_|div_|sub_)\("
)

# Fill values past float16's range (`masked_fill(mask, -1e10)`), which raise
# once the scores they fill are float16.
_FILL_VALUE = re.compile(r"masked_fill_?\([^()]*,\s*(-?\s*\d[\d.]*(?:[eE][+-]?\d+)?)\s*\)")
# Gram matrices of style transfer sum products over whole feature maps: in
# float16 they overflow to inf, every step is skipped and nothing trains.
_GRAM = re.compile(r"\bgram(?:_matrix|\b)", re.I)
# The same computed without the word: a feature map reshaped to (channels,
# pixels) by a statement of its own (`f = f.view(c, h * w)`) times its own
# transpose (`torch.mm(f, f.t())`).  A product of an embedding with itself
# (SimCLR's similarities of normalised vectors) is no such reshape, and small.
_SELF_PRODUCT = re.compile(
    r"(?:\b(?:torch\.)?(?:mm|bmm|matmul)\(\s*(?P<a>\w+)\s*,\s*(?P=a)"
    r"|\b(?P<b>\w+)\s*@\s*(?P=b)"
    r"|\b(?P<c>\w+)\.(?:mm|bmm|matmul)\(\s*(?P=c))"
    r"\s*\.\s*(?:t\(\s*\)|T\b|mT\b|transpose\([^()]*\))"
)


def float16_hazard(step: TrainingStep, facts: ModuleFacts) -> str | None:
    """What float16 cannot carry in the step's forward pass or its model, as
    one line; None where nothing is seen.  bfloat16 has none of these."""
    if step.unsafe_loss is not None:
        return (
            f"{step.unsafe_loss} takes probabilities, which float16 rounds to 0 or 1 near "
            "the ends (a confident classifier, a discriminator, a decoder's pixels get "
            "there): BCE's gradient there is 1e12, inf in float16, and the GradScaler skips "
            "those steps (a GAN collapses); return logits and use nn.BCEWithLogitsLoss, or use "
            "`--dtype bfloat16`"
        )
    return facts.program_precision.float16_hazard


def low_precision_hazard(facts: ModuleFacts) -> str | None:
    """What neither float16 nor bfloat16 carries in the forward pass of the
    module's steps, as one line; None where nothing is seen."""
    return facts.program_precision.low_precision_hazard


# The log-probability correction of a tanh-squashed Gaussian (SAC's actor):
# `log(1 - tanh(x)**2 + eps)`.  tanh rounds to 1 beyond |x| ~ 3 in bfloat16
# and ~ 4.2 in float16, so the log is log(eps).
_TANH_BOUND = re.compile(r"^[ \t]*(?P<name>\w+)\s*=\s*[^\n]*\btanh\(", re.M)
_LOG_OF_TANH_COMPLEMENT = re.compile(
    r"\blog\([^\n]*\b1\s*-\s*(?:torch\.|F\.)?tanh\((?:[^()\n]|\([^()\n]*\))*\)"
    r"\s*(?:\.pow\(\s*2\s*\)|\*\*\s*2)"
)


def _log_of_tanh_complement(code: ProgramCode) -> str | None:
    match = _LOG_OF_TANH_COMPLEMENT.search(code.text) or _used_after_binding(
        code.text,
        _TANH_BOUND,
        lambda name: rf"\blog\([^\n]*\b1\s*-\s*{name}"
        rf"(?:\.pow\(\s*2\s*\)|\s*\*\*\s*2|\s*\*\s*{name}\b)",
    )
    if match is None:
        return None
    line, place = code.quote(match.start())
    return (
        f"`{line}` ({place}) takes the log of 1 - tanh², and tanh rounds to 1 in low "
        "precision (beyond |x| of about 3 in bfloat16, 4.2 in float16): the log is then "
        "the log of its epsilon, a bias of some 14 in the log-probability that SAC's "
        "entropy tuning follows; compute it in float32 (`.float()` before the tanh), or "
        "as `2 * (math.log(2) - x - F.softplus(-2 * x))`"
    )


def _used_after_binding(
    text: str, binding: re.Pattern, use: Callable[[str], str]
) -> re.Match | None:
    """The first use (the pattern `use` makes of a name, escaped) of a name
    that `binding` binds (its group `name`), after the binding: `p =
    torch.sigmoid(x)` then `torch.log(p)`."""
    for bound in binding.finditer(text):
        found = re.compile(use(re.escape(bound.group("name")))).search(text, bound.end())
        if found is not None:
            return found
    return None


def _log_of_sigmoid(code: ProgramCode) -> str | None:
    if "sigmoid" not in code.text:
        return None
    match = (
        _LOG_OF_SIGMOID.search(code.text)
        or _sigmoid_then_log(code.text)
        or _used_after_binding(
            code.text,
            _BOUND_TO_SIGMOID,
            lambda name: rf"\blog\(\s*(?:1\s*-\s*)?{name}\b|(?<![\w.]){name}\.log\(\s*\)",
        )
    )
    if match is None:
        return None
    line, place = code.quote(match.start())
    return (
        f"`{line}` ({place}) takes the log of a sigmoid, which is 0 in float16 below a "
        "logit of about -16.6: the loss is inf and the GradScaler skips the step; write "
        "`F.logsigmoid(x)` (`F.logsigmoid(-x)` for 1 - sigmoid), or use `--dtype bfloat16`"
    )


def _sigmoid_then_log(text: str) -> re.Match | None:
    """`torch.sigmoid(<any expression>).log()`: the call's own parentheses
    matched, however deep its argument nests."""
    for call in _SIGMOID_CALL.finditer(text):
        depth, position = 1, call.end()
        while depth and position < len(text) and text[position] != "\n":
            depth += {"(": 1, ")": -1}.get(text[position], 0)
            position += 1
        if depth == 0 and _THEN_LOG.match(text, position):
            return call
    return None


def _accumulated_state(code: ProgramCode) -> str | None:
    """A forward pass that updates an attribute in place and multiplies by it."""
    if "def forward" not in code.text:
        return None
    for body_start, body in _forward_bodies(code.text):
        for update in _IN_PLACE.finditer(body):
            name = re.escape(update.group("name"))
            product = re.search(
                rf"@\s*self\.{name}\b|self\.{name}\s*@|\b(?:matmul|mm|bmm|linear)\([^\n]*self\.{name}\b",
                body,
            )
            if product is None:
                continue
            _, place = code.quote(body_start + update.start())
            return (
                f"the forward pass updates `self.{update.group('name')}` in place ({place}, "
                "a running average) and multiplies by it: what it accumulates is not bounded "
                "by training, and past 65504 the product is inf in float16 (whether it gets "
                "there depends on the data: `amplint verify` shows it); use `--dtype bfloat16`"
            )
    return None


def _forward_bodies(text: str) -> Iterator[tuple[int, str]]:
    """(offset, text) of each `def forward` with its body, by indentation."""
    for match in _DEF.finditer(text):
        if match.group("name") == "forward":
            yield match.start(), text[match.start() : _block_end(text, match)]


@lru_cache(maxsize=16)
def float16_obstacle(text: str) -> str | None:
    """What in a module's own code float16 autocast would break, or None;
    `text` is code only (comments and strings blanked).  Asked by AMP001 for
    every step and by the framework rules (AMP002-AMP006), which set no step
    of their own; answered once per module."""
    for match in _FILL_VALUE.finditer(text):
        try:
            value = float(match.group(1).replace(" ", ""))
        except ValueError:
            continue
        if abs(value) > FLOAT16_MAX:
            return (
                f"`masked_fill(..., {match.group(1)})` cannot hold its value in float16 and "
                "raises under autocast: fill with `torch.finfo(x.dtype).min`, or use "
                "`--dtype bfloat16`"
            )
    feature_map = _gram_product(text)
    if feature_map is not None or _GRAM.search(text):
        spelled = f" (`{feature_map}` times its own transpose)" if feature_map else ""
        return (
            f"a Gram matrix{spelled} sums products over whole feature maps and overflows "
            "float16 (every step skipped): compute it in float32, or use `--dtype bfloat16`"
        )
    return None


def _gram_product(text: str) -> str | None:
    """The name of the first reshaped feature map multiplied by its own transpose."""
    for match in _SELF_PRODUCT.finditer(text):
        name = match.group("a") or match.group("b") or match.group("c")
        reshaped = rf"^[ \t]*{name}\s*=\s*[\w.]+\.(?:view|reshape)\((?:[^()\n]|\([^()\n]*\))*\)\s*$"
        if re.search(reshaped, text, re.M):
            return name
    return None


# ------------------------------------------------------------ bfloat16 obstacles


def bfloat16_obstacle(step: TrainingStep, facts: ModuleFacts) -> str | None:
    """What cannot take the bfloat16 a forward pass computes under autocast,
    as one line; None where nothing is seen."""
    numpy = _numpy_of_forward(step)
    if numpy is not None:
        return (
            f"`{facts.module.code_for_node(numpy)}` hands NumPy a tensor the forward pass "
            "computes, which is bfloat16 under autocast and NumPy cannot hold: call "
            "`.float()` before `.numpy()`, or use `--dtype float16`"
        )
    leaving = _forward_value_returned(step)
    if leaving is None or step.function is None:
        return None
    numpy = next(
        (call for call in _NumpyCalls.of(facts.module) if not holds(step.block, call)), None
    )
    if numpy is None:
        return None
    return (
        f"`{leaving}`, which the forward pass computes, leaves `{step.function.name.value}` "
        "(it returns it) as bfloat16 under autocast, and the module hands tensors to NumPy "
        f"(`{facts.module.code_for_node(numpy)}`), which cannot hold bfloat16: return "
        f"`{leaving}.float()`, or use `--dtype float16`"
    )


def _forward_values(step: TrainingStep) -> set[str]:
    """The names the step's forward regions bind, the backpropagated losses
    left out (autocast computes losses in float32)."""
    computed: set[str] = set()
    for region in step.regions:
        for statement in region.statements:
            computed |= name_use(statement).bound
    for backward in step.backwards:
        computed -= name_use(backward.loss).read
    return computed


def _forward_value_returned(step: TrainingStep) -> str | None:
    """A name a forward region binds, other than the loss, that the step's
    function returns (`return attention`, `return logits, attention`): a
    tensor that leaves the training in autocast's dtype."""
    if step.function is None:
        return None
    computed = _forward_values(step)
    for node in descendants(step.function.body):
        if isinstance(node, cst.Return) and node.value is not None:
            returned = sorted(name_use(node.value).read & computed)
            if returned:
                return returned[0]
    return None


def _numpy_of_forward(step: TrainingStep) -> cst.Call | None:
    """A `.numpy()` call in the step on what a forward region computed
    (`output.detach().cpu().numpy()`), inside the region or after it:
    NumPy has no bfloat16, so under bfloat16 autocast it raises.  The loss
    itself is left out: autocast computes losses in float32 (they are on its
    float32 list), so `loss.data.numpy()` for a log still works."""
    computed = _forward_values(step)
    finder = _NumpyCalls()
    finder.walk(step.block)
    for call in finder.calls:
        if name_use(call.func.value).read & computed:
            return call
    return None


class _NumpyCalls(Visitor):
    def __init__(self) -> None:
        self.calls: list[cst.Call] = []

    @classmethod
    def of(cls, node: cst.CSTNode) -> list[cst.Call]:
        finder = cls()
        finder.walk(node)
        return finder.calls

    def visit_Call(self, node: cst.Call) -> None:
        if method_name(node) == "numpy":
            self.calls.append(node)
