#!/usr/bin/env python3
"""A tool-call executor that speaks the loopspec adapter protocol, versions 1.0 to 1.2 (spec/PROTOCOL.md).

Installed with loopspec, it runs as ``python -m loopspec.examples.executor``: batches and loops (1.0),
concurrent batches with ``--concurrent`` (1.1), write tools through an operation ledger (1.2).

Standalone on purpose: it does not import loopspec. It is what an implementer would write —
the executor of an agent framework, wrapped in the ~40 lines of JSON-RPC plumbing at the bottom —
and it shows how to read the spec: the per-call check order (R1), id bindings (R5-R10), answers in
order (R11), the executed count (R12), abort and continue (R13, R14), safe errors (R15), the
trusted principal (R16) and, for loop mode, rounds and limits (R18-R22).

    python3 executor.py                  # correct
    python3 executor.py --bug NAME       # one deliberate bug (see BUGS), for testing the fuzzer
    python3 executor.py --concurrent     # protocol v1.1: runs overlapping calls concurrently
                                         # (SPEC.md section 5, R29-R35; --bug conc-* are its races)

Protocol v1.2 (capability ``writes``, PROTOCOL.md section 8): ``writes.run`` carries write tools
through a durable operation ledger (SQLite in the step's ``stateDir``): intent, dispatch mark, send,
result, each one transaction (R39, R40); a lost answer is OUTCOME_UNKNOWN (R42) and is reconciled by
``tool.lookup`` before anything is sent again (R43); a confirmed key is answered from the ledger
(R44); a new process on the same state directory recovers the run (R46). ``--bug key-by-call-id``,
``retry-without-lookup``, ``record-after-dispatch``, ``timeout-as-failure`` and ``failed-before-lookup``
are the broken variants of spec/writes.toml; the last is a recovery that is not crash-safe (R43: it
records an unknown write failed before its lookup answers, PROTOCOL.md W3).

In concurrent mode (capability ``concurrency``; only batches whose params carry ``concurrency``)
the executor is a single-threaded event loop, the shape of ``asyncio.wait(FIRST_COMPLETED)``: it
takes requests up in request order, checking and reserving each in one step (R31), starts each
execution by sending its ``tool.execute`` without waiting, and when it cannot take up the next
request it sends ``tool.waiting`` and lands whichever result the harness releases (R32-R35).

stdout carries only protocol messages; logs go to stderr.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sqlite3
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
    # concurrent mode (--concurrent): the classic races of section 5
    "conc-budget-check-then-act": "R31: the budget is checked at take-up but charged when the result lands",
    "conc-completion-order": "R32: answers are kept in the order the results complete",
    "conc-sibling-failure-drops": "R32: a failed execution cancels its siblings in flight, whose answers are lost",
    "conc-inflight-replay": "R33: a repeated id whose execution is still running is executed again",
    "conc-abort-first-in-time": "R34: abort mode stops at the first failure to arrive, dropping earlier requests still running",
    "conc-no-cancel": "R35: executions still running when the batch aborts are dropped without being cancelled",
    # write tools (writes.run, protocol v1.2): the broken variants of spec/writes.toml
    "key-by-call-id": "R37: a write's idempotency key is its call id, so the same write under a new id is sent again",
    "retry-without-lookup": "R43: an unknown outcome (a lost answer, a restart) is sent again without a lookup",
    "record-after-dispatch": "R39: the write is sent before its dispatch mark is recorded; a crash in between "
                             "leaves an intent that recovery sends again",
    "timeout-as-failure": "R42: a lost answer (timeout) is recorded as a failure and answered DEPENDENCY_TEMPORARY",
    "failed-before-lookup": "R43: recovery records an unknown write failed (not applied) before its lookup answers; "
                            "a crash at the lookup leaves it failed, and the next process sends it again",
}
WRITE_BUGS = ("key-by-call-id", "retry-without-lookup", "record-after-dispatch", "timeout-as-failure",
              "failed-before-lookup")
CONCURRENT_BUGS = tuple(b for b in BUGS if b.startswith("conc-"))

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
    "OUTCOME_UNKNOWN": ("unknown", "WAIT_FOR_RECONCILIATION", "The write was sent but its outcome is not known yet. "
                        "It will be checked before it is sent again; do not repeat it under other arguments."),
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

    def answer(self, call: Json, index: int, run_id: str, start: Any = None) -> dict[str, Json] | None:
        """Answer one request: R1's check order, then replay or execute. With ``start`` (concurrent
        mode), the execution is started by ``start(...)`` instead and None is returned: its answer
        comes when its result lands."""
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
        if not (start is not None and self.bug == "conc-budget-check-then-act"):
            self.executed += 1
        self.per_tool[name] = self.per_tool.get(name, 0) + 1
        principal = self.principal
        if self.bug == "principal-from-args" and isinstance(args.get("principal"), str):
            principal = args["principal"]
        if start is not None:
            start(index, cid, name, args, principal, bound, key)
            return None
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
        if self.rpc.concurrent and isinstance(p.get("concurrency"), dict):
            return ConcurrentBatch(self, p).run()
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
# Concurrent mode (protocol v1.1, SPEC.md section 5)
# --------------------------------------------------------------------------------------------


def overlaps(hints: Json, policy: str) -> bool:
    """R30: may calls to a tool with these MCP hints overlap others? (MCP's defaults when absent.)"""
    h = {"readOnlyHint": False, "idempotentHint": False, "destructiveHint": True}
    if isinstance(hints, dict):
        h.update({k: v for k, v in hints.items() if k in h and isinstance(v, bool)})
    if policy == "all" or h["readOnlyHint"]:
        return True
    return policy == "idempotent" and h["idempotentHint"] and not h["destructiveHint"]


class ConcurrentBatch:
    """One concurrent batch.run: take-up in request order, executions in flight, results landing
    in whatever order the harness releases them, answers committed in request order."""

    def __init__(self, ex: Executor, p: dict[str, Json]) -> None:
        self.ex, self.rpc, self.bug = ex, ex.rpc, ex.bug
        self.mode = p.get("mode", "abort")
        ex.start(p["tools"], p.get("principal", "anonymous"), self.mode,
                 "throw" if self.mode == "abort" else "error-result", p["budget"])
        conc = p["concurrency"]
        self.limit = max(1, int(conc.get("maxConcurrency", 1)))
        policy = conc.get("overlap", "read-only")
        self.barriers = {t["name"] for t in p["tools"] if not overlaps(t.get("annotations"), policy)}
        self.calls = p.get("calls", [])
        self.answers: dict[int, dict[str, Json]] = {}
        self.completed: list[int] = []  # request indices in the order their answers became known
        self.flying: dict[Json, dict[str, Json]] = {}  # JSON-RPC id -> the execution in flight
        self.end: tuple[int, str] | None = None  # the lowest request index whose answer ends the batch

    # -- take-up (R31) -----------------------------------------------------------------------
    def call_id(self, call: Json) -> Json:
        return call.get("id") if isinstance(call, dict) else None

    def is_barrier(self, call: Json) -> bool:
        return isinstance(call, dict) and call.get("name") in self.barriers

    def blocked(self, call: Json) -> bool:
        if not self.flying:
            return False
        if len(self.flying) >= self.limit or any(f["barrier"] for f in self.flying.values()) or self.is_barrier(call):
            return True
        cid = self.call_id(call)  # R33: the same id again while its execution runs waits for it
        return self.bug != "conc-inflight-replay" and any(f["cid"] == cid for f in self.flying.values())

    def start(self, index: int, cid: str, name: str, args: dict[str, Json], principal: str, bound: dict[str, Json],
              key: str) -> None:
        rid = self.rpc.start("tool.execute", {"callId": cid, "name": name, "arguments": args,
                                              "context": {"principal": principal}})
        self.flying[rid] = {"index": index, "cid": cid, "name": name, "bound": bound, "key": key,
                            "barrier": name in self.barriers}

    def known(self, index: int, a: dict[str, Json]) -> None:
        self.answers[index] = a
        self.completed.append(index)
        if a["status"] == "error" and self.ex.escalates(a["code"]) and (self.end is None or index < self.end[0]):
            self.end = (index, a["code"])

    # -- landing (R32) -----------------------------------------------------------------------
    def wait_one(self) -> None:
        """Tell the harness we wait (tool.waiting), then land the result it releases."""
        self.rpc.notify("tool.waiting", {})
        while True:
            msg = self.rpc.read()
            if msg is None:
                sys.exit(0)
            if "method" in msg or msg.get("id") not in self.flying:
                continue  # the answer of a cancelled execution, or nothing of ours: discarded (R35)
            break
        f = self.flying.pop(msg["id"])
        i = f["index"]
        if self.bug == "conc-budget-check-then-act":
            self.ex.executed += 1  # charged only now: two take-ups may both have passed the check
        if "error" in msg:
            data = msg["error"].get("data") or {}
            cat = data.get("category") if isinstance(data, dict) else None
            cat = cat if cat in FAILURES else "INTERNAL_ERROR"
            self.known(i, {"id": f["cid"], "status": "error", "code": cat, "message": CODES[cat][2],
                           "next_action": CODES[cat][1], "request_id": f"batch:{i}"})
            if self.bug == "conc-sibling-failure-drops" or (
                    self.bug == "conc-abort-first-in-time" and self.ex.escalates(cat)):
                self.end = (i, cat) if self.ex.escalates(cat) else self.end
                self.cancel_all()  # like a task group: one failure cancels every sibling
            return
        output = msg["result"]["output"]
        f["bound"]["success"] = (output,)
        self.known(i, {"id": f["cid"], "status": "ok", "output": output})

    def cancel_all(self) -> None:
        for rid in list(self.flying):
            if self.bug != "conc-no-cancel":
                self.rpc.notify("$/cancelRequest", {"id": rid})
            del self.flying[rid]

    def run(self) -> dict[str, Json]:
        for i, call in enumerate(self.calls):
            while self.end is None and self.blocked(call):
                self.wait_one()
            if self.end is not None:
                break  # R34: once an answer that ends the batch is known, nothing more is taken up
            a = self.ex.answer(call, i, "batch", start=self.start)
            if a is not None:
                self.known(i, a)
        # await what is owed: every execution of a request before the abort point (R32, R34)
        while self.flying and (self.end is None or any(f["index"] < self.end[0] for f in self.flying.values())):
            self.wait_one()
        self.cancel_all()  # after the abort point: abandoned, and told so (R35)
        if self.end is not None:
            cut = self.end[0]
            order = self.completed if self.bug in ("conc-completion-order", "conc-abort-first-in-time") \
                else sorted(self.answers)
            kept = [self.answers[j] for j in order if j < cut]
            return {"results": kept, "executed": self.ex.executed, "aborted": {"index": cut, "code": self.end[1]}}
        order = self.completed if self.bug == "conc-completion-order" else sorted(self.answers)
        return {"results": [self.answers[j] for j in order], "executed": self.ex.executed, "aborted": None}


# --------------------------------------------------------------------------------------------
# Write tools (protocol v1.2, SPEC.md section 6): a durable operation ledger in SQLite
# --------------------------------------------------------------------------------------------

LOST = -32002  # tool.execute's answer was lost (a timeout): the write may or may not have been applied


class WritesRun:
    """One ``writes.run``: every request of the run through the operation ledger in ``stateDir``.
    Each state change is one SQLite transaction (autocommit), so a process killed at any point leaves
    the ledger as it was after the last completed change; a new process resumes the run (R46)."""

    def __init__(self, rpc: Rpc, bug: str | None, p: dict[str, Json]) -> None:
        self.rpc, self.bug = rpc, bug
        self.tools = {t["name"]: t for t in p["tools"]}
        self.principal, self.run_id, self.budget = p["principal"], p["runId"], p["budget"]
        self.calls = p["calls"]
        path = os.path.join(p["stateDir"], "ledger.sqlite")
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript("""
            CREATE TABLE IF NOT EXISTS ops (key TEXT PRIMARY KEY, run TEXT, tool TEXT, arguments TEXT,
                                            state TEXT, result TEXT);
            CREATE TABLE IF NOT EXISTS marks (run TEXT, key TEXT);
            CREATE TABLE IF NOT EXISTS answers (run TEXT, idx INTEGER, answer TEXT, PRIMARY KEY (run, idx));""")

    # -- the ledger ----------------------------------------------------------------------------
    def state(self, key: str) -> tuple[str, Json]:
        row = self.db.execute("SELECT state, result FROM ops WHERE key = ?", (key,)).fetchone()
        return (row[0], json.loads(row[1]) if row[1] is not None else None) if row else ("absent", None)

    def put(self, key: str, state: str, call: dict[str, Json] | None = None, result: Json = None) -> None:
        if call is not None:
            self.db.execute("INSERT OR REPLACE INTO ops VALUES (?,?,?,?,?,NULL)",
                            (key, self.run_id, call["name"], json.dumps(call["arguments"]), state))
        else:
            self.db.execute("UPDATE ops SET state = ?, result = ? WHERE key = ?",
                            (state, json.dumps(result) if result is not None else None, key))

    def mark(self, key: str) -> None:
        """The dispatch mark (W02), one transaction with what the budget counts (R45)."""
        self.db.execute("BEGIN IMMEDIATE")
        self.db.execute("UPDATE ops SET state = 'dispatched' WHERE key = ?", (key,))
        self.db.execute("INSERT INTO marks VALUES (?, ?)", (self.run_id, key))
        self.db.execute("COMMIT")

    def marks(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM marks WHERE run = ?", (self.run_id,)).fetchone()[0])

    # -- keys (R37) --------------------------------------------------------------------------
    def key(self, call: dict[str, Json]) -> str:
        if self.bug == "key-by-call-id":
            return call["id"]
        t = self.tools[call["name"]]
        spec = t["key"]
        doc = {"tool": t["name"], "principal": self.principal, "scope": spec.get("scope", "principal"),
               "run": self.run_id if spec.get("scope") == "run" else None,
               "arguments": {a: call["arguments"][a] for a in spec["arguments"]}}
        return hashlib.sha256(canonical(doc).encode()).hexdigest()

    # -- the external system -------------------------------------------------------------------
    def ask(self, method: str, call: dict[str, Json], key: str) -> dict[str, Json]:
        """A request to the harness; the whole response message (result or error)."""
        params = {"name": call["name"], "arguments": call["arguments"],
                  "context": {"principal": self.principal, "idempotencyKey": key}}
        if method == "tool.execute":
            params["callId"] = call["id"]
        self.rpc.next_id += 1
        self.rpc.send({"jsonrpc": "2.0", "id": self.rpc.next_id, "method": method, "params": params})
        msg = self.rpc.read()
        while msg is not None and "method" not in msg and msg.get("id") != self.rpc.next_id:
            msg = self.rpc.read()
        if msg is None:
            sys.exit(0)
        return msg

    def lookup(self, key: str, call: dict[str, Json]) -> str:
        """Reconcile an unknown key (R43): its state afterwards."""
        if self.tools[call["name"]].get("reconcile") == "none":
            return "unknown"
        msg = self.ask("tool.lookup", call, key)
        res = msg.get("result")
        if not isinstance(res, dict):
            return "unknown"  # unavailable (W08)
        if res.get("applied") is True:
            self.put(key, "confirmed", result=res.get("output"))
            return "confirmed"
        self.put(key, "failed")
        return "failed"

    def send(self, key: str, call: dict[str, Json]) -> dict[str, Json]:
        if self.bug != "record-after-dispatch":
            self.mark(key)  # durable before the send (R39)
        msg = self.ask("tool.execute", call, key)
        if self.bug == "record-after-dispatch":
            self.mark(key)
        if "result" in msg:
            out = msg["result"].get("output") if isinstance(msg["result"], dict) else None
            self.put(key, "confirmed", result=out)
            return {"id": call["id"], "status": "ok", "output": out}
        err = msg.get("error") or {}
        if err.get("code") == LOST:
            if self.bug == "timeout-as-failure":
                self.put(key, "failed")
                return self.error(call, "DEPENDENCY_TEMPORARY")
            self.put(key, "unknown")
            return self.error(call, "OUTCOME_UNKNOWN")
        data = err.get("data") if isinstance(err.get("data"), dict) else {}
        cat = data.get("category") if data.get("category") in FAILURES else "INTERNAL_ERROR"
        self.put(key, "failed")
        return self.error(call, cat)

    def error(self, call: dict[str, Json], code: str) -> dict[str, Json]:
        return {"id": call["id"], "status": "error", "code": code, "message": CODES[code][2],
                "next_action": CODES[code][1]}

    # -- one request ---------------------------------------------------------------------------
    def decide(self, call: dict[str, Json]) -> dict[str, Json]:
        key = self.key(call)
        for _ in range(4):
            state, result = self.state(key)
            if state == "confirmed":
                return {"id": call["id"], "status": "ok", "output": result}  # from the ledger (R44)
            if state in ("unknown", "dispatched") and self.bug != "retry-without-lookup":
                if state == "dispatched":
                    self.put(key, "unknown")
                if self.lookup(key, call) == "unknown":
                    return self.error(call, "OUTCOME_UNKNOWN")
                continue
            if state == "intent":
                return self.send(key, call)  # an intent without a mark was never sent (R39)
            if self.marks() >= self.budget:
                return self.error(call, "BUDGET_EXHAUSTED")
            self.put(key, "intent", call)
            return self.send(key, call)
        return self.error(call, "OUTCOME_UNKNOWN")

    def reconcile_all(self, recovery: bool = False) -> None:
        if self.bug == "retry-without-lookup":
            return
        rows = self.db.execute("SELECT key, tool, arguments FROM ops WHERE run = ? AND state = 'unknown' ORDER BY key",
                               (self.run_id,)).fetchall()
        for key, tool, arguments in rows:
            call = {"id": "", "name": tool, "arguments": json.loads(arguments)}
            if recovery and self.bug == "failed-before-lookup":
                self.put(key, "failed")  # the bug: settled before the answer (a crash at the lookup keeps it)
                if self.lookup(key, call) == "unknown":
                    self.put(key, "unknown")
                continue
            self.lookup(key, call)

    def run(self) -> dict[str, Json]:
        # recovery (R46): a dispatch mark without a result is an unknown outcome; reconcile them all first
        if self.bug != "retry-without-lookup":
            self.db.execute("UPDATE ops SET state = 'unknown' WHERE run = ? AND state = 'dispatched'", (self.run_id,))
        self.reconcile_all(recovery=True)
        results = []
        for i, call in enumerate(self.calls):
            row = self.db.execute("SELECT answer FROM answers WHERE run = ? AND idx = ?", (self.run_id, i)).fetchone()
            if row is not None:
                results.append(json.loads(row[0]))  # answered before a restart
                continue
            a = self.decide(call)
            self.db.execute("INSERT OR IGNORE INTO answers VALUES (?, ?, ?)", (self.run_id, i, json.dumps(a)))
            results.append(a)
        # the end of the run (R46): never-sent intents are abandoned, unknown outcomes reconciled once more
        self.db.execute("UPDATE ops SET state = 'failed' WHERE run = ? AND state = 'intent'", (self.run_id,))
        self.reconcile_all()
        unknown = [r[0] for r in self.db.execute("SELECT key FROM ops WHERE run = ? AND state IN ('unknown', "
                                                 "'dispatched') ORDER BY key", (self.run_id,))]
        self.db.close()
        return {"results": results, "status": "TRUNCATED" if unknown else "COMPLETED",
                "stopReason": "UNRECONCILED" if unknown else None, "unreconciled": unknown}


# --------------------------------------------------------------------------------------------
# JSON-RPC 2.0 plumbing over stdin/stdout, one message per line
# --------------------------------------------------------------------------------------------


class Rpc:
    def __init__(self, concurrent: bool = False) -> None:
        self.next_id = 0
        self.wrong_id = False
        self.executor: Executor | None = None
        self.concurrent = concurrent

    def start(self, method: str, params: Json) -> int:
        """Send a request without waiting for its answer (concurrent mode); its JSON-RPC id."""
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        return self.next_id

    def notify(self, method: str, params: Json) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

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
        while msg is not None and "method" not in msg and msg.get("id") != self.next_id:
            msg = self.read()  # the late answer of a cancelled execution: discarded (R35)
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
            if method is None:
                continue  # a response nobody waits for (a cancelled execution's): ignored (C6)
            try:
                if method == "initialize":
                    caps = {"batch": True, "loop": True, "writes": True}
                    if self.concurrent:
                        caps["concurrency"] = True
                    result: Json = {"name": "example-python", "version": "1.1", "capabilities": caps}
                elif method == "batch.run":
                    result = ex.batch_run(params)
                elif method == "loop.run":
                    result = ex.loop_run(params)
                elif method == "writes.run":
                    result = WritesRun(self, bug, params).run()
                elif method == "shutdown":
                    self.send({"jsonrpc": "2.0", "id": rid, "result": None})
                    return
                else:
                    self.send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "method not found"}})
                    continue
            except (KeyError, TypeError, ValueError, sqlite3.Error) as exc:
                print(f"executor: bad params: {exc!r}", file=sys.stderr, flush=True)
                self.send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": "invalid params"}})
                continue
            if self.wrong_id:
                self.wrong_id = False
                rid = (rid if isinstance(rid, int) else 0) + 1000
            self.send({"jsonrpc": "2.0", "id": rid, "result": result})


def main() -> int:
    about = " ".join(__doc__.split("\n\n")[:2]).replace("\n", " ").replace("``", "")
    ap = argparse.ArgumentParser(description=about)
    ap.add_argument("--bug", choices=sorted(BUGS), help="introduce one deliberate bug")
    ap.add_argument("--concurrent", action="store_true",
                    help="protocol v1.1: announce the concurrency capability and run overlapping calls concurrently")
    args = ap.parse_args()
    if args.bug in CONCURRENT_BUGS and not args.concurrent:
        ap.error(f"--bug {args.bug} needs --concurrent")
    Rpc(args.concurrent).serve(args.bug)
    return 0


if __name__ == "__main__":
    sys.exit(main())
