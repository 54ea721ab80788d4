"""Whole-batch contracts for CrossHair: the pure core driven end to end on symbolic inputs.

``crosshair check loopspec.core.contracts`` explores these functions symbolically. Small integers
stand for the interchangeable values of a batch (call ids, argument values, which executions
fail); each postcondition is an observable property of the spec (rule ids in the comments), and
the last one is that no invariant of loop.toml is violated in the final state.
"""

from __future__ import annotations

from .rules import (
    Limits,
    Outcome,
    RunConfig,
    RunState,
    ToolSchema,
    blank,  # noqa: F401 - read by the docstring contracts (CrossHair evaluates them here)
    drive,
    violated_invariants,
    well_formed,
)

_IDS = ("a", "b", "c")
_VALUES = ("x", "y")
_SCHEMAS = {"t": ToolSchema((("v", "string"),), frozenset({"v"}), False)}


def batch_summary(
    ids: list[int], values: list[int], known: list[bool], failing: list[bool], budget: int, abort: bool
) -> tuple[int, int, int, int]:
    """Run one batch through the pure core: (executed, answers, replays, invariant violations).

    pre: 0 <= budget <= 3
    pre: len(ids) <= 4 and len(values) == len(ids) and len(known) == len(ids) and len(failing) == 4
    pre: all(0 <= i < 3 for i in ids) and all(0 <= v < 2 for v in values)
    post: __return__[0] <= budget
    post: __return__[1] <= len(ids)
    post: implies(not abort, __return__[1] == len(ids))
    post: __return__[0] + __return__[2] <= len(ids)
    post: __return__[3] == 0
    """
    calls = [
        {"id": _IDS[i], "name": "t" if k else "shell", "arguments": {"v": _VALUES[v]}}
        for i, v, k in zip(ids, values, known, strict=True)
    ]
    mode = "abort" if abort else "continue"
    cfg = RunConfig(schemas=_SCHEMAS, limits=Limits(max_executions=budget), mode=mode,
                    on_limit="throw" if abort else "error-result", batch=True)
    violations = 0

    def check(s: RunState, label: str) -> None:
        nonlocal violations
        violations += len(violated_invariants(s))

    def outcome(s: RunState, ex: object) -> Outcome:
        n = s.executed - 1
        return Outcome.failure("INTERNAL_ERROR") if failing[n] else Outcome.success(n)

    s = drive(RunState(cfg), lambda s: calls, outcome, on_step=check)
    return s.executed, len(s.answers), s.replays, violations


def concurrent_batch_summary(
    ids: list[int], known: list[bool], failing: list[bool], budget: int, abort: bool, picks: list[int]
) -> tuple[bool, int, int, int]:
    """The same batch run sequentially and with its executions in the background (three slots,
    every tool read-only), the completion order chosen by ``picks``: (same observable outcome,
    concurrent executions, sequential executions, invariant violations).

    Section 5's principle: the answers, their order, the abort point and the status do not depend
    on concurrency nor on the completion order (R31, R32, R34); the budget is never exceeded,
    reservations being made at take-up (R31); no invariant of loop.toml breaks in any step.

    pre: 0 <= budget <= 3
    pre: len(ids) <= 4 and len(known) == len(ids) and len(failing) == 4 and len(picks) <= 8
    pre: all(0 <= i < 3 for i in ids) and all(0 <= p < 4 for p in picks)
    post: __return__[0]
    post: __return__[2] <= __return__[1] <= budget
    post: implies(not abort, __return__[1] == __return__[2])
    post: __return__[3] == 0
    """
    calls = [{"id": _IDS[i], "name": "t" if k else "shell", "arguments": {"v": "x"}}
             for i, k in zip(ids, known, strict=True)]
    mode = "abort" if abort else "continue"
    violations = 0

    def check(s: RunState, label: str) -> None:
        nonlocal violations
        violations += len(violated_invariants(s))

    def outcome(s: RunState, ex: object) -> Outcome:
        n = ex.ordinal - 1  # type: ignore[attr-defined]
        return Outcome.failure("INTERNAL_ERROR") if failing[n] else Outcome.success(n)

    queue = list(picks)

    def arrive(s: RunState, must: bool) -> int | None:
        flying = sorted(e.request for e in s.executions if e.outcome is None and not e.abandoned)
        p = queue.pop(0) if queue else 0
        if not must:
            return None if p == 0 or not flying else flying[(p - 1) % len(flying)]
        return flying[p % len(flying)]

    def run(slots: int) -> RunState:
        cfg = RunConfig(schemas=_SCHEMAS, limits=Limits(max_executions=budget), mode=mode,
                        on_limit="throw" if abort else "error-result", batch=True, max_concurrency=slots)
        return drive(RunState(cfg), lambda s: calls, outcome, on_step=check, arrive=arrive)

    seq = run(1)
    con = run(3)

    def seen(s: RunState) -> tuple[object, ...]:
        return (tuple((a.index, a.status, a.code, a.replayed) for a in s.answers), s.aborted, s.status)

    same = seen(seq) == seen(con) and [e.request for e in con.executions][: seq.executed] == \
        [e.request for e in seq.executions]
    return same, con.executed, seq.executed, violations


def well_formed_call(call_id: str | int | None, name: str | None, arguments: dict[str, int] | str | None) -> bool:
    """R2 on the shapes a model actually sends (CrossHair cannot explore ``object`` soundly).

    post: implies(__return__, isinstance(call_id, str) and not blank(call_id))
    post: implies(__return__, isinstance(name, str) and isinstance(arguments, dict))
    post: implies(isinstance(call_id, str) and not blank(call_id) and isinstance(name, str) and isinstance(arguments, dict), __return__)
    """
    return well_formed(call_id, name, arguments)


def implies(a: bool, b: bool) -> bool:
    return (not a) or b
