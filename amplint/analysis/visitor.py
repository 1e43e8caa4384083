"""A read-only visitor with libcst's protocol and a fraction of its cost.

libcst's `CSTVisitor` walks a tree through `_visit_and_replace_children`, which
rebuilds every node as it goes (a transformer and a visitor share the code).
Analysis never changes the tree, so `Visitor.walk` reads each node's children
straight from its dataclass fields instead: on a 460 KB module an empty libcst
visit takes 0.9 s and this walk under 0.2 s.

The protocol is libcst's: `visit_<Node>(node)` returning False skips the
children, `leave_<Node>(node)` runs either way, and `visit_<Node>_<field>` /
`leave_<Node>_<field>` bracket one field.  Children come in source order.
Punctuation and whitespace nodes (commas, parentheses, operators, comments) are
not walked: no analysis looks at them, and they are most of the nodes.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, ClassVar, Generic, Iterator, Sequence, TypeVar

import libcst as cst

# Nodes made only of punctuation and whitespace.
_TOKEN_BASES: tuple[type, ...] = (
    cst.BaseParenthesizableWhitespace,
    cst.EmptyLine,
    cst.TrailingWhitespace,
    cst.Newline,
    cst.Comment,
    cst.LeftParen,
    cst.RightParen,
    cst.LeftSquareBracket,
    cst.RightSquareBracket,
    cst.LeftCurlyBrace,
    cst.RightCurlyBrace,
    cst.Comma,
    cst.Dot,
    cst.Colon,
    cst.Semicolon,
    cst.AssignEqual,
    cst.BaseBinaryOp,
    cst.BaseBooleanOp,
    cst.BaseCompOp,
    cst.BaseUnaryOp,
    cst.BaseAugOp,
    cst.Asynchronous,
    cst.ImportStar,
)

# Node types whose dataclass fields are not in source order (the rest are,
# after punctuation is dropped); tests compare the walk with libcst's own
# `children` on real code.
_SOURCE_ORDER: dict[type, tuple[str, ...]] = {
    cst.FunctionDef: ("decorators", "name", "type_parameters", "params", "returns", "body"),
    cst.ClassDef: ("decorators", "name", "type_parameters", "bases", "keywords", "body"),
    cst.Arg: ("keyword", "value"),
    cst.IfExp: ("body", "test", "orelse"),
    cst.ExceptHandler: ("type", "name", "body"),
    cst.ExceptStarHandler: ("type", "name", "body"),
    cst.Parameters: (
        "posonly_params",
        "posonly_ind",
        "params",
        "star_arg",
        "kwonly_params",
        "star_kwarg",
    ),
    cst.MatchCase: ("pattern", "guard", "body"),
    cst.TypeAlias: ("name", "type_parameters", "value"),
}


# Read from each class's MRO: `issubclass` goes through ABCMeta, which walks
# every registered subclass (a fifth of the import time of a one-file check).
_TOKEN_TYPES = frozenset(
    member
    for member in vars(cst).values()
    if isinstance(member, type) and any(base in _TOKEN_BASES for base in member.__mro__)
)


def _child_fields(node_type: type) -> tuple[str, ...]:
    """The fields of `node_type` that may hold child nodes, in source order."""
    if node_type in _SOURCE_ORDER:
        return _SOURCE_ORDER[node_type]
    return tuple(
        field.name
        for field in dataclasses.fields(node_type)
        if field.type not in ("str", str, "bool", bool)
        and not field.name.startswith(("whitespace", "lpar", "rpar", "leading_lines"))
    )


# `_child_fields` per node type, filled as types are met: reading a dataclass's
# fields costs more than visiting the node.
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}


# What a field's value is, by its type: a node to walk, a sequence of values,
# or neither (a token, a string, None, a sentinel).  A dictionary, filled as
# types are met: `isinstance(value, cst.CSTNode)` goes through ABCMeta, and a
# walk asks it of every field of every node (15 million times in one check of
# the torch package, a tenth of the run).
_NODE, _SEQUENCE, _OTHER = 1, 2, 0


class _Kinds(dict):
    """`_KINDS[type(value)]`: a subscript, answered in C once the type is known."""

    def __missing__(self, value_type: type) -> int:
        if issubclass(value_type, cst.CSTNode):
            kind = _OTHER if value_type in _TOKEN_TYPES else _NODE
        elif issubclass(value_type, (tuple, list)):
            kind = _SEQUENCE
        else:
            kind = _OTHER
        self[value_type] = kind
        return kind


_KINDS = _Kinds()


def children(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """`node`'s children in source order, punctuation and whitespace left out."""
    for name in _fields_of(type(node)):
        value = getattr(node, name)
        kind = _KINDS[type(value)]
        if kind == _NODE:
            yield value
        elif kind == _SEQUENCE:
            for item in value:
                if _KINDS[type(item)] == _NODE:
                    yield item


