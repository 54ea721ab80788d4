"""The reference engine: a ``transitions`` machine built from ``spec/loop.toml``.

States, triggers and the order of guarded transitions come from the spec data; every guard is a
pure predicate of :mod:`loopspec.core.rules`; every effect is the core's state update plus the I/O it
needs (asking the model, entering a tool, writing the ledger). There is no second hand-written
copy of the machine: change the spec and the engine follows (or refuses to build, naming what is
missing).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from transitions import Machine

from ..core import rules as core
from ..core.ledger import LEDGER_VERSION, Ledger, digest
from ..core.rules import Answer, Limits, Outcome, RunConfig, RunState, ToolSchema
from ..spec.loader import Spec, Transition, load_spec
from .base import EngineError, ToolFailure, Uncharged, WriteAnswer

if TYPE_CHECKING:
    from .writeloop import RunWrites

__all__ = [
    "Background",
    "BatchOutcome",
    "CancelToken",
    "RunOutcome",
    "ScriptedBackground",
    "ThreadBackground",
    "Tool",
    "ToolContext",
    "Turn",
    "arun_batch",
    "arun_loop",
    "run_batch",
    "run_loop",
    "tool",
]

Json = Any


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool learns about the call besides its arguments. ``principal`` is the run's
    trusted identity, given by the application (R16), never read from the arguments.

    ``deadline`` is the time left before the run's deadline when the attempt started (seconds on
    the run's clock; ``None`` without a deadline) and ``cancelled`` is set when the execution is
    abandoned — the run was cancelled, its deadline passed while it waited, or it ended at an
    abort point before this call (R35): a tool that honours them stops early."""

    principal: str
    call_id: str
    run_id: str
    request_index: int
    attempt: int
    deadline: float | None = None
    cancelled: threading.Event = field(default_factory=threading.Event, compare=False, repr=False)
    #: a write tool's business idempotency key (section 6, R37): pass it to the external system
    idempotency_key: str | None = None


@dataclass(frozen=True)
class Tool:
    """A registered tool: a plain callable ``fn(arguments, context) -> JSON``, its input schema
    (R4) and, optionally, the output fields allowed to leave the server (R25)."""

    name: str
    fn: Callable[[dict[str, Json], ToolContext], Json]
    schema: ToolSchema = field(default_factory=ToolSchema)
    fields: tuple[str, ...] | None = None
    max_executions: int | None = None
    description: str = ""
    #: MCP tool annotations (readOnlyHint, idempotentHint, destructiveHint, openWorldHint): which
    #: calls may overlap when the run executes concurrently (R30). MCP's defaults where missing.
    annotations: Mapping[str, bool] = field(default_factory=dict)
    #: section 6: a write's declaration (its key arguments, what the external system offers, R36-R38);
    #: ``None`` for a read-only tool. A write runs through the run's operation ledger.
    write: Any = None
    #: section 6: ``lookup(key, arguments) -> (applied, result)`` asks the external system about a key (R38, R43)
    lookup: Callable[[str, Mapping[str, Any]], tuple[bool, Any]] | None = None

    @staticmethod
    def define(
        name: str,
        fn: Callable[[dict[str, Json], ToolContext], Json],
        input_schema: Mapping[str, Json] | None = None,
        *,
        fields: Sequence[str] | None = None,
        max_executions: int | None = None,
        description: str = "",
        annotations: Mapping[str, bool] | None = None,
        write: Any = None,
        lookup: Callable[[str, Mapping[str, Any]], tuple[bool, Any]] | None = None,
    ) -> Tool:
        """Register ``fn`` as tool ``name``; raises ToolDefinitionError for a schema outside R4 or
        annotations outside MCP's four boolean hints. ``fn`` may be a coroutine function (an
        async tool): run it with ``arun_loop`` / ``arun_batch``."""
        if not isinstance(name, str) or not name:
            raise core.ToolDefinitionError(str(name), "", "a tool needs a non-empty string name")
        schema = core.parse_schema(dict(input_schema) if input_schema is not None else None, tool=name)
        ann = dict(annotations or {})
        for k, v in ann.items():
            if k not in core.HINT_DEFAULTS:
                raise core.ToolDefinitionError(name, f".annotations.{k}", f"not an MCP hint ({', '.join(core.HINT_DEFAULTS)})")
            if not isinstance(v, bool):
                raise core.ToolDefinitionError(name, f".annotations.{k}", "must be true or false")
        if write is not None:
            from ..core.writes import write_tool_problems

            problems = write_tool_problems(write, dict(input_schema) if input_schema is not None else {}, ann)
            if write.name != name:
                problems.append(f"{name}: its write declaration names {write.name!r}")
            if problems:
                raise core.ToolDefinitionError(name, ".write", "; ".join(problems))
        return Tool(name, fn, schema, tuple(fields) if fields is not None else None, max_executions, description, ann,
                    write, lookup)

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)

    def project(self, output: Json) -> Json:
        """Apply the field allow-list (R25): only declared fields of an object output survive."""
        if self.fields is None:
            return output
        if isinstance(output, dict):
            return {k: output[k] for k in self.fields if k in output}
        if isinstance(output, list):
            return [self.project(o) for o in output]
        return output


def tool(
    name: str | None = None,
    *,
    schema: Mapping[str, Json] | None = None,
    fields: Sequence[str] | None = None,
    max_executions: int | None = None,
    annotations: Mapping[str, bool] | None = None,
) -> Callable[[Callable[[dict[str, Json], ToolContext], Json]], Tool]:
    """Decorator form of :meth:`Tool.define`."""

    def wrap(fn: Callable[[dict[str, Json], ToolContext], Json]) -> Tool:
        return Tool.define(name or fn.__name__, fn, schema, fields=fields, max_executions=max_executions,
                           description=(fn.__doc__ or "").strip(), annotations=annotations)

    return wrap


@dataclass(frozen=True, slots=True)
class Turn:
    """What the model is shown at each request: the round number and the previous round's answers."""

    round: int
    results: tuple[dict[str, Json], ...]
    run_id: str


