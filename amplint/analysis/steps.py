"""TrainingStep: where a module backpropagates a loss and steps an optimizer.

A training step is a block (a loop body or a function body) in which a loss goes
through ``.backward()`` and an optimizer goes through ``.step()``.  Statements in
``if`` / ``with`` / ``try`` inside the block belong to it; nested loops and
functions are blocks of their own.  Everything the AMP rules need hangs off it:
the forward region autocast wraps, the backward calls to scale, the optimizer
steps, gradient clipping, and the scope a GradScaler must live in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator, Sequence, Union

import libcst as cst

from amplint.analysis.autocast import UNSAFE_LOSS_CLASSES, UNSAFE_LOSS_FUNCTIONS
from amplint.analysis.imports import ImportMap, dotted_name
from amplint.analysis.scopes import Scope, ScopedVisitor
from amplint.analysis.statements import (
    Branches,
    GradEditFinder,
    calls_in_line,
    child_suites,
    exclusive,
    statements_in_order,
    method_name,
    name_use,
)
from amplint.analysis.visitor import Visitor

Loop = Union[cst.For, cst.While]
BlockOwner = Union[cst.For, cst.While, cst.FunctionDef]

CLIP_FUNCTIONS = {
    "torch.nn.utils.clip_grad_norm_",
    "torch.nn.utils.clip_grad_value_",
    "torch.nn.utils.clip_grad_norm",
    "torch.nn.utils.clip_grad.clip_grad_norm_",
    "torch.nn.utils.clip_grad.clip_grad_value_",
}
# Losses that raise "unsafe to autocast" under CUDA autocast.
AUTOCAST_UNSAFE_LOSSES = UNSAFE_LOSS_CLASSES | UNSAFE_LOSS_FUNCTIONS
# Receivers of `.backward(loss)` that belong to a framework owning precision.
FRAMEWORK_BACKWARD = {"accelerator", "booster", "engine", "model_engine", "fabric"}
# Calls that only move or reshape data: such statements feed the loss, but they
# are input preparation, not the forward pass.
DATA_METHODS = {
    "to",
    "cuda",
    "cpu",
    "float",
    "double",
    "long",
    "int",
    "bool",
    "view",
    "reshape",
    "squeeze",
    "unsqueeze",
    "permute",
    "contiguous",
    "flatten",
    "items",
    "keys",
    "values",
    "get",
    "pin_memory",
    "non_blocking",
    "detach",
    "clone",
    "type",
    # mode switches and bookkeeping on a model, not a forward pass
    "train",
    "eval",
    "requires_grad_",
    "zero_grad",
}
DATA_FUNCTIONS = {"next", "iter", "len", "zip", "enumerate", "range", "dict", "list", "tuple"}
# Libraries that never run a model: calling them samples noise or indices.
DATA_MODULES = ("numpy.", "random.", "math.")
_OPTIMIZER_NAME = re.compile(r"optim|^opt($|[_\dA-Z]|[dg]$)", re.I)
_SCHEDULER_NAME = re.compile(r"sched", re.I)
# How a GradScaler is recognised: by the name every example gives it.
SCALER_NAME = re.compile(r"scaler", re.I)
_ALREADY_AMP = re.compile(
    r"autocast|GradScaler|\.scale\(|scale_loss|\.half\(\)|bfloat16|float16"
    r"|\b(loss|grad|amp)_scaler\b|\bscaler\.(scale|step|update|unscale_)\("
)
# A model prepared by Accelerate, whose Accelerator owns mixed precision; one
# given a mixed_precision other than "no" runs in it already.
_ACCELERATE = re.compile(r"\bAccelerator\(|\.prepare\(")
_ACCELERATE_PRECISION = re.compile(r"mixed_precision\s*=\s*(?![\"']no[\"'])")
# An update by hand uses the gradient (`p.data.add_(p.grad, alpha=-lr)`); a
# target network's Polyak average (`t.data.copy_(tau * p.data + ...)`) does not.
_MANUAL_UPDATE = re.compile(
    r"\.data\.(add_|sub_|copy_)\([^\n]*grad|\.(add_|sub_)\([^)]*\.grad|-=\s*\w*lr"
)


# Skip reasons that are not reported. A step that already uses autocast or a
# scaler belongs to the misuse rules; a "step" whose loss comes from no model
# call (`p.sum().backward()` on a bare parameter in a test) is not training.
ALREADY_AMP = "already mixed precision"
NO_FORWARD = "no forward pass"
# detectron2's `SimpleTrainer` beside its `AMPTrainer(SimpleTrainer)`: the FP32
# class is the deliberate choice of a run that did not ask for AMP.
AMP_RELATIVE = "a subclass or sibling class is the mixed-precision version"
SILENT_SKIPS = (ALREADY_AMP, NO_FORWARD, AMP_RELATIVE)
# Bases too common to make two classes siblings.
_ROOT_BASES = {"object", "Module", "nn.Module", "torch.nn.Module", "ABC"}
# Tensor methods: calling one is arithmetic on a result, not running a model.
TENSOR_METHODS = {
    "sum",
    "mean",
    "pow",
    "exp",
    "log",
    "abs",
    "sqrt",
    "norm",
    "clamp",
    "max",
    "min",
    "softmax",
    "log_softmax",
    "sigmoid",
    "tanh",
    "relu",
    "matmul",
    "mm",
    "bmm",
    "item",
    "argmax",
    "gather",
    "masked_fill",
    "transpose",
    "t",
    "expand",
    "repeat",
    "type_as",
    "cos",
    "sin",
    "floor",
    "round",
    "cumsum",
    "add",
    "sub",
    "mul",
    "div",
    "neg",
    "sign",
    "chunk",
    "ravel",
    "std",
    "var",
    "prod",
    "any",
    "all",
    "topk",
    "sort",
    "argsort",
    "nonzero",
    "logsumexp",
    "split",
    "uniform_",
    "normal_",
    "fill_",
    "zero_",
    # shapes and fresh tensors: batch preparation, not the forward pass
    "size",
    "dim",
    "numel",
    "new_zeros",
    "new_ones",
    "new_full",
    "new_empty",
    "new_tensor",
}


@dataclass(frozen=True, eq=False)
class BackwardCall:
    call: cst.Call
    loss: cst.BaseExpression  # what is backpropagated: `loss` in `loss.backward()`
    top: int  # index of the step block's statement holding the call
    order: int  # position among the step block's statements, in program order
    statement: cst.BaseStatement | None = None  # the line holding the call


@dataclass(frozen=True, eq=False)
class OptimizerStep:
    call: cst.Call
    optimizer: cst.BaseExpression  # `optimizer`, `self.optimizer`, ...
    statement: cst.BaseStatement  # the line holding the call
    order: int  # position among the step block's statements, in program order
    has_closure: bool  # called with arguments: a closure, or not torch.optim at all
    # `scaler` for `scaler.step(optimizer)`: the GradScaler stepping `optimizer`.
    scaler: str | None = None


@dataclass(frozen=True, eq=False)
class GradEdit:
    statement: cst.BaseStatement  # a clip call's line, or a loop editing `.grad`
    order: int
    clip: cst.Call | None = None  # the `clip_grad_norm_(...)`-like call, if it is one


@dataclass(frozen=True, eq=False)
class UnsafeLossCall:
    """A call of a loss CUDA autocast refuses (`nn.BCELoss`), and its tensor
    inputs: those that run a model are computed inside autocast first."""

    statement: cst.BaseStatement  # the line holding the call
    call: cst.Call
    inputs: tuple[cst.BaseExpression, ...]  # the prediction and the target
    runs_model: tuple[bool, ...]  # per input


@dataclass(frozen=True, eq=False)
class ForwardRegion:
    first: cst.BaseStatement
    last: cst.BaseStatement
    statements: tuple[cst.BaseStatement, ...]
    # From this index on, `statements` compute an autocast-unsafe loss (None: no
    # such loss).  Those that call it, and the arithmetic after them, go outside
    # autocast on `.float()` inputs; those that run a model (`in_autocast`, one
    # flag per statement from `unsafe_from` on) stay in an autocast block.
    unsafe_from: int | None = None
    unsafe_calls: tuple[UnsafeLossCall, ...] = ()
    in_autocast: tuple[bool, ...] = ()
    # Inputs of the losses outside autocast that autocast computed (a plain
    # name bound in a block): they get `.float()`, as the model outputs do.
    float_inputs: tuple[cst.BaseExpression, ...] = ()
    # Why the unsafe loss cannot be moved after the block, if it cannot.
    unsafe_problem: str | None = None


@dataclass(eq=False)
class TrainingStep:
    block: cst.IndentedBlock
    owner: BlockOwner
    function: cst.FunctionDef | None  # the function the block is in (or is the body of)
    class_def: cst.ClassDef | None  # set when `function` is a method
    outermost_loop: cst.BaseStatement | None  # where a local scaler goes before
    enclosing_scope: Scope  # the scope whose code holds the step
    backwards: list[BackwardCall] = field(default_factory=list)
    steps: list[OptimizerStep] = field(default_factory=list)
    grad_edits: list[GradEdit] = field(default_factory=list)
    regions: list[ForwardRegion] = field(default_factory=list)
    # The block's statements in program order, through if/with/try (see `order`),
    # and the branch conditions each runs under.
    statements: list[cst.BaseStatement] = field(default_factory=list)
    paths: list[Branches] = field(default_factory=list)
    tops: list[int] = field(default_factory=list)  # the index in the block, per statement

    def exclusive(self, first_order: int, second_order: int) -> bool:
        """Whether the statements at these orders sit in opposite branches of one
        test (`if scaler is not None: ... else: ...`), so no iteration runs both."""
        return exclusive(self.paths[first_order], self.paths[second_order])

    def suites(self) -> Iterator[Sequence[cst.BaseStatement]]:
        """The step block's statement list and every one nested in its if/with/try."""
        for owner in (self.block, *self.statements):
            yield from child_suites(owner)

    @property
    def anchor(self) -> cst.Call:
        """The call a finding about this step points at."""
        return self.backwards[0].call if self.backwards else self.steps[0].call

    # Why amplint does not rewrite this step, in the user's terms; None if it can.
    skip: str | None = None
    # A loss in a forward region that raises under CUDA autocast, as spelled.
    unsafe_loss: str | None = None
    # The call that takes gradients inside the forward pass (a gradient penalty),
    # which a GradScaler would leave scaled.
    gradient_penalty: str | None = None


