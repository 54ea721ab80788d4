"""The must-fail corpus: deliberately broken decision cores the checker has to catch.

Each mutant is a :class:`~loopspec.checker.semantics.Semantics` that replaces one or two guards or
effect functions of the core with a plausible implementation bug. ``loopspec verify --mutants``
(and ``tests/test_verify_mutants.py``) explores each and requires a counterexample of at most
four calls breaking the invariant the mutant is meant to break; the counterexamples' summaries
are kept as golden data and regenerated with

    python -m loopspec.checker.mutants --overwrite tests/golden/verify_mutants.json

:data:`SURVIVORS` are variants that break a rule of SPEC.md that no invariant of loop.toml checks:
the checker *cannot* catch them until the spec gains an invariant (each is a finding about the spec,
see its doc). It is empty: three former ones (deadline-ignored, abort-mode-continues,
failed-call-refused) are caught since loop.toml gained INV-DEADLINE, INV-ESCALATION and INV-DECISION,
and the last (retry-skipped) since it gained INV-RETRY-DUE; all four moved into :data:`MUTANTS`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..core import rules as core
from ..core.rules import Answer, Binding, Execution, RunState
from .bounds import Bounds, load_bounds
from .counterexample import Lifted, lift, schedule
from .explore import Exploration, explore
from .semantics import CORE, Semantics, tool_output

__all__ = ["MUTANTS", "SURVIVORS", "MutantResult", "check_mutant", "mutant"]

Json = Any


# --------------------------------------------------------------------------------------------
# Building blocks
# --------------------------------------------------------------------------------------------

#: The core's own functions: a variant calls these, never ``loopspec.core.rules.<name>``, which is the
#: variant itself while it is installed in the engine.
_ORIGINAL = CORE


def _classify_ignoring_content(s: RunState) -> str:
    """BUG: an id holding a stored result is a replay, whatever the call's content."""
    r = s.current
    b = s.bindings.get(r.call_id)  # type: ignore[arg-type]
    if b is None:
        return "fresh"
    if b.success is not None:
        return "replay"
    key = core.content_key(r.name, r.arguments)  # type: ignore[arg-type]
    return "conflict" if b.key != key else "unresolved"


def _classify_ignoring_result(s: RunState) -> str:
    """BUG: a stored result is never looked at, so a replay is treated as unresolved."""
    c = s.binding_class()
    return "unresolved" if c == "replay" else c


def _binding_guards(classify: Callable[[RunState], str]) -> dict[str, Callable[[RunState], bool]]:
    return {
        "id_conflict": lambda s: classify(s) == "conflict",
        "id_replay": lambda s: classify(s) == "replay",
        "id_fresh": lambda s: classify(s) == "fresh",
        "id_unresolved": lambda s: classify(s) == "unresolved",
    }


def _answer_failure_cached(s: RunState) -> Answer:
    """BUG: the result cache stores whatever the tool produced, failures included."""
    a = _ORIGINAL.fn("answer_failure")(s)
    r = s.current
    b = s.bindings.get(r.call_id)  # type: ignore[arg-type]
    if b is not None:
        b.success = (None,)
        b.success_at = r.index
    return a


def _answer_error_first(s: RunState, code: str) -> Answer:
    """BUG: error answers are reported before the others ("errors first")."""
    r = s.current
    a = Answer(r.index, r.round, core.answer_id(r.call_id), "error", code=code)
    s.answers.insert(0, a)
    s.rejections += 1
    return a


def _begin_execution_principal_from_arguments(s: RunState) -> Execution:
    """BUG: the tool runs as the user named in the arguments, when there is one."""
    ex = _ORIGINAL.fn("begin_execution")(s)
    args = s.current.arguments
    if isinstance(args, dict) and isinstance(args.get("user"), str):
        ex.principal = args["user"]
    return ex


def _terminate_dropping_results(s: RunState, stop_reason: str, status: str, *, escalated: bool = False) -> None:
    """BUG: an abort throws away the answers given so far."""
    _ORIGINAL.fn("terminate")(s, stop_reason, status, escalated=escalated)
    if escalated:
        s.answers.clear()


