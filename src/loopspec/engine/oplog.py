"""The durable operation ledger of SPEC.md section 6 and the executor that carries writes through it.

* :class:`OperationLedger` — the narrow interface (a server database can implement it): one
  operation per business key, each state change one transaction that checks the machine of
  ``spec/writes.toml`` (:func:`loopspec.core.writes.op_step`), and each run's recorded answers.
* :class:`SQLiteOperationLedger` — the embedded default: stdlib :mod:`sqlite3`, WAL, ``synchronous=FULL``,
  ``BEGIN IMMEDIATE`` … ``COMMIT`` per state change; :class:`MemoryOperationLedger` for tests.
* :class:`WriteExecutor` — answers the requests of one run for write tools: intent, dispatch mark,
  send, result, answer (R39–R41), ``OUTCOME_UNKNOWN`` (R42), reconciliation before any re-send (R43),
  replay from the ledger (R44), dispatch budget (R45), :meth:`~WriteExecutor.resume` and
  :meth:`~WriteExecutor.finish` (R46). Its decisions are the pure core's (:mod:`loopspec.core.writes`).

Crash points (``writes.toml [[crash_point]]``): when the environment variable ``LOOPSPEC_CRASH_AT``
names one, the process kills itself with SIGKILL the first time it gets there — what the crash tests
use (tests/test_oplog_crash.py); ``crash_hook`` replaces that in process. ``after-lookup`` is in every
reconciliation that asks the external system (a request's, the recovery's, the end of the run's): the
lookup has been asked, its answer is not recorded.

The executor carries out the correct policy and the broken variants of ``writes.toml`` but one:
``failed-before-lookup`` records W07 before its lookup answers and then overwrites it with the answer
(`failed → confirmed`, `failed → unknown`), which are not transitions of the machine this ledger enforces
in every transaction (R40); the model checker and ``examples/python --bug failed-before-lookup`` carry it.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..core import writes as w
from ..core.ledger import digest

__all__ = [
    "MemoryOperationLedger",
    "OpRecord",
    "OperationLedger",
    "Rejected",
    "SQLiteOperationLedger",
    "WriteExecutor",
    "WriteHandler",
]

CRASH_ENV = "LOOPSPEC_CRASH_AT"


class Rejected(Exception):
    """Raised by a write's ``send`` when the external system answered definitely that it did not apply
    the write (R41); ``category`` (R17) is the answer's code. Any other exception from ``send`` is an
    unknown outcome."""

    def __init__(self, category: str = "INTERNAL_ERROR") -> None:
        super().__init__(category)
        self.category = category


@dataclass(frozen=True, slots=True)
class OpRecord:
    key: str
    tool: str
    principal: str
    run_id: str
    call_id: str
    arguments: str  # digest (R27: secrets stay out of the ledger)
    state: str
    result: Any = None
    attempts: int = 0  # intents recorded (W01)
    dispatches: int = 0  # dispatch marks recorded (W02): what budgets count (R45)


class OperationLedger(Protocol):
    def get(self, key: str) -> OpRecord | None: ...

    def transition(self, key: str, name: str, *, run_id: str, intent: Mapping[str, str] | None = None,
                   result: Any = None) -> OpRecord: ...

    def operations(self, run_id: str | None = None) -> list[OpRecord]: ...

    def dispatches(self, run_id: str) -> int:
        """The dispatch marks (W02) recorded by run ``run_id``: what its budget has spent (R45)."""
        ...

    def answer(self, run_id: str, index: int) -> Any: ...

    def record_answer(self, run_id: str, index: int, call_id: str, answer: Any) -> None: ...

    def close(self) -> None: ...


def _next(rec: OpRecord | None, key: str, name: str, run_id: str, intent: Mapping[str, str] | None,
          result: Any) -> OpRecord:
    """The record after transition ``name`` (:class:`~loopspec.core.writes.OpError` when the machine forbids it)."""
    state = rec.state if rec is not None else "absent"
    dest = w.op_step(state, name)
    if name == "record_intent":
        if intent is None:
            raise ValueError("record_intent needs the intent")
        return OpRecord(key, intent["tool"], intent["principal"], run_id, intent["call_id"], intent["arguments"], dest,
                        None, (rec.attempts if rec else 0) + 1, rec.dispatches if rec else 0)
    assert rec is not None
    return OpRecord(rec.key, rec.tool, rec.principal, rec.run_id, rec.call_id, rec.arguments, dest,
                    result if name in ("confirm", "reconcile_applied") else rec.result, rec.attempts,
                    rec.dispatches + (name == "mark_dispatched"))


class MemoryOperationLedger:
    """The in-memory ledger (tests): the same checks, nothing survives the process."""

    def __init__(self) -> None:
        self._ops: dict[str, OpRecord] = {}
        self._answers: dict[tuple[str, int], Any] = {}
        self._lock = threading.Lock()
        self.log: list[tuple[str, str, str]] = []  # (key, transition, run id)

    def get(self, key: str) -> OpRecord | None:
        return self._ops.get(key)

    def transition(self, key: str, name: str, *, run_id: str, intent: Mapping[str, str] | None = None,
                   result: Any = None) -> OpRecord:
        with self._lock:
            rec = _next(self._ops.get(key), key, name, run_id, intent, result)
            self._ops[key] = rec
            self.log.append((key, name, run_id))
            return rec

    def operations(self, run_id: str | None = None) -> list[OpRecord]:
        return [r for r in self._ops.values() if run_id is None or r.run_id == run_id]

    def dispatches(self, run_id: str) -> int:
        with self._lock:
            return sum(1 for _k, name, run in self.log if name == "mark_dispatched" and run == run_id)

    def answer(self, run_id: str, index: int) -> Any:
        return self._answers.get((run_id, index))

    def record_answer(self, run_id: str, index: int, call_id: str, answer: Any) -> None:
        self._answers.setdefault((run_id, index), answer)

    def close(self) -> None:
        pass


_SCHEMA = """
CREATE TABLE IF NOT EXISTS operations (
  key TEXT PRIMARY KEY, tool TEXT NOT NULL, principal TEXT NOT NULL, run_id TEXT NOT NULL, call_id TEXT NOT NULL,
  arguments TEXT NOT NULL, state TEXT NOT NULL, result TEXT, attempts INTEGER NOT NULL, dispatches INTEGER NOT NULL,
  updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS transitions (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL, name TEXT NOT NULL, from_state TEXT NOT NULL,
  to_state TEXT NOT NULL, run_id TEXT NOT NULL, at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS answers (
  run_id TEXT NOT NULL, idx INTEGER NOT NULL, call_id TEXT NOT NULL, answer TEXT NOT NULL, PRIMARY KEY (run_id, idx));
CREATE INDEX IF NOT EXISTS operations_run ON operations (run_id);
"""


class SQLiteOperationLedger:
    """The operation ledger in one SQLite file: WAL, ``synchronous=FULL``, one ``BEGIN IMMEDIATE`` transaction
    per state change (the state is re-read inside it, so two processes on one file cannot both fire a
    transition from the same state)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._db = sqlite3.connect(self.path, isolation_level=None, timeout=30.0, check_same_thread=False)
        self._lock = threading.Lock()
        # Several workers may open one new file at once: switching it to WAL takes an exclusive lock for
        # which SQLite does not wait (busy timeout or not), so "database is locked" here is retried
        # within the connection's 30 s; the schema is created IF NOT EXISTS, so a retry is harmless.
        deadline = time.monotonic() + 30.0
        pause = 0.001
        while True:
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=FULL")
                self._db.executescript(_SCHEMA)
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    self._db.close()
                    raise
                time.sleep(pause)
                pause = min(pause * 2, 0.05)

    @staticmethod
    def _row(row: tuple[Any, ...] | None) -> OpRecord | None:
        if row is None:
            return None
        key, tool, principal, run_id, call_id, arguments, state, result, attempts, dispatches = row
        return OpRecord(key, tool, principal, run_id, call_id, arguments, state,
                        json.loads(result) if result is not None else None, attempts, dispatches)

    _COLS = "key, tool, principal, run_id, call_id, arguments, state, result, attempts, dispatches"

    def get(self, key: str) -> OpRecord | None:
        with self._lock:
            return self._row(self._db.execute(f"SELECT {self._COLS} FROM operations WHERE key = ?", (key,)).fetchone())

    def transition(self, key: str, name: str, *, run_id: str, intent: Mapping[str, str] | None = None,
                   result: Any = None) -> OpRecord:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                rec = self._row(self._db.execute(f"SELECT {self._COLS} FROM operations WHERE key = ?",
                                                 (key,)).fetchone())
                new = _next(rec, key, name, run_id, intent, result)
                self._db.execute(
                    f"INSERT OR REPLACE INTO operations ({self._COLS}, updated) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    (new.key, new.tool, new.principal, new.run_id, new.call_id, new.arguments, new.state,
                     json.dumps(new.result) if new.result is not None else None, new.attempts, new.dispatches,
                     time.time()))
                self._db.execute("INSERT INTO transitions (key, name, from_state, to_state, run_id, at) "
                                 "VALUES (?,?,?,?,?,?)",
                                 (key, name, rec.state if rec else "absent", new.state, run_id, time.time()))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            return new

    def operations(self, run_id: str | None = None) -> list[OpRecord]:
        with self._lock:
            q = f"SELECT {self._COLS} FROM operations" + (" WHERE run_id = ?" if run_id is not None else "") + " ORDER BY key"
            rows = self._db.execute(q, (run_id,) if run_id is not None else ()).fetchall()
        return [r for r in (self._row(x) for x in rows) if r is not None]

    def dispatches(self, run_id: str) -> int:
        with self._lock:
            row = self._db.execute("SELECT COUNT(*) FROM transitions WHERE name = 'mark_dispatched' AND run_id = ?",
                                   (run_id,)).fetchone()
        return int(row[0])

    def transitions(self, key: str | None = None) -> list[tuple[str, str, str, str]]:
        """The audit trail: (key, transition, from, to) in commit order."""
        with self._lock:
            q = "SELECT key, name, from_state, to_state FROM transitions" + (" WHERE key = ?" if key else "") + " ORDER BY seq"
            return list(self._db.execute(q, (key,) if key else ()).fetchall())

    def answer(self, run_id: str, index: int) -> Any:
        with self._lock:
            row = self._db.execute("SELECT answer FROM answers WHERE run_id = ? AND idx = ?", (run_id, index)).fetchone()
        return json.loads(row[0]) if row else None

    def record_answer(self, run_id: str, index: int, call_id: str, answer: Any) -> None:
        with self._lock:
            self._db.execute("INSERT OR IGNORE INTO answers (run_id, idx, call_id, answer) VALUES (?,?,?,?)",
                             (run_id, index, call_id, json.dumps(answer)))  # autocommit: one transaction

    def close(self) -> None:
        with self._lock:
            self._db.close()


@dataclass(frozen=True)
class WriteHandler:
    """A write tool as the executor needs it: its declaration, how to send it, and how to ask the external
    system about a key (``lookup(key, arguments) -> (applied: bool, result)``; raise when it cannot answer)."""

    tool: w.WriteTool
    send: Callable[[Mapping[str, Any], str], Any]  # (arguments, key) -> result; Rejected when not applied
    lookup: Callable[[str, Mapping[str, Any]], tuple[bool, Any]] | None = None
    input_schema: Mapping[str, Any] | None = None


_SEEN: dict[str, int] = {}


def _default_crash(point: str) -> None:
    """``LOOPSPEC_CRASH_AT=point`` (the first time) or ``point@N`` (the N-th time): SIGKILL this process."""
    want = os.environ.get(CRASH_ENV)
    if not want:
        return
    name, _, nth = want.partition("@")
    if name != point:
        return
    _SEEN[point] = _SEEN.get(point, 0) + 1
    if _SEEN[point] == (int(nth) if nth else 1):
        os.kill(os.getpid(), signal.SIGKILL)


@dataclass
class WriteExecutor:
    """Answers the requests of one run (``run_id``) for write tools through an operation ledger."""

    ledger: OperationLedger
    handlers: Mapping[str, WriteHandler]
    principal: str
    run_id: str
    budget: int = 16
    policy: w.Policy = w.CORRECT
    crash_hook: Callable[[str], None] = _default_crash
    #: seconds a request waits for another run's write of the same key in flight (R44) before it is
    #: answered OUTCOME_UNKNOWN
    wait: float = 5.0
    #: whether the latest :meth:`call` recorded a dispatch mark (what the loop's budgets charge, R45)
    marked: bool = False
    #: told of every transition this executor records, after its transaction commits: (request index or None,
    #: call id or None, tool, key, transition name, from state, the record after it) — the run ledger's
    #: ``write_recorded`` events (R27, R40)
    listener: Callable[[int | None, str | None, str, str, str, str, OpRecord], None] | None = None
    _args: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    _at: tuple[int | None, str | None] = (None, None)

    def __post_init__(self) -> None:
        problems = [p for h in self.handlers.values() for p in w.write_tool_problems(h.tool, h.input_schema)]
        if self.policy.failed_before_lookup:
            problems.append(f"the variant {self.policy.name} overwrites a recorded `failed` with a lookup's answer, "
                            "which no transition of writes.toml does: the operation ledger refuses it (R40)")
        if problems:
            raise ValueError("; ".join(problems))

    def _t(self, key: str, name: str, **kw: Any) -> OpRecord:
        """Record transition ``name`` of ``key`` (one transaction) and tell the listener."""
        if self.listener is None:
            return self.ledger.transition(key, name, run_id=self.run_id, **kw)
        before = self.ledger.get(key)
        rec = self.ledger.transition(key, name, run_id=self.run_id, **kw)
        self.listener(*self._at, rec.tool, key, name, before.state if before is not None else "absent", rec)
        return rec

    # -- keys and budget -------------------------------------------------------------------------

    def key(self, name: str, call_id: str, arguments: Mapping[str, Any]) -> str:
        h = self.handlers[name]
        if self.policy.key_by_call_id:
            return call_id  # the broken variant (R37)
        return w.idempotency_key(h.tool, arguments, self.principal, self.run_id)

    def dispatched(self) -> int:
        """What this run's budget has spent (R45): its dispatch marks, durable — not its sends, which a crash
        between the mark and the send hides (recovery cannot tell whether that send happened)."""
        return self.ledger.dispatches(self.run_id)

    # -- one request ------------------------------------------------------------------------------

    def call(self, index: int, call_id: str, name: str, arguments: Mapping[str, Any], *,
             reuse: bool = True) -> dict[str, Any]:
        """The answer to request ``index`` of the run: recorded once; after a restart the recorded one (when it
        answered the same call id). ``reuse=False``: decide again (a retry of the execution, R23)."""
        self.marked = False
        self._at = (index, call_id)
        try:
            return self._call(index, call_id, name, arguments, reuse)
        finally:
            self._at = (None, None)

    def _call(self, index: int, call_id: str, name: str, arguments: Mapping[str, Any], reuse: bool) -> dict[str, Any]:
        done = self.ledger.answer(self.run_id, index) if reuse else None
        if done is not None and done.get("id") == call_id:
            return dict(done)
        h = self.handlers[name]
        key = self.key(name, call_id, arguments)
        self._args[key] = arguments
        answer = self._decide(h, key, call_id, arguments)
        answer = {"id": call_id, **answer}
        self.ledger.record_answer(self.run_id, index, call_id, answer)
        self.crash_hook("after-answer")
        return answer

    def _decide(self, h: WriteHandler, key: str, call_id: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        deadline = time.monotonic() + self.wait
        while True:
            try:
                return self._decide_once(h, key, call_id, arguments, deadline)
            except w.OpError:
                # another worker on the same ledger changed the key between our read and our transaction:
                # read again (R44: its write is in flight, or done)
                if time.monotonic() > deadline:
                    return {"status": "error", "code": w.OUTCOME_UNKNOWN}

    def _decide_once(self, h: WriteHandler, key: str, call_id: str, arguments: Mapping[str, Any],
                     deadline: float) -> dict[str, Any]:
        for _ in range(4):  # at most: wait for another run, reconcile, then a new attempt
            rec = self.ledger.get(key)
            state = rec.state if rec else "absent"
            action = w.on_request(state, h.tool.reconcile, self.policy,
                                  other_run=rec is not None and rec.run_id != self.run_id)
            if action == "wait_in_flight":
                while time.monotonic() < deadline:
                    time.sleep(0.01)
                    now = self.ledger.get(key)
                    if now is None or now.state not in ("intent", "dispatched") or now.run_id == self.run_id:
                        break
                else:  # still in flight: its outcome is not known to this run, nothing is sent or recorded
                    return {"status": "error", "code": w.OUTCOME_UNKNOWN}
                continue
            if action == "replay":
                assert rec is not None
                self._t(key, "replay")
                return {"status": "ok", "output": rec.result}
            if action == "answer_unknown":
                if state == "dispatched":
                    self._t(key, "lose_outcome")
                return {"status": "error", "code": w.OUTCOME_UNKNOWN}
            if action == "reconcile":
                if state == "dispatched":
                    self._t(key, "lose_outcome")
                if self._reconcile(h, key, arguments) == "unknown":
                    return {"status": "error", "code": w.OUTCOME_UNKNOWN}
                continue
            if action == "dispatch":
                if self.dispatched() >= self.budget:
                    return {"status": "error", "code": "BUDGET_EXHAUSTED"}
                if state in ("unknown", "dispatched"):  # only the retry-without-lookup variant gets here
                    self._t(key, "reconcile_not_applied" if state == "unknown" else "reject")
                self._t(key, "record_intent", intent={
                    "tool": h.tool.name, "principal": self.principal, "call_id": call_id,
                    "arguments": digest(dict(arguments)) or ""})
                self.crash_hook("after-intent")
            return self._dispatch(h, key, arguments)
        raise w.OpError("a request decided more than three times")  # another worker keeps changing the key

    def _dispatch(self, h: WriteHandler, key: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        if not self.policy.record_after_dispatch:
            self._t(key, "mark_dispatched")
            self.marked = True
            self.crash_hook("after-dispatch-mark")
        try:
            output = h.send(arguments, key)
            response: w.Response = "applied"
            category = ""
        except Rejected as exc:
            output, response, category = None, "rejected", exc.category
        except Exception:  # a timeout, a lost connection, anything that does not say (R41)
            output, response, category = None, "lost", ""
        self.crash_hook("after-send")
        if self.policy.record_after_dispatch:
            self._t(key, "mark_dispatched")
            self.marked = True
        t = w.on_response(response, self.policy)
        self._t(key, t, result=output)
        self.crash_hook("after-result")
        if t == "confirm":
            return {"status": "ok", "output": output}
        if t == "reject":
            return {"status": "error", "code": category or "INTERNAL_ERROR"}
        return {"status": "error", "code": w.OUTCOME_UNKNOWN}

    def _reconcile(self, h: WriteHandler, key: str, arguments: Mapping[str, Any] | None) -> str:
        """One lookup of an unknown key (R43): its state afterwards."""
        if h.lookup is None or h.tool.reconcile == "none":
            self._t(key, "reconcile_unavailable")
            return "unknown"
        try:
            applied, result = h.lookup(key, arguments or {})
        except Exception:
            self.crash_hook("after-lookup")
            self._t(key, "reconcile_unavailable")
            return "unknown"
        self.crash_hook("after-lookup")  # asked, the answer not recorded: the key is still unknown (R43)
        rec = self._t(key, "reconcile_applied" if applied else "reconcile_not_applied", result=result)
        return rec.state

    # -- recovery and the end of the run ----------------------------------------------------------------

    def resume(self) -> list[OpRecord]:
        """After a restart (R46): every dispatch mark without a result becomes unknown, and every unknown
        operation of the run is reconciled, before anything else. Returns the operations still unknown."""
        for rec in self.ledger.operations(self.run_id):
            t = w.on_recovery(rec.state, self.policy)
            if t is not None:
                self._t(rec.key, t)
        return self._reconcile_all()

    def _reconcile_all(self) -> list[OpRecord]:
        if self.policy.retry_without_lookup:
            return [r for r in self.ledger.operations(self.run_id) if r.state == "unknown"]
        for rec in self.ledger.operations(self.run_id):
            if rec.state == "unknown" and rec.tool in self.handlers:
                self._reconcile(self.handlers[rec.tool], rec.key, self._args.get(rec.key))
        return [r for r in self.ledger.operations(self.run_id) if r.state == "unknown"]

    def finish(self) -> dict[str, Any]:
        """The end of the run (R46): reconcile what is unknown; COMPLETED only when nothing is; otherwise
        TRUNCATED with stop reason UNRECONCILED and the unknown keys listed. An intent never sent is abandoned."""
        for rec in self.ledger.operations(self.run_id):
            if rec.state == "intent":
                self._t(rec.key, "abandon_intent")
        unknown = self._reconcile_all()
        if unknown:
            return {"status": "TRUNCATED", "stopReason": "UNRECONCILED", "unreconciled": sorted(r.key for r in unknown)}
        return {"status": "COMPLETED", "stopReason": None, "unreconciled": []}
