"""The forward region of a training step: the statements autocast wraps.

It runs from the first statement that runs the model towards the loss to the one
that binds the loss, in the step block or in the suite holding the backward.
What "runs the model" means is `ModelCalls`' business: a call of anything but
torch itself, data moves, tensor arithmetic, numpy and the module's own helpers
that run no model.  A loss CUDA autocast refuses (BCELoss) splits the region:
its inputs are computed in autocast, the loss after the block on `.float()`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Callable, Collection, Iterator, Sequence

import libcst as cst

from amplint.analysis.autocast import UNSAFE_LOSS_CLASSES, UNSAFE_LOSS_FUNCTIONS
from amplint.analysis.imports import ImportMap, dotted_name
from amplint.analysis.scopes import ScopedVisitor
from amplint.analysis.statements import method_name, name_use
from amplint.analysis.visitor import Visitor, children, descendants

# Losses that raise "unsafe to autocast" under CUDA autocast.
AUTOCAST_UNSAFE_LOSSES = UNSAFE_LOSS_CLASSES | UNSAFE_LOSS_FUNCTIONS

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
class UnsafeLossCall:
    """A call of a loss CUDA autocast refuses (`nn.BCELoss`), and its tensor
    inputs: those that run a model are computed inside autocast first."""

    statement: cst.BaseStatement  # the line holding the call
    call: cst.Call
    inputs: tuple[cst.BaseExpression, ...]  # the prediction and the target
    runs_model: tuple[bool, ...]  # per input


@dataclass(frozen=True, eq=False)
class ForwardRegion:
    """The statements of a step that run the forward pass and compute the loss."""

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
    # The first loss CUDA autocast refuses, as spelled (None: no such loss), and
    # why it cannot be moved after the block, if it cannot.
    unsafe_loss: str | None = None
    unsafe_problem: str | None = None


# Libraries whose objects take gradients inside the forward pass, as a gradient
# penalty does, by the methods that do it and what they are: learn2learn's
# `learner.adapt(loss)` (MAML, MetaSGD) runs torch.autograd.grad on the inner loss.
DIFFERENTIATING_METHODS = {"learn2learn": (frozenset({"adapt"}), "a meta-learning inner step")}


def differentiating_methods(imports: ImportMap) -> dict[str, str]:
    """The methods of DIFFERENTIATING_METHODS whose library the module imports,
    each as `library's `method` (what it is)`, for messages."""
    roots = {binding.target.split(".")[0] for binding in imports.statements}
    return {
        method: f"{library}'s `{method}` ({what})"
        for library, (methods, what) in DIFFERENTIATING_METHODS.items()
        if library in roots
        for method in methods
    }


def takes_gradients_in_forward(module: cst.Module, imports: ImportMap) -> str | None:
    """How the module takes gradients inside a forward pass anywhere, for
    switches that cover the whole module (a framework's): `torch.autograd.grad`
    or a method of DIFFERENTIATING_METHODS.  None where it takes none."""
    finder = _GradientTakers(imports, differentiating_methods(imports))
    finder.walk(module)
    return finder.found


class _GradientTakers(ScopedVisitor):
    def __init__(self, imports: ImportMap, methods: dict[str, str]) -> None:
        super().__init__()
        self.imports = imports
        self.methods = methods
        self.found: str | None = None

    def visit_Call(self, node: cst.Call) -> None:
        if self.found is not None:
            return
        if self.imports.resolve(node.func, self.scope) == "torch.autograd.grad":
            self.found = "`torch.autograd.grad` (a gradient penalty)"
        elif isinstance(node.func, cst.Attribute) and node.func.attr.value in self.methods:
            self.found = self.methods[node.func.attr.value]


class ModelCalls:
    """Which calls of one module run a model, as opposed to making, moving or
    computing on data; and which of them are losses CUDA autocast refuses."""

    def __init__(
        self,
        module: cst.Module,
        resolve: Callable[[cst.BaseExpression], str | None],
        module_functions: dict[str, cst.FunctionDef],
        torch_aliases: set[str],
        unsafe_names: dict[str, str],
        unsafe_helpers: dict[str, str],
        differentiating: Collection[str] = (),
    ) -> None:
        self.module = module
        # Methods that take gradients in the forward pass (`learner.adapt(loss)`).
        self.differentiating = differentiating
        self.resolve = resolve  # a name's qualified name where it is used
        self.module_functions = module_functions  # the defs at the module's top level
        self.torch_aliases = torch_aliases  # globals naming a torch callable
        self.unsafe_names = unsafe_names  # name bound to an autocast-unsafe loss -> its class
        self.unsafe_helpers = unsafe_helpers  # def computing such a loss -> the loss
        self._data_helpers: dict[str, bool] = {}
        self._methods_by_name: dict[str, list[cst.FunctionDef]] | None = None
        self._loop_counters: frozenset[str] | None = None

    def runs_model(self, node: cst.CSTNode) -> bool:
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
            definition = self.module_functions.get(name)
            if definition is not None:
                self._data_helpers[name] = not self.runs_model(definition.body)
        return self._data_helpers[name]

    def with_unsafe_loss_after(self, region: ForwardRegion) -> ForwardRegion:
        """`region` as it is when it computes no loss CUDA autocast refuses;
        else naming that loss, with its statements marked to go after the
        autocast block, as PyTorch's AMP notes do it: the model calls among the
        loss's inputs are computed in the block, the loss on `.float()` of them
        after it.  Or with the reason that cannot be done."""
        calls: list[UnsafeLossCall] = []
        unsafe_from = None
        in_autocast: list[bool] = []
        for index, statement in enumerate(region.statements):
            finder = _UnsafeLossFinder(self)
            finder.walk(statement)
            if finder.found is not None and unsafe_from is None:
                unsafe_from = index
                region = replace(region, unsafe_loss=finder.found)
            if unsafe_from is None:
                continue
            in_autocast.append(not finder.calls and self.runs_model(statement))
            if finder.calls and not isinstance(statement, cst.SimpleStatementLine):
                return replace(
                    region, unsafe_problem="its loss is computed in a compound statement"
                )
            if finder.nested:
                return replace(
                    region, unsafe_problem="its loss is computed in a comprehension or lambda"
                )
            for call in finder.calls:
                inputs = _loss_inputs(call, every_positional=id(call) in finder.helpers)
                runs = tuple(self.runs_model(value) for value in inputs)
                calls.append(UnsafeLossCall(statement, call, inputs, runs))
        if unsafe_from is None:
            return region
        if unsafe_from == 0 and not any(in_autocast) and not any(any(c.runs_model) for c in calls):
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

    def gradient_penalty(self, region: ForwardRegion) -> str | None:
        """The call in the region that runs `torch.autograd.grad`, directly or
        through a def of the module (WGAN-GP's `compute_gradient_penalty`), or
        a library method that does (learn2learn's `learner.adapt(loss)`)."""
        calls = _AllCalls()
        for statement in region.statements:
            calls.walk(statement)
        for call in calls.found:
            if self._takes_gradients(call):
                return self.module.code_for_node(call.func)
            if isinstance(call.func, cst.Name):
                helper = self.module_functions.get(call.func.value)
                if helper is not None and self._calls_differentiation(helper):
                    return call.func.value
            elif _on_self(call.func) and any(
                self._calls_differentiation(method)
                for method in self._methods().get(call.func.attr.value, ())
            ):
                return self.module.code_for_node(call.func)  # `self.compute_grad_pen` (GAIL)
        return None

    def index_write(self, region: ForwardRegion) -> str | None:
        """A write, by a tensor index, of what the region may compute in low
        precision (`next_v[mask] = target_net(s).max(1).values`, PyTorch's DQN
        tutorial), as spelled: index_put_ and its kin (`index_copy_`,
        `scatter_`, ...) need the value in the tensor's dtype, and under
        autocast raise where a float32 tensor takes a float16 value.  Writes
        by an int or a slice copy, which converts; `t[mask] += v` adds in
        float32 first.  None where the region makes no such write."""
        computed: set[str] = set()  # names the region binds before the write
        # Tensors the region makes in float32 whatever autocast does (`torch.zeros(n)`),
        # as opposed to those it computes (`torch.zeros_like(probs)`, a model's output),
        # whose dtype follows what they are computed from.
        made: set[str] = set()
        for statement in region.statements:
            for node in _in_order(statement):
                written = self._index_written(node, computed, made)
                if written is not None:
                    return written
                if isinstance(node, cst.Assign):
                    for target in node.targets:
                        if isinstance(target.target, cst.Name):
                            name = target.target.value
                            computed.add(name)
                            made.discard(name)
                            if _makes_float32(node.value):
                                made.add(name)
            computed |= name_use(statement).bound
        return None

    def _index_written(self, node: cst.CSTNode, computed: set[str], made: set[str]) -> str | None:
        """The write `node` makes into a float32 tensor by a tensor index, of a
        value that may be low precision, as spelled; a tensor the region
        computed has the value's precision already."""
        if isinstance(node, cst.Assign):
            for target in node.targets:
                subscript = target.target
                if (
                    isinstance(subscript, cst.Subscript)
                    and _may_be_float32(subscript.value, computed, made)
                    and self._by_tensor_index(subscript)
                    and _may_compute(node.value, computed)
                ):
                    return f"{self.module.code_for_node(subscript)} = ..."
        elif (
            isinstance(node, cst.Call)
            and method_name(node) in _INDEX_WRITES
            and isinstance(node.func, cst.Attribute)
            and any(_may_compute(argument.value, computed) for argument in node.args[1:])
        ):
            # Whatever the tensor written into: a value computed from the
            # region's outputs and float32 data (C51's projection, `(u - b) *
            # next_pmfs`) is float32 by promotion while the tensor, made like
            # the outputs (`zeros_like(next_pmfs)`), is low precision, or the
            # other way round; these methods raise on either.
            return f"{self.module.code_for_node(node.func)}(...)"
        return None

    def _by_tensor_index(self, subscript: cst.Subscript) -> bool:
        """Whether an element of the index may be a tensor (or a list): not
        an int, a string, a slice, `...`, `None`, or a `for i in range(...)`
        counter."""
        for element in subscript.slice:
            if not isinstance(element.slice, cst.Index):
                continue  # a slice
            value = element.slice.value
            if isinstance(value, cst.UnaryOperation):
                value = value.expression
            if isinstance(value, (cst.Integer, cst.Ellipsis, cst.BaseString)):
                continue  # a string keys a dict (`param_group["lr"] = lr`), never a tensor
            if isinstance(value, cst.Name) and (
                value.value == "None" or value.value in self._counters()
            ):
                continue
            return True
        return False

    def _counters(self) -> frozenset[str]:
        """The names the module's loops count with (`for t in range(n)`,
        `for i, x in enumerate(xs)`): ints, whatever else they index."""
        if self._loop_counters is None:
            found = set()
            for node in descendants(self.module):
                if not isinstance(node, cst.For) or not isinstance(node.iter, cst.Call):
                    continue
                counted = dotted_name(node.iter.func)
                target = node.target
                if counted == "range" and isinstance(target, cst.Name):
                    found.add(target.value)
                elif counted == "enumerate" and isinstance(target, cst.Tuple):
                    first = target.elements[0].value if target.elements else None
                    if isinstance(first, cst.Name):
                        found.add(first.value)
            self._loop_counters = frozenset(found)
        return self._loop_counters

    def _methods(self) -> dict[str, list[cst.FunctionDef]]:
        """The methods of the module's classes, by name (which class `self` is
        goes unasked: a method of that name taking gradients anywhere is enough
        to leave the step alone)."""
        if self._methods_by_name is None:
            self._methods_by_name = {}
            for node in descendants(self.module):
                if not isinstance(node, cst.ClassDef):
                    continue
                for statement in node.body.body:
                    if isinstance(statement, cst.FunctionDef):
                        self._methods_by_name.setdefault(statement.name.value, []).append(statement)
        return self._methods_by_name

    def _takes_gradients(self, call: cst.Call) -> bool:
        if self.resolve(call.func) == "torch.autograd.grad":
            return True
        return isinstance(call.func, cst.Attribute) and call.func.attr.value in self.differentiating

    def _calls_differentiation(self, function: cst.FunctionDef) -> bool:
        calls = _AllCalls()
        calls.walk(function)
        return any(self._takes_gradients(call) for call in calls.found)


class _ModelCallFinder(Visitor):
    def __init__(self, calls: ModelCalls) -> None:
        self.calls = calls
        self.found = False

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value in DATA_METHODS | TENSOR_METHODS:
            return
        if isinstance(func, cst.Name) and (
            func.value in DATA_FUNCTIONS
            or func.value in self.calls.torch_aliases
            or self.calls.is_data_helper(func.value)
        ):
            return
        resolved = self.calls.resolve(func)
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

    def __init__(self, model_calls: ModelCalls) -> None:
        self.model_calls = model_calls
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
        spelled = self.model_calls.module.code_for_node(func)
        qualified = self.model_calls.unsafe_names.get(dotted_name(func) or "")
        if qualified is None and self.model_calls.resolve(func) in AUTOCAST_UNSAFE_LOSSES:
            qualified = self.model_calls.resolve(func)
        if qualified is not None:
            short = short_loss_name(qualified)
            return f"`{spelled}`" if spelled == short else f"`{spelled}` ({short})"
        helper = self.model_calls.unsafe_helpers.get(spelled)
        if helper is not None and dotted_name(func) == spelled:
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


def short_loss_name(qualified: str) -> str:
    """`torch.nn.functional.binary_cross_entropy` as users write it: `F.binary_cross_entropy`."""
    return qualified.replace("torch.nn.functional.", "F.").replace("torch.nn.", "nn.")


def ends_forward_search(statement: cst.BaseStatement) -> bool:
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


# `.step()` receivers that are not an optimizer's: a profiler's schedule, an LR
# scheduler, a timer.  Their step is harmless under autocast, and the model call
# usually sits before a profiler's.
_NOT_OPTIMIZER_STEP = re.compile(r"prof|sched|timer|tqdm|progress|pbar|bar$", re.I)


class _StepCallFinder(Visitor):
    """Does a statement call `.backward(...)` or an optimizer's (or a scaler's)
    `.step(...)` anywhere inside?"""

    def __init__(self) -> None:
        self.found = False

    def visit_Call(self, node: cst.Call) -> None:
        method = method_name(node)
        if method == "backward":
            self.found = True
        elif method == "step":
            receiver = dotted_name(node.func.value) or ""
            last = receiver.rsplit(".", 1)[-1]
            self.found |= not last or _NOT_OPTIMIZER_STEP.search(last) is None

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False


_FETCHES = (cst.For, cst.While, cst.Try)


def forward_region(
    body: Sequence[cst.BaseStatement],
    loss: cst.BaseExpression,
    top: int,
    lower: int,
    parameters: set[str],
    runs_model: Callable[[cst.CSTNode], bool],
) -> ForwardRegion | str:
    """The statements of `body` from the first that computes towards `loss` to
    the one that binds it, above `body[top]` (the line backpropagating it) and
    not above `body[lower]`; or why there are none."""
    loss_names = name_use(loss).read
    last = None
    for index in range(top - 1, lower - 1, -1):
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
        shown = cst.Module([]).code_for_node(loss)
        if loss_names and loss_names <= parameters:
            return f"`{shown}` comes from the caller; autocast belongs where the forward pass runs"
        if any(name_use(statement).bound & loss_names for statement in body[top + 1 :]):
            return (
                f"`{shown}` is computed below its backward, so the backward runs on the "
                "previous iteration's graph; autocast has no forward pass above it to wrap"
            )
        return f"cannot find where `{shown}` is computed in the same block as its backward"
    # Every name of the loss counts: `(loss_real + loss_fake).backward()` needs
    # `loss_real`'s forward pass as much as `loss_fake`'s, bound last.
    return _region_up_to(body, last, lower, runs_model, loss_names)


def feeding_region(
    body: Sequence[cst.BaseStatement],
    names: set[str],
    top: int,
    lower: int,
    runs_model: Callable[[cst.CSTNode], bool],
) -> ForwardRegion | None:
    """The statements of `body` above `body[top]` (not above `body[lower]`)
    that run the model to compute `names`, which a forward region nested in
    `body[top]` reads: `outputs = model(x)` before `if accumulate: loss =
    criterion(outputs, y) ...`.  The model call is the part that pays; the
    loss in the arm alone would leave it in float32.  None where no such
    statement runs a model."""
    last = next(
        (i for i in range(top - 1, lower - 1, -1) if _assigned_names(body[i]) & names), None
    )
    if last is None or ends_forward_search(body[last]) or not runs_model(body[last]):
        return None  # `rb.beta = min(...)` sets an attribute; `x = x.to(device)` moves data
    return _region_up_to(body, last, lower, runs_model)


def _assigned_names(statement: cst.BaseStatement) -> set[str]:
    """The plain names a simple statement assigns (`outputs = model(x)`,
    `out, aux = net(x)`); not attributes or items it stores into."""
    names: set[str] = set()
    if not isinstance(statement, cst.SimpleStatementLine):
        return names
    for small in statement.body:
        targets = []
        if isinstance(small, cst.Assign):
            targets = [t.target for t in small.targets]
        elif isinstance(small, (cst.AnnAssign, cst.AugAssign)):
            targets = [small.target]
        while targets:
            target = targets.pop()
            if isinstance(target, cst.Name):
                names.add(target.value)
            elif isinstance(target, (cst.Tuple, cst.List)):
                targets += [element.value for element in target.elements]
    return names


def _region_up_to(
    body: Sequence[cst.BaseStatement],
    last: int,
    lower: int,
    runs_model: Callable[[cst.CSTNode], bool],
    also: Collection[str] = (),
) -> ForwardRegion:
    """The region ending at `body[last]`, from the first statement not above
    `body[lower]` that runs a model towards what it reads (and `also`)."""
    needed = set(name_use(body[last]).read) | set(also)
    first = last
    for index in range(last - 1, lower - 1, -1):
        if ends_forward_search(body[index]):
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


def _on_self(func: cst.BaseExpression) -> bool:
    """`self.name`: a method of the instance."""
    return (
        isinstance(func, cst.Attribute)
        and isinstance(func.value, cst.Name)
        and func.value.value == "self"
    )


# In-place writes by index that need the source in the tensor's own dtype.
_INDEX_WRITES = frozenset(
    {
        "index_put_",
        "index_copy_",
        "index_add_",
        "scatter_",
        "scatter_add_",
        "masked_scatter_",
        "put_",
    }
)
# Calls whose result is a Python number, never a low-precision tensor.
_NUMBER_CALLS = frozenset({"float", "int", "len", "bool", "round", "abs", "min", "max", "sum"})


def _in_order(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """`node` and the nodes below it, in the order the source spells them."""
    yield node
    for child in children(node):
        yield from _in_order(child)


# torch's factories, whose tensors are float32 (the default dtype) under autocast.
_FACTORIES = frozenset(
    {"zeros", "ones", "empty", "full", "tensor", "as_tensor", "arange", "rand", "randn"}
)


def _makes_float32(value: cst.BaseExpression) -> bool:
    """`torch.zeros(n, device=d)` and its kin (not `zeros_like`, nor with a `dtype=`)."""
    return (
        isinstance(value, cst.Call)
        and isinstance(value.func, cst.Attribute)
        and value.func.attr.value in _FACTORIES
        and not any(
            argument.keyword and argument.keyword.value == "dtype" for argument in value.args
        )
    )


def _may_be_float32(written: cst.BaseExpression, computed: set[str], made: set[str]) -> bool:
    """Whether the tensor `written` (`next_v`, `buffer[i]`) may be float32 while
    autocast computes in low precision: it comes from before the region, or
    the region made it with a factory; not where the region computed it."""
    while isinstance(written, (cst.Subscript, cst.Attribute)):
        written = written.value
    if not isinstance(written, cst.Name):
        return True
    return written.value in made or written.value not in computed


def _may_compute(value: cst.BaseExpression, computed: set[str]) -> bool:
    """Whether `value` may be a tensor autocast computed in low precision: it
    calls something, or reads a name the region bound.  A number, or data
    from before the region, is not."""
    for node in descendants(value):
        if isinstance(node, cst.Call) and not (
            isinstance(node.func, cst.Name) and node.func.value in _NUMBER_CALLS
        ):
            return True
        if isinstance(node, cst.Name) and node.value in computed:
            return True
    return False