def _terminate_truncation_as_completed(s: RunState, stop_reason: str, status: str, *, escalated: bool = False) -> None:
    """BUG: a run stopped by a limit is reported as completed."""
    _ORIGINAL.fn("terminate")(s, stop_reason, "COMPLETED" if status == "TRUNCATED" else status, escalated=escalated)


def _answer_failure_with_detail(s: RunState) -> Answer:
    """BUG: a failure answer carries the exception text."""
    r = s.current
    assert s.outcome is not None and s.outcome.category is not None
    a = Answer(r.index, r.round, core.answer_id(r.call_id), "error", output="Traceback (most recent call last): ...",
               code=s.outcome.category, executed=True)
    s.answers.append(a)
    return a


def _answer_error_rebinding(s: RunState, code: str) -> Answer:
    """BUG: a conflicting call takes the id over (the binding follows the latest content)."""
    if code == "ID_CONFLICT":
        r = s.current
        assert isinstance(r.call_id, str) and isinstance(r.name, str) and isinstance(r.arguments, dict)
        s.bindings[r.call_id] = Binding(r.name, core.content_key(r.name, r.arguments), r.index)
    return _ORIGINAL.fn("answer_error")(s, code)


def _begin_retry_as_execution(s: RunState) -> None:
    """BUG: a retry starts a new execution instead of a new attempt of the same one."""
    old = s.executions[-1]
    s.executions.append(Execution(old.request, old.tool, old.principal, len(s.executions) + 1))
    s.per_tool[old.tool] = s.per_tool.get(old.tool, 0) + 1
    s.outcome = None


def _cached_failure(category: str) -> Json:
    """How the broken cache below keeps a failure: an output no execution produces."""
    return tool_output(-1 - core.FAILURE_CATEGORIES.index(category))


def _answer_failure_kept(s: RunState) -> Answer:
    """BUG: the result cache keeps the failure, to serve it again."""
    a = _ORIGINAL.fn("answer_failure")(s)
    r = s.current
    b = s.bindings.get(r.call_id)  # type: ignore[arg-type]
    if b is not None and a.code is not None:
        b.success = (_cached_failure(a.code),)
        b.success_at = r.index
    return a


def _answer_replay_serving_failures(s: RunState) -> Answer:
    """BUG: a cached failure is answered as the error it was: a plain error, not a replay."""
    r = s.current
    b = s.bindings[r.call_id]  # type: ignore[index]
    assert b.success is not None
    code = next((c for c in core.FAILURE_CATEGORIES if b.success[0] == _cached_failure(c)), None)
    if code is None:
        return _ORIGINAL.fn("answer_replay")(s)  # type: ignore[no-any-return]
    a = Answer(r.index, r.round, core.answer_id(r.call_id), "error", code=code)
    s.answers.append(a)
    s.rejections += 1
    return a


def _retry_allowed_ignoring_deadline(s: RunState) -> bool:
    """BUG: the retry policy looks at the failure and the retry budget, not at the clock."""
    o = s.outcome
    return (o is not None and not o.ok and o.category == "DEPENDENCY_TEMPORARY"
            and s.executions[-1].attempts - 1 < s.config.limits.max_retries)


def _lim(s: RunState) -> int | None:
    return s.config.limits.max_executions


# -- section 5: the classic races of concurrent tool execution ---------------------------------


def _budget_left_counting_returns(s: RunState) -> bool:
    """BUG (check-then-act): the execution counter is incremented when an execution returns, so
    the check before a start does not see the executions still in flight."""
    done = sum(1 for e in s.executions if e.outcome is not None)
    return core.within(done, s.config.limits.max_executions)


