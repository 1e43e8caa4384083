"""The AMP203 fix: a module written against apex.amp, migrated to torch.amp.

apex.amp is global state: ``amp.initialize`` patches torch for the whole process
and every ``amp.scale_loss`` anywhere uses the loss scaler it made.  torch.amp
has no global state, so the migration makes that state a GradScaler and gives
each training step the recipe AMP001 writes:

1. Edits on the tree the rule saw take apex out.  ``if args.fp16: <apex> else:
   <fp32>`` keeps its FP32 branch; ``with amp.scale_loss(loss, opt) as s:
   s.backward()`` becomes ``loss.backward()``; ``amp.master_params(opt)`` the
   optimizer's parameters; ``amp.initialize(...)`` a ``torch.amp.GradScaler``
   whose ``enabled=`` is the condition the apex call ran under;
   ``amp.state_dict()`` the scaler's.  The scaler is a local of the function
   that called ``amp.initialize`` when everything using it is in that function,
   and a module global otherwise, as apex's state was.
2. The training steps of that FP32 code which reach the scaler are then planned
   exactly as AMP001 plans a step (`InsertAmp` told to use this scaler):
   autocast around the forward pass, ``scaler.scale(loss).backward()``,
   ``scaler.step``, one ``scaler.update()``, ``scaler.unscale_`` before clipping.

What happens to the code around apex (probes, import fallbacks, FP32
branches) is branches.py; the builders that return the scaler, builders.py;
how the scaler reaches other defs and modules, reach.py; the conditions of its
`enabled=`, conditions.py; the autocast switch turned on for a loss-scaler
object's callers, autocast_switch.py; statement-level helpers, statements.py.

The whole module is migrated or nothing is: half an apex migration runs neither
with apex nor without it.  So the plan is carried out when the rule checks the
file, and anything that would be left behind (a backward apex scaled that no
rewritten step scales) stops it with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import libcst as cst

from amplint.analysis import ModuleFacts
from amplint.analysis.apex import (
    APEX_AMP,
    ApexScan,
    ApexUse,
    assigned_names,
    initializes_for_inference,
    is_private,
    loss_scale_reads,
    scaler_setting,
    squeezed,
)
from amplint.analysis.scopes import Scope
from amplint.analysis.visitor import descendants
from amplint.analysis.statements import (
    if_condition,
    method_name,
    name_use,
    positional_args,
    string_value,
)
from amplint.config import Settings
from amplint.diagnostics import Edit
from amplint.names import SCALER_NAMES, free_name
from amplint.transforms.apex.autocast_switch import AutocastSwitch
from amplint.transforms.apex.branches import ApexBranches
from amplint.transforms.apex.builders import return_scaler, take_scaler
from amplint.transforms.apex.conditions import conjunction, disjunction, negated
from amplint.transforms.apex.inference import ApexInference
from amplint.transforms.apex.common import (
    MigrationBlocked,
    apex_choice,
    atom,
    code_of,
    keyword_args,
)
from amplint.transforms.apex.functions import FunctionCasts
from amplint.transforms.apex.op_lists import list_edit_changes
from amplint.transforms.apex.reach import ScalerReach, places
from amplint.transforms.apex.statements import (
    own_init,
    with_first,
    backward_of,
    block_holding,
    holds_only,
    imports_apex_only,
    is_none_test,
    leading_lines_of,
    longest_chain,
    nodes_in,
    top_statement,
    with_backward_of,
    without_apex_comments,
)
from amplint.transforms import spelling
from amplint.transforms.edits import EditBook, apply_edits
from amplint.transforms.imports import (
    ensure_functools_imported,
    ensure_torch_imported,
    tidy_apex_imports,
)
from amplint.transforms.arguments import one_per_line
from amplint.transforms.insert_amp import (
    LINE_LENGTH,
    InsertAmp,
    micro_step_edit_obstacle,
    needs_sharded_scaler,
)

# amp.initialize keywords torch.amp has no counterpart for, and what changes
# when they are dropped; `loss_scale` and `opt_level` are handled apart.
_DROPPED_KEYWORDS = {
    "keep_batchnorm_fp32": "with autocast all weights stay float32",
    "master_weights": "with autocast the weights themselves stay float32",
    "cast_model_type": "autocast casts per op, not the model",
    "cast_model_outputs": "autocast picks each op's output dtype",
    "num_losses": "one GradScaler scales every loss (torch's recipe for several losses), "
    "so an overflow in one loss skips the steps of the optimizers it reaches",
    "min_loss_scale": "the GradScaler's scale has no lower bound",
    "max_loss_scale": "the GradScaler's scale has no upper bound",
}


@dataclass
class _Initialization:
    """An `amp.initialize` call and what its migration to a GradScaler keeps."""

    use: ApexUse
    removable: bool  # the statement only binds what amp.initialize returns
    conditions: list[str]  # when the scaler is enabled, all of them; empty: always
    init_scale: str | None  # a static apex loss scale, where GradScaler starts
    # Further GradScaler keywords, from apex's loss scaler set right after it
    # was made (`loss_scalers[0]._scale_seq_len = 1000`: growth_interval=1000).
    settings: dict[str, str] = field(default_factory=dict)
    # What the statement becomes where a loss-scaler object's forward passes run
    # under the program's autocast switch (autocast_switch.py): `amp_autocast =
    # partial(torch.autocast, ...)`, made in place of amp.initialize.
    switch: cst.BaseStatement | None = None


@dataclass
class ApexMigration:
    """The migrated module, the scaler it made, and what changes numerically."""

    module: cst.Module
    scaler: str
    # Per `amp.initialize` use, and per cast helper, what does not carry over
    # exactly: a non-empty list makes the fix unsafe.
    changes: dict[ApexUse, list[str]]
    # The other modules of the program, which the same migration rewrites:
    # written together or not at all.
    partners: tuple[str, ...] = ()


def migrate_apex(facts: ModuleFacts, scan: ApexScan, settings: Settings) -> ApexMigration:
    """The module with every apex.amp use migrated; raises MigrationBlocked."""
    return _Migrator(facts, scan, settings).run()


class _Migrator(ApexBranches, ApexInference, AutocastSwitch):
    def __init__(self, facts: ModuleFacts, scan: ApexScan, settings: Settings) -> None:
        self.facts = facts
        self.scan = scan
        self.settings = settings
        self.uses = scan.of(APEX_AMP)
        self.book = EditBook()
        self.changes: dict[ApexUse, list[str]] = {}
        # The program's choice where there is one: its callers pass that keyword.
        self.program = facts.apex_program
        here = facts.program_path
        if self.program is not None and here in self.program.scaler_names:
            self.scaler = self.program.scaler_names[here]
        else:
            self.scaler = free_name(SCALER_NAMES, facts.text)
        self.torch = facts.imports.name_for("torch", facts.module) or "torch"
        self.initializations: list[_Initialization] = []
        # Uses that need the scaler in reach: scale_loss, state_dict, ...
        self.scaler_scopes: list[Scope] = []
        self.losses: list[str] = []  # each loss apex scaled, as its backward will spell it
        self.removed: set[int] = set()  # ids of the statements the migration removes
        # The function the scaler is a local of; None for a module global.
        self.local_function: cst.FunctionDef | None = None
        # The statement of each scope's body (by the scope's id) that makes the
        # scaler, or that it is made before.
        self.made_at: dict[int, cst.BaseStatement] = {}
        self.inference_only = False  # an amp.initialize with no optimizer was migrated
        self.needs_functools = False  # an autocast switch is set with functools.partial
        # A scaler made off in `__init__` until a method running amp.initialize replaces it.
        self.off_until_initialized = False
        # The element count of each `amp.initialize(...)` that stands for what
        # it returns (`return amp.initialize(model, optimizer)`), by id.
        self.returned_arity: dict[int, int] = {}
        self.casts = FunctionCasts(facts, scan, settings, self.book, self.changes, self.torch)
        # The modules one migration rewrites, where the project model knows them.
        self.reach: ScalerReach | None = None
        if self.program is not None:
            self.reach = ScalerReach(facts, self.program, self.scaler, self._initializing())

    @property
    def _bfloat16(self) -> bool:
        return apex_choice(self.settings).dtype == "bfloat16"

    def _initializing(self) -> set[str]:
        """The top-level defs calling amp.initialize, "" for module level, and
        those that receive the scaler from a builder: the scaler is theirs."""
        located = places(self.facts.module)
        found = self.program.receivers_in(self.facts.program_path)
        for use in self.uses:
            if use.member == "initialize":
                top = located.get(id(use.scope))
                found.add(top.top.name.value if top is not None and top.top is not None else "")
        return found

    def scaler_at(self, scope: Scope, module: cst.Module | None = None) -> str:
        """How code in `scope` spells the scaler, once it is placed."""
        if self.reach is None:
            return self.scaler
        return self.reach.expression(scope, module)

    def code(self, node: cst.CSTNode) -> str:
        return self.facts.module.code_for_node(node)

    def _grad_scaler(self, arguments: list[str]) -> str:
        """The GradScaler in apex's place, as target-torch spells it."""
        device = f'"{self.settings.device_type}"'
        return spelling.grad_scaler(self.torch, self.settings.target_torch, device, arguments)

    def _autocast(self, dtype: str | None, arguments: list[str]) -> str:
        """Autocast on the migration's device, as target-torch spells it."""
        device = f'"{self.settings.device_type}"'
        return spelling.autocast(self.torch, self.settings.target_torch, device, dtype, arguments)

    # -- driving ------------------------------------------------------------------
    def run(self) -> ApexMigration:
        choice = apex_choice(self.settings)
        settings = self.settings
        obstacle = spelling.obstacle(
            settings.target_torch, settings.target_torch_shown, {choice.device}, choice.dtype, True
        )
        if obstacle is None and needs_sharded_scaler(self.facts):
            obstacle = "FSDP needs ShardedGradScaler in place of apex's loss scaler"
        if obstacle is not None:
            raise MigrationBlocked(obstacle)
        dropped = self._keep_fp32_branches()
        self._drop_import_fallbacks()
        replaced: set[str] = set()
        for use in self.uses:
            if not any(id(ancestor) in dropped for ancestor in use.ancestors):
                self._migrate(use)
            elif use.member == "scale_loss" and use.call is not None and use.call.args:
                # In an apex-only branch the FP32 branch replaces; its step must
                # still end up scaled, once for however many scale_loss the
                # apex branch had (XLM's: one at the step, one between steps).
                loss = self.code(atom(use.call.args[0].value))
                if loss not in replaced:
                    replaced.add(loss)
                    self.losses.append(loss)
        if self.program is not None and self.program.obstacles:
            raise MigrationBlocked(self.program.obstacles[0])
        if self.inference_only and not self.initializations and not self.scaler_scopes:
            pass  # a model cast for inference: no scaler to make
        elif not self.initializations and not (self.program and self.program.initializers):
            raise MigrationBlocked(
                "no amp.initialize in this program: the GradScaler that replaces apex's "
                "state is made where amp.initialize is called"
            )
        if self.initializations or not self.inference_only:
            self._place_scaler()
        module = apply_edits(self.facts.module, self.book.edits())
        module = tidy_apex_imports(module)
        if self.casts.float32_helper is not None or self.needs_functools:
            module = ensure_functools_imported(module)
        module = self._complete_steps(module)
        return ApexMigration(
            ensure_torch_imported(module), self.scaler, self.changes, self._partners()
        )

    def _partners(self) -> tuple[str, ...]:
        """The other modules the migration rewrites, as the runner finds them."""
        if self.program is None:
            return ()
        here = self.facts.program_path
        return tuple(str(path) for path in self.program.modules if path != here)

    def _migrate(self, use: ApexUse) -> None:
        member = use.member
        if member == "initialize" and use.call is not None:
            self._initialize(use)
        elif member == "scale_loss" and use.call is not None:
            self._scale_loss(use)
        elif member == "master_params" and use.call is not None:
            self._master_params(use)
        elif member == "load_state_dict" and self._restore_guarded(use):
            self.scaler_scopes.append(use.scope)
        elif member in ("state_dict", "load_state_dict") and use.call is not None:
            self.book.rewrite(
                use.call,
                lambda call: call.with_changes(
                    func=cst.parse_expression(f"{self.scaler_at(use.scope)}.{member}")
                ),
            )
            self.scaler_scopes.append(use.scope)
        elif member in ("", "__dict__") and self._feature_probe(use):
            pass
        elif member.split(".")[0] == "_amp_state" and self._scaler_setting(use):
            pass
        elif member.split(".")[0] == "_amp_state" and use.call is None:
            self._loss_scale(use)
        elif member == "disable_casts" and use.call is not None and not use.call.args:
            autocast = cst.parse_expression(self._autocast(None, ["enabled=False"]))
            self.book.rewrite(use.call, lambda call: autocast)
        elif member in ("float_function", "half_function", "promote_function"):
            self.casts.cast_function(use, member.split("_")[0])
        elif member.startswith("register_") and member.endswith("_function"):
            self.casts.registration(use, member[len("register_") : -len("_function")])
        elif member.startswith("lists."):  # `amp.lists.functional_overrides.FP16_FUNCS.append`
            self.changes[use] = list_edit_changes(use, self.code(use.call or use.node))
            self._remove(use.statement)
        elif is_private(member):  # `amp._amp_state.handle`, `amp._initialize`
            raise MigrationBlocked(
                f"`{self.code(use.node)}` reads apex's private state (AMP204); "
                "rewrite it by hand first"
            )
        elif member == "" and self._availability_probe(use):
            pass
        elif member == "init" and use.call is not None:
            self._first_api(use)
        else:
            shown = self.code(use.call or use.node)
            raise MigrationBlocked(f"`{shown}` has no torch.amp counterpart amplint knows")

    # -- amp.initialize -----------------------------------------------------------
    def _initialize(self, use: ApexUse) -> None:
        call = use.call
        if initializes_for_inference(use):
            self._initialize_for_inference(use)
            return
        returned = ", ".join(self.code(arg.value) for arg in positional_args(call)[:2])
        statement = use.statement
        targets = assigned_names(statement)
        value = statement.body[0].value if targets is not None else None
        removable = value is call and squeezed(targets) == squeezed(returned)
        if not removable:  # `return amp.initialize(model, optimizer)`: it returns what it was given
            replacement = cst.parse_expression(returned or "None")
            self.book.rewrite(call, lambda _: replacement)
            self.returned_arity[id(call)] = len(positional_args(call)[:2])
        conditions, changes, init_scale = self._options(call)
        self.changes[use] = changes
        if conditions != ["False"]:
            conditions = self._conditions(use) + conditions
        initialization = _Initialization(use, removable, conditions, init_scale)
        if self.program is not None and self.program.scaled_at_callers:
            initialization.switch = self._switch_on(initialization)
        self.initializations.append(initialization)

    def _options(self, call: cst.Call) -> tuple[list[str], list[str], str | None]:
        """What amp.initialize's keywords mean for the scaler: the conditions it
        is enabled under, what changes numerically, and its initial scale."""
        keywords = keyword_args(call)
        conditions: list[str] = []
        changes: list[str] = []
        enabled = keywords.get("enabled")
        if enabled is not None and self.code(enabled.value) != "True":
            conditions.append(self.code(enabled.value))
        opt_level = keywords.get("opt_level")
        level = string_value(opt_level.value) if opt_level is not None else "O1"
        if level is None:
            shown = self.code(opt_level.value)
            conditions.append(f'{shown} != "O0"')
            changes.append(
                f"opt_level is `{shown}` at run time: O0 turns the scaler and autocast off, "
                "O2 and O3 are migrated as O1 (autocast with float32 weights)"
            )
        elif level == "O0":
            conditions = ["False"]  # apex's pure FP32
        elif level in ("O2", "O3"):
            kept = "float16 with float32 master weights" if level == "O2" else "float16"
            changes.append(
                f'opt_level="{level}" kept the model in {kept}; migrated as O1: the weights '
                "stay float32 and autocast picks float16 or float32 per op (more memory, "
                "numerically safer)"
            )
        for name, change in _DROPPED_KEYWORDS.items():
            argument = keywords.get(name)
            if argument is not None and code_of(argument.value) not in ("None", "1", "False"):
                changes.append(f"`{name}` dropped: {change}")
        init_scale = None
        loss_scale = keywords.get("loss_scale")
        shown = code_of(loss_scale.value) if loss_scale is not None else "None"
        if isinstance(loss_scale and loss_scale.value, (cst.Float, cst.Integer)):
            init_scale = shown
            changes.append(
                f"the static loss scale {shown} becomes the GradScaler's initial scale, "
                "which then adapts"
            )
        elif shown not in ("None", '"dynamic"', "'dynamic'"):
            changes.append(
                f"`loss_scale={shown}` (run time) dropped: the GradScaler scales dynamically"
            )
        return conditions, changes, init_scale

    def _conditions(self, use: ApexUse) -> list[str]:
        """The `if` tests `use` runs under, as they must hold."""
        pieces = []
        chain = [*use.ancestors, use.statement]
        probes = {id(other.node) for other in self.uses if other.member == ""}
        for index, holder in enumerate(chain[:-1]):
            if not isinstance(holder, cst.If) or is_none_test(holder.test, probes):
                continue  # `if amp is not None:` holds once migrated (see _answer)
            test, taken = if_condition(holder.test)
            if chain[index + 1] is holder.orelse:
                taken = not taken
            pieces.append(test if taken else negated(test))
        return pieces

    # -- where the scaler is made ---------------------------------------------------
    def _place_scaler(self) -> None:
        by_scope: dict[int, list[_Initialization]] = {}
        for init in self.initializations:
            by_scope.setdefault(id(init.use.scope), []).append(init)
        for inits in by_scope.values():
            if len(inits) == 1:
                self._create_scaler(inits[0])
            else:
                self._create_one_scaler(inits)
        init_scopes = [init.use.scope for init in self.initializations]
        if self.reach is not None:
            try:
                for scope in self.scaler_scopes:
                    self.reach.expression(scope)
                through_builders = self._through_builders()  # may refuse: plan before writing
                defaults = self._off_until_initialized()
                self.reach.thread(self.book)
                for node, rewrite in through_builders + defaults:
                    self.book.rewrite(node, rewrite)
                return
            except MigrationBlocked:
                if len(self.program.modules) > 1 or not self.initializations:
                    raise
            # One module whose scaler cannot travel as an argument (a helper
            # returns what amp.initialize returned): a global, as apex's state was.
            self.reach = None
        local = isinstance(init_scopes[0], cst.FunctionDef) and all(
            scope is init_scopes[0] for scope in [*init_scopes, *self.scaler_scopes]
        )
        self.local_function = init_scopes[0] if local else None
        if not local:
            functions = {id(s): s for s in init_scopes if isinstance(s, cst.FunctionDef)}
            for function in functions.values():
                self._declare_global(function)

    def _off_until_initialized(self) -> list[tuple[cst.CSTNode, Callable]]:
        """amp.initialize in a method other than `__init__` (`init_amp`, which
        the caller may skip when fp16 is off): until it runs, apex's state was
        there and inactive, and `amp.scale_loss` passed the loss through.  The
        counterpart is a GradScaler made off in `__init__`, which that method
        replaces; every other method's autocast then asks the scaler."""
        planned: list[tuple[cst.CSTNode, Callable]] = []
        for init in self.initializations:
            place = self.reach.place(init.use.scope, self.facts.module)
            if not isinstance(place.top, cst.ClassDef) or place.method is None:
                continue
            if place.method.name.value == "__init__":
                continue
            constructor = own_init(place.top)
            name = place.top.name.value
            if (
                constructor is None
                or not constructor.params.params
                or not isinstance(constructor.body, cst.IndentedBlock)
            ):
                raise MigrationBlocked(
                    f"`{name}.{place.method.name.value}` makes the GradScaler, and `{name}` has "
                    "no `__init__` of its own to make one, off, for when it is not called"
                )
            this = constructor.params.params[0].name.value
            made = self._grad_scaler(["enabled=False"])
            default = cst.parse_statement(f"{this}.{self.scaler} = {made}\n")

            planned.append(
                (constructor.body, lambda block, default=default: with_first(block, default))
            )
            self.off_until_initialized = True
        return planned

    def _through_builders(self) -> list[tuple[cst.CSTNode, Callable]]:
        """The rewrites by which this module's builders return the scaler and
        the calls of any builder here unpack it (builders.py)."""
        here = self.facts.program_path
        planned = []
        for name in self.program.builders_in(here):
            builder = next(
                s
                for s in self.facts.module.body
                if isinstance(s, cst.FunctionDef) and s.name.value == name
            )
            made_at = self.made_at.get(id(builder))
            if made_at is None:
                raise MigrationBlocked(
                    f"`{name}` returns the optimizer amp.initialize made, in a nested "
                    "function or class, where the GradScaler made beside it is not returned"
                )
            planned += return_scaler(self.facts, builder, made_at, self.scaler, self.returned_arity)
        return planned + take_scaler(self.reach, self.program.builders)

    def _scaler_statement(self, init: _Initialization, condition: str | None):
        """`scaler = torch.amp.GradScaler(...)` where `init` ran (`self.scaler = `
        in a method, where the instance keeps it)."""
        init_scale = init.init_scale
        arguments = []
        if self._bfloat16:
            # bfloat16 has float32's range: the scaler stays for apex's state
            # (checkpoints, scale reads), turned off (AMP112).
            condition, init_scale, init.settings = "False", None, {}
        if init_scale is not None:
            arguments.append(f"init_scale={init_scale}")
        arguments += [f"{keyword}={value}" for keyword, value in init.settings.items()]
        if condition is not None:
            arguments.append(f"enabled={condition}")
        target = self.scaler_at(init.use.scope)
        line = f"{target} = {self._grad_scaler(arguments)}"
        return cst.parse_statement(line + "\n")

    def _create_one_scaler(self, inits: list[_Initialization]) -> None:
        """One GradScaler for the amp.initialize calls of one scope, in the
        branches of one `if` (`if args.O2: ...(opt_level="O2") else: ...`):
        enabled when any of them would have run.  Two scalers would leave the
        first dead, and the second's condition alone decides."""
        tops = {id(top_statement(init.use)): top_statement(init.use) for init in inits}
        lines = ", ".join(str(self.facts.span(init.use.node).line) for init in inits)
        if len(tops) > 1:
            raise MigrationBlocked(
                f"amp.initialize runs more than once in one scope (lines {lines}): one "
                "GradScaler replaces them, and which of them it should follow is a guess"
            )
        if len({init.init_scale for init in inits}) > 1:
            raise MigrationBlocked(
                f"the amp.initialize calls at lines {lines} start from different loss scales"
            )
        (top,) = tops.values()
        self.made_at[id(inits[0].use.scope)] = top
        condition = disjunction([init.conditions for init in inits])
        created = self._scaler_statement(inits[0], condition)
        removed = {
            id(init.use.statement) for init in inits if init.removable and init.switch is None
        } | self.removed
        if isinstance(top, cst.If) and holds_only(top, removed):
            self.book.rewrite(
                top,
                lambda node: created.with_changes(
                    leading_lines=without_apex_comments(node.leading_lines)
                ),
            )
            return
        for init in inits:
            if init.switch is not None:
                self._switch_in_place(init.use.statement, init.switch)
            elif init.removable:
                self._remove(init.use.statement)
        self.book.insert_before(top, [created])

    def _create_scaler(self, init: _Initialization) -> None:
        created = self._scaler_statement(init, conjunction(init.conditions))
        use = init.use
        top = top_statement(use)
        earlier = self._resume_before(init, top)
        self.made_at[id(use.scope)] = earlier or top
        if not init.removable:
            self.book.insert_before(earlier or top, [created])
            return
        if init.switch is not None:
            self._switch_in_place(init.use.statement, init.switch)
            self.book.insert_before(earlier or top, [created])
            return
        vanishing = self._vanishing(use)
        if vanishing is top and earlier is None:  # the scaler takes its place
            self.book.rewrite(
                top,
                lambda node: created.with_changes(
                    leading_lines=without_apex_comments(leading_lines_of(node))
                ),
            )
        else:  # made before the statement it was nested in, whichever branch runs
            self._remove(vanishing)
            self.book.insert_before(earlier or top, [created])

    def _resume_before(self, init: _Initialization, top: cst.BaseStatement):
        """The statement of the scope's body that restores the optimizer from a
        checkpoint before amp.initialize runs, if any: the scaler is made before
        it, beside the optimizer, so the resume can restore the scaler too (a
        GradScaler made later would have its state reset).  None where the
        scaler's `enabled=` reads a name bound between the two."""
        scope = init.use.scope
        body = scope.body if isinstance(scope, cst.Module) else scope.body.body
        position = next((i for i, statement in enumerate(body) if statement is top), None)
        call = init.use.call
        arguments = positional_args(call)[1:2] if call is not None else []
        if position is None or not arguments:
            return None
        given = arguments[0].value
        elements = given.elements if isinstance(given, (cst.List, cst.Tuple)) else ()
        optimizers = {self.code(e.value) for e in elements} or {self.code(given)}

        def resumes(statement: cst.BaseStatement) -> bool:
            return any(
                method_name(node) == "load_state_dict" and self.code(node.func.value) in optimizers
                for node in nodes_in(statement, cst.Call)
            )

        first = next((i for i in range(position) if resumes(body[i])), None)
        if first is None:
            return None
        condition = conjunction(init.conditions)
        if condition is not None:
            read = name_use(cst.parse_expression(condition)).read
            for statement in body[first:position]:
                if read & name_use(statement).bound:
                    return None
        return body[first]

    def _remove(self, statement: cst.BaseStatement) -> None:
        self.removed.add(id(statement))
        self.book.rewrite(statement, lambda _: cst.RemovalSentinel.REMOVE)

    def _vanishing(self, use: ApexUse) -> cst.BaseStatement:
        """What goes with `use`'s statement: it, with the `if`s around it that
        hold nothing else (`if args.fp16: from apex import amp; model, opt =
        amp.initialize(...)`)."""
        vanishing: cst.BaseStatement = use.statement
        for holder in reversed(use.ancestors):
            if not (isinstance(holder, cst.If) and self._empties(holder, vanishing)):
                break
            vanishing = holder
        return vanishing

    def _empties(self, holder: cst.If, removed: cst.BaseStatement) -> bool:
        """Whether `holder` holds nothing once `removed`, the statements removed
        before it (`assert amp is not None`) and apex imports are gone."""
        if holder.orelse is not None:
            return False
        return all(
            statement is removed or id(statement) in self.removed or imports_apex_only(statement)
            for statement in holder.body.body
        )

    def _declare_global(self, function: cst.FunctionDef) -> None:
        declaration = cst.SimpleStatementLine([cst.Global([cst.NameItem(cst.Name(self.scaler))])])
        self.book.rewrite(function.body, lambda block: with_first(block, declaration))

    # -- amp.scale_loss ------------------------------------------------------------
    def _scale_loss(self, use: ApexUse) -> None:
        block = use.statement
        call = use.call
        positional = positional_args(call)
        if (
            not isinstance(block, cst.With)
            or len(block.items) != 1
            or block.items[0].item is not call
            or not isinstance(block.items[0].asname, cst.AsName)
            or not isinstance(block.items[0].asname.name, cst.Name)
            or not positional
        ):
            shown = self.code(call)
            raise MigrationBlocked(f"`{shown}` is not used as `with {shown} as scaled_loss:`")
        scaled = block.items[0].asname.name.value
        loss = atom(positional[0].value)
        for statement in block.body.body:
            if scaled in name_use(statement).read and not backward_of(statement, scaled):
                raise MigrationBlocked(
                    f"`{scaled}` is used for more than `{scaled}.backward()` under "
                    f"`{self.code(call)}`"
                )
        self.losses.append(self.code(loss))
        self.scaler_scopes.append(use.scope)

        def unscaled(node: cst.With) -> cst.FlattenSentinel:
            statements = [with_backward_of(statement, scaled, loss) for statement in node.body.body]
            first = statements[0].with_changes(leading_lines=node.leading_lines)
            return cst.FlattenSentinel([first, *statements[1:]])

        self.book.rewrite(block, unscaled)

    # -- amp.master_params ------------------------------------------------------------
    def _master_params(self, use: ApexUse) -> None:
        positional = positional_args(use.call)
        if len(positional) != 1:
            raise MigrationBlocked(f"`{self.code(use.call)}` does not name one optimizer")
        optimizer = self.code(atom(positional[0].value))
        params = cst.parse_expression(
            f'(p for group in {optimizer}.param_groups for p in group["params"])'
        )
        holder = next(
            (
                call
                for call in descendants(use.statement)
                if isinstance(call, cst.Call) and any(arg.value is use.call for arg in call.args)
            ),
            None,
        )
        if holder is None:
            self.book.rewrite(use.call, lambda _: params)
            return
        # The sole argument of a call needs no parentheses of its own:
        # `list(p for group in ...)`, not `list((p for group in ...))`.
        at = next(index for index, arg in enumerate(holder.args) if arg.value is use.call)
        arg = holder.args[at]
        sole = len(holder.args) == 1 and not arg.keyword and not arg.star
        value = params.with_changes(lpar=[], rpar=[]) if sole else params
        # A call on one line that the parameters would push past black's line
        # length gets an argument per line, as black lays it out.
        line = self.facts.line_of(use.call)
        grown = len(line.rstrip()) - len(self.code(use.call)) + len(self.code(value))
        explode = grown > LINE_LENGTH and "\n" not in self.code(holder)

        def rewrite(call: cst.Call) -> cst.Call:
            args = list(call.args)
            args[at] = args[at].with_changes(value=value)
            call = call.with_changes(args=args)
            return one_per_line(call) if explode else call

        self.book.rewrite(holder, rewrite)

    # -- amp._amp_state.loss_scalers[0].loss_scale() ------------------------------
    def _scaler_setting(self, use: ApexUse) -> bool:
        """`amp._amp_state.loss_scalers[0]._loss_scale = E` beside amp.initialize
        (NVIDIA BERT's `--init_loss_scale`): the GradScaler made there starts
        from E, and the statement goes.  False for any other use."""
        setting = scaler_setting(use, self.facts.module)
        if setting is None:
            return False
        keyword, value = setting
        # The amp.initialize this follows in its block, with only other
        # settings of the scaler between them.
        block = block_holding(use)
        position = next(i for i, statement in enumerate(block) if statement is use.statement)
        init = None
        for statement in reversed(block[:position]):
            init = next((i for i in self.initializations if i.use.statement is statement), None)
            if init is not None or not any(
                other.statement is statement and scaler_setting(other, self.facts.module)
                for other in self.uses
            ):
                break
        if init is None:
            raise MigrationBlocked(
                f"`{self.code(use.statement.body[0])}` sets apex's loss scaler away from "
                "the amp.initialize that made it; move it right after that call (the "
                f"GradScaler made there takes `{keyword}=`)"
            )
        if keyword == "init_scale":
            init.init_scale = self.code(value)
        else:
            init.settings[keyword] = self.code(value)
        self._remove(use.statement)
        return True

    def _loss_scale(self, use: ApexUse) -> None:
        """apex's current loss scale, read through its private state: the
        GradScaler's `get_scale()`; any other read of the state blocks."""
        reads = loss_scale_reads(use, self.facts.module)
        if not reads:
            spelled = longest_chain(use, self.facts.module)
            raise MigrationBlocked(
                f"`{spelled}` uses apex's private state (AMP204) for more than the loss "
                "scale, with no GradScaler counterpart amplint knows; rewrite it by hand "
                "first (a GradScaler reads its scale with `get_scale()`, starts from "
                "`init_scale=` and grows every `growth_interval=` steps)"
            )
        for call in reads:
            self.book.rewrite(
                call,
                lambda _: cst.parse_expression(f"{self.scaler_at(use.scope)}.get_scale()"),
            )
        self.scaler_scopes.append(use.scope)

    # -- the training steps ---------------------------------------------------------
    def _complete_steps(self, module: cst.Module) -> cst.Module:
        facts = ModuleFacts(module, module.code, self.facts.project, share_walks=False)
        edits = []
        scaled: list[str] = []
        for step in facts.training_steps.steps:
            scaler = self._scaler_of(step.function, module)
            if scaler is None:
                continue
            losses = [facts.module.code_for_node(b.loss) for b in step.backwards]
            scaled_here = any(loss in self.losses for loss in losses)
            if step.forward_outside and scaled_here and self._autocast_at_callers(step):
                # A loss-scaler object: the GradScaler's calls here, autocast
                # where amp.initialize ran (_switch_on).
                insert = InsertAmp(step, facts, self.settings, apex_choice(self.settings))
                insert.use_scaler(scaler, None)
                insert.plan_step(autocast_regions=False)
                edits.append(Edit(insert.target, insert.rewrite))
                scaled += losses
                continue
            if step.skip is not None:
                if scaled_here:
                    raise MigrationBlocked(
                        f"the training step of `{losses[0]}.backward()` cannot take autocast "
                        f"and the GradScaler: {step.skip}"
                    )
                continue
            obstacle = micro_step_edit_obstacle(step, facts.module)
            if obstacle is not None and scaled_here:
                raise MigrationBlocked(obstacle)
            insert = InsertAmp(step, facts, self.settings, apex_choice(self.settings))
            insert.use_scaler(scaler, self._autocast_enabled(step.function, scaler, module))
            obstacle = insert.callers_obstacle()
            if obstacle is not None:
                raise MigrationBlocked(obstacle)
            insert.plan_step()
            edits.append(Edit(insert.target, insert.rewrite))
            scaled += losses
        for loss in self.losses:
            if loss not in scaled:
                raise MigrationBlocked(
                    f"`{loss}.backward()` is not in a training step amplint can rewrite "
                    "(a loop or function that also steps an optimizer)"
                )
            scaled.remove(loss)
        return apply_edits(module, edits)

    def _autocast_at_callers(self, step) -> bool:
        """Whether the program puts autocast where the instances of the step's
        class are called: the project model names the class (initializing
        modules then switch autocast on, or stop, in `_switch_on`)."""
        if self.program is None or step.class_def is None:
            return False
        here = self.facts.program_path
        name = step.class_def.name.value
        return (here, name) in self.program.scaled_at_callers

    def _scaler_of(self, function: cst.FunctionDef | None, module: cst.Module) -> str | None:
        """How a step in `function` (of the partly migrated `module`) reaches
        the scaler, or None where it does not."""
        if self.reach is None:
            if self.local_function is None:
                return self.scaler  # a module-level or global scaler: every step reads it
            if function is not None and function.name.value == self.local_function.name.value:
                return self.scaler
            return None
        try:
            return self.reach.expression(function or module, module)
        except MigrationBlocked:
            return None

    def _autocast_enabled(
        self, function: cst.FunctionDef | None, scaler: str, module: cst.Module
    ) -> str | None:
        """autocast's `enabled=`: the condition amp.initialize ran under where the
        step sees it, else whether the scaler it reaches is enabled."""
        conditions = {conjunction(init.conditions) for init in self.initializations}
        if self.initializations and conditions == {None} and not self.off_until_initialized:
            return None
        if len(conditions) == 1 and self._in_initializing_scope(function, module):
            return conditions.pop()
        if self._bfloat16:
            where = f"`{function.name.value}`" if function is not None else "module-level code"
            raise MigrationBlocked(
                f"with --dtype bfloat16 the GradScaler is off, and the autocast in {where} "
                "cannot tell whether amp.initialize ran: migrate with --dtype float16, or "
                "make the run's precision a flag that code can read"
            )
        return f"{scaler}.is_enabled()"

    def _in_initializing_scope(self, function: cst.FunctionDef | None, module: cst.Module) -> bool:
        if not self.initializations:
            return False
        if self.reach is None:
            return self.local_function is not None or (
                function is None
                and all(isinstance(init.use.scope, cst.Module) for init in self.initializations)
            )
        place = self.reach.place(function or module, module)
        top = place.top.name.value if place.top is not None else ""
        if isinstance(place.top, cst.ClassDef):
            # Of a class, only the method that ran amp.initialize sees its condition.
            ran = {
                self.reach.place(init.use.scope, self.facts.module).method
                for init in self.initializations
            }
            names = {method.name.value for method in ran if method is not None}
            return place.method is not None and names == {place.method.name.value}
        return self.reach.initializing == {top}
