"""The judge of a writes step (spec/PROTOCOL.md section 8, SPEC.md section 6).

The reference is the pure core's decisions (:mod:`loopspec.core.writes`: ``on_request``,
``on_response``, ``on_lookup``, ``on_recovery``, ``op_step``), run request by request on the step's
calls and fed what the harness observed — the outcome of each dispatch, the answer of each lookup,
each restart of the implementation's process. Lookups may come at any time (they send nothing): each
one the implementation makes is taken as the reconciliation it is. A reconciliation the reference
needs and the implementation did not make is answered as the harness would have answered it.

The first divergence by request index is reported: a dispatch the reference does not make (R37,
R39, R43, R44, R45), an answer other than the reference's (R41–R44), the end of the run (R46), then
protocol findings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core import writes as w
from .batch import _rules_by_id, describe_answer, describe_call, same_json
from .verdict import PROTOCOL_CODES, TraceError, Verdict, Violation, _need, default_spec

__all__ = ["judge_writes", "parse_writes_config"]

Json = Any

#: The invariant of writes.toml each kind of finding shows.
_INVARIANT = {
    "R37": "INV-W-ONE-EFFECT", "R44": "INV-W-ONE-EFFECT", "R43": "INV-W-NO-BLIND-REDISPATCH",
    "R39": "INV-W-DURABLE-BEFORE-SEND", "R42": "INV-W-LEDGER-TRUTH", "R41": "INV-W-LEDGER-TRUTH",
    "R45": "INV-W-DISPATCH-BUDGET", "R46": "INV-W-RECONCILED",
}


@dataclass
class _Op:
    state: str = "absent"
    result: Json = None
    key: Json = None  # the key the implementation sent with the op's last dispatch
    cut_by_restart: bool = False  # its last dispatch's answer was lost with a killed process
    lookup_cut: bool = False  # its last lookup was never answered: the process was killed at it (PROTOCOL.md W3)


@dataclass
class _Env:
    """What the harness's external system holds, rebuilt from the trace (to answer a lookup the
    implementation did not make)."""

    record: dict[str, Json] = field(default_factory=dict)
    lookups: int = 0
    outages: frozenset[int] = frozenset()

    def would_answer(self, key: Json, reconcile: str) -> tuple[str, Json]:
        if reconcile == "none" or (self.lookups + 1) in self.outages:
            return "unavailable", None
        if isinstance(key, str) and key in self.record:
            return "applied", self.record[key]
        return "not_applied", None


@dataclass
class _Found:
    index: int
    rule: str
    kind: str
    expected: Json
    observed: Json
    then: str


def _answer(cid: Json, status: str, value: Json = None) -> dict[str, Json]:
    if status == "ok":
        return {"id": cid, "status": "ok", "output": value}
    return {"id": cid, "status": "error", "code": value}


def _same_answer(exp: Mapping[str, Json], obs: Json) -> bool:
    if not isinstance(obs, dict) or obs.get("id") != exp["id"] or obs.get("status") != exp["status"]:
        return False
    if exp["status"] == "ok":
        return "output" in obs and same_json(obs["output"], exp["output"])
    return obs.get("code") == exp["code"]


def _tools(cfg: Mapping[str, Json]) -> dict[str, tuple[w.WriteTool, Mapping[str, Json]]]:
    from ..core.writes import write_tool

    raw = cfg.get("tools")
    _need(isinstance(raw, list), "trace.config.tools", "must be a list")
    out = {}
    for n, t in enumerate(raw):
        wt = write_tool(t)
        _need(wt is not None, f"trace.config.tools[{n}]",
              "must be a write: {name, kind, reconcile: record|lookup|none, key: {arguments: [...], scope}}")
        assert wt is not None
        out[wt.name] = (wt, t)
    return out


def parse_writes_config(cfg: Json, calls: Json) -> tuple[dict[str, tuple[w.WriteTool, Mapping[str, Json]]], str,
                                                          int, str]:
    """(tools, principal, budget, run id) of a writes step; :class:`TraceError` names the bad field."""
    from ..core.writes import RUN_ID

    _need(isinstance(cfg, dict), "trace.config", "must be an object")
    assert isinstance(cfg, dict)
    tools = _tools(cfg)
    principal = cfg.get("principal")
    _need(isinstance(principal, str), "trace.config.principal", "must be a string")
    budget = cfg.get("budget")
    _need(isinstance(budget, int) and not isinstance(budget, bool) and budget >= 0, "trace.config.budget",
          "must be a non-negative integer")
    run_id = cfg.get("runId", RUN_ID)
    _need(isinstance(run_id, str), "trace.config.runId", "must be a string")
    _need(isinstance(calls, list), "trace.calls", "must be a list")
    assert isinstance(calls, list)
    for n, c in enumerate(calls):
        _need(isinstance(c, dict) and isinstance(c.get("id"), str) and isinstance(c.get("name"), str)
              and c.get("name") in tools
              and isinstance(c.get("arguments"), dict), f"trace.calls[{n}]",
              "must be a call {id, name, arguments} of a tool of the step")
        wt = tools[c["name"]][0]
        for a in wt.key_arguments:
            v = c["arguments"].get(a)
            _need(isinstance(v, str | int) and not isinstance(v, bool), f"trace.calls[{n}].arguments.{a}",
                  "must be a string or an integer (a key argument, R37)")
    ids = [c["id"] for c in calls]
    _need(len(set(ids)) == len(ids), "trace.calls", "call ids must be distinct in a writes step")
    return tools, principal, budget, run_id  # type: ignore[return-value]


def judge_writes(trace: Mapping[str, Json], *, spec: Any = None) -> Verdict:
    from ..core.writes import business_key

    spec = spec or default_spec()
    cfg = trace.get("config")
    calls = trace.get("calls")
    tools, principal, budget, run_id = parse_writes_config(cfg, calls)
    assert isinstance(cfg, dict) and isinstance(calls, list)
    events = trace.get("events")
    _need(isinstance(events, list) and bool(events), "trace.events", "must be a non-empty list")
    assert isinstance(events, list)
    env_raw = trace.get("environment") if isinstance(trace.get("environment"), dict) else {}
    raw_outages = env_raw.get("outages", [])
    _need(isinstance(raw_outages, list), "trace.environment.outages", "must be a list of lookup numbers")
    env = _Env(outages=frozenset(n for n in raw_outages if isinstance(n, int) and not isinstance(n, bool)))
    response: Json = None
    perr: Json = None
    actions: list[Mapping[str, Json]] = []
    for n, ev in enumerate(events):
        _need(isinstance(ev, dict) and ev.get("type") in ("execute", "lookup", "restart", "response", "protocol-error"),
              f"trace.events[{n}]", "must be an execute, lookup, restart, response or protocol-error event")
        _need(response is None and perr is None, f"trace.events[{n}]", "no event may follow the response")
        if ev["type"] == "response":
            response = ev.get("result")
        elif ev["type"] == "protocol-error":
            _need(str(ev.get("code")) in PROTOCOL_CODES, f"trace.events[{n}].code", "must be P1..P7")
            perr = ev
        else:
            if ev["type"] != "restart":
                _need(isinstance(ev.get("outcome"), dict), f"trace.events[{n}].outcome", "must be an object")
                _need(ev.get("business") is None or isinstance(ev.get("business"), str), f"trace.events[{n}].business",
                      "must be a string or null (the harness's business key)")
            actions.append(ev)
    _need(response is not None or perr is not None, "trace.events", "must end with a response or a protocol error")

    bkeys = [business_key(tools[c["name"]][1], c["arguments"], principal, run_id) for c in calls]
    ops: dict[str, _Op] = {}
    expected: list[dict[str, Json] | None] = [None] * len(calls)
    via: list[str] = [""] * len(calls)
    marks = 0
    effects: dict[str, int] = {}
    pos = 0
    found: _Found | None = None
    asked: set[str] = set()  # keys looked up since the reference last decided a request
    owner: dict[str, tuple[str, int]] = {}  # a key sent -> the business key and request it was first sent for

    def take_lookup(ev: Mapping[str, Json]) -> None:
        env.lookups += 1
        bk = ev.get("business")
        op = ops.get(bk) if isinstance(bk, str) else None
        if op is None or op.state != "unknown" or ev.get("key") != op.key:
            return  # nothing to reconcile (harmless: a lookup sends nothing)
        status = ev["outcome"].get("status")
        if status == "restart":  # cut: no answer came, so nothing is recorded and the key stays unknown (R43)
            op.lookup_cut = True
            return
        asked.add(bk)  # type: ignore[arg-type]
        op.lookup_cut = False
        res: w.Lookup = "applied" if status == "applied" else "not_applied" if status == "not-applied" else "unavailable"
        op.state = w.op_step(op.state, w.on_lookup(res))
        if res == "applied":
            op.result = ev["outcome"].get("output")
        if res != "unavailable":
            op.cut_by_restart = False

    def recover() -> None:
        """At a restart event: the new process's recovery (R46) — a dispatch mark without a result is an unknown
        outcome, and every unknown operation is reconciled (one lookup each) before anything else. A lookup of
        the recovery cut by a restart (PROTOCOL.md W3) leaves its key unknown, and the next process recovers
        again."""
        nonlocal pos
        while pos < len(actions) and actions[pos]["type"] == "restart":
            pos += 1
            for other in ops.values():
                t = w.on_recovery(other.state)
                if t is not None:
                    other.state = w.op_step(other.state, t)
            pending = {k for k, o in ops.items() if o.state == "unknown"}
            last: Json = None
            while pos < len(actions) and actions[pos]["type"] == "lookup" and (
                    actions[pos].get("business") in pending
                    or (actions[pos].get("business") == last and _still_unknown(last))):
                ev = actions[pos]  # each unknown key once, again right after an unavailable answer (a retry, R23)
                last = ev["business"]
                pending.discard(last)
                take_lookup(ev)
                pos += 1
                if _cut(ev):
                    break
        asked.clear()

    def drain(until: str | None = None, retries: bool = False) -> None:
        """Take the lookups that come next — up to and including the first of key ``until`` that answers (a
        request's own reconciliation is one lookup, R43, or several when ``retries``: the implementation answered
        the request as if a retry of an unavailable lookup had answered it — a lookup is an attempt, R23, R45; a
        later one of the same key belongs to what comes after). A lookup of a key whose outcome is known changes
        nothing and is taken wherever it comes (PROTOCOL.md W3). A lookup cut by a restart is followed by the new
        process's recovery."""
        nonlocal pos
        while pos < len(actions) and actions[pos]["type"] == "lookup":
            ev = actions[pos]
            mine = ops.get(until) if until is not None else None
            if until is not None and ev.get("business") == until and until in asked and mine is not None \
                    and mine.state == "unknown" and not retries:
                return
            other = ops.get(ev.get("business")) if isinstance(ev.get("business"), str) else None
            if until is not None and ev.get("business") != until and other is not None and other.state == "unknown":
                return  # another unknown key's lookup: its own request's, or the end of the run's (PROTOCOL.md W3)
            take_lookup(ev)
            pos += 1
            if _cut(ev):
                recover()
                continue
            if until is not None and ev.get("business") == until:
                asked.add(until)

    def _still_unknown(bk: Json) -> bool:
        op = ops.get(bk) if isinstance(bk, str) else None
        return op is not None and op.state == "unknown"

    def note_remote(ev: Mapping[str, Json]) -> None:
        out = ev["outcome"]
        if out.get("applied") is True:
            bk = ev.get("business")
            if isinstance(bk, str):
                effects[bk] = effects.get(bk, 0) + 1
            if isinstance(ev.get("key"), str):
                env.record.setdefault(ev["key"], out.get("output"))

    def extra_dispatch(i: int, ev: Mapping[str, Json], op: _Op | None, why: str) -> _Found:
        """A dispatch the reference does not make at request i: which rule it breaks."""
        obs = {"dispatch": _exec_json(ev)}
        st = op.state if op is not None else "absent"
        if why == "budget":
            return _Found(i, "R45", "dispatch-past-budget", {"answer": "BUDGET_EXHAUSTED", "dispatch": None}, obs,
                          f"the budget of {budget} dispatch(es) was spent (R45: budgets count dispatches), so request "
                          f"#{i} is answered BUDGET_EXHAUSTED and nothing is sent; the implementation sent it")
        if op is not None and op.key is not None and ev.get("key") != op.key:
            return _Found(i, "R37", "key-not-business", {"dispatch": None, "key": op.key}, obs,
                          f"request #{i} is the same business write as an earlier one (the same key arguments, "
                          f"principal and tool; its operation is {st}), so it has the same idempotency key (R37); the "
                          f"implementation sent it under another key ({ev.get('key')!r}, not {op.key!r}), so the "
                          f"external system could not know it was the same write")
        if st == "confirmed":
            return _Found(i, "R44", "confirmed-redispatched", {"dispatch": None, "answer": "replay from the ledger"},
                          obs, f"the key of request #{i} is confirmed, so it is answered from the ledger with the "
                               f"recorded result and nothing is sent (R44, W09); the implementation sent it again")
        if op is not None and op.lookup_cut:
            return _Found(i, "R43", "resent-after-cut-lookup", {"dispatch": None, "lookup": op.key}, obs,
                          f"the outcome of the key of request #{i} is unknown and the lookup that was to settle it "
                          f"never answered: the process was killed at it. So the key is still unknown, and the next "
                          f"process's recovery asks again before anything else (R46); only a lookup's answer records "
                          f"a reconciliation (R43: applied → confirmed, not applied → failed, W06/W07). The "
                          f"implementation sent it again without asking — it had recorded the key settled before the "
                          f"answer came")
        if op is not None and op.cut_by_restart:
            return _Found(i, "R39", "resent-after-restart", {"dispatch": None, "lookup": op.key}, obs,
                          f"the key of request #{i} was sent by a process that was killed before the answer came, so "
                          f"recovery must find its dispatch mark (written before the send, R39) and reconcile it by "
                          f"a lookup before anything else (R43, R46); the implementation sent it again without "
                          f"asking, as if the write had never been sent — the mark was not durable before the send "
                          f"(or recovery ignored it)")
        return _Found(i, "R43", "blind-redispatch", {"dispatch": None, "lookup": op.key if op else None}, obs,
                      f"the outcome of the key of request #{i} is unknown (its answer was lost), so it is never sent "
                      f"again before the external system has been asked (R43); the implementation sent it again "
                      f"without a lookup")

    i = 0
    guard = 0
    while i < len(calls) and found is None:
        guard += 1
        if guard > 16 * (len(calls) + len(actions) + 4):
            break
        call = calls[i]
        wt = tools[call["name"]][0]
        bk = bkeys[i]
        if bk is None:
            raise TraceError(f"trace.calls[{i}].arguments", "must hold every key argument of its tool")
        drain(bk, retries=_answered_known(response, i))
        op = ops.get(bk)
        st = op.state if op is not None else "absent"
        action = w.on_request(st, wt.reconcile)
        ev = actions[pos] if pos < len(actions) else None
        mine = ev is not None and ev["type"] == "execute" and ev.get("business") == bk and ev.get("callId") == call["id"]
        if action == "replay":
            if mine:
                found = extra_dispatch(i, ev, op, "replay")  # type: ignore[arg-type]
                break
            assert op is not None
            expected[i], via[i] = _answer(call["id"], "ok", op.result), "replay"
            i += 1
            asked.clear()
            continue
        if action in ("reconcile", "answer_unknown"):
            assert op is not None
            if mine:
                found = extra_dispatch(i, ev, op, "unknown")  # type: ignore[arg-type]
                break
            if action == "reconcile" and bk not in asked:
                res, out = env.would_answer(op.key, wt.reconcile)  # the lookup it should have made
                op.state = w.op_step(op.state, w.on_lookup(res))  # type: ignore[arg-type]
                if res == "applied":
                    op.result = out
                asked.add(bk)
                if res != "unavailable":
                    via[i] = "reconciled"
                    continue
            expected[i], via[i] = _answer(call["id"], "error", w.OUTCOME_UNKNOWN), via[i] or "unknown"
            i += 1
            asked.clear()
            continue
        # dispatch: a new attempt (W01, W02), reserved from the budget (R45)
        if marks >= budget:
            if mine:
                found = extra_dispatch(i, ev, op, "budget")  # type: ignore[arg-type]
                break
            expected[i], via[i] = _answer(call["id"], "error", "BUDGET_EXHAUSTED"), "budget"
            i += 1
            asked.clear()
            continue
        if not mine:
            if perr is not None and ev is None:
                break  # the process failed: the protocol finding says what happened
            obs = {"dispatch": _exec_json(ev) if ev is not None and ev["type"] == "execute" else None}
            found = _Found(i, "R39" if ev is None or ev["type"] != "restart" else "R40", "missing-dispatch",
                           {"dispatch": describe_call(call)}, obs,
                           f"request #{i}'s key is {st}, so it is a new attempt: its intent and dispatch mark are "
                           f"recorded and the write is sent (R39, W01, W02); the implementation "
                           + ("did not send it" if obs["dispatch"] is None else "sent another request's write instead"))
            break
        assert ev is not None
        pos += 1
        marks += 1
        note_remote(ev)
        sent = ev.get("key")
        first = owner.setdefault(sent, (bk, i)) if isinstance(sent, str) else (bk, i)
        if first[0] != bk:  # R37: one idempotency key for two business writes
            out = ev["outcome"]
            took = ("answered the first one's result without applying it" if out.get("status") == "ok"
                    and out.get("applied") is not True else "took it for the same write")
            found = _Found(i, "R37", "key-shared", {"dispatch": describe_call(call), "key": "a key of its own"},
                           {"dispatch": _exec_json(ev), "sharedWith": first[1]},
                           f"request #{i} is another business write than request #{first[1]} (other key arguments, "
                           f"principal or tool), so it has an idempotency key of its own (R37); the implementation "
                           f"sent it under the key of request #{first[1]} ({str(sent)[:16]}…), and the external "
                           f"system {took}")
            break
        if ev.get("principal") != principal or not same_json(ev.get("arguments"), call["arguments"]):
            found = _Found(i, "R16" if ev.get("principal") != principal else "R39", "wrong-dispatch",
                           {"dispatch": describe_call(call), "principal": principal}, {"dispatch": _exec_json(ev)},
                           f"request #{i} is sent as proposed, with the trusted principal {principal!r}")
            break
        op = ops.setdefault(bk, _Op())
        op.state = w.op_step(w.op_step(op.state, "record_intent"), "mark_dispatched")
        op.key = ev.get("key")
        op.cut_by_restart = False
        out = ev["outcome"]
        status = out.get("status")
        if status == "restart":
            op.cut_by_restart = True
            op.lookup_cut = False
            nxt = actions[pos] if pos < len(actions) else None
            if nxt is None or nxt["type"] != "restart":
                break  # the new process never started: the protocol finding says so
            recover()
            continue  # the same request again, in the new process
        response_kind: w.Response = "applied" if status == "ok" else "rejected" if status == "error" else "lost"
        op.state = w.op_step(op.state, w.on_response(response_kind))
        via[i] = "sent"
        if response_kind == "applied":
            op.result = out.get("output")
            expected[i] = _answer(call["id"], "ok", op.result)
        elif response_kind == "rejected":
            expected[i] = _answer(call["id"], "error", out.get("category"))
        else:
            expected[i] = _answer(call["id"], "error", w.OUTCOME_UNKNOWN)
        i += 1
        asked.clear()

    # the end of the run (R46): reconcile what is unknown, then the status
    unknown: list[str] = []
    if found is None and i >= len(calls):
        drain()
        for bk, op in ops.items():
            if op.state == "unknown" and bk not in asked:
                wt = next((t for t, _raw in tools.values()), None)
                rec = next((tools[c["name"]][0].reconcile for c, k in zip(calls, bkeys, strict=True) if k == bk),
                           wt.reconcile if wt else "none")
                res, out = env.would_answer(op.key, rec)
                op.state = w.op_step(op.state, w.on_lookup(res))  # type: ignore[arg-type]
                if res == "applied":
                    op.result = out
        unknown = sorted(bk for bk, op in ops.items() if op.state == "unknown")
        if pos < len(actions):
            ev = actions[pos]
            if ev["type"] == "execute":
                bk = ev.get("business")
                op = ops.get(bk) if isinstance(bk, str) else None
                idx = next((k for k, c in enumerate(calls) if c["id"] == ev.get("callId")), len(calls) - 1)
                found = extra_dispatch(idx, ev, op, "unknown" if op is not None and op.state == "unknown" else "replay")
    # the keys as the implementation sent them (its own derivation, R37): what its outcome lists (PROTOCOL.md W1)
    unknown_keys = sorted({str(ops[bk].key) for bk in unknown})
    exp_status = {"status": "TRUNCATED" if unknown else "COMPLETED",
                  "stopReason": "UNRECONCILED" if unknown else None, "unreconciled": unknown_keys}

    # answers below the first divergent dispatch come first (the lowest request index)
    shape = _shape_error(response, len(calls)) if response is not None else None
    upto = found.index if found is not None else len(calls)
    answer_found: _Found | None = None
    if response is not None and shape is None:
        results = response["results"]
        for k in range(min(upto, len(calls))):
            exp = expected[k]
            if exp is not None and not _same_answer(exp, results[k]):
                answer_found = _answer_finding(k, exp, results[k], via[k])
                break
    if answer_found is not None:
        found = answer_found
    if found is None and response is not None and shape is not None:
        found = _Found(len(calls), "P5", "bad-result", {"result": "a writes.run result"}, response, shape)
    if found is None and perr is not None:
        code = str(perr["code"])
        found = _Found(len(calls), code, str(perr.get("kind", "protocol")), {"response": "a writes.run result"},
                       dict(perr), f"{PROTOCOL_CODES[code]}: {perr.get('detail', '')}")
    if found is None and response is not None and i >= len(calls):
        listed = response.get("unreconciled") or []
        obs_status = {"status": response.get("status"), "stopReason": response.get("stopReason"),
                      "unreconciled": sorted(listed) if isinstance(listed, list)
                      and all(isinstance(k, str) for k in listed) else listed}
        if obs_status != exp_status:
            wrong = [k for k in listed if k not in unknown_keys] if isinstance(listed, list) else []
            missing = [k for k in unknown_keys if not isinstance(listed, list) or k not in listed]
            found = _Found(len(calls), "R46", "end-of-run", exp_status, obs_status,
                           f"after the end-of-run reconciliation {len(unknown)} write(s) of the run are still unknown, "
                           f"so the run ends {exp_status['status']}" + (" with stop reason UNRECONCILED and exactly "
                                                                        "those keys listed" if unknown else "")
                           + " (R46)" + _listing(wrong, missing))
    index_of = {c["id"]: k for k, c in enumerate(calls)}
    observed = {"executions": [{"request": index_of.get(e.get("callId")) if isinstance(e.get("callId"), str) else None,
                                **_exec_json(e)} for e in actions if e["type"] == "execute"],
                "lookups": sum(1 for e in actions if e["type"] == "lookup"),
                "restarts": sum(1 for e in actions if e["type"] == "restart"),
                "effects": effects, "response": response}
    exp_doc = {"answers": expected, **exp_status}
    if found is None:
        return Verdict(None, exp_doc, observed)
    return Verdict(_violation(spec, found, trace, calls, effects), exp_doc, observed)


