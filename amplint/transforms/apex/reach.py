"""How the GradScaler that replaces apex's state reaches each use of it.

Where ``amp.initialize`` ran, the scaler is a local (or, at module level, a
global every function reads).  Everywhere else it travels as the optimizer
does (project/apex.py names the defs and classes that take it): a function
receives it as a keyword-only parameter, a class as an ``__init__`` parameter
kept on the instance, and every call of those passes it on.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from amplint.analysis import ModuleFacts
from amplint.analysis.scopes import Scope, ScopedVisitor
from amplint.analysis.visitor import children
from amplint.project.apex import ApexProgram, Taker
from amplint.transforms.apex.common import MigrationBlocked
from amplint.transforms.apex.statements import own_init, with_first
from amplint.transforms.arguments import insert_argument, keyword_argument
from amplint.transforms.edits import EditBook
from amplint.transforms.scaler_scope import with_keyword_only

_DEFINITIONS = (cst.FunctionDef, cst.ClassDef)


@dataclass(frozen=True)
class _Place:
    """Where a scope sits: its top-level def or class, and for a class the
    method holding it."""

    top: cst.FunctionDef | cst.ClassDef | None  # None: module level
    method: cst.FunctionDef | None


def places(module: cst.Module) -> dict[int, _Place]:
    """Every def and class of `module` (by id), placed."""
    found: dict[int, _Place] = {}

    def visit(node: cst.CSTNode, place: _Place) -> None:
        for child in children(node):
            here = place
            if isinstance(child, _DEFINITIONS):
                if place.top is None:
                    here = _Place(child, None)
                elif isinstance(place.top, cst.ClassDef) and place.method is None:
                    here = _Place(place.top, child if isinstance(child, cst.FunctionDef) else None)
                found[id(child)] = here
            visit(child, here)

    visit(module, _Place(None, None))
    return found


class ScalerReach:
    """The expression each scope of one module reaches the scaler by, and the
    edits that make it so (parameters, attributes, arguments at calls)."""

    def __init__(
        self,
        facts: ModuleFacts,
        program: ApexProgram,
        scaler: str,
        initializing: set[str],
    ) -> None:
        self.facts = facts
        self.program = program
        self.scaler = scaler
        # The top-level defs that call amp.initialize ("" for module level):
        # the scaler is theirs.
        self.initializing = initializing
        here = facts.program_path
        self.takers = program.takers_in(here) if here is not None else {}
        self._placed: tuple[cst.Module, dict[int, _Place]] | None = None

    def place(self, scope: Scope, module: cst.Module) -> _Place:
        """Where `scope` of `module` sits; each tree is placed once, not per question."""
        if self._placed is None or self._placed[0] is not module:
            self._placed = (module, places(module))
        return self._placed[1].get(id(scope), _Place(None, None))

    def expression(self, scope: Scope, module: cst.Module | None = None) -> str:
        """How code in `scope` (of `module`, the analysed one by default) spells the scaler."""
        place = self.place(scope, module or self.facts.module)
        if place.top is None:
            if "" in self.initializing:
                return self.scaler
            raise MigrationBlocked(
                "module-level code uses apex's state, and no GradScaler is made there"
            )
        name = place.top.name.value
        if "" in self.initializing:
            return self.scaler
        if name in self.initializing:
            # amp.initialize in a method (`__init__`, XLM's `init_amp`): the
            # scaler is the instance's, made there and read by every method.
            if isinstance(place.top, cst.ClassDef):
                return self._on_instance(place)
            return self.scaler
        taker = self.takers.get(name)
        if taker is None:
            raise MigrationBlocked(
                f"`{name}` uses apex's state and the GradScaler does not reach it"
            )
        if not taker.is_class:
            return self.scaler
        return self._on_instance(place)

    def _on_instance(self, place: _Place) -> str:
        name = place.top.name.value
        method = place.method
        if (
            method is None
            or not method.params.params
            or any(_decorator_name(d) in ("staticmethod", "classmethod") for d in method.decorators)
        ):
            raise MigrationBlocked(f"`{name}` uses apex's state outside a method of its instances")
        return f"{method.params.params[0].name.value}.{self.scaler}"

    def thread(self, book: EditBook) -> None:
        """Plan the parameters, attributes and call arguments that carry the
        scaler to this module's takers and to the takers it calls."""
        planned: list[tuple[cst.CSTNode, object]] = []
        for statement in self.facts.module.body:
            if isinstance(statement, _DEFINITIONS) and statement.name.value in self.takers:
                planned.append(self._taking(statement))
        finder = CallsOf(self, self.program.takers)
        finder.walk(self.facts.module)
        for call, scope, taker in finder.found:
            keyword = self.program.scaler_names[taker.path]
            if any(arg.keyword is not None and arg.keyword.value == keyword for arg in call.args):
                continue
            value = cst.parse_expression(self.expression(scope))
            argument = keyword_argument(keyword, value)
            planned.append(
                (
                    call,
                    lambda node, argument=argument: insert_argument(node, len(node.args), argument),
                )
            )
        for node, rewrite in planned:  # all planned first: a refusal leaves the book as it was
            book.rewrite(node, rewrite)

    def _taking(self, definition: cst.FunctionDef | cst.ClassDef) -> tuple[cst.CSTNode, object]:
        scaler = self.scaler
        if isinstance(definition, cst.FunctionDef):
            return definition, lambda node: node.with_changes(
                params=with_keyword_only(node.params, scaler)
            )
        name = definition.name.value
        if f".{scaler}" in self.facts.module.code_for_node(definition):
            raise MigrationBlocked(f"`{name}` has an attribute `{scaler}` already")
        body = definition.body
        init = own_init(definition)
        if init is not None:
            if not init.params.params or not isinstance(init.body, cst.IndentedBlock):
                raise MigrationBlocked(f"`{name}.__init__` has no `self` to keep the GradScaler on")
            this = init.params.params[0].name.value
            keep = cst.parse_statement(f"{this}.{scaler} = {scaler}\n")

            def taking(node: cst.FunctionDef) -> cst.FunctionDef:
                return node.with_changes(
                    params=with_keyword_only(node.params, scaler),
                    body=with_first(node.body, keep),
                )

            return init, taking
        if any(_decorator_name(base) != "object" for base in definition.bases):
            raise MigrationBlocked(
                f"`{name}` has no __init__ of its own to take the GradScaler (its base class's "
                "would be replaced)"
            )
        if not isinstance(body, cst.IndentedBlock):
            raise MigrationBlocked(f"`{name}` is defined on one line")
        made = cst.parse_statement(
            f"def __init__(self, *, {scaler}):\n    self.{scaler} = {scaler}\n"
        )

        def with_init(node: cst.ClassDef) -> cst.ClassDef:
            # After the docstring and the class attributes (`state_dict_key =
            # "amp"`), before the first method: where an `__init__` is read.
            statements = list(node.body.body)
            at = next(
                (i for i, s in enumerate(statements) if not isinstance(s, cst.SimpleStatementLine)),
                len(statements),
            )
            spaced = made.with_changes(leading_lines=[cst.EmptyLine(indent=False)] if at else [])
            following = statements[at:]
            if following and not following[0].leading_lines:
                following[0] = following[0].with_changes(
                    leading_lines=[cst.EmptyLine(indent=False)]
                )
            return node.with_changes(
                body=node.body.with_changes(body=[*statements[:at], spaced, *following])
            )

        return definition, with_init


