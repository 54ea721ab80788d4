"""Golden ledgers of runs that span restarts (SPEC.md R46, "In the run ledger"): each produced by real
processes — a ``run_loop`` killed with SIGKILL at a labelled crash point, then a new process that resumes
it with :func:`loopspec.resume` — appending to one run ledger (tests/writes/loop_child.py). The must-fail
ones are real too: the resumed process was given an operation ledger that knows only the run's start (the
crashed one's file lost, a backup from before the write restored), or ran the ``retry-without-lookup``
variant of the executor. ``durationMs`` (wall time) is set to 0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from loopspec.engine.oplog import CRASH_ENV
from loopspec.spec.writes import load_write_spec
from tests.writes.merchant import kills

CHILD = Path(__file__).resolve().parent / "writes" / "loop_child.py"


def _child(d: Path, ops: str, remote: str, mode: str, how: str, run: str, env: dict[str, str]) -> int:
    p = subprocess.run([sys.executable, str(CHILD), str(d / ops), str(d / remote), mode, how, str(d / "events.ndjson"),
                        run], env={**os.environ, **env}, capture_output=True, text=True, timeout=120)
    return p.returncode


def _crashed_and_resumed(d: Path, run: str, point: str, mode: str = "record", *, resume_ops: str | None = None,
                         variant: str | None = None) -> None:
    ops, remote = f"{run}.ops.sqlite", f"{run}.remote.sqlite"
    for n, at in enumerate(kills(point)):  # after-lookup: killed after the send, then at the recovery's lookup
        code = _child(d, ops, remote, mode, "resume" if n else "run", run, {CRASH_ENV: at})
        assert code == -9, f"{run}: the process crashed at {at} ended {code}, not by SIGKILL"
    env = {"LOOPSPEC_TEST_VARIANT": variant} if variant else {}
    if resume_ops is not None:  # a copy of the ledger from before the write (a backup): the run's start, no more
        from loopspec import SQLiteOperationLedger

        old = SQLiteOperationLedger(d / resume_ops)
        old.record_run(run)
        old.close()
    code = _child(d, resume_ops or ops, remote, mode, "resume", run, env)
    assert code == 0, f"{run}: the resumed process ended {code}"


def _normalised(path: Path) -> str:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        ev = json.loads(line)
        if "durationMs" in ev:
            ev["durationMs"] = 0.0
        out.append(json.dumps(ev, ensure_ascii=False, separators=(",", ":")) + "\n")
    return "".join(out)


def cases() -> dict[str, tuple[str, int, list[str], str]]:
    """name -> (the ledger, exit code, rules its violations name, what it is)."""
    points = [c.id for c in load_write_spec().crash_points]
    out: dict[str, tuple[str, int, list[str], str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "pass"
        d.mkdir()
        for point in points:
            _crashed_and_resumed(d, f"restart-{point}", point)
        _crashed_and_resumed(d, "restart-lookup-after-send", "after-send", "lookup")
        out["ledger-restart-pass.ndjson"] = (
            _normalised(d / "events.ndjson"), 0, [],
            "real runs killed (SIGKILL) at each crash point and resumed by a new process: one run ledger each, "
            "across the restart (the lookup one reconciles the lost answer by lookup)")
        d = Path(tmp) / "lost"
        d.mkdir()
        _crashed_and_resumed(d, "lost-operation-ledger", "after-result", resume_ops="fresh.ops.sqlite")
        out["ledger-restart-fail-operation-ledger-lost.ndjson"] = (
            _normalised(d / "events.ndjson"), 1, ["R40"],
            "a real run killed after its write was confirmed, resumed on an operation ledger restored from before "
            "the write: the restart shows the confirmed operation lost")
        d = Path(tmp) / "blind"
        d.mkdir()
        _crashed_and_resumed(d, "retry-without-lookup", "after-send", "lookup", variant="retry-without-lookup")
        out["ledger-restart-fail-retry-without-lookup.ndjson"] = (
            _normalised(d / "events.ndjson"), 1, ["R46"],
            "a real run killed after its send, resumed by the retry-without-lookup variant: the dispatched "
            "operation is neither recorded unknown nor reconciled before the run goes on")
    return out
