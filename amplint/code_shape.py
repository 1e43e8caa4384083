"""Where a compiled file backpropagates and where it updates parameters, for the
AMP001 trigger that the file's names alone leave open.

Torch's own sources name `backward` and `step` everywhere: an autograd
Function defines `backward`, a test backpropagates in one function and steps a
scheduler in another.  Every training step the step search finds
(amplint/analysis/steps.py) is one function's code, or the module's own, that
calls `.backward()` and updates parameters (`opt.step()`, `p.add_(...)`,
`p -= lr * p.grad`): itself, in a closure it holds, or through a def of the
module it names (`self.backward_G()`, `optimizer.step(self.closure)`).  The
code objects CPython compiles say that per function, at the cost of the
compile the prefilter already pays: each lists the names it loads and the
attributes it reads, its nested code objects are its closures, lambdas and
class bodies, and an in-place subtraction is one instruction.
"""

from __future__ import annotations

import dis
import sys
import types
from dataclasses import dataclass, field

# Calls that update parameters after a backward: an optimizer's step, or an
# update by hand (`p.data.add_(p.grad, alpha=-lr)`).
_UPDATES = frozenset({"step", "add_", "sub_", "copy_"})
_FUNCTION = 0x02  # CO_NEWLOCALS: a function, lambda or comprehension, not a class body


def _inplace_subtract() -> bytes | None:
    """The instruction `x -= y` compiles to, opcode and argument: BINARY_OP
    with NB_INPLACE_SUBTRACT from 3.11 on, INPLACE_SUBTRACT before; None
    where this Python's `dis` names neither (then every `-=` is assumed)."""
    if "BINARY_OP" in dis.opmap:
        operators = [name for name, _ in getattr(dis, "_nb_ops", ())]
        if "NB_INPLACE_SUBTRACT" not in operators:
            return None
        return bytes([dis.opmap["BINARY_OP"], operators.index("NB_INPLACE_SUBTRACT")])
    if "INPLACE_SUBTRACT" in dis.opmap:
        return bytes([dis.opmap["INPLACE_SUBTRACT"]])
    return None


_SUBTRACTS_IN_PLACE = _inplace_subtract()


@dataclass
class _Unit:
    """A function's code, or the module's own code with its class bodies: what
    one training step can span."""

    name: str | None
    enclosing: int | None  # the function a def nested in a function is a closure of
    backpropagates: bool = False
    updates: bool = False
    names: set[str] = field(default_factory=set)  # globals and attributes it reads


def code_names(module: types.CodeType) -> frozenset[str]:
    """Every name the module and its functions, classes, lambdas and
    comprehensions load, store, import or read as an attribute."""
    names: set[str] = set()
    pending = [module]
    while pending:
        code = pending.pop()
        names.update(code.co_names)
        pending += [const for const in code.co_consts if isinstance(const, types.CodeType)]
    return frozenset(names)


def backward_meets_update(module: types.CodeType) -> bool:
    """Whether some function, or the module's own code, both backpropagates
    and updates parameters, itself or through a def it names."""
    units = [_Unit(None, None)]
    pending: list[tuple[types.CodeType, int]] = [(module, 0)]
    while pending:
        code, owner = pending.pop()
        nested = [const for const in code.co_consts if isinstance(const, types.CodeType)]
        here = owner
        if code.co_flags & _FUNCTION and not code.co_name.startswith("<") and code is not module:
            # A method or a top-level def is a unit of its own; a def in a
            # function is one too, and a closure its function may hand over.
            units.append(_Unit(code.co_name, owner if units[owner].name is not None else None))
            here = len(units) - 1
        names = set(code.co_names) if code.co_flags & _FUNCTION else _read_names(code)
        unit = units[here]
        unit.names |= names
        unit.backpropagates |= "backward" in names
        unit.updates |= not names.isdisjoint(_UPDATES) or (
            _SUBTRACTS_IN_PLACE is None or _SUBTRACTS_IN_PLACE in code.co_code
        )
        pending += [(child, here) for child in nested]
    # A closure's code is its function's too: innermost first.
    for unit in reversed(units):
        if unit.enclosing is not None:
            outer = units[unit.enclosing]
            outer.backpropagates |= unit.backpropagates
            outer.updates |= unit.updates
            outer.names |= unit.names
    return _meet(units)


def _read_names(code: types.CodeType) -> set[str]:
    """The names the module's or a class body's code may read, less those it
    only binds: `def backward(ctx, grad)` in an autograd Function stores the
    name `backward` and calls nothing.  Names of code the compiler dropped
    (`if False:`) have no instruction left: they stay.  Such code is short
    (imports, defs, assignments) next to the functions it defines."""
    bound: set[str] = set()
    read: set[str] = set()
    for instruction in dis.get_instructions(code):
        if instruction.opcode in _NAMED:
            (bound if instruction.opname in _BINDS else read).add(instruction.argval)
    return set(code.co_names) - (bound - read)


_NAMED = frozenset(dis.hasname)  # instructions whose argument is a name of co_names
_BINDS = frozenset({"STORE_NAME", "STORE_GLOBAL", "DELETE_NAME", "DELETE_GLOBAL"})


def _meet(units: list[_Unit]) -> bool:
    # A unit that names a def that backpropagates (calls it, or hands it to
    # `optimizer.step`) may backpropagate: to a fixed point, by name.
    backpropagating = {unit.name for unit in units if unit.backpropagates}
    updating = {unit.name for unit in units if unit.updates}
    changed = True
    while changed:
        changed = False
        for unit in units:
            if not unit.backpropagates and not unit.names.isdisjoint(backpropagating):
                unit.backpropagates = changed = True
                backpropagating.add(unit.name)
            if not unit.updates and not unit.names.isdisjoint(updating):
                unit.updates = changed = True
                updating.add(unit.name)
    return any(unit.backpropagates and unit.updates for unit in units)


# Before 3.10 the compiler drops the code under `if False:` / `while 0:` before
# it records names; a step written there would go unseen.  From 3.10 on every
# name written in code reaches the code objects (tests/test_prefilter.py pins it).
COMPILER_KEEPS_DEAD_CODE_NAMES = sys.version_info >= (3, 10)