class CancelToken:
    """Cancel a run from any thread. Safe to call any number of times (R26)."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None) -> bool:
        return self._event.wait(timeout)


@dataclass(frozen=True)
class RunOutcome:
    """The outcome of a run or batch, as data."""

    run_id: str
    status: str
    stop_reason: str
    coverage: str
    answers: tuple[Answer, ...]
    executed: int
    executions: tuple[int, ...]  # request indices that started an execution, in order
    aborted: tuple[int, str] | None
    counters: Mapping[str, Any]
    final: str | None
    transitions: tuple[str, ...] = field(repr=False, default=())
    ledger: Ledger | None = field(repr=False, default=None, compare=False)
    #: section 6 (R46): the business keys of the run's writes whose outcome is still unknown at its end
    unreconciled: tuple[str, ...] = ()

    @property
    def results(self) -> list[dict[str, Json]]:
        """Every answer in its model-visible form, in request order (R11, R15)."""
        return [a.to_json(self.run_id) for a in self.answers]

    def to_json(self) -> dict[str, Json]:
        return {
            "runId": self.run_id,
            "status": self.status,
            "stopReason": self.stop_reason,
            "coverage": self.coverage,
            "executed": self.executed,
            "aborted": None if self.aborted is None else {"index": self.aborted[0], "code": self.aborted[1]},
            "counters": dict(self.counters),
            "final": self.final,
            "results": self.results,
        }


BatchOutcome = RunOutcome


# --------------------------------------------------------------------------------------------
# Building the machine from the spec
# --------------------------------------------------------------------------------------------

_EFFECTS = {
    "ask_model", "next_item", "end_round", "answer_error", "answer_replay", "bind_id",
    "keep_binding", "start_execution", "retry_execution", "store_success", "answer_failure", "terminate",
    "wait", "land", "run_on",
}

_checked: set[int] = set()


def _check_spec(spec: Spec) -> dict[str, str]:
    """Validate the spec against the core and this engine once; return state -> driving trigger."""
    problems = core.check_against_spec(spec)
    effect_ids = {e.id for e in spec.effects}
    for e in sorted(effect_ids ^ _EFFECTS):
        problems.append(f"effect {e}: declared only in the {'spec' if e in effect_ids else 'engine'}")
    drive: dict[str, str] = {}
    for s in spec.states:
        if s.terminal:
            continue
        triggers = [t for t in spec.triggers_from(s.id) if t != "cancel"]
        if len(triggers) != 1:
            problems.append(f"state {s.id}: the engine needs exactly one driving trigger, found {triggers}")
        else:
            drive[s.id] = triggers[0]
    if problems:
        raise EngineError("the spec and the reference engine disagree:\n  " + "\n  ".join(problems))
    return drive


# --------------------------------------------------------------------------------------------
# Where background executions run (section 5 of SPEC.md)
# --------------------------------------------------------------------------------------------

#: A result that arrived: (request index, outcome, duration in milliseconds).
Arrival = tuple[int, Outcome, float]

#: Chooses which execution completes next: given the request indices of the executions whose
#: result may be released now (in start order) and whether one must be (the run is waiting), it
#: returns one of them, or ``None`` when none has arrived yet (only when ``must`` is false).
Schedule = Callable[[tuple[int, ...], bool], "int | None"]


class Background:
    """Executions in flight: the run submits them and takes their results as they arrive."""

    def submit(self, request: int, work: Callable[[], Outcome], cancelled: threading.Event) -> None:
        raise NotImplementedError

    def poll(self) -> Arrival | None:
        """A result that has arrived, if any (never blocks)."""
        raise NotImplementedError

    def wait(self, timeout: float) -> Arrival | None:
        """The next result, waiting at most ``timeout`` seconds for one."""
        raise NotImplementedError

    def abandon(self, request: int, late: Callable[[Outcome], None]) -> None:
        """The run no longer wants this execution's result: ``late`` receives it if it comes."""
        raise NotImplementedError


def _timed(work: Callable[[], Outcome]) -> tuple[Outcome, float]:
    t0 = time.perf_counter()
    o = work()
    return o, round((time.perf_counter() - t0) * 1000, 3)


