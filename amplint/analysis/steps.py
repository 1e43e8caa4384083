"""TrainingStep: where a module backpropagates a loss and steps an optimizer.

A training step is a block (a loop body or a function body) in which a loss goes
through ``.backward()`` and an optimizer goes through ``.step()``.  Statements in
``if`` / ``with`` / ``try`` inside the block belong to it; nested loops and
functions are blocks of their own.  Everything the AMP rules need hangs off it:
the forward region autocast wraps (analysis/forward.py), the backward calls to
scale, the optimizer steps, gradient clipping, and the scope a GradScaler must
live in.
"""

from __future__ import annotations

import builtins
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Iterator, Sequence, Union

import libcst as cst

from amplint.analysis.caller_forward import (
    autocast_callers,
    caller_regions,
    forward_outside,
    subclasses_of,
)
from amplint.analysis.clips import clip_threshold
from amplint.analysis.code_text import code_only
from amplint.analysis.forward import (
    ForwardRegion,
    ModelCalls,
    differentiating_methods,
    ends_forward_search,
    feeding_region,
    forward_region,
)
from amplint.analysis.imports import ImportMap, dotted_name
from amplint.analysis.module_roles import (
    FRAMEWORK_BACKWARD,
    OPTIMIZER_NAME,
    SCHEDULER_NAME,
    ModuleRoles,
    framework_backward,
    module_roles,
)
from amplint.analysis.saved_forward import saved_forward
from amplint.analysis.scopes import Scope, ScopedVisitor
from amplint.analysis.statements import (
    Branches,
    GradEditFinder,
    reads_gradients,
    calls_in_line,
    child_suites,
    exclusive,
    parameter_names,
    statements_in_order,
    method_name,
    name_use,
)
from amplint.analysis.visitor import Visitor, children, descendants, holds, path_to
from amplint.project.losses import LossHelper
from amplint.triggers import SCALER_NAME

Loop = Union[cst.For, cst.While]
BlockOwner = Union[cst.For, cst.While, cst.FunctionDef]

CLIP_FUNCTIONS = {
    "torch.nn.utils.clip_grad_norm_",
    "torch.nn.utils.clip_grad_value_",
    "torch.nn.utils.clip_grad_norm",
    "torch.nn.utils.clip_grad.clip_grad_norm_",
    "torch.nn.utils.clip_grad.clip_grad_value_",
}
# Clipping methods of wrappers that own sharded parameters: FSDP's
# `model.clip_grad_norm_(max_norm)` reduces the norm across ranks.
CLIP_METHODS = {"clip_grad_norm_", "clip_grad_value_"}
# How a GradScaler is recognised: by the name every example gives it.
# Making a GradScaler is not using one: a scaler left unused does not hide an
# FP32 step (AMP001 reuses it); nor is reading its scale for a log (the apex
# migration maps apex's loss-scale reads to `get_scale()` before it scales).
_ALREADY_AMP = re.compile(
    r"autocast|\.scale\(|scale_loss|\.half\(\)|bfloat16|float16"
    r"|\b(loss|grad|amp)_scaler\b(?!\.(get_scale|is_enabled)\(\))"
    r"|\bscaler\.(scale|step|update|unscale_)\("
)
# A model prepared by Accelerate, whose Accelerator owns mixed precision; one
# given a mixed_precision other than "no" runs in it already.
_ACCELERATE = re.compile(r"\bAccelerator\(|\.prepare\(")
_MAKES_ACCELERATOR = re.compile(r"\bAccelerator\(")
_ACCELERATE_PRECISION = re.compile(r"mixed_precision\s*=\s*(?![\"']no[\"'])")
# An update by hand uses the gradient (`p.data.add_(p.grad, alpha=-lr)`); a
# target network's Polyak average (`t.data.copy_(tau * p.data + ...)`) does not.
# Writing into a gradient (`p.grad.data.copy_(reduced)`, an all-reduce by hand)
# is no update of a parameter.
_MANUAL_UPDATE = re.compile(
    r"(?<!\.grad)\.data\.(add_|sub_|copy_)\([^\n]*grad"
    r"|(?<!\.grad)(?<!\.grad\.data)\.(add_|sub_)\([^)]*\.grad|-=\s*\w*lr"
)


# Skip reasons that are not reported. A step that already uses autocast or a
# scaler belongs to the misuse rules; a "step" whose loss comes from no model
# call (`p.sum().backward()` on a bare parameter in a test) is not training.
ALREADY_AMP = "already mixed precision"
NO_FORWARD = "no forward pass"
# detectron2's `SimpleTrainer` beside its `AMPTrainer(SimpleTrainer)`: the FP32
# class is the deliberate choice of a run that did not ask for AMP.
AMP_RELATIVE = "a subclass or sibling class is the mixed-precision version"
# The step's Accelerator is made here: its switch is AMP002's to report.
FRAMEWORK_SWITCH = "the Accelerator made here decides the precision"
# `if args.amp: train_amp(...) else: train_fp32(...)`: a function whose step
# is mixed precision already and a sibling whose step is FP32, called in the
# two arms of one test.  The FP32 one is the run the author chose for when AMP
# is off (a tutorial's "default precision" baseline).
AMP_TWIN = "the function called when AMP is off, beside its mixed-precision twin"
# PyTorch's AMP recipe times "Default precision", then the same loop with
# autocast and a GradScaler: the first is the baseline the second is measured
# against, and rewriting it would time AMP against AMP.
AMP_TWIN_LOOP = "an FP32 loop beside its mixed-precision twin, the baseline it is compared with"
SILENT_SKIPS = (ALREADY_AMP, NO_FORWARD, AMP_RELATIVE, FRAMEWORK_SWITCH, AMP_TWIN, AMP_TWIN_LOOP)
# A loss multiplied by a scale of the script's own (`loss * scaler.loss_scale`,
# `loss * 2 ** self.lg_loss_scale`): loss scaling written by hand.
_HAND_SCALED_LOSS = re.compile(r"\*\s*(?:[\w.]*\.)?\w*loss_scale\b|\b\w*loss_scale\s*\*")
# What would make such a step low precision after all: autocast, half weights,
# a library's scaler.
_LOW_PRECISION = re.compile(r"autocast|\.half\(\)|bfloat16|float16|\.scale\(|scale_loss")
# `list(model.parameters())`, `print(optimizer)`: Python's own, not the project's.
_BUILTINS = frozenset(dir(builtins))
# Bases too common to make two classes siblings.
_ROOT_BASES = {"object", "Module", "nn.Module", "torch.nn.Module", "ABC"}


@dataclass(frozen=True, eq=False)
class BackwardCall:
    """A `loss.backward()` (or `torch.autograd.backward`) in a training step."""

    call: cst.Call
    loss: cst.BaseExpression  # what is backpropagated: `loss` in `loss.backward()`
    top: int  # index of the step block's statement holding the call
    order: int  # position among the step block's statements, in program order
    statement: cst.BaseStatement | None = None  # the line holding the call


