"""The judge for loop traces (``"kind": "loop"``): a whole run of rounds, judged like a batch.

Kept apart from the batch judge because the loop's semantics may still be refined; it reuses the
batch judge's comparisons for what a loop shares with a batch (executions, principal, answers)
and adds the loop's own: the model requests (round numbers and the answers shown to the model,
R18), the limits (R19, R20), the final answer (R22, R28) and the outcome fields.

The reference is the pure driver :func:`loopspec.core.rules.drive`, given the model's replies the
harness recorded (``model`` events, in order) and the tool outcomes it gave (``execute`` events,
in order). The outcome fields are those of the engine's ``RunOutcome.to_json()`` that describe
the run, plus ``rounds`` (:data:`LOOP_RESULT_FIELDS`). A deadline is not reproducible from a trace:
the judge treats it as never passed (the fuzzer sets none).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ..core import rules as core
from ..core.profiles import Params, parse_replies, set_aside
from ..core.profiles import drive as profiled_drive
from ..core.rules import CODE_TABLE, Limits, Outcome, RunConfig, RunState
from ..spec.loader import Spec
from ..support.text import compact
from .batch import (
    _LAST,
    Expected,
    _answer_finding,
    _execution_finding,
    _Finding,
    _principal_finding,
    _rules_by_id,
    abort_code_finding,
    attribute_executions,
    check_results_shape,
    describe_call,
    end_rule,
    observed_invariants,
    parse_tools,
    pick_invariant,
    same_json,
    spec_answer_text,
    split_events,
    wire_answer,
)
from .verdict import (
    ERROR_FIELDS,
    PROTOCOL_CODES,
    TraceError,
    Verdict,
    Violation,
    _need,
    default_spec,
    shows_canary,
)

__all__ = ["LOOP_RESULT_FIELDS", "LoopConfig", "judge_loop", "loop_result_fields", "parse_loop_config", "reply_value"]

Json = Any


def loop_result_fields() -> tuple[str, ...]:
    """The fields of a ``loop.run`` result: ``RunOutcome.to_json()`` without the run id and the
    implementation-internal counters, plus ``rounds`` (= ``counters.modelRequests``)."""
    from ..engine.reference import RunOutcome

    sample = RunOutcome(run_id="", status="", stop_reason="", coverage="", answers=(), executed=0, executions=(),
                        aborted=None, counters={}, final=None).to_json()
    return (*(k for k in sample if k not in ("runId", "counters")), "rounds")


LOOP_RESULT_FIELDS: Final = loop_result_fields()

_LIMIT_KEYS: Final = {  # protocol name -> Limits field
    "maxRounds": "max_rounds", "maxExecutions": "max_executions", "maxToolExecutions": "max_tool_executions",
    "maxRequests": "max_requests", "maxRetries": "max_retries", "deadline": "deadline",
}

_NOT_ASKED = object()  # the reference asked the model for a round the implementation never asked for
_MODEL_FAILED = object()


@dataclass(frozen=True)
class LoopConfig:
    tools: tuple[tuple[str, Json], ...]
    schemas: Mapping[str, core.ToolSchema]
    tool_limits: Mapping[str, int]
    limits: Limits
    mode: str
    on_limit: str
    principal: str

    def run_config(self) -> RunConfig:
        return RunConfig(schemas=self.schemas, limits=self.limits, mode=self.mode, on_limit=self.on_limit,
                         principal=self.principal, tool_limits=dict(self.tool_limits), run_id="expected")

    def describe(self) -> str:
        lim = ", ".join(f"{k}={v}" for k, v in (
            ("maxRounds", self.limits.max_rounds), ("maxExecutions", self.limits.max_executions),
            ("maxToolExecutions", self.limits.max_tool_executions), ("maxRequests", self.limits.max_requests),
            ("maxRetries", self.limits.max_retries)) if v is not None)
        tools = ", ".join(n + (f"(max {self.tool_limits[n]})" if n in self.tool_limits else "") for n, _ in self.tools)
        return (f"mode={self.mode}, onLimit={self.on_limit}, principal={self.principal!r}, limits: {lim or 'none'}, "
                f"tools=[{tools or 'none'}]")


def parse_loop_config(raw: Json) -> LoopConfig:
    _need(isinstance(raw, dict), "config", "must be an object (the loop.run params)")
    tools, schemas = parse_tools(raw.get("tools"), "config.tools")
    tool_limits: dict[str, int] = {}
    for i, t in enumerate(raw["tools"]):
        m = t.get("maxExecutions")
        if m is not None:
            _need(isinstance(m, int) and not isinstance(m, bool) and m >= 0, f"config.tools[{i}].maxExecutions",
                  "must be an integer >= 0 or null")
            tool_limits[t["name"]] = m
    lim = raw.get("limits", {})
    _need(isinstance(lim, dict), "config.limits", "must be an object")
    kw: dict[str, Json] = {}
    for key, value in lim.items():
        _need(key in _LIMIT_KEYS, f"config.limits.{key}", f"unknown limit; known: {', '.join(_LIMIT_KEYS)}")
        if value is not None:
            kw[_LIMIT_KEYS[key]] = value
    try:
        limits = Limits(**kw)
    except ValueError as exc:
        raise TraceError("config.limits", str(exc)) from None
    mode = raw.get("mode", "continue")
    _need(mode in core.MODES, "config.mode", f"must be one of {', '.join(core.MODES)}")
    on_limit = raw.get("onLimit", "throw")
    _need(on_limit in core.LIMIT_POLICIES, "config.onLimit", f"must be one of {', '.join(core.LIMIT_POLICIES)}")
    principal = raw.get("principal", "anonymous")
    _need(isinstance(principal, str), "config.principal", "must be a string")
    return LoopConfig(tools, schemas, tool_limits, limits, mode, on_limit, principal)


def reply_value(reply: Json) -> Json:
    """What the model's reply, as the harness recorded it (``{"calls"}``, ``{"final"}``, ``{"error"}`` or
    ``{"raw": V}``), is for the reference driver: the reply itself, ``V``, or the model's failure."""
    if isinstance(reply, dict):
        if "error" in reply:
            return _MODEL_FAILED
        if "raw" in reply:
            return reply["raw"]
        if set(reply) == {"calls"} or set(reply) == {"final"}:
            return reply
    return _MODEL_FAILED


