"""One process of a loop run (``run_loop``) whose write tool is the merchant's, for the SIGKILL crash tests.

``python loop_child.py OPS REMOTE MODE run|resume [EVENTS [RUN_ID]]``: ``run`` starts run RUN_ID (``loop-1``)
on the operation ledger OPS (SQLite), ``resume`` continues it with :func:`loopspec.resume`; the external
system is REMOTE (its own SQLite file, MODE ``record`` or ``lookup``). The model proposes order A-1, then A-1
again under a new call id with order B-2, then gives its final answer. Prints the outcome as JSON;
``LOOPSPEC_CRASH_AT`` makes the process SIGKILL itself at a crash point (loopspec.engine.oplog). With EVENTS, the
run ledger is appended to that file, line-buffered (what a crash leaves of it is what reached the file), on a
clock that advances 0.5 s per reading, so that the file is the same every time; ``LOOPSPEC_TEST_VARIANT``
installs a broken variant of the executor (``loopspec.core.writes.VARIANTS``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from loopspec import Ledger, Tool, Turn, WriteTool, resume, run_loop
from tests.writes.merchant import SCHEMA, Remote

ROUNDS = [
    [{"id": "c1", "name": "create_order", "arguments": {"order_ref": "A-1", "amount": 5}}],
    [{"id": "c2", "name": "create_order", "arguments": {"order_ref": "A-1", "amount": 5}},
     {"id": "c3", "name": "create_order", "arguments": {"order_ref": "B-2", "amount": 7}}],
]


def model(turn: Turn) -> Any:
    return ROUNDS[turn.round - 1] if turn.round <= len(ROUNDS) else {"final": "ordered"}


def tools(remote: Remote, mode: str) -> list[Tool]:
    return [Tool.define("create_order", lambda args, ctx: remote.send(args, ctx.idempotency_key or ""), SCHEMA,
                        write=WriteTool("create_order", ("order_ref",), reconcile=mode),  # type: ignore[arg-type]
                        lookup=remote.lookup)]


def _clock() -> Any:
    now = [0.0]

    def clock() -> float:
        now[0] += 0.5
        return now[0]
    return clock


def main(ops: str, remote_path: str, mode: str, how: str, events: str | None = None, run_id: str = "loop-1") -> None:
    variant = os.environ.get("LOOPSPEC_TEST_VARIANT")
    if variant:
        from loopspec.core import writes as _writes
        from loopspec.engine import oplog as _oplog

        init = _oplog.WriteExecutor.__post_init__

        def broken(self: Any) -> None:
            init(self)
            self.policy = _writes.VARIANTS[variant]
        _oplog.WriteExecutor.__post_init__ = broken  # type: ignore[method-assign]
    remote = Remote(remote_path, mode)
    sink = open(events, "a", encoding="utf-8", buffering=1) if events else None  # noqa: SIM115 - closed below
    kw: dict[str, Any] = {"ledger": Ledger(sink), "clock": _clock()} if sink is not None else {}
    if how == "run":
        out = run_loop(model, tools=tools(remote, mode), operation_ledger=ops, run_id=run_id, principal="merchant-7",
                       **kw)
    else:
        out = resume(run_id, model, tools=tools(remote, mode), operation_ledger=ops, principal="merchant-7", **kw)
    if sink is not None:
        sink.close()
    print(json.dumps({**out.to_json(), "unreconciled": list(out.unreconciled)}))


if __name__ == "__main__":
    main(*sys.argv[1:7])