def _in_completion_order(fn: str) -> Callable[..., Answer]:
    """BUG: a result is appended to the answers when it arrives (completion order)."""

    def give(s: RunState, *args: Any) -> Answer:
        a: Answer = _ORIGINAL.fn(fn)(s, *args)
        if a.index in s.held:
            del s.held[a.index]
            s.answers.append(a)
        return a

    give.__name__ = f"{fn}_in_completion_order"
    return give


def _answer_failure_cancelling_siblings(s: RunState) -> Answer:
    """BUG (what a TaskGroup does when a task raises): a failure cancels every other execution of
    the response that is still running; their answers are lost."""
    a: Answer = _ORIGINAL.fn("answer_failure")(s)
    for e in core.in_flight(s):
        e.abandoned = True
    return a


def _take_up_not_waiting_for_the_id(s: RunState) -> bool:
    """BUG: a request is taken up while an execution of its call id is still running; with no stored
    result yet it looks unresolved, and executes a second time (R33)."""
    if s.config.max_concurrency <= 1:
        return False
    flying = core.in_flight(s)
    if not flying:
        return False
    resp = s.response
    if resp is None or s.cursor >= len(resp) or len(flying) >= s.config.max_concurrency:
        return True
    if any(e.tool in s.config.barriers for e in flying):
        return True
    call = resp[s.cursor]
    if isinstance(call, dict) and isinstance(call.get("name"), str) and call["name"] in s.config.barriers:
        return True
    return any(core._escalating(s, a) for a in s.held.values())


def _focus_answer(s: RunState) -> Answer | None:
    if s.focus is not None and s.focus in s.held:
        return s.held[s.focus]
    return s.answers[-1] if s.answers else None


def _escalates_failure_in_time(s: RunState) -> bool:
    """BUG: a failure ends the run the moment it arrives, even while an earlier request still runs."""
    a = _focus_answer(s)
    return (a is not None and a.index == s.current.index and a.code is not None
            and core.code_kind(a.code) == "failure" and s.config.mode == "abort")


def _stop_reason_in_time(s: RunState) -> str:
    a = _focus_answer(s)
    assert a is not None and a.code is not None
    return core.CODE_TABLE[a.code][2]


def _terminate_in_time(s: RunState, stop_reason: str, status: str, *, escalated: bool = False) -> None:
    if escalated and s.focus is not None and s.focus in s.held:
        a = s.held.pop(s.focus)  # the aborting answer was never committed: the earlier ones are missing
        assert a.code is not None
        s.aborted, s.aborted_answer = (a.index, a.code), a
        escalated = False
        if s.status is None:
            s.answers.append(a)  # popped again by terminate(escalated=True) below
            escalated = True
    _ORIGINAL.fn("terminate")(s, stop_reason, status, escalated=escalated)


def _terminate_abandoning_the_newest_only(s: RunState, stop_reason: str, status: str, *, escalated: bool = False) -> None:
    """BUG: cancellation (or the deadline) reaches only the execution started last; the others keep
    running and their results are still expected."""
    flying = core.in_flight(s)
    _ORIGINAL.fn("terminate")(s, stop_reason, status, escalated=escalated)
    for e in flying[:-1]:
        e.abandoned = False


# --------------------------------------------------------------------------------------------
# The corpus
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mutant:
    semantics: Semantics
    scope: str  # the scope whose bound it is checked in


def mutant(name: str, doc: str, scope: str, *, guards: dict[str, Any] | None = None,
           functions: dict[str, Any] | None = None, rules: Sequence[str] = (), breaks: Sequence[str] = (),
           local: bool = True) -> Mutant:
    return Mutant(CORE.variant(name, doc, guards=guards, functions=functions, rules=rules, breaks=breaks,
                               local=local), scope)