@dataclass
class _ModelRequest:
    round: int
    results: list[dict[str, Json]]
    first_index: int  # request index of the first call of this round


@dataclass
class LoopExpected(Expected):
    model_requests: list[_ModelRequest]
    asked_beyond: bool  # the reference needed a reply the trace does not have

    def summary(self) -> dict[str, Json]:
        s = self.state
        values = {
            "status": s.status, "stopReason": s.stop_reason, "coverage": s.coverage, "executed": s.executed,
            "aborted": None if s.aborted is None else {"index": s.aborted[0], "code": s.aborted[1]},
            # a final answer is reported only for a run that ended with it (R22, R26)
            "final": s.final if s.stop_reason == "FINAL_ANSWER" else None,
            "results": [wire_answer(a) for a in s.answers], "rounds": s.model_requests,
        }
        out = {k: values[k] for k in LOOP_RESULT_FIELDS if k in values}
        out["executions"] = [e.request for e in s.executions]
        return out


def expected_loop(cfg: LoopConfig, replies: Sequence[Json], outcomes: Sequence[Outcome],
                  params: Params | None = None, spec: Spec | None = None) -> LoopExpected:
    s = RunState(cfg.run_config())
    feed = iter(outcomes)
    replies_iter = iter(replies)
    attempts: list[int] = []
    asked: list[_ModelRequest] = []
    beyond = [False]

    def model(st: RunState) -> Json:
        shown = [wire_answer(a) for a in st.answers if a.round == st.round] if st.round else []
        asked.append(_ModelRequest(st.round + 1, shown, len(st.requests)))
        nxt = next(replies_iter, _NOT_ASKED)
        if nxt is _NOT_ASKED:
            beyond[0] = True
            return _MODEL_FAILED
        return reply_value(nxt)

    def outcome_for(st: RunState, ex: core.Execution) -> Outcome:
        attempts.append(ex.request)
        nxt = next(feed, None)
        return nxt if nxt is not None else Outcome.success(None)

    if params is None:
        core.drive(s, model, outcome_for)
    else:
        profiled_drive(s, model, outcome_for, params, spec or default_spec())
    return LoopExpected(s, attempts, asked, beyond[0])


