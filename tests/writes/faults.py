"""Fault injection for the write path (issue 32), in the spirit of Jepsen and of SQLite's I/O-error tests.

A run of ``run_loop`` — order A, then A again under a new call id with order B, then the final answer — goes
through an operation ledger on SQLite or PostgreSQL. At one point where the engine talks to the ledger (a read,
the intent, the dispatch mark, the result, a replay, a lookup's result, the request's answer, the end of the run,
the recovery of a restart) or to the external system (the send, the lookup), one fault is injected:

* **crash** before or after the operation: the process is abandoned there (:class:`SimulatedCrash`, a
  ``BaseException`` that leaves the engine as SIGKILL would: what committed is durable, nothing else happens;
  tests/test_oplog_crash.py and tests/test_writes_loop.py kill real processes at the labelled crash points);
* **disk full** — SQLite: the process's file size limit (``RLIMIT_FSIZE``) set to the write-ahead log's size, so
  the next commit's write fails with ``EFBIG`` (SQLite: ``SQLITE_IOERR_WRITE``; a real full disk gives
  ``SQLITE_FULL``: :func:`full_tmpfs` shows the same outcome where a small tmpfs can be mounted); PostgreSQL:
  triggers that raise SQLSTATE 53100 ``disk_full`` in the server on every write of the ledger's tables;
* **busy** — another connection holds the write lock (SQLite ``BEGIN IMMEDIATE``; PostgreSQL ``LOCK TABLE ... IN
  EXCLUSIVE MODE``) past the ledger's timeout (``timeout=0.05``: "database is locked" / ``lock_timeout``);
* **read-only** — SQLite ``PRAGMA query_only`` on the ledger's connection (``SQLITE_READONLY``, what a file SQLite
  cannot write gives; root ignores file modes), PostgreSQL a read-only session (SQLSTATE 25006);
* **connection lost** (PostgreSQL) — the server ends the ledger's backend (``pg_terminate_backend``); until the
  restart, the database refuses connections (``ALLOW_CONNECTIONS false``);
* at the send: a **lost answer** (applied or not, then a timeout), a crash before or after the external system
  applied it; at the lookup: it **raises**, **hangs** past the write's ``lookup_timeout``, answers something that
  is **not an answer**, **lies** ("not applied" for an applied write: with a record, the re-send is deduplicated),
  or the process crashes once it has answered.

A ledger fault is **once** (that operation fails, the next one works) or **until restart** (everything after it
fails until the process ends). Then the faults are cleared and, when the process crashed or ended with writes
unreconciled, the run is resumed (``resume``) until it ends. :func:`run_cell` checks the spec's promises and
returns the problems it found (empty: none) with a one-line outcome for docs/writes.md's table.
"""

from __future__ import annotations

import contextlib
import io
import os
import resource
import signal
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loopspec import Ledger, Tool, WriteTool, resume, run_loop
from loopspec.core.rules import FAILURE_CATEGORIES
from loopspec.engine.oplog import LedgerFailure, LedgerNotFound

Json = Any

TIMEOUT = 0.05  # the ledger's lock timeout in the suite (busy past it fails)
LOOKUP_TIMEOUT = 0.2  # a lookup that hangs longer is unavailable
SCHEMA = {"type": "object", "properties": {"order_ref": {"type": "string"}, "amount": {"type": "integer"}},
          "required": ["order_ref", "amount"]}
ROUNDS = [[("c1", "A")], [("c2", "A"), ("c3", "B")]]

#: the points, in the order a request meets them (then the end of the run and a restart's recovery)
POINTS = ["start", "read-answer", "read-key", "intent", "mark", "send", "result", "replay", "lookup", "lookup-result",
          "answer", "end-of-run", "recovery"]
