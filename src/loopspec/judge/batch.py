"""The judge: one comparison core for the fuzzer and the conformance oracle.

Pure: a *trace* (plain JSON data: the configuration, the proposed calls and the exchange the
harness observed) goes in, a :class:`Verdict` (plain data) comes out. The judge computes what the
spec requires with the pure reference driver (:func:`loopspec.core.rules.drive`), feeding it the tool
outcomes the harness really gave, in execution order, and reports the FIRST divergence between
that and what the implementation did, with the rule it breaks (SPEC.md), the invariant the
observed behaviour violates (computed by the core's invariant checks on a state rebuilt from the
observations), the request index, expected vs observed, and a "Let … Then …" explanation.

The trace format (``loopspec-trace/1``) is documented in ``spec/PROTOCOL.md`` and has a JSON
Schema in ``spec/schema/trace.schema.json``. A batch trace::

    {"format": "loopspec-trace/1", "kind": "batch",
     "config": {"tools": [{"name", "inputSchema"}], "budget", "mode", "principal"},
     "calls": [ ... the proposal, verbatim ... ],
     "events": [
       {"type": "execute", "callId", "name", "arguments", "principal",
        "outcome": {"status": "ok", "output"} | {"status": "error", "category"}},
       {"type": "response", "result": {"results", "executed", "aborted"}},
       {"type": "protocol-error", "code": "P1".."P7", "kind", "detail"}
     ]}

"First" means: the lowest request index; at one index a wrong execution comes before a wrong
principal, which comes before a wrong answer; protocol failures (the run produced no answer)
come after the executions observed before them; totals (``executed``, ``aborted``) come last.

Loop traces (``"kind": "loop"``) are judged by :mod:`loopspec.judge.loop`, which reuses the
pieces below.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ..core import rules as core
from ..core.profiles import Params, Parser, set_aside
from ..core.profiles import drive as profiled_drive
from ..core.rules import (
    CODE_TABLE,
    FAILURE_CATEGORIES,
    Answer,
    Limits,
    Outcome,
    RunConfig,
    RunState,
    canonical_json,
)
from ..spec.loader import Spec, load_rules
from ..support.text import compact
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

Json = Any

__all__ = [
    "judge_batch",
]


# --------------------------------------------------------------------------------------------
# Spec-derived lookups (never hand-copied: codes -> transitions -> rules)
# --------------------------------------------------------------------------------------------


_RULES: dict[str, dict[str, tuple[str, ...]]] = {}


def _rules_by_id(spec: Spec) -> dict[str, tuple[str, ...]]:
    """Rule id -> the invariants SPEC.md cites for it ("Checked by:"), for the spec next to ``spec``."""
    key = spec.path
    if key not in _RULES:
        path = Path(spec.path).with_name("SPEC.md") if spec.path else None
        try:
            rules = load_rules(path, spec=spec) if path is not None and path.is_file() else load_rules(spec=spec)
        except (OSError, ValueError):
            rules = ()
        _RULES[key] = {r.id: r.invariants for r in rules}
    return _RULES[key]


def _code_transition(spec: Spec, code: str) -> str | None:
    for t in spec.transitions:
        if t.code == code:
            return t.id
    return None


def _effect_transition(spec: Spec, effect: str) -> str | None:
    for t in spec.transitions:
        if t.effect == effect and t.trigger != "cancel":
            return t.id
    return None


def _escalation_transition(spec: Spec, kind: str) -> str | None:
    for t in spec.transitions:
        if t.escalates == kind:
            return t.id
    return None


def _stop_transition(spec: Spec, reason: str | None) -> str | None:
    for t in spec.transitions:
        if t.stop_reason == reason:
            return t.id
    return None


def end_rule(spec: Spec, s: RunState) -> str:
    """The rule that ends a run the way the reference run ended (derived from the spec's transitions)."""
    if s.aborted is not None:
        tid = _escalation_transition(spec, core.code_kind(s.aborted[1]))
    elif s.stop_reason == "FINAL_ANSWER":
        return "R28"  # nothing after the final answer
    else:
        tid = _stop_transition(spec, s.stop_reason)
    return spec.transition(tid).rules[0] if tid is not None else "R21"


def rule_for_code(spec: Spec, code: str) -> str:
    """The rule that says when a request is answered ``code``: the rules of the transition that
    answers with it, without the generic check-order rule R1. Failure categories: R17."""
    tid = _code_transition(spec, code)
    if tid is not None:
        rules = [r for r in spec.transition(tid).rules if r != "R1"]
        if rules:
            return rules[-1] if code in ("REQUEST_LIMIT", "DEADLINE_EXCEEDED", "TOOL_BUDGET_EXHAUSTED") else rules[0]
    return "R17" if code in FAILURE_CATEGORIES else "R11"


def _check_codes(spec: Spec) -> frozenset[str]:
    """Codes answered by the ordered per-call checks (transitions citing R1)."""
    return frozenset(t.code for t in spec.transitions if t.code is not None and "R1" in t.rules)


def _check_order(spec: Spec) -> dict[str, int]:
    """Code -> position of its check in R1's order (the order of the transitions answering it),
    for the checks that reject a call before execution (failure categories excluded)."""
    return {t.code: n for n, t in enumerate(spec.transitions)
            if t.code is not None and "R1" in t.rules and core.code_kind(t.code) != "failure"}


# --------------------------------------------------------------------------------------------
# Reading a trace
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ObservedExecution:
    call_id: Json
    name: Json
    arguments: Json
    principal: Json
    outcome: Outcome

    def to_json(self) -> dict[str, Json]:
        out: dict[str, Json] = {"callId": self.call_id, "name": self.name, "arguments": self.arguments,
                                "principal": self.principal}
        out["outcome"] = ({"status": "ok", "output": self.outcome.output} if self.outcome.ok
                          else {"status": "error", "category": self.outcome.category})
        return out


@dataclass(frozen=True)
class BatchConfig:
    tools: tuple[tuple[str, Json], ...]
    budget: int
    mode: str
    principal: str
    schemas: Mapping[str, core.ToolSchema]
    #: protocol v1.1 (PROTOCOL.md C1): R29's bound and the tools whose calls are barriers (R30)
    max_concurrency: int = 1
    barriers: frozenset[str] = frozenset()

    def run_config(self) -> RunConfig:
        return RunConfig(
            schemas=self.schemas, limits=Limits(max_executions=self.budget), mode=self.mode,
            on_limit="throw" if self.mode == "abort" else "error-result", principal=self.principal,
            run_id="expected", batch=True, max_concurrency=self.max_concurrency, barriers=self.barriers,
        )

    def describe(self) -> str:
        names = ", ".join(n + ("" if n in self.barriers or self.max_concurrency == 1 else " (overlaps)")
                          for n, _ in self.tools) or "none"
        conc = f", max_concurrency={self.max_concurrency}" if self.max_concurrency > 1 else ""
        return f"budget={self.budget}, mode={self.mode}, principal={self.principal!r}{conc}, tools=[{names}]"


def parse_tools(raw: Json, where: str) -> tuple[tuple[tuple[str, Json], ...], dict[str, core.ToolSchema]]:
    _need(isinstance(raw, list), where, "must be a list of {name, inputSchema}")
    tools: list[tuple[str, Json]] = []
    schemas: dict[str, core.ToolSchema] = {}
    for i, t in enumerate(raw):
        w = f"{where}[{i}]"
        _need(isinstance(t, dict) and isinstance(t.get("name"), str) and t["name"] != "", w,
              "must be an object with a non-empty string name")
        name = t["name"]
        _need(name not in schemas, f"{w}.name", f"tool {name!r} is listed twice")
        try:
            schemas[name] = core.parse_schema(t.get("inputSchema"), tool=name)
        except core.ToolDefinitionError as exc:
            raise TraceError(f"{w}.inputSchema{exc.field}", exc.message) from None
        tools.append((name, t.get("inputSchema")))
    return tuple(tools), schemas


def parse_batch_config(raw: Json) -> BatchConfig:
    _need(isinstance(raw, dict), "config", "must be an object")
    tools, schemas = parse_tools(raw.get("tools"), "config.tools")
    budget = raw.get("budget")
    _need(isinstance(budget, int) and not isinstance(budget, bool) and budget >= 0, "config.budget",
          "must be an integer >= 0")
    mode = raw.get("mode", "abort")
    _need(mode in core.MODES, "config.mode", f"must be one of {', '.join(core.MODES)}")
    principal = raw.get("principal", "anonymous")
    _need(isinstance(principal, str), "config.principal", "must be a string")
    conc = raw.get("concurrency")
    if conc is None:
        return BatchConfig(tools, budget, mode, principal, schemas)
    _need(isinstance(conc, dict), "config.concurrency", "must be an object {maxConcurrency, overlap}")
    n = conc.get("maxConcurrency")
    _need(isinstance(n, int) and not isinstance(n, bool) and n >= 1, "config.concurrency.maxConcurrency",
          "must be an integer >= 1")
    overlap = conc.get("overlap", "read-only")
    _need(overlap in core.OVERLAP_POLICIES, "config.concurrency.overlap",
          f"must be one of {', '.join(core.OVERLAP_POLICIES)}")
    barriers = []
    for i, t in enumerate(raw["tools"]):
        hints = t.get("annotations")
        _need(hints is None or (isinstance(hints, dict) and all(
            isinstance(hints.get(h, False), bool) for h in core.HINT_DEFAULTS)), f"config.tools[{i}].annotations",
            "must be an object of boolean MCP hints")
        if not core.tool_overlaps({h: hints[h] for h in core.HINT_DEFAULTS if h in hints} if hints else None,
                                  overlap):
            barriers.append(t["name"])
    return BatchConfig(tools, budget, mode, principal, schemas, n, frozenset(barriers))


def parse_outcome(raw: Json, where: str) -> Outcome:
    _need(isinstance(raw, dict), where, "must be an object")
    if raw.get("status") == "ok":
        _need("output" in raw, where, "an ok outcome needs an output")
        return Outcome.success(raw["output"])
    _need(raw.get("status") == "error" and raw.get("category") in FAILURE_CATEGORIES, where,
          f"must be {{status: ok, output}} or {{status: error, category: one of {', '.join(FAILURE_CATEGORIES)}}}")
    return Outcome.failure(raw["category"])


def parse_execution(ev: Mapping[str, Json], where: str) -> ObservedExecution:
    return ObservedExecution(ev.get("callId"), ev.get("name"), ev.get("arguments"), ev.get("principal"),
                             parse_outcome(ev.get("outcome"), f"{where}.outcome"))


# --------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------


def same_json(a: Json, b: Json) -> bool:
    """Equal as JSON values (keys unordered, 1 == 1.0, true != 1); non-JSON is never equal."""
    ca = canonical_json(a)
    return ca is not None and ca == canonical_json(b)


def call_matches(call: Json, ex: ObservedExecution) -> bool:
    """Is ``ex`` an execution of ``call`` (same id, name and canonical arguments)?"""
    if not isinstance(call, dict):
        return False
    return (
        same_json(call.get("id"), ex.call_id)
        and same_json(call.get("name"), ex.name)
        and same_json(call.get("arguments"), ex.arguments)
    )


def describe_call(call: Json) -> str:
    if not isinstance(call, dict):
        return f"<not an object: {compact(call, 30)}>"
    cid = call.get("id")
    cid_s = "<no id>" if "id" not in call else (repr(cid) if isinstance(cid, str) else compact(cid, 14))
    name = call.get("name")
    if "name" not in call:
        name_s = "<no name>"
    elif isinstance(name, str):  # a blank or padded name is shown quoted, so it stays visible
        name_s = name if name and name.strip() == name else repr(name)
    else:
        name_s = compact(name, 20)
    args = compact(call["arguments"], 40) if "arguments" in call else "<no arguments>"
    return f"{cid_s} {name_s}({args})"


def describe_execution(ex: ObservedExecution) -> str:
    name = ex.name if isinstance(ex.name, str) else compact(ex.name, 20)
    return f"{compact(ex.call_id, 14)} {name}({compact(ex.arguments, 40)})"


def describe_answer(a: Json) -> str:
    if not isinstance(a, dict):
        return compact(a, 40)
    if a.get("status") == "ok":
        return f"ok {compact(a.get('output'), 40)}"
    if a.get("status") == "error":
        return f"error {a.get('code')}"
    return compact(a, 40)


def wire_answer(a: Answer) -> dict[str, Json]:
    """The protocol-visible shape of an expected answer (R11, R15)."""
    if a.status == "ok":
        return {"id": a.call_id, "status": "ok", "output": a.output}
    return {"id": a.call_id, "status": "error", "code": a.code}


def let_clause(config_text: str, calls: Sequence[Json], *, limit: int = 12,
               aside: Sequence[bool] = ()) -> str:
    """The proposal, each request with its index; ``aside``: calls the framework's parser set aside
    under a profile (shown without an index: they are no requests)."""
    lines = [f"Let a batch with {config_text} propose"]
    index = 0
    for k, c in enumerate(calls[:limit]):
        if k < len(aside) and aside[k]:
            lines.append(f"  -- {describe_call(c)} (set aside by the framework's message parser: no request)")
        else:
            lines.append(f"  #{index} {describe_call(c)}")
            index += 1
    if len(calls) > limit:
        lines.append(f"  … ({len(calls) - limit} more calls)")
    return "\n".join(lines) + "."


# --------------------------------------------------------------------------------------------
# The expected behaviour: the pure reference driver, fed the observed outcomes in order
# --------------------------------------------------------------------------------------------


@dataclass
class Expected:
    state: RunState
    attempts: list[int]  # request index of each attempt, in order (what outcome_for was asked)

    @property
    def answers(self) -> list[Answer]:
        return self.state.answers

    def answer(self, index: int) -> Answer | None:
        return self.state.answers[index] if index < len(self.state.answers) else None

    def summary(self) -> dict[str, Json]:
        s = self.state
        return {
            "results": [wire_answer(a) for a in s.answers],
            "executed": s.executed,
            "executions": [e.request for e in s.executions],
            "aborted": None if s.aborted is None else {"index": s.aborted[0], "code": s.aborted[1]},
            "status": s.status,
            "stopReason": s.stop_reason,
        }


def expected_batch(cfg: BatchConfig, calls: Sequence[Json], outcomes: Sequence[Outcome],
                   params: Params | None = None, spec: Spec | None = None,
                   releases: Sequence[int] | None = None) -> Expected:
    s = RunState(cfg.run_config())
    if params is not None and params.reference_strict(spec or default_spec()):
        params = None  # only what the judge accepts differs (R47): the reference run is the strict one
    if cfg.max_concurrency > 1 and params is None:
        return _expected_concurrent(s, calls, outcomes, releases or ())
    feed = iter(outcomes)
    attempts: list[int] = []

    def outcome_for(st: RunState, ex: core.Execution) -> Outcome:
        attempts.append(ex.request)
        nxt = next(feed, None)
        return nxt if nxt is not None else Outcome.success(None)

    if params is None:
        core.drive(s, lambda st: list(calls), outcome_for)
    else:
        profiled_drive(s, lambda st: {"calls": list(calls)}, outcome_for, params, spec or default_spec())
    return Expected(s, attempts)


def _expected_concurrent(s: RunState, calls: Sequence[Json], outcomes: Sequence[Outcome],
                         releases: Sequence[int]) -> Expected:
    """Section 5's reference run of a concurrent step (PROTOCOL.md C7): execution k gets the outcome
    the harness gave the k-th ``tool.execute``; at its j-th wait the run lands the execution the
    harness released j-th (the lowest in flight when that one is not in flight here)."""
    j = 0

    def arrive(st: RunState, must: bool) -> int | None:
        nonlocal j
        if not must:
            return None  # the harness releases results only when the implementation waits (C3)
        flying = core.in_flight(st)
        want = releases[j] if j < len(releases) else None
        j += 1
        hit = next((e.request for e in flying if e.ordinal == want), None)
        return hit if hit is not None else min(e.request for e in flying)

    def outcome_for(st: RunState, ex: core.Execution) -> Outcome:
        k = ex.ordinal
        return outcomes[k - 1] if k <= len(outcomes) else Outcome.success(None)

    core.drive(s, lambda st: list(calls), outcome_for, arrive=arrive)
    return Expected(s, [e.request for e in sorted(s.executions, key=lambda e: e.ordinal)])


# --------------------------------------------------------------------------------------------
# Describing what the spec does with a request (for explanations)
# --------------------------------------------------------------------------------------------


def spec_answer_text(spec: Spec, exp: Expected, calls: Sequence[Json], index: int) -> tuple[str, str | None, str]:
    """(what the spec does with request ``index``, its transition id, why) from the reference run."""
    s = exp.state
    a = exp.answer(index)
    what = "batch" if s.config.batch else "run"
    if a is None:
        if s.aborted is not None and s.aborted[0] == index:
            code = s.aborted[1]
            kind = core.code_kind(code)
            t = _escalation_transition(spec, kind)
            how = (f"in {s.config.mode} mode" if kind != "limit" else f"with the limit policy {s.config.on_limit}")
            if index >= len(s.requests):  # only a profile ends a run before the request is taken up
                return (f"ends the {what} before any call of its proposal runs: under the profile the framework "
                        f"refuses the proposal there ({code}), so aborted = {{index: {index}, code: {code}}}", t,
                        _why_code(s, calls, index, code))
            return (f"ends the {what}: it is answered {code}, which {how} ends it, so it gets no "
                    f"entry in results and aborted = {{index: {index}, code: {code}}}", t,
                    _why_code(s, calls, index, code))
        if s.aborted is not None and index > s.aborted[0]:
            return (f"is never processed: the {what} already ended at request #{s.aborted[0]} "
                    f"({s.aborted[1]}, {end_rule(spec, s)})", _escalation_transition(spec, core.code_kind(s.aborted[1])), "")
        if index >= len(s.requests) and s.status is not None:
            return (f"is never processed: the {what} already ended ({s.status}, {s.stop_reason}, "
                    f"{end_rule(spec, s)})", _stop_transition(spec, s.stop_reason), "")
        return (f"is not part of the {what}", None, "")
    if a.code is not None:
        why = _why_code(s, calls, index, a.code)
        if a.executed:
            return (f"is executed, the tool fails with {a.code}, and the request is answered {a.code} "
                    "(nothing is stored)", _effect_transition(spec, "answer_failure"), why)
        return f"is answered {a.code} and never executes", _code_transition(spec, a.code), why
    if a.replayed:
        call = calls[index]
        b = s.bindings.get(call["id"]) if isinstance(call, dict) and isinstance(call.get("id"), str) else None
        src = f"#{b.success_at}" if b is not None and b.success_at is not None else "an earlier request"
        return (f"is a replay of {src} (same id, same content, stored success): it is answered with exactly "
                f"the stored output {compact(a.output, 40)} and nothing executes",
                _effect_transition(spec, "answer_replay"), "")
    return (f"is executed once and answered with the tool's output {compact(a.output, 40)}",
            _effect_transition(spec, "store_success"), "")


def spec_says(spec: Spec, exp: Expected, calls: Sequence[Json], index: int) -> str:
    """What the spec does with request ``index``, with the reason, as one clause."""
    if index >= len(calls):
        return "does not exist"
    text, _, why = spec_answer_text(spec, exp, calls, index)
    return f"{text}, because {why}" if why else text


def _why_code(s: RunState, calls: Sequence[Json], index: int, code: str) -> str:
    call = calls[index] if index < len(calls) else None
    name = call.get("name") if isinstance(call, dict) else None
    if code == "INVALID_CALL":
        return "the call is malformed (R2)"
    if code == "UNKNOWN_TOOL":
        return f"tool {name!r} is not registered for the batch (R3)"
    if code == "INVALID_ARGUMENT":
        return f"its arguments do not satisfy the input schema of {name!r} (R4)"
    if code == "ID_CONFLICT":
        cid = call.get("id") if isinstance(call, dict) else None
        b = s.bindings.get(cid) if isinstance(cid, str) else None
        at = f"#{b.bound_at}" if b is not None else "an earlier request"
        return f"id {cid!r} is already bound to other content by {at} (R7)"
    if code == "BUDGET_EXHAUSTED":
        b = s.config.limits.max_executions
        if b == 0:
            return "a budget of 0 admits no execution at all (R9)"
        return f"the budget of {b} execution(s) is already used up by the executions before it (R9)"
    if code in FAILURE_CATEGORIES:
        return f"the tool failed with {code} (R17)"
    return ""


# --------------------------------------------------------------------------------------------
# Rebuilding a core state from the observations, to name the invariant that breaks
# --------------------------------------------------------------------------------------------


def observed_invariants(
    cfg: RunConfig,
    calls: Sequence[Json],
    attributed: Sequence[tuple[int | None, ObservedExecution]],
    results: Sequence[Json],
    aborted: Json,
) -> tuple[str, ...]:
    """The core invariants violated by the observed behaviour, evaluated on a RunState rebuilt from
    it. Best effort: an invariant that cannot be evaluated on the rebuilt state is not reported."""
    try:
        last = len(calls)
        if isinstance(aborted, dict) and isinstance(aborted.get("index"), int):
            last = min(len(calls), aborted["index"] + 1)
        s = RunState(cfg)
        s.requests = [core.Request(i, 1, *_call_fields(c)) for i, c in enumerate(calls[:last])]
        executed_idx: set[int] = set()
        for k, (idx, ex) in enumerate(attributed):
            if idx is None or idx >= last or not isinstance(ex.name, str):
                continue
            s.executions.append(core.Execution(idx, ex.name, ex.principal if isinstance(ex.principal, str) else "",
                                               k + 1, 1, ex.outcome))
            s.per_tool[ex.name] = s.per_tool.get(ex.name, 0) + 1
            executed_idx.add(idx)
        for j, r in enumerate(results[:last]):
            if not isinstance(r, dict):
                continue
            ok = r.get("status") == "ok"
            code = None if ok else (r.get("code") if isinstance(r.get("code"), str) else "?")
            s.answers.append(Answer(j, 1, r.get("id"), "ok" if ok else "error", r.get("output") if ok else None,
                                    code, replayed=ok and j not in executed_idx, executed=j in executed_idx))
        for r in s.requests:
            admitted = core.within(r.index, cfg.limits.max_requests)
            if admitted and core._passes_structure(cfg, r) and isinstance(r.call_id, str):
                assert isinstance(r.name, str) and isinstance(r.arguments, dict)
                s.bindings.setdefault(r.call_id, core.Binding(r.name, core.content_key(r.name, r.arguments), r.index))
        if isinstance(aborted, dict) and isinstance(aborted.get("index"), int) and aborted.get("code") in CODE_TABLE:
            s.aborted = (aborted["index"], aborted["code"])
            s.status, s.stop_reason = "REJECTED", CODE_TABLE[aborted["code"]][2]
        else:
            s.status, s.stop_reason = "COMPLETED", "END_OF_BATCH"
        s.terminations = 1
    except Exception:
        return ()
    out = []
    for name, check in core.INVARIANTS.items():
        try:
            if not check(s):
                out.append(name)
        except Exception:
            continue
    return tuple(out)


def _call_fields(c: Json) -> tuple[Json, Json, Json]:
    if isinstance(c, dict):
        return c.get("id"), c.get("name"), c.get("arguments")
    return None, None, None


def pick_invariant(spec: Spec, rule: str, violated: Sequence[str]) -> str | None:
    cited = _rules_by_id(spec).get(rule, ())
    for inv in violated:
        if inv in cited:
            return inv
    return cited[0] if len(cited) == 1 else None


# --------------------------------------------------------------------------------------------
# Comparing: executions, principal, answers, totals
# --------------------------------------------------------------------------------------------


@dataclass
class _Finding:
    """A divergence before enrichment (invariants, transition, explanation)."""

    order: tuple[int, int]  # (request index or a large number, tie-break) — smaller is first
    rule: str
    kind: str
    index: int | None
    expected: Json
    observed: Json
    then: str  # the "Then … but …" part of the explanation


_LAST: Final = 1 << 30


def attribute_executions(
    calls: Sequence[Json], exp_attempts: Sequence[int], observed: Sequence[ObservedExecution]
) -> tuple[list[tuple[int | None, ObservedExecution]], int | None]:
    """Attribute each observed execution to a request; return them and the first mismatch position.

    Executions that match the expected sequence position by position are attributed to the
    expected request. From the first mismatch on, each is attributed to the first request after
    the previous attribution whose (id, name, arguments) it carries, else to any such request,
    else to none.
    """
    out: list[tuple[int | None, ObservedExecution]] = []
    first_mismatch: int | None = None
    prev = -1
    for k, ex in enumerate(observed):
        if first_mismatch is None and k < len(exp_attempts) and call_matches(calls[exp_attempts[k]], ex):
            prev = exp_attempts[k]
            out.append((prev, ex))
            continue
        if first_mismatch is None:
            first_mismatch = k
        idx = next((i for i in range(prev + 1, len(calls)) if call_matches(calls[i], ex)), None)
        if idx is None and k > 0 and out[k - 1][0] == prev and prev >= 0 and call_matches(calls[prev], ex) and (
                not observed[k - 1].outcome.ok):
            idx = prev  # another attempt of the request that just failed: a retry
        if idx is None:
            idx = next((i for i in range(len(calls)) if call_matches(calls[i], ex)), None)
        if idx is not None:
            prev = max(prev, idx)
        out.append((idx, ex))
    if first_mismatch is None and len(observed) < len(exp_attempts):
        first_mismatch = len(observed)
    return out, first_mismatch


def _execution_finding(
    spec: Spec, exp: Expected, calls: Sequence[Json], observed: Sequence[ObservedExecution],
    attributed: Sequence[tuple[int | None, ObservedExecution]], k: int, results: Sequence[Json] | None,
    protocol_failed: bool, ended: Json = None, rejected: bool = False,
) -> _Finding | None:
    """The divergence at execution position ``k`` (the first mismatch). ``ended``: the observed ``aborted``;
    ``rejected``: the batch was rejected as a whole (R47), which :func:`_rejection_finding` judges when the
    implementation merely executed less."""
    exp_req = exp.attempts[k] if k < len(exp.attempts) else None
    obs = attributed[k] if k < len(attributed) else None
    obs_req = obs[0] if obs is not None else None
    if obs is None and (protocol_failed or rejected):
        return None  # the run stopped before this execution: the protocol failure (or the rejection) explains it
    executed_wrongly = obs is not None and (
        (obs_req is None and exp_req is None) or (obs_req is not None and (exp_req is None or obs_req < exp_req))
    )
    if executed_wrongly:
        assert obs is not None
        ex = obs[1]
        observed_j = {"execution": k + 1, **ex.to_json()}
        if obs_req is None:
            listed = isinstance(ex.name, str) and ex.name in exp.state.config.schemas
            rule = "R3" if not listed else "R1"
            return _Finding(
                (_LAST - 1, 0), rule, "executed-unproposed-call", None,
                {"executions": len(exp.attempts)}, observed_j,
                f"Then only the calls above may execute (and only those passing the checks, R1); but the "
                f"implementation executed {describe_execution(ex)}, which is not one of them"
                + ("" if listed else " and names no registered tool (R3)") + ".",
            )
        what, _, why = spec_answer_text(spec, exp, calls, obs_req)
        a = exp.answer(obs_req)
        prev_same = k > 0 and attributed[k - 1][0] == obs_req
        if prev_same:
            failed = attributed[k - 1][1].outcome
            retries = exp.state.config.limits.max_retries
            cat = failed.category
            why_not = (f"its execution failed with {cat}, which is not retried" if cat != "DEPENDENCY_TEMPORARY"
                       else f"max_retries is {retries} and its retries are used up")
            return _Finding(
                (obs_req, 0), "R23", "retried-beyond-budget", obs_req,
                {"attempts": exp.attempts.count(obs_req)}, {"attempt": k + 1, **attributed[k][1].to_json()},
                f"Then request #{obs_req} {what}; its execution is attempted {exp.attempts.count(obs_req)} time(s) "
                f"({why_not}, R23); but the implementation entered the tool again (attempt {k + 1}: "
                f"{describe_execution(attributed[k][1])}).",
            )
        if a is not None and a.replayed:
            rule, kind = "R6", "replay-reexecuted"
        elif a is not None and a.code is not None and not a.executed:
            rule, kind = rule_for_code(spec, a.code), f"executed-despite-{a.code.lower().replace('_', '-')}"
        elif exp.state.aborted is not None and obs_req > exp.state.aborted[0]:
            rule, kind = end_rule(spec, exp.state), "executed-after-abort"
        elif obs_req >= len(exp.state.requests):
            rule, kind = end_rule(spec, exp.state), "executed-after-end"
        elif exp.state.aborted is not None and obs_req == exp.state.aborted[0]:
            code = exp.state.aborted[1]
            rule, kind = rule_for_code(spec, code), f"executed-despite-{code.lower().replace('_', '-')}"
        elif a is not None and a.executed:
            rule, kind = "R12", "executed-twice"
        else:
            rule, kind = "R12", "unexpected-execution"
        because = f" because {why}" if why else ""
        return _Finding(
            (obs_req, 0), rule, kind, obs_req,
            {"answer": None if a is None else wire_answer(a), "executes": False}, observed_j,
            f"Then request #{obs_req} {what}{because}; but the implementation executed it "
            f"(execution {k + 1}: {describe_execution(ex)}).",
        )
    assert exp_req is not None
    if k > 0 and exp.attempts[k - 1] == exp_req:  # the spec retries here (R23)
        answer = results[exp_req] if results is not None and exp_req < len(results) else None
        return _Finding(
            (exp_req, 0), "R23", "retry-missing", exp_req, {"attempts": exp.attempts.count(exp_req)},
            {"answer": answer, "instead": None if obs is None else obs[1].to_json()},
            f"Then request #{exp_req}'s execution failed with DEPENDENCY_TEMPORARY and max_retries "
            f"({exp.state.config.limits.max_retries}) allows another attempt within the same execution, so the "
            f"tool is entered again (R23, the machine's transition T22 fires first); but the implementation did "
            f"not retry" + (f" (it answered {describe_answer(answer)})" if answer is not None else "") + ".",
        )
    # the spec executes request exp_req here and the implementation did not
    call = calls[exp_req]
    answer = results[exp_req] if results is not None and exp_req < len(results) else None
    ended_here = (answer is None and obs is None and isinstance(ended, dict) and ended.get("index") == exp_req
                  and isinstance(ended.get("code"), str))
    if ended_here:  # the implementation ended the batch at this request: its code is its answer (never "missing")
        assert isinstance(ended, dict)
        answer = {"id": core.answer_id(call.get("id") if isinstance(call, dict) else None), "status": "error",
                  "code": ended["code"]}
    observed_j: dict[str, Json] = {"answer": answer, "executes": False}
    if obs is not None:
        observed_j["instead"] = {"execution": k + 1, **obs[1].to_json()}
    rule, kind = "R12", "execution-missing"
    earlier = [i for i in range(exp_req) if isinstance(calls[i], dict) and isinstance(call, dict)
               and same_json(calls[i].get("name"), call.get("name"))
               and same_json(calls[i].get("arguments"), call.get("arguments"))]
    same_id_before = [i for i in earlier if same_json(calls[i].get("id"), call.get("id"))]
    if isinstance(answer, dict) and answer.get("status") == "error" and isinstance(answer.get("code"), str):
        code = answer["code"]
        if code in FAILURE_CATEGORIES and same_id_before:
            rule, kind = "R10", "failure-cached"
        elif code == "BUDGET_EXHAUSTED":
            rule, kind = "R9", "budget-refused-too-early"
        elif code in CODE_TABLE:
            rule, kind = rule_for_code(spec, code), f"wrongly-answered-{code.lower().replace('_', '-')}"
    elif isinstance(answer, dict) and answer.get("status") == "ok":
        if same_id_before:
            rule, kind = "R10", "failure-not-retried"
        elif earlier:
            rule, kind = "R8", "deduplicated-by-content"
        else:
            rule, kind = "R12", "answered-without-executing"
    elif answer is None and results is not None:
        rule, kind = "R11", "execution-missing"
    what = ("passes every check with the budget not yet used up, so it must be executed (the tool is entered "
            "once for it)")
    reason = ""
    if kind == "deduplicated-by-content":
        reason = (f" (its id differs from #{earlier[-1]}, which has the same content: distinct ids are distinct "
                  "requests, R8)")
    elif kind in ("failure-cached", "failure-not-retried"):
        reason = f" (#{same_id_before[-1]} with the same id and content failed, and failures are never stored, R10)"
    did = f"answered it {describe_answer(answer)} without executing it" if answer is not None else "did not execute it"
    if ended_here:
        assert isinstance(ended, dict)
        observed_j = {"answer": None, "aborted": ended, "executes": False}
        did = f"ended the batch there with {ended['code']} (aborted = {compact(ended, 40)}) without executing it"
    if obs is not None:
        did += f" (its execution {k + 1} was {describe_execution(obs[1])} instead)"
    return _Finding(
        (exp_req, 0), rule, kind, exp_req, {"answer": _wire_or_none(exp.answer(exp_req)), "executes": True},
        observed_j, f"Then request #{exp_req} {what}{reason}; but the implementation {did}.",
    )


def _wire_or_none(a: Answer | None) -> Json:
    return None if a is None else wire_answer(a)


def _principal_finding(
    exp: Expected, calls: Sequence[Json], attributed: Sequence[tuple[int | None, ObservedExecution]],
    upto: int,
) -> _Finding | None:
    want = exp.state.config.principal
    for k, (idx, ex) in enumerate(attributed[:upto]):
        if ex.principal != want:
            return _Finding(
                (idx if idx is not None else _LAST - 1, 1), "R16", "untrusted-principal", idx,
                {"principal": want}, {"principal": ex.principal, "execution": k + 1, **ex.to_json()},
                f"Then every execution receives the {'batch' if exp.state.config.batch else 'run'}'s trusted "
                f"principal {want!r} in its context, whatever "
                f"the arguments say (R16); but execution {k + 1} ({describe_execution(ex)}) received "
                f"{compact(ex.principal, 30)}.",
            )
    return None


def _last_round(exp: Expected, i: int) -> bool:
    """Is request ``i`` of a loop run that the step limit ended (MAX_ROUNDS) in its last round?"""
    s = exp.state
    if s.config.batch or s.stop_reason != "MAX_ROUNDS" or i >= len(s.requests) or not s.requests:
        return False
    return s.requests[i].round == max(r.round for r in s.requests)


def _answer_finding(spec: Spec, exp: Expected, calls: Sequence[Json], results: Sequence[Json],
                    aborted_obs: Json, executed: frozenset[int]) -> _Finding | None:
    exp_answers = exp.answers
    mode = exp.state.config.mode
    check_codes = _check_codes(spec)
    exp_abort = exp.state.aborted
    obs_abort_at = aborted_obs.get("index") if isinstance(aborted_obs, dict) else None
    n = max(len(exp_answers), len(results))
    for i in range(n):
        e = exp_answers[i] if i < len(exp_answers) else None
        o = results[i] if i < len(results) else None
        what = spec_says(spec, exp, calls, i)
        if o is None:
            assert e is not None
            if obs_abort_at == i and isinstance(aborted_obs, dict):
                code = aborted_obs.get("code")
                did = (f"ended the {'batch' if exp.state.config.batch else 'run'} there "
                       f"(aborted = {compact(aborted_obs, 50)})")
                if e.code is not None and code == e.code:  # the right answer, but it must not escalate here
                    rule = ("R20" if core.code_kind(code) == "limit" else "R14" if mode == "continue" else "R13")
                    return _Finding((i, 2), rule, "aborted-wrongly", i,
                                    {"answer": wire_answer(e)}, {"answer": None, "aborted": aborted_obs},
                                    f"Then request #{i} {what}, and the {'batch' if exp.state.config.batch else 'run'} "
                                    f"goes on ({mode} mode, limit policy {exp.state.config.on_limit}); but the "
                                    f"implementation {did}.")
                as_answer = {"id": e.call_id, "status": "error", "code": code}
                f = _compare_answer(spec, exp, calls, i, e, as_answer, what, check_codes, executed, did=did)
                if f is not None:
                    f.observed = {"answer": None, "aborted": aborted_obs}
                    return f
            if exp_abort is not None and i < exp_abort[0]:
                rule, kind = "R13", "answers-lost-on-abort"
                did = (f"returned only {len(results)} result(s) with aborted = {compact(aborted_obs, 40)}: the "
                       f"answers before the aborting request #{exp_abort[0]} must be kept")
            elif e.code is not None and e.code in check_codes and i not in executed:
                # a request the checks refuse (malformed, unknown, invalid, a conflict) left without its error
                # answer: the call was set aside silently, a cause of its own beside a result that went missing
                rule, kind = "R11", "rejection-unanswered"
                did = (f"returned no answer for it (only {len(results)} result(s)): the {e.code} error it is owed "
                       "never reached the model")
            elif _last_round(exp, i):
                # the step limit ended the run after this round's calls ran: they are answered all the same (R19),
                # a cause of its own beside an answer missing in the middle of a run
                rule, kind = "R11", "last-round-unanswered"
                did = (f"returned no answer for it (only {len(results)} result(s)), though it was requested in the "
                       "last round the step limit allowed")
            else:
                rule, kind = "R11", "answer-missing"
                did = f"returned no answer for it (only {len(results)} result(s))"
            return _Finding((i, 2), rule, kind, i, {"answer": wire_answer(e)}, {"answer": None, "results": len(results)},
                            f"Then request #{i} {what}; but the implementation {did}.")
        if e is None:
            if exp_abort is not None and exp_abort[0] == i:
                code = exp_abort[1]
                if isinstance(o, dict) and o.get("status") == "error" and o.get("code") == code:
                    did = f"answered it {describe_answer(o)} in results" + (
                        "" if aborted_obs is None else f" and reported aborted = {compact(aborted_obs, 40)}")
                    return _Finding((i, 2), "R13", "aborting-request-answered", i, {"answer": None,
                                    "aborted": {"index": i, "code": code}}, {"answer": o, "aborted": aborted_obs},
                                    f"Then request #{i} {what}; but the implementation {did}.")
                would = Answer(i, 1, core.answer_id(calls[i].get("id") if isinstance(calls[i], dict) else None),
                               "error", code=code)
                f = _compare_answer(spec, exp, calls, i, would, o, what, check_codes, executed)
                if f is not None:
                    return f
            return _Finding((i, 2), "R11", "extra-answer", i, {"answer": None}, {"answer": o},
                            f"Then request #{i} {what}; but the implementation returned an extra result "
                            f"{compact(o, 50)}.")
        f = _compare_answer(spec, exp, calls, i, e, o, what, check_codes, executed)
        if f is not None:
            return f
    return None


def _same_content_note(calls: Sequence[Json], i: int) -> str:
    """Why an ID_CONFLICT is wrong: the id's first request has the same canonical content."""
    call = calls[i]
    if not isinstance(call, dict):
        return ""
    for j in range(i):
        c = calls[j]
        if isinstance(c, dict) and same_json(c.get("id"), call.get("id")):
            if same_json(c.get("name"), call.get("name")) and same_json(c.get("arguments"), call.get("arguments")):
                return (f", although its content equals that of #{j}, which bound the id (same tool, same canonical "
                        f"arguments: object keys unordered, 1 equal to 1.0)")
            return ""
    return ""


def _failed_before(calls: Sequence[Json], answers: Sequence[Answer], i: int, code: str) -> int | None:
    """An earlier request with the same id and content whose execution failed with ``code``."""
    call = calls[i] if i < len(calls) else None
    if not isinstance(call, dict):
        return None
    for j in range(min(i, len(answers))):
        a, c = answers[j], calls[j]
        if (a.executed and a.code == code and isinstance(c, dict) and same_json(c.get("id"), call.get("id"))
                and same_json(c.get("name"), call.get("name"))
                and same_json(c.get("arguments"), call.get("arguments"))):
            return j
    return None


def _reuse(calls: Sequence[Json], answers: Sequence[Answer], i: int, output: Json) -> tuple[str, int] | None:
    """Did the implementation answer request ``i`` with an earlier request's output it must not reuse?
    ("R8", j): same content under another id; ("R7", j): the same id, bound to other content."""
    call = calls[i] if i < len(calls) else None
    if not isinstance(call, dict):
        return None
    for j in range(min(i, len(answers))):
        a, c = answers[j], calls[j]
        if a.status != "ok" or not isinstance(c, dict) or not same_json(a.output, output):
            continue
        same_id = same_json(c.get("id"), call.get("id"))
        same_content = same_json(c.get("name"), call.get("name")) and same_json(c.get("arguments"), call.get("arguments"))
        if same_content and not same_id:
            return "R8", j
        if same_id and not same_content:
            return "R7", j
    return None


def _compare_answer(spec: Spec, exp: Expected, calls: Sequence[Json], i: int, e: Answer, o: Json, what: str,
                    check_codes: frozenset[str], executed: frozenset[int], did: str = "") -> _Finding | None:
    want = wire_answer(e)

    def finding(rule: str, kind: str, text: str) -> _Finding:
        if did:  # the answer was an abort: say so instead of "answered CODE"
            code = o.get("code") if isinstance(o, dict) else None
            text = text.replace(f"answered {code}", did, 1) if f"answered {code}" in text else f"{did} and {text}"
        return _Finding((i, 2), rule, kind, i, {"answer": want}, {"answer": o},
                        f"Then request #{i} {what}; but the implementation {text}.")

    if (isinstance(o, dict) and o.get("status") == "error" and o.get("code") in FAILURE_CATEGORIES
            and i not in executed and e.code != o.get("code")):
        j = _failed_before(calls, exp.answers, i, o["code"])
        if j is not None:
            return finding("R10", "failure-cached", f"answered it {o['code']} without executing it: the failure of "
                           f"#{j} (same id, same content) was stored, and failures are never stored (R10)")
    if isinstance(o, dict) and o.get("status") == "ok" and i not in executed and not (e.status == "ok" and e.replayed):
        reused = _reuse(calls, exp.answers, i, o.get("output"))
        if reused is not None:
            rule_id, j = reused
            if rule_id == "R8":
                return finding("R8", "deduplicated-by-content",
                               f"answered it ok with the output of #{j}, which has the same content under another "
                               "id, without executing it: distinct ids are distinct requests (R8)")
            return finding("R7", "conflict-reused", f"answered it ok with the stored output of #{j}, which has the "
                           "same id but other content (R7)")

    if not same_json(o.get("id"), e.call_id) or ("id" not in o):
        ids = [c.get("id") if isinstance(c, dict) else None for c in calls]
        other = [j for j, cid in enumerate(ids) if j != i and same_json(cid, o.get("id"))]
        if other:
            return finding("R11", "answers-out-of-order",
                           f"put an answer for id {compact(o.get('id'), 20)} (request #{other[0]}) at position {i}")
        return finding("R11", "wrong-answer-id", f"answered with id {compact(o.get('id'), 20)}")
    status, code = o.get("status"), o.get("code")
    if isinstance(o, dict) and shows_canary({k: v for k, v in o.items() if k != "message"}):
        return finding("R15", "secret-shown-to-model", f"answered {compact(o, 100)}, which carries a tool failure's "
                       "private text (its canary): only the error's structure may reach the model")
    if status == "error":
        if code not in CODE_TABLE:
            return finding("R15", "unknown-error-code", f"answered with the code {compact(code, 30)}, which the spec does not define")
        extra = sorted(set(o) - ERROR_FIELDS)
        if extra:
            return finding("R15", "unsafe-error", f"answered {code} with extra fields {', '.join(extra)} "
                           f"({compact({k: o[k] for k in extra}, 60)}): an error answer is exactly (code, "
                           "message, next_action, request_id)")
        if "message" in o and shows_canary(o["message"]):
            return finding("R15", "exception-text-shown", f"answered {code} with the message {compact(o['message'], 80)}, "
                           "which carries the tool's exception text (its canary): the exception reaches the model")
        if "message" in o and o["message"] != CODE_TABLE[code][3]:
            return finding("R15", "unsafe-error-message", f"answered {code} with the message {compact(o['message'], 60)} "
                           f"instead of the code's fixed safe message {CODE_TABLE[code][3]!r}")
        if "next_action" in o and o["next_action"] != CODE_TABLE[code][1]:
            return finding("R15", "wrong-next-action", f"answered {code} with next_action {compact(o['next_action'], 30)} "
                           f"instead of {CODE_TABLE[code][1]}")
    if e.status == "ok":
        if status == "ok":
            if same_json(o.get("output"), e.output):
                return None
            if e.replayed:
                return finding("R6", "replay-wrong-output", f"answered with {compact(o.get('output'), 40)}")
            return finding("R11", "wrong-output", f"answered with {compact(o.get('output'), 40)}, which is not what "
                           "the tool returned for it")
        if status == "error":
            if e.replayed:
                note = _same_content_note(calls, i) if code == "ID_CONFLICT" else ""
                return finding("R6", "replay-refused", f"answered {code}{note}")
            if code in FAILURE_CATEGORIES:
                return finding("R17", "invented-failure", f"answered {code} though the tool succeeded")
            return finding(rule_for_code(spec, code), f"wrongly-answered-{code.lower().replace('_', '-')}",
                           f"answered {code}")
        return finding("R11", "malformed-answer", f"answered {compact(o, 50)}")
    assert e.code is not None
    if status == "ok":
        if e.code == "ID_CONFLICT":
            return finding("R7", "conflict-reused", f"answered it ok with {compact(o.get('output'), 40)}")
        if e.code in FAILURE_CATEGORIES:
            return finding("R17", "failure-hidden", f"answered it ok with {compact(o.get('output'), 40)}")
        return finding(rule_for_code(spec, e.code), f"missed-{e.code.lower().replace('_', '-')}",
                       f"answered it ok with {compact(o.get('output'), 40)}")
    if status != "error":
        return finding("R11", "malformed-answer", f"answered {compact(o, 50)}")
    if code == e.code:
        return None
    if e.code in FAILURE_CATEGORIES and code in FAILURE_CATEGORIES:
        return finding("R17", "wrong-failure-category", f"answered {code}")
    order = _check_order(spec)
    if e.code in order and code in order:
        if order[code] < order[e.code]:  # the spec's check for `code` passed: the implementation's is wrong
            return finding(rule_for_code(spec, code), f"wrongly-answered-{code.lower().replace('_', '-')}",
                           f"answered {code}{_same_content_note(calls, i) if code == 'ID_CONFLICT' else ''}")
        # a later check answered: the implementation skipped (or postponed) the check that must decide
        return finding(rule_for_code(spec, e.code), "check-order",
                       f"answered {code}, a later check: the checks run in the order of R1 and the first that "
                       f"fails, here {e.code}, decides the answer")
    return finding(rule_for_code(spec, e.code), f"wrong-code-{e.code.lower().replace('_', '-')}", f"answered {code}")


# --------------------------------------------------------------------------------------------
# The response shape (P5)
# --------------------------------------------------------------------------------------------


def check_batch_result_shape(result: Json) -> str | None:
    """``None`` when ``result`` has the shape of a batch.run result, else a message naming the field."""
    if not isinstance(result, dict):
        return "result: must be an object {results, executed, aborted}"
    results = result.get("results")
    if not isinstance(results, list):
        return "result.results: must be a list"
    err = check_results_shape(results, "result.results")
    if err:
        return err
    ex = result.get("executed")
    if not isinstance(ex, int) or isinstance(ex, bool) or ex < 0:
        return "result.executed: must be an integer >= 0"
    if "aborted" not in result:
        return "result.aborted: missing (null when the batch did not abort)"
    ab = result["aborted"]
    if ab is not None and not (
        isinstance(ab, dict) and isinstance(ab.get("index"), int) and not isinstance(ab.get("index"), bool)
        and isinstance(ab.get("code"), str)
    ):
        return "result.aborted: must be null or {index: integer, code: string}"
    return None


def is_rejection(result: Json) -> bool:
    """Is a ``batch.run`` result the rejection of the whole batch (protocol 1.3, R47)?"""
    return isinstance(result, dict) and "rejected" in result


def check_rejection_shape(result: Json) -> str | None:
    """``None`` when ``result`` is ``{"rejected": {"code": str}, "executed": int}``, else a message naming the field."""
    assert isinstance(result, dict)
    extra = sorted(set(result) - {"rejected", "executed"})
    if extra:
        return (f"result.{extra[0]}: a rejection of the whole batch carries only rejected and executed "
                "(no results, no aborted)")
    rej = result["rejected"]
    if not isinstance(rej, dict) or not isinstance(rej.get("code"), str) or set(rej) - {"code"}:
        return "result.rejected: must be {code: string}"
    ex = result.get("executed")
    if not isinstance(ex, int) or isinstance(ex, bool) or ex < 0:
        return "result.executed: must be an integer >= 0"
    return None


def check_results_shape(results: Sequence[Json], where: str) -> str | None:
    for j, r in enumerate(results):
        w = f"{where}[{j}]"
        if not isinstance(r, dict):
            return f"{w}: must be an object"
        if "id" not in r or not (r["id"] is None or isinstance(r["id"], str)):
            return f"{w}.id: must be a string or null"
        if r.get("status") == "ok":
            if "output" not in r:
                return f"{w}.output: missing"
        elif r.get("status") == "error":
            if not isinstance(r.get("code"), str):
                return f"{w}.code: must be a string"
        else:
            return f"{w}.status: must be \"ok\" or \"error\""
    return None


# --------------------------------------------------------------------------------------------
# The judge
# --------------------------------------------------------------------------------------------


def split_events(events: Json) -> tuple[list[ObservedExecution], list[Mapping[str, Json]], dict[str, Json] | None,
                                        dict[str, Json] | None]:
    """(executions, model events, the response event, the protocol error event)."""
    _need(isinstance(events, list), "trace.events", "must be a list")
    execs: list[ObservedExecution] = []
    models: list[Mapping[str, Json]] = []
    response: dict[str, Json] | None = None
    perr: dict[str, Json] | None = None
    for n, ev in enumerate(events):
        where = f"trace.events[{n}]"
        _need(isinstance(ev, dict), where, "must be an object")
        t = ev.get("type")
        _need(response is None and perr is None, where, "no event may follow the response or a protocol error")
        if t == "execute":
            execs.append(parse_execution(ev, where))
        elif t == "model":
            models.append(ev)
        elif t == "response":
            _need("result" in ev, where, "a response event needs a result")
            response = ev
        elif t == "protocol-error":
            _need(ev.get("code") in PROTOCOL_CODES, f"{where}.code", f"must be one of {', '.join(PROTOCOL_CODES)}")
            perr = ev
        elif t in ("release", "cancel"):  # protocol v1.1: read by concurrency_events
            k = ev.get("execution")
            _need(isinstance(k, int) and not isinstance(k, bool) and 1 <= k <= len(execs), f"{where}.execution",
                  "must be the number of an execution seen before it")
        else:
            raise TraceError(f"{where}.type", "must be execute, model, response, protocol-error, release or cancel")
    return execs, models, response, perr


@dataclass
class ConcurrentRun:
    """What a concurrent step's trace shows beyond v1 (PROTOCOL.md C7)."""

    releases: list[int]  # execution numbers, in release order
    choices: list[tuple[int, int]]  # (choice, held) per release
    cancelled: set[int]
    overlapped: bool  # were two executions ever in flight at once?
    twice: bool  # did an execution start while another of the same call id was in flight?

    def unfinished(self, n: int) -> list[int]:
        """Executions neither released nor cancelled (left running when the step was answered, R35)."""
        done = set(self.releases) | self.cancelled
        return [k for k in range(1, n + 1) if k not in done]

    def schedule_text(self, execs: Sequence[ObservedExecution]) -> str:
        if not self.releases:
            return "Let the harness release no answer (none was waited for)."
        order = ", then ".join(f"execution {k} ({compact(execs[k - 1].call_id, 14)})" if k <= len(execs)
                               else f"execution {k}" for k in self.releases)
        sched = [c for c, _ in self.choices]
        while sched and sched[-1] == 0:
            sched.pop()
        return f"Let the harness release the tool answers in the order {order} (schedule {sched})."


def concurrency_events(events: Sequence[Mapping[str, Json]]) -> ConcurrentRun:
    run = ConcurrentRun([], [], set(), False, False)
    flying: dict[int, Json] = {}
    k = 0
    for ev in events:
        t = ev.get("type")
        if t == "execute":
            k += 1
            cid = ev.get("callId")
            if flying:
                run.overlapped = True
            if isinstance(cid, str) and cid in flying.values():
                run.twice = True
            flying[k] = cid
        elif t == "release":
            run.releases.append(ev["execution"])
            run.choices.append((ev.get("choice", 0), ev.get("of", 1)))
            flying.pop(ev["execution"], None)
        elif t == "cancel":
            run.cancelled.add(ev["execution"])
            flying.pop(ev["execution"], None)
    return run


#: A divergence in a concurrent step, named by section 5's rule where one applies (PROTOCOL.md C7).
_CONCURRENT_RULE: Final = {"R9": "R31", "R11": "R32", "R14": "R32", "R13": "R34", "R6": "R33"}


def concurrent_rule(rule: str, run: ConcurrentRun | None) -> str:
    """The rule a divergence of a concurrent step is named by: section 5's form of the sequential
    rule (R33 only when an execution started while another of its id was in flight)."""
    if run is None:
        return rule
    if rule == "R6" and not run.twice:
        return rule
    return _CONCURRENT_RULE.get(rule, rule)


def judge_batch(trace: Mapping[str, Json], *, spec: Spec | None = None, params: Params | None = None) -> Verdict:
    spec = spec or default_spec()
    cfg = parse_batch_config(trace.get("config"))
    calls = trace.get("calls")
    _need(isinstance(calls, list), "trace.calls", "must be a list")
    raw, aside = calls, []
    if params is not None and not params.reference_strict(spec):  # what the framework's message parser hands on
        # (dropped calls are no requests)
        parser = Parser(params, tuple(cfg.schemas), finals=False)
        calls = parser.calls(calls)
        aside = set_aside(raw, parser.kept)
    execs, _models, response, perr = split_events(trace.get("events"))
    _need(response is not None or perr is not None, "trace.events",
          "must end with a response or a protocol-error event")
    conc = concurrency_events(trace["events"]) if cfg.max_concurrency > 1 else None
    exp = expected_batch(cfg, calls, [e.outcome for e in execs], params, spec,
                         conc.releases if conc is not None else None)
    attributed, mismatch = attribute_executions(calls, exp.attempts, execs)
    result = response.get("result") if response is not None else None
    rejection = response is not None and is_rejection(result)
    shape_error = None
    if response is not None:
        shape_error = check_rejection_shape(result) if rejection else check_batch_result_shape(result)
    results: list[Json] | None = None
    aborted_obs: Json = None
    if response is not None and shape_error is None:
        assert isinstance(result, dict)
        results, aborted_obs = ([], None) if rejection else (result["results"], result["aborted"])
    observed = {
        "executions": [{"request": idx, **ex.to_json()} for idx, ex in attributed],
        "response": result,
    }
    if perr is not None:
        observed["protocolError"] = dict(perr)

    findings: list[_Finding] = []
    if mismatch is not None:
        f = _execution_finding(spec, exp, calls, execs, attributed, mismatch, results, perr is not None, aborted_obs,
                               rejection and shape_error is None)
        if f is not None:
            findings.append(f)
    upto = mismatch if mismatch is not None else len(attributed)
    pf = _principal_finding(exp, calls, attributed, upto)
    if pf is not None:
        findings.append(pf)
    if perr is not None:
        findings.append(_Finding((_LAST, 0), str(perr["code"]), str(perr.get("kind", "protocol")), None,
                                 {"response": "a batch.run result"}, dict(perr),
                                 f"Then the implementation answers batch.run with its result; but "
                                 f"{PROTOCOL_CODES[str(perr['code'])]}: {perr.get('detail', '')}"))
    elif shape_error is not None:
        findings.append(_Finding((_LAST, 0), "P5", "bad-response", None, {"response": "a batch.run result"},
                                 {"result": result}, f"Then the implementation answers with the batch.run result "
                                 f"shape of spec/PROTOCOL.md; but {shape_error}."))
    elif rejection:
        assert isinstance(result, dict)
        executed_idx = frozenset(idx for idx, _ in attributed if idx is not None)
        at = rejection_point(exp, attributed, len(calls))
        aborted_obs = {"index": at, "code": result["rejected"]["code"]}  # what the invariants are evaluated on
        whole = params is not None and params["batch_rejection"] == "whole-batch"
        rf = _rejection_finding(spec, exp, calls, result, at, executed_idx, whole)
        if rf is not None:
            findings.append(rf)
    else:
        assert results is not None
        executed_idx = frozenset(idx for idx, _ in attributed if idx is not None)
        af = _answer_finding(spec, exp, calls, results, aborted_obs, executed_idx)
        if af is not None:
            findings.append(af)
    if conc is not None and perr is None and response is not None:
        left = conc.unfinished(len(execs))
        if left:
            k = left[0]
            idx = attributed[k - 1][0] if k <= len(attributed) else None
            findings.append(_Finding(
                (len(calls), 0), "R35", "running-execution-not-cancelled", idx,
                {"execution": k, "cancelled": True}, {"execution": k, "cancelled": False},
                f"Then every execution still running when the batch ends is cancelled ($/cancelRequest) or its "
                f"result awaited (R35); but execution {k} ({describe_execution(execs[k - 1])}) was still running, "
                f"never cancelled, when the batch was answered."))
    if not findings and results is not None and rejection:
        assert isinstance(result, dict)
        if result["executed"] != exp.state.executed:
            findings.append(_Finding((_LAST, 2), "R12", "executed-miscounted", None, {"executed": exp.state.executed},
                                     {"executed": result["executed"], "observedExecutions": len(execs)},
                                     f"Then executed = {exp.state.executed}: the number of executions started (the "
                                     f"harness saw {len(execs)} start), a rejection of the whole batch included "
                                     f"(R12, R47); but the implementation reported executed = {result['executed']}."))
    elif not findings and results is not None:
        assert isinstance(result, dict)
        tf = _totals_finding(spec, exp, calls, result, len(execs),
                             frozenset(idx for idx, _ in attributed if idx is not None))
        if tf is not None:
            findings.append(tf)
    if not findings:
        return Verdict(None, exp.summary(), observed)
    first = min(findings, key=lambda f: f.order)
    violated = observed_invariants(cfg.run_config(), calls, attributed, results or [], aborted_obs)
    rule = concurrent_rule(first.rule, conc)
    let = let_clause(cfg.describe(), raw, aside=aside)
    if conc is not None:
        let += "\n" + conc.schedule_text(execs)
        observed["schedule"] = [c for c, _ in conc.choices]
    then = first.then
    if rule != first.rule:  # the concurrent form of the sequential rule: the "Then" cites what the verdict names
        then = re.sub(rf"\b{first.rule}\b", rule, then)
    v = Violation(
        rule=rule, kind=first.kind, index=first.index, expected=first.expected, observed=first.observed,
        explanation=let + "\n" + then,
        invariant=None if rule.startswith("P") else pick_invariant(spec, rule, violated),
        invariants=violated,
        checked_by=_rules_by_id(spec).get(rule, ()),
        transition=(spec_answer_text(spec, exp, calls, first.index)[1]
                    if first.index is not None and first.index < len(calls) else None),
    )
    return Verdict(v, exp.summary(), observed)


# --------------------------------------------------------------------------------------------
# A batch rejected as a whole (R47, protocol 1.3)
# --------------------------------------------------------------------------------------------

#: Characters a runtime's own "blank" test counts as white space though Unicode's White_Space does not (R2):
#: Java's Character.isWhitespace (and String.isBlank) and Python's str.isspace take the information separators.
_NOT_WHITE_SPACE_BUT_BLANK_TO_SOME: Final = frozenset("\x1c\x1d\x1e\x1f")


def rejection_point(exp: Expected, attributed: Sequence[tuple[int | None, ObservedExecution]], n: int) -> int:
    """The request at which an implementation that rejected the whole batch stopped: after the last request it
    executed, the first one the spec answers without executing it (with an error: it may have ended the batch
    there) or executes (it was refused instead); the last one it executed when that execution failed (the
    failure ended it); else where the spec ends the batch, or past its end."""
    s = exp.state
    done = [i for i, _ in attributed if i is not None]
    last = max(done, default=-1)
    if attributed and attributed[-1][0] is not None and not attributed[-1][1].outcome.ok:
        return attributed[-1][0]
    candidates = [a.index for a in s.answers if a.index > last and a.code is not None and not a.executed]
    candidates += [r for r in exp.attempts if r > last]
    if s.aborted is not None and s.aborted[0] > last:
        candidates.append(s.aborted[0])
    return min(candidates, default=n)


def _rejected_kind(call: Json, code: str, kind: str) -> str:
    """The cause of refusing a call the spec executes, by what the call shows: a valid id some runtimes call
    blank or that is padded (R2), a valid call refused with a check's code, else the answer's own kind."""
    if code != "INVALID_CALL" or not isinstance(call, dict):
        return kind.replace("wrongly-answered-", "wrongly-rejected-", 1)
    cid = call.get("id")
    if isinstance(cid, str) and (any(ch in _NOT_WHITE_SPACE_BUT_BLANK_TO_SOME for ch in cid) or cid != cid.strip()
                                 or not cid.isprintable()):
        return "valid-id-rejected"
    return "valid-call-rejected"


def _rejection_finding(spec: Spec, exp: Expected, calls: Sequence[Json], result: Mapping[str, Json], at: int,
                       executed: frozenset[int], whole_batch: bool) -> _Finding | None:
    """R47: the divergence of a batch rejected as a whole (``result`` = ``{"rejected": {"code"}, "executed"}``),
    which stopped at request ``at`` (:func:`rejection_point`); None when the rejection conforms (nothing is
    lost, the code is the ending request's, and ``whole_batch``: the profile's batch_rejection is whole-batch)."""
    s = exp.state
    code = result["rejected"]["code"]
    rejected = {"rejected": dict(result["rejected"]), "executed": result["executed"]}
    did = f"rejected the whole batch with {code}"
    lost = [a for a in s.answers if a.index < at]
    if lost:
        a = lost[0]
        where = f"at request #{at}" if at < len(calls) else "after its last request"
        return _Finding((a.index, 2), "R11", "answer-lost-after-rejection", a.index,
                        {"answer": wire_answer(a)}, {"answer": None, **rejected},
                        f"Then request #{a.index} {spec_says(spec, exp, calls, a.index)}; but the implementation "
                        f"{did} {where} (executed = {result['executed']}), so no request has an answer: the answer "
                        f"of #{a.index} is lost (R11, R47: a rejection conforms only where no answer precedes the "
                        f"request that ends the batch).")
    if at >= len(calls):
        return _Finding((_LAST, 1), "R47", "rejected-without-cause", None, {"rejected": None}, rejected,
                        f"Then the batch is answered in full (no request of it ends it); but the implementation "
                        f"{did}.")
    what = spec_says(spec, exp, calls, at)
    call = calls[at]
    cid = core.answer_id(call.get("id") if isinstance(call, dict) else None)
    as_answer = {"id": cid, "status": "error", "code": code}
    if s.aborted is not None and s.aborted[0] == at:
        want = s.aborted[1]
        if code == want:
            if whole_batch:
                return None
            return _Finding((at, 2), "R47", "rejected-whole-batch", at,
                            {"aborted": {"index": at, "code": want}}, rejected,
                            f"Then request #{at} {what}; but the implementation {did} (executed = "
                            f"{result['executed']}): nothing is lost, but the outcome must say which request ended "
                            f"the batch (R13); a rejection of the whole batch conforms only where the profile's "
                            f"batch_rejection is whole-batch (R47).")
        would = Answer(at, 1, cid, "error", code=want)
        f = _compare_answer(spec, exp, calls, at, would, as_answer, what, _check_codes(spec), executed, did=did)
        if f is not None:
            f.expected = {"aborted": {"index": at, "code": want}}
            f.observed = rejected
            f.kind = f.kind.replace("wrongly-answered-", "wrongly-rejected-", 1)
        return f
    e = exp.answer(at)
    if e is None:  # (a request past the end of the batch: at >= len(calls) is handled above)
        return None
    if e.status == "ok" and not e.replayed and at not in executed:  # its output would be the tool's: never seen
        what = ("passes every check with the budget not yet used up, so it is executed (the tool is entered once "
                "for it) and answered with the tool's output")
    if e.code is not None and not e.executed and code == e.code:  # an error answer that does not end the batch
        rule = "R20" if core.code_kind(code) == "limit" else "R14"
        return _Finding((at, 2), rule, f"rejected-in-{s.config.mode}-mode", at, {"answer": wire_answer(e)},
                        {"answer": None, **rejected},
                        f"Then request #{at} {what}, and the batch goes on ({s.config.mode} mode, limit policy "
                        f"{s.config.on_limit}); but the implementation {did}.")
    f = _compare_answer(spec, exp, calls, at, e, as_answer, what, _check_codes(spec), executed, did=did)
    if f is not None:
        f.observed = {"answer": None, **rejected}
        if e.status == "ok" and not e.replayed:  # a request the spec executes, refused instead
            f.kind = _rejected_kind(call, code, f.kind)
    return f


def abort_code_finding(spec: Spec, exp: Expected, calls: Sequence[Json], obs_aborted: Json,
                       executed: frozenset[int]) -> _Finding | None:
    """Both end at the same request, with different codes: compare the codes as answers."""
    s = exp.state
    if s.aborted is None or not isinstance(obs_aborted, dict) or obs_aborted.get("index") != s.aborted[0]:
        return None
    i, code = s.aborted
    if i >= len(calls) or obs_aborted.get("code") == code:
        return None
    call = calls[i]
    would = Answer(i, 1, core.answer_id(call.get("id") if isinstance(call, dict) else None), "error", code=code)
    as_answer = {"id": would.call_id, "status": "error", "code": obs_aborted.get("code")}
    what = "batch" if s.config.batch else "run"
    f = _compare_answer(spec, exp, calls, i, would, as_answer, spec_says(spec, exp, calls, i), _check_codes(spec),
                        executed, did=f"ended the {what} there with {obs_aborted.get('code')}")
    if f is not None:
        f.expected = {"aborted": {"index": i, "code": code}}
        f.observed = {"aborted": obs_aborted}
    return f


def _totals_finding(spec: Spec, exp: Expected, calls: Sequence[Json], result: Mapping[str, Json], seen: int,
                    executed: frozenset[int]) -> _Finding | None:
    s = exp.state
    exp_aborted = None if s.aborted is None else {"index": s.aborted[0], "code": s.aborted[1]}
    obs_aborted = result["aborted"]
    if not same_json(obs_aborted, exp_aborted):
        f = abort_code_finding(spec, exp, calls, obs_aborted, executed)
        if f is not None:
            return f
        mode = s.config.mode
        rule = "R14" if (mode == "continue" and obs_aborted is not None) else "R13"
        return _Finding((_LAST, 1), rule, "wrong-aborted", exp_aborted["index"] if exp_aborted else None,
                        {"aborted": exp_aborted}, {"aborted": obs_aborted},
                        f"Then the batch ends with aborted = {compact(exp_aborted)} (status {s.status}, "
                        f"{s.stop_reason}); but the implementation reported aborted = {compact(obs_aborted)}.")
    if result["executed"] != s.executed:
        return _Finding((_LAST, 2), "R12", "executed-miscounted", None,
                        {"executed": s.executed}, {"executed": result["executed"], "observedExecutions": seen},
                        f"Then executed = {s.executed}: the number of executions started (the harness saw {seen} "
                        f"start), never counting replays or rejections (R12); but the implementation reported "
                        f"executed = {result['executed']}.")
    return None


# Used by the fuzzer and the oracle to pick a path position for a violation.
def decision_position(steps: Sequence[tuple[str, int | None]], index: int | None, spec: Spec | None = None) -> int:
    """The position in an engine path (``[(transition id, request index)]``, as recorded by an
    observer) of the transition that decided request ``index``; the last one for run-level issues."""
    spec = spec or default_spec()
    if index is not None:
        for pos, (tid, idx) in enumerate(steps):
            if idx == index and spec.transition(tid).dest in ("returned", "executing"):
                return pos
    return max(len(steps) - 1, 0)