def check_loop_result_shape(result: Json) -> str | None:
    if not isinstance(result, dict):
        return "result: must be an object " + "{" + ", ".join(LOOP_RESULT_FIELDS) + "}"
    for k in LOOP_RESULT_FIELDS:
        if k not in result:
            return f"result.{k}: missing"
    if not isinstance(result["results"], list):
        return "result.results: must be a list"
    err = check_results_shape(result["results"], "result.results")
    if err:
        return err
    for k in ("executed", "rounds"):
        v = result[k]
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            return f"result.{k}: must be an integer >= 0"
    ab = result["aborted"]
    if ab is not None and not (isinstance(ab, dict) and isinstance(ab.get("index"), int) and isinstance(ab.get("code"), str)):
        return "result.aborted: must be null or {index: integer, code: string}"
    if result["final"] is not None and not isinstance(result["final"], str):
        return "result.final: must be a string or null"
    return None


def _flat_calls(models: Sequence[Mapping[str, Json]]) -> list[Json]:
    """Every call the model proposed, across rounds, in order (request i = element i)."""
    out: list[Json] = []
    for m in models:
        v = reply_value(m.get("reply"))
        if isinstance(v, dict) and isinstance(v.get("calls"), list) and set(v) == {"calls"}:
            out += v["calls"]
        elif isinstance(v, list):
            out += v
    return out


def _model_findings(spec: Spec, exp: LoopExpected, models: Sequence[Mapping[str, Json]],
                    result: Json) -> _Finding | None:
    s = exp.state
    for k in range(max(len(exp.model_requests), len(models))):
        want = exp.model_requests[k] if k < len(exp.model_requests) else None
        got = models[k] if k < len(models) else None
        if want is not None and got is None:
            if exp.asked_beyond and k == len(exp.model_requests) - 1:
                status = result.get("status") if isinstance(result, dict) else None
                reason = result.get("stopReason") if isinstance(result, dict) else None
                rule = {"MAX_ROUNDS": "R19", "FINAL_ANSWER": "R22", "MODEL_ERROR": "R18"}.get(str(reason), "R18")
                return _Finding((want.first_index, -1), rule, "model-not-asked", want.first_index,
                                {"modelRequest": {"round": want.round}}, {"status": status, "stopReason": reason},
                                f"Then the run asks the model for round {want.round} (nothing has ended it: "
                                f"{_rounds_text(s)}); but the implementation ended the run with "
                                f"{status}/{reason} without asking.")
            continue
        if want is None and got is not None:
            first = len(s.requests)
            return _Finding((first, -1), end_rule(spec, s), "model-asked-after-end", None,
                            {"modelRequests": len(exp.model_requests)}, {"modelRequest": dict(got)},
                            f"Then the run ends after {len(exp.model_requests)} model request(s) ({s.status}, "
                            f"{s.stop_reason}); but the implementation asked the model again (round "
                            f"{compact(got.get('round'))}).")
        assert want is not None and got is not None
        if got.get("round") != want.round:
            return _Finding((want.first_index, -1), "R18", "wrong-round", want.first_index,
                            {"round": want.round}, {"round": got.get("round")},
                            f"Then model request {k + 1} is for round {want.round}; but the implementation sent "
                            f"round {compact(got.get('round'))}.")
        shown = got.get("results")
        f = _shown_results_finding(want, shown)
        if f is not None:
            return f
        extra = got.get("extra")
        if extra is not None and shows_canary(extra):
            return _Finding((want.first_index, -1), "R15", "secret-shown-to-model", want.first_index,
                            {"shown": {"round": want.round, "results": want.results}}, {"extra": extra},
                            f"Then the model is shown, for round {want.round}, the answers of round {want.round - 1} "
                            "and nothing of a failure's detail (R15); but the implementation also sent it "
                            f"{compact(extra, 120)}, which carries a tool failure's private text (its canary).")
    return None


