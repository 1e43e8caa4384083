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
branches) is branches.py; where the scaler is made, scaler_placement.py; the
training steps completed, step_completion.py; the builders that return the
scaler, builders.py;
how the scaler reaches other defs and modules, reach.py; the conditions of its
`enabled=`, conditions.py; the autocast switch turned on for a loss-scaler
object's callers, autocast_switch.py; statement-level helpers, statements.py.

The whole module is migrated or nothing is: half an apex migration runs neither
with apex nor without it.  So the plan is carried out when the rule checks the
file, and anything that would be left behind (a backward apex scaled that no
rewritten step scales) stops it with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    name_use,
    positional_args,
    string_value,
)
from amplint.config import Settings
from amplint.names import SCALER_NAMES, free_name
from amplint.transforms.apex.autocast_switch import AutocastSwitch
from amplint.transforms.apex.branches import ApexBranches
from amplint.transforms.apex.conditions import negated
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
from amplint.transforms.apex.scaler_placement import Initialization, ScalerPlacement
from amplint.transforms.apex.step_completion import StepCompletion
from amplint.transforms.apex.statements import (
    backward_of,
    block_holding,
    is_none_test,
    longest_chain,
    with_backward_of,
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


class _Migrator(ApexBranches, ApexInference, AutocastSwitch, ScalerPlacement, StepCompletion):
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
        self.initializations: list[Initialization] = []
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
        if self.program is not None and self.program.switched_casts and not self.inference_only:
            raise MigrationBlocked(self.program.switched_casts[0])
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
        initialization = Initialization(use, removable, conditions, init_scale)
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
