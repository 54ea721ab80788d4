"""What the model checker explores: the real decision core, one spec transition at a time.

A :class:`Semantics` is the small set of functions a run is made of, keyed exactly as the engine
uses them: the guard predicates by spec guard id (``loopspec.core.rules.GUARDS``) and the state updates
of the effects by their ``core.rules`` function name (``answer_error``, ``begin_execution``,
``terminate`` ...). :data:`CORE` is the core itself — the very function objects the engine calls.
The must-fail corpus (:mod:`loopspec.checker.mutants`) replaces one or two of them.

:func:`step` fires one transition of ``spec/loop.toml`` the way the engine does: it takes the
group of transitions leaving the current state on its driving trigger in spec order (rule R0),
fires the first whose guards hold and applies its effect through the semantics. Everything the
environment decides — the model's response, the next call of a proposal, a tool's outcome, the
authorization hook's answer, a clock tick past the deadline, a cancellation — is asked of an
*oracle* at the point where the engine would ask the model, the tool, the hook, the clock or the
cancel token. Enumerating the oracle's answers enumerates every successor.

:func:`installed` puts a semantics into ``loopspec.core.rules`` for the duration of a ``with`` block,
so that the engine (``run_batch`` / ``run_loop``) and the reference driver ``drive()`` run the
same variant; that is how counterexamples of the corpus are replayed through the engine.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..core import rules as core
from ..core.rules import Binding, Execution, Outcome, RunState
from ..spec.loader import Spec, Transition, default_spec

__all__ = [
    "CORE",
    "EFFECT_FUNCTIONS",
    "Machine",
    "Oracle",
    "Semantics",
    "SpecGap",
    "clone",
    "installed",
    "step",
]

Json = Any

#: The ``core.rules`` state updates the engine's effects call (see ``engine.reference._Run._effect``).
EFFECT_FUNCTIONS: tuple[str, ...] = (
    "receive_response", "next_item", "end_round", "answer_error", "answer_replay", "bind_id",
    "begin_execution", "begin_retry", "record_outcome", "store_success", "answer_failure", "terminate",
    "set_authorization", "escalation_stop_reason", "admit_pending", "land", "run_on",
)


@dataclass(frozen=True)
class Semantics:
    """Guards (by spec guard id) and effect functions (by ``core.rules`` name) of one decision core."""

    name: str
    doc: str
    guards: Mapping[str, Callable[[RunState], bool]]
    functions: Mapping[str, Callable[..., Any]]
    #: Rule ids the variant breaks (mutants only), for reports.
    rules: tuple[str, ...] = ()
    #: The invariant ids the variant is expected to break (mutants only).
    breaks: tuple[str, ...] = ()
    #: False when a variant reads or writes history outside the window the fast explorer keeps
    #: (it is then checked by the reference explorer only).
    local: bool = True
    _f: dict[str, Callable[..., Any]] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        missing = [g for g in core.GUARDS if g not in self.guards] + [
            f for f in EFFECT_FUNCTIONS if f not in self.functions
        ]
        if missing:
            raise ValueError(f"semantics {self.name}: missing {', '.join(missing)}")
        self._f.update(self.functions)

    def fn(self, name: str) -> Callable[..., Any]:
        return self._f[name]

    def variant(
        self,
        name: str,
        doc: str,
        *,
        guards: Mapping[str, Callable[[RunState], bool]] | None = None,
        functions: Mapping[str, Callable[..., Any]] | None = None,
        rules: Sequence[str] = (),
        breaks: Sequence[str] = (),
        local: bool = True,
    ) -> Semantics:
        for g in guards or {}:
            if g not in self.guards:
                raise ValueError(f"variant {name}: no guard {g!r}")
        for f in functions or {}:
            if f not in self.functions:
                raise ValueError(f"variant {name}: no effect function {f!r}")
        return Semantics(
            name, doc, {**self.guards, **(guards or {})}, {**self.functions, **(functions or {})},
            tuple(rules), tuple(breaks), local,
        )

    @property
    def overrides(self) -> tuple[str, ...]:
        """What differs from the core: guard ids and function names."""
        out = [f"guard {g}" for g, fn in self.guards.items() if fn is not core.GUARDS[g]]
        out += [f"{f}()" for f, fn in self.functions.items() if fn is not getattr(core, f)]
        return tuple(out)


CORE = Semantics(
    "core",
    "The decision core of loopspec.core.rules, exactly as the engine runs it.",
    dict(core.GUARDS),
    {f: getattr(core, f) for f in EFFECT_FUNCTIONS},
)

_install_lock = threading.Lock()


@contextmanager
def installed(sem: Semantics) -> Iterator[None]:
    """Run the engine and ``drive()`` on ``sem``: patch ``loopspec.core.rules`` inside the block.

    Only the guard table entries and the effect functions listed in :data:`EFFECT_FUNCTIONS` are
    replaced (the invariants use neither, so they stay the spec's). Not reentrant; one at a time.
    """
    with _install_lock:
        saved_guards = dict(core.GUARDS)
        saved_fns = {f: getattr(core, f) for f in EFFECT_FUNCTIONS}
        guards: dict[str, Callable[[RunState], bool]] = core.GUARDS  # type: ignore[assignment]
        try:
            guards.update(sem.guards)
            for f, fn in sem.functions.items():
                setattr(core, f, fn)
            yield
        finally:
            guards.update(saved_guards)
            for f, fn in saved_fns.items():
                setattr(core, f, fn)


# --------------------------------------------------------------------------------------------
# The environment's choices
# --------------------------------------------------------------------------------------------


class Oracle(Protocol):
    """Answers the environment's questions during one step. ``point`` names the question
    (``cancel``, ``tick``, ``auth``, ``response``, ``next``, ``outcome``); ``options`` are the
    possible answers, each a short label; the oracle returns one of them."""

    def choose(self, point: str, options: Sequence[str]) -> str: ...


class SpecGap(RuntimeError):
    """No transition of a (state, trigger) group is enabled: the spec is incomplete here."""


@dataclass(slots=True)
class Machine:
    """A run as the checker sees it: the machine state (a spec state id) and the core's RunState."""

    state: str
    s: RunState


def _copy_binding(b: Binding) -> Binding:
    return Binding(b.name, b.key, b.bound_at, b.success, b.success_at)


def _copy_execution(e: Execution) -> Execution:
    return Execution(e.request, e.tool, e.principal, e.ordinal, e.attempts, e.outcome, e.late, e.late_retries,
                     e.retry_skipped, e.abandoned, e.landed_late)


def clone(s: RunState) -> RunState:
    """A deep copy of a RunState (fast: only the mutable parts are copied). Works on windows too."""
    b = s.bindings
    cw = getattr(b, "copy_with", None)
    bindings = cw(_copy_binding) if cw else {k: _copy_binding(v) for k, v in b.items()}
    ex = s.executions
    cw = getattr(ex, "copy_with", None)
    executions = cw(_copy_execution) if cw else [_copy_execution(e) for e in ex]
    return RunState(
        config=s.config,
        phase=s.phase,
        now=s.now,
        bindings=bindings,
        requests=s.requests.copy(),
        answers=s.answers.copy(),
        executions=executions,
        per_tool=s.per_tool.copy(),
        model_requests=s.model_requests,
        replays=s.replays,
        rejections=s.rejections,
        retries=s.retries,
        round=s.round,
        response=s.response,
        final=s.final,
        unreconciled=s.unreconciled,
        uncharged=s.uncharged,
        uncharged_per_tool=s.uncharged_per_tool.copy(),
        model_failed=s.model_failed,
        input_exhausted=s.input_exhausted,
        cursor=s.cursor,
        admitted_cursor=s.admitted_cursor,
        outcome=s.outcome,
        status=s.status,
        stop_reason=s.stop_reason,
        aborted=s.aborted,
        terminations=s.terminations,
        final_at=s.final_at,
        discarded=s.discarded,
        late_model_requests=s.late_model_requests,
        aborted_answer=s.aborted_answer,
        focus=s.focus,
        held=s.held.copy(),
        arrival=s.arrival,
        early_take_ups=s.early_take_ups,
    )


# --------------------------------------------------------------------------------------------
# The environment of one scope: what the model may propose, what tools may return
# --------------------------------------------------------------------------------------------

FINAL_TEXT = "done"
#: What a raising model is recorded as (the engine turns an exception into a non-response).
MODEL_FAILURE = object()
#: An execution cancelled while the tool runs: the outcome arrives after the run is terminal.
LATE = "late"
#: Section 6: a write whose outcome is unknown (R42): the run then has a write still unknown (RunState.unreconciled)
UNKNOWN = "OUTCOME_UNKNOWN"
#: what RunState.unreconciled holds in the model while a write of the run is unknown (one abstract key)
UNRECONCILED_KEY = ("unknown",)


@dataclass(frozen=True, slots=True)
class Env:
    """The environment of one configuration: calls by label, outcomes, and which questions exist.

    ``calls`` maps a call label (e.g. ``c1:lookup(alice)``) to the call as the model sends it.
    """

    calls: Mapping[str, Json]
    call_order: tuple[str, ...]
    call_bound: int
    failures: tuple[str, ...]
    batch: bool
    cancel: bool
    tick: bool
    authorize: bool
    model_error: bool
    final: bool
    cancel_in_flight: bool = False  # section 5 scopes: cancellation only while executions are in flight
    #: section 6: the write tools, whose outcome may also be unknown (OUTCOME_UNKNOWN, R42)
    writes: frozenset[str] = frozenset()

    def response_options(self, s: RunState) -> tuple[str, ...]:
        opts: list[str] = []
        if self.final:
            opts.append("final")
        if self.model_error:
            opts.append("error")
        opts.append("[]")
        if len(s.requests) < self.call_bound:
            opts.extend(self.call_order)
        return tuple(opts)

    def next_options(self, s: RunState) -> tuple[str, ...]:
        if len(s.requests) < self.call_bound:
            return ("end", *self.call_order)
        return ("end",)

    def outcome_options(self, tool: str | None = None) -> tuple[str, ...]:
        unknown = (UNKNOWN,) if tool in self.writes else ()
        return ("ok", *self.failures, *unknown, *((LATE,) if self.cancel else ()))

    def arrival_options(self, s: RunState) -> tuple[str, ...]:
        """Section 5: which execution in flight completes next, and how (``#<request>:<outcome>``)."""
        return tuple(f"#{e.request}:{o}" for e in core.in_flight(s) for o in ("ok", *self.failures))

    @staticmethod
    def arrival(s: RunState, label: str) -> tuple[int, Outcome]:
        req, _, o = label[1:].partition(":")
        ex = next(e for e in s.executions if e.request == int(req))
        return int(req), Env.outcome(o, ex.ordinal)

    def response(self, label: str) -> Json:
        if label == "final":
            return {"final": FINAL_TEXT}
        if label == "error":
            return MODEL_FAILURE
        if label == "[]":
            return []
        return [self.calls[label]]

    @staticmethod
    def outcome(label: str, ordinal: int) -> Outcome:
        if label == "ok":
            return Outcome.success(tool_output(ordinal))
        if label == UNKNOWN:
            return Outcome(False, None, UNKNOWN)
        return Outcome.failure(label)


def tool_output(ordinal: int) -> Json:
    """The output of the ``ordinal``-th execution of a run (distinct per execution)."""
    return {"execution": ordinal}


# --------------------------------------------------------------------------------------------
# One step
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Tables:
    spec: Spec
    drive: Mapping[str, str]
    groups: Mapping[tuple[str, str], tuple[Transition, ...]]
    terminal: frozenset[str]
    status_of: Mapping[str, str]
    clock_groups: frozenset[tuple[str, str]]


_TABLES: dict[int, _Tables] = {}

#: The ``core.rules`` state updates each effect of loop.toml calls (see :func:`_effect`; a test
#: records the calls of every step and compares).
EFFECT_CALLS: Mapping[str, tuple[str, ...]] = {
    "ask_model": ("receive_response",),
    "next_item": ("next_item",),
    "end_round": ("end_round",),
    "answer_error": ("answer_error",),
    "answer_replay": ("answer_replay",),
    "bind_id": ("bind_id",),
    "keep_binding": (),
    "start_execution": ("begin_execution", "record_outcome"),
    "retry_execution": ("begin_retry", "record_outcome"),
    "store_success": ("store_success",),
    "answer_failure": ("answer_failure",),
    "terminate": ("escalation_stop_reason", "terminate"),
    "wait": (),
    "land": ("land",),
    "run_on": ("run_on",),
}
#: What :func:`step` calls before evaluating a group (the engine does the same).
PRE_GROUP_CALLS: Mapping[tuple[str, str], tuple[str, ...]] = {
    ("proposed", "check"): ("admit_pending",),
    ("validated", "start"): ("set_authorization",),
}


def tables(spec: Spec | None = None) -> _Tables:
    if spec is None:
        spec = default_spec()  # the shipped spec or the one chosen with --spec (cached per choice)
    t = _TABLES.get(id(spec))
    if t is None:
        drive: dict[str, str] = {}
        groups: dict[tuple[str, str], tuple[Transition, ...]] = {}
        for st in spec.states:
            for trig in spec.triggers_from(st.id):
                groups[(st.id, trig)] = spec.group(st.id, trig)
            if not st.terminal:
                drivers = [x for x in spec.triggers_from(st.id) if x != "cancel"]
                if len(drivers) != 1:
                    raise SpecGap(f"state {st.id}: expected one driving trigger, found {drivers}")
                drive[st.id] = drivers[0]
        from .readsets import reads_clock

        # a group reads the clock when a guard of it does, or a state update its effects (or the
        # step before the group) call: those record facts about the clock (Answer.late, ...)
        def group_reads_clock(key: tuple[str, str], group: tuple[Transition, ...]) -> bool:
            fns = [core.GUARDS[g] for tr in group for g in tr.guards]
            fns += [getattr(core, f) for tr in group for f in EFFECT_CALLS[tr.effect]]
            fns += [getattr(core, f) for f in PRE_GROUP_CALLS.get(key, ())]
            return any(reads_clock(fn) for fn in fns)

        clock = frozenset(k for k, group in groups.items() if group_reads_clock(k, group))
        t = _Tables(spec, drive, groups, frozenset(s.id for s in spec.terminal_states),
                    {r.id: r.status for r in spec.stop_reasons}, clock)
        _TABLES[id(spec)] = t
    return t


def enabled(sem: Semantics, tr: Transition, s: RunState) -> bool:
    g = sem.guards
    return all(g[x](s) for x in tr.when) and not any(g[x](s) for x in tr.unless)


def step(sem: Semantics, env: Env, m: Machine, oracle: Oracle, tb: _Tables | None = None) -> Transition:
    """Fire one transition from ``m`` (updated in place) and return it.

    The same sequence the engine follows in ``_Run.run``: read the clock, honour a cancellation,
    evaluate the driving trigger's group in spec order with the guards, apply the effect.
    """
    tb = tb or tables()
    s = m.s
    if m.state in tb.terminal:
        raise ValueError(f"state {m.state} is terminal")
    trigger = tb.drive[m.state]
    if late_pending(m):
        trigger = "cancel"  # the tool is still running and the run was cancelled (R26)
    elif env.cancel and (not env.cancel_in_flight or core.in_flight(s)) and oracle.choose("cancel", ("no", "yes")) == "yes":
        trigger = "cancel"
    else:
        # the engine reads the clock before every step; only the groups whose guards or state
        # updates read it can tell, so a tick just before them is as general as a tick anywhere
        if (env.tick and (m.state, trigger) in tb.clock_groups and not core.GUARDS["deadline_passed"](s)
                and oracle.choose("tick", ("no", "yes")) == "yes"):
            d = s.config.limits.deadline
            assert d is not None
            s.now = d
        if s.config.max_concurrency > 1:
            _arrival(sem, env, m, oracle)
        # the engine takes up the call at the cursor (R26), not while it lands a result or waits (section 5)
        if m.state == "proposed" and not core.waits(s, sem.guards):
            sem.fn("admit_pending")(s)
    if trigger == "start" and s.current.authorized is None:
        allowed = oracle.choose("auth", ("allow", "deny")) == "allow" if env.authorize else True
        sem.fn("set_authorization")(s, allowed)
    for tr in tb.groups[(m.state, trigger)]:
        if enabled(sem, tr, s):
            _effect(sem, env, tb, tr, s, oracle)
            m.state = tr.dest
            return tr
    raise SpecGap(f"no transition from {m.state!r} on {trigger!r} is enabled")


def _effect(sem: Semantics, env: Env, tb: _Tables, tr: Transition, s: RunState, oracle: Oracle) -> None:
    e = tr.effect
    f = sem.fn
    if e == "ask_model":
        label = oracle.choose("response", env.response_options(s))
        f("receive_response")(s, env.response(label))
        # section 6 (R46): the end-of-run reconciliation, before the terminal state is chosen (T35 or T06): the
        # lookup settles the unknown write, or cannot answer
        if s.final is not None and s.unreconciled and oracle.choose("reconcile", ("unknown", "settled")) == "settled":
            s.unreconciled = ()
    elif e == "next_item":
        if s.focus is None:  # after a landed result (section 5) the cursor stays where it is
            _reveal(env, s, oracle)
        f("next_item")(s)
    elif e == "end_round":
        f("end_round")(s)
    elif e == "answer_error":
        assert tr.code is not None
        f("answer_error")(s, tr.code)
    elif e == "answer_replay":
        f("answer_replay")(s)
    elif e == "bind_id":
        f("bind_id")(s)
    elif e == "keep_binding":
        pass
    elif e == "start_execution":
        f("begin_execution")(s)
        if s.config.max_concurrency <= 1:
            _outcome(sem, env, s, oracle)  # section 5: in the background the result arrives later
    elif e == "retry_execution":
        f("begin_retry")(s)
        if s.config.max_concurrency <= 1:
            _outcome(sem, env, s, oracle)
    elif e == "wait":
        pass
    elif e == "land":
        f("land")(s)
    elif e == "run_on":
        if s.focus is None:
            _reveal(env, s, oracle)
        f("run_on")(s)
    elif e == "store_success":
        f("store_success")(s)
    elif e == "answer_failure":
        f("answer_failure")(s)
    elif e == "terminate":
        reason = f("escalation_stop_reason")(s) if tr.escalates is not None else tr.stop_reason
        assert reason is not None
        f("terminate")(s, reason, tb.status_of[reason], escalated=tr.escalates is not None)
    else:  # pragma: no cover - the spec loader and the engine rule this out
        raise SpecGap(f"no implementation for effect {e!r}")


def _reveal(env: Env, s: RunState, oracle: Oracle) -> None:
    """The proposal is revealed one call at a time, when the cursor moves past the last one
    revealed: the core never reads past the cursor, so this is the same as choosing it whole."""
    label = oracle.choose("next", env.next_options(s))
    if label != "end":
        assert s.response is not None
        s.response = (*s.response[: s.cursor + 1], env.calls[label])


def _outcome(sem: Semantics, env: Env, s: RunState, oracle: Oracle) -> None:
    label = oracle.choose("outcome", env.outcome_options(s.executions[-1].tool if env.writes else None))
    if label == LATE:
        # cancelled while the tool runs: nothing is recorded; the only way on is the cancel
        s.outcome = None
        return
    if label == UNKNOWN:
        s.unreconciled = UNRECONCILED_KEY  # the operation ledger now holds the write as unknown (R42, R46)
    sem.fn("record_outcome")(s, Env.outcome(label, len(s.executions)))


def _arrival(sem: Semantics, env: Env, m: Machine, oracle: Oracle) -> None:
    """Section 5: the environment decides which result arrives, and when. At ``proposed`` a result
    may arrive before the next take-up (when one is possible at all); at ``waiting`` the run waits
    for one (unless the deadline has passed: then the run stops waiting, T32)."""
    s = m.s
    if s.arrival is not None or not core.in_flight(s):
        return
    g = sem.guards
    if m.state == "proposed":
        if g["take_up_blocked"](s):
            return
        label = oracle.choose("arrival", ("none", *env.arrival_options(s)))
    elif m.state == "waiting":
        if g["deadline_passed"](s):
            return
        label = oracle.choose("arrival", env.arrival_options(s))
    else:
        return
    if label != "none":
        s.arrival = Env.arrival(s, label)


def late_pending(m: Machine) -> bool:
    """An execution whose tool is still running when the run is cancelled (only cancel may follow)."""
    s = m.s
    return m.state == "executing" and s.outcome is None and s.config.max_concurrency <= 1