POINT_TEXT = {
    "start": "record the run's start", "read-answer": "read the request's recorded answer", "read-key": "read the key's state",
    "intent": "record the intent (W01)", "mark": "record the dispatch mark (W02)", "send": "the send",
    "result": "record the result (W03)", "replay": "record a replay (W09)", "lookup": "the lookup",
    "lookup-result": "record the lookup's answer (W06)", "answer": "record the request's answer",
    "end-of-run": "the end of the run (W05/W06/W10)", "recovery": "a restart's recovery (W05)",
}
LEDGER_POINTS = [p for p in POINTS if p not in ("send", "lookup")]
READS = ("read-answer", "read-key")
WRITE_FAULTS = ("disk-full", "busy", "read-only")
FAULT_TEXT = {
    "crash-before": "crash before it", "crash-after": "crash after it",
    "disk-full": "disk full", "busy": "busy past the timeout", "read-only": "read-only",
    "connection-lost": "connection lost",
    "crash-before-send": "crash before it is applied", "crash-after-send": "crash after it is applied",
    "lost-applied": "answer lost (applied)", "lost-not-applied": "answer lost (not applied)",
    "raises": "raises", "hangs": f"hangs (> lookup_timeout {LOOKUP_TIMEOUT} s)", "malformed": "answers no answer",
    "lies": "lies: not applied (record)", "crash-after-lookup": "crash after it answers",
}


class SimulatedCrash(BaseException):
    """The process dies here: nothing after it runs (what committed before is durable)."""


@dataclass(frozen=True)
class Cell:
    point: str
    fault: str
    persistent: bool = False

    @property
    def row(self) -> tuple[str, str]:
        fault = FAULT_TEXT[self.fault]
        if self.fault in WRITE_FAULTS or self.fault == "connection-lost":
            fault += " (until restart)" if self.persistent else " (once)"
        return POINT_TEXT[self.point], fault


def cells(backend: str) -> list[Cell]:
    """Every fault at every point it applies to, on ``backend`` (``sqlite`` or ``postgres``)."""
    ledger_faults = (*WRITE_FAULTS, "connection-lost") if backend == "postgres" else WRITE_FAULTS
    out: list[Cell] = []
    for p in POINTS:
        if p == "send":
            out += [Cell(p, f) for f in ("crash-before-send", "crash-after-send", "lost-applied", "lost-not-applied")]
            continue
        if p == "lookup":
            out += [Cell(p, f) for f in ("raises", "hangs", "malformed", "lies", "crash-after-lookup")]
            continue
        out += [Cell(p, "crash-before"), Cell(p, "crash-after")]
        for f in ledger_faults:
            if p in READS and f != "connection-lost":
                continue  # a read does not fail on a full disk, a lock held for writing or a read-only file
            if p in ("end-of-run", "recovery"):
                out.append(Cell(p, f, persistent=True))
            else:
                out += [Cell(p, f), Cell(p, f, persistent=True)]
    return out


def all_rows() -> list[tuple[str, str]]:
    seen: dict[tuple[str, str], None] = {}
    for c in cells("postgres") + cells("sqlite"):
        seen.setdefault(c.row, None)
    return sorted(seen, key=lambda r: ([POINT_TEXT[p] for p in POINTS].index(r[0]), _fault_order(r[1])))


def _fault_order(text: str) -> int:
    base = text.split(" (once)")[0].split(" (until restart)")[0]
    order = list(FAULT_TEXT.values())
    return order.index(base) * 2 + (" (until restart)" in text) if base in order else 999


# --------------------------------------------------------------------------------------------
# The external system
# --------------------------------------------------------------------------------------------

