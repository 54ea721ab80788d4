"""A template stdio adapter for `loopspec fuzz` around an executor you cannot change (spec/PROTOCOL.md): copy it and
put your executor in run_batch. (minimal_adapter.py, beside it, is a whole correct executor with no loopspec inside.)

    loopspec fuzz --impl "python3 template_adapter.py" [--tools tools.json]

Standard library only. Your executor gets `execute(call_id, name, arguments, principal)`, which runs the tool on
the harness and returns its output or raises ToolFailed; it returns {"results", "executed", "aborted"}, or raises
Rejected(code) to refuse the whole batch (protocol 1.3, R47). As it is, run_batch calls loopspec's reference
engine, so the template passes a campaign: replace that body with your executor.
"""

import json
import sys


class ToolFailed(Exception):  # the tool failed on the harness; args[0] is its category (R17)
    pass


class Rejected(Exception):  # the whole batch is refused; args[0] is the code of the request that ended it
    pass


def run_batch(params, execute):
    from loopspec import ToolFailure  # (only this placeholder needs loopspec)
    from loopspec.protocol.executor import ReferenceExecutor

    def engine_execute(*call):
        try:
            return execute(*call)
        except ToolFailed as failed:
            raise ToolFailure(failed.args[0]) from None

    return ReferenceExecutor().batch_run(params, engine_execute)


def send(msg):
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **msg}) + "\n")
    sys.stdout.flush()


executed = 0


def execute(call_id, name, arguments, principal):  # tool.execute: the harness runs the tool and answers
    global executed
    executed += 1
    send({"id": executed, "method": "tool.execute", "params": {
        "callId": call_id, "name": name, "arguments": arguments, "context": {"principal": principal}}})
    msg = json.loads(sys.stdin.readline() or "null") or sys.exit("the harness closed stdin")
    if "error" in msg:
        raise ToolFailed((msg["error"].get("data") or {}).get("category", "INTERNAL_ERROR"))
    return msg["result"]["output"]


for line in sys.stdin:
    msg = json.loads(line) if line.strip() else {}
    method, rid = msg.get("method"), msg.get("id")
    if method == "initialize":
        send({"id": rid, "result": {"name": "minimal", "version": "1", "capabilities": {"batch": True, "loop": False}}})
    elif method == "batch.run":
        executed = 0
        try:
            send({"id": rid, "result": run_batch(msg["params"], execute)})
        except Rejected as rejected:
            send({"id": rid, "result": {"rejected": {"code": rejected.args[0]}, "executed": executed}})
    elif method == "shutdown":
        send({"id": rid, "result": None})
        break
    elif rid is not None:
        send({"id": rid, "error": {"code": -32601, "message": f"no method {method}"}})