class ThreadBackground(Background):
    """Each execution in its own daemon thread; results arrive in the order they complete."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._ready: list[Arrival] = []
        self._gone: dict[int, Callable[[Outcome], None]] = {}

    def submit(self, request: int, work: Callable[[], Outcome], cancelled: threading.Event) -> None:
        def run() -> None:
            o, ms = _timed(work)
            with self._cond:
                late = self._gone.pop(request, None)
                if late is None:
                    self._ready.append((request, o, ms))
                    self._cond.notify_all()
            if late is not None:
                late(o)

        threading.Thread(target=run, name=f"loopspec-tool-{request}", daemon=True).start()

    def poll(self) -> Arrival | None:
        with self._cond:
            return self._ready.pop(0) if self._ready else None

    def wait(self, timeout: float) -> Arrival | None:
        with self._cond:
            if not self._ready:
                self._cond.wait(timeout)
            return self._ready.pop(0) if self._ready else None

    def abandon(self, request: int, late: Callable[[Outcome], None]) -> None:
        with self._cond:
            mine = [a for a in self._ready if a[0] == request]
            self._ready = [a for a in self._ready if a[0] != request]
            if not mine:
                self._gone[request] = late
        for a in mine:
            late(a[1])


class ScriptedBackground(Background):
    """Deterministic: each execution runs at once, in the run's thread, and its result is released
    when ``schedule`` chooses it — tests, counterexample replays and harnesses pick the completion
    order themselves instead of hoping for it."""

    def __init__(self, schedule: Schedule) -> None:
        self.schedule = schedule
        self._held: dict[int, tuple[Outcome, float]] = {}

    def submit(self, request: int, work: Callable[[], Outcome], cancelled: threading.Event) -> None:
        self._held[request] = _timed(work)

    def _take(self, must: bool) -> Arrival | None:
        if not self._held:
            return None
        pick = self.schedule(tuple(self._held), must)
        if pick is None:
            if must:
                raise EngineError("the schedule chose no result while the run waits for one")
            return None
        if pick not in self._held:
            raise EngineError(f"the schedule chose request {pick!r}, which is not in flight")
        o, ms = self._held.pop(pick)
        return pick, o, ms

    def poll(self) -> Arrival | None:
        return self._take(False)

    def wait(self, timeout: float) -> Arrival | None:
        return self._take(True)

    def abandon(self, request: int, late: Callable[[Outcome], None]) -> None:
        held = self._held.pop(request, None)
        if held is not None:
            late(held[0])


# --------------------------------------------------------------------------------------------
# One run
# --------------------------------------------------------------------------------------------


class _Run:
    """One run: the transitions model. Guards read ``self.s``; effects update it and do the I/O."""

    def __init__(
        self,
        spec: Spec,
        config: RunConfig,
        tools: Mapping[str, Tool],
        model: Callable[[Turn], Json],
        *,
        clock: Callable[[], float],
        authorize: Callable[[str, str, dict[str, Json]], bool] | None,
        ledger: Ledger,
        cancel: CancelToken | None,
        record_arguments: bool,
        observer: Callable[[RunState, Transition], None] | None,
        background: Background | None = None,
        overlap: str | None = None,
        writes: RunWrites | None = None,
    ) -> None:
        self.spec = spec
        #: section 6: the run's writes (operation ledger, reconciliations, restart), when it has write tools
        self.writes = writes if writes is not None and writes.active else None
        self.s = RunState(config)
        self.tools = tools
        self.model_fn = model
        self.clock = clock
        self.t0 = clock()
        self.authorize = authorize
        self.ledger = ledger
        self.cancel_token = cancel
        self.record_arguments = record_arguments
        self.observer = observer
        self.overlap = overlap
        self.concurrent = config.max_concurrency > 1
        self.bg: Background | None = (background or ThreadBackground()) if self.concurrent else None
        self.ctx_events: dict[int, threading.Event] = {}
        self.seq = 0
        self._seq_lock = threading.Lock()
        self.path: list[str] = []
        self.round_answers_start = 0
        self.last_round_results: tuple[dict[str, Json], ...] = ()
        self._terminal_lock = threading.Lock()
        if self.writes is not None:
            self.writes.attach(self.emit)  # each operation transition is a run ledger event too (R27, R40)
        self.drive = _check_spec(spec)
        self.machine = Machine(
            model=self,
            states=[s.id for s in spec.states],
            initial=spec.initial.id,
            auto_transitions=False,
            send_event=False,
            model_attribute="state",
        )
        for t in spec.transitions:
            self.machine.add_transition(
                t.trigger,
                list(t.sources),
                t.dest,
                conditions=[partial(self._guard, g) for g in t.when],
                unless=[partial(self._guard, g) for g in t.unless],
                after=[partial(self._effect, t)],
            )

    # -- ledger --------------------------------------------------------------------------
    def emit(self, type_: str, via: str | None = None, **fields: Json) -> None:
        with self._seq_lock:
            self.seq += 1
            ev: dict[str, Json] = {
                "v": LEDGER_VERSION,
                "run": self.s.config.run_id,
                "seq": self.seq,
                "t": round(self.s.now, 6),
                "type": type_,
            }
            if via is not None:
                ev["via"] = via
                ev["step"] = len(self.path)  # the ordinal of the transition that produced the event
            ev.update(fields)
            self.ledger.emit(ev)

    def _call_fields(self, r: core.Request) -> dict[str, Json]:
        out: dict[str, Json] = {
            "index": r.index,
            "round": r.round,
            "callId": r.call_id if isinstance(r.call_id, str) else None,
            "tool": r.name if isinstance(r.name, str) else None,
            "argsDigest": digest(r.arguments) if isinstance(r.arguments, dict) else None,
        }
        if self.record_arguments:
            out["arguments"] = r.arguments if core.canonical_json(r.arguments) is not None else None
        return out

    def _proposal_item(self, call: Json) -> dict[str, Json]:
        """A proposed call as an input of the run: enough to recheck every decision but R4's
        schema check without the raw arguments, which appear only when they are recorded."""
        if not isinstance(call, dict):
            return {"callId": None, "callIdType": "missing", "tool": None, "argsDigest": None,
                    "argsObject": False, "item": "other"}
        cid, name, args = call.get("id"), call.get("name"), call.get("arguments")
        kind = ("missing" if "id" not in call else "null" if cid is None else "string" if isinstance(cid, str)
                else "boolean" if isinstance(cid, bool) else "number" if isinstance(cid, int | float)
                else "array" if isinstance(cid, list) else "object")
        item: dict[str, Json] = {
            "callId": cid if isinstance(cid, str) else None, "callIdType": kind,
            "tool": name if isinstance(name, str) else None,
            "argsDigest": digest(args) if isinstance(args, dict) else None,
            "argsObject": isinstance(args, dict) and core.is_json(args), "item": "object",
        }
        if self.record_arguments:
            item["arguments"] = args if core.canonical_json(args) is not None else None
        return item

    # -- guards and effects --------------------------------------------------------------
    def _guard(self, name: str) -> bool:
        if name == "authorized" and self.s.current.authorized is None:
            self._ask_authorization()
        return core.GUARDS[name](self.s)

    def _ask_authorization(self) -> None:
        r = self.s.current
        allowed = True
        if self.authorize is not None:
            assert isinstance(r.name, str) and isinstance(r.arguments, dict)
            try:
                allowed = bool(self.authorize(self.s.config.principal, r.name, dict(r.arguments)))
            except Exception:
                allowed = False  # a failing hook denies; it never opens the door
        core.set_authorization(self.s, allowed)

    def _effect(self, t: Transition) -> None:
        self.path.append(t.id)
        s = self.s
        name = t.effect
        committed = len(s.answers)
        if name == "ask_model":
            self._ask_model(t)
        elif name == "next_item":
            core.next_item(s)
            nxt = len(s.requests) if s.response is not None and s.cursor < len(s.response) else None
            self.emit("call_advanced", t.id, next=nxt)
        elif name == "end_round":
            self.last_round_results = tuple(a.to_json(s.config.run_id) for a in s.answers[self.round_answers_start:])
            self.round_answers_start = len(s.answers)
            core.end_round(s)
            self.emit("round_decided", t.id, round=s.round, answers=len(self.last_round_results))
        elif name == "answer_error":
            assert t.code is not None
            core.answer_error(s, t.code)
            self.emit("call_rejected", t.id, **self._call_fields(s.current), code=t.code)
        elif name == "answer_replay":
            core.answer_replay(s)
            r = s.current
            assert isinstance(r.call_id, str)
            self.emit("call_replayed", t.id, **self._call_fields(r), of=s.bindings[r.call_id].success_at)
        elif name == "bind_id":
            core.bind_id(s)
            self.emit("call_validated", t.id, **self._call_fields(s.current), binding="fresh")
        elif name == "keep_binding":
            self.emit("call_validated", t.id, **self._call_fields(s.current), binding="unresolved")
        elif name == "start_execution":
            ex = core.begin_execution(s)
            self._execute(t, ex)
        elif name == "retry_execution":
            core.begin_retry(s)
            self._execute(t, core._fx(s))
        elif name == "store_success":
            core.store_success(s)
        elif name == "answer_failure":
            core.answer_failure(s)
        elif name == "terminate":
            self._terminate(t)
        elif name == "wait":
            self.emit("run_waiting", t.id, inFlight=[e.request for e in core.in_flight(s)],
                      arrived=None if s.arrival is None else s.arrival[0])
        elif name == "land":
            self._land(t)
        elif name == "run_on":
            ex = core._fx(s)
            core.run_on(s)
            self.emit("execution_running", t.id, index=ex.request, ordinal=ex.ordinal, attempt=ex.attempts)
        else:  # pragma: no cover - _check_spec rules this out
            raise EngineError(f"no implementation for effect {name!r}")
        for a in s.answers[committed:]:  # answers are committed in request order (R11, R32)
            self._returned(a, t)
        if self.observer is not None:
            self.observer(s, t)

    def _returned(self, a: Answer, t: Transition) -> None:
        self.emit(
            "result_returned", t.id, index=a.index, callId=a.call_id, status=a.status, code=a.code,
            replayed=a.replayed, outputDigest=digest(a.output) if a.status == "ok" else None,
        )

    def _turn(self) -> Turn:
        return Turn(self.s.round + 1, self.last_round_results, self.s.config.run_id)

    def _ask_model(self, t: Transition) -> None:
        turn = self._turn()
        self.emit("model_requested", t.id, round=turn.round)
        try:
            response = self.model_fn(turn)
        except Exception:
            response = _MODEL_RAISED
        self._received(t, response)

    def _received(self, t: Transition, response: Json) -> None:
        s = self.s
        core.receive_response(s, response)
        if s.final is not None:
            self.emit("model_final", t.id, round=s.round, length=len(s.final))
            if self.writes is not None:  # R46: reconciled before the terminal state is chosen (T35)
                s.unreconciled = tuple(self.writes.reconcile())
        elif s.model_failed:
            self.emit("model_failed", t.id, round=s.round)
        else:
            assert s.response is not None
            self.emit("model_proposed", t.id, round=s.round, calls=len(s.response),
                      proposal=[self._proposal_item(c) for c in s.response])

    def _context(self, r: core.Request, ex: core.Execution) -> ToolContext:
        assert isinstance(r.call_id, str)
        s = self.s
        d = s.config.limits.deadline
        event = self.ctx_events.setdefault(r.index, threading.Event())
        return ToolContext(s.config.principal, r.call_id, s.config.run_id, r.index, ex.attempts,
                           None if d is None else max(0.0, d - s.now), event)

    def _execute(self, t: Transition, ex: core.Execution) -> None:
        s = self.s
        r = s.requests[ex.request]
        assert isinstance(r.call_id, str) and isinstance(r.name, str) and isinstance(r.arguments, dict)
        tl = self.tools[r.name]
        ctx = self._context(r, ex)
        self.emit("execution_started", t.id, **self._call_fields(r), ordinal=ex.ordinal, attempt=ex.attempts,
                  principal=ctx.principal)
        if self.concurrent:
            assert self.bg is not None
            args = dict(r.arguments)
            self.bg.submit(r.index, partial(_run_tool, tl, args, ctx), ctx.cancelled)
            return  # it runs on in the background (T31); its result lands later (T33)
        started = time.perf_counter()
        outcome = self._invoke(tl, dict(r.arguments), ctx, ex)
        if outcome is None:  # cancelled while the tool ran: the run ends; the result will be discarded
            return
        core.record_outcome(s, outcome)
        self._finished(t, ex, outcome, round((time.perf_counter() - started) * 1000, 3))

    def _finished(self, t: Transition, ex: core.Execution, outcome: Outcome, ms: float) -> None:
        r = self.s.requests[ex.request]
        self.emit(
            "execution_finished", t.id, index=r.index, callId=r.call_id, tool=r.name, ordinal=ex.ordinal,
            attempt=ex.attempts, outcome="ok" if outcome.ok else outcome.category, durationMs=ms,
            outputDigest=digest(outcome.output) if outcome.ok else None,
            **({} if outcome.charged else {"charged": False}),  # R45: a write that recorded no dispatch mark
        )

    def _land(self, t: Transition) -> None:
        s = self.s
        assert s.arrival is not None
        ms = self._arrival_ms
        core.land(s)
        ex = core._fx(s)
        assert ex.outcome is not None
        self._finished(t, ex, ex.outcome, ms)

    _arrival_ms: float = 0.0

    def _take(self, arrival: Arrival | None) -> None:
        """An arrival from the background becomes the environment's fact ``s.arrival``."""
        if arrival is not None:
            req, outcome, ms = arrival
            self.s.arrival = (req, outcome)
            self._arrival_ms = ms

    def _invoke(self, tl: Tool, arguments: dict[str, Json], ctx: ToolContext, ex: core.Execution) -> Outcome | None:
        if self.cancel_token is None:
            return _run_tool(tl, arguments, ctx)
        # Run the tool in a worker so that cancellation (or the deadline) can end the run while it
        # is still executing; whatever it returns afterwards is recorded as discarded (R26).
        box: dict[str, Outcome] = {}
        done = threading.Event()

        def work() -> None:
            box["o"] = _run_tool(tl, arguments, ctx)
            done.set()
            with self._terminal_lock:
                if self.s.terminal:
                    self._discard(ex, box["o"], "run already terminal")

        threading.Thread(target=work, name=f"loopspec-tool-{tl.name}", daemon=True).start()
        while True:
            if done.wait(0.005):
                with self._terminal_lock:
                    if not self.s.terminal:
                        return box["o"]
                return None
            if self.cancel_token is not None and self.cancel_token.cancelled:
                with self._terminal_lock:
                    if done.is_set() and not self.s.terminal:
                        return box["o"]
                    self._cancel_now()
                return None

    def _discard(self, ex: core.Execution, outcome: Outcome, reason: str) -> None:
        self.s.discarded += 1
        self.emit(
            "late_result_discarded", None, index=ex.request, ordinal=ex.ordinal, tool=ex.tool,
            outcome="ok" if outcome.ok else outcome.category, reason=reason,
        )

    def _terminate(self, t: Transition) -> None:
        s = self.s
        if t.escalates is not None:
            reason = core.escalation_stop_reason(s)
        else:
            assert t.stop_reason is not None
            reason = t.stop_reason
        status = self.spec.stop_reason(reason).status
        running = core.in_flight(s) if self.concurrent else []
        core.terminate(s, reason, status, escalated=t.escalates is not None)
        for ex in running:  # every execution still in flight is abandoned (R34, R35)
            if not ex.abandoned:
                continue
            self.emit("execution_abandoned", t.id, index=ex.request, ordinal=ex.ordinal, tool=ex.tool,
                      attempt=ex.attempts)
            self._abandon(ex)
        if self.writes is not None:  # R46: the end-of-run reconciliation is recorded before the terminal event
            self.writes.settle()
            self.writes.detach()
        self.emit(
            "run_terminal", t.id, status=s.status, stopReason=s.stop_reason, coverage=s.coverage,
            aborted=None if s.aborted is None else {"index": s.aborted[0], "code": s.aborted[1]},
            counters=self.counters(),
        )

    def _abandon(self, ex: core.Execution) -> None:
        ev = self.ctx_events.get(ex.request)
        if ev is not None:
            ev.set()
        self._abandon_running(ex)
        if self.s.arrival is not None and self.s.arrival[0] == ex.request:  # arrived, never landed
            outcome = self.s.arrival[1]
            self.s.arrival = None
            self._late(ex, outcome)

    def _abandon_running(self, ex: core.Execution) -> None:
        """The abandoned execution's work in the background: its result, when it comes, is discarded."""
        if self.bg is not None:
            self.bg.abandon(ex.request, partial(self._late, ex))

    def _late(self, ex: core.Execution, outcome: Outcome) -> None:
        self._discard(ex, outcome, "execution abandoned")

    def _cancel_now(self) -> None:
        if self.s.terminal:
            return
        s = self.s
        # A result already in hand but not yet answered is discarded with the run (R26): it must
        # neither become an answer nor vanish from the ledger.
        pending = (
            core._fx(s)
            if self.state == "executing" and s.executions and core._fx(s).outcome is not None  # type: ignore[attr-defined]
            else None
        )
        self.trigger("cancel")  # type: ignore[attr-defined]
        if pending is not None and pending.outcome is not None:
            self._discard(pending, pending.outcome, "run cancelled before the result was answered")

    def counters(self) -> dict[str, Json]:
        s = self.s
        return {
            "modelRequests": s.model_requests,
            "requests": len(s.requests),
            "executed": s.executed,
            "perTool": dict(sorted(s.per_tool.items())),
            "attempts": s.executed + s.retries,
            "retries": s.retries,
            "replays": s.replays,
            "rejections": s.rejections,
            "discarded": s.discarded,
        }

    # -- driving -------------------------------------------------------------------------
    def _started(self) -> None:
        cfg = self.s.config
        config: dict[str, Json] = {
            "mode": cfg.mode, "onLimit": cfg.on_limit, "principal": cfg.principal, "batch": cfg.batch,
            "limits": {
                "maxRounds": cfg.limits.max_rounds, "maxExecutions": cfg.limits.max_executions,
                "maxToolExecutions": cfg.limits.max_tool_executions, "maxRequests": cfg.limits.max_requests,
                "maxRetries": cfg.limits.max_retries, "deadline": cfg.limits.deadline,
            },
            "tools": [
                {"name": n, "inputSchema": t.schema.to_json(), "maxExecutions": cfg.tool_limits.get(n),
                 **({"annotations": dict(t.annotations)} if self.concurrent and t.annotations else {})}
                for n, t in self.tools.items()
            ],
            "specVersion": self.spec.version,
            "recordArguments": self.record_arguments,
        }
        if self.concurrent:
            config["concurrency"] = {"maxConcurrency": cfg.max_concurrency, "overlap": self.overlap,
                                     "barriers": sorted(cfg.barriers)}
        if self.writes is not None and self.writes.resuming:  # section 6 (R46): a restart, then the recovery
            self.emit("run_resumed", None, config=config, **self.writes.restart_facts())
            self.writes.recover()
            return
        self.emit("run_started", None, config=config)

    def _outcome(self) -> RunOutcome:
        s = self.s
        cfg = s.config
        return RunOutcome(
            run_id=cfg.run_id,
            status=s.status or "",
            stop_reason=s.stop_reason or "",
            coverage=s.coverage,
            answers=tuple(s.answers),
            executed=s.executed,
            executions=tuple(e.request for e in s.executions),
            aborted=s.aborted,
            counters=self.counters(),
            final=s.final if s.stop_reason == "FINAL_ANSWER" else None,
            transitions=tuple(self.path),
            ledger=self.ledger,
        )

    def _needs_arrival(self, state: str) -> str | None:
        """Section 5: the environment's question before this step — ``poll`` (has a result arrived
        before the next take-up?) or ``wait`` (the run waits for one) — or ``None``."""
        s = self.s
        if not self.concurrent or s.arrival is not None or not core.in_flight(s):
            return None
        if state == "proposed" and not core.GUARDS["take_up_blocked"](s):
            return "poll"
        if state == "waiting" and not core.GUARDS["deadline_passed"](s):
            return "wait"
        return None

    def _wait_for_result(self) -> None:
        """Block until a result arrives, the run is cancelled or its deadline passes (R35)."""
        assert self.bg is not None
        s = self.s
        d = s.config.limits.deadline
        while True:
            got = self.bg.wait(0.005 if self.cancel_token is not None or d is not None else 0.05)
            if got is not None:
                self._take(got)
                return
            if self.cancel_token is not None and self.cancel_token.cancelled:
                return
            if d is not None:
                s.now = self.clock() - self.t0
                if s.now >= d:
                    return

    def run(self) -> RunOutcome:
        s = self.s
        self._started()
        while True:
            with self._terminal_lock:
                if s.terminal:
                    break
                s.now = self.clock() - self.t0
                if self.cancel_token is not None and self.cancel_token.cancelled:
                    self._cancel_now()
                    continue
                state = self.state  # type: ignore[attr-defined]
                need = self._needs_arrival(state)
                if need == "poll":
                    assert self.bg is not None
                    self._take(self.bg.poll())
            if need == "wait":
                self._wait_for_result()
                with self._terminal_lock:
                    if self.cancel_token is not None and self.cancel_token.cancelled:
                        self._cancel_now()
                        continue
            with self._terminal_lock:
                self._admit(state)
            self._fire(state)
        return self._outcome()

    def _admit(self, state: str) -> None:
        """Before a step from ``proposed``: the next call is admitted unless the run waits (section 5)."""
        if state == "proposed" and not core.waits(self.s):
            core.admit_pending(self.s)

    def _fire(self, state: str) -> None:
        """The step from ``state``: its driving event; a spec that enables no transition is a gap."""
        trigger = self.drive[state]
        fired = self.trigger(trigger)  # type: ignore[attr-defined]
        if not fired and not self.s.terminal:
            raise EngineError(f"spec gap: no transition from {state!r} on {trigger!r} is enabled")


