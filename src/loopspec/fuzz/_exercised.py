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

__all__ = ["DESCRIPTIONS", "describe", "exercised"]

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
}


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
    return +out


def describe(rule: str, counts: Mapping[str, int]) -> str | None:
    """The phrase a report gives a rule's exercised preconditions ("412 replays (…), 38 across rounds"), or
    None when the rule has no counted precondition."""
    keys = [k for k in DESCRIPTIONS if k == rule or k.startswith(rule + " ")]
    if not keys:
        return None
    parts = [f"{counts.get(k, 0)} {DESCRIPTIONS[k]}" for k in keys]
    return ", ".join(parts) + " seen"