def _shown_results_finding(want: _ModelRequest, shown: Json) -> _Finding | None:
    def finding(rule: str, kind: str, text: str) -> _Finding:
        return _Finding((want.first_index, -1), rule, kind, want.first_index, {"results": want.results},
                        {"results": shown}, f"Then the model is shown, for round {want.round}, the answers of round "
                        f"{want.round - 1} in request order ({compact(want.results, 120)}, R18); but the "
                        f"implementation {text}.")

    if not isinstance(shown, list):
        if shows_canary(shown):
            return finding("R15", "secret-shown-to-model", f"sent results = {compact(shown, 100)}, which carries a "
                           "tool failure's private text (its canary)")
        return finding("R18", "model-shown-wrong-results", f"sent results = {compact(shown, 60)}")
    for _j, r in enumerate(shown):
        if isinstance(r, dict) and shows_canary({k: v for k, v in r.items() if k != "message"}):
            return finding("R15", "secret-shown-to-model", f"showed the model {compact(r, 100)}, which carries a "
                           "tool failure's private text (its canary) outside the error's message")
        if isinstance(r, dict) and r.get("status") == "error":
            code = r.get("code")
            extra = sorted(set(r) - ERROR_FIELDS)
            if "message" in r and shows_canary(r["message"]):
                return finding("R15", "exception-text-shown", f"showed the model the error {compact(r, 100)}, "
                               "which carries the tool's exception text (its canary)")
            if code not in CODE_TABLE or extra or ("message" in r and r["message"] != CODE_TABLE[code][3]):
                return finding("R15", "unsafe-error-shown-to-model", f"showed the model the error {compact(r, 80)}")
    if len(shown) != len(want.results) or not all(
        isinstance(o, dict) and same_json(o.get("id"), e["id"]) and o.get("status") == e["status"]
        and (same_json(o.get("output"), e.get("output")) if e["status"] == "ok" else o.get("code") == e["code"])
        for o, e in zip(shown, want.results, strict=False)
    ):
        return finding("R18", "model-shown-wrong-results", f"showed it {compact(shown, 120)}")
    return None


def _rounds_text(s: RunState) -> str:
    m = s.config.limits.max_rounds
    return f"max_rounds is {'unlimited' if m is None else m}"


