"""A merchant's write tool against a real external system (its own SQLite file), for the crash tests.

Run as a script it is one process of a run: ``python merchant.py OPS REMOTE MODE`` resumes run ``run-1`` from
the operation ledger OPS, answers the three requests below (two of them the same order under different call
ids) and prints the answers and the outcome as JSON. ``LOOPSPEC_CRASH_AT`` makes it SIGKILL itself at a
crash point; ``MERCHANT_LOSE_FIRST=1`` makes the external system apply the first send and lose its answer.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loopspec.core.writes import WriteTool
from loopspec.engine.oplog import SQLiteOperationLedger, WriteExecutor, WriteHandler

SCHEMA = {"type": "object", "properties": {"order_ref": {"type": "string"}, "amount": {"type": "integer"}},
          "required": ["order_ref", "amount"], "additionalProperties": False}
REQUESTS = [("c1", "create_order", {"order_ref": "A-1", "amount": 5}),
            ("c2", "create_order", {"order_ref": "A-1", "amount": 5}),  # the model re-proposes it under a new id
            ("c3", "create_order", {"order_ref": "B-2", "amount": 7})]


class Remote:
    """The external system: applies orders; with MODE=record it keeps an idempotency record per key."""

    def __init__(self, path: str | Path, mode: str) -> None:
        self.path, self.mode = str(path), mode
        db = self._db()
        db.executescript("CREATE TABLE IF NOT EXISTS effects (seq INTEGER PRIMARY KEY, key TEXT, order_ref TEXT);"
                         "CREATE TABLE IF NOT EXISTS record (key TEXT PRIMARY KEY, result TEXT);"
                         "CREATE TABLE IF NOT EXISTS sends (seq INTEGER PRIMARY KEY, key TEXT);")
        db.close()

    def _db(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None, timeout=30.0)
        db.execute("PRAGMA journal_mode=WAL")
        return db

    def send(self, arguments: Mapping[str, Any], key: str) -> Any:
        db = self._db()
        try:
            db.execute("BEGIN IMMEDIATE")
            first_send = db.execute("SELECT COUNT(*) FROM sends").fetchone()[0] == 0
            db.execute("INSERT INTO sends (key) VALUES (?)", (key,))
            row = db.execute("SELECT result FROM record WHERE key = ?", (key,)).fetchone() if self.mode == "record" else None
            if row is not None:
                db.execute("COMMIT")
                return json.loads(row[0])
            n = db.execute("INSERT INTO effects (key, order_ref) VALUES (?, ?)", (key, arguments["order_ref"])).lastrowid
            result = {"order": arguments["order_ref"], "confirmation": n}
            db.execute("INSERT OR REPLACE INTO record (key, result) VALUES (?, ?)", (key, json.dumps(result)))
            db.execute("COMMIT")
        finally:
            db.close()
        if first_send and os.environ.get("MERCHANT_LOSE_FIRST") == "1":
            raise TimeoutError("the answer was lost")
        return result

    def lookup(self, key: str, arguments: Mapping[str, Any]) -> tuple[bool, Any]:
        db = self._db()
        try:
            row = db.execute("SELECT result FROM record WHERE key = ?", (key,)).fetchone()
        finally:
            db.close()
        return (True, json.loads(row[0])) if row else (False, None)

    def effects(self) -> dict[str, int]:
        db = self._db()
        try:
            return dict(db.execute("SELECT order_ref, COUNT(*) FROM effects GROUP BY order_ref").fetchall())
        finally:
            db.close()


def kills(point: str) -> list[str]:
    """The crash points at which successive processes of a run are killed to test ``point`` (``name`` or
    ``name@N``, LOOPSPEC_CRASH_AT). A process asks a lookup only for an outcome it does not know, so to be killed
    at ``after-lookup`` a run is first killed after its send; the next process's recovery looks the key up and is
    killed there, before the answer is recorded (``after-lookup@2``: the process after it too, at the same lookup
    asked again, R43)."""
    name, _, nth = point.partition("@")
    if name == "after-lookup":
        return ["after-send"] + ["after-lookup"] * (int(nth) if nth else 1)
    return [point]


def executor(ops: str | Path, remote: Remote, mode: str, **kw: Any) -> WriteExecutor:
    tool = WriteTool("create_order", ("order_ref",), reconcile=mode)  # type: ignore[arg-type]
    handler = WriteHandler(tool, remote.send, remote.lookup, SCHEMA)
    return WriteExecutor(SQLiteOperationLedger(ops), {"create_order": handler}, principal="merchant-7",
                         run_id="run-1", **kw)


def main(ops: str, remote_path: str, mode: str) -> None:
    ex = executor(ops, Remote(remote_path, mode), mode)
    ex.resume()
    answers = [ex.call(i, cid, name, args) for i, (cid, name, args) in enumerate(REQUESTS)]
    print(json.dumps({"answers": answers, "outcome": ex.finish()}))


if __name__ == "__main__":
    main(*sys.argv[1:4])
