#!/usr/bin/env python3
"""A tool-call executor that speaks the loopspec adapter protocol v1 (spec/PROTOCOL.md).

Standalone on purpose: it does not import loopspec. It is what an implementer would write —
the executor of an agent framework, wrapped in the ~40 lines of JSON-RPC plumbing at the bottom —
and it shows how to read the spec: the per-call check order (R1), id bindings (R5-R10), answers in
order (R11), the executed count (R12), abort and continue (R13, R14), safe errors (R15), the
trusted principal (R16) and, for loop mode, rounds and limits (R18-R22).

    python3 executor.py                  # correct
    python3 executor.py --bug NAME       # one deliberate bug (see BUGS), for testing the fuzzer

stdout carries only protocol messages; logs go to stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any

Json = Any

#: Each bug breaks one rule; the fuzzer must find every one of them.
BUGS = {
    "budget-after": "R9: the budget is checked after the tool ran (the side effect already happened)",
    "conflict-reuse": "R7: a conflicting request (same id, other content) gets the id's stored result",
    "cache-by-args": "R8: results are cached by content, so a new id with the same arguments is not executed",
    "replay-reexecutes": "R6: a replay runs the tool again instead of returning the stored output",
    "reorder-results": "R11: results are sorted by id instead of kept in request order",
    "unknown-tool-executed": "R3: a call to an unregistered tool is passed to the tool runner anyway",
    "principal-from-args": "R16: an argument named 'principal' overrides the trusted identity",
    "abort-loses-results": "R13: on abort, the answers of the earlier requests are dropped",
    "miscount": "R12: executed counts replays as executions",
    "leaky-errors": "R15: error answers carry exception text and the offending call",
    "leak-request-id": "R15: a failed tool's error text is copied into the request_id of the answer the model sees",
    "cached-failure": "R10: a failed execution is stored and replayed",
    "raw-content": "R6: content is compared as raw JSON text (key order and 1 vs 1.0 matter)",
    "state-leak": "R5: id bindings survive from one batch.run to the next",
    "lax-integer": "R4: an integer property accepts booleans",
    "check-order": "R1: the id check runs before the schema check",
    "continue-aborts": "R14: a tool failure ends the batch even in continue mode",
    # loop mode
    "rounds-off-by-one": "R19: max_rounds is checked after asking the model, so one round too many is asked",
    "shows-all-results": "R18: the model is shown every answer so far, not the previous round's",
    "coverage-lies": "R22: a run truncated by a limit reports coverage COMPLETE",
    "retry-extra": "R23: DEPENDENCY_TEMPORARY is retried once more than max_retries allows",
    "tool-budget-ignored": "R19: a tool's own execution limit is not enforced",
    "error-result-throws": "R20: a limit ends the run even with the error-result policy",
    "requests-skip-replays": "R19: max_requests does not count replays",
    # protocol misbehaviour (findings P1-P5, not spec rules)
    "crash": "P1: the process exits in the middle of a batch with two or more calls",
    "hang": "P2: batch.run never answers when a batch has three or more calls",
    "garbage": "P3: prints a non-JSON line to stdout for a batch with a replay",
    "wrong-id": "P4: answers batch.run with the wrong JSON-RPC id when a call is unknown",
    "drop-last": "R11: the last answer is missing when there are three or more",
}

CODES = {  # code -> (kind, next_action, safe message): the code table of spec/loop.toml
    "REQUEST_LIMIT": ("limit", "STOP", "The run has reached its limit on tool requests."),
    "INVALID_CALL": ("violation", "FIX_INPUT", "The call is malformed: it needs a non-blank string id, a tool name and an arguments object."),
    "UNKNOWN_TOOL": ("violation", "FIX_INPUT", "No tool of that name is available."),
    "INVALID_ARGUMENT": ("violation", "FIX_INPUT", "The arguments do not match the tool's input schema."),
    "ID_CONFLICT": ("violation", "FIX_INPUT", "This call id was already used for a different request; use a new id."),
    "NOT_FOUND_OR_NOT_ACCESSIBLE": ("failure", "STOP", "The resource does not exist or is not accessible to the current identity."),
    "DEADLINE_EXCEEDED": ("limit", "STOP", "The run's deadline has passed."),
    "BUDGET_EXHAUSTED": ("limit", "STOP", "The run's execution budget is used up."),
    "TOOL_BUDGET_EXHAUSTED": ("limit", "STOP", "This tool's execution budget is used up."),
    "DEPENDENCY_TEMPORARY": ("failure", "RETRY_WITH_BUDGET", "A dependency is temporarily unavailable."),
    "INTERNAL_ERROR": ("failure", "STOP", "The tool failed with an internal error."),
}
STOP_REASON = {  # escalating code -> (status, stop reason)
    "REQUEST_LIMIT": ("TRUNCATED", "MAX_REQUESTS"), "DEADLINE_EXCEEDED": ("TRUNCATED", "DEADLINE"),
    "BUDGET_EXHAUSTED": ("TRUNCATED", "MAX_EXECUTIONS"), "TOOL_BUDGET_EXHAUSTED": ("TRUNCATED", "MAX_TOOL_EXECUTIONS"),
    "INVALID_CALL": ("REJECTED", "INVALID_CALL"), "UNKNOWN_TOOL": ("REJECTED", "UNKNOWN_TOOL"),
    "INVALID_ARGUMENT": ("REJECTED", "INVALID_ARGUMENT"), "ID_CONFLICT": ("REJECTED", "ID_CONFLICT"),
}
FAILURES = ("DEPENDENCY_TEMPORARY", "NOT_FOUND_OR_NOT_ACCESSIBLE", "INTERNAL_ERROR")

#: Unicode White_Space (R2: an id made only of these is blank). Not str.isspace(), which also
#: counts the separators U+001C..U+001F.
WHITE_SPACE = frozenset("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
                        "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")


def blank(text: str) -> bool:
    return all(ch in WHITE_SPACE for ch in text)


class ToolFailed(Exception):
    def __init__(self, category: str, detail: str = "") -> None:
        super().__init__(category)
        self.category = category if category in FAILURES else "INTERNAL_ERROR"
        self.detail = detail  # the tool's own error text: for logs, never for the model (R15)


# --------------------------------------------------------------------------------------------
# Content: canonical JSON (keys unordered, 1 == 1.0, true != 1)
# --------------------------------------------------------------------------------------------


def normalise(v: Json) -> Json:
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError("non-finite number")
        return int(v) if v.is_integer() and abs(v) < 2**53 else v
    if isinstance(v, int):
        return v
    if isinstance(v, list):
        return [normalise(x) for x in v]
    if isinstance(v, dict):
        return {k: normalise(x) for k, x in v.items()}
    raise ValueError("not JSON")


def canonical(v: Json) -> str:
    return json.dumps(normalise(v), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# --------------------------------------------------------------------------------------------
# The executor
# --------------------------------------------------------------------------------------------


class Limit(Exception):
    """A limit hit with policy throw: the run ends TRUNCATED."""

    def __init__(self, index: int, code: str) -> None:
        super().__init__(code)
        self.index, self.code = index, code


class Executor:
    def __init__(self, rpc: Rpc, bug: str | None) -> None:
        self.rpc = rpc
        self.bug = bug
        self.leaked: dict[str, dict[str, Json]] = {}  # only used by the state-leak bug

    # -- checks ------------------------------------------------------------------------------
    @staticmethod
    def well_formed(call: Json) -> bool:
        return (
            isinstance(call, dict)
            and isinstance(call.get("id"), str) and not blank(call["id"])
            and isinstance(call.get("name"), str)
            and isinstance(call.get("arguments"), dict)
        )

    def arguments_valid(self, schema: dict[str, Json], args: dict[str, Json]) -> bool:
        props = schema.get("properties", {})
        for r in schema.get("required", []):
            if r not in args:
                return False
        for key, value in args.items():
            if key not in props:
                if schema.get("additionalProperties", True) is False:
                    return False
                continue
            t = props[key].get("type")
            if t == "string" and not isinstance(value, str):
                return False
            if t == "boolean" and not isinstance(value, bool):
                return False
            if t == "integer":
                if isinstance(value, bool):
                    if self.bug != "lax-integer":
                        return False
                elif not (isinstance(value, int) or (isinstance(value, float) and value.is_integer())):
                    return False
        return True

    def content_key(self, name: str, args: dict[str, Json]) -> str:
        if self.bug == "raw-content":
            return name + "\x00" + json.dumps(args, separators=(",", ":"))
        return name + "\x00" + canonical(args)

    # -- one run (a batch, or a whole loop) ----------------------------------------------------
    def start(self, tools: list[dict[str, Json]], principal: str, mode: str, on_limit: str,
              max_executions: int | None, max_tool_executions: int | None = None,
              max_requests: int | None = None, max_retries: int = 0, deadline: float | None = None) -> None:
        self.tools = {t["name"]: t.get("inputSchema") or {} for t in tools}
        self.tool_limits = {t["name"]: t.get("maxExecutions", max_tool_executions) for t in tools}
        self.principal = principal
        self.mode, self.on_limit = mode, on_limit
        self.max_executions, self.max_requests, self.max_retries = max_executions, max_requests, max_retries
        self.deadline = None if deadline is None else time.monotonic() + deadline
        self.bindings: dict[str, dict[str, Json]] = self.leaked if self.bug == "state-leak" else {}
        self.by_content: dict[str, Json] = {}  # only used by the cache-by-args bug
        self.executed = 0
        self.per_tool: dict[str, int] = {}
        self.requests = 0
        self.retries = 0
        self.replays = 0
        self.rejections = 0
        self.limited = False

    def escalates(self, code: str) -> bool:
        kind = CODES[code][0]
        if kind == "limit":
            return self.on_limit == "throw" or self.bug == "error-result-throws"
        if self.bug == "continue-aborts" and kind == "failure":
            return True
        return self.mode == "abort"

    def error(self, call: Json, code: str, index: int, run_id: str) -> dict[str, Json]:
        cid = call.get("id") if isinstance(call, dict) and isinstance(call.get("id"), str) else None
        self.rejections += 1
        if CODES[code][0] == "limit":
            self.limited = True
        out = {"id": cid, "status": "error", "code": code, "message": CODES[code][2],
               "next_action": CODES[code][1], "request_id": f"{run_id}:{index}"}
        if self.bug == "leaky-errors":
            out["message"] = f"{code}: Traceback (most recent call last): while handling {json.dumps(call)[:80]}"
        return out

    def answer(self, call: Json, index: int, run_id: str) -> dict[str, Json]:
        """Answer one request: R1's check order, then replay or execute."""
        self.requests += 1
        counted = index - self.replays if self.bug == "requests-skip-replays" else index
        if self.max_requests is not None and counted >= self.max_requests:
            return self.error(call, "REQUEST_LIMIT", index, run_id)
        if not self.well_formed(call):
            return self.error(call, "INVALID_CALL", index, run_id)
        cid, name, args = call["id"], call["name"], call["arguments"]
        known = name in self.tools
        if not known and self.bug != "unknown-tool-executed":
            return self.error(call, "UNKNOWN_TOOL", index, run_id)
        key = self.content_key(name, args)
        bound = self.bindings.get(cid)
        if self.bug == "check-order" and bound is not None and bound["key"] != key:
            return self.error(call, "ID_CONFLICT", index, run_id)
        if known and not self.arguments_valid(self.tools[name], args):
            return self.error(call, "INVALID_ARGUMENT", index, run_id)
        if bound is None:
            bound = self.bindings[cid] = {"key": key, "success": None}  # bound whatever happens next (R5)
        elif bound["key"] != key:
            if self.bug == "conflict-reuse" and bound["success"] is not None:
                return {"id": cid, "status": "ok", "output": bound["success"][0]}
            return self.error(call, "ID_CONFLICT", index, run_id)
        elif bound["success"] is not None and self.bug != "replay-reexecutes":
            self.replays += 1
            if self.bug == "miscount":
                self.executed += 1
            return {"id": cid, "status": "ok", "output": bound["success"][0]}
        elif bound.get("failure") is not None and self.bug == "cached-failure":
            return self.error(call, bound["failure"], index, run_id)
        if self.bug == "cache-by-args" and key in self.by_content:
            return {"id": cid, "status": "ok", "output": self.by_content[key]}
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return self.error(call, "DEADLINE_EXCEEDED", index, run_id)
        over_budget = self.max_executions is not None and self.executed >= self.max_executions
        if over_budget and self.bug != "budget-after":
            return self.error(call, "BUDGET_EXHAUSTED", index, run_id)
        tool_limit = self.tool_limits.get(name)
        if tool_limit is not None and self.per_tool.get(name, 0) >= tool_limit and self.bug != "tool-budget-ignored":
            return self.error(call, "TOOL_BUDGET_EXHAUSTED", index, run_id)
        # execute: charge first, then enter the tool with the trusted principal (R9, R16)
        self.executed += 1
        self.per_tool[name] = self.per_tool.get(name, 0) + 1
        principal = self.principal
        if self.bug == "principal-from-args" and isinstance(args.get("principal"), str):
            principal = args["principal"]
        attempt = 0
        while True:
            try:
                output = self.rpc.execute(cid, name, args, principal)
                break
            except ToolFailed as f:
                allowed = self.max_retries + (1 if self.bug == "retry-extra" else 0)
                if f.category == "DEPENDENCY_TEMPORARY" and attempt < allowed:
                    attempt += 1
                    self.retries += 1
                    continue
                if self.bug == "cached-failure":
                    bound["failure"] = f.category
                request_id = f"{run_id}:{index}" + (f" {f.detail}" if self.bug == "leak-request-id" else "")
                return {"id": cid, "status": "error", "code": f.category, "message": CODES[f.category][2],
                        "next_action": CODES[f.category][1], "request_id": request_id}
        if self.bug == "budget-after" and over_budget:
            return self.error(call, "BUDGET_EXHAUSTED", index, run_id)
        bound["success"] = (output,)
        self.by_content.setdefault(key, output)
        return {"id": cid, "status": "ok", "output": output}

    # -- batch.run ----------------------------------------------------------------------------
    def batch_run(self, p: dict[str, Json]) -> dict[str, Json]:
        mode = p.get("mode", "abort")
        self.start(p["tools"], p.get("principal", "anonymous"), mode,
                   "throw" if mode == "abort" else "error-result", p["budget"])
        calls = p.get("calls", [])
        self.misbehave(calls)
        results: list[dict[str, Json]] = []
        for i, call in enumerate(calls):
            a = self.answer(call, i, "batch")
            if a["status"] == "error" and self.escalates(a["code"]):
                kept = [] if self.bug == "abort-loses-results" else results
                return {"results": kept, "executed": self.executed, "aborted": {"index": i, "code": a["code"]}}
            results.append(a)
        if self.bug == "reorder-results":
            results.sort(key=lambda r: str(r["id"]))
        if self.bug == "drop-last" and len(results) >= 3:
            results.pop()
        return {"results": results, "executed": self.executed, "aborted": None}

    def misbehave(self, calls: list[Json]) -> None:
        if self.bug == "crash" and len(calls) >= 2:
            print("executor: simulated crash", file=sys.stderr, flush=True)
            sys.exit(3)
        if self.bug == "hang" and len(calls) >= 3:
            time.sleep(3600)
        if self.bug == "garbage" and any(
            isinstance(a, dict) and isinstance(b, dict) and a.get("id") == b.get("id") and a == b
            for j, a in enumerate(calls) for b in calls[j + 1:]
        ):
            self.rpc.raw("this is not json\n")
        if self.bug == "wrong-id" and any(isinstance(c, dict) and c.get("name") not in self.tools for c in calls):
            self.rpc.wrong_id = True

    # -- loop.run -----------------------------------------------------------------------------
    def loop_run(self, p: dict[str, Json]) -> dict[str, Json]:
        lim = p.get("limits", {})
        self.start(p["tools"], p.get("principal", "anonymous"), p.get("mode", "continue"),
                   p.get("onLimit", "throw"), lim.get("maxExecutions"), lim.get("maxToolExecutions"),
                   lim.get("maxRequests"), lim.get("maxRetries", 0), lim.get("deadline"))
        max_rounds = lim.get("maxRounds")
        results: list[dict[str, Json]] = []
        last_round: list[dict[str, Json]] = []
        rounds = 0

        def outcome(status: str, reason: str, final: str | None = None,
                    aborted: dict[str, Json] | None = None) -> dict[str, Json]:
            complete = (status == "COMPLETED" and not self.limited) or (
                self.bug == "coverage-lies" and status == "TRUNCATED")
            return {"status": status, "stopReason": reason, "coverage": "COMPLETE" if complete else "PARTIAL",
                    "rounds": rounds, "executed": self.executed, "aborted": aborted, "final": final,
                    "results": results}

        while True:
            if self.deadline is not None and time.monotonic() >= self.deadline:
                return outcome("TRUNCATED", "DEADLINE")
            if max_rounds is not None and rounds >= max_rounds + (1 if self.bug == "rounds-off-by-one" else 0):
                return outcome("TRUNCATED", "MAX_ROUNDS")
            rounds += 1
            try:
                move = self.rpc.model_next(rounds, last_round)
            except ToolFailed:
                return outcome("FAILED", "MODEL_ERROR")
            if isinstance(move, dict) and set(move) == {"final"} and isinstance(move["final"], str):
                return outcome("COMPLETED", "FINAL_ANSWER", final=move["final"])
            if not (isinstance(move, dict) and set(move) == {"calls"} and isinstance(move["calls"], list)):
                return outcome("FAILED", "MODEL_ERROR")
            last_round = []
            for call in move["calls"]:
                index = self.requests
                a = self.answer(call, index, "run")
                if a["status"] == "error" and self.escalates(a["code"]):
                    code = a["code"]
                    status, reason = STOP_REASON.get(code, ("FAILED", "TERMINAL_ERROR"))
                    return outcome(status, reason, aborted={"index": index, "code": code})
                results.append(a)
                last_round.append(a)
            if self.bug == "shows-all-results":
                last_round = list(results)