@dataclass(frozen=True, eq=False)
class OptimizerStep:
    """An `optimizer.step()` in a training step, possibly through a GradScaler."""

    call: cst.Call
    optimizer: cst.BaseExpression  # `optimizer`, `self.optimizer`, ...
    statement: cst.BaseStatement  # the line holding the call
    order: int  # position among the step block's statements, in program order
    has_closure: bool  # called with arguments: a closure, or not torch.optim at all
    # `scaler` for `scaler.step(optimizer)`: the GradScaler stepping `optimizer`.
    scaler: str | None = None


@dataclass(frozen=True, eq=False)
class GradEdit:
    """A statement that edits gradients between backward and step (a clip, a loop)."""

    statement: cst.BaseStatement  # a clip call's line, or a loop editing `.grad`
    order: int
    clip: cst.Call | None = None  # the `clip_grad_norm_(...)`-like call, if it is one
    # An edit other than a multiplication by one factor (`p.grad.clamp_(-c, c)`):
    # like a clip, it must see unscaled gradients.
    nonlinear: bool = False
    # The threshold argument of torch's own clip (`clip_grad_norm_(p, 1.0)`): on
    # gradients still scaled, the threshold times the loss scale clips exactly
    # as the threshold clips unscaled ones (analysis/clips.py).
    threshold: cst.Arg | None = None
    # Only reads the gradients (`norm = p.grad.norm()`, for a log): it changes
    # nothing, but must see them unscaled to read what the FP32 step read.
    reads: bool = False
    # `clip` is the project's function computing a norm of the gradients (a
    # `get_grad_norm(model.parameters())` for a log): on gradients still scaled
    # it returns the scale times their norm (project/gradient_norms.py).
    norm: bool = False


@dataclass(eq=False)
class TrainingStep:
    """A block that runs backward and then an optimizer step: what AMP001 rewrites."""

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
    # The statements of the step's function (or module) that run before the one
    # holding its outermost loop: where its model, optimizer and scaler are made.
    setup: list[cst.BaseStatement] = field(default_factory=list)

    def exclusive(self, first_order: int, second_order: int) -> bool:
        """Whether the statements at these orders sit in opposite branches of one
        test (`if scaler is not None: ... else: ...`), so no iteration runs both."""
        return exclusive(self.paths[first_order], self.paths[second_order])

    def edits_between_steps(self) -> list[GradEdit]:
        """The gradient edits that run on iterations where the optimizer step
        after them does not: a clip on every micro-step of gradient
        accumulation whose optimizer steps under `if (i + 1) % accum == 0:`.
        A GradScaler unscales once per step, so no unscale_ can go before them."""
        found = []
        for edit in self.grad_edits:
            for optimizer_step in self.steps:
                if optimizer_step.order < edit.order or self.exclusive(
                    edit.order, optimizer_step.order
                ):
                    continue
                guards = [
                    guard
                    for guard in _ifs_above(self.block, optimizer_step.statement)
                    if not _tests_presence(guard.test, optimizer_step.optimizer)
                ]
                if (
                    guards
                    and not holds(guards[-1], edit.statement)
                    and not _under_same_test(self.block, guards[-1], edit.statement)
                ):
                    found.append(edit)
                    break
        return found

    def presence_test(self, optimizer_step: OptimizerStep) -> cst.BaseExpression | None:
        """The test of an `if` above `optimizer_step` that only asks whether its
        optimizer exists (`if enc_opt is not None:`), or None: what steps
        through the optimizer outside that `if` (its unscale_) needs it too."""
        for guard in _ifs_above(self.block, optimizer_step.statement):
            if _tests_presence(guard.test, optimizer_step.optimizer):
                return guard.test
        return None

    def suites(self) -> Iterator[Sequence[cst.BaseStatement]]:
        """The step block's statement list and every one nested in its if/with/try."""
        for owner in (self.block, *self.statements):
            yield from child_suites(owner)

    @property
    def anchor(self) -> cst.Call:
        """The call a finding about this step points at: the backward its
        decline is about, else its first backward."""
        if self.skip_at is not None:
            return self.skip_at
        if self.backwards:
            return self.backwards[0].call
        return self.backward_helper or self.steps[0].call

    # Why amplint does not rewrite this step, in the user's terms; None if it can.
    skip: str | None = None
    # The backward that `skip` is about, where it is one of several.
    skip_at: cst.Call | None = None
    # For a step function given its loss, the code of its callers, where every
    # call runs under autocast: the step is theirs, mixed precision already.
    amp_callers: list[cst.CSTNode] = field(default_factory=list)
    # The forward regions are at the calls of the step's method in its class
    # (`self.optimize(loss)`), not in the step's own block.
    forward_at_callers: bool = False
    # The loss is given to the step's method, which its class never calls: the
    # forward pass runs wherever the instances are called (timm's `ApexScaler`),
    # so the step can take a GradScaler but not autocast (`skip` says so).
    forward_outside: bool = False
    # A loss in a forward region that raises under CUDA autocast, as spelled.
    unsafe_loss: str | None = None
    # The call that takes gradients inside the forward pass (a gradient penalty),
    # which a GradScaler would leave scaled.
    gradient_penalty: str | None = None
    # A write by tensor index of what the forward pass computes (`t[mask] = ...`),
    # which raises under autocast where the tensor is float32 (forward.index_write).
    index_write: str | None = None
    # A step already in mixed precision: the ids of its block's statements
    # that run a model (the rest make, move or compute on data).
    model_statements: frozenset[int] = frozenset()
    # `self.backward_G()` before the step: the backward runs in a helper of the
    # module, the step's block holds none (pix2pix's `optimize_parameters`).
    backward_helper: cst.Call | None = None
    # `self.optimize()` after such a helper: the optimizer step runs in a helper
    # too, and the block holds neither (`forward_backward()` then `optimize()`).
    step_helper: cst.Call | None = None
    # A clip or `.grad` edit inside the inner loop of a micro-batch step: it
    # runs on each micro-batch's scaled gradients.
    micro_batch_edit: cst.BaseStatement | None = None


@dataclass
class _Scan:
    """What one pass over a block's statements found (see _StepFinder._scan)."""

    backwards: list[BackwardCall] = field(default_factory=list)
    steps: list[OptimizerStep] = field(default_factory=list)
    grad_edits: list[GradEdit] = field(default_factory=list)
    micro_batch_edits: list[GradEdit] = field(default_factory=list)
    framework: bool = False


def _inner_loop_statements(flat: list) -> frozenset[int]:
    """The ids of the statements in the bodies of the loops of `flat` (a block
    flattened into its loops) that call `.backward()`: the micro-batch loops."""
    inner: set[int] = set()
    for _, statement, _ in flat:
        if isinstance(statement, (cst.For, cst.While)) and id(statement) not in inner:
            finder = _BackwardFinder()
            finder.walk(statement.body)
            if finder.found:
                inner.update(
                    id(s) for _, s, _ in statements_in_order(statement.body.body, into_loops=True)
                )
    return frozenset(inner)