@dataclass(eq=False)
class StepScan:
    """What `find_training_steps` saw: steps, and backward calls with no optimizer."""

    steps: list[TrainingStep]
    manual_updates: list[BackwardCall]  # backward whose block updates parameters by hand
    # Whether the module makes a torch.optim optimizer itself: sets its training up.
    creates_optimizer: bool = False


class _StepFinder(ScopedVisitor):
    """Visits every loop and function body once, with the enclosing context."""

    def __init__(self, module: cst.Module, imports: ImportMap) -> None:
        super().__init__()
        self.module = module
        self.imports = imports
        self.optimizers = _optimizer_names(module, imports)
        self.steps: list[TrainingStep] = []
        self.manual_updates: list[BackwardCall] = []
        # Per scope: the function it is (None for a class or the module), the
        # class it is a method of, and the loops enclosing the visit position
        # within it, outermost first.
        self._functions: list[cst.FunctionDef | None] = []
        self._classes: list[cst.ClassDef | None] = []
        self._loops: list[list[cst.BaseStatement]] = []
        self._data_helpers: dict[str, bool] = {}

    # -- context ------------------------------------------------------------
    def enter_scope(self, scope: Scope) -> None:
        parent = self.scopes[-2] if len(self.scopes) > 1 else None
        if isinstance(scope, cst.FunctionDef):
            self._functions.append(scope)
            self._classes.append(parent if isinstance(parent, cst.ClassDef) else None)
        else:
            self._functions.append(None)
            self._classes.append(scope if isinstance(scope, cst.ClassDef) else None)
        self._loops.append([])
        if isinstance(scope, cst.FunctionDef) and isinstance(scope.body, cst.IndentedBlock):
            self._examine(scope.body, scope)

    def leave_scope(self, scope: Scope) -> None:
        self._functions.pop()
        self._classes.pop()
        self._loops.pop()

    def _visit_loop(self, node: Loop) -> None:
        self._loops[-1].append(node)
        if isinstance(node.body, cst.IndentedBlock):
            self._examine(node.body, node)

    def visit_For(self, node: cst.For) -> None:
        self._visit_loop(node)

    def leave_For(self, original_node: cst.For) -> None:
        self._loops[-1].pop()

    def visit_While(self, node: cst.While) -> None:
        self._visit_loop(node)

    def leave_While(self, original_node: cst.While) -> None:
        self._loops[-1].pop()

    # -- one block ----------------------------------------------------------
    def resolve(self, node: cst.BaseExpression) -> str | None:
        return self.imports.resolve(node, self.scope)

    def _is_optimizer(self, receiver: cst.BaseExpression) -> bool:
        name = dotted_name(receiver)
        if name is None:
            return False
        last = name.rsplit(".", 1)[-1]
        if _SCHEDULER_NAME.search(last) or name in self.optimizers.schedulers:
            return False
        return name in self.optimizers.names or bool(_OPTIMIZER_NAME.search(last))

    def _examine(self, block: cst.IndentedBlock, owner: BlockOwner) -> None:
        backwards: list[BackwardCall] = []
        steps: list[OptimizerStep] = []
        grad_edits: list[GradEdit] = []
        framework = False
        flat = list(statements_in_order(block.body))
        for order, (top, statement, _) in enumerate(flat):
            for call in calls_in_line(statement):
                method = method_name(call)
                receiver = call.func.value if method else None
                if method == "backward":
                    receiver_name = dotted_name(receiver) or ""
                    if receiver_name.rsplit(".", 1)[-1] in FRAMEWORK_BACKWARD:
                        framework = True
                    else:
                        backwards.append(BackwardCall(call, receiver, top, order, statement))
                elif method == "manual_backward":
                    framework = True
                elif method == "step" and call.args and is_scaler(receiver):
                    steps.append(
                        OptimizerStep(
                            call,
                            call.args[0].value,
                            statement,
                            order,
                            has_closure=len(call.args) > 1,
                            scaler=dotted_name(receiver),
                        )
                    )
                elif method == "step" and self._is_optimizer(receiver):
                    steps.append(
                        OptimizerStep(call, receiver, statement, order, has_closure=bool(call.args))
                    )
                elif self.resolve(call.func) in CLIP_FUNCTIONS:
                    grad_edits.append(GradEdit(statement, order, clip=call))
            if not isinstance(statement, (cst.If, cst.With, cst.Try)) and not any(
                edit.statement is statement for edit in grad_edits
            ):
                finder = GradEditFinder()
                finder.walk(statement)
                if finder.found:
                    grad_edits.append(GradEdit(statement, order))
        if framework:
            return
        if not backwards:
            # The backward lives in the closure the optimizer calls.  A step
            # forwarding a closure it was given (an optimizer wrapper's own
            # `step(self, closure)`) or a context id is not training.
            closures = [s for s in steps if s.has_closure and self._backpropagates(s.call)]
            if closures:
                self._add_step(block, owner, [], closures, [], flat)
            return
        if not steps:
            if _MANUAL_UPDATE.search(self.module.code_for_node(block)):
                self.manual_updates.append(backwards[0])
            return
        self._add_step(block, owner, backwards, steps, grad_edits, flat)

    def _add_step(self, block, owner, backwards, steps, grad_edits, flat) -> None:
        function = self._functions[-1]
        loops = self._loops[-1]
        step = TrainingStep(
            block=block,
            owner=owner,
            function=function,
            class_def=self._classes[-1] if function is not None else None,
            outermost_loop=loops[0] if loops else None,
            enclosing_scope=self.scope,
            backwards=backwards,
            steps=steps,
            grad_edits=[
                edit for edit in grad_edits if backwards and edit.order > backwards[0].order
            ],
            statements=[statement for _, statement, _ in flat],
            paths=[path for _, _, path in flat],
            tops=[top for top, _, _ in flat],
        )
        step.skip = self._skip_reason(step)
        self.steps.append(step)

    def _skip_reason(self, step: TrainingStep) -> str | None:
        # Where AMP set-up would show: around a loop step, its outermost loop; for
        # a step that is a function body, the outermost function holding it (timm's
        # nested `_backward` runs under a `loss_scaler` its parent set up). Another
        # loop of the same function may be AMP already and this one not.
        if step.owner is step.function:
            scope = next(f for f in self._functions if f is not None)
        else:
            scope = step.outermost_loop
        scope_code = self.module.code_for_node(scope)
        if any(s.scaler for s in step.steps) or _ALREADY_AMP.search(scope_code):
            return ALREADY_AMP
        aliases = self.optimizers.autocast_aliases
        if any(re.search(rf"(?<![\w.]){re.escape(alias)}\b", scope_code) for alias in aliases):
            return ALREADY_AMP  # `with ctx:` where `ctx = ... torch.autocast(...)`
        if step.class_def is not None and self._has_amp_relative(step.class_def):
            return AMP_RELATIVE
        setup = self._setup_code(step)
        if _ACCELERATE.search(setup) and "accelerat" in setup.lower():
            if _ACCELERATE_PRECISION.search(setup):
                return ALREADY_AMP
            return (
                "the model goes through Accelerate (`accelerator.prepare`), which owns its "
                'precision: set `Accelerator(mixed_precision="bf16")` (or "fp16") instead'
            )
        manual = _MANUAL_UPDATE.search(self.module.code_for_node(step.block))
        if manual is not None:
            return (
                f"parameters are also updated by hand (`{manual.group(0)}...`) on some path; "
                "a GradScaler would leave those gradients scaled"
            )
        for optimizer_step in step.steps:
            if optimizer_step.has_closure:
                call = self.module.code_for_node(optimizer_step.call)
                if self._passes_closure(optimizer_step.call):
                    return f"`{call}` cannot go through a GradScaler (it refuses closures)"
                return f"`{call}` is not a plain optimizer step"
        lower = 0
        parameters = (
            {param.name.value for param in step.function.params.params}
            if step.function is not None
            else set()
        )
        for index, backward in enumerate(step.backwards):
            if index and backward.top == step.backwards[index - 1].top:
                continue  # `if a: loss.backward() else: ...`: the same statement, one region
            if self._runs_model(backward.loss):
                shown = self.module.code_for_node(backward.loss)
                return f"the forward pass runs inside `{shown}.backward()`; bind the loss first"
            region = _forward_region(step.block.body, backward, lower, parameters, self._runs_model)
            if isinstance(region, str):
                # `if i % n_critic == 0:` around the generator's whole step: its
                # loss is computed in the same suite as its backward.
                region = self._forward_region_in_suite(step, backward, parameters) or region
            if isinstance(region, str):
                return region
            if not any(self._runs_model(statement) for statement in region.statements):
                return NO_FORWARD
            unsafe = self._autocast_unsafe_loss(region)
            if unsafe is not None:
                step.unsafe_loss = step.unsafe_loss or unsafe
                region = self._with_unsafe_loss_after(region)
            step.gradient_penalty = step.gradient_penalty or self._gradient_penalty(region)
            step.regions.append(region)
            lower = backward.top + 1
        return None

    def _gradient_penalty(self, region: ForwardRegion) -> str | None:
        """The call in the region that runs `torch.autograd.grad`, directly or
        through a def of the module (WGAN-GP's `compute_gradient_penalty`)."""
        calls = _AllCalls()
        for statement in region.statements:
            calls.walk(statement)
        for call in calls.found:
            if self.resolve(call.func) == "torch.autograd.grad":
                return self.module.code_for_node(call.func)
            if isinstance(call.func, cst.Name):
                helper = self.optimizers.module_functions.get(call.func.value)
                if helper is not None and _calls_autograd_grad(helper, self.resolve):
                    return call.func.value
        return None

    def _forward_region_in_suite(
        self, step: TrainingStep, backward: BackwardCall, parameters: set[str]
    ) -> ForwardRegion | None:
        """The forward region in the suite nested in the step block (an `if`
        arm, a `with` body) that holds the backward's line, if one is found there."""
        for suite in step.suites():
            if suite is step.block.body:
                continue
            index = next((i for i, s in enumerate(suite) if s is backward.statement), None)
            if index is None:
                continue
            inner = replace(backward, top=index)
            region = _forward_region(suite, inner, 0, parameters, self._runs_model)
            return region if isinstance(region, ForwardRegion) else None
        return None

    def _setup_code(self, step: TrainingStep) -> str:
        """The code that runs before the step's loop in its function (or module):
        where its model and optimizer are made and prepared.  A notebook's plain
        loop above its Accelerate version is set up without Accelerate."""
        scope = step.function or self.module
        if step.outermost_loop is None:
            return self.module.code_for_node(scope)
        body = scope.body.body if isinstance(scope, cst.FunctionDef) else scope.body
        loop = self.module.code_for_node(step.outermost_loop)
        before = []
        for statement in body:
            code = self.module.code_for_node(statement)
            if loop in code:
                break
            before.append(code)
        return "".join(before)

    def _has_amp_relative(self, class_def: cst.ClassDef) -> bool:
        """Whether a class of the module that subclasses `class_def`, or shares
        a base with it, uses autocast or a GradScaler."""
        name = class_def.name.value
        bases = _base_names(class_def) - _ROOT_BASES
        for other in self.optimizers.classes:
            if other is class_def:
                continue
            other_bases = _base_names(other)
            if (name in other_bases or bases & other_bases) and _ALREADY_AMP.search(
                self.module.code_for_node(other)
            ):
                return True
        return False

    def _passes_closure(self, call: cst.Call) -> bool:
        """`step(closure)`, `step(lambda: ...)`, `step(partial(f, ...))`, or a def's
        name; torch.distributed.optim steps take a context id instead."""
        argument = call.args[0].value
        if isinstance(argument, (cst.Lambda, cst.Call)):
            return True
        name = dotted_name(argument) or ""
        return "closure" in name or name in self.optimizers.functions

    def _backpropagates(self, call: cst.Call) -> bool:
        """Whether the closure `call` passes (a lambda, a def's name, or
        ``partial(f, ...)``) calls ``.backward()``."""
        argument = call.args[0].value
        if isinstance(argument, cst.Call) and argument.args:
            argument = argument.args[0].value  # partial(closure, ...)
        if isinstance(argument, cst.Lambda):
            finder = _BackwardFinder()
            finder.walk(argument)
            return finder.found
        return dotted_name(argument) in self.optimizers.backward_functions

    def _runs_model(self, node: cst.CSTNode) -> bool:
        """Whether `node` calls something other than torch itself, data moves
        and tensor arithmetic: a model, a loss module, a helper computing the loss."""
        finder = _ModelCallFinder(self)
        finder.walk(node)
        return finder.found

    def is_data_helper(self, name: str) -> bool:
        """Whether `name` is a module-level def that runs no model: `ring(n)`
        sampling points with torch, `sample_noise(b)`.  Calling one prepares a
        batch; the forward region does not stretch up to it."""
        if name not in self._data_helpers:
            self._data_helpers[name] = False  # a recursive helper counts as a model
            definition = self.optimizers.module_functions.get(name)
            if definition is not None:
                self._data_helpers[name] = not self._runs_model(definition.body)
        return self._data_helpers[name]

    def _autocast_unsafe_loss(self, region: ForwardRegion) -> str | None:
        for statement in region.statements:
            finder = _UnsafeLossFinder(self, self.optimizers.unsafe_losses)
            finder.walk(statement)
            if finder.found is not None:
                return finder.found
        return None

    def _with_unsafe_loss_after(self, region: ForwardRegion) -> ForwardRegion:
        """`region` with its unsafe-loss statements marked to go after the
        autocast block, as PyTorch's AMP notes do it: the model calls among the
        loss's inputs are computed in the block, the loss on `.float()` of them
        after it.  Or with the reason that cannot be done."""
        calls: list[UnsafeLossCall] = []
        unsafe_from = None
        in_autocast: list[bool] = []
        for index, statement in enumerate(region.statements):
            finder = _UnsafeLossFinder(self, self.optimizers.unsafe_losses)
            finder.walk(statement)
            if finder.found is not None and unsafe_from is None:
                unsafe_from = index
            if unsafe_from is None:
                continue
            in_autocast.append(not finder.calls and self._runs_model(statement))
            if finder.calls and not isinstance(statement, cst.SimpleStatementLine):
                return replace(region, unsafe_problem="its loss is computed in a compound statement")
            if finder.nested:
                return replace(
                    region, unsafe_problem="its loss is computed in a comprehension or lambda"
                )
            for call in finder.calls:
                inputs = _loss_inputs(call, every_positional=id(call) in finder.helpers)
                runs = tuple(self._runs_model(value) for value in inputs)
                calls.append(UnsafeLossCall(statement, call, inputs, runs))
        if (
            unsafe_from == 0
            and not any(in_autocast)
            and not any(any(c.runs_model) for c in calls)
        ):
            return replace(region, unsafe_problem="no model call would be left inside autocast")
        in_block = [True] * unsafe_from + in_autocast
        statements = region.statements
        from_blocks = set().union(
            *(name_use(s).bound for s, inside in zip(statements, in_block) if inside)
        )
        float_inputs = [
            value
            for call in calls
            for value, runs_model in zip(call.inputs, call.runs_model)
            if not runs_model and name_use(value).read & from_blocks
        ]
        seen = {id(value) for value in float_inputs} | {id(call.call) for call in calls}
        for statement, inside in zip(statements, in_block):
            if not inside:
                float_inputs += _loss_arguments_from(statement, from_blocks, seen)
        return replace(
            region,
            unsafe_from=unsafe_from,
            unsafe_calls=tuple(calls),
            in_autocast=tuple(in_autocast),
            float_inputs=tuple(float_inputs),
        )


