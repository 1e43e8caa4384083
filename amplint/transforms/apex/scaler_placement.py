"""Where the GradScaler of an apex migration is made: in place of each
`amp.initialize` (one scaler for the calls of one scope's branches), before a
resume from a checkpoint that precedes it, off in `__init__` when a later method
makes it, returned by the builders that returned what amp.initialize made, and
a module global where it must outlive its function, as apex's state did.

`ScalerPlacement` is mixed into the migrator (migration.py): it reads the
migrator's `facts`, `program`, `reach`, `book`, `scaler`, `initializations`,
`scaler_scopes`, `made_at`, `removed` and `returned_arity`, and calls its
`code`, `scaler_at`, `_grad_scaler`, `_bfloat16` and `_switch_in_place`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import libcst as cst

from amplint.analysis.apex import ApexUse
from amplint.analysis.statements import method_name, name_use, positional_args
from amplint.transforms.apex.builders import return_scaler, take_scaler
from amplint.transforms.apex.conditions import conjunction, disjunction
from amplint.transforms.apex.common import MigrationBlocked
from amplint.transforms.apex.statements import (
    own_init,
    with_first,
    holds_only,
    imports_apex_only,
    leading_lines_of,
    nodes_in,
    top_statement,
    without_apex_comments,
)


@dataclass
class Initialization:
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


class ScalerPlacement:
    """The migrator's decisions about where its GradScaler is made."""

    def _place_scaler(self) -> None:
        by_scope: dict[int, list[Initialization]] = {}
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

    def _scaler_statement(self, init: Initialization, condition: str | None):
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

    def _create_one_scaler(self, inits: list[Initialization]) -> None:
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

    def _create_scaler(self, init: Initialization) -> None:
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

    def _resume_before(self, init: Initialization, top: cst.BaseStatement):
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