def _listing(wrong: Sequence[Json], missing: Sequence[str]) -> str:
    parts = []
    if wrong:
        parts.append("it lists " + ", ".join(repr(k) if not isinstance(k, str) else f"{k[:16]}…" for k in wrong[:3])
                     + (" (not a key of the run's unknown writes)" if len(wrong) == 1 else
                        " (not keys of the run's unknown writes)"))
    if missing:
        parts.append("it leaves out " + ", ".join(f"{k[:16]}…" for k in missing[:3]))
    return ("; " + " and ".join(parts)) if parts else ""


def _answered_known(response: Json, i: int) -> bool:
    """Did the implementation answer request ``i`` with something other than OUTCOME_UNKNOWN? Then the lookups of
    its key that follow an unavailable one are its retries (R23), not a later request's or the end of the run's."""
    results = response.get("results") if isinstance(response, dict) else None
    if not isinstance(results, list) or i >= len(results) or not isinstance(results[i], dict):
        return False
    return results[i].get("code") != w.OUTCOME_UNKNOWN


def _cut(ev: Mapping[str, Json]) -> bool:
    """Is this lookup one the harness never answered, killing the process instead (PROTOCOL.md W3)?"""
    return isinstance(ev.get("outcome"), dict) and ev["outcome"].get("status") == "restart"


