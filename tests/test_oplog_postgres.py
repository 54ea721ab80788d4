"""The PostgreSQL operation ledger (SPEC.md section 6, the extra `postgres`) against a real server: a
throw-away cluster started with Debian's `initdb` / `pg_ctl` in a temporary directory (as the `postgres`
user when the tests run as root; tests/pg_server.py, one per test session: the fixture `pg_server` of
tests/conftest.py). Skipped, with the reason, when psycopg or the server binaries are missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from loopspec.core import writes as w
from loopspec.engine.oplog import CRASH_ENV, WriteExecutor, WriteHandler
from loopspec.engine.oplog_open import open_operation_ledger
from loopspec.spec.writes import load_write_spec

from .pg_server import create_database
from .writes.merchant import Remote, kills

pytestmark = pytest.mark.xdist_group("postgres")  # one worker starts the PostgreSQL cluster once (pytest-xdist)

psycopg = pytest.importorskip("psycopg", reason="psycopg 3 is not installed (pip install 'loopspec[postgres]')")

CHILD = Path(__file__).resolve().parent / "writes" / "loop_child.py"
POINTS = [c.id for c in load_write_spec().crash_points]
SCHEMA = {"type": "object", "properties": {"ref": {"type": "string"}}, "required": ["ref"]}


_n = iter(range(10**6))


@pytest.fixture
def url(pg_server: str) -> str:
    """A fresh database of the test's own (on the session's server, tests/conftest.py)."""
    return create_database(pg_server, f"t{os.getpid()}_{next(_n)}")


def test_R40_transitions_follow_the_machine_and_survive_the_connection(url: str) -> None:
    led = open_operation_ledger(url)
    intent = {"tool": "put", "principal": "p", "call_id": "c1", "arguments": "d"}
    led.transition("k", "record_intent", run_id="r", intent=intent)
    with pytest.raises(w.OpError):
        led.transition("k", "confirm", run_id="r")  # intent -> confirm is not a transition: rolled back
    led.transition("k", "mark_dispatched", run_id="r")
    led.record_answer("r", 0, "c1", {"id": "c1", "status": "ok"})
    led.record_answer("r", 0, "c1", {"id": "c1", "status": "other"})  # recorded once
    led.close()
    again = open_operation_ledger(url)
    assert again.get("k").state == "dispatched" and again.dispatches("r") == 1  # type: ignore[union-attr]
    assert again.answer("r", 0) == {"id": "c1", "status": "ok"}
    assert [t[1] for t in again.transitions("k")] == ["record_intent", "mark_dispatched"]  # type: ignore[attr-defined]
    again.close()


def test_R42_R43_a_lost_answer_is_reconciled_by_lookup_never_resent(url: str) -> None:
    applied: dict[str, Any] = {}
    sends: list[str] = []

    def send(arguments: Mapping[str, Any], key: str) -> Any:
        sends.append(key)
        applied[key] = {"ref": arguments["ref"]}
        if len(sends) == 1:
            raise TimeoutError
        return applied[key]

    def lookup(key: str, arguments: Mapping[str, Any]) -> tuple[bool, Any]:
        return key in applied, applied.get(key)

    h = WriteHandler(w.WriteTool("put", ("ref",), reconcile="lookup"), send, lookup, SCHEMA)
    led = open_operation_ledger(url)
    ex = WriteExecutor(led, {"put": h}, "p", "r")
    assert ex.call(0, "c1", "put", {"ref": "x"})["code"] == "OUTCOME_UNKNOWN"
    assert ex.call(1, "c2", "put", {"ref": "x"}) == {"id": "c2", "status": "ok", "output": {"ref": "x"}}
    assert len(sends) == 1 and ex.finish()["status"] == "COMPLETED"
    led.close()


def test_R44_two_workers_on_one_postgres_ledger_send_a_key_once(url: str) -> None:
    sends: list[str] = []
    gate = threading.Barrier(2)

    def send(arguments: Mapping[str, Any], key: str) -> Any:
        sends.append(key)
        time.sleep(0.3)
        return {"ref": arguments["ref"]}

    h = WriteHandler(w.WriteTool("put", ("ref",), reconcile="lookup"), send, lambda k, a: (False, None), SCHEMA)
    out: list[dict[str, Any]] = [{}, {}]

    def worker(i: int) -> None:
        led = open_operation_ledger(url)
        gate.wait()
        out[i] = WriteExecutor(led, {"put": h}, "p", f"run-{i}").call(0, f"c{i}", "put", {"ref": "x"})
        led.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(sends) == 1 and out[0]["status"] == out[1]["status"] == "ok"


@pytest.mark.parametrize("point", POINTS)
def test_R40_R46_a_run_loop_on_postgres_killed_at_each_crash_point_and_resumed(
        url: str, tmp_path: Path, point: str) -> None:
    def child(how: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(CHILD), url, str(tmp_path / "remote.sqlite"), "record", how],
                              env={**os.environ, **env}, capture_output=True, text=True, timeout=60)

    for n, at in enumerate(kills(point)):  # after-lookup: killed after the send, then at the recovery's lookup
        killed = child("resume" if n else "run", {CRASH_ENV: at})
        assert killed.returncode == -9, (at, killed.returncode, killed.stderr)
    done = child("resume", {})
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert Remote(tmp_path / "remote.sqlite", "record").effects() == {"A-1": 1, "B-2": 1}
    assert out["status"] == "COMPLETED" and out["unreconciled"] == []
    assert [r["status"] for r in out["results"]] == ["ok", "ok", "ok"]
    led = open_operation_ledger(url)
    assert {r.state for r in led.operations()} == {"confirmed"}
    led.close()
