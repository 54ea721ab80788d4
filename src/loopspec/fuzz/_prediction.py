"""What the strict spec expects of a step, and whether a trace is exactly that.

:func:`predict` runs a step through the reference driver (the strict spec), fed the outcomes the step's
tool script gives, as the harness feeds them: the executions and the answer a correct implementation
gives, the model requests of a loop, the spec transitions the run takes. The generator uses the
prediction for coverage guidance; the judging stage uses it as its fast path (:func:`matches`: a trace
that is exactly the predicted one is correct without running the judge). Both stages read it from here,
so neither imports the other. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ..core import rules as core
from ..core.rules import CODE_TABLE, Outcome, RunState
from ..judge.batch import parse_batch_config, parse_tools, wire_answer
from ..judge.loop import LOOP_RESULT_FIELDS, parse_loop_config, reply_value
from ..judge.verdict import CANARY_PREFIX, TraceError
from ._coverage import path
from ._steps import chooser, is_concurrent
from ._vocab import SCHEMA_POOL

__all__ = ["ALL_ORDERS", "Planned", "Prediction", "all_orders", "matches", "predict", "same"]

Json = Any

# --------------------------------------------------------------------------------------------
# Prediction: what a correct implementation does with a step
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Prediction:
    """The strict spec's run of a step, fed the outcomes its tool script gives."""

    executions: list[tuple[Json, Json, Json, Json]]  # (callId, name, arguments, principal) per attempt
    response: dict[str, Json]  # the batch.run / loop.run result
    models: list[tuple[int, list[dict[str, Json]]]]  # loop: (round, results shown) per model.next
    transitions: list[str]
    codes: list[str]  # the answers' codes ("ok", "ok (replay)" or the error code), the aborting one too
    stop: str | None
    state: RunState | None = None  # the driver's final state (not sent between processes)
    #: a concurrent step (protocol v1.1): the harness's releases (execution, choice, held), in order
    releases: list[tuple[int, int, int]] | None = None
    cancels: frozenset[int] = frozenset()  # executions a correct implementation cancels (R34, R35)


def _codes(s: RunState) -> list[str]:
    out = [a.code or ("ok (replay)" if a.replayed else "ok") for a in s.answers]
    if s.aborted_answer is not None and s.aborted_answer.code:
        out.append(s.aborted_answer.code)
    return out


def _outcome_for(script: Sequence[Mapping[str, Json]], execs: list[Any], principal: str
                 ) -> Callable[[RunState, core.Execution], Outcome]:
    def outcome_for(st: RunState, ex: core.Execution) -> Outcome:
        k = len(execs) + 1
        if k <= len(script):
            entry = script[k - 1]
            out = Outcome.failure(entry["fail"]) if "fail" in entry else Outcome.success(entry.get("value"))
        else:
            out = Outcome.success({"tool": ex.tool, "execution": k})
        r = st.requests[ex.request]
        execs.append((r.call_id, r.name, r.arguments, principal))
        return out

    return outcome_for


_POOL_INDEX: Final = {id(sch): i for i, sch in enumerate(SCHEMA_POOL)}
_SCHEMAS: dict[tuple[tuple[str, int], ...], dict[str, core.ToolSchema]] = {}


def _pool_schemas(tools: Sequence[Mapping[str, Json]]) -> dict[str, core.ToolSchema] | None:
    """The parsed schemas of tools whose input schemas are members of SCHEMA_POOL (cached), else None."""
    key = []
    for t in tools:
        sch = t.get("inputSchema")
        i = _POOL_INDEX.get(id(sch))
        if i is None or SCHEMA_POOL[i] is not sch or not isinstance(t.get("name"), str):
            return None
        key.append((t["name"], i))
    k = tuple(key)
    got = _SCHEMAS.get(k)
    if got is None:
        if len({n for n, _ in k}) != len(k):
            return None
        got = _SCHEMAS[k] = {n: core.parse_schema(SCHEMA_POOL[i], tool=n) for n, i in k}
    return got


#: The parsed schemas of the last tool lists a generator reused for every step (a declared registry), by
#: identity: (the list itself, kept alive so that its id is not reused; its schemas).
_LISTED: list[tuple[Sequence[Mapping[str, Json]], dict[str, core.ToolSchema]]] = []


def _listed_schemas(tools: Sequence[Mapping[str, Json]]) -> dict[str, core.ToolSchema] | None:
    for obj, schemas in _LISTED:
        if obj is tools:
            return schemas
    try:
        _, schemas = parse_tools(tools, "config.tools")
    except TraceError:
        return None
    _LISTED.append((tools, schemas))
    del _LISTED[:-4]
    return schemas