def looks_like_optimizer(name: str) -> bool:
    """`optimizer`, `self.opt_g`, `optim`: named like one, whatever it holds."""
    return _OPTIMIZER_NAME.search(name.rsplit(".", 1)[-1]) is not None


def is_scaler(receiver: cst.BaseExpression) -> bool:
    """`scaler`, `self.grad_scaler`: a GradScaler, by the name every example uses."""
    name = dotted_name(receiver)
    return name is not None and SCALER_NAME.search(name.rsplit(".", 1)[-1]) is not None


class _BackwardFinder(Visitor):
    def __init__(self) -> None:
        self.found = False

    def visit_Call(self, node: cst.Call) -> None:
        if method_name(node) == "backward":
            self.found = True


class _ModelCallFinder(Visitor):
    def __init__(self, step_finder: _StepFinder) -> None:
        self.step_finder = step_finder
        self.found = False

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value in DATA_METHODS | TENSOR_METHODS:
            return
        if isinstance(func, cst.Name) and (
            func.value in DATA_FUNCTIONS
            or func.value in self.step_finder.optimizers.torch_aliases
            or self.step_finder.is_data_helper(func.value)
        ):
            return
        resolved = self.step_finder.resolve(func)
        if resolved is not None and resolved.startswith(DATA_MODULES):
            return
        if (
            resolved is None
            or not resolved.startswith("torch.")
            or resolved.startswith("torch.nn.functional.")
        ):
            self.found = True