class CallsOf(ScopedVisitor):
    """Each call of one of `wanted` (takers, builders): of this module by its
    name, of another module through the names this one imports it by."""

    def __init__(self, reach: ScalerReach, wanted: frozenset[Taker]) -> None:
        super().__init__()
        self.reach = reach
        self.found: list[tuple[cst.Call, Scope, Taker]] = []
        # The simple statement line each found call is in, by the call's id.
        self.statement_of: dict[int, cst.SimpleStatementLine] = {}
        self._statement: cst.SimpleStatementLine | None = None
        facts = reach.facts
        here = facts.program_path
        self.local = {taker.name: taker for taker in wanted if taker.path == here}
        self.elsewhere = {(taker.path, taker.name): taker for taker in wanted if taker.path != here}

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self._statement = node

    def leave_SimpleStatementLine(self, original_node: cst.SimpleStatementLine) -> None:
        self._statement = None

    def visit_Call(self, node: cst.Call) -> None:
        taker = self._taker(node.func)
        if taker is not None:
            self.found.append((node, self.scope, taker))
            if self._statement is not None:
                self.statement_of[id(node)] = self._statement

    def _taker(self, func: cst.BaseExpression) -> Taker | None:
        imports = self.reach.facts.imports
        if isinstance(func, cst.Name) and imports.binding(func.value, self.scope) is None:
            return self.local.get(func.value)
        target = imports.resolve(func, self.scope)
        project = self.reach.facts.project
        if target is None or project is None or not self.elsewhere:
            return None
        owner, _, name = target.rpartition(".")
        path = project.defining_module(owner, name) if owner else None
        return self.elsewhere.get((path, name)) if path is not None else None


def _decorator_name(node: cst.CSTNode) -> str | None:
    value = getattr(node, "decorator", None) or getattr(node, "value", None) or node
    if isinstance(value, cst.Name):
        return value.value
    if isinstance(value, cst.Attribute):
        return value.attr.value
    return None