# --------------------------------------------------------------------------------------------
# JSON-RPC 2.0 plumbing over stdin/stdout, one message per line
# --------------------------------------------------------------------------------------------


class Rpc:
    def __init__(self) -> None:
        self.next_id = 0
        self.wrong_id = False
        self.executor: Executor | None = None

    def send(self, msg: dict[str, Json]) -> None:
        sys.stdout.write(json.dumps(msg, ensure_ascii=False, separators=(",", ":")) + "\n")
        sys.stdout.flush()

    def raw(self, text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    def read(self) -> dict[str, Json] | None:
        line = sys.stdin.readline()
        while line and not line.strip():
            line = sys.stdin.readline()
        return json.loads(line) if line else None

    def request(self, method: str, params: Json) -> Json:
        """Call the harness and wait for its answer (the harness sends nothing else meanwhile)."""
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        msg = self.read()
        if msg is None:
            sys.exit(0)
        if "error" in msg:
            data = msg["error"].get("data") or {}
            raise ToolFailed(data.get("category", "INTERNAL_ERROR") if isinstance(data, dict) else "INTERNAL_ERROR",
                             str(msg["error"].get("message", "")))
        return msg["result"]

    def execute(self, call_id: str, name: str, arguments: dict[str, Json], principal: str) -> Json:
        res = self.request("tool.execute", {"callId": call_id, "name": name, "arguments": arguments,
                                            "context": {"principal": principal}})
        return res["output"]

    def model_next(self, round_: int, results: list[Json]) -> Json:
        return self.request("model.next", {"round": round_, "results": results})

    def serve(self, bug: str | None) -> None:
        ex = Executor(self, bug)
        while (msg := self.read()) is not None:
            method, rid, params = msg.get("method"), msg.get("id"), msg.get("params")
            try:
                if method == "initialize":
                    result: Json = {"name": "example-python", "version": "1.0",
                                    "capabilities": {"batch": True, "loop": True}}
                elif method == "batch.run":
                    result = ex.batch_run(params)
                elif method == "loop.run":
                    result = ex.loop_run(params)
                elif method == "shutdown":
                    self.send({"jsonrpc": "2.0", "id": rid, "result": None})
                    return
                else:
                    self.send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "method not found"}})
                    continue
            except (KeyError, TypeError, ValueError) as exc:
                print(f"executor: bad params: {exc!r}", file=sys.stderr, flush=True)
                self.send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": "invalid params"}})
                continue
            if self.wrong_id:
                self.wrong_id = False
                rid = (rid if isinstance(rid, int) else 0) + 1000
            self.send({"jsonrpc": "2.0", "id": rid, "result": result})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bug", choices=sorted(BUGS), help="introduce one deliberate bug")
    args = ap.parse_args()
    Rpc().serve(args.bug)
    return 0


if __name__ == "__main__":
    sys.exit(main())
