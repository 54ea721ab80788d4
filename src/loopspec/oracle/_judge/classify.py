"""Naming a divergence: which rule the ledger breaks, which invariant, and why, in the judge's words.

The expected transition comes from the spec (the first enabled one of the state's group); the
observed one from what the ledger's event says. This module turns the pair, or a field that
disagrees inside an agreed transition, into a :class:`~loopspec.oracle._divergence.Divergence`: the rule (derived from
the spec's transitions and codes through the judge's :func:`loopspec.judge.batch.rule_for_code` where a
code decides), a short machine-readable kind (the judge's vocabulary: ``replay-reexecuted``,
``conflict-reused``, ``executed-miscounted``, ...), and the "Then … but …" sentence.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Final

from ...core import rules as core
from ...core.rules import Answer, RunState
from ...judge.batch import rule_for_code
from ...spec.loader import Transition
from .._divergence import CheckerView as RunChecker
from .._divergence import Divergence, Finished, RunInputError

Json = Any


# --------------------------------------------------------------------------------------------
# The observed transition: what the first event of a step says happened
# --------------------------------------------------------------------------------------------


def _by_code(chk: RunChecker, ev: Mapping[str, Json]) -> Transition:
    code = ev["code"]
    tid = chk.t.code_transition.get(code) if isinstance(code, str) else None
    if tid is None:
        raise RunInputError(f"call_rejected.code: unknown code {code!r}")
    return chk.t.by_id[tid]


def _by_binding(chk: RunChecker, ev: Mapping[str, Json]) -> Transition:
    b = ev["binding"]
    if b == "fresh":
        return chk.t.first_by_effect["bind_id"]
    if b == "unresolved":
        return chk.t.first_by_effect["keep_binding"]
    raise RunInputError(f"call_validated.binding: expected fresh or unresolved, got {b!r}")


def _by_terminal(chk: RunChecker, ev: Mapping[str, Json]) -> Transition | None:
    t = chk.t
    ab = ev["aborted"]
    if ab is not None:
        code = ab.get("code") if isinstance(ab, dict) else None
        if code not in core.CODE_TABLE:
            raise RunInputError(f"run_terminal.aborted.code: unknown code {code!r}")
        return t.by_escalation.get(core.code_kind(code))
    reason = ev["stopReason"]
    cands = t.by_stop_reason.get(reason, ()) if isinstance(reason, str) else ()
    if not cands:
        if not isinstance(reason, str) or reason not in t.stop_reason_ids:
            raise RunInputError(f"run_terminal.stopReason: unknown stop reason {reason!r}")
        return None  # an escalation's stop reason without `aborted`
    for x in cands:
        if chk.state in x.sources:
            return x
    return cands[0]


def openers() -> dict[str, Any]:
    """Event type -> ``f(checker, event)``: the transition a step opened by that event took, read from
    the event's content (a rejection's code, a validation's binding, an attempt number, a result's
    status, a terminal event's stop reason)."""
    def eff(name: str) -> Any:
        return lambda c, ev: c.t.first_by_effect[name]

    return {
        "model_requested": eff("ask_model"),
        "call_advanced": eff("next_item"),
        "round_decided": eff("end_round"),
        "call_rejected": _by_code,
        "call_replayed": eff("answer_replay"),
        "call_validated": _by_binding,
        "execution_started": lambda c, ev: c.t.first_by_effect[
            "start_execution" if ev["attempt"] == 1 else "retry_execution"],
        "result_returned": lambda c, ev: c.t.first_by_effect[
            "store_success" if ev["status"] == "ok" else "answer_failure"],
        "run_terminal": _by_terminal,
        # section 5
        "run_waiting": _by_wait,
        "execution_running": eff("run_on"),
        "execution_finished": lambda c, ev: c.t.first_by_effect["land"] if c.concurrent else None,
    }


def _by_wait(chk: RunChecker, ev: Mapping[str, Json]) -> Transition:
    """T29 when the ledger says a result arrived, else T30 (the item at the cursor cannot be taken up)."""
    for tid in chk.t.by_effect["wait"]:
        tr = chk.t.by_id[tid]
        if ("result_arrived" in tr.when) == (ev["arrived"] is not None):
            return tr
    return chk.t.first_by_effect["wait"]


_OPEN = openers()
#: event type -> how the event, opening a step, names the transition that fired (the checker's table)
OPENERS: Final[dict[str, Callable[[RunChecker, Mapping[str, Json]], Transition | None]]] = dict(_OPEN)


def observed_transition(chk: RunChecker, ev: Mapping[str, Json], typ: str) -> Transition | None:
    f = _OPEN.get(typ)
    return f(chk, ev) if f is not None else None


# --------------------------------------------------------------------------------------------
# Texts: what the spec does, what the ledger shows
# --------------------------------------------------------------------------------------------


def _limit(v: int | None) -> str:
    return "unlimited" if v is None else str(v)


def call_text(r: core.Request) -> str:
    cid = repr(r.call_id) if isinstance(r.call_id, str) else "<no valid id>"
    name = r.name if isinstance(r.name, str) else "<no tool name>"
    return f"{cid} {name}"