def descendants(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """`node` and every node below it (punctuation and whitespace left out)."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(children(current))


def path_to(outer: cst.CSTNode, inner: cst.CSTNode) -> list[cst.CSTNode] | None:
    """The nodes from `outer` down to `inner` (both included), or None where
    `inner` is not inside `outer`."""
    if outer is inner:
        return [outer]
    for child in children(outer):
        below = path_to(child, inner)
        if below is not None:
            return [outer, *below]
    return None


def holds(node: cst.CSTNode, target: cst.CSTNode) -> bool:
    """Whether `target` is `node` or a node inside it."""
    return any(descendant is target for descendant in descendants(node))


# Per node type: (visit, leave, ((field, visit_field, leave_field), ...)).
_Plan = tuple[
    Callable | None,
    Callable | None,
    tuple[tuple[str, Callable | None, Callable | None], ...],
]


class Visitor:
    """Subclass and define `visit_<Node>` / `leave_<Node>`; call `walk(tree)`."""

    _plans: ClassVar[dict[type, _Plan]]

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        cls._plans = {}  # each subclass resolves its own hooks

    def walk(self, node: cst.CSTNode) -> None:
        node_type = type(node)
        plan = self._plans.get(node_type)
        if plan is None:
            plan = self._plans[node_type] = self._plan_for(node_type)
        visit, leave, fields = plan
        if visit is None or visit(self, node) is not False:
            kinds = _KINDS
            for name, visit_field, leave_field in fields:
                value = getattr(node, name)
                if visit_field is not None:
                    visit_field(self, node)
                kind = kinds[type(value)]
                if kind == _NODE:
                    self.walk(value)
                elif kind == _SEQUENCE:
                    for item in value:
                        if kinds[type(item)] == _NODE:
                            self.walk(item)
                if leave_field is not None:
                    leave_field(self, node)
        if leave is not None:
            leave(self, node)

    @classmethod
    def _plan_for(cls, node_type: type) -> _Plan:
        name = node_type.__name__
        return (
            getattr(cls, f"visit_{name}", None),
            getattr(cls, f"leave_{name}", None),
            tuple(
                (
                    field,
                    getattr(cls, f"visit_{name}_{field}", None),
                    getattr(cls, f"leave_{name}_{field}", None),
                )
                for field in _child_fields(node_type)
            ),
        )


def walk_together(node: cst.CSTNode, visitors: Sequence[Visitor]) -> None:
    """Walk `node` once for all `visitors`, each hooked as its own `walk` hooks
    it: the analyses that read a whole module share one traversal instead of
    one each.  A visitor whose `visit_<Node>` returns False misses that node's
    children while the others go on; at each node the visitors' hooks run in
    the order given."""
    if visitors:
        _descend(node, list(visitors), tuple(type(visitor) for visitor in visitors))


# (visitor classes, node type) -> the hooks any of them has for that type, by
# the visitor's index: most node types have none in most visitors, and a node
# then costs what it costs one walk.
_JointPlan = tuple[
    tuple[tuple[int, Callable], ...],  # visits
    tuple[tuple[str, tuple[tuple[int, Callable], ...], tuple[tuple[int, Callable], ...]], ...],
    tuple[tuple[int, Callable], ...],  # leaves
]
_JOINT_PLANS: dict[tuple[tuple[type, ...], type], _JointPlan] = {}


def _joint_plan(classes: tuple[type, ...], node_type: type) -> _JointPlan:
    plan = _JOINT_PLANS.get((classes, node_type))
    if plan is None:
        plans = []
        for cls in classes:
            own = cls._plans.get(node_type)
            if own is None:
                own = cls._plans[node_type] = cls._plan_for(node_type)
            plans.append(own)
        fields = []
        for index, name in enumerate(_fields_of(node_type)):
            before = tuple((i, p[2][index][1]) for i, p in enumerate(plans) if p[2][index][1])
            after = tuple((i, p[2][index][2]) for i, p in enumerate(plans) if p[2][index][2])
            fields.append((name, before, after))
        plan = _JOINT_PLANS[(classes, node_type)] = (
            tuple((i, p[0]) for i, p in enumerate(plans) if p[0] is not None),
            tuple(fields),
            tuple((i, p[1]) for i, p in enumerate(plans) if p[1] is not None),
        )
    return plan


def _together(node: cst.CSTNode, visitors: list[Visitor], classes: tuple[type, ...]) -> None:
    visits, fields, leaves = _joint_plan(classes, type(node))
    below, below_classes = visitors, classes
    if visits:
        skipping = [i for i, visit in visits if visit(visitors[i], node) is False]
        if skipping:
            below = [v for i, v in enumerate(visitors) if i not in skipping]
            below_classes = tuple(type(visitor) for visitor in below)
    if below:
        kinds = _KINDS
        for name, before, after in fields:
            for i, hook in before:
                if below is visitors or visitors[i] in below:
                    hook(visitors[i], node)
            value = getattr(node, name)
            kind = kinds[type(value)]
            if kind == _NODE:
                _descend(value, below, below_classes)
            elif kind == _SEQUENCE:
                for item in value:
                    if kinds[type(item)] == _NODE:
                        _descend(item, below, below_classes)
            for i, hook in after:
                if below is visitors or visitors[i] in below:
                    hook(visitors[i], node)
    for i, leave in leaves:
        leave(visitors[i], node)


def _descend(node: cst.CSTNode, visitors: list[Visitor], classes: tuple[type, ...]) -> None:
    if len(visitors) == 1:
        visitors[0].walk(node)
    else:
        _together(node, visitors, classes)


def _fields_of(node_type: type) -> tuple[str, ...]:
    """`_child_fields`, remembered per type."""
    fields = _CHILD_FIELDS.get(node_type)
    if fields is None:
        fields = _CHILD_FIELDS[node_type] = _child_fields(node_type)
    return fields


Result = TypeVar("Result")


class Analysis(Generic[Result]):
    """A whole-module analysis: the visitor that collects as it walks, and what
    it found once the walk is done.  Analyses of one module share a walk
    (`walk_together`); `alone` walks one by itself."""

    def __init__(self, visitor: Visitor, finish: Callable[[], Result]) -> None:
        self.visitor = visitor
        self.finish = finish

    def alone(self, module: cst.Module) -> Result:
        self.visitor.walk(module)
        return self.finish()