_MODEL_RAISED = object()


def _output_outcome(tl: Tool, output: Json) -> Outcome:
    output = tl.project(output)
    if core.canonical_json(output) is None:
        return Outcome.failure("INTERNAL_ERROR")  # the output contract: JSON only (R17)
    return Outcome.success(output)


def _run_tool(tl: Tool, arguments: dict[str, Json], ctx: ToolContext) -> Outcome:
    """Enter the tool. Exceptions become categories; their text never leaves this function."""
    try:
        output = tl.fn(arguments, ctx)
    except ToolFailure as f:
        return Outcome.failure(f.category)
    except WriteAnswer as a:
        return Outcome(False, None, a.code, charged=a.charged)
    except Exception:
        return Outcome.failure("INTERNAL_ERROR")
    if isinstance(output, Uncharged):
        o = _output_outcome(tl, output.output)
        return Outcome(o.ok, o.output, o.category, charged=False)
    return _output_outcome(tl, output)


# --------------------------------------------------------------------------------------------
# Public entry points
# --------------------------------------------------------------------------------------------


def _tool_map(tools: Sequence[Tool] | Mapping[str, Tool], *, allow_async: bool = False) -> dict[str, Tool]:
    items = list(tools.values()) if isinstance(tools, Mapping) else list(tools)
    out: dict[str, Tool] = {}
    for t in items:
        if not isinstance(t, Tool):
            raise TypeError(f"tools must be loopspec.Tool objects (see Tool.define / @tool), got {type(t).__name__}")
        if t.name in out:
            raise core.ToolDefinitionError(t.name, "", "registered twice")
        if t.is_async and not allow_async:
            raise TypeError(f"tool {t.name!r} is async: run it with arun_loop / arun_batch")
        out[t.name] = t
    return out


