"""The training steps of a migrated module, completed as AMP001 completes a
step (`InsertAmp` told to use the migration's scaler): autocast around the
forward pass, `scaler.scale(loss).backward()`, `scaler.step`, one
`scaler.update()`; `enabled=` the condition amp.initialize ran under where the
step sees it.  Every loss apex scaled must end in such a step, or the
migration stops.

`StepCompletion` is mixed into the migrator (migration.py): it reads the
migrator's `facts`, `settings`, `program`, `reach`, `scaler`, `losses`,
`local_function`, `initializations` and `off_until_initialized`.
"""

from __future__ import annotations

import libcst as cst

from amplint.analysis import ModuleFacts
from amplint.analysis.precision import bfloat16_obstacle
from amplint.diagnostics import Edit
from amplint.transforms.apex.conditions import conjunction
from amplint.transforms.apex.common import MigrationBlocked, apex_choice
from amplint.transforms.edits import apply_edits
from amplint.transforms.insert_amp import InsertAmp, micro_step_edit_obstacle


class StepCompletion:
    """The migrator's completion of the training steps that reach its scaler."""

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
            # Completed whether or not apex scaled its loss (O1 without
            # `amp.scale_loss` still ran the step in mixed precision).
            obstacle = micro_step_edit_obstacle(step, facts.module)
            if obstacle is None and apex_choice(self.settings).dtype == "bfloat16":
                obstacle = bfloat16_obstacle(step, facts)
            if obstacle is not None:
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
