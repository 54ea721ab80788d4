#!/usr/bin/env python3
"""A hostile implementation of the adapter protocol: initializes correctly, then misbehaves in one
way (the first argument) on its first ``batch.run`` / ``loop.run``. Standalone (stdlib only).

    python3 hostile_impl.py MODE
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

MODE = sys.argv[1] if len(sys.argv) > 1 else "correct"
out = sys.stdout


def send(obj: object) -> None:
    out.write(json.dumps(obj) + "\n")
    out.flush()


def raw(text: str) -> None:
    out.write(text)
    out.flush()


def read() -> dict:
    line = sys.stdin.readline()
    if not line:
        sys.exit(0)
    return json.loads(line)


def answer(rid: int, results: str, executed: str) -> str:
    """A batch.run answer written by hand (what json.dumps would refuse or never write)."""
    return '{"jsonrpc": "2.0", "id": ' + str(rid) + ', "result": {"results": ' + results + ', "executed": ' \
        + executed + ', "aborted": null}}\n'


def misbehave(rid: int, method: str, params: dict) -> None:
    if MODE == "blank-lines":  # keeps the pipe busy, never answers
        while True:
            raw("\n")
            time.sleep(0.05)
    if MODE == "notifications":
        while True:
            send({"jsonrpc": "2.0", "method": "log", "params": {"text": "working" * 20}})
    if MODE == "tool-flood":  # endless tool.execute requests, each answered
        n = 0
        while True:
            n += 1
            send({"jsonrpc": "2.0", "id": n, "method": "tool.execute",
                  "params": {"callId": "c1", "name": "lookup", "arguments": {}, "context": {"principal": "alice"}}})
            read()
    if MODE == "model-flood":  # endless model.next requests
        n = 0
        while True:
            n += 1
            send({"jsonrpc": "2.0", "id": n, "method": "model.next", "params": {"round": n, "results": []}})
            read()
    if MODE == "deaf":  # stops reading its stdin: asks for tools whose answers it never reads (they fill the pipe)
        call = {"callId": "c1", "name": "lookup", "arguments": {"pad": "p" * 4000}, "context": {"principal": "x"}}
        for n in range(1, 1000):
            send({"jsonrpc": "2.0", "id": n, "method": "tool.execute", "params": call})
        time.sleep(3600)
    if MODE == "half-line":  # half an answer, then silence with the line open
        raw('{"jsonrpc": "2.0", "id": ' + str(rid) + ', "res')
        time.sleep(3600)
    if MODE == "half-line-exit":  # half an answer, then it dies between its two writes
        raw('{"jsonrpc": "2.0", "id": ' + str(rid) + ', "res')
        os._exit(5)
    if MODE == "exit-between-messages":  # one whole message (a tool.execute), its answer read, then death
        send({"jsonrpc": "2.0", "id": 1, "method": "tool.execute",
              "params": {"callId": "c1", "name": "lookup", "arguments": {}, "context": {"principal": "x"}}})
        read()
        os._exit(4)
    if MODE == "fork-holder":  # a child keeps the pipes; the adapter itself exits
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        os._exit(3)
    if MODE == "bigint":
        raw(answer(rid, "[]", "9" * 5000))
        return
    if MODE == "deep":
        raw(answer(rid, "[" * 990 + "1" + "]" * 990, "0"))
        return
    if MODE == "nan":
        raw(answer(rid, "[]", "NaN"))
        return
    if MODE == "infinity":
        raw(answer(rid, "[]", "1e400"))
        return
    if MODE == "invalid-utf8":
        out.buffer.write(b'{"jsonrpc": "2.0", "id": %d, "result": "\xff\xfe"}\n' % rid)
        out.flush()
        return
    raise SystemExit(f"unknown mode {MODE}")


def main() -> None:
    while True:
        msg = read()
        method, rid = msg.get("method"), msg.get("id")
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": rid, "result": {"name": "hostile", "version": "1",
                                                           "capabilities": {"batch": True, "loop": True}}})
            if MODE == "deaf-after-initialize":  # never reads again: what the harness writes piles up in the pipe
                time.sleep(3600)
        elif method == "shutdown":
            send({"jsonrpc": "2.0", "id": rid, "result": None})
            return
        elif method in ("batch.run", "loop.run"):
            misbehave(rid, method, msg.get("params") or {})
        else:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no such method"}})


def run_example(after_answer: object = None) -> None:
    """The correct example executor (examples/python/executor.py), optionally with a hook that runs
    after it sent each batch.run / loop.run answer."""
    import runpy

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples", "python",
                        "executor.py")
    g = runpy.run_path(path, run_name="example_executor")
    rpc_cls = g["Rpc"]
    if after_answer is not None:
        plain = rpc_cls.send

        def send_then(self: object, msg: dict) -> None:
            plain(self, msg)
            if isinstance(msg.get("result"), dict) and "executed" in msg["result"]:
                after_answer(self)  # type: ignore[operator]

        rpc_cls.send = send_then
    rpc_cls().serve(None)


def late_execute(rpc: object) -> None:
    """After its answer, one more tool.execute (whose answer it then waits for)."""
    send({"jsonrpc": "2.0", "id": 99, "method": "tool.execute",
          "params": {"callId": "late", "name": "lookup", "arguments": {}, "context": {"principal": "x"}}})
    read()


def daemons(n: int = 3) -> None:
    """``n`` double-forked daemons (orphaned at once, in sessions of their own) and ``n`` helpers that leave the
    process group but stay its children: none of them reads the pipes (their stdio is /dev/null)."""
    import subprocess

    for _ in range(n):
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                time.sleep(300)
            os._exit(0)
        os.wait()
    for _ in range(n):
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


if __name__ == "__main__":
    if MODE == "daemons":  # a correct executor that leaves helpers behind: daemons, own-process-group children
        daemons()
        run_example()
    elif MODE == "stderr-flood":  # a correct executor whose logs never stop
        def flood() -> None:
            line = ("x" * 1023 + "\n").encode()
            while True:
                os.write(2, line * 64)
        threading.Thread(target=flood, daemon=True).start()
        run_example()
    elif MODE == "late-execute":
        run_example(late_execute)
    else:
        main()