@dataclass(eq=False)
class StepScan:
    """What `find_training_steps` saw: steps, and backward calls with no optimizer."""

    steps: list[TrainingStep]
    manual_updates: list[BackwardCall]  # backward whose block updates parameters by hand
    # Whether the module makes a torch.optim optimizer itself: sets its training up.
    creates_optimizer: bool = False


class _StepFinder(ScopedVisitor):
    """Visits every loop and function body once, with the enclosing context."""

    def __init__(
        self,
        module: cst.Module,
        imports: ImportMap,
        roles: ModuleRoles,
        gradient_norms: Callable[[], dict[str, str]],
    ) -> None:
        super().__init__()
        self.module = module
        self.imports = imports
        self._gradient_norms = gradient_norms
        self.roles = roles
        self.calls = ModelCalls(
            module,
            self.resolve,
            self.roles.module_functions,
            self.roles.torch_aliases,
            self.roles.unsafe_losses,
            self.roles.unsafe_helpers,
            differentiating_methods(imports),
        )
        self.steps: list[TrainingStep] = []
        self.manual_updates: list[BackwardCall] = []
        # Per scope: the function it is (None for a class or the module), the
        # class it is a method of, and the loops enclosing the visit position
        # within it, outermost first.
        self._functions: list[cst.FunctionDef | None] = []
        self._classes: list[cst.ClassDef | None] = []
        self._loops: list[list[cst.BaseStatement]] = []

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
        if isinstance(receiver, cst.Subscript):  # `optims["d"]`, `self.optimizers[0]`
            return _constant_key(receiver) and self._is_optimizer(receiver.value)
        name = dotted_name(receiver)
        if name is None:
            return False
        last = name.rsplit(".", 1)[-1]
        if SCHEDULER_NAME.search(last) or name in self.roles.schedulers:
            return False
        if name in self.roles.names or OPTIMIZER_NAME.search(last):
            return True
        # `optims.discriminator`, `self.optimizers.gen`: a namespace of optimizers
        # (Munch, SimpleNamespace), each named for its network.
        parts = name.split(".")
        return len(parts) > 1 and "optim" in parts[-2].lower()

    def _hands_over_gradients(self, call: cst.Call) -> bool:
        """Whether `call` is given what holds gradients (an optimizer, an
        optimizer's `param_groups`, a `.parameters()` iterator) or is a
        function of this module that edits `.grad`: code of the project's own
        that may read or change the gradients.  A call also given the scaler
        is left to unscale itself."""
        if any(is_scaler(arg.value) for arg in call.args):
            return False  # `clip_gradients(model, scaler, optimizer)` may unscale itself
        if (self.resolve(call.func) or "").startswith("torch.") or (
            isinstance(call.func, cst.Name) and call.func.value in _BUILTINS
        ):
            return False  # `torch.cat([p.grad.view(-1) for p in model.parameters()])`
        name = dotted_name(call.func)
        if name is not None and name in self._gradient_editors:
            return True
        for arg in call.args:
            value = arg.value
            if self._is_optimizer(value) or _HoldsGradients.within(value):
                return True
        return False

    def _computes_gradient_norm(self, call: cst.Call) -> bool:
        """Whether `call` is of a project function that computes a norm of the
        gradients of the parameters it is given (project/gradient_norms.py)."""
        name = dotted_name(call.func)
        if name is None or any(_mentions_grad(arg.value) for arg in call.args):
            return False  # given gradients, not parameters: `norm([p.grad for p in ps])`
        return name in self._gradient_norms()

    @cached_property
    def _gradient_editors(self) -> set[str]:
        """The module-level functions whose body edits `.grad` in place."""
        editors = set()
        for name, function in self.roles.module_functions.items():
            finder = GradEditFinder()
            finder.walk(function.body)
            if finder.found:
                editors.add(name)
        return editors

    def _scan(self, flat: list, micro_batch: frozenset[int] = frozenset()) -> _Scan:
        """The backward calls, optimizer steps and gradient edits of a block's
        statements in program order, and whether a framework owns its backward.
        Edits of statements in `micro_batch` (ids: the bodies of inner loops
        that backpropagate) are kept apart: they see each micro-batch's
        gradients, still scaled, and no unscale_ can go before them.  Edits are
        looked for only in a block that backpropagates: nothing reads them in
        the others, which are most blocks (each function and loop body is one)."""
        found = _Scan()
        backwards, steps = found.backwards, found.steps
        framework = False
        others: list[tuple[int, cst.CSTNode, cst.Call]] = []  # candidates for edits
        for order, (top, statement, _) in enumerate(flat):
            for call in calls_in_line(statement):
                method = method_name(call)
                receiver = call.func.value if method else None
                if method == "backward":
                    if framework_backward(dotted_name(receiver) or ""):
                        framework = True
                    else:
                        backwards.append(BackwardCall(call, receiver, top, order, statement))
                elif method == "manual_backward" or self._framework_helper(call):
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
                else:
                    others.append((order, statement, call))
        found.framework = framework
        if backwards and not framework:
            self._find_grad_edits(flat, others, micro_batch, found)
        return found

    def _find_grad_edits(
        self,
        flat: list,
        others: list[tuple[int, cst.CSTNode, cst.Call]],
        micro_batch: frozenset[int],
        found: _Scan,
    ) -> None:
        """The gradient edits among `flat`'s statements (see `_scan`); `others`,
        the calls of the block that are neither a backward nor a step."""
        calls_of: dict[int, list[cst.Call]] = {}
        for order, _, call in others:
            calls_of.setdefault(order, []).append(call)
        for order, (_, statement, _) in enumerate(flat):
            if id(statement) in micro_batch:
                grad_edits = found.micro_batch_edits
            else:
                grad_edits = found.grad_edits
            for call in calls_of.get(order, ()):
                if (clip := self._torch_clip(call, statement, order)) is not None:
                    grad_edits.append(clip)
                elif self._project_clip(call):
                    # The project's own clipper (`clip_gradient(optimizer, c)`,
                    # `clipper.step(model.parameters())`): it may clamp or clip,
                    # which must see unscaled gradients, like torch's own clip.
                    norm = self._computes_gradient_norm(call)
                    grad_edits.append(GradEdit(statement, order, clip=call, norm=norm))
            if isinstance(statement, (cst.SimpleStatementLine, cst.For, cst.While)) and not any(
                edit.statement is statement for edit in grad_edits
            ):
                # `print(clip_grad_norm_(params, 1.0).item())`: a clip inside an
                # expression; `for model in models: clip_grad_norm_(...)`: in a
                # loop; `clip_gradient(params, c) if c > 0 else None`: the
                # project's clipper in one.
                for call in _NestedCalls.of(statement):
                    if (clip := self._torch_clip(call, statement, order)) is not None:
                        grad_edits.append(clip)
                        break
                    # A norm the project computes inside an expression is left
                    # alone, and so is one divided back by the scale: the
                    # rewrite itself writes `get_grad_norm(...) / scaler.get_scale()`
                    # on every micro-step.
                    if (
                        self._project_clip(call)
                        and not self._computes_gradient_norm(call)
                        and id(call) not in _divided_by_the_scale(statement)
                    ):
                        grad_edits.append(GradEdit(statement, order, clip=call))
                        break
            if not isinstance(statement, (cst.If, cst.With, cst.Try)) and not any(
                edit.statement is statement for edit in grad_edits
            ):
                finder = GradEditFinder()
                finder.walk(statement)
                if finder.found:
                    grad_edits.append(GradEdit(statement, order, nonlinear=finder.nonlinear))
                elif reads_gradients(statement):
                    grad_edits.append(GradEdit(statement, order, reads=True))

    def _project_clip(self, call: cst.Call) -> bool:
        """Whether `call` hands the gradients to the project's own code: not a
        scaler's method nor a framework's, given the optimizer or parameters."""
        method = method_name(call)
        if method and is_scaler(call.func.value):
            return False
        return not _framework_owned(call) and self._hands_over_gradients(call)

    def _torch_clip(self, call: cst.Call, statement, order: int) -> GradEdit | None:
        """`call` as a gradient edit if it is torch's own clip (`clip_grad_norm_`,
        a wrapper's `model.clip_grad_norm_`, not a framework's that unscales)."""
        function = self.resolve(call.func) in CLIP_FUNCTIONS
        if not function and (method_name(call) not in CLIP_METHODS or _framework_owned(call)):
            return None
        return GradEdit(statement, order, clip=call, threshold=clip_threshold(call, not function))

    def _examine(self, block: cst.IndentedBlock, owner: BlockOwner) -> None:
        flat = list(statements_in_order(block.body))
        scan = self._scan(flat)
        micro_batch_edit = None
        if scan.steps and not scan.backwards and not scan.framework:
            # Gradient accumulation over micro-batches: the backward runs in an
            # inner loop, the optimizer steps once after it.  The block with the
            # step is the training step, its inner loops part of it.
            deep = list(statements_in_order(block.body, into_loops=True))
            inner = _inner_loop_statements(deep)
            found = self._scan(deep, inner)
            if found.backwards and len(found.steps) == len(scan.steps):
                flat, scan = deep, found
                if found.micro_batch_edits:
                    micro_batch_edit = found.micro_batch_edits[0].statement
        backwards, steps, grad_edits, framework = (
            scan.backwards,
            scan.steps,
            scan.grad_edits,
            scan.framework,
        )
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
            helper = self._backward_helper(flat, steps)
            if helper is not None:
                self._add_step(block, owner, [], steps, [], flat, backward_helper=helper)
            elif not steps and (split := self._split_step(flat)) is not None:
                self._add_step(
                    block, owner, [], [], [], flat, backward_helper=split[0], step_helper=split[1]
                )
            return
        if not steps:
            if _MANUAL_UPDATE.search(code_only(self.module.code_for_node(block))):
                self.manual_updates.append(backwards[0])
            elif (looped := self._optimizers_stepped_in_a_loop(flat, backwards)) is not None:
                self._add_looped_step(block, owner, backwards, grad_edits, flat, looped)
            return
        self._add_step(
            block, owner, backwards, steps, grad_edits, flat, micro_batch_edit=micro_batch_edit
        )

    def _split_step(self, flat: list) -> tuple[cst.Call, cst.Call] | None:
        """A call of a method of this module that backpropagates and does not
        step, then one of the same object that steps an optimizer and does not
        backpropagate: a step split across two helpers (improved-diffusion's
        `run_step` calls `self.forward_backward(batch)`, then `self.optimize()`).
        Free functions called in turn are a test script's cases, not a step."""
        backward = None
        for _, statement, _ in flat:
            for call in calls_in_line(statement):
                name = dotted_name(call.func)
                if name is None or "." not in name:
                    continue
                owner, last = name.rsplit(".", 1)
                backprops = last in self.roles.backward_functions
                steps = last in self.roles.step_functions
                if backward is None and backprops and not steps:
                    backward, backward_owner = call, owner
                elif backward is not None and steps and not backprops and owner == backward_owner:
                    return backward, call
        return None

    def _optimizers_stepped_in_a_loop(
        self, flat: list, backwards: list[BackwardCall]
    ) -> tuple[list[cst.For], list[OptimizerStep]] | None:
        """`for optimizer in optimizers: optimizer.step()` after a backward of
        the block (XLM's trainer, multi-optimizer research code): every such
        loop, and the steps in them, each of its loop's own target."""
        first = backwards[0].order
        loops: list[cst.For] = []
        found: list[OptimizerStep] = []
        for order, (_, statement, _) in enumerate(flat):
            if order <= first or not isinstance(statement, cst.For):
                continue
            target = dotted_name(statement.target)
            if target is None or not isinstance(statement.body, cst.IndentedBlock):
                continue
            here = [
                OptimizerStep(call, call.func.value, statement, order, has_closure=bool(call.args))
                for line in statement.body.body
                for call in calls_in_line(line)
                if method_name(call) == "step"
                and dotted_name(call.func.value) == target
                and self._is_optimizer(call.func.value)  # not `for env in envs: env.step()`
            ]
            if here:  # every such loop: one per branch (XLM's FP32 and AMP paths)
                loops.append(statement)
                found += here
        return (loops, found) if found else None

    def _add_looped_step(self, block, owner, backwards, grad_edits, flat, looped) -> None:
        """Such a step, reported with why it is not rewritten; one that is mixed
        precision already stays the misuse rules' business (none of them reads
        optimizers stepped in a loop yet), and is not added."""
        loops, steps = looped
        self._add_step(block, owner, backwards, steps, grad_edits, flat)
        step = self.steps[-1]
        if step.skip in SILENT_SKIPS:
            self.steps.pop()
            return
        if step.skip is None and not all(
            step.exclusive(a.order, b.order)
            for a in step.steps
            for b in step.steps
            if a.statement is not b.statement
        ):
            # Two loops one iteration runs both of: each optimizer would step
            # twice through the scaler before its update, which raises.
            step.skip = (
                f"the optimizers are stepped in {len(loops)} loops that one iteration runs "
                "in turn: step each through one GradScaler by hand (`scaler.step(opt)` once "
                "per optimizer, one `scaler.update()` after them, `scaler.unscale_(opt)` for "
                "each before a clip)"
            )
            return
        once = next((loop for loop in loops if not _iterates_again(loop.iter)), None)
        if step.skip is not None or once is None:
            return  # each steps through the scaler in its loop, one update after it
        header = f"for {self.module.code_for_node(once.target)} in {self.module.code_for_node(once.iter)}"
        step.skip = (
            f"the optimizers are stepped in a loop (`{header}: ...step()`) over what may not "
            "iterate twice, and an unscale_ before a clip needs a loop of its own: step each "
            "through one GradScaler by hand (`scaler.step(opt)` in the loop, one "
            "`scaler.update()` after it, `scaler.unscale_(opt)` for each before a clip)"
        )

    def _framework_helper(self, call: cst.Call) -> bool:
        """`run_forward_backward(model, optimizer, ...)`: a def of this module
        whose only backward is a framework's (`booster.backward(loss, optimizer)`)."""
        name = (dotted_name(call.func) or "").rsplit(".", 1)[-1]
        roles = self.roles
        return name in roles.framework_backward_functions and name not in roles.backward_functions

    def _backward_helper(self, flat: list, steps: list[OptimizerStep]) -> cst.Call | None:
        """The first call, before an optimizer step of the block, of a function
        of this module that calls `.backward()` (`self.backward_G()`)."""
        if not steps:
            return None
        first_step = min(step.order for step in steps)
        for order, (_, statement, _) in enumerate(flat):
            if order >= first_step:
                return None
            for call in calls_in_line(statement):
                name = dotted_name(call.func)
                if name is not None and name.rsplit(".", 1)[-1] in self.roles.backward_functions:
                    return call
        return None

    def _add_step(
        self,
        block,
        owner,
        backwards,
        steps,
        grad_edits,
        flat,
        backward_helper=None,
        micro_batch_edit=None,
        step_helper=None,
    ) -> None:
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
            backward_helper=backward_helper,
            micro_batch_edit=micro_batch_edit,
            step_helper=step_helper,
        )
        if step.outermost_loop is not None:
            step.setup = _statements_before(function or self.module, step.outermost_loop)
        step.skip = self._skip_reason(step)
        if step.skip == ALREADY_AMP:
            # Asked later of an AMP step (regions.find_forwards_outside_autocast),
            # when the walk's scopes, which resolve its names, are gone.
            step.model_statements = frozenset(
                id(statement) for statement in step.block.body if self.calls.runs_model(statement)
            )
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
        scope_code = code_only(self.module.code_for_node(scope))
        own_code = self._own_amp_code(step, scope)
        if own_code is not None:
            scope_code = own_code
        if any(s.scaler for s in step.steps) or _ALREADY_AMP.search(scope_code):
            return self._hand_scaled(scope_code) or ALREADY_AMP
        step.amp_callers = self._amp_callers(step)
        if step.amp_callers:
            return ALREADY_AMP
        if self._reads_autocast_alias(scope_code):
            return ALREADY_AMP  # `with ctx:` where `ctx = ... torch.autocast(...)`
        if step.class_def is not None and self._has_amp_relative(step.class_def):
            return AMP_RELATIVE
        setup = self._setup_code(step)
        if _ACCELERATE.search(setup) and "accelerat" in setup.lower():
            if _ACCELERATE_PRECISION.search(setup):
                return ALREADY_AMP
            if _MAKES_ACCELERATOR.search(setup):
                return FRAMEWORK_SWITCH
            return (
                "the model goes through Accelerate (`accelerator.prepare`), which owns its "
                'precision: set `Accelerator(mixed_precision="bf16")` (or "fp16") instead'
            )
        manual = _MANUAL_UPDATE.search(code_only(self.module.code_for_node(step.block)))
        if manual is not None:
            return (
                f"parameters are also updated by hand (`{manual.group(0)}...`) on some path; "
                "a GradScaler would leave those gradients scaled"
            )
        if step.micro_batch_edit is not None:
            edit = self.module.code_for_node(step.micro_batch_edit).strip().splitlines()[0]
            return (
                f"`{edit}` edits the gradients inside the micro-batch loop, where a GradScaler "
                "leaves them scaled and no unscale_ can go before it: clip once, after the loop"
            )
        if step.backward_helper is not None:
            helper = self.module.code_for_node(step.backward_helper)
            if step.step_helper is not None:
                stepper = self.module.code_for_node(step.step_helper)
                return (
                    f"the backward runs in `{helper}` and the optimizer step in "
                    f"`{stepper}`, helpers this step calls: compute the forward pass and the "
                    "loss under torch.autocast and scale the loss in the first, step and "
                    "update a GradScaler both can reach in the second"
                )
            return (
                f"the backward runs in `{helper}`, a helper this step calls: compute the "
                "forward pass and the loss under torch.autocast and scale the loss in that "
                "helper, step and update the GradScaler here"
            )
        for optimizer_step in step.steps:
            if optimizer_step.has_closure:
                call = self.module.code_for_node(optimizer_step.call)
                if self._passes_closure(optimizer_step.call):
                    return f"`{call}` cannot go through a GradScaler (it refuses closures)"
                return f"`{call}` is not a plain optimizer step"
        discarded = self._discarded_backward(step)
        if discarded is not None:
            return (
                f"`{discarded}` backpropagates through the forward pass before the step's "
                "own backward, and its gradients are cleared before that: they are read "
                "on the way (K-FAC's Fisher statistics, a hook's), and a GradScaler would "
                "scale them: scale that backward by hand where its readers expect it, or "
                "keep this step in float32"
            )
        lower = 0
        parameters = (
            {param.name.value for param in step.function.params.params}
            if step.function is not None
            else set()
        )
        in_suite = False  # the last backward's region is in an `if` arm, not above it
        # What model calls above an `if` bind for the losses its arms compute.
        fed: set[str] = set()
        for index, backward in enumerate(step.backwards):
            # A reason found from here on is this backward's: the finding
            # points at it, never at another loss of the step.
            step.skip_at = backward.call
            previous = step.backwards[index - 1] if index else None
            if (
                previous is not None
                and backward.top == previous.top
                and step.exclusive(previous.order, backward.order)
                and not in_suite
            ):
                continue  # `if a: loss.backward() else: ...`: the same statement, one region
            if self.calls.runs_model(backward.loss):
                shown = self.module.code_for_node(backward.loss)
                return f"the forward pass runs inside `{shown}.backward()`; bind the loss first"
            region = forward_region(
                step.block.body,
                backward.loss,
                backward.top,
                lower,
                parameters,
                self.calls.runs_model,
            )
            in_suite = False
            arm = None
            if isinstance(region, str):
                # `if i % n_critic == 0:` around the generator's whole step: its
                # loss is computed in the same suite as its backward.
                inner = self._forward_region_in_suite(step, backward, parameters)
                if inner is not None:
                    in_suite = True
                    arm = inner
                    region = [inner]
                    # `outputs = model(x)`, then each arm of `if accumulate:`
                    # computes its loss from `outputs`: that call too.
                    reads = set().union(*(name_use(s).read for s in inner.statements))
                    feeding = feeding_region(
                        step.block.body, reads, backward.top, lower, self.calls.runs_model
                    )
                    if feeding is not None:
                        fed |= set().union(*(name_use(s).bound for s in feeding.statements))
                        if not any(r.first is feeding.first for r in step.regions):
                            region.insert(0, feeding)
            if isinstance(region, str) and step.regions and not in_suite:
                # Two networks trained side by side: both forward passes and
                # both losses above both backwards (MorvanZhou's dropout
                # tutorial).  This loss is bound above the previous backward,
                # in or after the previous region: the two regions are one.
                merged = self._merged_with_previous(step, backward, parameters)
                if merged is not None:
                    step.regions[-1] = merged
                    lower = backward.top + 1
                    continue
            if isinstance(region, str) and _given(backward.loss, parameters):
                # `def optimize(self, loss)`: the forward pass is at its callers.
                if step.forward_at_callers:
                    continue
                region = self._regions_at_callers(step, backward) or region
            if isinstance(region, str):
                return region
            for found in region if isinstance(region, list) else [region]:
                runs_model = any(self.calls.runs_model(s) for s in found.statements)
                # An arm's loss of the model's outputs (`-log(sigmoid(output))`)
                # runs no model itself: the call above the `if` does.
                from_outputs = found is arm and fed & set().union(
                    *(name_use(s).read for s in found.statements)
                )
                if not runs_model and not from_outputs:
                    return self._forward_saved_elsewhere(step, backward) or NO_FORWARD
                found = self.calls.with_unsafe_loss_after(found)
                step.unsafe_loss = step.unsafe_loss or found.unsafe_loss
                step.gradient_penalty = step.gradient_penalty or self.calls.gradient_penalty(found)
                step.index_write = step.index_write or self.calls.index_write(found)
                step.regions.append(found)
            lower = backward.top + 1
        step.skip_at = None
        return None

    def _merged_with_previous(
        self, step: TrainingStep, backward: BackwardCall, parameters: set[str]
    ) -> ForwardRegion | None:
        """The previous forward region stretched down to where `backward`'s
        loss is bound, when that is below its start and above every backward;
        None otherwise."""
        previous = step.regions[-1]
        body = step.block.body
        if previous.first not in body or previous.last not in body:
            return None
        start = body.index(previous.first)
        region = forward_region(
            body, backward.loss, backward.top, start, parameters, self.calls.runs_model
        )
        if isinstance(region, str) or region.last not in body:
            return None
        end = max(body.index(previous.last), body.index(region.last))
        statements = tuple(body[start : end + 1])
        if any(ends_forward_search(statement) for statement in statements):
            return None  # a backward or a step in between: two regions after all
        return ForwardRegion(body[start], body[end], statements)

    def _discarded_backward(self, step: TrainingStep) -> str | None:
        """A backward of the step that keeps the graph (`retain_graph=True`) and
        whose gradients a `zero_grad()` clears, no optimizer having stepped on
        them, before the step's next backward (ACKTR's
        `fisher_loss.backward(retain_graph=True)`, for K-FAC's hooks), as
        spelled; None where there is none.  Two losses backpropagated in turn
        into one step's gradients are no such thing."""
        body = step.block.body
        for backward, after in zip(step.backwards, step.backwards[1:]):
            retains = any(
                argument.keyword is not None
                and argument.keyword.value == "retain_graph"
                and not (isinstance(argument.value, cst.Name) and argument.value.value == "False")
                for argument in backward.call.args
            )
            if not retains or after.top <= backward.top:
                continue
            calls = [
                method_name(call)
                for statement in body[backward.top : after.top]
                for call in descendants(statement)
                if isinstance(call, cst.Call)
            ]
            # Cleared unused: no optimizer step took them first (a GAN's
            # `D_loss.backward(retain_graph=True)` then `opt_D.step()`, in the
            # statement of that backward or after it).
            if "zero_grad" in calls and "step" not in calls:
                return self.module.code_for_node(backward.call)
        return None

    def _own_amp_code(self, step: TrainingStep, scope: cst.CSTNode) -> str | None:
        """Where a step whose outermost loop holds other steps shows its own
        AMP: its loop without the parts of it that step something else, and
        the `with` statements around its loop in the outer ones.  WGAN's
        critic steps in `for _ in range(n_critic)` inside the loop stepping the
        generator: neither's autocast says anything of the other.  None where
        the step has its outermost loop to itself, which then decides."""
        owner = step.owner
        if not isinstance(owner, (cst.For, cst.While)):
            return None
        path = path_to(scope, owner)
        if path is None:
            return None
        mine = [backward.call for backward in step.backwards]
        others = [
            node
            for node in descendants(scope)
            if isinstance(node, cst.Call)
            and method_name(node) == "backward"
            and not any(node is call for call in mine)
        ]
        if not others:
            return None
        code = "\n".join(code_only(part) for part in self._parts_without(owner, mine, others))
        withs = [
            self.module.code_for_node(item)
            for node in path
            if isinstance(node, cst.With)
            for item in node.items
        ]
        return "\n".join([code, *withs])

    def _parts_without(
        self, node: cst.CSTNode, mine: list[cst.Call], others: list[cst.Call]
    ) -> list[str]:
        """The code of `node` without what steps something else: a part holding
        another backward and none of `mine` is left out, a part holding both is
        split into its own parts (a `with` around the other step's loop goes
        with it; the header of the step's own loop stays)."""
        other = any(holds(node, call) for call in others)
        if not other:
            return [self.module.code_for_node(node)]
        if not any(holds(node, call) for call in mine):
            return []
        return [
            part for child in children(node) for part in self._parts_without(child, mine, others)
        ]

    def _hand_scaled(self, scope_code: str) -> str | None:
        """Why a step whose only sign of AMP is loss scaling written by hand
        (`loss * loss_scaler.loss_scale`, nothing in low precision anywhere in
        the module) is FP32 all the same, or None."""
        scaled = _HAND_SCALED_LOSS.search(scope_code)
        if scaled is None or self._reads_autocast_alias(scope_code):
            return None
        if _LOW_PRECISION.search(code_only(self.module.code_for_node(self.module))):
            return None
        start = scope_code.rfind("\n", 0, scaled.start()) + 1
        end = scope_code.find("\n", scaled.end())
        line = scope_code[start : end if end >= 0 else len(scope_code)].strip()
        return (
            f"the loss is scaled by hand (`{line}`) but the model "
            "runs in FP32, where a loss scale protects nothing: replace the hand-written "
            "scaling with torch.autocast around the forward pass and a torch.amp.GradScaler"
        )

    def _reads_autocast_alias(self, scope_code: str) -> bool:
        """Whether the code reads a name bound to autocast (`with ctx:` where
        `ctx = nullcontext() if cpu else torch.autocast(...)`)."""
        return any(
            re.search(rf"(?<![\w.]){re.escape(alias)}\b", scope_code)
            for alias in self.roles.autocast_aliases
        )

    def _forward_saved_elsewhere(self, step: TrainingStep, backward: BackwardCall) -> str | None:
        """Why a step whose block runs no model is training all the same: its
        loss is built from results another def saved while running the model
        (REINFORCE's `policy.saved_log_probs`), or None."""
        before = step.statements[: backward.order + 1]
        found = saved_forward(self.module, before)
        if found is None:
            return None
        return (
            f"its loss is built from `{found.container}`, which `{found.filler}` fills "
            "while running the model: the forward pass is there, not here; run it under "
            "torch.autocast in that function and scale this loss with a GradScaler"
        )

    def _amp_callers(self, step: TrainingStep) -> list[cst.CSTNode]:
        """For a step function given its loss (`def step(loss, optimizer)`)
        whose every call in the module runs under autocast, the code holding
        those calls: the callers' step is mixed precision (see
        caller_forward.autocast_callers)."""
        function = step.function
        if function is None or step.owner is not function or not step.backwards:
            return []
        parameters = set(parameter_names(function))
        if not all(_given(backward.loss, parameters) for backward in step.backwards):
            return []
        return autocast_callers(
            self.module, function, step.class_def, self.module.code_for_node
        )

    def _regions_at_callers(
        self, step: TrainingStep, backward: BackwardCall
    ) -> list[ForwardRegion] | str | None:
        """The forward regions at the calls of the step's method in its class,
        for a loss the method is given (see analysis/caller_forward.py); None
        for a step that is not a method's."""
        if step.class_def is None or step.function is None:
            return None
        found = caller_regions(
            step.class_def,
            step.function,
            backward.loss,
            self.calls.runs_model,
            self.module.code_for_node,
            subclasses_of(step.class_def, self.roles.classes),
        )
        if found == []:
            step.forward_outside = True
            return forward_outside(step.function, backward.loss)
        if isinstance(found, list):
            step.forward_at_callers = True
        return found

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
            region = forward_region(
                suite, backward.loss, index, 0, parameters, self.calls.runs_model
            )
            return region if isinstance(region, ForwardRegion) else None
        return None

    def _setup_code(self, step: TrainingStep) -> str:
        """The code that runs before the step's loop in its function (or module):
        where its model and optimizer are made and prepared.  A notebook's plain
        loop above its Accelerate version is set up without Accelerate."""
        if step.outermost_loop is None:
            return code_only(self.module.code_for_node(step.function or self.module))
        return code_only("".join(self.module.code_for_node(s) for s in step.setup))

    def _has_amp_relative(self, class_def: cst.ClassDef) -> bool:
        """Whether a class of the module that subclasses `class_def`, or shares
        a base with it, uses autocast or a GradScaler."""
        name = class_def.name.value
        bases = _base_names(class_def) - _ROOT_BASES
        for other in self.roles.classes:
            if other is class_def:
                continue
            other_bases = _base_names(other)
            if (name in other_bases or bases & other_bases) and _ALREADY_AMP.search(
                code_only(self.module.code_for_node(other))
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
        return "closure" in name or name in self.roles.functions

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
        return dotted_name(argument) in self.roles.backward_functions


def _iterates_again(iterable: cst.BaseExpression) -> bool:
    """Whether a second loop over `iterable` sees what the first saw: a name,
    an attribute, a subscript, a list or tuple display, or a dict's view
    (`self.optimizers.values()`); not a generator or another call."""
    if isinstance(iterable, (cst.Name, cst.Attribute, cst.Subscript, cst.List, cst.Tuple)):
        return True
    return method_name(iterable) in ("values", "keys") if isinstance(iterable, cst.Call) else False


def _tests_presence(test: cst.BaseExpression, optimizer: cst.BaseExpression) -> bool:
    """Whether `test` only asks if the optimizer exists (`if enc_opt is not None:`,
    `if enc_opt:`): an optional optimizer steps on every iteration it exists,
    which is no accumulation boundary."""
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        comparison = test.comparisons[0]
        if isinstance(comparison.operator, cst.IsNot) and (
            isinstance(comparison.comparator, cst.Name) and comparison.comparator.value == "None"
        ):
            test = test.left
    return test.deep_equals(optimizer)


def _divided_by_the_scale(statement: cst.CSTNode) -> set[int]:
    """The ids of the calls in `statement` divided by a scaler's scale
    (`norm(params) / scaler.get_scale()`): they read scaled gradients on
    purpose and undo the scale."""
    return {
        id(node.left)
        for node in descendants(statement)
        if isinstance(node, cst.BinaryOperation)
        and isinstance(node.operator, cst.Divide)
        and isinstance(node.right, cst.Call)
        and method_name(node.right) == "get_scale"
    }


def _under_same_test(block: cst.CSTNode, guard: cst.If, statement: cst.CSTNode) -> bool:
    """Whether `statement` runs in the body of another `if` of `block` that
    tests what `guard` tests (`if (i + 1) % accum == 0:` written twice, once
    for the clip and once for the step): it runs exactly when `guard`'s body
    does, at the accumulation boundary.  A test that calls anything may
    answer differently the second time, and is no proof."""
    path = path_to(block, statement) or []
    return any(
        isinstance(node, cst.If)
        and node is not guard
        and path[index + 1] is node.body
        and node.test.deep_equals(guard.test)
        and not any(isinstance(part, cst.Call) for part in descendants(node.test))
        for index, node in enumerate(path[:-1])
    )


def _ifs_above(block: cst.CSTNode, statement: cst.CSTNode) -> list[cst.If]:
    """The `if` statements between `block` and `statement`, outermost first."""
    return [node for node in path_to(block, statement) or () if isinstance(node, cst.If)]


def _given(loss: cst.BaseExpression, parameters: set[str]) -> bool:
    """Whether `loss` reads only the function's parameters (`loss`, `losses[0]`)."""
    read = name_use(loss).read
    return bool(read) and read <= parameters


def _statements_before(
    scope: cst.FunctionDef | cst.Module, loop: cst.BaseStatement
) -> list[cst.BaseStatement]:
    """The statements of `scope`'s body before the one that holds `loop`."""
    body = scope.body.body if isinstance(scope, cst.FunctionDef) else scope.body
    before = []
    for statement in body:
        finder = _LoopFinder(loop)
        finder.walk(statement)
        if finder.found:
            break
        before.append(statement)
    return before


class _LoopFinder(Visitor):
    """Is this loop node in the walked statement (not in a def inside it)?"""

    def __init__(self, loop: cst.BaseStatement) -> None:
        self.loop = loop
        self.found = False

    def _loop(self, node: Loop) -> bool:
        self.found = self.found or node is self.loop
        return not self.found

    visit_For = visit_While = _loop

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False


def _constant_key(subscript: cst.Subscript) -> bool:
    """`x["d"]`, `x[0]`: one element, by a key the code spells out."""
    if len(subscript.slice) != 1 or not isinstance(subscript.slice[0].slice, cst.Index):
        return False
    return isinstance(subscript.slice[0].slice.value, (cst.SimpleString, cst.Integer))


def looks_like_optimizer(name: str) -> bool:
    """`optimizer`, `self.opt_g`, `optim`: named like one, whatever it holds."""
    return OPTIMIZER_NAME.search(name.rsplit(".", 1)[-1]) is not None


def is_scaler(receiver: cst.BaseExpression) -> bool:
    """`scaler`, `self.grad_scaler`: a GradScaler, by the name every example uses."""
    name = dotted_name(receiver)
    return name is not None and SCALER_NAME.search(name.rsplit(".", 1)[-1]) is not None


class _NestedCalls(Visitor):
    """Every call in a line or loop, in source order (not those of a lambda or
    a def)."""

    def __init__(self) -> None:
        self.calls: list[cst.Call] = []

    @classmethod
    def of(cls, statement: cst.BaseStatement) -> list[cst.Call]:
        finder = cls()
        finder.walk(statement)
        return finder.calls

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False


class _HoldsGradients(Visitor):
    """`model.parameters()`, `named_parameters()`, `optimizer.param_groups`."""

    def __init__(self) -> None:
        self.found = False

    @classmethod
    def within(cls, node: cst.CSTNode) -> bool:
        finder = cls()
        finder.walk(node)
        return finder.found

    def visit_Call(self, node: cst.Call) -> None:
        if method_name(node) in ("parameters", "named_parameters"):
            self.found = True

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value == "param_groups":
            self.found = True


class _BackwardFinder(Visitor):
    def __init__(self) -> None:
        self.found = False

    def visit_Call(self, node: cst.Call) -> None:
        if method_name(node) == "backward":
            self.found = True


def _framework_owned(call: cst.Call) -> bool:
    """`accelerator.clip_grad_norm_(...)`: a framework that unscales in its own clip."""
    receiver = dotted_name(call.func.value) if isinstance(call.func, cst.Attribute) else None
    return (receiver or "").rsplit(".", 1)[-1] in FRAMEWORK_BACKWARD


def _mentions_grad(node: cst.CSTNode) -> bool:
    return any(
        isinstance(child, cst.Attribute) and child.attr.value == "grad"
        for child in descendants(node)
    )


def _base_names(class_def: cst.ClassDef) -> set[str]:
    return {name for base in class_def.bases if (name := dotted_name(base.value)) is not None}


def find_training_steps(
    module: cst.Module,
    imports: ImportMap,
    project_losses: dict[str, LossHelper] | None = None,
    gradient_norms: Callable[[], dict[str, str]] | None = None,
    roles: ModuleRoles | None = None,
    user_wrote: Callable[[str], bool] | None = None,
) -> StepScan:
    """The training steps of `module`; `project_losses` are the loss helpers
    of other project modules it imports (see ProjectView.loss_helpers),
    `gradient_norms` gives, when asked, the functions of the project that
    compute a norm of the gradients, by the names this module calls them;
    `roles`, the module's roles where they are known already (made from the
    same imports and losses)."""
    project_losses = project_losses or {}
    if roles is None:
        roles = module_roles(module, imports, project_losses)
    finder = _StepFinder(module, imports, roles, gradient_norms or dict)
    finder.walk(module)
    _mark_amp_twins(module, finder.steps, user_wrote)
    return StepScan(finder.steps, finder.manual_updates, finder.roles.created)


def _mark_amp_twins(
    module: cst.Module,
    steps: list[TrainingStep],
    user_wrote: Callable[[str], bool] | None = None,
) -> None:
    """Skip, as AMP_TWIN, each FP32 step of a function that the module calls in
    one arm of an `if` whose other arm calls a function with a step of the
    same optimizer that is mixed precision already.  Decided from calls the
    user wrote: a fix never adds such a test, so the fix rounds, which see a
    loop amplint rewrote beside one it has yet to rewrite, decide the same."""
    _mark_amp_twin_loops(module, steps, user_wrote)
    amp = [s for s in steps if s.skip == ALREADY_AMP and s.function is not None]
    if not amp:
        return
    arms = _called_in_arms(module)
    for step in steps:
        if step.skip is not None or step.function is None:
            continue
        name = step.function.name.value
        optimizers = _optimizer_names_of(step)
        for other in amp:
            other_name = other.function.name.value
            if (
                other.function is not step.function
                and other.class_def is step.class_def
                and optimizers & _optimizer_names_of(other)
                and any(
                    (name in body and other_name in orelse)
                    or (name in orelse and other_name in body)
                    for body, orelse in arms
                )
            ):
                step.skip = AMP_TWIN
                break


# Calls every loop makes, which say nothing about what it trains.
_COMMON_CALLS = frozenset({"print", "range", "enumerate", "zip", "len", "iter", "next", "float"})


def _mark_amp_twin_loops(
    module: cst.Module, steps: list[TrainingStep], user_wrote: Callable[[str], bool] | None
) -> None:
    """Skip, as AMP_TWIN_LOOP, each FP32 loop of a scope that holds another
    loop stepping the same optimizer (by name) with mixed precision already,
    and calling every function and model the FP32 loop calls: the same
    training written twice, once as the baseline (PyTorch's AMP recipe).
    The AMP loop must be the user's (`user_wrote`, in a fix's later rounds:
    its code is in the text the fix started from): a loop amplint rewrote in
    an earlier round makes no twin of the one it has yet to rewrite."""
    # Each AMP loop of the user's, with its optimizers and its calls.
    amp = [
        (other, _optimizer_names_of(other), _loop_calls(other.outermost_loop))
        for other in steps
        if other.skip == ALREADY_AMP
        and other.outermost_loop is not None
        and (user_wrote is None or user_wrote(module.code_for_node(other.outermost_loop)))
    ]
    if not amp:
        return
    for step in steps:
        if step.skip is not None or step.outermost_loop is None:
            continue
        calls = _loop_calls(step.outermost_loop)
        if not calls:
            continue
        optimizers = _optimizer_names_of(step)
        for other, other_optimizers, other_calls in amp:
            if (
                other.function is step.function
                and other.outermost_loop is not step.outermost_loop
                and optimizers & other_optimizers
                and calls <= other_calls
            ):
                step.skip = AMP_TWIN_LOOP
                break


def _loop_calls(loop: cst.CSTNode) -> set[str]:
    """What a loop calls by name, or on `self`: its models, losses and helpers
    (methods of tensors, optimizers and scalers left out)."""
    return {
        name
        for node in descendants(loop)
        if isinstance(node, cst.Call) and (name := dotted_name(node.func)) is not None
        if ("." not in name or name.startswith("self.")) and name not in _COMMON_CALLS
    }


def _called_in_arms(module: cst.Module) -> list[tuple[set[str], set[str]]]:
    """For each `if` with an `else`, the names of the functions (and methods)
    each arm calls."""
    finder = _IfArms()
    finder.walk(module)
    return finder.arms


class _IfArms(Visitor):
    def __init__(self) -> None:
        self.arms: list[tuple[set[str], set[str]]] = []

    def visit_If(self, node: cst.If) -> None:
        if node.orelse is not None:
            self.arms.append((_called_names(node.body), _called_names(node.orelse)))


def _called_names(node: cst.CSTNode) -> set[str]:
    finder = _CalledNames()
    finder.walk(node)
    return finder.names


class _CalledNames(Visitor):
    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Call(self, node: cst.Call) -> None:
        name = dotted_name(node.func)
        if name is not None:
            self.names.add(name.rsplit(".", 1)[-1])


def _optimizer_names_of(step: TrainingStep) -> set[str]:
    return {name for s in step.steps if (name := dotted_name(s.optimizer)) is not None}