def _outcome_finding(spec: Spec, exp: LoopExpected, calls: Sequence[Json], result: Mapping[str, Json], seen: int,
                     models_seen: int, executed: frozenset[int]) -> _Finding | None:
    s = exp.state
    want = exp.summary()
    if not same_json(result["aborted"], want["aborted"]):
        f = abort_code_finding(spec, exp, calls, result["aborted"], executed)
        if f is not None:
            return f
        return _Finding((_LAST, 1), "R13" if s.config.mode == "abort" else "R20", "wrong-aborted",
                        want["aborted"]["index"] if want["aborted"] else None,
                        {"aborted": want["aborted"]}, {"aborted": result["aborted"]},
                        f"Then the run ends with aborted = {compact(want['aborted'])}; but the implementation "
                        f"reported aborted = {compact(result['aborted'])}.")
    if (result["status"], result["stopReason"]) != (want["status"], want["stopReason"]):
        return _Finding((_LAST, 2), end_rule(spec, s), "wrong-terminal-state", None,
                        {"status": want["status"], "stopReason": want["stopReason"]},
                        {"status": result["status"], "stopReason": result["stopReason"]},
                        f"Then the run ends {want['status']} with stop reason {want['stopReason']} (exactly one "
                        f"terminal state, R21); but the implementation reported {compact(result['status'])}/"
                        f"{compact(result['stopReason'])}.")
    if result["final"] != want["final"]:
        return _Finding((_LAST, 3), "R22", "wrong-final", None, {"final": want["final"]}, {"final": result["final"]},
                        f"Then final = {compact(want['final'])}: the model's final answer, never invented for a run "
                        f"that did not end with one (R22); but the implementation reported "
                        f"{compact(result['final'])}.")
    if result["coverage"] != want["coverage"]:
        return _Finding((_LAST, 4), "R22", "dishonest-coverage", None, {"coverage": want["coverage"]},
                        {"coverage": result["coverage"]},
                        f"Then coverage = {want['coverage']}: COMPLETE only for a COMPLETED run none of whose requests "
                        f"was refused by a limit (R22); but the implementation reported {compact(result['coverage'])}.")
    if result["rounds"] != want["rounds"]:
        return _Finding((_LAST, 5), "R18", "rounds-miscounted", None, {"rounds": want["rounds"]},
                        {"rounds": result["rounds"], "observedModelRequests": models_seen},
                        f"Then rounds = {want['rounds']}, the number of model requests (the harness saw "
                        f"{models_seen}); but the implementation reported {result['rounds']}.")
    if result["executed"] != want["executed"]:
        return _Finding((_LAST, 6), "R12", "executed-miscounted", None, {"executed": want["executed"]},
                        {"executed": result["executed"], "observedExecutions": seen},
                        f"Then executed = {want['executed']}, the executions started (the harness saw {seen} start), "
                        f"never counting replays, rejections or retries (R12, R23); but the implementation reported "
                        f"executed = {result['executed']}.")
    return None


def let_loop(cfg: LoopConfig, models: Sequence[Mapping[str, Json]], limit: int = 16,
             aside: Sequence[Sequence[bool]] = ()) -> str:
    """The run's replies, each request with its index; ``aside``: per reply, the calls the framework's
    parser set aside under a profile (shown without an index: they are no requests)."""
    lines = [f"Let a run with {cfg.describe()} meet a model that answers"]
    n = 0
    index = 0
    for k, m in enumerate(models):
        gone = aside[k] if k < len(aside) else ()
        reply = m.get("reply")
        r = m.get("round")
        if isinstance(reply, dict) and isinstance(reply.get("calls"), list) and set(reply) == {"calls"}:
            lines.append(f"  round {r}: {len(reply['calls'])} call(s)")
            for j, c in enumerate(reply["calls"]):
                if j < len(gone) and gone[j]:
                    if n < limit:
                        lines.append(f"    -- {describe_call(c)} (set aside by the framework's message parser: "
                                     "no request)")
                else:
                    if n < limit:
                        lines.append(f"    #{index} {describe_call(c)}")
                    index += 1
                n += 1
        elif isinstance(reply, dict) and "final" in reply and set(reply) == {"final"}:
            lines.append(f"  round {r}: the final answer {compact(reply['final'], 30)}")
        elif isinstance(reply, dict) and "error" in reply:
            lines.append(f"  round {r}: an error (the model failed)")
        else:
            lines.append(f"  round {r}: {compact(reply.get('raw') if isinstance(reply, dict) else reply, 40)} "
                         "(neither calls nor a final answer)")
    if n > limit:
        lines.append(f"  … ({n - limit} more calls)")
    if not models:
        lines.append("  (the implementation never asked the model)")
    return "\n".join(lines) + "."


