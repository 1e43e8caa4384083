"""The autocast regions a training step opens, and what they say about precision.

A region here is a ``with`` statement of the step block (at any depth of its
if/with/try) with an autocast item; each finder decides what ``enabled=False``
means for it.  Only what the call spells counts:
a device or dtype held in a variable is chosen at run time and not guessed at.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Callable, Sequence

import libcst as cst

from amplint.analysis.autocast import ANY_AUTOCAST, disabled, keyword_value, spelled_device_type
from amplint.analysis.imports import ImportMap
from amplint.analysis.statements import calls_in_line, method_name, name_use
from amplint.analysis.forward import DATA_FUNCTIONS, DATA_METHODS, feeding_region
from amplint.analysis.steps import TrainingStep
from amplint.analysis.visitor import Visitor, descendants
from amplint.diagnostics import Span

FLOAT16 = {"torch.float16", "torch.half"}


def literal_dtype(value: cst.BaseExpression, imports: ImportMap, scope) -> str | None:
    """ "float16" or "bfloat16" for a dtype spelled as torch's, else None."""
    resolved = imports.resolve(value, scope)
    if resolved in FLOAT16:
        return "float16"
    return "bfloat16" if resolved == "torch.bfloat16" else None


def autocast_dtype(call: cst.Call, called: str, imports: ImportMap, scope) -> str | None:
    """The 16-bit dtype the autocast `call` (resolved to `called`) selects: the
    one it spells, else its device's default, float16 on CUDA and bfloat16 on
    the CPU.  None for a dtype or device held in a variable.  Whether the call
    is enabled at all is each caller's question."""
    dtype = keyword_value(call, "dtype")
    if dtype is not None:
        return literal_dtype(dtype, imports, scope)
    if called.startswith("torch.cuda."):
        return "float16"
    if called.startswith("torch.cpu."):
        return "bfloat16"
    return {"cuda": "float16", "cpu": "bfloat16"}.get(spelled_device_type(call) or "")


@dataclass(frozen=True, eq=False)
class StepRegion:
    """``with autocast(...)`` inside a training step."""

    block: cst.With
    call: cst.Call  # the autocast item
    called: str  # what the call resolves to: "torch.autocast", "torch.cuda.amp.autocast"
    order: int  # the with-statement's place in TrainingStep.statements


def step_regions(step: TrainingStep, imports: ImportMap) -> list[StepRegion]:
    """Every autocast item of the step's with-statements, in program order;
    items with a literal ``enabled=False`` (which end autocast) included."""
    found = []
    for order, statement in enumerate(step.statements):
        if isinstance(statement, cst.With):
            found += _autocast_items(statement, order, imports, step)
    return found


def _autocast_items(
    block: cst.With, order: int, imports: ImportMap, step: TrainingStep
) -> list[StepRegion]:
    """The autocast items of `block`, each a region at `order`."""
    found = []
    for item in block.items:
        call = item.item
        if isinstance(call, cst.Call):
            called = imports.resolve(call.func, step.enclosing_scope)
            if called in ANY_AUTOCAST:
                found.append(StepRegion(block, call, called, order))
    return found


def selects_cuda_float16(region: StepRegion, imports: ImportMap, scope) -> bool:
    """Whether the region is certainly CUDA autocast in float16: CUDA's default
    dtype, or ``dtype=torch.float16`` spelled out, on a device spelled "cuda"."""
    call, called = region.call, region.called
    if disabled(call):
        return False
    if called.startswith("torch.cpu."):
        return False
    if not called.startswith("torch.cuda.") and spelled_device_type(call) != "cuda":
        return False
    return autocast_dtype(call, called, imports, scope) == "float16"


# A loss scaler by any name: GradScaler, apex's scale_loss, a hand-rolled one.
# A module that mentions one may scale where amplint cannot see it.
_SCALING = re.compile(r"scaler|scale_loss|loss_scal", re.I)


@dataclass(frozen=True, eq=False)
class UnscaledFloat16:
    """A training step that backpropagates from float16 autocast with no scaler."""

    step: TrainingStep
    region: StepRegion  # the first float16 region the backward follows


def find_unscaled_float16(
    steps: list[TrainingStep],
    imports: ImportMap,
    text: str,
    span: Callable[[cst.CSTNode], Span],
) -> list[UnscaledFloat16]:
    """`text`: the module's code (comments and strings blanked, lines kept);
    `span`: where a node is in it."""
    # The lines that name a loss scaler, by any name.
    scaling = [number for number, line in enumerate(text.splitlines(), 1) if _SCALING.search(line)]
    found = []
    for step in steps:
        if not step.backwards or any(s.has_closure or s.scaler for s in step.steps):
            continue
        if scaling:
            after = _bound_after(step, span)
            if any(line not in after for line in scaling):
                continue  # a scaler the step may use where amplint cannot see it
        for region in step_regions(step, imports):
            if selects_cuda_float16(region, imports, step.enclosing_scope) and any(
                region.order < b.order and not step.exclusive(region.order, b.order)
                for b in step.backwards
            ):
                found.append(UnscaledFloat16(step, region))
                break
        else:
            # `def step(loss, optimizer)` called with a loss its callers compute
            # under autocast: their region is the one the backward follows.
            region = next(
                (
                    region
                    for region in caller_regions(step, imports)
                    if selects_cuda_float16(region, imports, step.enclosing_scope)
                ),
                None,
            )
            if region is not None:
                found.append(UnscaledFloat16(step, region))
    return found


