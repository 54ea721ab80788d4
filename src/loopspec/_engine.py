"""The reference engine: a ``transitions`` machine built from ``spec/loop.toml``.

States, triggers and the order of guarded transitions come from the spec data; every guard is a
pure predicate of :mod:`loopspec._core`; every effect is the core's state update plus the I/O it
needs (asking the model, entering a tool, writing the ledger). There is no second hand-written
copy of the machine: change the spec and the engine follows (or refuses to build, naming what is
missing).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from transitions import Machine

from . import _core as core
from ._core import Answer, Limits, Outcome, RunConfig, RunState, ToolSchema
from ._ledger import LEDGER_VERSION, Ledger, digest
from ._spec import Spec, Transition, load_spec

__all__ = [
    "BatchOutcome",
    "CancelToken",
    "EngineError",
    "RunOutcome",
    "Tool",
    "ToolContext",
    "ToolFailure",
    "Turn",
    "run_batch",
    "run_loop",
    "tool",
]

Json = Any


class EngineError(RuntimeError):
    """The engine cannot be built or driven from this spec (a definition error, not a run outcome)."""


class ToolFailure(Exception):
    """Raised by a tool to fail with a category (R17). ``detail`` is for your logs only: it never
    reaches an answer, the ledger or the outcome."""

    def __init__(self, category: str, detail: str = "") -> None:
        if category not in core.FAILURE_CATEGORIES:
            raise ValueError(f"unknown failure category {category!r}; use one of {core.FAILURE_CATEGORIES}")
        self.category = category
        self.detail = detail
        super().__init__(category)


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool learns about the call besides its arguments. ``principal`` is the run's
    trusted identity, given by the application (R16), never read from the arguments."""

    principal: str
    call_id: str
    run_id: str
    request_index: int
    attempt: int


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

    @staticmethod
    def define(
        name: str,
        fn: Callable[[dict[str, Json], ToolContext], Json],
        input_schema: Mapping[str, Json] | None = None,
        *,
        fields: Sequence[str] | None = None,
        max_executions: int | None = None,
        description: str = "",
    ) -> Tool:
        """Register ``fn`` as tool ``name``; raises ToolDefinitionError for a schema outside R4."""
        if not isinstance(name, str) or not name:
            raise core.ToolDefinitionError(str(name), "", "a tool needs a non-empty string name")
        schema = core.parse_schema(dict(input_schema) if input_schema is not None else None, tool=name)
        return Tool(name, fn, schema, tuple(fields) if fields is not None else None, max_executions, description)

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
) -> Callable[[Callable[[dict[str, Json], ToolContext], Json]], Tool]:
    """Decorator form of :meth:`Tool.define`."""

    def wrap(fn: Callable[[dict[str, Json], ToolContext], Json]) -> Tool:
        return Tool.define(name or fn.__name__, fn, schema, fields=fields, max_executions=max_executions,
                           description=(fn.__doc__ or "").strip())

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
    ) -> None:
        self.spec = spec
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
        self.seq = 0
        self.path: list[str] = []
        self.round_answers_start = 0
        self.last_round_results: tuple[dict[str, Json], ...] = ()
        self._terminal_lock = threading.Lock()
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
            a = core.answer_error(s, t.code)
            self.emit("call_rejected", t.id, **self._call_fields(s.current), code=t.code)
            self._returned(a, t)
        elif name == "answer_replay":
            a = core.answer_replay(s)
            r = s.current
            assert isinstance(r.call_id, str)
            self.emit("call_replayed", t.id, **self._call_fields(r), of=s.bindings[r.call_id].success_at)
            self._returned(a, t)
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
            self._execute(t, s.executions[-1])
        elif name == "store_success":
            a = core.store_success(s)
            self._returned(a, t)
        elif name == "answer_failure":
            a = core.answer_failure(s)
            self._returned(a, t)
        elif name == "terminate":
            self._terminate(t)
        else:  # pragma: no cover - _check_spec rules this out
            raise EngineError(f"no implementation for effect {name!r}")
        if self.observer is not None:
            self.observer(s, t)

    def _returned(self, a: Answer, t: Transition) -> None:
        self.emit(
            "result_returned", t.id, index=a.index, callId=a.call_id, status=a.status, code=a.code,
            replayed=a.replayed, outputDigest=digest(a.output) if a.status == "ok" else None,
        )

    def _ask_model(self, t: Transition) -> None:
        s = self.s
        turn = Turn(s.round + 1, self.last_round_results, s.config.run_id)
        self.emit("model_requested", t.id, round=s.round + 1)
        try:
            response = self.model_fn(turn)
        except Exception:
            response = _MODEL_RAISED
        core.receive_response(s, response)
        if s.final is not None:
            self.emit("model_final", t.id, round=s.round, length=len(s.final))
        elif s.model_failed:
            self.emit("model_failed", t.id, round=s.round)
        else:
            assert s.response is not None
            self.emit("model_proposed", t.id, round=s.round, calls=len(s.response),
                      proposal=[self._proposal_item(c) for c in s.response])

    def _execute(self, t: Transition, ex: core.Execution) -> None:
        s = self.s
        r = s.current
        assert isinstance(r.call_id, str) and isinstance(r.name, str) and isinstance(r.arguments, dict)
        tl = self.tools[r.name]
        ctx = ToolContext(s.config.principal, r.call_id, s.config.run_id, r.index, ex.attempts)
        self.emit("execution_started", t.id, **self._call_fields(r), ordinal=ex.ordinal, attempt=ex.attempts,
                  principal=ctx.principal)
        started = time.perf_counter()
        outcome = self._invoke(tl, dict(r.arguments), ctx, ex)
        if outcome is None:  # cancelled while the tool ran: the run ends; the result will be discarded
            return
        core.record_outcome(s, outcome)
        self.emit(
            "execution_finished", t.id, index=r.index, callId=r.call_id, tool=r.name, ordinal=ex.ordinal,
            attempt=ex.attempts, outcome="ok" if outcome.ok else outcome.category,
            durationMs=round((time.perf_counter() - started) * 1000, 3),
            outputDigest=digest(outcome.output) if outcome.ok else None,
        )

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
        core.terminate(s, reason, status, escalated=t.escalates is not None)
        self.emit(
            "run_terminal", t.id, status=s.status, stopReason=s.stop_reason, coverage=s.coverage,
            aborted=None if s.aborted is None else {"index": s.aborted[0], "code": s.aborted[1]},
            counters=self.counters(),
        )

    def _cancel_now(self) -> None:
        if self.s.terminal:
            return
        s = self.s
        # A result already in hand but not yet answered is discarded with the run (R26): it must
        # neither become an answer nor vanish from the ledger.
        pending = (
            s.executions[-1]
            if self.state == "executing" and s.executions and s.executions[-1].outcome is not None  # type: ignore[attr-defined]
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
    def run(self) -> RunOutcome:
        s = self.s
        cfg = s.config
        self.emit(
            "run_started", None,
            config={
                "mode": cfg.mode, "onLimit": cfg.on_limit, "principal": cfg.principal, "batch": cfg.batch,
                "limits": {
                    "maxRounds": cfg.limits.max_rounds, "maxExecutions": cfg.limits.max_executions,
                    "maxToolExecutions": cfg.limits.max_tool_executions, "maxRequests": cfg.limits.max_requests,
                    "maxRetries": cfg.limits.max_retries, "deadline": cfg.limits.deadline,
                },
                "tools": [
                    {"name": n, "inputSchema": t.schema.to_json(), "maxExecutions": cfg.tool_limits.get(n)}
                    for n, t in self.tools.items()
                ],
                "specVersion": self.spec.version,
                "recordArguments": self.record_arguments,
            },
        )
        while True:
            with self._terminal_lock:
                if s.terminal:
                    break
                s.now = self.clock() - self.t0
                if self.cancel_token is not None and self.cancel_token.cancelled:
                    self._cancel_now()
                    continue
                state = self.state  # type: ignore[attr-defined]
                if state == "proposed":
                    core.admit_pending(s)
                trigger = self.drive[state]
            fired = self.trigger(trigger)  # type: ignore[attr-defined]
            if not fired and not s.terminal:
                raise EngineError(f"spec gap: no transition from {state!r} on {trigger!r} is enabled")
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


_MODEL_RAISED = object()


def _run_tool(tl: Tool, arguments: dict[str, Json], ctx: ToolContext) -> Outcome:
    """Enter the tool. Exceptions become categories; their text never leaves this function."""
    try:
        output = tl.fn(arguments, ctx)
    except ToolFailure as f:
        return Outcome.failure(f.category)
    except Exception:
        return Outcome.failure("INTERNAL_ERROR")
    output = tl.project(output)
    if core.canonical_json(output) is None:
        return Outcome.failure("INTERNAL_ERROR")  # the output contract: JSON only (R17)
    return Outcome.success(output)


# --------------------------------------------------------------------------------------------
# Public entry points
# --------------------------------------------------------------------------------------------


def _tool_map(tools: Sequence[Tool] | Mapping[str, Tool]) -> dict[str, Tool]:
    items = list(tools.values()) if isinstance(tools, Mapping) else list(tools)
    out: dict[str, Tool] = {}
    for t in items:
        if not isinstance(t, Tool):
            raise TypeError(f"tools must be loopspec.Tool objects (see Tool.define / @tool), got {type(t).__name__}")
        if t.name in out:
            raise core.ToolDefinitionError(t.name, "", "registered twice")
        out[t.name] = t
    return out


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
) -> RunOutcome:
    """Answer one proposal of tool calls (a batch) under the spec.

    ``budget`` is max_executions; the limit policy follows ``mode`` (R20). Returns the outcome with
    the answers in request order, ``executed`` and ``aborted``.
    """
    tm = _tool_map(tools)
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        raise ValueError(f"budget must be a non-negative integer, got {budget!r}")
    config = RunConfig(
        schemas={n: t.schema for n, t in tm.items()},
        limits=Limits(max_executions=budget),
        mode=mode,
        on_limit="throw" if mode == "abort" else "error-result",
        principal=principal,
        run_id=run_id or f"batch-{uuid.uuid4().hex[:12]}",
        batch=True,
    )
    proposal = list(calls)
    run = _Run(
        spec or load_spec(), config, tm, lambda turn: proposal, clock=lambda: 0.0, authorize=None,
        ledger=ledger if ledger is not None else Ledger(), cancel=None, record_arguments=record_arguments,
        observer=observer,
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
) -> RunOutcome:
    """Run the whole tool-calling loop with ``model`` until exactly one terminal state (R18–R26).

    ``model(turn)`` returns a list of calls (``{"id", "name", "arguments"}``) or
    ``{"final": "..."}``. Limits default to ``[defaults.loop]`` of the spec; ``clock`` is injected
    (seconds, monotonic); ``authorize(principal, tool, arguments)`` runs before every execution.
    """
    spec = spec or load_spec()
    tm = _tool_map(tools)
    d_limits, d_mode, d_policy = default_limits(spec)
    config = RunConfig(
        schemas={n: t.schema for n, t in tm.items()},
        limits=limits if limits is not None else d_limits,
        mode=mode or d_mode,
        on_limit=on_limit or d_policy,
        principal=principal,
        tool_limits={n: t.max_executions for n, t in tm.items() if t.max_executions is not None},
        run_id=run_id or f"run-{uuid.uuid4().hex[:12]}",
    )
    run = _Run(
        spec, config, tm, model, clock=clock, authorize=authorize,
        ledger=ledger if ledger is not None else Ledger(), cancel=cancel, record_arguments=record_arguments,
        observer=observer,
    )
    return run.run()
