"""The operation ledger of SPEC.md section 6 on a PostgreSQL server (psycopg 3; the optional extra ``postgres``):
for several workers, on several machines, sharing one ledger.

The same tables as :class:`~loopspec.engine.oplog.SQLiteOperationLedger`, the same checks (the machine of
``spec/writes.toml``, :func:`loopspec.engine.oplog._next`): each state change is one transaction that takes the
key's transaction-scoped advisory lock, reads the key's state inside it, and writes the new state and the
audit row — so two workers cannot both fire a transition from one state (the loser reads again, R44).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from typing import Any

from .oplog import LedgerNotFound, OpRecord, _next

__all__ = ["PostgresOperationLedger"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS loopspec_operations (
  key TEXT PRIMARY KEY, tool TEXT NOT NULL, principal TEXT NOT NULL, run_id TEXT NOT NULL, call_id TEXT NOT NULL,
  arguments TEXT NOT NULL, state TEXT NOT NULL, result TEXT, attempts INTEGER NOT NULL, dispatches INTEGER NOT NULL,
  updated DOUBLE PRECISION NOT NULL);
CREATE TABLE IF NOT EXISTS loopspec_transitions (
  seq BIGSERIAL PRIMARY KEY, key TEXT NOT NULL, name TEXT NOT NULL, from_state TEXT NOT NULL,
  to_state TEXT NOT NULL, run_id TEXT NOT NULL, at DOUBLE PRECISION NOT NULL);
CREATE TABLE IF NOT EXISTS loopspec_answers (
  run_id TEXT NOT NULL, idx INTEGER NOT NULL, call_id TEXT NOT NULL, answer TEXT NOT NULL, PRIMARY KEY (run_id, idx));
CREATE TABLE IF NOT EXISTS loopspec_runs (run_id TEXT PRIMARY KEY, started DOUBLE PRECISION NOT NULL);
CREATE INDEX IF NOT EXISTS loopspec_operations_run ON loopspec_operations (run_id);
CREATE INDEX IF NOT EXISTS loopspec_transitions_run ON loopspec_transitions (run_id, name);
"""

_COLS = "key, tool, principal, run_id, call_id, arguments, state, result, attempts, dispatches"


def _row(row: Any) -> OpRecord | None:
    if row is None:
        return None
    key, tool, principal, run_id, call_id, arguments, state, result, attempts, dispatches = row
    return OpRecord(key, tool, principal, run_id, call_id, arguments, state,
                    json.loads(result) if result is not None else None, attempts, dispatches)


