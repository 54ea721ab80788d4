"""A window on a run: a RunState that holds only the live part of its history.

The fast explorer never keeps a whole history. To take a step from a compact state it
*materialises* a RunState whose lists keep only the items the core may still read — the current
request, the last answer, the last execution — behind a length offset, and whose bindings table
holds only the one call id the step is about. Everything else is a :class:`Sealed` placeholder
that knows its index and raises :class:`~loopspec.checker.state.NonLocal` on any other access.
Then the real step (:func:`loopspec.checker.semantics.step`, i.e. the core's guards and effect
functions) runs on it unchanged, and the result is read back into a compact state.

So nothing of the core is re-implemented here: a semantics that reaches outside the window is
refused (``NonLocal``), never silently mis-stepped.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from .state import NonLocal

__all__ = ["AtLeast", "Bindings", "LowerBounds", "Poison", "Sealed", "Tail", "Undecided", "is_poison"]

Json = Any


class Poison:
    """A value left out of the memo key: any use of it raises NonLocal.

    Comparing, ordering, arithmetic, truth, hashing, iterating, formatting or reading an attribute
    all raise. Only identity survives (``x is None`` is False), so a poison stands only for values
    the core never tests by identity alone: counters, limits, the mode and the policy.
    """

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "name", name)

    def _raise(self, *_: Any) -> Any:
        raise NonLocal(f"{object.__getattribute__(self, 'name')} is outside the memo key")

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _raise  # type: ignore[assignment]
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __neg__ = _raise
    __bool__ = __hash__ = __index__ = __int__ = __float__ = __len__ = __iter__ = _raise  # type: ignore[assignment]
    __contains__ = __getitem__ = __format__ = __str__ = _raise  # type: ignore[assignment]

    def __getattr__(self, name: str) -> Any:
        self._raise()

    def __setattr__(self, name: str, value: Any) -> None:
        self._raise()

    def __repr__(self) -> str:
        return f"<poison {object.__getattribute__(self, 'name')}>"


def is_poison(x: object) -> bool:
    return type(x) is Poison


class Undecided:
    """A truth value that depends on something outside the memo key: using it raises NonLocal."""

    __slots__ = ("why",)

    def __init__(self, why: str) -> None:
        self.why = why

    def __bool__(self) -> bool:
        raise NonLocal(self.why)


class AtLeast:
    """A limit left out of the memo key of which only a lower bound is known: ``count < limit`` is
    true below the bound and :class:`Undecided` from it on (``None``, unlimited, is above every
    bound). Only that comparison is allowed; anything else raises NonLocal like a poison."""

    __slots__ = ("bound", "name")

    def __init__(self, name: str, bound: int) -> None:
        self.name = name
        self.bound = bound

    def __gt__(self, count: object) -> Any:  # ``count < limit``
        if isinstance(count, int) and not isinstance(count, bool):
            return True if count < self.bound else Undecided(f"{self.name} (at least {self.bound}) is outside the memo key")
        raise NonLocal(f"{self.name} compared with {count!r}")

    def _raise(self, *_: Any) -> Any:
        raise NonLocal(f"{self.name} is outside the memo key")

    __eq__ = __ne__ = __lt__ = __le__ = __ge__ = _raise  # type: ignore[assignment]
    __add__ = __radd__ = __sub__ = __rsub__ = __bool__ = __hash__ = __index__ = __int__ = _raise  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<at least {self.bound}: {self.name}>"


class LowerBounds(dict):  # type: ignore[type-arg]
    """Per-tool limits of which only lower bounds are known: ``get`` gives an :class:`AtLeast`."""

    def __init__(self, name: str, bounds: dict[str, int]) -> None:
        super().__init__()
        self.name = name
        self.bounds = bounds

    def get(self, key: object, default: Any = None) -> Any:
        return AtLeast(f"{self.name}[{key!r}]", self.bounds.get(key, 0))  # type: ignore[call-overload]

    def _raise(self, *_: Any, **__: Any) -> Any:
        raise NonLocal(f"{self.name} is outside the memo key")

    __getitem__ = __setitem__ = __delitem__ = __contains__ = __iter__ = __len__ = _raise  # type: ignore[assignment]
    setdefault = pop = keys = values = items = update = _raise  # type: ignore[assignment]


class PoisonDict(dict):  # type: ignore[type-arg]
    """A mapping left out of the memo key."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    def _raise(self, *_: Any, **__: Any) -> Any:
        raise NonLocal(f"{self.name} is outside the memo key")

    __getitem__ = __setitem__ = __delitem__ = __contains__ = __iter__ = __len__ = _raise  # type: ignore[assignment]
    get = setdefault = pop = keys = values = items = update = _raise  # type: ignore[assignment]

    def copy(self) -> PoisonDict:  # type: ignore[override]
        return self

    def __eq__(self, other: object) -> bool:
        return self is other

    def __ne__(self, other: object) -> bool:
        return self is not other

    __hash__ = object.__hash__  # type: ignore[assignment]