def _exec_json(ev: Mapping[str, Json] | None) -> Json:
    if ev is None:
        return None
    return {k: ev.get(k) for k in ("callId", "name", "arguments", "principal", "key", "process", "outcome")}


def _shape_error(result: Json, n: int) -> str | None:
    if not isinstance(result, dict):
        return "result: must be an object {results, status, stopReason, unreconciled}"
    if not isinstance(result.get("results"), list):
        return "result.results: must be a list"
    if len(result["results"]) != n:
        return f"result.results: must hold one answer per request ({n}), got {len(result['results'])}"
    if result.get("status") not in ("COMPLETED", "TRUNCATED"):
        return "result.status: must be COMPLETED or TRUNCATED"
    if not isinstance(result.get("unreconciled", []), list):
        return "result.unreconciled: must be a list"
    return None


def _answer_finding(k: int, exp: Mapping[str, Json], obs: Json, why: str) -> _Found:
    code = obs.get("code") if isinstance(obs, dict) else None
    if exp.get("code") == w.OUTCOME_UNKNOWN:
        return _Found(k, "R42", "unknown-not-answered-unknown", exp, obs,
                      f"request #{k}'s write has an outcome nobody knows (its answer was lost, or its lookup could not "
                      f"answer), so it is answered OUTCOME_UNKNOWN — not a failure, not a success (R42); the "
                      f"implementation answered {describe_answer(obs)}")
    if why == "reconciled":
        return _Found(k, "R43", "not-reconciled", exp, obs,
                      f"request #{k}'s key had an unknown outcome; a lookup settles it (R43: applied → the recorded "
                      f"result, not applied → a new attempt) before the request is answered; the implementation "
                      f"answered {describe_answer(obs)}" + (" without asking" if code == w.OUTCOME_UNKNOWN else ""))
    if why == "replay":
        return _Found(k, "R44", "replay-misanswered", exp, obs,
                      f"request #{k}'s key is confirmed, so it is answered from the ledger with the recorded result "
                      f"(R44); the implementation answered {describe_answer(obs)}")
    if why == "budget":
        return _Found(k, "R45", "budget-misanswered", exp, obs,
                      f"the run's dispatch budget is spent, so request #{k} is answered BUDGET_EXHAUSTED (R45); the "
                      f"implementation answered {describe_answer(obs)}")
    return _Found(k, "R41", "answer-not-definite", exp, obs,
                  f"request #{k}'s write got a definite answer from the external system, which is its answer (R41); "
                  f"the implementation answered {describe_answer(obs)}")