class World:
    """Orders applied by key; every applying send is an effect (``lookup``), or a record answers a repeated key
    with its first result (``record``). ``send_fault`` hits the first send of order A, ``lookup_fault`` the first
    lookup."""

    def __init__(self, mode: str = "lookup") -> None:
        self.mode = mode
        self.record: dict[str, Json] = {}
        self.sends: list[tuple[int, str, str]] = []  # (process, key, order)
        self.applied_in: dict[str, int] = {}  # key -> the process in which it was first applied
        self.effects: dict[str, int] = {}  # order -> effects
        self.process = 1
        self.send_fault: str | None = None
        self.lookup_fault: str | None = None
        self.release = threading.Event()  # what a hanging lookup waits for

    def send(self, args: dict[str, Json], ctx: Any) -> Json:
        key, order = ctx.idempotency_key, args["order_ref"]
        self.sends.append((self.process, key, order))
        fault = None
        if order == "A" and self.send_fault is not None:
            fault, self.send_fault = self.send_fault, None
        if fault == "crash-before-send":
            raise SimulatedCrash
        if fault == "lost-not-applied":
            raise TimeoutError("the answer was lost")
        if self.mode == "record" and key in self.record:
            return self.record[key]
        self.effects[order] = self.effects.get(order, 0) + 1
        self.applied_in.setdefault(key, self.process)
        self.record[key] = {"order": order, "n": sum(self.effects.values())}
        if fault == "crash-after-send":
            raise SimulatedCrash
        if fault == "lost-applied":
            raise TimeoutError("the answer was lost")
        return self.record[key]

    def lookup(self, key: str, arguments: Mapping[str, Json]) -> Any:
        fault, self.lookup_fault = self.lookup_fault, None
        if fault == "raises":
            raise ConnectionError("the lookup service is down")
        if fault == "hangs":
            self.release.wait(30)
            return key in self.record, self.record.get(key)
        if fault == "malformed":
            return "yes", self.record.get(key)
        if fault == "lies":
            return False, None
        answer = (key in self.record, self.record.get(key))
        if fault == "crash-after-lookup":
            raise SimulatedCrash
        return answer

    def tool(self, lookup_timeout: float | None) -> Tool:
        return Tool.define("create_order", self.send, SCHEMA, lookup=self.lookup,
                           write=WriteTool("create_order", ("order_ref",), reconcile=self.mode,  # type: ignore[arg-type]
                                           lookup_timeout=lookup_timeout))


# --------------------------------------------------------------------------------------------
# The ledgers and their faults
# --------------------------------------------------------------------------------------------

