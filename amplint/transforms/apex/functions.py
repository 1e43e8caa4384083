"""apex's per-function casts, migrated to torch.amp.

``@amp.float_function`` / ``half_function`` on a function that only returns
``Fn.apply(...)`` become ``torch.amp.custom_fwd(cast_inputs=...)`` and
``custom_bwd`` on the autograd Function itself, which is what they did for it.
``amp.register_float_function(torch, "sigmoid")`` becomes ``.float()`` on the
input of each call in the module.  half and promote variants elsewhere are
dropped, autocast picking the dtype instead, and recorded as changes.
"""

from __future__ import annotations

import re
from typing import Callable

import libcst as cst

from amplint.analysis import ModuleFacts
from amplint.analysis.apex import ApexScan, ApexUse, AutogradFunction, assigned_names, calls_to
from amplint.analysis.statements import positional_args, string_value
from amplint.config import Settings
from amplint.transforms.apex.common import (
    MigrationBlocked,
    atom,
    keyword_args,
)
from amplint.transforms.edits import EditBook
from amplint.transforms.imports import is_docstring
from amplint.transforms.statements import split_leading_lines
from amplint.analysis.visitor import holds
from amplint.names import free_name

CUSTOM_FWD_SINCE = (2, 4)  # torch.amp.custom_fwd / custom_bwd
# `amp.X_function` / `amp.register_X_function`: the dtype apex cast inputs to.
CAST_DTYPES = {"float": "float32", "half": "float16", "promote": None}
# What apex's float_function did for any callable, written into the module.
_FLOAT32_HELPERS = ("float32_inputs", "amp_float32_inputs")
_FLOAT32_HELPER = '''

def {name}(function):
    """`function` called with its float16 / bfloat16 tensor arguments cast to
    float32: for ops that take float32 only, under autocast."""

    def as_float32(value):
        if isinstance(value, {torch}.Tensor) and value.dtype in ({torch}.float16, {torch}.bfloat16):
            return value.float()
        return value

    @functools.wraps(function)
    def called(*args, **kwargs):
        args = [as_float32(value) for value in args]
        return function(*args, **{{key: as_float32(value) for key, value in kwargs.items()}})

    return called

'''