def _script_text(trace: Mapping[str, Json]) -> list[str]:
    lines = []
    for ev in trace.get("events", []):
        if not isinstance(ev, dict):
            continue
        t = ev.get("type")
        if t == "execute":
            o = ev.get("outcome") or {}
            what = {"ok": "applied, answered" if o.get("applied") else "answered from the record (not applied again)",
                    "error": f"rejected ({o.get('category')})",
                    "lost": f"{'applied' if o.get('applied') else 'not applied'}, answer lost (timeout)",
                    "restart": f"{'applied' if o.get('applied') else 'not applied'}, then the process was killed"
                    }.get(str(o.get("status")), "?")
            lines.append(f"  dispatch of {ev.get('callId')!r} (process {ev.get('process')}, key "
                         f"{str(ev.get('key'))[:16]}…): {what}")
        elif t == "lookup":
            o = ev.get("outcome") or {}
            what = "no answer, the process was killed" if o.get("status") == "restart" else o.get("status")
            lines.append(f"  lookup of key {str(ev.get('key'))[:16]}… (process {ev.get('process')}): {what}")
        elif t == "restart":
            lines.append(f"  restart: process {ev.get('process')} resumes the run on the same state directory")
    return lines


def _violation(spec: Any, f: _Found, trace: Mapping[str, Json], calls: Sequence[Json],
               effects: Mapping[str, int]) -> Violation:
    cfg = trace["config"]
    tools = ", ".join(f"{t.get('name')} (reconcile {t.get('reconcile')}, key {t.get('key', {}).get('arguments')})"
                      for t in cfg.get("tools", []) if isinstance(t, dict))
    lines = [f"Let a run of write tools {tools}, budget {cfg.get('budget')}, principal {cfg.get('principal')!r}, "
             f"propose"]
    lines += [f"  #{k} {describe_call(c)}" for k, c in enumerate(calls[:12])]
    lines.append("and the external system (the harness) answer:")
    lines += _script_text(trace) or ["  (nothing was sent)"]
    lines.append(f"Then {f.then}.")
    if any(n > 1 for n in effects.values()):
        lines.append("The external system applied one business write more than once (INV-W-ONE-EFFECT).")
    invariant = _INVARIANT.get(f.rule)
    seen = {invariant} if invariant is not None else set()
    if any(n > 1 for n in effects.values()):
        seen.add("INV-W-ONE-EFFECT")
    violated = tuple(sorted(seen))
    return Violation(f.rule, f.kind, f.index, f.expected, f.observed, "\n".join(lines), invariant, violated, None,
                     _rules_by_id(spec).get(f.rule, ()))
