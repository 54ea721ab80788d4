"""The pure core of SPEC.md section 6: write tools that survive crashes. No I/O.

* :func:`idempotency_key` — the business key of a write (R37): named arguments + trusted principal
  (+ the run id under the scope ``run``), never the call id.
* :class:`WriteTool` — a write's declaration (R36–R38), checked by :func:`write_tool_problems`.
* :data:`OP_TRANSITIONS` / :func:`op_step` — one operation's machine (``spec/writes.toml``).
* The **decisions** the engine (:mod:`loopspec.engine.oplog`) and the model checker
  (:mod:`loopspec.checker.writes`) both follow: :func:`on_request` (what a request for a key does,
  given the key's operation state), :func:`on_response` (how the external system's answer is
  recorded), :func:`before_lookup` (what is recorded while a lookup is asked and not yet answered:
  nothing), :func:`on_lookup` (how a reconciliation is recorded), :func:`on_recovery` (what a
  restart does to an operation). A broken variant (``writes.toml [[variant]]``) is a :class:`Policy`
  whose decisions break one rule.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from .rules import canonical_json

Json = Any

__all__ = [
    "CORRECT",
    "KINDS",
    "OP_BY_ID",
    "OP_IDS",
    "OP_STATES",
    "OP_TRANSITIONS",
    "RECONCILE",
    "RUN_ID",
    "SCOPES",
    "VARIANTS",
    "OpError",
    "Policy",
    "WriteTool",
    "before_lookup",
    "business_key",
    "check_against_spec",
    "idempotency_key",
    "on_lookup",
    "on_recovery",
    "on_request",
    "on_response",
    "op_step",
    "op_transition_id",
    "reachable",
    "write_tool",
    "write_tool_problems",
]

KINDS: Final = ("read-only", "write")
RECONCILE: Final = ("record", "lookup", "none")
SCOPES: Final = ("principal", "run")
OP_STATES: Final = ("absent", "intent", "dispatched", "confirmed", "failed", "unknown")

#: name -> (sources, destination): the transitions of ``writes.toml`` (checked by :func:`check_against_spec`).
OP_TRANSITIONS: Final[Mapping[str, tuple[tuple[str, ...], str]]] = {
    "record_intent": (("absent", "failed"), "intent"),
    "mark_dispatched": (("intent",), "dispatched"),
    "confirm": (("dispatched",), "confirmed"),
    "reject": (("dispatched",), "failed"),
    "lose_outcome": (("dispatched",), "unknown"),
    "reconcile_applied": (("unknown",), "confirmed"),
    "reconcile_not_applied": (("unknown",), "failed"),
    "reconcile_unavailable": (("unknown",), "unknown"),
    "replay": (("confirmed",), "confirmed"),
    "abandon_intent": (("intent",), "failed"),
}

#: name -> the transition's id in ``writes.toml`` (W01..W10): what the run ledger's ``write_recorded`` names
OP_IDS: Final[Mapping[str, str]] = {name: f"W{i:02d}" for i, name in enumerate(OP_TRANSITIONS, start=1)}
#: the transitions by id
OP_BY_ID: Final[Mapping[str, str]] = {i: name for name, i in OP_IDS.items()}

OUTCOME_UNKNOWN: Final = "OUTCOME_UNKNOWN"


def op_transition_id(name: str) -> str:
    return OP_IDS[name]


def reachable(start: str, goal: str) -> bool:
    """Can an operation in ``start`` come to ``goal`` through the transitions of ``writes.toml`` (any number)?"""
    seen, todo = {start}, [start]
    while todo:
        st = todo.pop()
        for sources, dest in OP_TRANSITIONS.values():
            if st in sources and dest not in seen:
                seen.add(dest)
                todo.append(dest)
    return goal in seen


class OpError(ValueError):
    """A transition that the operation machine does not allow from the key's state."""


def op_step(state: str, name: str) -> str:
    """The state after transition ``name`` from ``state`` (:class:`OpError` if it may not fire there)."""
    sources, dest = OP_TRANSITIONS[name]
    if state not in sources:
        raise OpError(f"{name} cannot fire from {state!r} (only from {', '.join(sources)})")
    return dest


@dataclass(frozen=True, slots=True)
class WriteTool:
    """A write's declaration: its key arguments (R37), what the external system offers (R38), the key's scope, and
    how long a lookup may take before it counts as unavailable (R38; ``None``: no limit, the lookup runs in the
    caller's thread)."""

    name: str
    key_arguments: tuple[str, ...]
    reconcile: Literal["record", "lookup", "none"] = "record"
    scope: Literal["principal", "run"] = "principal"
    lookup_timeout: float | None = 30.0