MUTANTS: tuple[Mutant, ...] = (
    mutant("budget-after-execution",
           "The execution budget is checked after the tool was entered, where it can no longer stop the "
           "side effect: the start check always admits.",
           "batch", guards={"budget_left": lambda s: True}, rules=("R9",), breaks=("INV-EXEC-BUDGET",)),
    mutant("budget-off-by-one",
           "The budget check compares with <= instead of <: one execution more than max_executions.",
           "batch", guards={"budget_left": lambda s: _lim(s) is None or s.executed <= _lim(s)},  # type: ignore[operator]
           rules=("R9",), breaks=("INV-EXEC-BUDGET",)),
    mutant("conflict-reuses-result",
           "An id that holds a stored result is a replay whatever the call's content: a conflicting call "
           "gets the stored result.",
           "batch", guards=_binding_guards(_classify_ignoring_content), rules=("R7",),
           breaks=("INV-CONFLICT-NO-REUSE",)),
    mutant("replay-re-executes",
           "The stored result is never consulted: a replay executes the tool again.",
           "batch", guards=_binding_guards(_classify_ignoring_result), rules=("R6",), breaks=("INV-REPLAY-NO-EXEC",)),
    mutant("failure-cached",
           "The result cache stores failures too: the same call after a failure is 'replayed'.",
           "batch", functions={"answer_failure": _answer_failure_cached}, rules=("R10",),
           breaks=("INV-NO-CACHED-FAILURE",)),
    mutant("results-out-of-order",
           "Error answers are put first in the results ('errors first').",
           "batch", functions={"answer_error": _answer_error_first}, rules=("R11",),
           breaks=("INV-ONE-ANSWER-IN-ORDER",), local=False),
    mutant("unknown-tool-executed",
           "The allow-list is not consulted: any named tool passes check 3 (and has no schema to fail). "
           "The id is bound to a call that failed R3 (INV-BINDING-STABLE) before it executes "
           "(INV-CHECKED-BEFORE-EXEC).",
           "batch", guards={
               "allow_listed": lambda s: isinstance(s.current.name, str),
               "arguments_valid": lambda s: s.current.name not in s.config.schemas or core._arguments_valid(s),
           }, rules=("R3",), breaks=("INV-BINDING-STABLE",)),
    mutant("principal-from-arguments",
           "The tool runs as the user named in the call's arguments instead of the run's principal.",
           "batch", functions={"begin_execution": _begin_execution_principal_from_arguments}, rules=("R16",),
           breaks=("INV-TRUSTED-PRINCIPAL",)),
    mutant("abort-loses-results",
           "An abort throws away the answers of the requests before the aborting one.",
           "batch", functions={"terminate": _terminate_dropping_results}, rules=("R13",),
           breaks=("INV-ABORT-PREFIX",), local=False),
    mutant("truncation-reported-complete",
           "A run stopped by a limit is recorded as COMPLETED, so its coverage reads COMPLETE.",
           "batch", functions={"terminate": _terminate_truncation_as_completed}, rules=("R20", "R22"),
           breaks=("INV-PARTIAL-COVERAGE",)),
    mutant("error-detail-leaks",
           "A failure answer carries the exception text.",
           "batch", functions={"answer_failure": _answer_failure_with_detail}, rules=("R15",),
           breaks=("INV-SAFE-ERRORS",)),
    mutant("conflict-rebinds-id",
           "A conflicting call takes the id over: the binding follows the latest content.",
           "batch", functions={"answer_error": _answer_error_rebinding}, rules=("R5", "R7"),
           breaks=("INV-BINDING-STABLE",)),
    mutant("retry-starts-execution",
           "A retry of a temporary failure starts a new execution instead of a new attempt.",
           "loop", functions={"begin_retry": _begin_retry_as_execution}, rules=("R23",),
           breaks=("INV-EXEC-ACCOUNTING",)),
    mutant("authorization-ignored",
           "The authorization hook's denial is not consulted before the execution.",
           "loop", guards={"authorized": lambda s: True}, rules=("R24",), breaks=("INV-CHECKED-BEFORE-EXEC",)),
    mutant("request-limit-off-by-one",
           "The request limit compares with <=: one request more than max_requests is admitted, and "
           "its id is bound although R5 binds only admitted requests (INV-BINDING-STABLE).",
           "loop", guards={"request_admitted": lambda s: s.config.limits.max_requests is None
                           or s.current.index <= s.config.limits.max_requests}, rules=("R19",),
           breaks=("INV-BINDING-STABLE",)),
    # The next three survived exhaustive exploration until loop.toml gained INV-DEADLINE,
    # INV-ESCALATION and INV-DECISION (they break a MUST that no invariant checked then).
    mutant("deadline-ignored",
           "The deadline is never read: model requests and executions start after it has passed (R19: "
           "it is checked before each model request and each execution).",
           "loop", guards={"deadline_passed": lambda s: False}, rules=("R19",), breaks=("INV-DEADLINE",)),
    mutant("abort-mode-continues",
           "Abort mode never aborts: violations and failures become error answers and the run goes on "
           "(R13: the first violation or failure ends the run).",
           "batch", guards={"escalates_violation": lambda s: False, "escalates_failure": lambda s: False},
           rules=("R13",), breaks=("INV-ESCALATION",)),
    mutant("failed-call-refused",
           "A call whose id failed before is refused (answered ID_CONFLICT) instead of executed again "
           "(R10: it executes again if the budget allows).",
           "batch", guards={"id_conflict": lambda s: s.binding_class() in ("conflict", "unresolved"),
                            "id_unresolved": lambda s: False},
           rules=("R10",), breaks=("INV-DECISION",)),
    mutant("retry-after-deadline",
           "A temporary failure is retried although the deadline has passed (R19, R23: the deadline is "
           "checked before each attempt too).",
           "loop", guards={"retry_allowed": _retry_allowed_ignoring_deadline}, rules=("R19", "R23"),
           breaks=("INV-DEADLINE",)),
    mutant("cached-failure-as-error",
           "The result cache keeps failures and serves a cached failure as the plain error it was, not as "
           "a replay (so INV-NO-CACHED-FAILURE, which looks at replays, does not see it); R10: the same "
           "call executes again.",
           "batch", functions={"answer_failure": _answer_failure_kept, "answer_replay": _answer_replay_serving_failures},
           rules=("R10",), breaks=("INV-DECISION",)),
    # survived until loop.toml gained INV-RETRY-DUE (R23's due retry was a MUST no invariant checked)
    mutant("retry-skipped",
           "A temporary failure is never retried: its first failure is the execution's outcome (R23: it is "
           "retried while fewer than max_retries retries have been made and the deadline has not passed).",
           "loop", guards={"retry_allowed": lambda s: False}, rules=("R23",), breaks=("INV-RETRY-DUE",)),
    # Section 5: the classic races of concurrent tool execution (scope `concurrent`).
    mutant("budget-check-then-act",
           "The execution counter counts executions that have returned: two calls taken up while the first "
           "still runs both pass a budget of one (R31: the reservation is made in the step that checks).",
           "concurrent", guards={"budget_left": _budget_left_counting_returns}, rules=("R9", "R31"),
           breaks=("INV-EXEC-BUDGET",)),
    mutant("answers-in-completion-order",
           "A result is appended to the answers when it arrives, so the answers follow the completion order "
           "(R32: they are committed in request order).",
           "concurrent", functions={"store_success": _in_completion_order("store_success"),
                                    "answer_failure": _in_completion_order("answer_failure")},
           rules=("R11", "R32"), breaks=("INV-ONE-ANSWER-IN-ORDER",)),
    mutant("sibling-failure-drops-answers",
           "A failed execution cancels the response's other executions still running, whose answers are "
           "lost (R32: a sibling's failure never loses another call's answer).",
           "concurrent", functions={"answer_failure": _answer_failure_cancelling_siblings}, rules=("R32",),
           breaks=("INV-ONE-ANSWER-IN-ORDER",)),
    mutant("in-flight-replay-executes-twice",
           "A call whose id is still executing is taken up at once: with no stored result yet it executes "
           "a second time (R33: it waits for the first execution's result).",
           "concurrent", guards={"take_up_blocked": _take_up_not_waiting_for_the_id}, rules=("R33",),
           breaks=("INV-TAKE-UP-ORDER",)),
    mutant("abort-at-first-failure-in-time",
           "In abort mode the first failure to arrive ends the run at its request, while an earlier request "
           "is still running (R34: the abort point is the lowest request index).",
           "concurrent", guards={"escalates_failure": _escalates_failure_in_time},
           functions={"escalation_stop_reason": _stop_reason_in_time, "terminate": _terminate_in_time},
           rules=("R13", "R34"), breaks=("INV-ABORT-PREFIX",)),
    mutant("cancellation-not-propagated",
           "Cancelling the run (or its deadline passing) abandons only the execution started last; the "
           "others keep running (R35: it reaches every running call).",
           "concurrent", functions={"terminate": _terminate_abandoning_the_newest_only}, rules=("R26", "R35"),
           breaks=("INV-ABANDON",)),
)