def _batch_config(raw: Mapping[str, Json]) -> core.RunConfig:
    schemas = _pool_schemas(raw["tools"]) or _listed_schemas(raw["tools"])
    b = raw.get("budget")
    if schemas is None or not (b.__class__ is int and b >= 0) or raw.get("mode") not in core.MODES \
            or not isinstance(raw.get("principal"), str):
        return parse_batch_config(raw).run_config()
    return core.RunConfig(schemas=schemas, limits=core.Limits(max_executions=b), mode=raw["mode"],
                          on_limit="throw" if raw["mode"] == "abort" else "error-result", principal=raw["principal"],
                          run_id="expected", batch=True)


def _predict_concurrent(step: Mapping[str, Json]) -> Prediction:
    """A concurrent batch step (PROTOCOL.md section 7): section 5's reference run, landing at each
    wait the execution the step's schedule picks among those in flight (in start order), as the
    harness does at each ``tool.waiting`` of a correct implementation."""
    script = step.get("script", [])
    rc = parse_batch_config(step["config"]).run_config()
    s = RunState(rc)
    calls = list(step["calls"])
    choose = chooser(step.get("schedule", []))
    releases: list[tuple[int, int, int]] = []

    def arrive(st: RunState, must: bool) -> int | None:
        if not must:
            return None
        flying = core.in_flight(st)
        c = choose(len(releases), [e.ordinal for e in flying])
        releases.append((flying[c].ordinal, c, len(flying)))
        return flying[c].request

    def outcome_for(st: RunState, ex: core.Execution) -> Outcome:
        k = ex.ordinal
        if k <= len(script):
            entry = script[k - 1]
            return Outcome.failure(entry["fail"]) if "fail" in entry else Outcome.success(entry.get("value"))
        return Outcome.success({"tool": ex.tool, "execution": k})

    core.drive(s, lambda st: calls, outcome_for, arrive=arrive)
    execs = []
    for ex in sorted(s.executions, key=lambda e: e.ordinal):
        r = s.requests[ex.request]
        execs.append((r.call_id, r.name, r.arguments, rc.principal))
    response = {"results": [wire_answer(a) for a in s.answers], "executed": s.executed,
                "aborted": None if s.aborted is None else {"index": s.aborted[0], "code": s.aborted[1]}}
    transitions = path(s) + ["T31"] * len(s.executions) + ["T30", "T33"] * len(releases)  # section 5, counted
    return Prediction(execs, response, [], transitions, _codes(s), s.stop_reason, s, releases,
                      frozenset(e.ordinal for e in s.executions if e.abandoned))


def predict(step: Mapping[str, Json]) -> Prediction:
    """Run ``step`` through the reference driver (the strict spec), as the harness would feed it."""
    script = step.get("script", [])
    execs: list[Any] = []
    if is_concurrent(step):
        return _predict_concurrent(step)
    if step.get("kind", "batch") == "batch":
        rc = _batch_config(step["config"])
        s = RunState(rc)
        calls = list(step["calls"])
        core.drive(s, lambda st: calls, _outcome_for(script, execs, rc.principal))
        response = {"results": [wire_answer(a) for a in s.answers], "executed": s.executed,
                    "aborted": None if s.aborted is None else {"index": s.aborted[0], "code": s.aborted[1]}}
        return Prediction(execs, response, [], path(s), _codes(s), s.stop_reason, s)
    lcfg = parse_loop_config(step["config"])
    s = RunState(lcfg.run_config())
    replies = iter(step.get("model", []))
    models: list[tuple[int, list[dict[str, Json]]]] = []

    def model(st: RunState) -> Json:
        shown = [wire_answer(a) for a in st.answers if a.round == st.round] if st.round else []
        models.append((st.round + 1, shown))
        reply = next(replies, None)
        return reply_value(reply if reply is not None else {"final": "done"})

    core.drive(s, model, _outcome_for(script, execs, lcfg.principal))
    values = {"status": s.status, "stopReason": s.stop_reason, "coverage": s.coverage, "executed": s.executed,
              "aborted": None if s.aborted is None else {"index": s.aborted[0], "code": s.aborted[1]},
              "final": s.final if s.stop_reason == "FINAL_ANSWER" else None,
              "results": [wire_answer(a) for a in s.answers], "rounds": s.model_requests}
    return Prediction(execs, {k: values[k] for k in LOOP_RESULT_FIELDS}, models, path(s), _codes(s), s.stop_reason, s)