class PostgresOperationLedger:
    """The operation ledger in a PostgreSQL database (``conninfo``: a libpq connection string or URL).

    ``timeout`` is the session's ``lock_timeout``: how long a transaction waits for another worker's lock on
    its key before it fails (the executor takes that as the ledger failing, R40). A connection the server or
    the network broke is opened again by the next operation (the one that failed is not recorded).
    ``create=False`` opens an existing ledger only (what :func:`~loopspec.resume` does): a database without the
    ledger's tables is refused (:class:`~loopspec.engine.oplog.LedgerNotFound`) and nothing is created."""

    def __init__(self, conninfo: str, *, timeout: float = 30.0, create: bool = True) -> None:
        try:
            import psycopg  # noqa: F401 - the extra is installed
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError("the PostgreSQL operation ledger needs psycopg 3: pip install 'loopspec[postgres]'") from exc
        self._conninfo = conninfo
        self._timeout = timeout
        self._closed = False
        self._lock = threading.Lock()
        self._db = self._connect()
        if not create:
            row = self._db.execute("SELECT to_regclass('loopspec_operations') IS NOT NULL AND "
                                   "to_regclass('loopspec_transitions') IS NOT NULL AND "
                                   "to_regclass('loopspec_answers') IS NOT NULL").fetchone()
            if not (row and row[0]):
                self._db.close()
                raise LedgerNotFound("the PostgreSQL database holds no operation ledger (no loopspec_* tables; resume "
                                     "opens an existing one and creates nothing)")
            return
        with self._db.transaction():
            self._db.execute("SELECT pg_advisory_xact_lock(20260)")  # two workers creating the tables at once
            for stmt in filter(None, (s.strip() for s in _SCHEMA.split(";"))):
                self._db.execute(stmt)

    def _connect(self) -> Any:
        import psycopg

        db = psycopg.connect(self._conninfo, autocommit=True)
        db.execute(f"SET lock_timeout = {max(1, int(self._timeout * 1000))}")
        return db

    def _conn(self) -> Any:
        """The connection, opened again when the server or the network broke it (not when :meth:`close` did)."""
        if not self._closed and (self._db.broken or self._db.closed):
            self._db = self._connect()
        return self._db

    def record_run(self, run_id: str) -> None:
        """Record that run ``run_id`` started with this ledger (before its first request)."""
        with self._lock:
            self._conn().execute("INSERT INTO loopspec_runs (run_id, started) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                                 (run_id, time.time()))

    def holds_run(self, run_id: str) -> bool:
        """Did run ``run_id`` start with this ledger, or record anything in it (a transition, an answer)?"""
        with self._lock:
            db = self._conn()
            row = db.execute("SELECT EXISTS (SELECT 1 FROM loopspec_transitions WHERE run_id = %s) OR "
                             "EXISTS (SELECT 1 FROM loopspec_answers WHERE run_id = %s), "
                             "to_regclass('loopspec_runs') IS NOT NULL", (run_id, run_id)).fetchone()
            if row is None or row[0] or not row[1]:  # a ledger made before loopspec_runs existed has none
                return bool(row and row[0])
            row = db.execute("SELECT EXISTS (SELECT 1 FROM loopspec_runs WHERE run_id = %s)", (run_id,)).fetchone()
        return bool(row and row[0])

    def get(self, key: str) -> OpRecord | None:
        with self._lock:
            return _row(self._conn().execute(f"SELECT {_COLS} FROM loopspec_operations WHERE key = %s", (key,)).fetchone())

    def transition(self, key: str, name: str, *, run_id: str, intent: Mapping[str, str] | None = None,
                   result: Any = None) -> OpRecord:
        with self._lock, self._conn().transaction():
            self._db.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (key,))
            rec = _row(self._db.execute(f"SELECT {_COLS} FROM loopspec_operations WHERE key = %s", (key,)).fetchone())
            new = _next(rec, key, name, run_id, intent, result)  # OpError: the transaction is rolled back
            self._db.execute(
                f"INSERT INTO loopspec_operations ({_COLS}, updated) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s) "
                "ON CONFLICT (key) DO UPDATE SET tool = EXCLUDED.tool, principal = EXCLUDED.principal, "
                "run_id = EXCLUDED.run_id, call_id = EXCLUDED.call_id, arguments = EXCLUDED.arguments, "
                "state = EXCLUDED.state, result = EXCLUDED.result, attempts = EXCLUDED.attempts, "
                "dispatches = EXCLUDED.dispatches, updated = EXCLUDED.updated",
                (new.key, new.tool, new.principal, new.run_id, new.call_id, new.arguments, new.state,
                 json.dumps(new.result) if new.result is not None else None, new.attempts, new.dispatches, time.time()))
            self._db.execute("INSERT INTO loopspec_transitions (key, name, from_state, to_state, run_id, at) "
                             "VALUES (%s,%s,%s,%s,%s,%s)",
                             (key, name, rec.state if rec else "absent", new.state, run_id, time.time()))
            return new

    def operations(self, run_id: str | None = None) -> list[OpRecord]:
        with self._lock:
            db = self._conn()
            if run_id is None:
                rows = db.execute(f"SELECT {_COLS} FROM loopspec_operations ORDER BY key").fetchall()
            else:
                rows = db.execute(f"SELECT {_COLS} FROM loopspec_operations WHERE run_id = %s ORDER BY key",
                                  (run_id,)).fetchall()
        return [r for r in (_row(x) for x in rows) if r is not None]

    def dispatches(self, run_id: str) -> int:
        with self._lock:
            row = self._conn().execute("SELECT COUNT(*) FROM loopspec_transitions WHERE name = 'mark_dispatched' "
                                       "AND run_id = %s", (run_id,)).fetchone()
        return int(row[0]) if row else 0

    def transitions(self, key: str | None = None) -> list[tuple[str, str, str, str]]:
        """The audit trail: (key, transition, from, to) in commit order."""
        with self._lock:
            q = "SELECT key, name, from_state, to_state FROM loopspec_transitions"
            db = self._conn()
            rows = (db.execute(q + " WHERE key = %s ORDER BY seq", (key,)) if key
                    else db.execute(q + " ORDER BY seq")).fetchall()
        return [tuple(r) for r in rows]  # type: ignore[misc]

    def answer(self, run_id: str, index: int) -> Any:
        with self._lock:
            row = self._conn().execute("SELECT answer FROM loopspec_answers WHERE run_id = %s AND idx = %s",
                                       (run_id, index)).fetchone()
        return json.loads(row[0]) if row else None

    def record_answer(self, run_id: str, index: int, call_id: str, answer: Any) -> None:
        with self._lock:
            self._conn().execute("INSERT INTO loopspec_answers (run_id, idx, call_id, answer) VALUES (%s,%s,%s,%s) "
                                 "ON CONFLICT DO NOTHING", (run_id, index, call_id, json.dumps(answer)))

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._db.close()
