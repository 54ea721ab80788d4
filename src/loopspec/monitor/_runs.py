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


class _Bounded:
    """What the two holders share: ``idle`` seconds without news close what they hold, at most ``max_open`` are
    held, and the keys of the last ``remember`` closed are kept; ``spans`` counts the spans held."""

    def __init__(self, *, idle: float, max_open: int, remember: int = 100_000) -> None:
        if idle <= 0 or max_open < 1 or remember < 1:
            raise ValueError("idle must be > 0, max_open and remember >= 1")
        self.idle = idle
        self.max_open = max_open
        self.remember = remember
        self.spans = 0


class OpenTraces(_Bounded):
    """Open traces in order of their last span (oldest first), and the ids of the traces already closed."""

    def __init__(self, *, idle: float, max_open: int, remember: int = 100_000) -> None:
        super().__init__(idle=idle, max_open=max_open, remember=remember)
        self.open: OrderedDict[str, Open] = OrderedDict()
        self.closed: OrderedDict[str, None] = OrderedDict()

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


#: why a held conversation was judged, and the note it carries
CONVERSATION_CLOSED_BY: Final = {
    "idle": None,
    "evicted": "judged while it could still be continued: more than {max_open} conversations were held "
               "(--max-open-runs); the oldest is judged as it stands",
    "shutdown": None,
}

Key = tuple[str, int, int]  # (how a conversation is continued, prefix length, prefix hash): the oracle's


@dataclass
class Held:
    """A conversation of one model client's traces (each one model call), held until no trace continues it for
    ``idle`` seconds: the traces in order, and the keys under which a later trace would continue it."""

    id: int
    traces: list[Closed] = field(default_factory=list)
    spans: int = 0
    last: float = 0.0
    exits: list[Key] = field(default_factory=list)
    late: str | None = None  # the first trace of a conversation already judged that this one continues


@dataclass(frozen=True)
class Conversation:
    traces: list[Closed]
    spans: int
    reason: str  # a key of CONVERSATION_CLOSED_BY
    note: str | None


class HeldConversations(_Bounded):
    """Conversations stitched from one model client's traces as they close, in order of their last trace (oldest
    first). A closed trace that is such a call joins the held conversation whose last call its request continues
    (matched by the prefix keys the oracle computes, :func:`loopspec.oracle.check_trace`; the oracle then
    stitches the joined traces exactly, as ``check`` does on a file) — or starts one. A trace that fits two held
    conversations joins neither. At most ``max_open`` are held: the oldest beyond is judged as it stands. A
    conversation already judged (no trace continued it for ``idle`` seconds) can no longer be continued: a later
    trace of it is judged as a run that starts mid-conversation."""

    def __init__(self, *, idle: float, max_open: int, remember: int = 100_000) -> None:
        super().__init__(idle=idle, max_open=max_open, remember=remember)
        self.held: OrderedDict[int, Held] = OrderedDict()
        self.index: dict[Key, set[int]] = {}
        self.judged: OrderedDict[Key, str] = OrderedDict()  # exit keys of judged conversations -> their first trace
        self._next = 0

    def add(self, c: Closed, entry: list[Key], exits: list[Key], now: float) -> None:
        """Hold the closed trace ``c``: with the held conversation whose last call it continues, when exactly one
        does (any of its entry keys among that conversation's exit keys, and no other's), else as a conversation of
        its own — the rule the oracle stitches by (:mod:`loopspec.oracle._group.stitch`)."""
        found: set[int] = set()
        for k in entry:
            found |= self.index.get(k, set())
            if len(found) > 1:
                break
        h = self.held[next(iter(found))] if len(found) == 1 else None
        if h is None:
            h = Held(self._next)
            self._next += 1
            self.held[h.id] = h
            if not found:
                h.late = next((self.judged[k] for k in entry if k in self.judged), None)
        else:
            self.held.move_to_end(h.id)
            self._unindex(h)
        h.traces.append(c)
        h.spans += c.spans
        h.last = now
        h.exits = list(exits)
        for k in h.exits:
            self.index.setdefault(k, set()).add(h.id)
        self.spans += c.spans

    def _unindex(self, h: Held) -> None:
        for k in h.exits:
            ids = self.index.get(k)
            if ids is not None:
                ids.discard(h.id)
                if not ids:
                    del self.index[k]

    def _close(self, h: Held, reason: str) -> Conversation:
        self.held.pop(h.id, None)
        self._unindex(h)
        self.spans -= h.spans
        for k in h.exits:  # a trace that continues it later is told so (a bounded memory of them)
            self.judged[k] = h.traces[0].trace
            self.judged.move_to_end(k)
        while len(self.judged) > self.remember:
            self.judged.popitem(last=False)
        tmpl = CONVERSATION_CLOSED_BY[reason]
        notes = [tmpl.format(max_open=self.max_open)] if tmpl else []
        if h.late is not None:
            notes.append(f"it continues the conversation of trace {h.late}, judged already (no trace had continued "
                         f"it for {self.idle:g} s, --idle): judged as a run of its own")
        return Conversation(h.traces, h.spans, reason, "; ".join(notes) or None)

    def overflow(self) -> list[Conversation]:
        out = []
        while len(self.held) > self.max_open:
            out.append(self._close(next(iter(self.held.values())), "evicted"))
        return out

    def expired(self, now: float) -> list[Conversation]:
        """The conversations no trace continued for ``idle`` seconds (oldest first)."""
        out = []
        while self.held:
            h = next(iter(self.held.values()))
            if now - h.last < self.idle:
                break
            out.append(self._close(h, "idle"))
        return out

    def all(self) -> list[Conversation]:
        return [self._close(h, "shutdown") for h in list(self.held.values())]