# --------------------------------------------------------------------------------------------
# The fast path of judging
# --------------------------------------------------------------------------------------------


def same(a: Json, b: Json) -> bool:
    """Equal as JSON values *and* as types (``true`` is not ``1``, ``1.0`` is not ``1``)."""
    if a.__class__ is not b.__class__:
        return False
    if a.__class__ is dict:
        return a.keys() == b.keys() and all(same(v, b[k]) for k, v in a.items())
    if a.__class__ is list:
        return len(a) == len(b) and all(map(same, a, b))
    return bool(a == b)


def _answer_ok(o: Json, e: Mapping[str, Json]) -> bool:
    if o.__class__ is not dict:
        return False
    if e["status"] == "ok":
        return o.keys() == e.keys() and same(o, e)
    code = e["code"]
    if o.get("status") != "error" or o.get("code") != code or not same(o.get("id"), e["id"]):
        return False
    for k, v in o.items():
        if k in ("id", "status", "code"):
            continue
        if k == "message":
            if v != CODE_TABLE[code][3]:
                return False
        elif k == "next_action":
            if v != CODE_TABLE[code][1]:
                return False
        elif k == "request_id":
            if v.__class__ is not str or CANARY_PREFIX in v:
                return False
        else:
            return False
    return True


def _results_ok(got: Json, want: Sequence[Mapping[str, Json]]) -> bool:
    return got.__class__ is list and len(got) == len(want) and all(map(_answer_ok, got, want))


def matches(trace: Mapping[str, Json], p: Prediction) -> bool:
    """Is ``trace`` exactly what the spec predicts (so the judge would find nothing)? False means
    "not sure": the judge decides."""
    events = trace["events"]
    if not events or events[-1].get("type") != "response":
        return False
    execs = p.executions
    models = p.models
    releases = p.releases or []
    k = m = rel = cancels = 0
    for ev in events[:-1]:
        t = ev["type"]
        if t == "cancel":
            if ev.get("execution") not in p.cancels:
                return False
            cancels += 1
        elif t == "release":  # the judge reads releases as a sequence of their own (PROTOCOL.md C7)
            if rel >= len(releases) or (ev.get("execution"), ev.get("choice"), ev.get("of")) != releases[rel]:
                return False
            rel += 1
        elif t == "execute":
            if k >= len(execs):
                return False
            cid, name, args, principal = execs[k]
            if not (same(ev["callId"], cid) and same(ev["name"], name) and same(ev["principal"], principal)
                    and same(ev["arguments"], args)):
                return False
            k += 1
        elif t == "model":
            if m >= len(models) or "extra" in ev:
                return False
            rnd, shown = models[m]
            if not same(ev["round"], rnd) or not _results_ok(ev["results"], shown):
                return False
            m += 1
        else:
            return False
    if k != len(execs) or m != len(models) or rel != len(releases) or cancels != len(p.cancels):
        return False
    result = events[-1]["result"]
    want = p.response
    if result.__class__ is not dict or result.keys() != want.keys():
        return False
    for key, v in want.items():
        if key == "results":
            if not _results_ok(result[key], v):
                return False
        elif not same(result[key], v):
            return False
    return True




#: At most this many completion orders of one small concurrent step (3 releases with a choice: 3! = 6).
ALL_ORDERS: Final = 6


def all_orders(step: Mapping[str, Json], cap: int = ALL_ORDERS) -> list[tuple[list[int], Prediction]]:
    """Every completion order of a concurrent step (PROTOCOL.md C4), at most ``cap``: depth-first
    over the choices at each release of the reference run (whose held lists are a correct
    implementation's), each as its schedule and prediction; the first is the start order."""
    out: list[tuple[list[int], Prediction]] = []
    stack: list[list[int]] = [[]]
    while stack and len(out) < cap:
        prefix = stack.pop()
        p = predict({**step, "schedule": prefix})
        rel = p.releases or []
        choices = [c for _, c, _ in rel]
        out.append((prefix, p))
        for i in range(len(rel) - 1, len(prefix) - 1, -1):
            stack.extend([*choices[:i], alt] for alt in range(rel[i][2] - 1, 0, -1))
    return out



@dataclass(slots=True)
class Planned:
    """A generated step and its prediction (None when the step cannot be predicted: a profile's
    framework normalized it into something the strict judge refuses)."""

    step: dict[str, Json]
    prediction: Prediction | None