def write_tool_problems(tool: WriteTool, input_schema: Mapping[str, Any] | None,
                        hints: Mapping[str, Any] | None = None) -> list[str]:
    """Definition errors of a write (R36, R37, R38); empty when it is well declared."""
    out: list[str] = []
    if hints and hints.get("readOnlyHint") is True:
        out.append(f"{tool.name}: a write cannot carry readOnlyHint true (R36)")
    if tool.reconcile not in RECONCILE:
        out.append(f"{tool.name}: reconcile must be one of {', '.join(RECONCILE)} (R38), got {tool.reconcile!r}")
    if tool.scope not in SCOPES:
        out.append(f"{tool.name}: scope must be one of {', '.join(SCOPES)} (R37), got {tool.scope!r}")
    if not tool.key_arguments:
        out.append(f"{tool.name}: a write names at least one key argument (R37): the call id is not a key")
    lt = tool.lookup_timeout
    if lt is not None and (isinstance(lt, bool) or not isinstance(lt, int | float) or not lt > 0):
        out.append(f"{tool.name}: lookup_timeout must be a positive number of seconds or None (R38), got {lt!r}")
    if input_schema is None:
        return out
    props = input_schema.get("properties") or {}
    required = set(input_schema.get("required") or ())
    for a in tool.key_arguments:
        t = props.get(a, {}).get("type") if isinstance(props.get(a), dict) else None
        if t not in ("string", "integer") or a not in required:
            out.append(f"{tool.name}: key argument {a!r} must be a required string or integer property (R37)")
    return out