def why_code(chk: RunChecker, code: str) -> str:
    s = chk.s
    r = s.current
    lim = s.config.limits
    if code == "REQUEST_LIMIT":
        return f"max_requests is {lim.max_requests} and this is request #{r.index} (every request counts, R19)"
    if code == "INVALID_CALL":
        if not isinstance(r.call_id, str) or core.blank(r.call_id):
            part = "its id is not a non-blank string"
        elif not isinstance(r.name, str):
            part = "its tool name is not a string"
        else:
            part = "its arguments are not a JSON object"
        return f"the call is malformed: {part} (R2)"
    if code == "UNKNOWN_TOOL":
        return f"tool {r.name!r} is not registered for this run (R3)"
    if code == "INVALID_ARGUMENT":
        note = " (as the ledger reports: the arguments are recorded only as a digest)" if chk.args_assumed else ""
        return f"its arguments do not satisfy the input schema of {r.name!r} (R4){note}"
    if code == "ID_CONFLICT":
        b = s.bindings.get(r.call_id) if isinstance(r.call_id, str) else None
        at = f"request #{b.bound_at}" if b is not None else "an earlier request"
        return f"id {r.call_id!r} is already bound to other content by {at} (R7)"
    if code == "NOT_FOUND_OR_NOT_ACCESSIBLE":
        return "the authorization hook denied it (R24)"
    if code == "DEADLINE_EXCEEDED":
        return f"the deadline of {lim.deadline} s has passed (the clock reads {s.now} s, R19)"
    if code == "BUDGET_EXHAUSTED":
        if lim.max_executions == 0:
            return "a budget of 0 admits no execution at all (R9)"
        flying = len(core.in_flight(s))
        return f"the execution budget of {lim.max_executions} is used up ({s.executed} started, R9" + (
            f"; {flying} still in flight: a start is reserved at its take-up, R31)" if flying else ")")
    if code == "TOOL_BUDGET_EXHAUSTED":
        name = r.name if isinstance(r.name, str) else "?"
        return (f"tool {name!r} may execute {_limit(s.config.tool_limit(name))} time(s) and has already "
                f"({s.per_tool.get(name, 0)} started, R19)")
    if code in core.FAILURE_CATEGORIES:
        return f"the tool failed with {code} (R17)"
    return ""


def spec_does(chk: RunChecker, e: Transition) -> str:
    """What the spec does at this point (the expected transition), with the reason."""
    s = chk.s
    lim = s.config.limits
    r = s.current if s.requests else None
    i = f"request #{r.index} ({call_text(r)})" if r is not None else "the request"
    eff = e.effect
    if eff == "answer_error":
        assert e.code is not None
        return f"{i} is answered {e.code} and never executes, because {why_code(chk, e.code)}"
    if eff == "answer_replay":
        b = s.bindings.get(r.call_id) if r is not None and isinstance(r.call_id, str) else None
        src = f"request #{b.success_at}" if b is not None and b.success_at is not None else "an earlier request"
        return (f"{i} is a replay of {src} (same id, same content, a stored success): it is answered with exactly "
                "the stored output and nothing executes (R6)")
    if eff == "bind_id":
        return f"{i} passes the checks and binds the fresh id {r.call_id!r} to its content (R5)" if r else "bind"
    if eff == "keep_binding":
        return (f"{i} passes the checks; its id is bound to the same content but holds no stored success (earlier "
                "executions failed), so it is not a replay and may execute again (R10)")
    if eff == "start_execution":
        return (f"{i} is executed: execution {s.executed + 1} (max_executions {_limit(lim.max_executions)}; the budget "
                "is charged before the tool is entered, R9)")
    if eff == "store_success":
        return f"{i} is answered with the tool's output {s.outcome.output if s.outcome else '?'} (R11)"
    if eff == "retry_execution":
        return (f"its execution failed with DEPENDENCY_TEMPORARY and max_retries ({lim.max_retries}) allows another "
                "attempt before the deadline, so the tool is entered again within the same execution (R23)")
    if eff == "answer_failure":
        cat = s.outcome.category if s.outcome is not None else "?"
        ex = s.executions[-1] if s.executions else None
        retried = "" if cat != "DEPENDENCY_TEMPORARY" else (
            f" after {ex.attempts} attempt(s) (max_retries {lim.max_retries})" if ex else "")
        return f"{i} is answered {cat}, its execution's failure{retried}; nothing is stored (R10, R17)"
    if eff == "next_item" and chk.concurrent and any(core._escalating(s, a) for a in s.held.values()):
        k = min(i for i, a in s.held.items() if core._escalating(s, a))
        return (f"the run goes on: request #{k}'s {s.held[k].code} ends the run only once every earlier request has "
                f"its answer, and {_reqs([x for x in core.in_flight(s) if x.request < k])} still executing (R34)")
    if eff == "next_item":
        return f"the run goes on to the next call (mode {s.config.mode}, limit policy {s.config.on_limit})"
    if eff == "end_round":
        return "the round is done: its answers go back to the model (R18)"
    if eff == "ask_model":
        return (f"the run asks the model for round {s.round + 1} ({s.model_requests} of max_rounds "
                f"{_limit(lim.max_rounds)} used, R18, R19)")
    if eff == "terminate":
        if e.escalates is not None and s.answers:
            a = s.answers[-1]
            how = (f"in {s.config.mode} mode" if e.escalates != "limit" else f"under the limit policy {s.config.on_limit}")
            return (f"the run ends {chk.t.spec.state(e.dest).status}: request #{a.index} was answered {a.code}, which "
                    f"{how} ends it, so it gets no entry in results and aborted = {{index: {a.index}, code: {a.code}}} "
                    f"({e.rules[0]})")
        reason = e.stop_reason
        why = {
            "DEADLINE": f"the deadline of {lim.deadline} s has passed (the clock reads {s.now} s) before the model "
                        "request (R19)",
            "MAX_ROUNDS": f"max_rounds ({lim.max_rounds}) model requests were made (R19)",
            "END_OF_BATCH": "the batch's one proposal is answered in full",
            "MODEL_ERROR": "the model failed (R18)",
            "FINAL_ANSWER": "the model gave its final answer, after which no request is admitted and no tool "
                            "executes (R28)",
            "CANCELLED": "the application cancelled it (R26)",
        }.get(str(reason), "")
        if reason == "DEADLINE" and chk.state == "waiting":
            why = (f"the deadline of {lim.deadline} s has passed (the clock reads {s.now} s) while the run waits for "
                   "a result: it does not wait past it, and every execution in flight is abandoned (R35)")
        return f"the run ends {chk.t.spec.state(e.dest).status}/{reason}" + (f": {why}" if why else "")
    if eff == "wait":
        if chk.concurrent and "take_up_blocked" in e.when:
            rule, _, _, why = _why_blocked(s)
            return f"the run waits for a result, because {why} ({rule})"
        return "the run waits for a result (R31)"
    if eff == "land":
        return f"the next result lands ({', '.join(f'#{x.request}' for x in core.in_flight(s))} in flight, R32)"
    if eff == "run_on":
        return "the execution runs on in the background and the run goes on (R29, R31)"
    return f"the spec takes {e.id} {e.name}"