#: Variants that break a MUST of SPEC.md which no invariant of loop.toml checks: the checker explores
#: them exhaustively at the default bound and finds nothing, and each is a gap in the spec. One goes
#: here, with a doc saying which rule it breaks, until the spec gains the invariant that catches it.
#: Empty since loop.toml gained INV-RETRY-DUE (retry-skipped was the last one).
SURVIVORS: tuple[Mutant, ...] = ()


class UnknownVariant(LookupError):
    """No variant of that name in the corpus (the command line reports it as a usage error, exit 2)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "no such variant"


def by_name(name: str) -> Mutant:
    for mt in MUTANTS + SURVIVORS:
        if mt.semantics.name == name:
            return mt
    raise UnknownVariant(f"no variant {name!r}; the corpus has: {', '.join(m.semantics.name for m in MUTANTS + SURVIVORS)}")


@dataclass
class MutantResult:
    mutant: Mutant
    exploration: Exploration
    lifted: Lifted | None

    def summary(self) -> dict[str, Json]:
        m = self.mutant.semantics
        if self.lifted is None:
            return {"mutant": m.name, "scope": self.mutant.scope, "caught": False,
                    "states": self.exploration.states}
        lf = self.lifted
        return {
            "mutant": m.name,
            "scope": self.mutant.scope,
            "caught": True,
            "calls": lf.calls,
            "steps": len(lf.steps),
            "violated": sorted(lf.violated),
            "path": lf.path,
            "config": lf.config.label,
            **({"schedule": schedule(lf)} if lf.config.config.max_concurrency > 1 else {}),
        }


def check_mutant(mt: Mutant, bounds: Bounds | None = None, *, model: str | None = None) -> MutantResult:
    """Explore ``mt`` in its scope; lift the counterexample (if any) to concrete core steps."""
    bounds = bounds or load_bounds()
    scope = bounds.scope(mt.scope)
    kind = model or ("fast" if mt.semantics.local else "reference")
    ex = explore(bounds, scope, mt.semantics, model=kind)
    lf = None
    if ex.violation is not None and not ex.violation.crashed:
        v = ex.violation
        lf = lift(bounds, scope, mt.semantics, v.path, v.last_key, v.invariants)
    return MutantResult(mt, ex, lf)


def corpus_summaries(bounds: Bounds | None = None) -> dict[str, Json]:
    bounds = bounds or load_bounds()
    out: dict[str, Json] = {}
    for mt in MUTANTS:
        r = check_mutant(mt, bounds)
        out[mt.semantics.name] = r.summary()
    return out


def main(argv: Sequence[str]) -> int:  # pragma: no cover - maintenance entry point
    if len(argv) != 2 or argv[0] != "--overwrite":
        print("usage: python -m loopspec.checker.mutants --overwrite GOLDEN.json", file=sys.stderr)
        return 2
    from ..support.text import write_atomic

    data = {"format": "loopspec-verify-mutants/1", "bounds": "spec/bounds.toml", "mutants": corpus_summaries()}
    write_atomic(argv[1], json.dumps(data, indent=2) + "\n")
    print(f"wrote {argv[1]} ({len(data['mutants'])} mutants)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))

