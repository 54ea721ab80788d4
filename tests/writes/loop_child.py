"""One process of a loop run (``run_loop``) whose write tool is the merchant's, for the SIGKILL crash tests.

``python loop_child.py OPS REMOTE MODE run|resume``: ``run`` starts run ``loop-1`` on the operation ledger
OPS (SQLite), ``resume`` continues it with :func:`loopspec.resume`; the external system is REMOTE (its own
SQLite file, MODE ``record`` or ``lookup``). The model proposes order A-1, then A-1 again under a new call
id with order B-2, then gives its final answer. Prints the outcome as JSON; ``LOOPSPEC_CRASH_AT`` makes the
process SIGKILL itself at a crash point (loopspec._oplog).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from loopspec import Tool, Turn, WriteTool, resume, run_loop
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


def main(ops: str, remote_path: str, mode: str, how: str) -> None:
    remote = Remote(remote_path, mode)
    if how == "run":
        out = run_loop(model, tools=tools(remote, mode), operation_ledger=ops, run_id="loop-1", principal="merchant-7")
    else:
        out = resume("loop-1", model, tools=tools(remote, mode), operation_ledger=ops, principal="merchant-7")
    print(json.dumps({**out.to_json(), "unreconciled": list(out.unreconciled)}))


if __name__ == "__main__":
    main(*sys.argv[1:5])