def ledger_shows(chk: RunChecker, o: Transition | None, ev: Mapping[str, Json], typ: str) -> str:
    """What the ledger records instead."""
    if o is None:
        return f"the ledger records {typ}"
    eff = o.effect
    if eff == "answer_error":
        return f"the ledger answers it {o.code}"
    if eff == "answer_replay":
        return f"the ledger answers it as a replay of request #{ev.get('of')!r} without executing"
    if eff in ("bind_id", "keep_binding"):
        return f"the ledger validates it for execution (binding {ev.get('binding')!r})"
    if eff == "start_execution":
        return f"the ledger executes request #{ev.get('index')!r} (execution {ev.get('ordinal')!r})"
    if eff == "retry_execution":
        return f"the ledger enters the tool again (attempt {ev.get('attempt')!r})"
    if eff == "store_success":
        return "the ledger answers it ok with " + str(ev.get("outputDigest"))
    if eff == "answer_failure":
        return f"the ledger answers it {ev.get('code')}"
    if eff == "next_item":
        return "the ledger moves on to the next call"
    if eff == "end_round":
        return "the ledger closes the round"
    if eff == "ask_model":
        return f"the ledger asks the model again (round {ev.get('round')!r})"
    if eff == "terminate":
        ab = ev.get("aborted")
        if ev.get("type") != "run_terminal":
            return f"the ledger ends the run ({typ})"
        return (f"the ledger ends the run {ev.get('status')}/{ev.get('stopReason')}"
                + (f" with aborted = {{index: {ab.get('index')}, code: {ab.get('code')}}}" if isinstance(ab, dict) else ""))
    if eff == "wait":
        arr = ev.get("arrived")
        return "the ledger waits for a result" + (f" (request #{arr!r}'s has arrived)" if arr is not None else "")
    if eff == "land":
        return f"the ledger lands request #{ev.get('index')!r}'s result ({ev.get('outcome')!r})"
    return f"the ledger records {typ} ({o.id} {o.name})"


def _where(ev: Mapping[str, Json], line: int, typ: str) -> str:
    via = ev.get("via")
    return f"line {line}: {typ}" + (f" via {via}" if via is not None else "")


# --------------------------------------------------------------------------------------------
# Classifying a transition divergence
# --------------------------------------------------------------------------------------------


def _code_kind_name(code: str) -> str:
    return code.lower().replace("_", "-")


_TAKE_UP: Final = frozenset({"bind_id", "keep_binding", "answer_error", "answer_replay", "start_execution"})


def _why_blocked(s: RunState) -> tuple[str, str, str, str]:
    """Why the item at the cursor cannot be taken up now (R29-R34): (rule, kind, invariant, reason)."""
    flying = core.in_flight(s)
    resp = s.response
    if resp is None or s.cursor >= len(resp):
        return ("R32", "answers-abandoned", "INV-ONE-ANSWER-IN-ORDER",
                f"the proposal is all taken up and {_reqs(flying)} still executing: their answers are owed")
    if any(core._escalating(s, a) for a in s.held.values()):
        k = min(i for i, a in s.held.items() if core._escalating(s, a))
        return ("R34", "taken-up-after-abort", "INV-TAKE-UP-ORDER",
                f"request #{k}'s answer ends the run once every earlier answer is known: nothing more is taken up")
    call = resp[s.cursor]
    cid = call.get("id") if isinstance(call, dict) else None
    same = [e for e in flying if isinstance(cid, str) and s.requests[e.request].call_id == cid]
    if same:
        return ("R33", "in-flight-id-taken-up", "INV-REPLAY-NO-EXEC",
                f"an execution of call id {cid!r} (request #{same[0].request}) is in flight: the call waits for its "
                "result, then is a replay, a retry or a conflict")
    if len(flying) >= s.config.max_concurrency:
        return ("R29", "concurrency-bound-exceeded", "INV-CONCURRENCY-BOUND",
                f"{len(flying)} execution(s) are in flight, max_concurrency {s.config.max_concurrency}")
    b = [e for e in flying if e.tool in s.config.barriers]
    name = call.get("name") if isinstance(call, dict) else None
    return ("R30", "barrier-overlapped", "INV-CONCURRENCY-BOUND",
            f"{'a barrier (' + b[0].tool + ', request #' + str(b[0].request) + ') is in flight' if b else f'the call to {name} is a barrier and ' + _reqs(flying) + ' executing'}")


def _reqs(flying: list[core.Execution]) -> str:
    return (", ".join(f"#{e.request}" for e in flying) + (" is" if len(flying) == 1 else " are")) if flying else \
        "nothing is"