class _UnsafeLossFinder(Visitor):
    """The calls in a statement to a loss that raises under CUDA autocast;
    `found` describes the first."""

    def __init__(self, step_finder: _StepFinder, unsafe_names: dict[str, str]) -> None:
        self.step_finder = step_finder
        self.unsafe_names = unsafe_names
        self.found: str | None = None
        self.calls: list[cst.Call] = []
        self.helpers: set[int] = set()  # ids of calls of project helpers, not of the loss
        self.nested = False  # one is inside a comprehension or a lambda
        self._scopes = 0

    def _enter(self, node: cst.CSTNode) -> None:
        self._scopes += 1

    def _leave(self, node: cst.CSTNode) -> None:
        self._scopes -= 1

    visit_Lambda = visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _enter
    leave_Lambda = leave_ListComp = leave_SetComp = leave_DictComp = leave_GeneratorExp = _leave

    def visit_Call(self, node: cst.Call) -> None:
        description = self._describe(node)
        if description is None:
            return
        self.calls.append(node)
        if "(it calls" in description:
            self.helpers.add(id(node))
        self.nested = self.nested or self._scopes > 0
        if self.found is None:
            self.found = description

    def _describe(self, node: cst.Call) -> str | None:
        func = (
            node.func.func if isinstance(node.func, cst.Call) else node.func
        )  # nn.BCELoss()(p, t)
        spelled = self.step_finder.module.code_for_node(func)
        qualified = self.unsafe_names.get(dotted_name(func) or "")
        if qualified is None and self.step_finder.resolve(func) in AUTOCAST_UNSAFE_LOSSES:
            qualified = self.step_finder.resolve(func)
        if qualified is not None:
            short = _short_loss_name(qualified)
            return f"`{spelled}`" if spelled == short else f"`{spelled}` ({short})"
        helper = self.step_finder.optimizers.unsafe_helpers.get(spelled)
        if helper is not None and isinstance(func, cst.Name):
            return f"`{spelled}` (it calls {helper})"
        return None


