"""A minimal stdio adapter for `loopspec fuzz`, standard library only, that answers each batch as spec/SPEC.md says.

    loopspec fuzz --impl "python3 minimal_adapter.py"   # installed: python -m loopspec.examples.minimal_adapter

loopspec sends `batch.run`; each execution is a `tool.execute` request back to it (spec/PROTOCOL.md).
"""
import json
import sys

BLANK = set("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
            "\u2028\u2029\u202f\u205f\u3000")  # Unicode White_Space: an id made only of these is blank (R2)
TYPES = {"string": lambda v: isinstance(v, str), "boolean": lambda v: isinstance(v, bool),  # R4's flat subset
         "integer": lambda v: isinstance(v, int | float) and not isinstance(v, bool) and v % 1 == 0}  # 1.0 too
lines = (line for line in sys.stdin if line.strip())


def send(msg):
    print(json.dumps({"jsonrpc": "2.0", **msg}), flush=True)


def canonical(v):  # a call's content: object keys unordered (sort_keys below), 1 == 1.0, true is not 1 (R5)
    return ({k: canonical(x) for k, x in v.items()} if isinstance(v, dict) else [canonical(x) for x in v]
            if isinstance(v, list) else int(v) if isinstance(v, float) and v.is_integer() else v)


def refusal(call, schemas):  # R1's checks 2-4, in order: the code of a call that may not run (None: it may)
    if not (isinstance(call, dict) and isinstance(call.get("id"), str) and set(call["id"]) - BLANK
            and isinstance(call.get("name"), str) and isinstance(call.get("arguments"), dict)):
        return "INVALID_CALL"  # R2
    if call["name"] not in schemas:
        return "UNKNOWN_TOOL"  # R3: only the tools of the batch
    schema, args = schemas[call["name"]], call["arguments"]
    props, extra_ok = schema.get("properties", {}), schema.get("additionalProperties", True)
    if any(r not in args for r in schema.get("required", [])) or not all(
            TYPES[props[k]["type"]](v) if k in props else extra_ok for k, v in args.items()):
        return "INVALID_ARGUMENT"  # R4


def execute(n, call, principal):  # loopspec runs the tool: (None, output) or (failure category, None)
    send({"id": n, "method": "tool.execute", "params": {"callId": call["id"], "name": call["name"],
                                                        "arguments": call["arguments"], "context": {"principal": principal}}})
    answer = json.loads(next(lines, "null")) or sys.exit("loopspec closed stdin during a tool.execute")
    if "result" in answer:
        return None, answer["result"]["output"]
    category = (answer["error"].get("data") or {}).get("category")  # R17; never parsed from the message (R15)
    return category if category in ("DEPENDENCY_TEMPORARY", "NOT_FOUND_OR_NOT_ACCESSIBLE") else "INTERNAL_ERROR", None


def run_batch(p):
    schemas = {t["name"]: t.get("inputSchema") or {} for t in p["tools"]}  # the allow-list (R3)
    bound, stored, results, executed = {}, {}, [], 0  # this batch's id -> content and id -> output (R5)
    for index, call in enumerate(p["calls"]):
        code, output = refusal(call, schemas), None
        cid = call.get("id") if isinstance(call, dict) and isinstance(call.get("id"), str) else None
        if code is None:
            content = json.dumps([call["name"], canonical(call["arguments"])], sort_keys=True)
            if bound.setdefault(cid, content) != content:
                code = "ID_CONFLICT"  # same id, other content: never its stored result (R7)
            elif cid in stored:
                output = stored[cid]  # same id, same content, a stored success: a replay, nothing runs (R6)
            elif executed >= p["budget"]:
                code = "BUDGET_EXHAUSTED"  # checked before the tool is entered (R9)
            else:
                executed += 1
                code, output = execute(executed, call, p["principal"])  # the trusted principal (R16)
                if code is None:
                    stored[cid] = output  # a failure is never stored (R10)
        if code is not None and p["mode"] == "abort":  # the first error ends the batch, unanswered (R13)
            return {"results": results, "executed": executed, "aborted": {"index": index, "code": code}}
        results.append({"id": cid, "status": "ok", "output": output} if code is None
                       else {"id": cid, "status": "error", "code": code})  # in request order (R11, R14)
    return {"results": results, "executed": executed, "aborted": None}


for msg in map(json.loads, lines):
    if msg.get("method") == "initialize":
        send({"id": msg["id"], "result": {"name": "minimal", "version": "1", "capabilities": {"batch": True, "loop": False}}})
    elif msg.get("method") == "batch.run":
        send({"id": msg["id"], "result": run_batch(msg["params"])})
    elif msg.get("method") == "shutdown":
        send({"id": msg["id"], "result": None})
        break
    elif "id" in msg and "method" in msg:
        send({"id": msg["id"], "error": {"code": -32601, "message": f"no method {msg['method']}"}})