class Sealed:
    """An item of the history outside the window: only its index (``index`` or ``request``) is known."""

    __slots__ = ("_index", "_kind", "_known")

    def __init__(self, kind: str, index: int | None, known: dict[str, Any] | None = None) -> None:
        object.__setattr__(self, "_kind", kind)
        object.__setattr__(self, "_index", index)
        object.__setattr__(self, "_known", known or {})

    def __getattr__(self, name: str) -> Any:
        known = object.__getattribute__(self, "_known")
        if name in known:
            return known[name]
        if name == "index" and object.__getattribute__(self, "_index") is not None:
            return object.__getattribute__(self, "_index")
        raise NonLocal(f"{object.__getattribute__(self, '_kind')}.{name} is outside the window")

    def __setattr__(self, name: str, value: Any) -> None:
        raise NonLocal(f"{object.__getattribute__(self, '_kind')}.{name} written outside the window")

    def __repr__(self) -> str:
        return f"Sealed({self._kind}, {self._index})"

    def knows(self, name: str) -> bool:
        """Is the field ``name`` known (readable without leaving the window)?"""
        return name in object.__getattribute__(self, "_known") or (
            name == "index" and object.__getattribute__(self, "_index") is not None)


class Tail:
    """A list of which only the last items are present; ``offset`` items precede them."""

    __slots__ = ("items", "kind", "offset")

    def __init__(self, kind: str, offset: int, items: Sequence[Any]) -> None:
        self.kind = kind
        self.offset = offset
        self.items = list(items)

    def __len__(self) -> int:
        return self.offset + len(self.items)

    def __bool__(self) -> bool:
        return len(self) > 0

    def _pos(self, i: object) -> int:
        if not isinstance(i, int) or isinstance(i, bool):
            raise NonLocal(f"{self.kind}[{i!r}]: only single positions are inside the window")
        j = i + len(self) if i < 0 else i
        if j < self.offset or j >= len(self):
            raise NonLocal(f"{self.kind}[{i}] is outside the window")
        return j - self.offset

    def __getitem__(self, i: object) -> Any:
        if i == -1 and self.items and not isinstance(i, bool):
            return self.items[-1]  # the last item needs no length (the offset may be a poison)
        return self.items[self._pos(i)]

    def __setitem__(self, i: object, value: Any) -> None:
        self.items[self._pos(i)] = value

    def append(self, value: Any) -> None:
        self.items.append(value)

    def pop(self, i: int = -1) -> Any:
        if i != -1 or not self.items:
            raise NonLocal(f"{self.kind}.pop({i}) reaches outside the window")
        return self.items.pop()

    def clear(self) -> None:
        self.offset = 0
        self.items.clear()

    def __iter__(self) -> Iterator[Any]:
        raise NonLocal(f"iterating {self.kind} reads the whole history")

    def __contains__(self, x: object) -> bool:
        raise NonLocal(f"searching {self.kind} reads the whole history")

    def insert(self, i: int, value: Any) -> None:
        if i >= len(self) or (i == -1 and not self.items):
            self.items.append(value)
            return
        raise NonLocal(f"{self.kind}.insert({i}) reaches outside the window")

    def __eq__(self, other: object) -> bool:
        return self is other

    __hash__ = object.__hash__  # type: ignore[assignment]

    def copy(self) -> Tail:
        return Tail(self.kind, self.offset, self.items)

    def copy_with(self, fn: Any) -> Tail:
        return Tail(self.kind, self.offset, [x if isinstance(x, Sealed) else fn(x) for x in self.items])

    def positions(self) -> list[tuple[int, Any]]:
        """(absolute position, item) of the items present."""
        return [(self.offset + k, x) for k, x in enumerate(self.items)]


class Bindings(dict):  # type: ignore[type-arg]
    """The bindings table restricted to the call ids of the window; any other id is NonLocal."""

    __slots__ = ("allowed",)

    def __init__(self, allowed: frozenset[str], data: dict[str, Any]) -> None:
        super().__init__(data)
        self.allowed = allowed

    def _ok(self, k: object) -> None:
        if k not in self.allowed:
            raise NonLocal(f"binding of id {k!r} is outside the window")

    def __getitem__(self, k: object) -> Any:
        self._ok(k)
        return super().__getitem__(k)

    def __setitem__(self, k: object, v: Any) -> None:
        self._ok(k)
        super().__setitem__(k, v)

    def __delitem__(self, k: object) -> None:
        self._ok(k)
        super().__delitem__(k)

    def __contains__(self, k: object) -> bool:
        self._ok(k)
        return super().__contains__(k)

    def get(self, k: object, default: Any = None) -> Any:
        self._ok(k)
        return super().get(k, default)

    def setdefault(self, k: object, default: Any = None) -> Any:
        self._ok(k)
        return super().setdefault(k, default)

    def pop(self, k: object, *default: Any) -> Any:
        self._ok(k)
        return super().pop(k, *default)

    def __iter__(self) -> Iterator[Any]:
        raise NonLocal("iterating the bindings reads every id")

    def __len__(self) -> int:
        raise NonLocal("counting the bindings reads every id")

    def keys(self) -> Any:
        raise NonLocal("listing the bindings reads every id")

    def values(self) -> Any:
        raise NonLocal("listing the bindings reads every id")

    def items(self) -> Any:
        raise NonLocal("listing the bindings reads every id")

    def copy_with(self, fn: Any) -> Bindings:
        return Bindings(self.allowed, {k: fn(v) for k, v in self.own().items()})

    def own(self) -> dict[str, Any]:
        """The window's own entries (for reading the result back)."""
        return {k: dict.__getitem__(self, k) for k in self.allowed if dict.__contains__(self, k)}