class FunctionCasts:
    """Plans the migration of each per-function cast into a migration's edits."""

    def __init__(
        self,
        facts: ModuleFacts,
        scan: ApexScan,
        settings: Settings,
        book: EditBook,
        changes: dict[ApexUse, list[str]],
        torch: str,
    ) -> None:
        self.facts = facts
        self.scan = scan
        self.settings = settings
        self.book = book  # where the edits go
        self.changes = changes  # where what does not carry over exactly goes
        self.torch = torch
        # The module's float32-inputs helper, once one is written.
        self.float32_helper: str | None = None

    def code(self, node: cst.CSTNode) -> str:
        return self.facts.module.code_for_node(node)

    def cast_function(self, use: ApexUse, kind: str) -> None:
        """`@amp.float_function` (or half, promote) on a def, or `f = amp.float_function(f)`."""
        decorated = use.statement if use.decorator is not None else None
        wrapped = None
        if decorated is None:  # `f = amp.float_function(f)`
            statement = use.statement
            positional = positional_args(use.call) if use.call is not None else []
            if len(positional) != 1 or assigned_names(statement) is None:
                raise MigrationBlocked(f"`{self.code(use.node)}` is not applied to a function")
            wrapped = self.code(positional[0].value)
            decorated = self._function_named(wrapped)
        function = self._wrapped_autograd_function(decorated)
        dtype = CAST_DTYPES[kind]
        if kind == "half" and self.settings.dtype == "bfloat16":
            dtype = "bfloat16"  # apex's "half" is the low precision the run asked for
        if kind == "float" and not (function is not None and dtype is not None):
            # Anything else apex cast for, a compiled op (`amp.float_function(_C.nms)`)
            # or a def with a body of its own: called through a helper that casts
            # its half-precision tensor arguments to float32, as apex did.
            self._through_float32_helper(use)
            return
        if use.decorator is None:
            statement, positional = use.statement, positional_args(use.call)
            if assigned_names(statement) == wrapped:
                self.book.rewrite(statement, lambda _: cst.RemovalSentinel.REMOVE)
            else:
                self.book.rewrite(use.call, lambda _: positional[0].value)
        else:
            index = next(i for i, d in enumerate(decorated.decorators) if d is use.decorator)
            self.book.rewrite(decorated, _without_decorator(index))
        if function is not None and dtype is not None:
            self._custom_fwd(function, dtype)
            return
        name = decorated.name.value if decorated is not None else wrapped
        forced = "float16" if kind == "half" else "their widest type"
        self.changes.setdefault(use, []).append(
            f"`{name}`'s inputs are no longer cast to {forced}: autocast picks each op's dtype"
        )

    def _through_float32_helper(self, use: ApexUse) -> None:
        """`amp.float_function` becomes the module's float32-inputs helper,
        written once before the first statement that uses it."""
        if self.float32_helper is None:
            self.float32_helper = free_name(_FLOAT32_HELPERS, self.facts.text)
            top = next(s for s in self.facts.module.body if holds(s, use.node))
            (helper,) = cst.parse_module(
                _FLOAT32_HELPER.format(name=self.float32_helper, torch=self.torch)
            ).body
            self.book.rewrite(top, lambda node: _after_top_level_def(helper, node))
        replacement = cst.Name(self.float32_helper)
        if use.decorator is not None:
            self.book.rewrite(use.decorator, lambda node: node.with_changes(decorator=replacement))
        else:
            self.book.rewrite(use.call.func, lambda _: replacement)

    def _function_named(self, name: str) -> cst.FunctionDef | None:
        for statement in self.facts.module.body:
            if isinstance(statement, cst.FunctionDef) and statement.name.value == name:
                return statement
        return None

    def _wrapped_autograd_function(
        self, function: cst.FunctionDef | None
    ) -> AutogradFunction | None:
        """The autograd Function of this module that `function` only applies."""
        if function is None or not isinstance(function.body, cst.IndentedBlock):
            return None
        body = [s for s in function.body.body if not is_docstring(s)]
        if len(body) != 1 or not isinstance(body[0], cst.SimpleStatementLine):
            return None
        small = body[0].body[0]
        if not (
            isinstance(small, cst.Return)
            and isinstance(small.value, cst.Call)
            and isinstance(small.value.func, cst.Attribute)
            and small.value.func.attr.value == "apply"
            and isinstance(small.value.func.value, cst.Name)
        ):
            return None
        name = small.value.func.value.value
        found = self.scan.autograd_functions.get(name)
        if found is None or found.forward is None or found.backward is None:
            return None
        if len(re.findall(rf"\b{name}\.apply\b", self.facts.text)) != 1:
            raise MigrationBlocked(
                f"`{name}.apply` is also called without `{function.name.value}`: custom_fwd on "
                f"`{name}` would cast those calls' inputs too"
            )
        return found

    def _custom_fwd(self, function: AutogradFunction, dtype: str) -> None:
        if self.settings.target_torch < CUSTOM_FWD_SINCE:
            raise MigrationBlocked(
                "torch.amp.custom_fwd needs torch 2.4, above target-torch "
                f"{self.settings.target_torch_shown}"
            )
        forward = cst.Decorator(
            cst.parse_expression(
                f'{self.torch}.amp.custom_fwd(device_type="{self.settings.device_type}", '
                f"cast_inputs={self.torch}.{dtype})"
            )
        )
        backward = cst.Decorator(
            cst.parse_expression(
                f'{self.torch}.amp.custom_bwd(device_type="{self.settings.device_type}")'
            )
        )
        for method, decorator in ((function.forward, forward), (function.backward, backward)):
            if any("custom_" in self.code(existing) for existing in method.decorators):
                raise MigrationBlocked(f"`{function.node.name.value}` has custom_fwd already")
            self.book.rewrite(
                method,
                lambda node, decorator=decorator: node.with_changes(
                    decorators=[*node.decorators, decorator]
                ),
            )

    def registration(self, use: ApexUse, kind: str) -> None:
        """`amp.register_float_function(module, "name")` (or half, promote)."""
        positional = positional_args(use.call) if use.call is not None else []
        name = string_value(positional[1].value) if len(positional) == 2 else None
        owner = self.facts.imports.resolve(positional[0].value, use.scope) if positional else None
        statement = use.statement
        if (
            name is None
            or owner is None
            or kind not in CAST_DTYPES
            or not isinstance(statement, cst.SimpleStatementLine)
            or len(statement.body) != 1
            or not isinstance(statement.body[0], cst.Expr)
            or statement.body[0].value is not use.call
        ):
            raise MigrationBlocked(f"`{self.code(use.call or use.node)}` cannot be migrated")
        self.book.rewrite(statement, lambda _: cst.RemovalSentinel.REMOVE)
        function = f"{owner}.{name}"
        if kind != "float":
            self.changes.setdefault(use, []).append(
                f"`{function}` is no longer forced to {kind}: autocast picks its dtype"
            )
            return
        for call in calls_to(self.facts.module, self.facts.imports, {function}):
            arguments = positional_args(call)
            if len(arguments) != 1 or len(arguments) != len(call.args) - len(keyword_args(call)):
                raise MigrationBlocked(
                    f"`{self.code(call)}`: cast its tensor inputs to float32 by hand, as "
                    f"`register_float_function` did"
                )
            self.book.rewrite(call, _first_argument_as_float)


def _after_top_level_def(
    definition: cst.FunctionDef, statement: cst.BaseStatement
) -> cst.FlattenSentinel:
    """`definition`, then `statement`, two blank lines before and after the def
    as black keeps them; the comments above `statement` stay with it."""
    two = [cst.EmptyLine(indent=False)] * 2
    _, comments = split_leading_lines(statement.leading_lines)
    return cst.FlattenSentinel(
        [
            definition.with_changes(leading_lines=two),
            statement.with_changes(leading_lines=[*two, *comments]),
        ]
    )


def _without_decorator(index: int) -> Callable:
    def rewrite(node: cst.FunctionDef) -> cst.FunctionDef:
        decorators = list(node.decorators)
        removed = decorators.pop(index)
        if index == 0 and decorators:
            decorators[0] = decorators[0].with_changes(leading_lines=removed.leading_lines)
        elif index == 0:
            node = node.with_changes(leading_lines=[*node.leading_lines, *removed.leading_lines])
        return node.with_changes(decorators=decorators)

    return rewrite


def _first_argument_as_float(call: cst.Call) -> cst.Call:
    first = call.args[0]
    as_float = cst.Call(cst.Attribute(atom(first.value), cst.Name("float")))
    return call.with_changes(args=[first.with_changes(value=as_float), *call.args[1:]])