def _no_writes(tm: Mapping[str, Tool]) -> None:
    """Section 6 runs only in :func:`run_loop`: a write declared to another entry point would run without its
    operation ledger, so it is refused rather than run unprotected."""
    writes = sorted(n for n, t in tm.items() if t.write is not None)
    if writes:
        raise EngineError(f"write tools ({', '.join(writes)}) go through the operation ledger only in run_loop; "
                          "run_batch, arun_loop and arun_batch do not support them yet")


def default_concurrency(spec: Spec | None = None) -> tuple[int, str]:
    """``[defaults.concurrency]`` of loop.toml: (max_concurrency, overlap policy)."""
    c = (spec or load_spec()).concurrency
    return c.max_concurrency, c.default_overlap


def _concurrency(spec: Spec, tools: Mapping[str, Tool], max_concurrency: int | None,
                 overlap: str | None) -> tuple[int, str, frozenset[str]]:
    d_max, d_overlap = default_concurrency(spec)
    mc = d_max if max_concurrency is None else max_concurrency
    if isinstance(mc, bool) or not isinstance(mc, int) or mc < 1:
        raise ValueError(f"max_concurrency must be a positive integer, got {mc!r}")
    pol = d_overlap if overlap is None else overlap
    if pol not in core.OVERLAP_POLICIES:
        raise ValueError(f"overlap must be one of {core.OVERLAP_POLICIES}, got {pol!r}")
    barriers = frozenset(n for n, t in tools.items() if not core.tool_overlaps(t.annotations, pol))
    return mc, pol, barriers


