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

import contextlib
import json
import os
import signal
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..core import writes as w
from ..core.ledger import digest
from ..core.rules import canonical_json
from .base import EngineError

__all__ = [
    "LedgerFailure",
    "LedgerNotFound",
    "MemoryOperationLedger",
    "OpRecord",
    "OperationLedger",
    "Rejected",
    "SQLiteOperationLedger",
    "WriteExecutor",
    "WriteHandler",
]

CRASH_ENV = "LOOPSPEC_CRASH_AT"


class LedgerNotFound(EngineError):
    """An operation ledger opened to continue a run (``create=False``, :func:`~loopspec.resume`) is not there: the
    path does not exist or is empty, the file or database has no ledger tables, or the run is not in it. Nothing
    was created and nothing was sent."""


class LedgerFailure(RuntimeError):
    """The operation ledger failed while the executor read it or recorded a transition: the disk is full, the file
    is read-only, a lock was held past the timeout, the connection was lost. What failed is not recorded (R40);
    the executor answers from the last state it knows was recorded (see :meth:`WriteExecutor.call`)."""


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
        self._runs: set[str] = set()
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

    def record_run(self, run_id: str) -> None:
        with self._lock:
            self._runs.add(run_id)

    def holds_run(self, run_id: str) -> bool:
        with self._lock:
            return run_id in self._runs or any(run == run_id for _k, _n, run in self.log) \
                or any(r == run_id for r, _i in self._answers)

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
CREATE TABLE IF NOT EXISTS runs (run_id TEXT PRIMARY KEY, started REAL NOT NULL);
CREATE INDEX IF NOT EXISTS operations_run ON operations (run_id);
"""


class SQLiteOperationLedger:
    """The operation ledger in one SQLite file: WAL, ``synchronous=FULL``, one ``BEGIN IMMEDIATE`` transaction
    per state change (the state is re-read inside it, so two processes on one file cannot both fire a
    transition from the same state).

    ``timeout`` is how long a transaction waits for another connection's lock before it fails ("database is
    locked": the executor takes that as the ledger failing, R40). ``create=False`` opens an existing ledger
    only — what :func:`~loopspec.resume` does: a path that does not exist, the empty path, or a file without
    the ledger's tables is refused (:class:`LedgerNotFound`) and nothing is created."""

    def __init__(self, path: str | Path, *, timeout: float = 30.0, create: bool = True) -> None:
        self.path = str(path)
        if not self.path:
            raise LedgerNotFound("the operation ledger's path is empty: SQLite would keep it in a temporary file "
                                 "that disappears (give the path of its file)")
        if create:
            self._db = sqlite3.connect(self.path, isolation_level=None, timeout=timeout, check_same_thread=False)
        else:
            if self.path == ":memory:" or not os.path.isfile(self.path):
                raise LedgerNotFound(f"{self.path}: no operation ledger there (resume opens an existing one and "
                                     "creates nothing)")
            uri = "file:" + urllib.parse.quote(os.path.abspath(self.path)) + "?mode=rw"
            try:
                self._db = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=timeout,
                                           check_same_thread=False)
            except sqlite3.Error as exc:
                raise LedgerNotFound(f"{self.path}: cannot open the operation ledger ({exc})") from exc
        self._lock = threading.Lock()
        # Several workers may open one new file at once: switching it to WAL takes an exclusive lock for
        # which SQLite does not wait (busy timeout or not), so "database is locked" here is retried
        # within the connection's timeout; the schema is created IF NOT EXISTS, so a retry is harmless.
        deadline = time.monotonic() + timeout
        pause = 0.001
        while True:
            try:
                if not create:
                    self._require_tables()
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=FULL")
                if create:
                    self._db.executescript("BEGIN;" + _SCHEMA + "COMMIT;")  # one transaction: one sync
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    self._db.close()
                    raise
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                time.sleep(pause)
                pause = min(pause * 2, 0.05)
            except BaseException:
                self._db.close()
                raise

    def _require_tables(self) -> None:
        try:
            names = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.DatabaseError as exc:
            if "locked" in str(exc):
                raise
            raise LedgerNotFound(f"{self.path}: not an operation ledger ({exc})") from exc
        missing = {"operations", "transitions", "answers"} - names
        if missing:
            raise LedgerNotFound(f"{self.path}: not an operation ledger (no table {', '.join(sorted(missing))})")

    def record_run(self, run_id: str) -> None:
        """Record that run ``run_id`` started with this ledger (before its first request: what :meth:`holds_run`
        finds for a run that crashed before its first write)."""
        with self._lock:
            self._db.execute("INSERT OR IGNORE INTO runs (run_id, started) VALUES (?, ?)", (run_id, time.time()))

    def holds_run(self, run_id: str) -> bool:
        """Did run ``run_id`` start with this ledger, or record anything in it (a transition, an answer)?"""
        with self._lock:
            row = self._db.execute("SELECT EXISTS (SELECT 1 FROM transitions WHERE run_id = ?) "
                                   "OR EXISTS (SELECT 1 FROM answers WHERE run_id = ?)", (run_id, run_id)).fetchone()
            if row[0]:
                return True
            try:  # a ledger made before the runs table existed has none
                row = self._db.execute("SELECT EXISTS (SELECT 1 FROM runs WHERE run_id = ?)", (run_id,)).fetchone()
            except sqlite3.OperationalError:
                return False
        return bool(row[0])

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
            self._db.execute("BEGIN IMMEDIATE")  # "database is locked" past the timeout: nothing begun
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
                self._rollback()
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

    def _rollback(self) -> None:
        """After a failed statement or COMMIT (disk full, I/O error): leave no transaction open, so that the next
        transition can begin once the fault is gone (SQLite may have rolled it back already)."""
        if self._db.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")

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


