"""The oracle a rewrite must pass before it is written.

amplint's own rules are the first judge of amplint's output: a rewrite may not
leave a finding the original did not have.  Names are the second: a rewrite may
not leave a name undefined, unused, redefined or possibly unbound where the
original had none (pyflakes for the first three, a definite-assignment pass
below for the last, since pyflakes does not follow paths).

Findings and name problems are compared as counts per kind, not by position: a
rewrite moves lines, but it never has a reason to add one of these.
"""

from __future__ import annotations

import ast
import warnings
from collections import Counter
from typing import Iterable, Iterator, Sequence

from amplint.diagnostics import Diagnostic, source_lines

# pyflakes messages that a rewrite must not add, by class name.
# What a rewrite "would" do, per pyflakes message class it must not add.
_NAME_MESSAGES = {
    "UndefinedName": "use `{}`" + ", which is undefined",
    "UndefinedLocal": "use `{}` before it is assigned",
    "UnusedVariable": "leave `{}` assigned but never used",
    "UnusedImport": "leave `{}` imported but unused",
    "RedefinedWhileUnused": "redefine `{}` before it is used",
    "ImportShadowedByLoopVar": "shadow the import `{}` with a loop variable",
}
POSSIBLY_UNBOUND = "read `{}` where it may be unbound in `{}`"
# An undefined name that the program binds in another scope: where it is read
# and where it is bound, so that "undefined" never reads as a false claim.
UNBOUND_HERE = "use `{}` {}, where it is not bound ({} binds it)"
_UNDEFINED_TAIL = ", which is undefined"


def new_findings(before: Sequence[Diagnostic], after: Sequence[Diagnostic]) -> list[Diagnostic]:
    """Findings of `after` beyond what `before` had, code by code."""
    allowance = Counter(diagnostic.code for diagnostic in before)
    extra = []
    for diagnostic in after:
        if allowance[diagnostic.code] > 0:
            allowance[diagnostic.code] -= 1
        else:
            extra.append(diagnostic)
    return extra


# A function's possibly unbound reads depend on its own text alone (its
# column and lines): a rewrite judged against its original re-reads only the
# functions it changed.  (column, text) -> its reads.
UnboundMemo = dict[tuple[int, str], list[tuple[str, str]]]


def name_problems(text: str, memo: UnboundMemo | None = None) -> Counter[str]:
    """Every name problem in `text`, as what a rewrite "would" do, counted.
    `memo` keeps each function's possibly unbound reads for the next text."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return Counter()
    problems: Counter[str] = Counter()
    try:
        from pyflakes.checker import Checker
    except ImportError:  # pragma: no cover - pyflakes is a dependency
        Checker = None
    if Checker is not None:
        scopes: _BindingScopes | None = None
        for message in Checker(tree).messages:
            kind = type(message).__name__
            template = _NAME_MESSAGES.get(kind)
            if template is None or not message.message_args:
                continue
            name = message.message_args[0]
            if kind == "UndefinedName":
                scopes = scopes or _BindingScopes(tree)
                binders = scopes.bound.get(name, set())
                read_in = scopes.enclosing(message.lineno)
                if binders and read_in not in binders:
                    where = "at module level" if read_in == _MODULE else f"in {read_in}"
                    shown = " and ".join(sorted(binders))
                    problems[UNBOUND_HERE.format(name, where, shown)] += 1
                    continue
            problems[template.format(name)] += 1
    lines = source_lines(text, keepends=True) if memo is not None else None
    for scope, name in possibly_unbound_reads(tree, lines, memo):
        problems[POSSIBLY_UNBOUND.format(name, scope)] += 1
    return problems


def new_name_problems(
    known: Counter[str], after: str, memo: UnboundMemo | None = None
) -> list[str]:
    """Name problems `after` has beyond `known`, the original's (from
    `name_problems`, computed once for every rewrite judged).  A name the
    original already leaves undefined (a snippet, a star import) is the
    user's: more uses of it are not new; every other problem counts one by one."""
    extra = name_problems(after, memo) - known
    users = {_undefined_name(problem) for problem in known} - {None}
    return sorted(problem for problem in extra if _undefined_name(problem) not in users)


def _undefined_name(problem: str) -> str | None:
    """The name an undefined-name problem is about, whichever way it is said."""
    if problem.endswith(_UNDEFINED_TAIL) or ", where it is not bound (" in problem:
        return problem.split("`")[1]
    return None