def _batch_config(spec: Spec, tm: Mapping[str, Tool], budget: int, mode: str, principal: str, run_id: str | None,
                  max_concurrency: int | None, overlap: str | None) -> tuple[RunConfig, str]:
    """The run configuration of one batch (:func:`run_batch`, :func:`arun_batch`): ``budget`` is
    max_executions, the limit policy follows ``mode`` (R20); writes are refused."""
    _no_writes(tm)
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        raise ValueError(f"budget must be a non-negative integer, got {budget!r}")
    mc, pol, barriers = _concurrency(spec, tm, max_concurrency, overlap)
    config = RunConfig(
        schemas={n: t.schema for n, t in tm.items()},
        limits=Limits(max_executions=budget),
        mode=mode,
        on_limit="throw" if mode == "abort" else "error-result",
        principal=principal,
        run_id=run_id or f"batch-{uuid.uuid4().hex[:12]}",
        batch=True,
        max_concurrency=mc,
        barriers=barriers,
    )
    return config, pol


def _background(schedule: Schedule | None) -> Background | None:
    return ScriptedBackground(schedule) if schedule is not None else None


def run_batch(
    calls: Sequence[Json],
    *,
    tools: Sequence[Tool] | Mapping[str, Tool],
    budget: int,
    mode: str = "abort",
    principal: str = "anonymous",
    ledger: Ledger | None = None,
    run_id: str | None = None,
    spec: Spec | None = None,
    record_arguments: bool = False,
    observer: Callable[[RunState, Transition], None] | None = None,
    max_concurrency: int | None = None,
    overlap: str | None = None,
    schedule: Schedule | None = None,
) -> RunOutcome:
    """Answer one proposal of tool calls (a batch) under the spec.

    ``budget`` is max_executions; the limit policy follows ``mode`` (R20). Returns the outcome with
    the answers in request order, ``executed`` and ``aborted``. With ``max_concurrency`` > 1 the
    calls that may overlap (``overlap``, R30) execute concurrently (section 5); ``schedule`` picks
    the completion order (deterministic) instead of the threads' timing.
    """
    spec = spec or load_spec()
    tm = _tool_map(tools)
    config, pol = _batch_config(spec, tm, budget, mode, principal, run_id, max_concurrency, overlap)
    proposal = list(calls)
    run = _Run(
        spec, config, tm, lambda turn: proposal, clock=lambda: 0.0, authorize=None,
        ledger=ledger if ledger is not None else Ledger(), cancel=None, record_arguments=record_arguments,
        observer=observer, background=_background(schedule), overlap=pol,
    )
    return run.run()


def default_limits(spec: Spec | None = None) -> tuple[Limits, str, str]:
    """The loop defaults of ``[defaults.loop]`` in loop.toml: (limits, mode, on_limit)."""
    d = (spec or load_spec()).defaults["loop"]
    return (
        Limits(
            max_rounds=d.get("max_rounds"),
            max_executions=d.get("max_executions"),
            max_tool_executions=d.get("max_tool_executions"),
            max_requests=d.get("max_requests"),
            max_retries=d.get("max_retries", 0),
            deadline=d.get("deadline_seconds"),
        ),
        d["mode"],
        d["on_limit"],
    )


def _loop_config(spec: Spec, tm: Mapping[str, Tool], limits: Limits | None, mode: str | None, on_limit: str | None,
                 principal: str, run_id: str | None, max_concurrency: int | None,
                 overlap: str | None) -> tuple[RunConfig, str]:
    d_limits, d_mode, d_policy = default_limits(spec)
    mc, pol, barriers = _concurrency(spec, tm, max_concurrency, overlap)
    config = RunConfig(
        schemas={n: t.schema for n, t in tm.items()},
        limits=limits if limits is not None else d_limits,
        mode=mode or d_mode,
        on_limit=on_limit or d_policy,
        principal=principal,
        tool_limits={n: t.max_executions for n, t in tm.items() if t.max_executions is not None},
        run_id=run_id or f"run-{uuid.uuid4().hex[:12]}",
        max_concurrency=mc,
        barriers=barriers,
    )
    return config, pol