def _classify(chk: RunChecker, e: Transition, o: Transition | None) -> tuple[str, str, str | None]:
    """(rule, kind, invariant hint) for expected ``e`` vs observed ``o``."""
    t = chk.t
    s = chk.s
    if o is None:
        return "R27", "unexpected-event", None
    if chk.concurrent:
        got = _classify_concurrent(chk, e, o)
        if got is not None:
            return got
    e_term, o_term = e.effect == "terminate", o.effect == "terminate"
    if e_term and o_term:
        if e.stop_reason == "FINAL_ANSWER" or o.stop_reason == "FINAL_ANSWER":
            return "R22", "wrong-terminal-state", "INV-PARTIAL-COVERAGE"
        return (e.rules[0] if e.rules else "R21"), "wrong-terminal-state", None
    if o_term:
        if o.stop_reason == "FINAL_ANSWER":
            return "R22", "invented-final-answer", "INV-PARTIAL-COVERAGE"
        if o.escalates is not None:
            last = s.answers[-1] if s.answers and e.effect == "next_item" else None
            kind = core.code_kind(last.code) if last is not None and last.code else None
            if kind == o.escalates:
                if kind == "limit":
                    return "R20", "aborted-wrongly", "INV-ABORT-PREFIX"
                return "R14", "aborted-wrongly", None
            return "R13", "wrong-escalation", "INV-ABORT-PREFIX"
        if o.stop_reason == "DEADLINE":
            return "R19", "deadline-claimed-early", None
        if o.stop_reason == "MAX_ROUNDS":
            return "R19", "stopped-before-max-rounds", "INV-REQUEST-BUDGET"
        if o.stop_reason == "MODEL_ERROR":
            return "R18", "model-error-invented", None
        if o.stop_reason == "END_OF_BATCH":
            return ("R11", "answers-lost", "INV-ONE-ANSWER-IN-ORDER") if s.config.batch else (
                "R18", "ended-without-final-answer", None)
        return (o.rules[0] if o.rules else "R21"), "ended-early", None
    if e_term:
        if e.stop_reason == "FINAL_ANSWER":
            return "R28", ("call-after-final" if o.effect in ("answer_error", "answer_replay", "bind_id", "keep_binding")
                           else "continued-after-final"), "INV-NO-CALL-AFTER-FINAL"
        if e.escalates == "limit":
            return (e.rules[0] if e.rules else "R20"), "limit-not-thrown", "INV-ABORT-PREFIX"
        if e.escalates is not None:
            return (e.rules[0] if e.rules else "R13"), "abort-missed", "INV-ABORT-PREFIX"
        kinds = {"DEADLINE": ("asked-after-deadline", None), "MAX_ROUNDS": ("asked-beyond-max-rounds", "INV-REQUEST-BUDGET"),
                 "END_OF_BATCH": ("batch-continued", None), "MODEL_ERROR": ("model-error-ignored", None)}
        kind, inv = kinds.get(str(e.stop_reason), ("continued-after-end", None))
        return (e.rules[0] if e.rules else "R21"), kind, inv
    # neither ends the run
    if e.code is not None and o.code is not None:
        order = t.check_order
        if e.code in order and o.code in order and order[o.code] < order[e.code]:
            return rule_for_code(t.spec, o.code), f"wrongly-answered-{_code_kind_name(o.code)}", None
        return rule_for_code(t.spec, e.code), "check-order", "INV-CHECKED-BEFORE-EXEC"
    if e.code is not None:
        special = {
            ("ID_CONFLICT", "answer_replay"): ("R7", "conflict-reused", "INV-CONFLICT-NO-REUSE"),
            ("BUDGET_EXHAUSTED", "start_execution"): ("R9", "executed-beyond-budget", "INV-EXEC-BUDGET"),
            ("TOOL_BUDGET_EXHAUSTED", "start_execution"): ("R19", "executed-beyond-tool-budget", "INV-TOOL-BUDGET"),
            ("DEADLINE_EXCEEDED", "start_execution"): ("R19", "executed-after-deadline", None),
        }.get((e.code, o.effect or ""))
        if special is not None:
            return special
        kinds = {"ID_CONFLICT": ("R7", "conflict-accepted", "INV-CONFLICT-NO-REUSE"),
                 "REQUEST_LIMIT": ("R19", "request-beyond-limit", "INV-REQUEST-BUDGET"),
                 "INVALID_CALL": ("R2", "malformed-call-accepted", "INV-CHECKED-BEFORE-EXEC"),
                 "UNKNOWN_TOOL": ("R3", "unknown-tool-accepted", "INV-CHECKED-BEFORE-EXEC"),
                 "INVALID_ARGUMENT": ("R4", "invalid-arguments-accepted", "INV-CHECKED-BEFORE-EXEC")}
        if e.code in kinds:
            return kinds[e.code]
        return rule_for_code(t.spec, e.code), f"missed-{_code_kind_name(e.code)}", None
    if o.code is not None:
        if e.effect == "answer_replay" and o.code == "ID_CONFLICT":
            return "R6", "replay-refused", None
        if o.code == "BUDGET_EXHAUSTED":
            return "R9", "budget-refused-too-early", None
        return rule_for_code(t.spec, o.code), f"wrongly-answered-{_code_kind_name(o.code)}", None
    pair = (e.effect, o.effect)
    if e.effect == "answer_replay" and o.effect in ("bind_id", "keep_binding", "start_execution"):
        return "R6", "replay-reexecuted", "INV-REPLAY-NO-EXEC"
    if o.effect == "answer_replay":
        if e.effect == "keep_binding":
            return "R10", "failure-cached", "INV-NO-CACHED-FAILURE"
        if e.effect == "bind_id" and _same_content_elsewhere(chk):
            return "R8", "deduplicated-by-content", "INV-EXEC-ACCOUNTING"
        return "R6", "replayed-without-stored-result", "INV-NO-CACHED-FAILURE"
    if pair == ("bind_id", "keep_binding"):
        return "R5", "unbound-id-treated-as-bound", "INV-BINDING-STABLE"
    if pair == ("keep_binding", "bind_id"):
        return "R5", "id-rebound", "INV-BINDING-STABLE"
    if pair == ("store_success", "answer_failure"):
        return "R17", "invented-failure", None
    if pair == ("answer_failure", "store_success"):
        return "R17", "failure-hidden", None
    if pair == ("retry_execution", "answer_failure"):
        return "R23", "retry-missing", "INV-RETRY-DUE"
    if pair == ("answer_failure", "retry_execution"):
        cat = s.outcome.category if s.outcome is not None else None
        return "R23", ("retried-beyond-budget" if cat == "DEPENDENCY_TEMPORARY" else "retried-non-temporary"), \
            "INV-RETRY-BUDGET"
    if pair == ("store_success", "retry_execution"):
        return "R23", "retried-after-success", "INV-RETRY-BUDGET"
    if e.effect in ("store_success", "answer_failure", "retry_execution"):
        return "R11", "answer-missing", "INV-ONE-ANSWER-IN-ORDER"
    if e.effect == "next_item" and o.effect in ("start_execution", "retry_execution"):
        return "R12", "executed-twice", "INV-EXEC-ACCOUNTING"
    if e.effect == "next_item" and o.effect in ("store_success", "answer_failure"):
        return "R11", "answered-twice", "INV-ONE-ANSWER-IN-ORDER"
    if e.effect == "end_round" and o.effect != "ask_model":
        return "R11", "request-not-proposed", "INV-ONE-ANSWER-IN-ORDER"
    if e.effect in ("bind_id", "keep_binding", "answer_replay") and o.effect in ("end_round", "ask_model"):
        return "R11", "calls-skipped", "INV-ONE-ANSWER-IN-ORDER"
    if e.effect == "ask_model":
        return "R18", "model-not-asked", None
    rules = [r for r in e.rules if r != "R1"] or list(e.rules) or ["R0"]
    return rules[0], "unexpected-transition", None