class Backend:
    """One cell's ledger (a fresh file or database), its real faults, and what it holds."""

    name = ""

    def open(self) -> Any:
        raise NotImplementedError

    def apply(self, fault: str, led: Any) -> None:
        raise NotImplementedError

    def clear(self, fault: str, led: Any) -> None:
        raise NotImplementedError

    def trail(self, run_id: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """The audit trail of the run's transitions and its recorded answers, in commit order."""
        raise NotImplementedError

    def states(self, run_id: str) -> dict[str, str]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class SQLiteBackend(Backend):
    name = "sqlite"

    def __init__(self, path: Path) -> None:
        self.path = path
        self._locker: sqlite3.Connection | None = None
        self._limit: tuple[int, int] | None = None

    def open(self) -> Any:
        from loopspec import SQLiteOperationLedger

        led = SQLiteOperationLedger(self.path, timeout=TIMEOUT)
        # the crashes here are the process's, not the machine's: what committed is in the OS's cache either way, so
        # the suite does without the fsync of every commit (tests/test_oplog_crash.py kills real processes with it)
        led._db.execute("PRAGMA synchronous = OFF")
        return led

    def apply(self, fault: str, led: Any) -> None:
        if fault == "busy":
            self._locker = sqlite3.connect(self.path, isolation_level=None)
            self._locker.execute("BEGIN IMMEDIATE")
        elif fault == "read-only":
            led._db.execute("PRAGMA query_only = ON")
        elif fault == "disk-full":
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of the signal's default (death)
            self._limit = resource.getrlimit(resource.RLIMIT_FSIZE)
            wal = Path(f"{self.path}-wal")
            size = max(wal.stat().st_size if wal.exists() else 0, 1)
            resource.setrlimit(resource.RLIMIT_FSIZE, (size, self._limit[1]))
        else:
            raise ValueError(fault)

    def clear(self, fault: str, led: Any) -> None:
        if fault == "busy" and self._locker is not None:
            self._locker.rollback()
            self._locker.close()
            self._locker = None
        elif fault == "read-only":
            with contextlib.suppress(sqlite3.Error):
                led._db.execute("PRAGMA query_only = OFF")
        elif fault == "disk-full" and self._limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, self._limit)
            self._limit = None

    def _db(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, isolation_level=None)

    def trail(self, run_id: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        db = self._db()
        try:
            t = db.execute("SELECT key, name, from_state, to_state FROM transitions WHERE run_id = ? ORDER BY seq",
                           (run_id,)).fetchall()
            a = db.execute("SELECT idx, call_id, answer FROM answers WHERE run_id = ? ORDER BY idx",
                           (run_id,)).fetchall()
            return t, a
        finally:
            db.close()

    def states(self, run_id: str) -> dict[str, str]:
        db = self._db()
        try:
            return dict(db.execute("SELECT key, state FROM operations WHERE run_id = ?", (run_id,)).fetchall())
        finally:
            db.close()


class PostgresBackend(Backend):
    """Every cell in one database (its own run id and principal, so its own keys); an admin connection of its own
    arms the faults and reads what the ledger holds."""

    name = "postgres"

    def __init__(self, server: str, db: str) -> None:
        from tests.pg_server import create_database

        self.server, self.db = server, db
        self.url = create_database(server, db)
        self._conn: Any = None
        self._locker: Any = None
        self.open().close()  # the tables, before any fault

    def _admin(self) -> Any:
        import psycopg

        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = psycopg.connect(self.server.format(db=self.db), autocommit=True)
        return self._conn

    def _root(self) -> Any:
        import psycopg

        return psycopg.connect(self.server.format(db="postgres"), autocommit=True)

    def open(self) -> Any:
        from loopspec.engine.oplog_pg import PostgresOperationLedger

        return PostgresOperationLedger(self.url, timeout=TIMEOUT)

    def apply(self, fault: str, led: Any) -> None:
        if fault == "busy":
            import psycopg

            self._locker = psycopg.connect(self.url, autocommit=True)
            self._locker.execute("BEGIN")
            self._locker.execute("LOCK TABLE loopspec_operations, loopspec_transitions, loopspec_answers, loopspec_runs "
                                 "IN EXCLUSIVE MODE")
        elif fault == "read-only":
            led._db.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
        elif fault == "disk-full":
            c = self._admin()
            c.execute("CREATE OR REPLACE FUNCTION loopspec_fault_full() RETURNS trigger AS $$ BEGIN "
                      "RAISE EXCEPTION 'could not extend file: No space left on device' USING ERRCODE = "
                      "'disk_full'; END $$ LANGUAGE plpgsql")
            for t in ("loopspec_operations", "loopspec_transitions", "loopspec_answers", "loopspec_runs"):
                c.execute(f"CREATE TRIGGER {t}_full BEFORE INSERT OR UPDATE ON {t} FOR EACH ROW "
                          "EXECUTE FUNCTION loopspec_fault_full()")
        elif fault == "connection-lost":
            self._admin().execute("SELECT pg_terminate_backend(%s)", (led._db.info.backend_pid,))
        elif fault == "connection-lost-persistent":
            if self._conn is not None:
                self._conn.close()  # ours goes too; it comes back with the database (clear)
            with self._root() as c:
                c.execute(f"ALTER DATABASE {self.db} ALLOW_CONNECTIONS false")
                c.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (self.db,))
        else:
            raise ValueError(fault)

    def clear(self, fault: str, led: Any) -> None:
        if fault == "busy" and self._locker is not None:
            self._locker.execute("ROLLBACK")
            self._locker.close()
            self._locker = None
        elif fault == "read-only":
            with contextlib.suppress(Exception):
                led._db.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE")
        elif fault == "disk-full":
            for t in ("loopspec_operations", "loopspec_transitions", "loopspec_answers", "loopspec_runs"):
                self._admin().execute(f"DROP TRIGGER IF EXISTS {t}_full ON {t}")
        elif fault == "connection-lost-persistent":
            with self._root() as c:
                c.execute(f"ALTER DATABASE {self.db} ALLOW_CONNECTIONS true")

    def trail(self, run_id: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        c = self._admin()
        t = c.execute("SELECT key, name, from_state, to_state FROM loopspec_transitions WHERE run_id = %s "
                      "ORDER BY seq", (run_id,)).fetchall()
        a = c.execute("SELECT idx, call_id, answer FROM loopspec_answers WHERE run_id = %s ORDER BY idx",
                      (run_id,)).fetchall()
        return [tuple(r) for r in t], [tuple(r) for r in a]

    def states(self, run_id: str) -> dict[str, str]:
        return dict(self._admin().execute("SELECT key, state FROM loopspec_operations WHERE run_id = %s",
                                          (run_id,)).fetchall())

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        with contextlib.suppress(Exception), self._root() as c:
            c.execute(f"DROP DATABASE IF EXISTS {self.db} WITH (FORCE)")


# --------------------------------------------------------------------------------------------
# The ledger the engine is given: the real one, with the fault at its point
# --------------------------------------------------------------------------------------------

_LABELS = {"record_intent": "intent", "mark_dispatched": "mark", "confirm": "result", "reject": "result",
           "lose_outcome": "result", "replay": "replay", "reconcile_applied": "lookup-result",
           "reconcile_not_applied": "lookup-result", "reconcile_unavailable": "lookup-result",
           "abandon_intent": "abandon"}
_WRITES = frozenset({"intent", "mark", "result", "replay", "lookup-result", "abandon", "answer", "start"})


class Injector:
    """Fires one cell's ledger fault at the first ledger operation of its point (``any`` write operation once
    :attr:`active` for the end of the run and the recovery)."""

    def __init__(self, backend: Backend, cell: Cell) -> None:
        self.backend, self.cell = backend, cell
        self.active = cell.point not in ("end-of-run", "recovery")
        self.fired = False
        self.applied: str | None = None
        self.snapshots: list[tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]] = []
        self.run_id = ""
        self.led: Any = None

    def _matches(self, label: str) -> bool:
        if not self.active or self.fired or self.cell.point in ("send", "lookup"):
            return False
        if self.cell.point in ("end-of-run", "recovery"):
            return label in _WRITES
        return label == self.cell.point

    def before(self, label: str) -> bool:
        if not self._matches(label):
            return False
        self.fired = True
        self.snapshots.append(self.backend.trail(self.run_id))  # what was recorded before the fault
        f = self.cell.fault
        if f == "crash-before":
            raise SimulatedCrash
        if f == "crash-after":
            return True
        self.applied = "connection-lost-persistent" if f == "connection-lost" and self.cell.persistent else f
        self.backend.apply(self.applied, self.led)
        return True

    def after(self) -> None:
        if self.cell.fault == "crash-after":
            self.snapshots.append(self.backend.trail(self.run_id))
            raise SimulatedCrash
        if not self.cell.persistent:
            self.clear()

    def clear(self) -> None:
        if self.applied is not None:
            self.backend.clear(self.applied, self.led)
            self.applied = None