def _ledgers(ledger: Any, operation_ledger: Any, operations: Any, who: str) -> tuple[Ledger | None, Any]:
    """(the run ledger, the operation ledger) from ``run_loop``'s / ``resume``'s arguments. Until 0.2 an
    operation ledger was also taken as ``ledger=`` (a path, a URL or an OperationLedger) or ``operations=``:
    still accepted, with a DeprecationWarning."""
    ops = operation_ledger
    for name, value in (("operations", operations), ("ledger", ledger)):
        if value is None or (name == "ledger" and isinstance(value, Ledger)):
            continue
        if ops is not None:
            raise EngineError(f"{who}: the operation ledger is given twice (operation_ledger= and {name}=)")
        warnings.warn(f"{who}(..., {name}=<operation ledger>) is deprecated: pass it as operation_ledger= "
                      "(ledger= is the run ledger, a loopspec.Ledger)", DeprecationWarning, stacklevel=3)
        ops = value
    return (ledger if isinstance(ledger, Ledger) else None), ops


def run_loop(
    model: Callable[[Turn], Json],
    *,
    tools: Sequence[Tool] | Mapping[str, Tool],
    limits: Limits | None = None,
    mode: str | None = None,
    on_limit: str | None = None,
    principal: str = "anonymous",
    clock: Callable[[], float] = time.monotonic,
    authorize: Callable[[str, str, dict[str, Json]], bool] | None = None,
    cancel: CancelToken | None = None,
    ledger: Ledger | None = None,
    run_id: str | None = None,
    spec: Spec | None = None,
    record_arguments: bool = False,
    observer: Callable[[RunState, Transition], None] | None = None,
    max_concurrency: int | None = None,
    overlap: str | None = None,
    schedule: Schedule | None = None,
    operation_ledger: Any = None,
    operations: Any = None,
    _resuming: bool = False,
) -> RunOutcome:
    """Run the whole tool-calling loop with ``model`` until exactly one terminal state (R18–R26).

    ``ledger`` is the run ledger (:class:`Ledger`, R27): the events of the run. Write tools
    (``Tool.define(..., write=WriteTool(...), lookup=...)``, section 6) run through a durable
    **operation ledger**, ``operation_ledger``: a path (SQLite), a ``postgresql://`` URL or an
    ``OperationLedger`` object. Without one, writes use an in-memory operation ledger (nothing survives the
    process). After a crash, :func:`resume` continues the run. (Deprecated, for one release: an operation
    ledger given as ``ledger=`` or as ``operations=``; both warn with a DeprecationWarning.)

    ``model(turn)`` returns a list of calls (``{"id", "name", "arguments"}``) or
    ``{"final": "..."}``. Limits default to ``[defaults.loop]`` of the spec; ``clock`` is injected
    (seconds, monotonic); ``authorize(principal, tool, arguments)`` runs before every execution.
    ``max_concurrency`` > 1 runs the calls of a response concurrently (section 5: ``overlap`` says
    which may overlap, R30); ``schedule`` picks the completion order (see :data:`Schedule`).
    """
    spec = spec or load_spec()
    tm = _tool_map(tools)
    events, ops = _ledgers(ledger, operation_ledger, operations, "run_loop")
    config, pol = _loop_config(spec, tm, limits, mode, on_limit, principal, run_id, max_concurrency, overlap)
    from .writeloop import writes_for_run

    with writes_for_run(tm, ops, config, resuming=_resuming) as writes:
        run = _Run(
            spec, config, writes.tools, model, clock=clock, authorize=authorize,
            ledger=events if events is not None else Ledger(), cancel=cancel, record_arguments=record_arguments,
            observer=observer, background=_background(schedule), overlap=pol, writes=writes,
        )
        return writes.finish(run.run())


# --------------------------------------------------------------------------------------------
# The async engine: the same machine, with the I/O awaited between its steps
# --------------------------------------------------------------------------------------------

_NOTHING = object()