def caller_regions(step: TrainingStep, imports: ImportMap) -> list[StepRegion]:
    """The autocast items in the code that calls a step function given its
    loss (TrainingStep.amp_callers), each ordered before the step's statements."""
    found = []
    for holder in step.amp_callers:
        for statement in descendants(holder):
            if isinstance(statement, cst.With):
                found += _autocast_items(statement, -1, imports, step)
    return found


def _bound_after(step: TrainingStep, span: Callable[[cst.CSTNode], Span]) -> range:
    """The lines after the step's loop to the end of its scope (the function,
    or the module: a script's rest, a notebook's later cells): a scaler named
    only there is made after the loop has run, and scales nothing in it."""
    if step.outermost_loop is None:
        return range(0)
    scope = step.function
    end = span(scope).end_line if scope is not None else sys.maxsize
    return range(span(step.outermost_loop).end_line + 1, end + 1)


@dataclass(frozen=True, eq=False)
class ForwardOutsideAutocast:
    """An autocast block that computes only the loss, from what a model call
    above it computed in full precision: the forward pass gets no speedup."""

    step: TrainingStep
    block: cst.With
    forward: tuple[cst.BaseStatement, ...]  # the statements above it that run the model
    adjacent: bool  # they end right above the block (what a fix may move into it)


def find_forwards_outside_autocast(
    steps: list[TrainingStep], imports: ImportMap
) -> list[ForwardOutsideAutocast]:
    found = []
    for step in steps:
        if not step.backwards or not step.model_statements:
            continue

        def runs_model(node: cst.CSTNode, step: TrainingStep = step) -> bool:
            return id(node) in step.model_statements

        losses = _backpropagated_names(step)
        body = step.block.body
        for region in step_regions(step, imports):
            block = region.block
            if disabled(region.call) or block not in body:
                continue
            inner = list(block.body.body)
            # The block binds the backpropagated loss and nothing else.
            if len(inner) != 1 or not (name_use(inner[0]).bound & losses):
                continue
            top = body.index(block)
            reads = name_use(inner[0]).read
            forward = feeding_region(body, reads, top, 0, runs_model)
            if forward is None:
                continue
            adjacent = body.index(forward.last) == top - 1
            found.append(ForwardOutsideAutocast(step, block, forward.statements, adjacent))
            break
    return found


# Calls that cast on purpose: a loss computed on `outputs.float()` runs in
# float32 by the author's choice, not by forgetting the region.
_DELIBERATE_CASTS = re.compile(r"\.(float|double)\(\)|float32|float64|\.to\(\s*torch\.float\b")
# Losses that raise under CUDA autocast: moving one into a region breaks it.
_UNSAFE_LOSS_TEXT = re.compile(r"BCELoss\(|binary_cross_entropy\(")
# Methods that only read or reshape a result: no arithmetic worth a region.
_INERT_METHODS = DATA_METHODS | {"item", "size", "dim", "numel", "tolist"}


@dataclass(frozen=True, eq=False)
class LossOutsideAutocast:
    """The loss computed right after an autocast block, from what it produced."""

    block: cst.With
    moved: tuple[cst.SimpleStatementLine, ...]  # the block's followers, the loss last
    loss: cst.SimpleStatementLine


def _backpropagated_names(step: TrainingStep) -> set[str]:
    names: set[str] = set()
    for backward in step.backwards:
        loss = backward.loss
        if isinstance(loss, cst.Call) and method_name(loss) == "scale" and loss.args:
            loss = loss.args[0].value  # scaler.scale(loss)
        names |= name_use(loss).read
    return names


class _ComputeCall(Visitor):
    """Whether an expression calls anything but data moves and result reads."""

    def __init__(self) -> None:
        self.found = False

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value in _INERT_METHODS:
            return
        if isinstance(func, cst.Name) and func.value in DATA_FUNCTIONS:
            return
        self.found = True


def _computes(statement: cst.BaseStatement) -> bool:
    finder = _ComputeCall()
    finder.walk(statement)
    return finder.found


def find_losses_outside_autocast(
    steps: list[TrainingStep], imports: ImportMap, text: str
) -> list[LossOutsideAutocast]:
    if _UNSAFE_LOSS_TEXT.search(text):
        return []
    found = []
    for step in steps:
        losses = _backpropagated_names(step)
        blocks = {
            id(region.block)
            for region in step_regions(step, imports)
            if not disabled(region.call) and len(region.block.items) == 1
        }
        if not losses or not blocks:
            continue
        for suite in step.suites():
            for index, statement in enumerate(suite):
                if id(statement) in blocks and isinstance(statement.body, cst.IndentedBlock):
                    moved = _loss_after(statement, suite[index + 1 :], losses)
                    if moved:
                        found.append(LossOutsideAutocast(statement, moved, moved[-1]))
    return found


def _loss_after(
    block: cst.With,
    followers: Sequence[cst.BaseStatement],
    losses: set[str],
) -> tuple[cst.SimpleStatementLine, ...]:
    """The run of simple statements after `block` up to one that binds a
    backpropagated loss from what the block computed; empty if there is none."""
    produced = name_use(block.body).bound
    run: list[cst.SimpleStatementLine] = []
    for statement in followers:
        if not isinstance(statement, cst.SimpleStatementLine) or any(
            method_name(call) in ("backward", "step", "zero_grad")
            for call in calls_in_line(statement)
        ):
            return ()
        run.append(statement)
        use = name_use(statement)
        if use.read & produced:
            produced = produced | use.bound  # `logits = head(features)` carries it on
        if use.bound & losses:
            code = cst.Module([]).code_for_node(statement)
            if use.read & produced and _computes(statement) and not _DELIBERATE_CASTS.search(code):
                return tuple(run)
            return ()
    return ()