class FaultyLedger:
    """An operation ledger object (what ``run_loop`` accepts) that calls the real one, with the injector around
    each operation."""

    def __init__(self, real: Any, inj: Injector) -> None:
        self.real, self.inj = real, inj
        inj.led = real

    def _call(self, label: str, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        fired = self.inj.before(label)
        try:
            return fn(*args, **kw)
        finally:
            if fired:
                self.inj.after()

    def get(self, key: str) -> Any:
        return self._call("read-key", self.real.get, key)

    def transition(self, key: str, name: str, **kw: Any) -> Any:
        return self._call(_LABELS[name], self.real.transition, key, name, **kw)

    def operations(self, run_id: str | None = None) -> Any:
        return self._call("operations", self.real.operations, run_id)

    def dispatches(self, run_id: str) -> Any:
        return self._call("dispatches", self.real.dispatches, run_id)

    def answer(self, run_id: str, index: int) -> Any:
        return self._call("read-answer", self.real.answer, run_id, index)

    def record_answer(self, run_id: str, index: int, call_id: str, answer: Any) -> None:
        self._call("answer", self.real.record_answer, run_id, index, call_id, answer)

    def holds_run(self, run_id: str) -> bool:
        return bool(self._call("holds", self.real.holds_run, run_id))

    def record_run(self, run_id: str) -> None:
        self._call("start", self.real.record_run, run_id)

    def close(self) -> None:
        self.real.close()


# --------------------------------------------------------------------------------------------
# One cell
# --------------------------------------------------------------------------------------------

@dataclass
class Process:
    kind: str  # "outcome", "crash", "refused"
    outcome: Any = None
    error: str = ""
    seconds: float = 0.0
    states: dict[str, str] = field(default_factory=dict)  # the ledger after it


@dataclass
class Result:
    cell: Cell
    backend: str
    processes: list[Process]
    problems: list[str]
    summary: str


def _model(on_final: Callable[[], None] | None) -> Callable[[Any], Json]:
    def model(turn: Any) -> Json:
        if turn.round > len(ROUNDS):
            if on_final is not None:
                on_final()
            return {"final": "done"}
        return [{"id": cid, "name": "create_order", "arguments": {"order_ref": ref, "amount": 1}}
                for cid, ref in ROUNDS[turn.round - 1]]
    return model


_SHORT = {"OUTCOME_UNKNOWN": "unknown", "DEPENDENCY_TEMPORARY": "temp"}


def _answers(out: Any) -> str:
    return "/".join(_SHORT.get(r.get("code"), r.get("code")) if r["status"] != "ok" else "ok" for r in out.results)


def _ending(p: Process, keys: Mapping[str, str], first: bool) -> str:
    if p.kind == "crash":
        return "crash"
    if p.kind == "refused":
        return ("run_loop" if first else "resume") + " refused (LedgerFailure)"
    out = p.outcome
    end = out.status if not out.unreconciled else f"{out.status}/{out.stop_reason} ({','.join(keys.get(k, '?') for k in out.unreconciled)})"
    return f"{_answers(out)}, {end}"


def run_cell(backend: Backend, cell: Cell, tag: str) -> Result:
    """Run ``cell`` on ``backend`` (a fresh ledger): the faulty process, then resumes until the run ends."""
    world = World("record" if cell.fault == "lies" else "lookup")
    scenario = {"lookup": "lost", "lookup-result": "lost", "end-of-run": "unavailable",
                "recovery": "crashed"}.get(cell.point, "plain")
    if scenario in ("lost", "unavailable"):
        world.send_fault = "lost-applied"
    if scenario == "unavailable":
        world.lookup_fault = "raises"
    if scenario == "crashed":
        world.send_fault = "crash-after-send"
    if cell.point == "send":
        world.send_fault = cell.fault
    if cell.point == "lookup":
        world.lookup_fault = cell.fault
    run_id, principal = f"run-{tag}", f"p-{tag}"
    streams: list[io.StringIO] = []  # the run ledger: one file until the run ends, a new one for a later resume
    inj = Injector(backend, cell)
    inj.run_id = run_id
    processes: list[Process] = []
    problems: list[str] = []
    timeout = LOOKUP_TIMEOUT if cell.fault == "hangs" else None  # a crash in the lookup runs in the engine's thread

    def one(n: int) -> Process:
        world.process = n
        real = backend.open()
        led = FaultyLedger(real, inj)
        arm = inj if (cell.point == "end-of-run" and n == 1) else None
        if cell.point == "recovery":
            inj.active = n == 2
        on_final = (lambda: setattr(arm, "active", True)) if arm is not None else None
        started = time.monotonic()
        if not streams or processes[-1].kind == "outcome":
            streams.append(io.StringIO())
        kw: dict[str, Any] = {"tools": [world.tool(timeout)], "operation_ledger": led, "ledger": Ledger(streams[-1]),
                              "principal": principal, "mode": "continue"}
        try:
            if n == 1:
                p = Process("outcome", run_loop(_model(on_final), run_id=run_id, **kw))
            else:
                try:
                    p = Process("outcome", resume(run_id, _model(None), **kw))
                except LedgerNotFound:  # the run never started with this ledger: start it (what a user does)
                    p = Process("outcome", run_loop(_model(None), run_id=run_id, **kw))
                    p.error = "started again"
        except SimulatedCrash:
            p = Process("crash")
        except LedgerFailure as exc:
            p = Process("refused", error=str(exc))
        except Exception as exc:  # anything else escaping the engine is a problem
            p = Process("refused", error=f"{type(exc).__name__}: {exc}")
            problems.append(f"process {n}: run_loop/resume raised {type(exc).__name__}: {exc}")
        finally:
            inj.clear()
            inj.active = False
            with contextlib.suppress(Exception):
                real.close()
        p.seconds = time.monotonic() - started
        p.states = backend.states(run_id)
        inj.snapshots.append(backend.trail(run_id))
        return p

    try:
        for n in range(1, 5):  # the faulty process, then resumes (faults cleared) until the run ends
            p = one(n)
            processes.append(p)
            if p.kind == "outcome" and (not p.outcome.unreconciled or n > 1):
                break
    finally:
        world.release.set()
    keys = {k: o for _p, k, o in world.sends}
    problems += check(cell, world, processes, inj, backend, run_id, [x.getvalue() for x in streams], keys)
    first = processes[0]
    summary = _ending(first, keys, True)
    for p in processes[1:]:
        how = "started again: " if p.error == "started again" else "resumed: " if p.kind == "outcome" else ""
        summary += " → " + how + _ending(p, keys, False)
    sends = {o: sum(1 for _p, _k, x in world.sends if x == o) for o in ("A", "B")}
    summary += f"; sent A×{sends['A']} B×{sends['B']}"
    return Result(cell, backend.name, processes, problems, summary)


def check(cell: Cell, world: World, processes: list[Process], inj: Injector, backend: Backend, run_id: str,
          streams: list[str], keys: Mapping[str, str]) -> list[str]:
    """The spec's promises after the cell (each a problem when broken)."""
    out: list[str] = []
    final_trail = backend.trail(run_id)
    # no key executed twice: a key is sent again only after the ledger recorded a definite "not applied"
    for key in set(keys):
        sends = sum(1 for _p, k, _o in world.sends if k == key)
        definite = sum(1 for k, name, _f, _t in final_trail[0] if k == key and name in ("reject",
                                                                                          "reconcile_not_applied"))
        if sends > 1 + definite:
            out.append(f"key {keys[key]} sent {sends} times with {definite} definite not-applied between")
    if any(n > 1 for n in world.effects.values()):
        out.append(f"a write took effect more than once: {world.effects}")
    # every process that answered: nothing unknown reported COMPLETED, every unknown key listed by key
    for n, p in enumerate(processes, start=1):
        if p.kind != "outcome":
            continue
        o = p.outcome
        unsettled = {k for k, st in p.states.items() if st in ("dispatched", "unknown")}
        listed = set(o.unreconciled)
        if o.status == "COMPLETED" and (unsettled or listed or any(st == "intent" for st in p.states.values())):
            out.append(f"process {n} COMPLETED with {sorted(p.states.items())} (listed {sorted(listed)})")
        if not unsettled <= listed:
            out.append(f"process {n} left {sorted(keys.get(k, k) for k in unsettled - listed)} unknown, unlisted")
        if not listed <= set(p.states) | set(keys):
            out.append(f"process {n} listed keys that are not the run's: {sorted(listed - set(p.states))}")
        for k, applied_in in world.applied_in.items():
            if applied_in <= n and o.status == "COMPLETED" and p.states.get(k) != "confirmed":
                out.append(f"process {n} COMPLETED but applied key {keys.get(k)} is {p.states.get(k)}")
        for r, (cid, ref) in zip(o.results, [c for rnd in ROUNDS for c in rnd], strict=False):
            code = r.get("code")
            key = next((k for k, o2 in keys.items() if o2 == ref), None)
            if code in FAILURE_CATEGORIES and key is not None and world.applied_in.get(key, 99) <= n:
                out.append(f"process {n}: {cid} ({ref}) answered {code} though the external system applied it")
        if p.seconds > 10:
            out.append(f"process {n} took {p.seconds:.1f} s")
    last = processes[-1]
    if last.kind != "outcome" or (last.outcome.unreconciled and len(processes) > 1):
        out.append(f"the run did not end after the faults were cleared: {last.kind} {last.error}")
    elif len(processes) > 1 and last.outcome.status != "COMPLETED":
        out.append(f"the resumed run ended {last.outcome.status}")
    # nothing recorded lost: each snapshot is a prefix of what the ledger holds in the end
    for t, a in inj.snapshots:
        if final_trail[0][:len(t)] != t or final_trail[1][:len(a)] != a:
            out.append("the ledger lost a transition or an answer it had recorded")
            break
    # the run ledger of all the processes conforms (loopspec check)
    from loopspec.oracle import read_text_input

    for k, text in enumerate(streams):
        if not text:
            continue  # a process refused before its first event
        res = read_text_input(text.encode())
        verdicts = [(r.verdict, r.violation.rule if r.violation else None,
                     next((ln for ln in r.violation.explanation.splitlines() if ln.startswith("  Then")), "")
                     if r.violation else "") for r in res.records]
        if [v[0] for v in verdicts] != ["conforms"]:
            out.append(f"loopspec check of run ledger file {k + 1}: {verdicts}")
    return out


# --------------------------------------------------------------------------------------------
# docs/writes.md's table
# --------------------------------------------------------------------------------------------

DOC = Path(__file__).resolve().parents[2] / "docs" / "writes.md"
BEGIN = "<!-- fault-table: generated by tests/test_writes_faults.py from its results; " \
        "python3 .ci/dev.py test tests/test_writes_faults.py --overwrite rewrites it -->"
END = "<!-- /fault-table -->"
COLUMNS = {"sqlite": "SQLite", "postgres": "PostgreSQL"}


def read_table(text: str) -> dict[tuple[str, str], dict[str, str]]:
    if BEGIN not in text or END not in text:
        return {}
    body = text.split(BEGIN, 1)[1].split(END, 1)[0]
    rows: dict[tuple[str, str], dict[str, str]] = {}
    for line in body.strip().splitlines()[2:]:
        cols = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cols) == 4:
            rows[(cols[0], cols[1])] = {"sqlite": cols[2], "postgres": cols[3]}
    return rows