def idempotency_key(tool: WriteTool, arguments: Mapping[str, Any], principal: str, run_id: str | None = None) -> str:
    """The business idempotency key of a write (R37): SHA-256 (hex) of the canonical JSON of the tool, the
    trusted principal, the scope, the run id (scope ``run`` only) and the key arguments' values. The call id
    takes no part."""
    if tool.scope == "run" and not run_id:
        raise ValueError(f"{tool.name}: a key of scope `run` needs the run id")
    missing = [a for a in tool.key_arguments if a not in arguments]
    if missing:
        raise ValueError(f"{tool.name}: key arguments missing: {', '.join(missing)}")
    doc = {"tool": tool.name, "principal": principal, "scope": tool.scope,
           "run": run_id if tool.scope == "run" else None,
           "arguments": {a: arguments[a] for a in tool.key_arguments}}
    canon = canonical_json(doc)
    if canon is None:
        raise ValueError(f"{tool.name}: key arguments are not JSON")
    return hashlib.sha256(canon.encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------------------------
# Decisions. Each returns what to do next, as data; the engine and the model checker carry it out.
# --------------------------------------------------------------------------------------------

RequestAction = Literal["replay", "reconcile", "answer_unknown", "dispatch", "resume_intent", "wait_in_flight"]
Response = Literal["applied", "rejected", "lost"]
Lookup = Literal["applied", "not_applied", "unavailable"]


@dataclass(frozen=True, slots=True)
class Policy:
    """How an implementation decides; :data:`CORRECT` follows section 6, the others are its broken variants."""

    name: str = "correct"
    key_by_call_id: bool = False       # breaks R37
    retry_without_lookup: bool = False  # breaks R43
    record_after_dispatch: bool = False  # breaks R39
    timeout_as_failure: bool = False    # breaks R42
    failed_before_lookup: bool = False  # breaks R43 (a conclusion recorded before the lookup's answer)


CORRECT: Final = Policy()
VARIANTS: Final[Mapping[str, Policy]] = {
    "key-by-call-id": Policy("key-by-call-id", key_by_call_id=True),
    "retry-without-lookup": Policy("retry-without-lookup", retry_without_lookup=True),
    "record-after-dispatch": Policy("record-after-dispatch", record_after_dispatch=True),
    "timeout-as-failure": Policy("timeout-as-failure", timeout_as_failure=True),
    "failed-before-lookup": Policy("failed-before-lookup", failed_before_lookup=True),
}


def on_request(state: str, reconcile: str, policy: Policy = CORRECT, *, other_run: bool = False) -> RequestAction:
    """What a request for a key does, given its operation's state (R43, R44, R46). ``other_run``: the operation
    was last recorded by another run (another worker on the same ledger): in ``intent`` or ``dispatched`` it
    is that run's write in flight, which this request waits for and never reconciles or sends (R44)."""
    if other_run and state in ("intent", "dispatched") and not policy.retry_without_lookup:
        return "wait_in_flight"
    if state == "confirmed":
        return "replay"  # W09: answered from the ledger, nothing sent
    if state in ("unknown", "dispatched"):
        if policy.retry_without_lookup:
            return "dispatch"  # the broken variant: re-sent blind
        return "answer_unknown" if reconcile == "none" else "reconcile"
    if state == "intent":
        return "resume_intent"  # a durable intent without a dispatch mark was never sent (R39)
    return "dispatch"  # absent or failed: a new attempt (W01)


def on_response(response: Response, policy: Policy = CORRECT) -> str:
    """The transition that records the external system's answer to a send (R41, R42)."""
    if response == "applied":
        return "confirm"
    if response == "rejected":
        return "reject"
    return "reject" if policy.timeout_as_failure else "lose_outcome"


def before_lookup(state: str, policy: Policy = CORRECT, *, recovery: bool = False) -> str | None:
    """The transition recorded for a key in ``state`` while its lookup is asked and not yet answered (``None``:
    nothing). R43: nothing — only the lookup's answer is recorded (:func:`on_lookup`), so a lookup cut by a crash
    (crash point ``after-lookup``) leaves the key unknown and the next recovery asks again. The
    ``failed-before-lookup`` variant records W07 (not applied) in the recovery's reconciliation before the
    answer comes, and overwrites it with the answer when one comes (the answer's state, whatever the key's)."""
    if policy.failed_before_lookup and recovery and state == "unknown":
        return "reconcile_not_applied"
    return None


def on_lookup(result: Lookup) -> str:
    """The transition that records a reconciliation (R43)."""
    return {"applied": "reconcile_applied", "not_applied": "reconcile_not_applied",
            "unavailable": "reconcile_unavailable"}[result]


def on_recovery(state: str, policy: Policy = CORRECT) -> str | None:
    """What a restart does to an operation before anything else (R46): a dispatch mark without a result is
    an unknown outcome. ``None``: nothing."""
    if state == "dispatched" and not policy.retry_without_lookup:
        return "lose_outcome"
    return None


def check_against_spec(ws: Any) -> list[str]:
    """Differences between this module and the loaded ``writes.toml`` (empty when they agree)."""
    problems: list[str] = []
    if tuple(s.id for s in ws.states) != OP_STATES:
        problems.append(f"op states: spec says {[s.id for s in ws.states]}, core says {list(OP_STATES)}")
    spec_t = {t.name: (tuple(t.sources), t.dest) for t in ws.transitions}
    if {t.name: t.id for t in ws.transitions} != dict(OP_IDS):
        problems.append(f"transition ids: spec says {({t.name: t.id for t in ws.transitions})}, core says {dict(OP_IDS)}")
    for name in sorted(set(spec_t) | set(OP_TRANSITIONS)):
        if spec_t.get(name) != OP_TRANSITIONS.get(name):
            problems.append(f"transition {name}: spec says {spec_t.get(name)}, core says {OP_TRANSITIONS.get(name)}")
    if tuple(ws.reconcile) != RECONCILE:
        problems.append(f"reconcile: spec says {list(ws.reconcile)}, core says {list(RECONCILE)}")
    if tuple(ws.kinds) != KINDS or tuple(ws.scopes) != SCOPES:
        problems.append("kinds or scopes differ")
    if {v.id for v in ws.variants} != set(VARIANTS):
        problems.append(f"variants: spec says {sorted(v.id for v in ws.variants)}, core says {sorted(VARIANTS)}")
    from .rules import CODE_TABLE  # checked against loop.toml's codes by _core.check_against_spec

    if CODE_TABLE.get(OUTCOME_UNKNOWN, ("",))[0] != "unknown":
        problems.append("code OUTCOME_UNKNOWN (kind unknown) missing from the code table")
    return problems


#: The run id of every writes step (each step has a fresh state directory and external system).
RUN_ID: Final = "run-1"


def write_tool(tool: Json) -> WriteTool | None:
    """The pure core's declaration of a tool of a writes step (None when it is not a well-formed write)."""
    if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
        return None
    key = tool.get("key")
    if not isinstance(key, dict) or not isinstance(key.get("arguments"), list) or not key["arguments"] \
            or not all(isinstance(a, str) for a in key["arguments"]):
        return None
    scope, reconcile = key.get("scope", "principal"), tool.get("reconcile", "record")
    if scope not in SCOPES or reconcile not in RECONCILE:
        return None
    return WriteTool(tool["name"], tuple(key["arguments"]), reconcile, scope)


def business_key(tool: Json, arguments: Json, principal: Json, run_id: str) -> str | None:
    """The harness's own business key of a dispatch (R37: :func:`loopspec.core.writes.idempotency_key` of the
    declared key arguments); None when the arguments do not name them (the judge reports the dispatch)."""
    wt = write_tool(tool)
    if wt is None or not isinstance(arguments, dict) or not isinstance(principal, str):
        return None
    try:
        return idempotency_key(wt, arguments, principal, run_id)
    except (ValueError, TypeError):
        return None