_UNSETTLED = frozenset({"dispatched", "unknown"})  # states whose write may have happened, unknown to the run


@dataclass
class WriteExecutor:
    """Answers the requests of one run (``run_id``) for write tools through an operation ledger.

    When the ledger itself fails (:class:`LedgerFailure`: disk full, read-only, a lock held past the timeout, a
    lost connection), what failed is not recorded, and a request is answered from the last state of its key this
    executor knows was recorded (SPEC.md R40): ``dispatched``, ``unknown`` or not known at all — the write may have
    happened — ``OUTCOME_UNKNOWN``, the key listed unreconciled until a reconciliation records its outcome;
    ``confirmed`` — the recorded result; otherwise nothing was sent — ``DEPENDENCY_TEMPORARY``. A request's answer
    that cannot be recorded is still given (a restart decides the request again from its key's state)."""

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
    #: told of every transition the ledger failed to record: (request index or None, call id or None, tool, key,
    #: transition name, the state it was tried from) — the run ledger's ``write_failed`` events (R40)
    failure_listener: Callable[[int | None, str | None, str, str, str, str], None] | None = None
    _args: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    _tools: dict[str, str] = field(default_factory=dict)  # key -> its tool
    _at: tuple[int | None, str | None] = (None, None)
    #: key -> (state, result) as this executor last read or recorded it, for the keys of this run
    _known: dict[str, tuple[str, Any]] = field(default_factory=dict)
    #: keys whose outcome this executor cannot vouch for: the ledger failed while the write may have happened
    _unsure: set[str] = field(default_factory=set)
    #: keys a :meth:`call` is deciding right now (another thread may end the run meanwhile: a cancelled run)
    _busy: set[str] = field(default_factory=set)
    _seen: tuple[str, Any] | None = None  # the current request's key as last read or recorded
    _mu: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        problems = [p for h in self.handlers.values() for p in w.write_tool_problems(h.tool, h.input_schema)]
        if self.policy.failed_before_lookup:
            problems.append(f"the variant {self.policy.name} overwrites a recorded `failed` with a lookup's answer, "
                            "which no transition of writes.toml does: the operation ledger refuses it (R40)")
        if problems:
            raise ValueError("; ".join(problems))

    # -- the ledger, its failures told apart from the machine's refusals ---------------------------------

    def _read(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except w.OpError:
            raise
        except Exception as exc:
            raise LedgerFailure(f"the operation ledger failed to {what}: {type(exc).__name__}: {exc}") from exc

    def _get(self, key: str) -> OpRecord | None:
        rec: OpRecord | None = self._read("read a key", self.ledger.get, key)
        return rec

    def _t(self, key: str, name: str, **kw: Any) -> OpRecord:
        """Record transition ``name`` of ``key`` (one transaction) and tell the listener — or, when the ledger fails
        to record it, the failure listener."""
        before: OpRecord | None = None
        try:
            before = self._get(key) if self.listener is not None else None
            rec: OpRecord = self._read(f"record {name}",
                                       lambda: self.ledger.transition(key, name, run_id=self.run_id, **kw))
        except LedgerFailure:
            if self.failure_listener is not None:
                frm = before.state if before is not None else self._known.get(key, ("absent", None))[0]
                self.failure_listener(*self._at, self._tools.get(key, ""), key, name, frm)
            raise
        self._tools[key] = rec.tool
        self._note(rec)
        if self.listener is not None:
            self.listener(*self._at, rec.tool, key, name, before.state if before is not None else "absent", rec)
        return rec

    def _note(self, rec: OpRecord | None, key: str | None = None) -> None:
        """What this executor now knows of a key (read or recorded)."""
        if rec is None:
            if key is not None and self._seen_key == key:
                self._seen = ("absent", None)
            return
        if rec.run_id == self.run_id or rec.key in self._known:
            self._known[rec.key] = (rec.state, rec.result)
            if rec.state not in _UNSETTLED:
                self._unsure.discard(rec.key)
        if self._seen_key == rec.key:
            self._seen = (rec.state, rec.result)

    _seen_key: str | None = None

    # -- keys and budget -------------------------------------------------------------------------

    def key(self, name: str, call_id: str, arguments: Mapping[str, Any]) -> str:
        h = self.handlers[name]
        if self.policy.key_by_call_id:
            return call_id  # the broken variant (R37)
        return w.idempotency_key(h.tool, arguments, self.principal, self.run_id)

    def dispatched(self) -> int:
        """What this run's budget has spent (R45): its dispatch marks, durable — not its sends, which a crash
        between the mark and the send hides (recovery cannot tell whether that send happened)."""
        n: int = self._read("count the run's dispatch marks", self.ledger.dispatches, self.run_id)
        return n

    # -- one request ------------------------------------------------------------------------------

    def call(self, index: int, call_id: str, name: str, arguments: Mapping[str, Any], *,
             reuse: bool = True) -> dict[str, Any]:
        """The answer to request ``index`` of the run: recorded once; after a restart the recorded one (when it
        answered the same call id). ``reuse=False``: decide again (a retry of the execution, R23)."""
        self.marked = False
        self._at = (index, call_id)
        key = self.key(name, call_id, arguments)
        self._tools[key] = name
        known = self._known.get(key)
        self._seen_key, self._seen = key, known if known is not None and known[0] == "confirmed" else None
        with self._mu:
            self._busy.add(key)
        try:
            return self._call(index, call_id, name, key, arguments, reuse)
        finally:
            with self._mu:
                self._busy.discard(key)
            self._at = (None, None)
            self._seen_key = None

    def _call(self, index: int, call_id: str, name: str, key: str, arguments: Mapping[str, Any],
              reuse: bool) -> dict[str, Any]:
        try:
            done = self._read("read the request's recorded answer", self.ledger.answer, self.run_id, index) \
                if reuse else None
            if done is not None and done.get("id") == call_id:
                return dict(done)
            h = self.handlers[name]
            self._args[key] = arguments
            answer = {"id": call_id, **self._decide(h, key, call_id, arguments)}
        except LedgerFailure:
            answer = {"id": call_id, **self._answer_after_failure(key)}
        try:
            self.ledger.record_answer(self.run_id, index, call_id, answer)
        except w.OpError:
            raise
        except Exception:  # not recorded: after a restart the request is decided again from its key (R44)
            pass
        self.crash_hook("after-answer")
        return answer

    def _answer_after_failure(self, key: str) -> dict[str, Any]:
        """The answer when the ledger failed while the request was decided: from the key's last state this
        executor knows was recorded (SPEC.md R40, "When the operation ledger fails"). A key this run never recorded
        (not read at its restart, not recorded since) was not sent by it: when the ledger cannot say more, nothing
        was sent for the request."""
        own = self._known.get(key)
        seen = self._seen if self._seen is not None else own
        if seen is not None and seen[0] == "confirmed":
            return {"status": "ok", "output": seen[1]}
        if seen is not None and seen[0] in _UNSETTLED:
            if own is not None:
                with self._mu:
                    self._unsure.add(key)
            return {"status": "error", "code": w.OUTCOME_UNKNOWN}
        return {"status": "error", "code": "DEPENDENCY_TEMPORARY"}  # nothing was sent for it by this request

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
            rec = self._get(key)
            self._note(rec, key)
            state = rec.state if rec else "absent"
            other = rec is not None and rec.run_id != self.run_id
            action = w.on_request(state, h.tool.reconcile, self.policy, other_run=other)
            if action == "wait_in_flight":
                while time.monotonic() < deadline:
                    time.sleep(0.01)
                    now = self._get(key)
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
        else:
            self._seen = ("dispatched", None)  # sent before its mark: unsettled from here on
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

    def _lookup(self, h: WriteHandler, key: str, arguments: Mapping[str, Any]) -> tuple[bool, Any] | None:
        """Ask the external system about ``key`` (R38): ``(applied, result)``, or None when it gave no answer —
        it raised, it did not answer within the write's ``lookup_timeout``, or what it answered is not an
        answer (not ``(True|False, JSON)``): each is unavailable (W08), never taken for a fact."""
        assert h.lookup is not None
        lookup = h.lookup
        limit = h.tool.lookup_timeout
        if limit is None:
            try:
                got: Any = lookup(key, arguments)
            except Exception:
                return None
        else:
            box: list[Any] = []

            def ask() -> None:
                try:
                    box.append(lookup(key, arguments))
                except BaseException:  # unavailable, whatever it was
                    box.append(None)

            t = threading.Thread(target=ask, name=f"loopspec-lookup-{h.tool.name}", daemon=True)
            t.start()
            t.join(limit)
            if not box:  # still asking: abandoned, its answer (if one ever comes) is not recorded
                return None
            got = box[0]
        if not isinstance(got, tuple | list) or len(got) != 2 or not isinstance(got[0], bool):
            return None
        applied, result = got
        if canonical_json(result) is None:
            return None
        return applied, result

    def _reconcile(self, h: WriteHandler, key: str, arguments: Mapping[str, Any] | None) -> str:
        """One lookup of an unknown key (R43): its state afterwards."""
        if h.lookup is None or h.tool.reconcile == "none":
            self._t(key, "reconcile_unavailable")
            return "unknown"
        answer = self._lookup(h, key, arguments or {})
        self.crash_hook("after-lookup")  # asked, the answer not recorded: the key is still unknown (R43)
        if answer is None:
            self._t(key, "reconcile_unavailable")
            return "unknown"
        applied, result = answer
        rec = self._t(key, "reconcile_applied" if applied else "reconcile_not_applied", result=result)
        return rec.state

    # -- recovery and the end of the run ----------------------------------------------------------------

    def resume(self) -> list[OpRecord]:
        """After a restart (R46): every dispatch mark without a result becomes unknown, and every unknown
        operation of the run is reconciled, before anything else. Returns the operations still unknown.
        :class:`LedgerFailure` when the ledger fails meanwhile (nothing has been sent)."""
        for rec in self._read("list the run's operations", self.ledger.operations, self.run_id):
            self._note(rec)
            t = w.on_recovery(rec.state, self.policy)
            if t is not None:
                self._t(rec.key, t)
        return self._reconcile_all()

    def _reconcile_all(self) -> list[OpRecord]:
        ops: list[OpRecord] = self._read("list the run's operations", self.ledger.operations, self.run_id)
        if self.policy.retry_without_lookup:
            return [r for r in ops if r.state == "unknown"]
        for rec in ops:
            if rec.state == "unknown" and rec.tool in self.handlers:
                self._reconcile(self.handlers[rec.tool], rec.key, self._args.get(rec.key))
        left: list[OpRecord] = self._read("list the run's operations", self.ledger.operations, self.run_id)
        return [r for r in left if r.state == "unknown"]

    def finish(self) -> dict[str, Any]:
        """The end of the run (R46): an intent never sent is abandoned, a dispatch mark left without a result (its
        outcome could not be recorded, R40) becomes unknown, and every unknown operation is reconciled; COMPLETED
        only when none is left unknown; otherwise TRUNCATED with stop reason UNRECONCILED and the unknown keys
        listed. Each key is settled on its own: when the ledger fails for one (or cannot list the run's
        operations: then the keys as this executor last knew them), that key is listed — its write may have
        happened, or its intent is still recorded — and the others are settled all the same."""
        with self._mu:
            busy = set(self._busy)
        try:
            ops = self._read("list the run's operations", self.ledger.operations, self.run_id)
            for rec in ops:
                self._note(rec)
                self._tools[rec.key] = rec.tool
            states = {r.key: r.state for r in ops}
        except LedgerFailure:
            states = {k: st for k, (st, _r) in self._known.items()}
        left: set[str] = set()
        for key, st in sorted(states.items()):
            if key in busy:  # a write still running (a cancelled run): its outcome is not known
                if st in _UNSETTLED or st == "intent":
                    left.add(key)
                continue
            try:
                if st == "intent":
                    self._t(key, "abandon_intent")
                    continue
                if self.policy.retry_without_lookup:  # the variant neither loses nor reconciles at the end
                    if st == "unknown":
                        left.add(key)
                    continue
                if st == "dispatched":
                    self._t(key, "lose_outcome")
                    st = "unknown"
                if st == "unknown":
                    h = self.handlers.get(self._tools.get(key, ""))
                    if h is None or self._reconcile(h, key, self._args.get(key)) == "unknown":
                        left.add(key)
            except LedgerFailure:
                left.add(key)
        if left:
            return {"status": "TRUNCATED", "stopReason": "UNRECONCILED", "unreconciled": sorted(left)}
        return {"status": "COMPLETED", "stopReason": None, "unreconciled": []}