_LOSS_NAME = re.compile(r"loss|criterion", re.I)


def _loss_arguments_from(
    statement: cst.BaseStatement, names: set[str], seen: set[int]
) -> list[cst.BaseExpression]:
    """Plain-name arguments, bound in an autocast block, of the loss calls in
    `statement` (`auxiliary_loss(real_aux, labels)`) other than those in `seen`."""
    calls = _AllCalls()
    calls.walk(statement)
    found = []
    for call in calls.found:
        if id(call) in seen or not _LOSS_NAME.search(dotted_name(call.func) or ""):
            continue
        for arg in call.args:
            if isinstance(arg.value, cst.Name) and arg.value.value in names and not arg.star:
                found.append(arg.value)
    return found


def _calls_autograd_grad(function: cst.FunctionDef, resolve) -> bool:
    calls = _AllCalls()
    calls.walk(function)
    return any(resolve(call.func) == "torch.autograd.grad" for call in calls.found)


class _AllCalls(Visitor):
    def __init__(self) -> None:
        self.found: list[cst.Call] = []

    def visit_Call(self, node: cst.Call) -> None:
        self.found.append(node)


def _loss_inputs(call: cst.Call, every_positional: bool) -> tuple[cst.BaseExpression, ...]:
    """The prediction and the target of a loss call: its first two positional
    arguments, or `input=` / `target=`; for a helper computing the loss (a VAE's
    `loss_function(recon, x, mu, logvar)`) every positional argument.  Numbers
    and strings are no tensors."""
    positional = [arg.value for arg in call.args if arg.keyword is None and not arg.star]
    if not every_positional:
        positional = positional[:2]
    keywords = {
        arg.keyword.value: arg.value
        for arg in call.args
        if arg.keyword is not None and arg.keyword.value in ("input", "target")
    }
    inputs = positional + [keywords[k] for k in ("input", "target") if k in keywords]
    return tuple(
        value
        for value in inputs
        if not isinstance(value, (cst.Integer, cst.Float, cst.SimpleString, cst.Name))
        or isinstance(value, cst.Name)
        and value.value not in ("None", "True", "False")
    )