async def _arun_tool(tl: Tool, arguments: dict[str, Json], ctx: ToolContext) -> Outcome:
    """:func:`_run_tool` for the async engine: an async tool is awaited, a plain one runs in a
    worker thread. Cancellation (an abandoned execution, R35) propagates."""
    try:
        if tl.is_async:
            output = await tl.fn(arguments, ctx)  # type: ignore[misc]
        else:
            output = await asyncio.to_thread(tl.fn, arguments, ctx)
    except ToolFailure as f:
        return Outcome.failure(f.category)
    except asyncio.CancelledError:
        raise
    except Exception:
        return Outcome.failure("INTERNAL_ERROR")
    return _output_outcome(tl, output)


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class _ARun(_Run):
    """One run of ``arun_loop`` / ``arun_batch``. The machine, the guards and the effects are the
    sync engine's; what needs awaiting — the model, the authorization hook, a tool — is awaited by
    the driver *between* steps (the model and the hook before the step that uses their answer, a
    result before the step that lands it), so every step stays one synchronous transition. Every
    execution is a task of one :class:`asyncio.TaskGroup`: an abandoned one is cancelled, and the
    run returns only when every task has finished (structured concurrency)."""

    def __init__(self, *args: Any, schedule: Schedule | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bg = None
        self.schedule = schedule
        self.tg: asyncio.TaskGroup | None = None
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self.results: dict[int, tuple[Outcome, float]] = {}
        self.done: list[int] = []  # finished, not landed yet: in completion order
        self.wake = asyncio.Event()
        self.prefetched: Any = _NOTHING
        self.inline_t: Transition | None = None

    # -- I/O between steps ---------------------------------------------------------------
    def _ask_model(self, t: Transition) -> None:
        turn = self._turn()
        self.emit("model_requested", t.id, round=turn.round)
        response, self.prefetched = self.prefetched, _NOTHING
        assert response is not _NOTHING, "the model is asked before the step"
        self._received(t, response)

    async def _call_model(self) -> Any:
        try:
            return await _maybe_await(self.model_fn(self._turn()))
        except Exception:
            return _MODEL_RAISED

    async def _hook(self) -> None:
        r = self.s.current
        allowed = True
        if self.authorize is not None:
            assert isinstance(r.name, str) and isinstance(r.arguments, dict)
            try:
                allowed = bool(await _maybe_await(self.authorize(self.s.config.principal, r.name, dict(r.arguments))))
            except Exception:
                allowed = False
        core.set_authorization(self.s, allowed)

    def _would_fire(self, state: str) -> Transition | None:
        for tr in self.spec.group(state, self.drive[state]):
            if all(core.GUARDS[g](self.s) for g in tr.when) and not any(core.GUARDS[g](self.s) for g in tr.unless):
                return tr
        return None

    def _execute(self, t: Transition, ex: core.Execution) -> None:
        s = self.s
        r = s.requests[ex.request]
        assert isinstance(r.call_id, str) and isinstance(r.name, str) and isinstance(r.arguments, dict)
        tl = self.tools[r.name]
        ctx = self._context(r, ex)
        self.emit("execution_started", t.id, **self._call_fields(r), ordinal=ex.ordinal, attempt=ex.attempts,
                  principal=ctx.principal)
        assert self.tg is not None
        self.inline_t = t
        self.tasks[r.index] = self.tg.create_task(self._work(ex, tl, dict(r.arguments), ctx))

    async def _work(self, ex: core.Execution, tl: Tool, args: dict[str, Json], ctx: ToolContext) -> None:
        t0 = time.perf_counter()
        o = await _arun_tool(tl, args, ctx)
        if ex.abandoned:
            self._late(ex, o)
            return
        self.results[ex.request] = (o, round((time.perf_counter() - t0) * 1000, 3))
        self.done.append(ex.request)
        self.wake.set()

    def _abandon_running(self, ex: core.Execution) -> None:
        task = self.tasks.get(ex.request)
        if ex.request in self.results:  # finished, never landed
            o, _ = self.results.pop(ex.request)
            self.done.remove(ex.request)
            self._late(ex, o)
        elif task is not None and not task.done():
            task.cancel()

    def _cancelled(self) -> bool:
        return self.cancel_token is not None and self.cancel_token.cancelled

    async def _until(self, ready: Callable[[], bool]) -> bool:
        """Wait until ``ready()``, the run is cancelled or (``deadline``) the deadline passes;
        False when it stopped waiting without ``ready()``."""
        d = self.s.config.limits.deadline
        poll = self.cancel_token is not None or d is not None
        while not ready():
            self.wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), 0.005 if poll else None)
            if ready():
                return True
            if self._cancelled():
                return False
            if d is not None and self.concurrent:
                self.s.now = self.clock() - self.t0
                if self.s.now >= d:
                    return False
        return True

    async def _inline_result(self) -> None:
        """The sequential machine (R29): the execution just started is waited for before its step."""
        s = self.s
        ex = core._fx(s)
        if not await self._until(lambda: ex.request in self.results):
            return  # cancelled while the tool runs: the next step is the cancel
        o, ms = self.results.pop(ex.request)
        self.done.remove(ex.request)
        core.record_outcome(s, o)
        assert self.inline_t is not None
        self._finished(self.inline_t, ex, o, ms)

    async def _arrive(self, need: str) -> None:
        """Section 5: a result that has arrived (``poll``), or the next one (``wait``)."""
        s = self.s
        if self.schedule is not None:
            pending = tuple(e.request for e in core.in_flight(s))
            pick = self.schedule(pending, need == "wait")
            if pick is None:
                if need == "wait":
                    raise EngineError("the schedule chose no result while the run waits for one")
                return
            if pick not in pending:
                raise EngineError(f"the schedule chose request {pick!r}, which is not in flight")
            if not await self._until(lambda: pick in self.results):
                return
        else:
            if need == "poll" and not self.done:
                return
            if not await self._until(lambda: bool(self.done)):
                return
            pick = self.done[0]
        o, ms = self.results.pop(pick)
        self.done.remove(pick)
        s.arrival = (pick, o)
        self._arrival_ms = ms

    async def _before(self, state: str) -> None:
        s = self.s
        if state == "decided":
            tr = self._would_fire(state)
            if tr is not None and tr.effect == "ask_model":
                self.prefetched = await self._call_model()
        elif state == "validated" and s.current.authorized is None:
            await self._hook()
        elif state == "executing" and not self.concurrent and s.outcome is None and s.executions:
            await self._inline_result()
        else:
            need = self._needs_arrival(state)
            if need is not None:
                await self._arrive(need)

    async def arun(self) -> RunOutcome:
        s = self.s
        self._started()
        async with asyncio.TaskGroup() as tg:
            self.tg = tg
            while not s.terminal:
                s.now = self.clock() - self.t0
                if self._cancelled():
                    self._cancel_now()
                    continue
                state = self.state  # type: ignore[attr-defined]
                await self._before(state)
                if self._cancelled():
                    self._cancel_now()
                    continue
                self._admit(state)
                self._fire(state)
        return self._outcome()


async def arun_batch(
    calls: Sequence[Json],
    *,
    tools: Sequence[Tool] | Mapping[str, Tool],
    budget: int,
    mode: str = "abort",
    principal: str = "anonymous",
    ledger: Ledger | None = None,
    run_id: str | None = None,
    spec: Spec | None = None,
    record_arguments: bool = False,
    observer: Callable[[RunState, Transition], None] | None = None,
    max_concurrency: int | None = None,
    overlap: str | None = None,
    schedule: Schedule | None = None,
) -> RunOutcome:
    """:func:`run_batch` with async tools (coroutine functions; plain ones run in worker threads)."""
    spec = spec or load_spec()
    tm = _tool_map(tools, allow_async=True)
    config, pol = _batch_config(spec, tm, budget, mode, principal, run_id, max_concurrency, overlap)
    proposal = list(calls)
    run = _ARun(
        spec, config, tm, lambda turn: proposal, clock=lambda: 0.0, authorize=None,
        ledger=ledger if ledger is not None else Ledger(), cancel=None, record_arguments=record_arguments,
        observer=observer, overlap=pol, schedule=schedule,
    )
    return await run.arun()


async def arun_loop(
    model: Callable[[Turn], Any],
    *,
    tools: Sequence[Tool] | Mapping[str, Tool],
    limits: Limits | None = None,
    mode: str | None = None,
    on_limit: str | None = None,
    principal: str = "anonymous",
    clock: Callable[[], float] = time.monotonic,
    authorize: Callable[[str, str, dict[str, Json]], Any] | None = None,
    cancel: CancelToken | None = None,
    ledger: Ledger | None = None,
    run_id: str | None = None,
    spec: Spec | None = None,
    record_arguments: bool = False,
    observer: Callable[[RunState, Transition], None] | None = None,
    max_concurrency: int | None = None,
    overlap: str | None = None,
    schedule: Schedule | None = None,
) -> RunOutcome:
    """:func:`run_loop` for the async ecosystem: ``model`` and ``authorize`` may be coroutine
    functions, tools may be async; the calls of a response run as tasks of one
    :class:`asyncio.TaskGroup` (with ``max_concurrency`` > 1, section 5 of SPEC.md)."""
    spec = spec or load_spec()
    tm = _tool_map(tools, allow_async=True)
    _no_writes(tm)
    config, pol = _loop_config(spec, tm, limits, mode, on_limit, principal, run_id, max_concurrency, overlap)
    run = _ARun(
        spec, config, tm, model, clock=clock, authorize=authorize,
        ledger=ledger if ledger is not None else Ledger(), cancel=cancel, record_arguments=record_arguments,
        observer=observer, overlap=pol, schedule=schedule,
    )
    return await run.arun()
