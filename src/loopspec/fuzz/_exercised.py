"""What a campaign exercised: for each rule, how many of the requests (or runs) it judged met that rule's
preconditions — a replay, an id conflict, a malformed call, a failure, … — so that a report's
"conforms" says how strong it is ("412 replays seen, 38 across rounds"), never just "no divergence".

Pure: it reads the calls of a judged trace (the model's replies in a loop, the proposal in a batch) and its
execution events, the way the trace shows them (before any framework's parser).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from typing import Any

Json = Any

__all__ = ["DESCRIPTIONS", "describe", "exercised", "exercised_total"]

#: counter key -> how a report phrases it (rule first: the key's prefix up to the first space)
DESCRIPTIONS: Mapping[str, str] = {
    "R2": "malformed calls",
    "R3": "calls to tools that are not registered",
    "R4": "calls with undeclared or wrongly typed arguments",
    "R5": "ids used again",
    "R6": "replays (same id, same content)",
    "R6 across rounds": "replays across rounds",
    "R7": "id conflicts (same id, other content)",
    "R7 across rounds": "id conflicts across rounds",
    "R8": "distinct ids with the same content",
    "R9": "runs whose requests exceed their execution budget",
    "R10": "failed calls repeated",
    "R13": "abort-mode runs with a failure",
    "R14": "continue-mode runs with a failure",
    "R15": "tool failures answered",
    "R17": "tool failures",
    "R18": "runs of more than one round",
    "R19": "runs that used their last allowed round",
    # the rules every judged step is checked against: their precondition is the step itself, its requests,
    # executions or answers (so that no "conforms" row is without a count)
    "R0": "steps judged",
    "R1": "requests checked",
    "R11": "proposals of more than one call",
    "R12": "executions",
    "R16": "executions under the run's principal",
    "R20": "runs with a limit set",
    "R21": "runs ended",
    "R22": "runs ended before their final answer",
    "R23": "failures where a retry was allowed",
    "R24": "executions",
    "R25": "answers returned",
    "R26": "cancelled executions",
    "R27": "steps judged",
    "R28": "final answers",
    "R29": "concurrent steps",
    "R30": "concurrent steps",
    "R31": "concurrent steps",
    "R32": "concurrent steps answered out of request order",
    "R33": "ids used again in a concurrent step",
    "R34": "concurrent abort-mode steps with a failure",
    "R35": "concurrent steps with a cancellation",
}

#: counted for every rule the lists above do not name (a rule added to the spec later): the steps judged
FALLBACK = "steps judged"


def _content(call: Mapping[str, Json]) -> str:
    return json.dumps([call.get("name"), call.get("arguments")], sort_keys=True, default=str)


def _typed(value: Json, typ: str) -> bool:
    if typ == "string":
        return isinstance(value, str)
    if typ == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if typ == "boolean":
        return isinstance(value, bool)
    return True


def exercised(trace: Mapping[str, Json]) -> Counter[str]:
    """The preconditions this trace met, counted (keys of :data:`DESCRIPTIONS`)."""
    out: Counter[str] = Counter()
    if trace.get("kind") == "writes":
        return out
    cfg = trace.get("config") or {}
    tools = {t.get("name"): t.get("inputSchema") or {} for t in cfg.get("tools", []) if isinstance(t, dict)}
    events = [e for e in trace.get("events", []) if isinstance(e, dict)]
    if trace.get("kind") == "loop":
        rounds = [e["reply"]["calls"] for e in events if e.get("type") == "model" and isinstance(e.get("reply"), dict)
                  and isinstance(e["reply"].get("calls"), list)]
        replies = sum(1 for e in events if e.get("type") == "model")
        limits = cfg.get("limits") or {}
        out["R18"] += replies > 1
        out["R19"] += limits.get("maxRounds") is not None and replies >= limits["maxRounds"]
        budget = limits.get("maxExecutions")
    else:
        rounds = [trace.get("calls") or []]
        budget = cfg.get("budget")
    seen: dict[str, tuple[str, int]] = {}
    contents: dict[str, str] = {}
    failures = [e for e in events if e.get("type") == "execute" and isinstance(e.get("outcome"), dict)
                and e["outcome"].get("status") == "error"]
    failed = {e["callId"] for e in failures if isinstance(e.get("callId"), str)}
    requests = 0
    for r, calls in enumerate(rounds):
        for c in calls:
            requests += 1
            if not isinstance(c, dict):
                out["R2"] += 1
                continue
            cid, name, args = c.get("id"), c.get("name"), c.get("arguments")
            if not (isinstance(cid, str) and cid.strip()) or not isinstance(name, str) or not isinstance(args, dict):
                out["R2"] += 1
            elif name not in tools:
                out["R3"] += 1
            else:
                props = tools[name].get("properties") or {}
                if any(k not in props or not _typed(v, (props[k] or {}).get("type", "")) for k, v in args.items()):
                    out["R4"] += 1
            if not isinstance(cid, str):
                continue
            content = _content(c)
            if cid in seen:
                out["R5"] += 1
                key = "R6" if seen[cid][0] == content else "R7"
                out[key] += 1
                out[f"{key} across rounds"] += seen[cid][1] != r
                out["R10"] += cid in failed and seen[cid][0] == content
            else:
                seen[cid] = (content, r)
                if content in contents.values():
                    out["R8"] += 1
                contents[cid] = content
    out["R17"] += len(failures)
    out["R15"] += len(failures)
    if failures:
        out["R13" if cfg.get("mode") == "abort" else "R14"] += 1
    out["R9"] += budget is not None and requests > budget
    executions = sum(1 for e in events if e.get("type") == "execute")
    response = next((e.get("result") for e in reversed(events) if e.get("type") == "response"), None)
    result = response if isinstance(response, dict) else {}
    answers = result.get("results") if isinstance(result.get("results"), list) else []
    limits = cfg.get("limits") or {}
    out["R0"] += 1
    out["R27"] += 1
    out["R1"] += requests
    out["R11"] += sum(1 for calls in rounds if len(calls) > 1)
    out["R12"] += executions
    out["R16"] += executions
    out["R24"] += executions
    out["R25"] += len(answers)
    out["R20"] += budget is not None or any(limits.get(k) is not None for k in ("maxRounds", "maxRequests", "deadline"))
    out["R21"] += response is not None
    if trace.get("kind") == "loop":
        final = any(isinstance(e.get("reply"), dict) and "final" in e["reply"] for e in events if e.get("type") == "model")
        out["R28"] += final
        out["R22"] += response is not None and not final
    retries = limits.get("maxRetries") if trace.get("kind") == "loop" else cfg.get("maxRetries")
    out["R23"] += len(failures) if isinstance(retries, int) and retries > 0 else 0
    cancels = sum(1 for e in events if e.get("type") == "cancel")
    out["R26"] += cancels
    if isinstance(cfg.get("concurrency"), dict):
        for rid in ("R29", "R30", "R31"):
            out[rid] += 1
        released = [e.get("execution") for e in events if e.get("type") == "release"]
        out["R32"] += released != sorted(released)
        out["R33"] += sum(len(calls) - len({c.get("id") for c in calls if isinstance(c, dict)}) for calls in rounds)
        out["R34"] += bool(failures) and cfg.get("mode") == "abort"
        out["R35"] += cancels > 0
    return +out


def exercised_total(rule: str, counts: Mapping[str, int]) -> int:
    """How often the campaigns met ``rule``'s preconditions (every key of the rule; the steps judged for a rule
    without one). 0: the rule was never exercised, so "no divergence" says nothing about it."""
    keys = [k for k in DESCRIPTIONS if k == rule or k.startswith(rule + " ")]
    return sum(counts.get(k, 0) for k in keys) if keys else counts.get("R0", 0)


def describe(rule: str, counts: Mapping[str, int]) -> str | None:
    """The phrase a report gives a rule's exercised preconditions ("seen: 412 replays (…), 38 replays across
    rounds"); a rule
    with no precondition of its own counts the steps judged (None when nothing was counted at all)."""
    keys = [k for k in DESCRIPTIONS if k == rule or k.startswith(rule + " ")]
    if not keys:
        return f"seen: {counts.get('R0', 0)} {FALLBACK}" if counts.get("R0") else None
    return "seen: " + ", ".join(f"{counts.get(k, 0)} {DESCRIPTIONS[k]}" for k in keys)