def _classify_concurrent(chk: RunChecker, e: Transition, o: Transition) -> tuple[str, str, str | None] | None:
    """The section-5 reading of a divergence in a run that executes in the background, or None."""
    s = chk.s
    if e.effect == "wait" and o.effect != "wait":
        rule, kind, inv, _ = _why_blocked(s)
        return rule, kind, inv
    if o.effect == "wait" and e.effect != "wait":
        return "R31", "waited-without-cause", "INV-TAKE-UP-ORDER"
    if e.code in ("BUDGET_EXHAUSTED", "TOOL_BUDGET_EXHAUSTED") and o.effect == "start_execution" and core.in_flight(s):
        return "R31", "budget-check-then-act", "INV-EXEC-BUDGET" if e.code == "BUDGET_EXHAUSTED" else "INV-TOOL-BUDGET"
    if e.effect == "start_execution" and o.effect in _TAKE_UP:
        return "R31", "reservation-not-atomic", "INV-EXEC-BUDGET"
    if e.effect == "next_item" and o.escalates is not None and s.held:
        return "R34", "aborted-at-first-failure-in-time", "INV-ABORT-PREFIX"
    if e.effect == "terminate" and e.stop_reason == "DEADLINE" and o.effect == "land":
        return "R35", "waited-past-deadline", "INV-DEADLINE"
    if e.effect == "land" and o.effect == "terminate" and o.stop_reason == "DEADLINE":
        return "R19", "deadline-claimed-early", None
    return None


def _same_content_elsewhere(chk: RunChecker) -> bool:
    s = chk.s
    r = s.current
    if not (isinstance(r.name, str) and isinstance(r.arguments, dict)):
        return False
    key = chk.req_key
    return any(b.key == key and b.success is not None for cid, b in s.bindings.items() if cid != r.call_id)


def diverge(chk: RunChecker, e: Transition, o: Transition | None, ev: Mapping[str, Json], typ: str,
            line: int) -> Divergence:
    rule, kind, hint = _classify(chk, e, o)
    shows = ledger_shows(chk, o, ev, typ)
    cannot = ""
    if o is not None and chk.state not in o.sources:
        cannot = f" ({o.id} {o.name} cannot even fire in state {chk.state!r})"
    then = f"Then {spec_does(chk, e)}; but {shows}{cannot} ({_where(ev, line, typ)})."
    expected = {"transition": e.id, "name": e.name, "state": chk.state}
    if e.code is not None:
        expected["code"] = e.code
    observed = {"transition": None if o is None else o.id, "name": None if o is None else o.name,
                "event": dict(ev)}
    index = chk.s.current.index if chk.s.requests and chk.state in ("proposed", "validated", "executing", "returned") \
        and not (chk.state == "proposed" and e.effect in ("end_round", "terminate") and o is not None
                 and o.effect in ("end_round", "terminate", "ask_model")) else None
    d = Divergence(rule, kind, then, expected, observed, index=index, expected_tid=e.id,
                   observed_tid=None if o is None else o.id, invariant_hint=hint, at_step=True, event=ev, line=line)
    d.invariants = observed_invariants(chk, o, ev)
    return d


def observed_invariants(chk: RunChecker, o: Transition | None, ev: Mapping[str, Json]) -> tuple[str, ...]:
    """The core invariants the observed behaviour violates, evaluated on a copy of the state with the
    observed transition applied by the core's own effects. Best effort: empty when the state was
    trimmed (a very long run) or the observed effect cannot be applied."""
    s = chk.s
    if any(getattr(x, "trimmed", False) for x in (s.requests, s.answers, s.executions)):
        return ()
    c = _plain_copy(s)
    if chk.checks.args_assumed:
        _assume_reported_validity(c)
    if c.requests and chk.state == "validated" and not chk.auth_input:
        core.set_authorization(c, False)
    try:
        if o is not None:
            _apply_observed(chk, c, o, ev)
    except Exception:
        pass
    out = []
    for name, check in core.INVARIANTS.items():
        try:
            if not check(c):
                out.append(name)
        except Exception:
            continue
    return tuple(out)


def _plain_copy(s: RunState) -> RunState:
    c = copy.copy(s)
    c.requests = list(s.requests)
    c.answers = list(s.answers)
    c.executions = [dataclasses.replace(e) for e in s.executions]
    c.bindings = {k: dataclasses.replace(b, key=core.content_key(b.name, s.requests[b.bound_at].arguments))  # type: ignore[arg-type]
                  for k, b in s.bindings.items()}
    c.per_tool = dict(s.per_tool)
    return c


def _assume_reported_validity(c: RunState) -> None:
    """Digest-only arguments: the invariants recompute R4 from the raw arguments, which the ledger does not
    hold. Give them the validity the ledger reports instead: every schema accepts the stand-in, and a
    request the ledger answered INVALID_ARGUMENT gets arguments that are not an object (so it still
    passes no structural check, as reported)."""
    c.config = dataclasses.replace(c.config, schemas={n: core.ToolSchema() for n in c.config.schemas})
    invalid = {a.index for a in c.answers if a.code == "INVALID_ARGUMENT"}
    if c.aborted is not None and c.aborted[1] == "INVALID_ARGUMENT":
        invalid.add(c.aborted[0])
    for k, r in enumerate(c.requests):
        if r.index in invalid:
            c.requests[k] = dataclasses.replace(r, arguments=None)


