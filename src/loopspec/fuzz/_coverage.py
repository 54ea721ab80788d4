"""Spec coverage of a campaign: which transitions of ``spec/loop.toml`` the expected runs took.

Pure. :func:`path` reads the transition ids off the reference driver's final :class:`RunState`
(the same path the ``transitions`` engine reports through its observer; a test checks that on
generated steps), so coverage costs nothing beyond the prediction the generator makes anyway.

Not every transition can happen through the adapter protocol: v1 has no authorization hook
(T16 deny_unauthorized), no clock the harness controls (T17 refuse_deadline: a deadline that passes
between a request's checks and its start) and no cancellation (T28). Section 5's transitions are
reached only by the concurrent batch steps of protocol v1.1 (mode ``batch-concurrent``: T30 wait,
T31 run on, T33 land; counted from the prediction's releases, since :func:`path` reads a sequential
path), never T29 (the harness releases a result only when the implementation waits) nor T32 (no
deadline in batch mode). Section 6's T34 and T35 need write tools, which the protocol does not have
yet. :data:`REACHABLE` lists what each mode can reach; the campaign reports its
coverage against that.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, Final

from ..core.rules import CODE_TABLE, RunState, code_kind

__all__ = ["REACHABLE", "UNREACHABLE", "UNREACHABLE_WRITES", "Coverage", "path", "spec_transition_ids",
           "writes_path"]

Json = Any

_CHECK: Final = {"REQUEST_LIMIT": "T08", "INVALID_CALL": "T09", "UNKNOWN_TOOL": "T10", "INVALID_ARGUMENT": "T11",
                 "ID_CONFLICT": "T12"}
_START: Final = {"NOT_FOUND_OR_NOT_ACCESSIBLE": "T16", "DEADLINE_EXCEEDED": "T17", "BUDGET_EXHAUSTED": "T18",
                 "TOOL_BUDGET_EXHAUSTED": "T19"}
_ESCALATE: Final = {"violation": "T24", "failure": "T25", "limit": "T26", "unknown": "T34"}
_STOP: Final = {"DEADLINE": "T01", "MAX_ROUNDS": "T02", "END_OF_BATCH": "T03", "MODEL_ERROR": "T05",
                "FINAL_ANSWER": "T06", "UNRECONCILED": "T35"}

#: Why a transition cannot happen through adapter protocol v1.
UNREACHABLE: Final = {
    "T16": "no authorization hook in the protocol",
    "T17": "no clock the harness controls (a deadline passing between a request's checks and its start)",
    "T28": "no cancellation in the protocol",
    "T29": "section 5: the harness releases a result only when the implementation waits (tool.waiting, "
           "PROTOCOL.md C3), so none has arrived at a take-up",
    "T32": "section 5: no deadline in batch mode, and loop.run is sequential in protocol v1.1",
    **{t: "section 5 (concurrent execution): taken by concurrent batch steps only (protocol v1.1: an "
          "implementation that announces the concurrency capability; mode batch-concurrent)"
       for t in ("T30", "T31", "T33")},
    # section 6 (R42, R46): the tools of batch.run / loop.run are read-only, and the reference answers them
    # from the core, which has no operation ledger: no request of those steps is answered OUTCOME_UNKNOWN and
    # no write is left unknown at a final answer. Write tools travel in writes.run (protocol v1.2, PROTOCOL.md
    # section 8), which runs section 6's operation machine (W01-W10) and has no model, so no final answer.
    "T34": "section 6: loop.run has no write tools (they are fuzzed in writes.run, protocol v1.2, which has no "
           "abort mode), so no answer is OUTCOME_UNKNOWN there (abort_on_unknown, R42)",
    "T35": "section 6: loop.run has no write tools (writes.run, protocol v1.2, has no model and so no final "
           "answer), so no write is left unknown at the final answer (R46)",
}
#: The transitions each mode can reach through the protocol.
REACHABLE: Final = {
    "batch": ("T03", "T04", "T07", "T09", "T10", "T11", "T12", "T13", "T14", "T15", "T18", "T20", "T21", "T23",
              "T24", "T25", "T26", "T27"),
    "loop": ("T01", "T02", "T04", "T05", "T06", "T07", "T08", "T09", "T10", "T11", "T12", "T13", "T14", "T15",
             "T18", "T19", "T20", "T21", "T22", "T23", "T24", "T25", "T26", "T27"),
}
#: A batch campaign with concurrent steps (protocol v1.1) also waits (T30), runs on (T31) and lands (T33).
REACHABLE["batch-concurrent"] = (*REACHABLE["batch"], "T30", "T31", "T33")
#: A writes campaign (protocol v1.2) runs section 6's operation machine (writes.toml), not the loop machine:
#: its transitions are read off what the harness, as the external system, saw done to each key (:func:`writes_path`).
REACHABLE["writes"] = ("W01", "W02", "W03", "W04", "W05", "W06", "W07", "W08")
#: Why a writes campaign cannot see the other transitions of the operation machine.
UNREACHABLE_WRITES: Final = {
    "W09": "a request for a confirmed key is answered from the implementation's own ledger: nothing reaches the "
           "harness, which sees no replay (R44)",
    "W10": "an intent abandoned before its dispatch mark never reaches the external system (R46)",
}


def writes_path(trace: Mapping[str, Json]) -> list[str]:
    """The operation machine's transitions (writes.toml) a writes trace shows from the external system's side:
    each dispatch recorded an intent and a dispatch mark (W01, W02) and was applied and answered (W03),
    rejected (W04) or left without an answer (W05); each lookup found the write applied (W06), not applied
    (W07) or could not answer (W08)."""
    out: list[str] = []
    for e in trace.get("events") or ():
        if not isinstance(e, dict):
            continue
        o = e.get("outcome") if isinstance(e.get("outcome"), dict) else {}
        if e.get("type") == "execute":
            status = o.get("status")
            out += ["W01", "W02", "W03" if status == "ok" else "W04" if status == "error" else "W05"]
        elif e.get("type") == "lookup":
            status = o.get("status")
            out.append("W06" if status == "applied" else "W07" if status == "not-applied" else "W08")
    return out


def spec_transition_ids(mode: str) -> list[str]:
    """The transitions a campaign of ``mode`` counts: writes.toml's for writes, loop.toml's otherwise."""
    if mode == "writes":
        from ..spec.writes import load_write_spec

        return [t.id for t in load_write_spec().transitions]
    from ..spec.loader import load_spec

    return [t.id for t in load_spec().transitions]
#: The section 5 transitions of a concurrent step's expected run (counted, not ordered: see path).
CONCURRENT_STEPS: Final = ("T30", "T31", "T33")


def path(s: RunState) -> list[str]:
    """The transition ids a finished run took, in order."""
    out: list[str] = []
    answers = {a.index: a for a in s.answers}
    if s.aborted_answer is not None:
        answers[s.aborted_answer.index] = s.aborted_answer
    executions = {e.request: e for e in s.executions}
    escalated_at = s.aborted[0] if s.aborted is not None else None
    by_round: dict[int, list[int]] = {}
    for r in s.requests:
        by_round.setdefault(r.round, []).append(r.index)
    stop = s.stop_reason
    for rnd in range(1, s.model_requests + 1):
        out.append("T04")
        idx = by_round.get(rnd, [])
        last_round = rnd == s.model_requests
        if last_round and stop in ("MODEL_ERROR", "FINAL_ANSWER", "UNRECONCILED") and not idx:
            out.append(_STOP[stop])
            break
        for i in idx:
            a = answers.get(i)
            if a is None:  # not answered (cannot happen for a finished run without cancellation)
                continue
            code = a.code
            if code in _CHECK:
                out.append(_CHECK[code])
            elif a.replayed:
                out.append("T13")
            else:
                cid = s.requests[i].call_id
                b = s.bindings.get(cid) if isinstance(cid, str) else None
                out.append("T14" if b is None or b.bound_at == i else "T15")
                ex = executions.get(i)
                if ex is None:
                    out.append(_START.get(code or "", "T18"))
                else:
                    out.append("T20")
                    out += ["T22"] * (ex.attempts - 1)
                    out.append("T21" if a.status == "ok" else "T23")
            if i == escalated_at:
                out.append(_ESCALATE[code_kind(code)] if code in CODE_TABLE else "T25")
            else:
                out.append("T27")
        if escalated_at is not None and escalated_at in idx:
            break
        if last_round and stop in ("MODEL_ERROR", "FINAL_ANSWER", "UNRECONCILED"):
            out.append(_STOP[stop])
            break
        out.append("T07")
    if stop in ("DEADLINE", "MAX_ROUNDS", "END_OF_BATCH") and escalated_at is None:
        out.append(_STOP[stop])
    return out


class Coverage:
    """Counts over a campaign: transitions, answer codes, stop reasons, and loop-mode shares."""

    def __init__(self) -> None:
        self.transitions: Counter[str] = Counter()
        self.codes: Counter[str] = Counter()
        self.stops: Counter[str] = Counter()
        self.runs = 0
        self.examples = 0
        self.features: Counter[str] = Counter()  # examples showing each loop-mode feature

    def add_run(self, ids: Iterable[str], codes: Iterable[str], stop: str | None) -> None:
        self.runs += 1
        self.transitions.update(ids)
        self.codes.update(codes)
        if stop:
            self.stops[stop] += 1

    def add_example(self, features: Iterable[str]) -> None:
        self.examples += 1
        self.features.update(set(features))

    def merge(self, other: Coverage) -> None:
        self.transitions.update(other.transitions)
        self.codes.update(other.codes)
        self.stops.update(other.stops)
        self.runs += other.runs
        self.examples += other.examples
        self.features.update(other.features)

    def missing(self, mode: str) -> list[str]:
        return [t for t in REACHABLE[mode] if not self.transitions.get(t)]

    def shares(self) -> dict[str, float]:
        return {k: round(v / self.examples, 3) for k, v in sorted(self.features.items())} if self.examples else {}

    def to_json(self, mode: str, spec_ids: Iterable[str]) -> dict[str, Json]:
        return {
            "transitions": {t: self.transitions.get(t, 0) for t in spec_ids},
            "runs": self.runs,
            "reachable": list(REACHABLE[mode]),
            "missing": self.missing(mode),
            "unreachable": dict(UNREACHABLE_WRITES) if mode == "writes" else {
                t: why for t, why in UNREACHABLE.items() if t not in REACHABLE[mode]},
            "codes": dict(sorted(self.codes.items())),
            "stopReasons": dict(sorted(self.stops.items())),
            "shares": self.shares(),
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Json]) -> Coverage:
        c = cls()
        c.transitions.update(doc.get("transitions", {}))
        c.runs = doc.get("runs", 0)
        return c