def judge_loop(trace: Mapping[str, Json], *, spec: Spec | None = None, params: Params | None = None) -> Verdict:
    spec = spec or default_spec()
    cfg = parse_loop_config(trace.get("config"))
    execs, models, response, perr = split_events(trace.get("events"))
    _need(response is not None or perr is not None, "trace.events",
          "must end with a response or a protocol-error event")
    for n, m in enumerate(models):
        _need(isinstance(m.get("reply"), dict), f"trace.model[{n}].reply", "must be an object")
    replies = [m["reply"] for m in models]  # the profiled driver parses them itself
    shown_models, aside = models, []  # the explanation shows the replies as the model gave them
    if params is not None:  # what the framework's message parser hands on, round by round (indices)
        parsed = parse_replies(replies, params, tuple(cfg.schemas))
        aside = [set_aside(r["calls"], kept) if isinstance(r, dict) and isinstance(r.get("calls"), list)
                 and set(r) == {"calls"} else [] for r, (_, kept) in zip(replies, parsed, strict=True)]
        models = [{**m, "reply": r} for m, (r, _) in zip(models, parsed, strict=True)]
    exp = expected_loop(cfg, replies, [e.outcome for e in execs], params, spec)
    calls = _flat_calls(models)
    attributed, mismatch = attribute_executions(calls, exp.attempts, execs)
    result = response.get("result") if response is not None else None
    shape_error = check_loop_result_shape(result) if response is not None else None
    results: list[Json] | None = None
    aborted_obs: Json = None
    if response is not None and shape_error is None:
        assert isinstance(result, dict)
        results, aborted_obs = result["results"], result["aborted"]
    observed: dict[str, Json] = {
        "modelRequests": [{"round": m.get("round"), "results": m.get("results")} for m in models],
        "executions": [{"request": idx, **ex.to_json()} for idx, ex in attributed],
        "response": result,
    }
    if perr is not None:
        observed["protocolError"] = dict(perr)

    findings: list[_Finding] = []
    mf = _model_findings(spec, exp, models, result)
    if mf is not None and not (perr is not None and mf.kind == "model-not-asked"):
        findings.append(mf)
    if mismatch is not None:
        f = _execution_finding(spec, exp, calls, execs, attributed, mismatch, results, perr is not None)
        if f is not None:
            findings.append(f)
    upto = mismatch if mismatch is not None else len(attributed)
    pf = _principal_finding(exp, calls, attributed, upto)
    if pf is not None:
        findings.append(pf)
    if perr is not None:
        findings.append(_Finding((_LAST, 0), str(perr["code"]), str(perr.get("kind", "protocol")), None,
                                 {"response": "a loop.run result"}, dict(perr),
                                 f"Then the implementation answers loop.run with the outcome; but "
                                 f"{PROTOCOL_CODES[str(perr['code'])]}: {perr.get('detail', '')}"))
    elif shape_error is not None:
        findings.append(_Finding((_LAST, 0), "P5", "bad-response", None, {"response": "a loop.run result"},
                                 {"result": result}, f"Then the implementation answers with the loop.run result "
                                 f"shape of spec/PROTOCOL.md; but {shape_error}."))
    else:
        assert results is not None
        executed_idx = frozenset(idx for idx, _ in attributed if idx is not None)
        af = _answer_finding(spec, exp, calls, results, aborted_obs, executed_idx)
        if af is not None:
            findings.append(af)
    if not findings and results is not None:
        assert isinstance(result, dict)
        of = _outcome_finding(spec, exp, calls, result, len(execs), len(models),
                              frozenset(idx for idx, _ in attributed if idx is not None))
        if of is not None:
            findings.append(of)
    if not findings:
        return Verdict(None, exp.summary(), observed)
    first = min(findings, key=lambda f: f.order)
    violated = observed_invariants(cfg.run_config(), calls, attributed, results or [], aborted_obs)
    v = Violation(
        rule=first.rule, kind=first.kind, index=first.index, expected=first.expected, observed=first.observed,
        explanation=let_loop(cfg, shown_models, aside=aside) + "\n" + first.then,
        invariant=None if first.rule.startswith("P") else pick_invariant(spec, first.rule, violated),
        invariants=violated,
        checked_by=_rules_by_id(spec).get(first.rule, ()),
        transition=(spec_answer_text(spec, exp, calls, first.index)[1]
                    if first.index is not None and first.index < len(calls) and first.order[1] >= 0 else None),
    )
    return Verdict(v, exp.summary(), observed)