def _apply_observed(chk: RunChecker, c: RunState, o: Transition, ev: Mapping[str, Json]) -> None:
    eff = o.effect
    if eff == "answer_error" and o.code is not None:
        core.answer_error(c, o.code)
    elif eff == "answer_replay":
        r = c.current
        b = c.bindings.get(r.call_id) if isinstance(r.call_id, str) else None
        out = b.success[0] if b is not None and b.success is not None else None
        c.answers.append(Answer(r.index, r.round, core.answer_id(r.call_id), "ok", output=out, replayed=True))
        c.replays += 1
    elif eff == "bind_id":
        core.bind_id(c)
    elif eff in ("start_execution", "retry_execution"):
        if eff == "start_execution":
            core.begin_execution(c)
        else:
            core.begin_retry(c)
    elif eff == "store_success":
        r = c.current
        c.answers.append(Answer(r.index, r.round, core.answer_id(r.call_id), "ok", output=ev.get("outputDigest"),
                                executed=True))
    elif eff == "answer_failure":
        r = c.current
        if core.retry_due(c):  # the fact core.answer_failure records (R23)
            c.executions[-1].retry_skipped = True
        c.answers.append(Answer(r.index, r.round, core.answer_id(r.call_id), "error", code=ev.get("code"),
                                executed=True))
    elif eff == "terminate":
        reason = ev.get("stopReason")
        status = ev.get("status")
        if isinstance(reason, str) and isinstance(status, str):
            core.terminate(c, reason, status, escalated=o.escalates is not None and bool(c.answers))
    elif eff == "next_item":
        core.next_item(c)
    elif eff == "end_round":
        core.end_round(c)
    elif eff == "ask_model":
        c.model_requests += 1
        if c.final is not None:
            c.requests.append(core.Request(len(c.requests), c.round, None, None, None))


# --------------------------------------------------------------------------------------------
# Other divergences
# --------------------------------------------------------------------------------------------


def incomplete_step(chk: RunChecker, ev: Mapping[str, Json], typ: str, line: int, missing: frozenset[str],
                    o: Transition | None) -> Divergence:
    cur = chk.cur
    assert cur is not None
    want = " or ".join(sorted(missing))
    if "result_returned" in missing:
        a = chk.s.answers[-1] if chk.s.answers else None
        idx = a.index if a is not None else None
        return Divergence(
            "R11", "answer-missing",
            f"Then request #{idx} gets its answer (result_returned) as part of {cur.id} {cur.name}: every request "
            f"processed gets exactly one answer (R11); but the ledger goes on with {typ} ({_where(ev, line, typ)}) "
            "without answering it.",
            {"event": "result_returned", "index": idx}, {"event": dict(ev)}, index=idx, expected_tid=cur.id,
            observed_tid=None if o is None else o.id, invariant_hint="INV-ONE-ANSWER-IN-ORDER", at_step=False,
            event=ev, line=line)
    return Divergence(
        "R27", "step-incomplete",
        f"Then {cur.id} {cur.name} records {want} next (R27: every step of a run is recorded); but the ledger goes on "
        f"with {typ} ({_where(ev, line, typ)}).",
        {"event": want}, {"event": dict(ev)}, index=chk.current_index(), expected_tid=cur.id,
        observed_tid=None if o is None else o.id, at_step=False, event=ev, line=line)


def unexpected_event(chk: RunChecker, ev: Mapping[str, Json], typ: str, line: int,
                     allowed: frozenset[str]) -> Divergence:
    cur = chk.cur
    assert cur is not None
    if typ == "result_returned":
        a = chk.s.answers[-1] if chk.s.answers else None
        return Divergence(
            "R11", "answered-twice",
            f"Then request #{a.index if a else '?'} has exactly one answer (R11); but the ledger answers it again "
            f"({_where(ev, line, typ)}).",
            {"answers": 1}, {"event": dict(ev)}, index=a.index if a else None, expected_tid=cur.id,
            observed_tid=cur.id, invariant_hint="INV-ONE-ANSWER-IN-ORDER", at_step=False, event=ev, line=line)
    want = " or ".join(sorted(allowed)) if allowed else "no further event"
    return Divergence(
        "R27", "unexpected-event",
        f"Then step {chk.step} ({cur.id} {cur.name}) records {want}; but the ledger records {typ} in it "
        f"({_where(ev, line, typ)}).",
        {"event": want}, {"event": dict(ev)}, index=chk.current_index(),
        expected_tid=cur.id, observed_tid=cur.id, at_step=False, event=ev, line=line)


def via_mismatch(chk: RunChecker, e: Transition, ev: Mapping[str, Json], line: int) -> Divergence:
    return Divergence(
        "R27", "via-mismatch",
        f"Then this step is {e.id} {e.name}, as its events say (R27: every event names the transition that "
        f"produced it); but the ledger names {ev.get('via')!r} ({_where(ev, line, str(ev.get('type')))}).",
        {"via": e.id}, {"via": ev.get("via")}, index=chk.s.current.index if chk.s.requests else None,
        expected_tid=e.id, observed_tid=e.id, at_step=False, event=ev, line=line)


def answer_out_of_order(chk: RunChecker, e: Transition, ev: Mapping[str, Json], line: int) -> Divergence:
    """Section 5: a landed result's answer returned while an earlier request is still executing."""
    s = chk.s
    r = s.current
    a = s.held.get(r.index)
    ends = a is not None and core._escalating(s, a)
    owed = [x for x in core.in_flight(s) if x.request < r.index] or core.in_flight(s)
    rule, kind, inv = ("R34", "aborted-at-first-failure-in-time", "INV-ABORT-PREFIX") if ends else (
        "R32", "answers-in-completion-order", "INV-ONE-ANSWER-IN-ORDER")
    then = (f"Then request #{r.index}'s answer waits until every earlier request has its answer: answers are committed "
            f"in request order whatever the completion order, and {_reqs(owed)} still executing ({rule}); but the "
            f"ledger returns #{ev.get('index')!r}'s answer now ({_where(ev, line, 'result_returned')}).")
    return Divergence(rule, kind, then, {"answers": len(s.answers), "held": r.index}, {"event": dict(ev)},
                      index=r.index, expected_tid=e.id, observed_tid=e.id, invariant_hint=inv, at_step=False,
                      event=ev, line=line)


def no_execution_in_flight(chk: RunChecker, ev: Mapping[str, Json], line: int, k: Json) -> Divergence:
    flying = [x.request for x in core.in_flight(chk.s)]
    typ = str(ev.get("type"))
    return Divergence(
        "R32", "result-without-execution",
        f"Then only a result of an execution in flight ({', '.join(f'#{i}' for i in flying) or 'none'}) can arrive "
        f"(R32: each execution answers once); but the ledger lands a result of request #{k!r} "
        f"({_where(ev, line, typ)}).",
        {"inFlight": flying}, {"event": dict(ev)}, index=k if k.__class__ is int else None,
        invariant_hint="INV-EXEC-ACCOUNTING", at_step=False, event=ev, line=line)


