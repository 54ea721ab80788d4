"""Which fields of a RunState each invariant of the core reads, found in the core's source.

An invariant is a function of the RunState fields it reads. After a step that changed none of
them, it has the value it had before the step — true, since a state is only stepped from when
every invariant holds in it. So the fast explorer re-evaluates, after each step, only the
invariants whose read set meets the fields the step changed ("only what a step can break").

The read sets are not written down by hand: :func:`read_set` walks the syntax tree of the
invariant function in ``loopspec.core.rules``, following the helper functions it passes the state to
and the RunState properties and methods it uses. A read it cannot follow (the state passed to a
function outside the core, or stored in a variable) makes the read set "everything", which only
costs speed.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
from collections.abc import Callable
from functools import cache
from typing import Any

from ..core import rules as core
from ..core.rules import RunState

__all__ = ["ALL_FIELDS", "invariant_read_sets", "read_set", "reads_clock"]

ALL_FIELDS: frozenset[str] = frozenset(f.name for f in dataclasses.fields(RunState))


def _tree(fn: Callable[..., Any]) -> ast.FunctionDef | None:
    try:
        src = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        return None
    node = ast.parse(src).body[0]
    return node if isinstance(node, ast.FunctionDef) else None


@cache
def _reads(fn: Callable[..., Any], param_index: int = 0) -> frozenset[str]:
    tree = _tree(fn)
    if tree is None or param_index >= len(tree.args.args):
        return ALL_FIELDS
    p = tree.args.args[param_index].arg
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == p:
            out |= _member(node.attr)
        elif isinstance(node, ast.Call):
            for i, arg in enumerate(node.args):
                if isinstance(arg, ast.Name) and arg.id == p:
                    callee = _callee(node.func)
                    if callee is None:
                        return ALL_FIELDS
                    out |= _reads(callee, i)
            for kw in node.keywords:
                if isinstance(kw.value, ast.Name) and kw.value.id == p:
                    return ALL_FIELDS
        elif isinstance(node, ast.Name) and node.id == p and isinstance(node.ctx, ast.Load):
            parent_ok = False  # a bare use of the state is only fine as s.attr or f(s)
            for other in ast.walk(tree):
                if (isinstance(other, ast.Attribute) and other.value is node) or (
                    isinstance(other, ast.Call) and node in other.args
                ):
                    parent_ok = True
                    break
            if not parent_ok:
                return ALL_FIELDS
    return frozenset(out)


def _callee(func: ast.expr) -> Callable[..., Any] | None:
    if isinstance(func, ast.Name):
        obj = getattr(core, func.id, None)
        if inspect.isfunction(obj) and obj.__module__ == core.__name__:
            return obj  # type: ignore[no-any-return]
        if func.id in ("len", "any", "all", "sum", "sorted", "list", "set", "dict", "tuple", "enumerate"):
            return None
    return None


def _member(name: str) -> frozenset[str]:
    if name in ALL_FIELDS:
        return frozenset({name})
    attr = inspect.getattr_static(RunState, name, None)
    if isinstance(attr, property) and attr.fget is not None:
        return _reads(attr.fget, 0)
    if inspect.isfunction(attr):
        return _reads(attr, 0)
    return ALL_FIELDS


def read_set(fn: Callable[[RunState], bool]) -> frozenset[str]:
    """The RunState fields ``fn(s)`` may read (all of them when the analysis cannot tell)."""
    return _reads(fn, 0)


@cache
def invariant_read_sets() -> dict[str, frozenset[str]]:
    return {name: read_set(fn) for name, fn in core.INVARIANTS.items()}


def reads_clock(fn: Callable[..., Any]) -> bool:
    """Can ``fn`` read the injected clock (``RunState.now``)? Conservative: looks for the name
    ``now`` in the bytecode of ``fn`` and of every function of the core it names, transitively."""
    seen: set[int] = set()
    todo = [getattr(fn, "__code__", None)]
    while todo:
        code = todo.pop()
        if code is None or id(code) in seen:
            continue
        seen.add(id(code))
        if "now" in code.co_names:
            return True
        for name in code.co_names:
            obj = getattr(core, name, None)
            if inspect.isfunction(obj) and obj.__module__ == core.__name__:
                todo.append(obj.__code__)
        todo.extend(c for c in code.co_consts if inspect.iscode(c))
    return False
