"""The oracle's golden corpus: inputs (written by :func:`write_inputs`) and how each is checked.

Must-pass ledgers are genuine reference-engine runs; must-fail ledgers are those runs mutated the
way a buggy implementation would record them (tests/oracle_mutations.py); transcripts are
hand-written in each provider's documented shape. ``MANIFEST.json`` lists every case with the exit
code and the rules its violations must name: regenerating can change wording, never the verdicts.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from tests.oracle_mutations import MUTATIONS, interleave, mutated, ndjson, scenarios

GOLDEN = Path(__file__).parent / "golden" / "oracle"

Event = dict[str, Any]


def _chat(*messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", **extra, "messages": list(messages)}


def _tc(cid: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def _asst(*calls: dict[str, Any], content: str | None = None) -> dict[str, Any]:
    m: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        m["tool_calls"] = list(calls)
    return m


def _tool(cid: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": cid, "content": content}


SYSTEM = {"role": "system", "content": "You look up merchants."}
USER = {"role": "user", "content": "When does Harbour Tea House open?"}


def chat_cases() -> dict[str, Any]:
    good = _chat(
        SYSTEM, USER,
        _asst(_tc("call_1", "get_merchant", {"merchantId": "1001"}), _tc("call_2", "list_merchants", {})),
        _tool("call_1", '{"merchantId": "1001", "hours": "09:00-18:00"}'),
        _tool("call_2", '[{"merchantId": "1001"}]'),
        _asst(content="It opens at 09:00."),
        {"role": "user", "content": "And again?"},
        _asst(_tc("call_1", "get_merchant", {"merchantId": "1001"})),
        _tool("call_1", '{"merchantId": "1001", "hours": "09:00-18:00"}'),
        _asst(content="Still 09:00."),
    )
    return {
        "chat-pass.json": good,
        "chat-fail-order.json": _chat(
            SYSTEM, USER,
            _asst(_tc("call_1", "get_merchant", {"merchantId": "1001"}), _tc("call_2", "list_merchants", {})),
            _tool("call_2", "[]"), _tool("call_1", "{}"), _asst(content="done")),
        "chat-fail-missing.json": _chat(
            USER, _asst(_tc("call_1", "get_merchant", {"merchantId": "1001"}), _tc("call_2", "list_merchants", {})),
            _tool("call_1", "{}"), _asst(content="done")),
        "chat-fail-orphan.json": _chat(
            USER, _asst(_tc("call_1", "get_merchant", {"merchantId": "1001"})), _tool("call_1", "{}"),
            _tool("call_9", "{}"), _asst(content="done")),
        "chat-fail-after-final.json": _chat(
            USER, _asst(content="It opens at 09:00."), _asst(_tc("call_1", "get_merchant", {"merchantId": "1001"})),
            _tool("call_1", "{}")),
        "chat-fail-conflict.json": _chat(
            USER, _asst(_tc("call_1", "get_merchant", {"merchantId": "1001"})), _tool("call_1", '{"name": "A"}'),
            _asst(_tc("call_1", "get_merchant", {"merchantId": "1002"})), _tool("call_1", '{"name": "A"}'),
            _asst(content="done")),
        "chat-conflict-refused.json": _chat(
            USER, _asst(_tc("call_1", "get_merchant", {"merchantId": "1001"})), _tool("call_1", '{"name": "A"}'),
            _asst(_tc("call_1", "get_merchant", {"merchantId": "1002"})),
            _tool("call_1", json.dumps({"id": "call_1", "status": "error", "code": "ID_CONFLICT",
                                        "message": "This call id was already used for a different request; use a "
                                                   "new id.", "next_action": "FIX_INPUT"})),
            _asst(content="done")),
    }


def responses_cases() -> dict[str, Any]:
    def fc(cid: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
        return {"type": "function_call", "id": f"fc_{cid}", "call_id": cid, "name": name,
                "arguments": json.dumps(args), "status": "completed"}

    def out(cid: str, text: str) -> dict[str, Any]:
        return {"type": "function_call_output", "call_id": cid, "output": text}

    user = {"role": "user", "content": "Weather in Paris and Oslo?"}
    return {
        "responses-pass.json": {"model": "gpt-4.1", "input": [
            user, {"type": "reasoning", "id": "rs_1", "summary": []},
            fc("call_a", "get_weather", {"city": "Paris"}), fc("call_b", "get_weather", {"city": "Oslo"}),
            out("call_a", "18C"), out("call_b", "9C"),
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "18C and 9C."}]}]},
        "responses-fail-replay.json": {"model": "gpt-4.1", "input": [
            user, fc("call_a", "get_weather", {"city": "Paris"}), out("call_a", "18C"),
            fc("call_a", "get_weather", {"city": "Paris"}), out("call_a", "21C"),
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "?"}]}]},
        "responses-fail-twice.json": {"model": "gpt-4.1", "input": [
            user, fc("call_a", "get_weather", {"city": "Paris"}), out("call_a", "18C"), out("call_a", "18C")]},
    }


def anthropic_cases() -> dict[str, Any]:
    def use(cid: str, name: str, inp: dict[str, Any]) -> dict[str, Any]:
        return {"type": "tool_use", "id": cid, "name": name, "input": inp}

    def res(cid: str, content: Any, is_error: bool | None = None) -> dict[str, Any]:
        b: dict[str, Any] = {"type": "tool_result", "tool_use_id": cid, "content": content}
        if is_error is not None:
            b["is_error"] = is_error
        return b

    user = {"role": "user", "content": "Look up merchant 1001."}
    return {
        "anthropic-pass.json": {"model": "claude-sonnet-4", "max_tokens": 512, "messages": [
            user,
            {"role": "assistant", "content": [{"type": "text", "text": "Looking."},
                                              use("toolu_1", "get_merchant", {"merchantId": "1001"})]},
            {"role": "user", "content": [res("toolu_1", [{"type": "text", "text": "Harbour Tea House"}])]},
            {"role": "assistant", "content": [use("toolu_1", "get_merchant", {"merchantId": "1002"})]},
            {"role": "user", "content": [res("toolu_1", "ID_CONFLICT: use a new id", is_error=True)]},
            {"role": "assistant", "content": [{"type": "text", "text": "Harbour Tea House."}]}]},
        "anthropic-fail-conflict.json": {"model": "claude-sonnet-4", "max_tokens": 512, "messages": [
            user,
            {"role": "assistant", "content": [use("toolu_1", "get_merchant", {"merchantId": "1001"})]},
            {"role": "user", "content": [res("toolu_1", "Harbour Tea House")]},
            {"role": "assistant", "content": [use("toolu_1", "get_merchant", {"merchantId": "1002"})]},
            {"role": "user", "content": [res("toolu_1", "Harbour Tea House", is_error=False)]},
            {"role": "assistant", "content": [{"type": "text", "text": "done"}]}]},
    }


def trace_cases() -> dict[str, str]:
    tools = [{"name": "lookup", "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}}}]
    cfg = {"tools": tools, "budget": 1, "mode": "continue", "principal": "alice"}
    calls = [{"id": "a", "name": "lookup", "arguments": {"q": "x"}}, {"id": "a", "name": "lookup", "arguments": {"q": "x"}}]
    ex = {"type": "execute", "callId": "a", "name": "lookup", "arguments": {"q": "x"}, "principal": "alice",
          "outcome": {"status": "ok", "output": 1}}
    good = {"format": "loopspec-trace/1", "kind": "batch", "id": "trace-replay", "config": cfg, "calls": calls,
            "events": [ex, {"type": "response", "result": {"results": [{"id": "a", "status": "ok", "output": 1},
                                                                     {"id": "a", "status": "ok", "output": 1}],
                                                         "executed": 1, "aborted": None}}]}
    bad = copy.deepcopy(good)
    bad["id"] = "trace-reexecuted"
    bad["events"] = [ex, ex, {"type": "response", "result": {"results": [{"id": "a", "status": "ok", "output": 1},
                                                                         {"id": "a", "status": "ok", "output": 1}],
                                                             "executed": 2, "aborted": None}}]
    return {"traces.ndjson": json.dumps(good) + "\n" + json.dumps(bad) + "\n"}


def bad_input(scen: dict[str, list[Event]]) -> str:
    good = scen["dedup"]
    lines = [json.dumps(e) for e in good[:4]]
    lines += [
        "{not json",
        "[1, 2, 3]",
        json.dumps({"v": 1, "seq": 1, "type": "run_started"}),  # no run
        json.dumps({"v": 1, "run": "ghost", "seq": 1, "t": 0, "type": "call_advanced", "via": "T27", "step": 1,
                    "next": None}),  # a run without run_started
        json.dumps({"v": 1, "run": "typo", "seq": 1, "t": 0, "type": "run_begun"}),  # unknown type
        json.dumps({**good[0], "run": "badseq"}), json.dumps({**good[1], "run": "badseq", "seq": "2"}),
        json.dumps({**good[0], "run": "v2", "v": 2}),
        "[" * 3000 + "]" * 3000,
        json.dumps({**good[0], "run": "badcfg", "config": {**good[0]["config"], "mode": "sometimes"}}),
    ]
    lines += [json.dumps(e) for e in good[4:]]
    return "\n".join(lines) + "\n"


def write_inputs() -> list[dict[str, Any]]:
    """Write every input file of the corpus and return the manifest."""
    GOLDEN.mkdir(parents=True, exist_ok=True)
    scen = scenarios()
    manifest: list[dict[str, Any]] = []

    def put(name: str, text: str, exit_code: int, rules: list[str], doc: str, fmt: str = "auto") -> None:
        (GOLDEN / name).write_text(text, encoding="utf-8")
        manifest.append({"file": name, "inputFormat": fmt, "exit": exit_code, "rules": rules, "doc": doc})

    put("ledger-pass.ndjson", ndjson(interleave(list(scen.values()))), 0, [],
        "genuine reference-engine runs of every scenario, interleaved")
    for m in MUTATIONS:
        evs = mutated(m, scen)
        put(f"ledger-fail-{m.name}.ndjson", ndjson(evs), 1, [m.rule], f"{m.doc} ({m.scenario} scenario)")
    both = interleave([mutated(MUTATIONS[0], scen), copy.deepcopy(scen["merchants"])])
    put("ledger-mixed.ndjson", ndjson(both), 1, [MUTATIONS[0].rule],
        "a violating run interleaved with a conforming one: both are checked")
    from tests.oracle_concurrent import cases as concurrent_cases
    from tests.oracle_concurrent import telemetry_cases

    for name, (text, code, rules, doc) in {**concurrent_cases(), **telemetry_cases(GOLDEN)}.items():
        put(name, text, code, rules, doc)
    from tests.telemetry_stitching import derived_cases as stitching_cases

    for name, (text, code, rules, doc) in stitching_cases(GOLDEN).items():
        put(name, text, code, rules, doc)
    from tests.oracle_restarts import cases as restart_cases

    for name, (text, code, rules, doc) in restart_cases().items():
        put(name, text, code, rules, doc)
    put("ledger-bad-input.ndjson", bad_input(scen), 2, [],
        "malformed lines, wrong types, unknown events, a run without run_started, deep nesting: each named by "
        "file and line; the good run in the file is still checked")
    cases = {**chat_cases(), **responses_cases(), **anthropic_cases()}
    expect = {
        "chat-pass.json": (0, []), "chat-fail-order.json": (1, ["R11"]), "chat-fail-missing.json": (1, ["R11"]),
        "chat-fail-orphan.json": (1, ["R11"]), "chat-fail-after-final.json": (1, ["R28"]),
        "chat-fail-conflict.json": (1, ["R7"]), "chat-conflict-refused.json": (0, []),
        "responses-pass.json": (0, []), "responses-fail-replay.json": (1, ["R6"]),
        "responses-fail-twice.json": (1, ["R11"]), "anthropic-pass.json": (0, []),
        "anthropic-fail-conflict.json": (1, ["R7"]),
    }
    for name, doc in cases.items():
        code, rules = expect[name]
        put(name, json.dumps(doc, indent=2) + "\n", code, rules, "hand-written transcript")
    convs = [chat_cases()["chat-pass.json"], chat_cases()["chat-fail-order.json"],
             responses_cases()["responses-pass.json"]["input"]]
    put("chat-conversations.ndjson", "".join(json.dumps(c) + "\n" for c in convs[:2]), 1, ["R11"],
        "NDJSON: one Chat Completions conversation per line")
    put("chat-array.json", json.dumps(convs[:2], indent=1) + "\n", 1, ["R11"],
        "a JSON array of conversations")
    put("responses-items.json", json.dumps(convs[2], indent=1) + "\n", 0, [],
        "a bare list of Responses items", "openai-responses")
    for name, text in trace_cases().items():
        put(name, text, 1, ["R6"], "loopspec-trace/1 documents, judged by the fuzzer's judge")
    (GOLDEN / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest
