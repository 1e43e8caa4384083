"""Every call of a plain name in a module, and the other uses of each name:
who calls a module-level function (`train(model, loader, optimizer)`), from
where, and whether it is also passed on or stored, where amplint cannot see
it called.  The analysis asks it of a step function given its loss, the
scaler placement of one given its optimizer; one walk serves both."""

from __future__ import annotations

from collections import Counter, defaultdict

import libcst as cst

from amplint.analysis.visitor import children


class NameCalls:
    """Every call of a plain name in a module, with the chain of nodes above
    it (the module first), and how many other uses each name has (a read-only
    walk: libcst's own visitor rebuilds every node it passes).  One walk
    serves every step function of the module: a walk per step made a file of
    1,000 training functions quadratic (400 took 15 s)."""

    def __init__(self, module: cst.Module) -> None:
        self.module = module
        self.calls: dict[str, list[tuple[cst.Call, list[cst.CSTNode]]]] = defaultdict(list)
        self.other_uses: Counter[str] = Counter()
        self._walk(module, [])

    def _walk(self, node: cst.CSTNode, stack: list[cst.CSTNode]) -> None:
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Name):
            self.calls[node.func.value].append((node, list(stack)))
        elif isinstance(node, cst.Name):
            parent = stack[-1] if stack else None
            if not _names_something_else(parent, node):
                self.other_uses[node.value] += 1
        stack.append(node)
        for child in children(node):
            self._walk(child, stack)
        stack.pop()


# The last module's: its steps are analysed, then planned, one after another.
_last: list[NameCalls] = []


def name_calls(module: cst.Module) -> NameCalls:
    """The calls of `module`, walked once for the module last asked about."""
    if not _last or _last[0].module is not module:
        _last[:] = [NameCalls(module)]
    return _last[0]


def _names_something_else(parent: cst.CSTNode | None, name: cst.Name) -> bool:
    """Whether `name` under `parent` is not a reference to the function:
    the call's own callee, `model.train`, `train=` keyword, a definition."""
    return (
        (isinstance(parent, cst.Call) and parent.func is name)
        or (isinstance(parent, cst.Attribute) and parent.attr is name)
        or (isinstance(parent, cst.Arg) and parent.keyword is name)
        or (isinstance(parent, (cst.FunctionDef, cst.ClassDef, cst.Param)) and parent.name is name)
    )