def render_table(rows: Mapping[tuple[str, str], Mapping[str, str]]) -> str:
    lines = [BEGIN, "| point | fault | SQLite | PostgreSQL |", "|---|---|---|---|"]
    for r in all_rows():
        got = rows.get(r, {})
        lines.append(f"| {r[0]} | {r[1]} | {got.get('sqlite', '—')} | {got.get('postgres', '—')} |")
    lines.append(END)
    return "\n".join(lines)


def column(results: list[Result]) -> dict[tuple[str, str], str]:
    return {r.cell.row: r.summary for r in results}


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    import fcntl

    with open(str(path) + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    with contextlib.suppress(OSError):
        os.unlink(str(path) + ".lock")


def write_column(backend: str, col: Mapping[tuple[str, str], str]) -> None:
    """Put ``backend``'s column into docs/writes.md's table (the other column kept), atomically."""
    with _locked(DOC):
        text = DOC.read_text(encoding="utf-8")
        rows = read_table(text)
        for r in all_rows():
            rows.setdefault(r, {"sqlite": "—", "postgres": "—"})
            rows[r] = {**rows[r], backend: col.get(r, "—")}
        table = render_table(rows)
        if BEGIN in text:
            head, rest = text.split(BEGIN, 1)
            text = head + table + rest.split(END, 1)[1]
        else:
            raise AssertionError(f"{DOC} has no fault table markers ({BEGIN!r})")
        tmp = DOC.with_suffix(".md.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, DOC)


@contextlib.contextmanager
def full_tmpfs(size_kb: int = 256) -> Iterator[Path | None]:
    """A small tmpfs (root with CAP_SYS_ADMIN only): yields its mount point, or None where it cannot be mounted."""
    import subprocess
    import tempfile

    where = Path(tempfile.mkdtemp(prefix="lsfull"))
    ok = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(where)],
                        capture_output=True).returncode == 0 if os.geteuid() == 0 else False
    try:
        yield where if ok else None
    finally:
        if ok:
            subprocess.run(["umount", str(where)], capture_output=True)
        with contextlib.suppress(OSError):
            where.rmdir()


class FullDiskSQLite(SQLiteBackend):
    """SQLite on a small tmpfs (:func:`full_tmpfs`) whose disk-full fault is real: a file fills what is left of the
    filesystem, so the next commit fails with ENOSPC (``SQLITE_FULL``: "database or disk is full")."""

    def apply(self, fault: str, led: Any) -> None:
        if fault != "disk-full":
            super().apply(fault, led)
            return
        fd = os.open(self.path.parent / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            for size in (65536, 4096, 1):  # until not even a byte fits
                with contextlib.suppress(OSError):
                    while os.write(fd, b"\0" * size):
                        pass
        finally:
            os.close(fd)

    def clear(self, fault: str, led: Any) -> None:
        if fault != "disk-full":
            super().clear(fault, led)
            return
        with contextlib.suppress(OSError):
            (self.path.parent / "filler").unlink()