def abandoned_while_running(chk: RunChecker, ab: Mapping[str, Json], ab_line: int, ev: Mapping[str, Json],
                            line: int) -> Divergence:
    typ = str(ev.get("type"))
    i = ab.get("index")
    return Divergence(
        "R35", "abandoned-while-running",
        f"Then no execution is abandoned while the run goes on: its answer is owed (R32, R35); but the ledger abandons "
        f"request #{i!r}'s execution (line {ab_line}) and goes on with {typ} ({_where(ev, line, typ)}).",
        {"event": "run_terminal"}, {"event": dict(ev)}, index=i if i.__class__ is int else None,
        invariant_hint="INV-ABANDON", at_step=False, event=ev, line=line)


def abandonment_mismatch(chk: RunChecker, e: Transition, want: list[tuple[Any, ...]],
                         got: list[tuple[Any, ...]]) -> Divergence:
    def names(xs: list[tuple[Any, ...]]) -> str:
        return ", ".join(f"#{x[0]!r} (execution {x[1]!r})" for x in xs) or "none"

    missing = [x for x in want if x not in got]
    kind = "running-execution-not-abandoned" if missing else "abandoned-execution-not-in-flight"
    return Divergence(
        "R35", kind,
        f"Then {e.id} {e.name} abandons every execution in flight — {names(want)} — each recorded as "
        f"execution_abandoned before run_terminal (R26, R35); but the ledger abandons {names(got)}.",
        {"abandoned": [list(x) for x in want]}, {"abandoned": [list(x) for x in got]},
        index=missing[0][0] if missing else None, expected_tid=e.id, observed_tid=e.id, invariant_hint="INV-ABANDON",
        at_step=False, line=chk.last_line)


def step_gap(chk: RunChecker, e: Transition, ev: Mapping[str, Json], line: int) -> Divergence:
    return Divergence(
        "R27", "step-unrecorded",
        f"Then step {chk.step + 1} is {e.id} {e.name} (R27: every step of a run is recorded); but the ledger numbers "
        f"it step {ev.get('step')!r}, so {ev.get('step') - chk.step - 1} transition(s) left no event "  # type: ignore[operator]
        f"({_where(ev, line, str(ev.get('type')))}).",
        {"step": chk.step + 1}, {"step": ev.get("step")}, expected_tid=e.id, observed_tid=e.id, at_step=False,
        event=ev, line=line)


def result_mismatch(chk: RunChecker, ev: Mapping[str, Json], line: int, a: Answer, want_digest: Json) -> Divergence:
    cur = chk.cur
    assert cur is not None
    s = chk.s
    want = {"index": a.index, "callId": a.call_id, "status": a.status, "code": a.code, "replayed": a.replayed,
            "outputDigest": want_digest}
    got = {k: ev[k] for k in want}
    field = next((k for k in want if want[k] != got[k] or (got[k].__class__ is bool) != (want[k].__class__ is bool)),
                 "index")
    where = _where(ev, line, "result_returned")
    base = f"Then request #{a.index} is answered " + (
        f"ok with {want_digest}" + (" (replayed)" if a.replayed else "") if a.status == "ok" else str(a.code))
    hint: str | None = "INV-ONE-ANSWER-IN-ORDER"
    if field == "index":
        other = got["index"]
        if isinstance(other, int) and not isinstance(other, bool) and other > a.index:
            rule, kind = "R11", "answers-out-of-order"
            text = f"{base} (answers are delivered in request order, R11); but the ledger answers request #{other} first"
        else:
            rule, kind = "R11", "wrong-answer-index"
            text = f"{base} (R11); but the ledger's answer is for request #{other!r}"
    elif field == "callId":
        rule, kind = "R11", "wrong-answer-id"
        text = f"{base}, carrying its call id {a.call_id!r} (R11); but the ledger's answer carries {got['callId']!r}"
    elif a.status == "error" and cur.effect == "answer_error" and got["status"] == "ok":
        code = a.code or "?"
        if code == "ID_CONFLICT":
            rule, kind, hint = "R7", "conflict-reused", "INV-CONFLICT-NO-REUSE"
        else:
            rule, kind, hint = rule_for_code(chk.t.spec, code), f"missed-{_code_kind_name(code)}", None
        text = f"{base} and never executes, because {why_code(chk, code)}; but the ledger answers it ok"
    elif field in ("status", "code") and cur.effect == "answer_failure":
        rule, kind, hint = "R17", "wrong-failure-category", None
        text = (f"{base}: the category the execution failed with is the code (R17); but the ledger answers "
                f"{got['status']} {got['code']}")
    elif field in ("status", "code"):
        rule, kind, hint = "R15", "wrong-code", "INV-SAFE-ERRORS"
        text = f"{base} ({cur.id} {cur.name} answers with {a.code}, R15); but the ledger answers {got['status']} {got['code']}"
    elif field == "replayed":
        rule, kind, hint = "R6", "replay-flag-wrong", "INV-REPLAY-NO-EXEC"
        text = f"{base}; but the ledger records replayed = {got['replayed']!r}"
    elif a.replayed:
        rule, kind, hint = "R6", "replay-wrong-output", "INV-NO-CACHED-FAILURE"
        text = (f"{base}: exactly the stored output of request #{_success_at(s, a)} (R6); but the ledger answers "
                f"{got['outputDigest']!r}")
    else:
        rule, kind, hint = "R11", "wrong-output", None
        text = f"{base}: the output the tool returned (R11); but the ledger answers {got['outputDigest']!r}"
    return Divergence(rule, kind, f"{text} ({where}).", {"answer": want}, {"answer": got}, index=a.index,
                      expected_tid=cur.id, observed_tid=cur.id, invariant_hint=hint, at_step=False, event=ev,
                      line=line)


def _success_at(s: RunState, a: Answer) -> str:
    b = s.bindings.get(a.call_id) if isinstance(a.call_id, str) else None
    return str(b.success_at) if b is not None else "?"