_MODULE = "the module"  # the module's own scope, as _BindingScopes names it


class _BindingScopes:
    """Which scopes of a module bind each name, and which function holds a line."""

    def __init__(self, tree: ast.Module) -> None:
        self.bound: dict[str, set[str]] = {}
        self.functions: list[tuple[int, int, str]] = []  # first line, last line, name
        self._walk(tree, _MODULE)

    def _walk(self, node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = scope
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self._bind(child.name, scope)
                inner = f"`{child.name}`"
                if not isinstance(child, ast.ClassDef):
                    self.functions.append((child.lineno, child.end_lineno or child.lineno, inner))
                    for arg in ast.walk(child.args):
                        if isinstance(arg, ast.arg):
                            self._bind(arg.arg, inner)
            elif isinstance(child, ast.Name) and not isinstance(child.ctx, ast.Load):
                self._bind(child.id, scope)
            elif isinstance(child, ast.alias):
                self._bind((child.asname or child.name).split(".")[0], scope)
            self._walk(child, inner)

    def _bind(self, name: str, scope: str) -> None:
        self.bound.setdefault(name, set()).add(scope)

    def enclosing(self, line: int) -> str:
        """The innermost function holding `line`, as `bound` names scopes."""
        holding = [(first, name) for first, last, name in self.functions if first <= line <= last]
        return max(holding)[1] if holding else _MODULE


# -- possibly unbound names -----------------------------------------------------

_Scope = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_Comprehension = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


class _Dead(frozenset):
    """The state after return/raise/break/continue: no path reaches on."""


_DEAD = _Dead()


def _join(states: Iterable[frozenset]) -> frozenset:
    """Names bound on every live path among `states`."""
    live = [state for state in states if not isinstance(state, _Dead)]
    if not live:
        return _DEAD
    result = live[0]
    for state in live[1:]:
        result &= state
    return frozenset(result)


def possibly_unbound_reads(
    tree: ast.Module, lines: Sequence[str] | None = None, memo: UnboundMemo | None = None
) -> Iterator[tuple[str, str]]:
    """(scope, name) for each read of a local name that some path reaches
    before any binding of it.  Loops are taken to run zero or more times and
    a try body to fail at any point; nested scopes read at call time and are
    judged on their own.  With the text's `lines`, `memo` answers a function
    whose text it has seen."""
    yield from _ScopeReads("<module>", tree.body, set()).reads
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if memo is None or lines is None:
            yield from _function_reads(node)
            continue
        key = (node.col_offset, "".join(lines[node.lineno - 1 : node.end_lineno]))
        reads = memo.get(key)
        if reads is None:
            reads = memo[key] = _function_reads(node)
        yield from reads


def _function_reads(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[tuple[str, str]]:
    arguments = node.args
    parameters = {
        a.arg
        for a in [
            *arguments.posonlyargs,
            *arguments.args,
            *arguments.kwonlyargs,
            *filter(None, [arguments.vararg, arguments.kwarg]),
        ]
    }
    return _ScopeReads(node.name, node.body, parameters).reads


class _ScopeReads:
    def __init__(self, name: str, body: list[ast.stmt], parameters: set[str]) -> None:
        self.name = name
        declared = set()
        for node in _own_nodes(body):
            if isinstance(node, (ast.Global, ast.Nonlocal)):
                declared.update(node.names)
        self.locals = _bound_names(body) - declared
        self.reads: list[tuple[str, str]] = []
        self._block(body, frozenset(parameters))

    def _block(self, body: Sequence[ast.stmt], state: frozenset) -> frozenset:
        for statement in body:
            if isinstance(state, _Dead):
                return state
            state = self._statement(statement, state)
        return state

    def _read(self, node: ast.AST | None, state: frozenset) -> frozenset:
        """Reads in an expression, and the names it binds (walrus)."""
        if node is None:
            return state
        for child in _own_nodes([node]):
            if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Load):
                if child.id in self.locals and child.id not in state:
                    self.reads.append((self.name, child.id))
            elif isinstance(child, ast.NamedExpr):
                state = state | {child.target.id}
        return state

    def _statement(self, node: ast.stmt, state: frozenset) -> frozenset:
        if isinstance(node, (ast.Return, ast.Raise)):
            for child in ast.iter_child_nodes(node):
                state = self._read(child, state)
            return _DEAD
        if isinstance(node, (ast.Break, ast.Continue)):
            return _DEAD
        if isinstance(node, ast.If):
            state = self._read(node.test, state)
            return _join([self._block(node.body, state), self._block(node.orelse, state)])
        if isinstance(node, (ast.For, ast.AsyncFor)):
            state = self._read(node.iter, state)
            # The body runs zero or more times; `else` runs when no break did.
            self._block(node.body, state | _targets(node.target))
            return self._block(node.orelse, state)
        if isinstance(node, ast.While):
            state = self._read(node.test, state)
            self._block(node.body, state)
            if isinstance(node.test, ast.Constant) and node.test.value is True:
                return _DEAD if not _breaks(node.body) else state
            return self._block(node.orelse, state)
        if isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                state = self._read(item.context_expr, state)
                if item.optional_vars is not None:
                    state = state | _targets(item.optional_vars)
            return self._block(node.body, state)
        if isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            body = self._block(node.body, state)
            handlers = []
            for handler in node.handlers:
                self._read(handler.type, state)
                caught = state | ({handler.name} if handler.name else set())
                handlers.append(self._block(handler.body, caught))
            normal = self._block(node.orelse, body) if not isinstance(body, _Dead) else body
            after = _join([normal, *handlers])
            if node.finalbody:
                self._block(node.finalbody, state)
                if not isinstance(after, _Dead):
                    after = self._block(node.finalbody, after)
            return after
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for decorator in node.decorator_list:
                state = self._read(decorator, state)
            if isinstance(node, ast.ClassDef):
                for base in node.bases:
                    state = self._read(base, state)
            else:
                for default in [*node.args.defaults, *node.args.kw_defaults]:
                    state = self._read(default, state)
            return state | {node.name}
        if isinstance(node, ast.Delete):
            return state - {t.id for t in node.targets if isinstance(t, ast.Name)}
        if type(node).__name__ == "Match":
            state = self._read(node.subject, state)
            for case in node.cases:
                self._block(case.body, state | _bound_names([case.pattern]))
            return state
        if isinstance(node, ast.AugAssign):
            state = self._read(node.target, state)
            return self._read(node.value, state) | _targets(node.target)
        if isinstance(node, ast.Assign):
            state = self._read(node.value, state)
            for target in node.targets:
                state = self._read_in_target(target, state) | _targets(target)
            return state
        if isinstance(node, ast.AnnAssign):
            state = self._read(node.value, state)
            if node.value is None:
                return state
            return self._read_in_target(node.target, state) | _targets(node.target)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            return state | {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        for child in ast.iter_child_nodes(node):
            state = self._read(child, state)
        return state

    def _read_in_target(self, target: ast.expr, state: frozenset) -> frozenset:
        """Reads inside a target: `a[i] = ...` reads `a` and `i`."""
        if isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                state = self._read_in_target(element, state)
            return state
        if isinstance(target, ast.Starred):
            return self._read_in_target(target.value, state)
        if isinstance(target, ast.Name):
            return state
        return self._read(target, state)


def _breaks(body: list[ast.stmt]) -> bool:
    """Whether a loop body holds a break of its own (not a nested loop's)."""
    stack = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Break):
            return True
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While, *_Scope)):
            continue
        stack.extend(ast.iter_child_nodes(node))
    return False


def _targets(target: ast.AST) -> frozenset:
    return frozenset(
        node.id
        for node in ast.walk(target)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)
    )


def _own_nodes(nodes: Iterable[ast.AST]) -> Iterator[ast.AST]:
    """Every node under `nodes` that belongs to their scope: not inside a
    nested def, lambda, class body or comprehension."""
    stack = list(reversed(list(nodes)))
    while stack:  # depth first, in source order
        node = stack.pop()
        yield node
        children = []
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (*_Scope, *_Comprehension)):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    yield child  # its name is bound here; its body is not
                continue
            children.append(child)
        stack.extend(reversed(children))


def _bound_names(body: Iterable[ast.AST]) -> set[str]:
    names = set()
    for node in _own_nodes(body):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif type(node).__name__ in ("MatchAs", "MatchStar") and getattr(node, "name", None):
            names.add(node.name)
    return names