def _short_loss_name(qualified: str) -> str:
    """`torch.nn.functional.binary_cross_entropy` as users write it: `F.binary_cross_entropy`."""
    return qualified.replace("torch.nn.functional.", "F.").replace("torch.nn.", "nn.")


def _ends_forward_search(statement: cst.BaseStatement) -> bool:
    """Statements the forward region never reaches back over: another step's
    `backward` or `step` (which must stay outside autocast) and definitions.
    Anything else between the model call and the loss (`zero_grad`, logging, a
    profiling range, `if bad: continue`, a metric under `torch.no_grad()`) is
    harmless under autocast, and stopping there would leave the model call,
    the part that pays, outside the block."""
    if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
        return True
    finder = _StepCallFinder()
    finder.walk(statement)
    return finder.found


class _StepCallFinder(Visitor):
    """Does a statement call `.backward(...)` or `.step(...)` anywhere inside?"""

    def __init__(self) -> None:
        self.found = False

    def visit_Call(self, node: cst.Call) -> None:
        if method_name(node) in ("step", "backward"):
            self.found = True

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False


_FETCHES = (cst.For, cst.While, cst.Try)


def _forward_region(
    body: Sequence[cst.BaseStatement],
    backward: BackwardCall,
    lower: int,
    parameters: set[str],
    runs_model: Callable[[cst.CSTNode], bool],
) -> ForwardRegion | str:
    """The statements from the first that computes towards the loss to the one
    that binds it, all at the top level of the step block."""
    loss_names = name_use(backward.loss).read
    last = None
    for index in range(backward.top - 1, lower - 1, -1):
        use = name_use(body[index])
        if not use.bound & loss_names:
            continue
        if (
            isinstance(body[index], cst.If)
            and use.read & loss_names
            and not runs_model(body[index])
        ):
            # `if n_gpu > 1: loss = loss.mean()`: arithmetic on a loss computed
            # above, which stays outside autocast as in torch's recipe.
            continue
        last = index
        break
    if last is None:
        shown = cst.Module([]).code_for_node(backward.loss)
        if loss_names and loss_names <= parameters:
            return f"`{shown}` comes from the caller; autocast belongs where the forward pass runs"
        return f"cannot find where `{shown}` is computed in the same block as its backward"
    needed = set(name_use(body[last]).read)
    first = last
    for index in range(last - 1, lower - 1, -1):
        if _ends_forward_search(body[index]):
            break
        use = name_use(body[index])
        if use.bound & needed:
            needed |= use.read
            # Not just making or moving a batch; a loop or `try` that binds an
            # input (`try: x = next(it) except StopIteration: ...`) fetches data.
            if runs_model(body[index]) and not isinstance(body[index], _FETCHES):
                first = index
    statements = tuple(body[first : last + 1])
    return ForwardRegion(body[first], body[last], statements)


