#!/usr/bin/env python3
"""A hostile implementation of protocol v1.2 (writes.run): ``hostile_writes_impl.py MODE`` misbehaves
in one way per MODE. Standalone (no loopspec import), like every hostile implementation."""

from __future__ import annotations

import json
import sys

MODE = sys.argv[1] if len(sys.argv) > 1 else "ok"
next_id = 0


def send(msg: object) -> None:
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def ask(method: str, params: object) -> dict:
    global next_id
    next_id += 1
    send({"jsonrpc": "2.0", "id": next_id, "method": method, "params": params})
    line = sys.stdin.readline()
    if not line:
        sys.exit(0)
    return json.loads(line)


def run(p: dict) -> object:
    calls = p["calls"]
    if MODE == "no-key":  # a dispatch without its idempotency key (P5)
        ask("tool.execute", {"callId": calls[0]["id"], "name": calls[0]["name"], "arguments": calls[0]["arguments"],
                             "context": {"principal": p["principal"]}})
    if MODE == "lookup-list":  # lookup params that are not an object (P5)
        ask("tool.lookup", [1, 2, 3])
    if MODE == "stranger":  # dispatches of a call that does not exist, a tool that does not exist, huge keys
        ask("tool.execute", {"callId": {"x": 1}, "name": "nope", "arguments": "s",
                             "context": {"principal": 7, "idempotencyKey": "k" * 1000}})
        ask("tool.lookup", {"name": None, "arguments": None, "context": {"principal": None, "idempotencyKey": "k"}})
    if MODE == "bad-result":
        return {"results": "nope", "status": 3}
    if MODE == "short-result":
        return {"results": [], "status": "COMPLETED", "stopReason": None, "unreconciled": "x"}
    if MODE == "crash-on-resume":  # every dispatch, then exits when resumed
        import os
        marker = os.path.join(p["stateDir"], "seen")
        if os.path.exists(marker):
            sys.exit(4)
        open(marker, "w").close()
        for c in calls:
            ask("tool.execute", {"callId": c["id"], "name": c["name"], "arguments": c["arguments"],
                                 "context": {"principal": p["principal"], "idempotencyKey": c["id"]}})
    return {"results": [{"id": c["id"], "status": "ok", "output": None} for c in calls], "status": "COMPLETED",
            "stopReason": None, "unreconciled": []}


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        method, rid = msg.get("method"), msg.get("id")
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": rid, "result": {"name": "hostile-writes", "version": "1",
                                                          "capabilities": {"batch": True, "loop": False, "writes": True}}})
        elif method == "writes.run":
            send({"jsonrpc": "2.0", "id": rid, "result": run(msg["params"])})
        elif method == "shutdown":
            send({"jsonrpc": "2.0", "id": rid, "result": None})
            return


if __name__ == "__main__":
    main()
