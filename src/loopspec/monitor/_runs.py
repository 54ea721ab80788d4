"""The traces the monitor holds until they can be judged, with bounded memory.

A trace is held from its first span until it *closes*: its root span (a span without a parent) arrives —
the SDKs export a span when it ends, and a root ends after everything under it — or no span of it arrives
for ``idle`` seconds, or it is the oldest open trace when more than ``max_open`` are open, or the monitor
shuts down. Closing hands the trace's spans over for judging exactly as ``loopspec check`` judges a file:
the oracle groups them into runs (agent invocations) itself. Traces already closed are remembered (a
bounded number of them), so that a span arriving after its trace was judged is refused, not judged as a
run of its own.

Pure bookkeeping: the clock is a parameter, nothing here does I/O.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Final

Json = Any

#: why a trace was closed, and the note an incomplete one carries
CLOSED_BY: Final = {
    "root": None,
    "idle": "judged without its root span: no span of its trace arrived for {idle:g} s (--idle)",
    "evicted": "judged without its root span: more than {max_open} traces were open (--max-open-runs); "
               "the oldest is judged as it stands",
    "shutdown": "judged without its root span: the monitor was stopped while the trace was still open",
}


@dataclass
class Open:
    trace: str
    fragments: list[Json] = field(default_factory=list)
    spans: int = 0
    first: float = 0.0
    last: float = 0.0


@dataclass(frozen=True)
class Closed:
    trace: str
    fragments: list[Json]
    spans: int
    reason: str  # a key of CLOSED_BY
    note: str | None


class OpenTraces:
    """Open traces in order of their last span (oldest first), and the ids of the traces already closed."""

    def __init__(self, *, idle: float, max_open: int, remember: int = 100_000) -> None:
        if idle <= 0 or max_open < 1 or remember < 1:
            raise ValueError("idle must be > 0, max_open and remember >= 1")
        self.idle = idle
        self.max_open = max_open
        self.remember = remember
        self.open: OrderedDict[str, Open] = OrderedDict()
        self.closed: OrderedDict[str, None] = OrderedDict()
        self.spans = 0  # spans held

    def was_closed(self, trace: str) -> bool:
        return trace in self.closed

    def add(self, trace: str, fragments: list[Json], spans: int, now: float) -> None:
        """Hold ``spans`` more spans of ``trace`` (the caller refused them if the trace was closed)."""
        o = self.open.get(trace)
        if o is None:
            o = self.open[trace] = Open(trace, first=now)
        else:
            self.open.move_to_end(trace)
        o.fragments.extend(fragments)
        o.spans += spans
        o.last = now
        self.spans += spans

    def close(self, trace: str, reason: str) -> Closed | None:
        o = self.open.pop(trace, None)
        if o is None:
            return None
        self.spans -= o.spans
        self.closed[trace] = None
        while len(self.closed) > self.remember:
            self.closed.popitem(last=False)
        tmpl = CLOSED_BY[reason]
        note = tmpl.format(idle=self.idle, max_open=self.max_open) if tmpl else None
        return Closed(trace, o.fragments, o.spans, reason, note)

    def overflow(self) -> list[Closed]:
        """The oldest traces beyond ``max_open``, closed."""
        out = []
        while len(self.open) > self.max_open:
            trace = next(iter(self.open))
            c = self.close(trace, "evicted")
            if c is not None:
                out.append(c)
        return out

    def expired(self, now: float) -> list[Closed]:
        """The traces that received no span for ``idle`` seconds, closed (oldest first)."""
        out = []
        while self.open:
            trace, o = next(iter(self.open.items()))
            if now - o.last < self.idle:
                break
            c = self.close(trace, "idle")
            if c is not None:
                out.append(c)
        return out

    def all(self) -> list[Closed]:
        """Every open trace, closed (at shutdown)."""
        return [c for t in list(self.open) if (c := self.close(t, "shutdown")) is not None]