_COUNTER_RULES: dict[str, tuple[str, str, str | None]] = {
    "executed": ("R12", "executed-miscounted", "INV-EXEC-ACCOUNTING"),
    "perTool": ("R19", "tool-executions-miscounted", "INV-TOOL-BUDGET"),
    "requests": ("R19", "requests-miscounted", "INV-REQUEST-BUDGET"),
    "modelRequests": ("R18", "rounds-miscounted", None),
    "attempts": ("R23", "attempts-miscounted", "INV-RETRY-BUDGET"),
    "retries": ("R23", "retries-miscounted", "INV-RETRY-BUDGET"),
    "replays": ("R6", "replays-miscounted", None),
    "rejections": ("R11", "rejections-miscounted", None),
    "discarded": ("R26", "discarded-miscounted", None),
}


def terminal_mismatch(chk: RunChecker, ev: Mapping[str, Json], line: int, key: str, want: Json) -> Divergence:
    from ...judge.batch import end_rule

    cur = chk.cur
    assert cur is not None
    s = chk.s
    got = ev[key]
    where = _where(ev, line, "run_terminal")
    hint: str | None = None
    if key in ("status", "stopReason"):
        rule, kind = end_rule(chk.t.spec, s), "wrong-terminal-state"
        text = (f"Then the run ends {s.status} with stop reason {s.stop_reason} (exactly one terminal state, R21); but "
                f"the ledger records {ev['status']}/{ev['stopReason']}")
    elif key == "coverage":
        rule, kind, hint = "R22", "dishonest-coverage", "INV-PARTIAL-COVERAGE"
        text = (f"Then coverage = {want}: COMPLETE only for a COMPLETED run none of whose requests was refused by a "
                f"limit (R22); but the ledger records {got!r}")
    elif key == "aborted":
        rule = "R13" if s.config.mode == "abort" and (s.aborted is None or core.code_kind(s.aborted[1]) != "limit") \
            else "R20"
        kind, hint = "wrong-aborted", "INV-ABORT-PREFIX"
        text = f"Then the run ends with aborted = {want} (R13, R20); but the ledger records aborted = {got!r}"
    else:
        field = next((k for k in want if not isinstance(got, dict) or got.get(k) != want[k]
                      or (got.get(k).__class__ is bool) != (want[k].__class__ is bool)), None) \
            if isinstance(want, dict) else None
        if field is None:
            rule, kind, hint = "R27", "ledger-inconsistent", None
            text = f"Then the terminal event reports the run's counters {want} (R27); but it records {got!r}"
        else:
            rule, kind, hint = _COUNTER_RULES.get(field, ("R27", "counter-miscounted", None))
            g = got.get(field) if isinstance(got, dict) else None
            what = {"executed": "the executions started, never counting replays, rejections or retries (R12)"}.get(
                field, f"the run's {field} as it happened")
            text = f"Then counters.{field} = {want[field]!r}: {what}; but the ledger records {field} = {g!r}"
            want, got = {field: want[field]}, {field: g}
            key = f"counters.{field}"
    return Divergence(rule, kind, f"{text} ({where}).", {key: want}, {key: got}, index=None, expected_tid=cur.id,
                      observed_tid=cur.id, invariant_hint=hint, at_step=False, event=ev, line=line)


def not_terminated(chk: RunChecker) -> Divergence:
    s = chk.s
    e = chk.expected_or_none()
    return Divergence(
        "R21", "run-not-terminated",
        f"Then every run ends in exactly one terminal state (R21); but the ledger of run {chk.run_id!r} ends after "
        f"{chk.events} event(s) (line {chk.last_line}) in state {chk.state!r}, with no run_terminal event.",
        {"terminal": True}, {"state": chk.state, "events": chk.events, "requests": len(s.requests)},
        index=None, expected_tid=None if e is None else e.id, invariant_hint="INV-ONE-TERMINAL", at_step=True,
        event=None, line=chk.last_line)


def after_terminal_divergence(chk: RunChecker | Finished, ev: Mapping[str, Json], line: int, *,
                              before_terminal: bool = False) -> Divergence:
    typ = str(ev.get("type"))
    where = _where(ev, line, typ)
    if before_terminal:
        return Divergence(
            "R26", "late-result-before-end",
            f"Then a result is discarded as late only after its run is terminal (R26); but the ledger discards one "
            f"while the run is still going ({where}).",
            {"event": None}, {"event": dict(ev)}, index=ev.get("index") if isinstance(ev.get("index"), int) else None,
            invariant_hint="INV-ONE-TERMINAL", at_step=False, event=ev, line=line)
    assert isinstance(chk, Finished)
    if typ == "late_result_discarded":
        want = chk.inflight
        got = (ev.get("index"), ev.get("ordinal"))
        why = (("the executions abandoned by the end whose results have not been recorded are "
                + (", ".join(f"#{i} (execution {o})" for i, o in sorted(chk.abandoned)) or "none"))
               if chk.abandoned is not None else
               "no execution was in flight when the run ended" if want is None else
               f"the only execution cut off by the end is request #{want[0]} (execution {want[1]})"
               + (", already discarded" if chk.late_seen else ""))
        return Divergence(
            "R26", "late-result-unexplained",
            f"Then only the result of an execution in flight when the run ended can arrive late ({why}, R26); but the "
            f"ledger discards a result of request #{got[0]!r} (execution {got[1]!r}) ({where}).",
            {"inflight": None if want is None else {"index": want[0], "ordinal": want[1]}},
            {"event": dict(ev)}, index=got[0] if isinstance(got[0], int) else None, invariant_hint="INV-ONE-TERMINAL",
            at_step=False, event=ev, line=line)
    rule, kind = ("R26", "late-result-used") if typ in ("result_returned", "execution_finished", "execution_started") \
        else ("R21", "event-after-terminal")
    return Divergence(
        rule, kind,
        f"Then nothing happens to a run after its terminal event (line {chk.line}): terminal states are absorbing and "
        f"a late result is only recorded as discarded (R21, R26); but the ledger records {typ} after it ({where}).",
        {"event": "late_result_discarded or nothing"}, {"event": dict(ev)},
        index=ev.get("index") if isinstance(ev.get("index"), int) and not isinstance(ev.get("index"), bool) else None,
        invariant_hint="INV-ONE-TERMINAL", at_step=False, event=ev, line=line)
