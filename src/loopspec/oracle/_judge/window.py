"""Bounded lists for long runs: the core's RunState keeps every request, answer and execution of a
run in lists; the oracle reads a run once, front to back, and only ever needs the newest items.

:class:`Recent` is a ``list`` that forgets its oldest items once it holds ``cap`` of them, while
``len()`` still reports every item ever appended (the core derives request indices, ordinals and
counters from lengths). Items for which ``sticky`` holds are remembered apart (one is enough: the
core only asks whether *any* answer was refused by a limit, for the coverage, R22) and iteration
yields them first. Runs shorter than ``cap`` are never trimmed, so for them the state is exactly the
core's and every invariant can be evaluated on it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

DEFAULT_CAP = 4096


class Recent(list):  # type: ignore[type-arg]
    __slots__ = ("cap", "dropped", "kept", "sticky")

    def __init__(self, cap: int = DEFAULT_CAP, sticky: Callable[[Any], bool] | None = None) -> None:
        super().__init__()
        self.cap = cap
        self.dropped = 0
        self.sticky = sticky
        self.kept: list[Any] = []

    @classmethod
    def of(cls, items: list[Any], cap: int = DEFAULT_CAP, sticky: Callable[[Any], bool] | None = None) -> Recent:
        """A Recent holding ``items`` (trimmed at once when they exceed ``cap``)."""
        r = cls(cap, sticky)
        for x in items:
            r.append(x)
        return r

    def append(self, item: Any) -> None:
        list.append(self, item)
        if list.__len__(self) > self.cap:
            half = self.cap // 2
            if self.sticky is not None and not self.kept:
                for old in list.__getitem__(self, slice(0, half)):
                    if self.sticky(old):
                        self.kept.append(old)
                        break
            del self[:half]
            self.dropped += half

    def __len__(self) -> int:
        return self.dropped + list.__len__(self)

    def __bool__(self) -> bool:
        return self.dropped > 0 or list.__len__(self) > 0

    def __iter__(self) -> Iterator[Any]:
        if self.kept:
            yield from self.kept
        yield from list.__iter__(self)

    @property
    def trimmed(self) -> bool:
        return self.dropped > 0