@dataclass
class _Optimizers:
    names: set[str]
    schedulers: set[str]
    unsafe_losses: dict[str, str]  # name bound to an autocast-unsafe loss -> its class
    functions: set[str]  # names of every def in the module: candidates for closures
    module_functions: dict[str, cst.FunctionDef]  # the defs at the module's top level
    # Module globals naming a torch callable: `Tensor = torch.cuda.FloatTensor
    # if cuda else torch.FloatTensor`, as GAN collections write it.
    torch_aliases: set[str]
    # Defs that call `.backward()` themselves or in a nested def: closures a
    # training step can hand to `optimizer.step`.
    backward_functions: set[str]
    # Defs that compute a loss which raises under CUDA autocast -> that loss.
    unsafe_helpers: dict[str, str] = field(default_factory=dict)
    created: bool = False  # some torch.optim optimizer is made in the module
    # Names bound to an autocast context or factory: `ctx = nullcontext() if cpu
    # else torch.autocast(...)`, `amp_autocast = partial(torch.autocast, ...)`.
    autocast_aliases: set[str] = field(default_factory=set)
    classes: list[cst.ClassDef] = field(default_factory=list)  # every class of the module


class _OptimizerCollector(ScopedVisitor):
    def __init__(self, imports: ImportMap) -> None:
        super().__init__()
        self.imports = imports
        self.found = _Optimizers(set(), set(), {}, set(), {}, set(), set())

    def enter_scope(self, scope: Scope) -> None:
        if isinstance(scope, cst.ClassDef):
            self.found.classes.append(scope)
        if isinstance(scope, cst.FunctionDef):
            self.found.functions.add(scope.name.value)
            if len(self.scopes) == 2:  # the module, then this def
                self.found.module_functions[scope.name.value] = scope

    def visit_Assign(self, node: cst.Assign) -> None:
        if _mentions_autocast(node.value):
            for target in node.targets:
                name = dotted_name(target.target)
                if name is not None:
                    self.found.autocast_aliases.add(name)
        if isinstance(self.scope, cst.Module) and self._names_torch(node.value):
            self.found.torch_aliases.update(
                target.target.value
                for target in node.targets
                if isinstance(target.target, cst.Name)
            )
        if not isinstance(node.value, cst.Call):
            return
        called = self.imports.resolve(node.value.func, self.scope) or ""
        for target in node.targets:
            name = dotted_name(target.target)
            if name is None:
                continue
            if called.startswith("torch.optim.lr_scheduler."):
                self.found.schedulers.add(name)
            elif called.startswith("torch.optim."):
                self.found.names.add(name)
                self.found.created = True
            elif called in AUTOCAST_UNSAFE_LOSSES:
                self.found.unsafe_losses[name] = called

    def _names_torch(self, value: cst.BaseExpression) -> bool:
        if isinstance(value, cst.IfExp):
            return self._names_torch(value.body) and self._names_torch(value.orelse)
        if not isinstance(value, (cst.Name, cst.Attribute)):
            return False
        return (self.imports.resolve(value, self.scope) or "").startswith("torch.")

    def visit_Call(self, node: cst.Call) -> None:
        called = self.imports.resolve(node.func, self.scope)
        if called in AUTOCAST_UNSAFE_LOSSES:
            # A loss helper: calling it runs a loss that raises under autocast.
            for scope in self.scopes:
                if isinstance(scope, cst.FunctionDef):
                    self.found.unsafe_helpers.setdefault(scope.name.value, _short_loss_name(called))
        if method_name(node) == "backward":
            self.found.backward_functions.update(
                scope.name.value for scope in self.scopes if isinstance(scope, cst.FunctionDef)
            )
        if method_name(node) == "zero_grad":
            name = dotted_name(node.func.value)
            if name is not None:
                self.found.names.add(name)


def _base_names(class_def: cst.ClassDef) -> set[str]:
    return {name for base in class_def.bases if (name := dotted_name(base.value)) is not None}


def _mentions_autocast(value: cst.BaseExpression) -> bool:
    finder = _AutocastMention()
    finder.walk(value)
    return finder.found


class _AutocastMention(Visitor):
    def __init__(self) -> None:
        self.found = False

    def visit_Name(self, node: cst.Name) -> None:
        self.found = self.found or "autocast" in node.value


def _optimizer_names(module: cst.Module, imports: ImportMap) -> _Optimizers:
    collector = _OptimizerCollector(imports)
    collector.walk(module)
    return collector.found


def find_training_steps(module: cst.Module, imports: ImportMap) -> StepScan:
    finder = _StepFinder(module, imports)
    finder.walk(module)
    return StepScan(finder.steps, finder.manual_updates, finder.optimizers.created)
