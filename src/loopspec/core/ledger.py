"""The run ledger: every step of a run as an event, serialisable as NDJSON (R27).

The event vocabulary and its JSON Schema live in ``spec/schema/ledger-event.schema.json``.
Arguments and outputs appear only as digests unless the run was started with
``record_arguments=True``. Every event names the spec transition that produced it (``via``),
so a ledger can be drawn on the machine and re-checked against the core.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any, Final

from .rules import canonical_json

__all__ = ["LEDGER_VERSION", "Ledger", "digest", "dumps_event", "read_events"]

#: The ledger format version, carried by every event as ``v``.
LEDGER_VERSION: Final = 1


def digest(value: Any) -> str | None:
    """A short stable digest of a JSON value (``sha256:`` + 16 hex digits), ``None`` if not JSON."""
    canon = canonical_json(value)
    if canon is None:
        return None
    return "sha256:" + hashlib.sha256(canon.encode("utf-8")).hexdigest()[:16]


def dumps_event(event: dict[str, Any]) -> str:
    return json.dumps(event, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=str)


class Ledger:
    """Collects the events of one or more runs; optionally streams them to a text sink.

    Thread-safe: a late result may be recorded from a worker thread after the run has ended.
    """

    def __init__(self, sink: IO[str] | None = None, *, keep: bool = True) -> None:
        self._sink = sink
        self._keep = keep
        self._events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._listeners: list[Callable[[dict[str, Any]], None]] = []

    def subscribe(self, listener: Callable[[dict[str, Any]], None]) -> None:
        self._listeners.append(listener)

    def emit(self, event: dict[str, Any]) -> None:
        with self._lock:
            if self._keep:
                self._events.append(event)
            if self._sink is not None:
                self._sink.write(dumps_event(event) + "\n")
            for listener in self._listeners:
                listener(event)

    @property
    def events(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._events)

    def to_ndjson(self) -> str:
        return "".join(dumps_event(e) + "\n" for e in self.events)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.events)


def read_events(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    """Parse NDJSON ledger lines (blank lines skipped). Raises ValueError naming the line."""
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            ev = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"line {n}: not JSON: {exc.msg}") from None
        if not isinstance(ev, dict):
            raise ValueError(f"line {n}: an event must be a JSON object")
        yield ev
