"""SPEC.md section 6 for real: the engine's operation ledger on SQLite, killed (SIGKILL) at every crash point
of writes.toml and restarted on the same files; the external system's effects are counted (R39-R46)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loopspec.engine.oplog import CRASH_ENV, SQLiteOperationLedger
from loopspec.spec.writes import load_write_spec

from .writes.merchant import Remote, kills

CHILD = Path(__file__).resolve().parent / "writes" / "merchant.py"
POINTS = [c.id for c in load_write_spec().crash_points]


def _run(tmp: Path, mode: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(CHILD), str(tmp / "ops.sqlite"), str(tmp / "remote.sqlite"), mode],
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=60)


def _crash_and_restart(tmp: Path, mode: str, point: str) -> dict:  # type: ignore[type-arg]
    for at in kills(point):  # after-lookup: killed after the send first, so that recovery has a lookup to ask
        killed = _run(tmp, mode, {CRASH_ENV: at})
        assert killed.returncode == -9, (at, killed.returncode, killed.stderr)  # SIGKILL, not an exit
        if at == "after-lookup":  # R43: the lookup was asked, its answer not recorded: the key is still unknown
            ops = SQLiteOperationLedger(tmp / "ops.sqlite")
            assert [r.state for r in ops.operations()] == ["unknown"]
            ops.close()
    again = _run(tmp, mode, {})
    assert again.returncode == 0, again.stderr
    return json.loads(again.stdout)


def _check(tmp: Path, mode: str, out: dict) -> None:  # type: ignore[type-arg]
    assert Remote(tmp / "remote.sqlite", mode).effects() == {"A-1": 1, "B-2": 1}, "at most one effect per key"
    assert out["outcome"] == {"status": "COMPLETED", "stopReason": None, "unreconciled": []}
    a1, a1_again, b2 = out["answers"]
    assert a1["status"] == a1_again["status"] == b2["status"] == "ok"
    assert a1["output"] == a1_again["output"], "the replay under a new call id answers the recorded result"
    ops = SQLiteOperationLedger(tmp / "ops.sqlite")
    assert {r.state for r in ops.operations()} == {"confirmed"}
    ops.close()


@pytest.mark.parametrize("point", POINTS)
def test_killed_at_each_crash_point_then_restarted_applies_each_write_once(tmp_path: Path, point: str) -> None:
    _check(tmp_path, "record", _crash_and_restart(tmp_path, "record", point))


@pytest.mark.slow
@pytest.mark.parametrize("point", POINTS + [f"{p}@2" for p in POINTS])
def test_every_crash_point_without_an_idempotency_record(tmp_path: Path, point: str) -> None:
    """With only a lookup the external system does not deduplicate: a second send would be a second effect.
    ``point@2``: the second time the run gets there (the second order; the replay in between sends nothing);
    ``after-lookup@2``: the recovery's lookup cut in two processes in a row."""
    _check(tmp_path, "lookup", _crash_and_restart(tmp_path, "lookup", point))


def test_a_lost_answer_is_unknown_then_reconciled_never_resent(tmp_path: Path) -> None:
    done = _run(tmp_path, "lookup", {"MERCHANT_LOSE_FIRST": "1"})
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    first, again, _ = out["answers"]
    assert first == {"id": "c1", "status": "error", "code": "OUTCOME_UNKNOWN"}  # R42: not a failure
    assert again["status"] == "ok" and again["output"]["order"] == "A-1"  # reconciled by lookup (R43)
    assert Remote(tmp_path / "remote.sqlite", "lookup").effects() == {"A-1": 1, "B-2": 1}


def test_the_broken_variant_without_a_dispatch_mark_applies_a_write_twice(tmp_path: Path) -> None:
    """The crash test can fail: sending before the dispatch mark, a crash after the send re-sends on restart."""
    from loopspec.core import writes as w

    from .writes.merchant import REQUESTS, executor

    remote = Remote(tmp_path / "remote.sqlite", "lookup")

    class Crash(Exception):
        pass

    def crash_after_send(point: str) -> None:
        if point == "after-send":
            raise Crash

    ex = executor(tmp_path / "ops.sqlite", remote, "lookup", policy=w.VARIANTS["record-after-dispatch"],
                  crash_hook=crash_after_send)
    with pytest.raises(Crash):
        ex.call(0, *REQUESTS[0])
    ex = executor(tmp_path / "ops.sqlite", remote, "lookup", policy=w.VARIANTS["record-after-dispatch"])
    ex.resume()
    ex.call(0, *REQUESTS[0])
    assert remote.effects() == {"A-1": 2}
