"""Counterexamples: a violating path lifted to concrete core steps, written as data, replayed.

:func:`lift` turns the explorer's path (canonical compact states) back into concrete steps of the
real core: from the concrete initial RunState it follows, step by step, the concrete successor
whose canonical key is the path's next state, and at the end checks the violation with
``loopspec.core.rules.INVARIANTS`` on the whole concrete RunState. So a reported counterexample never
rests on the explorer's abstractions.

A :class:`Script` is the same run as the engine sees it: the calls the model proposes (per round),
each execution's outcomes, the authorization hook's answers, when the clock passes the deadline
and when the run is cancelled. :func:`replay_engine` runs it through ``run_batch`` / ``run_loop``
with scripted tools, model, hook, clock and cancel token; :func:`replay_core` runs it through the
checker's stepper. With the same semantics the two agree step by step (tests check it).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core import rules as core
from ..core.rules import RunState
from ..engine.base import ToolFailure
from ..engine.reference import CancelToken, Tool, ToolContext, run_batch, run_loop
from ..spec.loader import Transition, load_spec
from .bounds import Bounds, Scope
from .reference import Choice, ReferenceModel, check_invariants, enumerate_steps
from .semantics import CORE, LATE, Machine, Semantics, clone, installed, step, tables
from .universe import Config, Universe

__all__ = [
    "FORMAT",
    "Lifted",
    "ReplayResult",
    "Script",
    "Step",
    "counterexample_json",
    "lift",
    "replay",
    "replay_core",
    "replay_engine",
    "schedule",
]

Json = Any
FORMAT = "loopspec-counterexample/1"


@dataclass(frozen=True)
class Step:
    index: int
    transition: Transition
    choice: Choice
    before: Machine
    after: Machine
    violated: tuple[str, ...]


@dataclass(frozen=True)
class Lifted:
    """A counterexample as concrete steps of the core."""

    scope: Scope
    semantics: Semantics
    config: Config
    universe: Universe
    steps: tuple[Step, ...]

    @property
    def violated(self) -> tuple[str, ...]:
        return self.steps[-1].violated if self.steps else ()

    @property
    def path(self) -> list[str]:
        return [s.transition.id for s in self.steps]

    @property
    def calls(self) -> int:
        return len(self.steps[-1].after.s.requests) if self.steps else 0

    def script(self) -> Script:
        return Script.from_steps(self)


def lift(bounds: Bounds, scope: Scope, sem: Semantics, path: Sequence[tuple[Json, Choice, str]], last_key: Json,
         expected: Sequence[str] = ()) -> Lifted:
    """Follow ``path`` (from the explorer) with concrete core steps."""
    U = Universe.build(bounds, scope)
    first_key = path[0][0]
    ref: Any
    if U.concurrent:
        from .concurrent import ConcurrentModel

        ref = ConcurrentModel(U, sem)
        cfg_index = first_key[0]
    else:
        ref = ReferenceModel(U, sem)
        cfg_index = first_key[0][1]
    cfg = U.configs[cfg_index]
    m = Machine(tables().spec.initial.id, RunState(cfg.config))
    if ref.key(cfg_index, m) != first_key:
        raise RuntimeError("lift: the path does not start at an initial state")
    steps: list[Step] = []
    for i, (_, _, tid) in enumerate(path):
        want = path[i + 1][0] if i + 1 < len(path) else last_key
        last = i + 1 == len(path)
        found = None
        for sc in enumerate_steps(sem, cfg.env, m):
            if sc.transition is None or sc.transition.id != tid:
                continue
            bad = check_invariants(sc.machine.s)
            if last:
                if bad and (not expected or set(bad) == set(expected)):
                    found = (sc, bad)
                    break
                continue
            if not bad and ref.key(cfg_index, sc.machine) == want:
                found = (sc, bad)
                break
        if found is None and last and expected:
            # the explorer's verdict and the core's differ in which invariants: report the core's
            for sc in enumerate_steps(sem, cfg.env, m):
                if sc.transition is not None and sc.transition.id == tid and check_invariants(sc.machine.s):
                    found = (sc, check_invariants(sc.machine.s))
                    break
        if found is None:
            raise RuntimeError(f"lift: no concrete step {tid} reaches the path's state {i + 1}")
        sc, bad = found
        assert sc.transition is not None
        steps.append(Step(i, sc.transition, sc.choice, Machine(m.state, clone(m.s)),
                          Machine(sc.machine.state, clone(sc.machine.s)), tuple(bad)))
        m = sc.machine
    return Lifted(scope, sem, cfg, U, tuple(steps))


def schedule(lf: Lifted) -> list[str]:
    """Section 5: the run's interleaving in one line per event — each take-up, each start, each
    result as it arrives (the environment's choice of completion order), the clock passing the
    deadline, a cancellation, and the end. Data first: counterexample.json carries it, the text and
    the corpus summary print it."""
    out: list[str] = []
    for st in lf.steps:
        b, a = st.before.s, st.after.s
        for point, label in st.choice:
            if point == "tick" and label == "yes":
                out.append("deadline passes")
            elif point == "cancel" and label == "yes":
                out.append("cancel")
            elif point == "arrival" and label != "none":
                req, _, o = label[1:].partition(":")
                out.append(f"#{req} completes: {o}")
        if len(a.requests) > len(b.requests):
            r = a.requests[-1]
            out.append(f"take up #{r.index} {r.call_id} {r.name}")
        if len(a.executions) > len(b.executions):
            out.append(f"#{a.executions[-1].request} starts")
        for e in a.executions:
            old = next((x for x in b.executions if x.ordinal == e.ordinal), None)
            if old is not None and e.attempts > old.attempts:
                out.append(f"#{e.request} retries")
        if a.status is not None and b.status is None:
            out.append(f"ends {a.status}" + (f", aborted at #{a.aborted[0]} ({a.aborted[1]})" if a.aborted else "")
                       + (f", abandoning {', '.join(f'#{e.request}' for e in a.executions if e.abandoned)}"
                          if any(e.abandoned for e in a.executions) else ""))
    return out


# --------------------------------------------------------------------------------------------
# The engine's view of a run
# --------------------------------------------------------------------------------------------


@dataclass
class Script:
    """A run as the engine sees it (plain data: JSON round-trips)."""

    kind: str  # "batch" | "loop"
    config: dict[str, Json]
    tools: list[dict[str, Json]]
    #: per model request: a list of calls, {"final": text}, or "error" (the model raises)
    responses: list[Json] = field(default_factory=list)
    #: per execution (by ordinal, 1-based): the outcome of each attempt: "ok", a failure
    #: category, or "late" (the run is cancelled while the tool runs)
    outcomes: list[list[str]] = field(default_factory=list)
    authorize: list[bool] = field(default_factory=list)
    tick_at: int | None = None  # the step before which the clock reads the deadline
    cancel_at: int | None = None  # the step at which the run is cancelled
    #: section 5: the completion order — each time the run asks whether a result has arrived (before
    #: a take-up) or waits for one, the request whose result arrives (``None``: none has yet)
    schedule: list[int | None] | None = None

    def to_json(self) -> dict[str, Json]:
        out: dict[str, Json] = {"kind": self.kind, "config": self.config, "tools": self.tools}
        if self.kind == "batch":
            out["calls"] = self.responses[0] if self.responses else []
        else:
            out["responses"] = self.responses
            out["authorize"] = self.authorize
            out["tick_at"] = self.tick_at
            out["cancel_at"] = self.cancel_at
        out["outcomes"] = self.outcomes
        if self.schedule is not None:
            out["schedule"] = self.schedule
        return out

    @staticmethod
    def from_json(d: Mapping[str, Json]) -> Script:
        kind = d["kind"]
        responses = [d.get("calls", [])] if kind == "batch" else list(d.get("responses", []))
        sched = d.get("schedule")
        return Script(kind, dict(d["config"]), list(d["tools"]), responses, [list(x) for x in d.get("outcomes", [])],
                      list(d.get("authorize", [])), d.get("tick_at"), d.get("cancel_at"),
                      None if sched is None else list(sched))

    @staticmethod
    def from_steps(lf: Lifted) -> Script:
        U = lf.universe
        responses: list[Json] = []
        outcomes: list[list[str]] = []
        auth: list[bool] = []
        tick_at = cancel_at = None
        sched: list[int | None] = []
        for st in lf.steps:
            for point, label in st.choice:
                if point == "arrival":
                    if label == "none":
                        sched.append(None)
                        continue
                    req_s, _, o = label[1:].partition(":")
                    ex = next(e for e in st.before.s.executions if e.request == int(req_s))
                    while len(outcomes) < ex.ordinal:
                        outcomes.append([])
                    while len(outcomes[ex.ordinal - 1]) < ex.attempts:
                        outcomes[ex.ordinal - 1].append("ok")
                    outcomes[ex.ordinal - 1][ex.attempts - 1] = o
                    sched.append(int(req_s))
                    continue
                if point == "response":
                    responses.append(_response_json(U, label))
                elif point == "next" and label != "end":
                    responses[-1].append(U.calls[label])
                elif point == "outcome":
                    ex = st.after.s.executions[-1]
                    while len(outcomes) < ex.ordinal:
                        outcomes.append([])
                    outcomes[ex.ordinal - 1].append(label)
                elif point == "auth":
                    auth.append(label == "allow")
                elif point == "tick" and label == "yes":
                    tick_at = st.index
                elif point == "cancel" and label == "yes":
                    cancel_at = st.index
        if lf.scope.batch and not responses:
            responses.append([])
        limits = lf.config.config.tool_limits
        tools = [{"name": t.name, "input_schema": t.input_schema,
                  "max_executions": limits.get(t.name) if not lf.scope.batch else t.max_executions,
                  **({"annotations": {"readOnlyHint": True}} if t.read_only else {})}
                 for t in U.tools if t.allow_listed]
        concurrent = lf.config.config.max_concurrency > 1
        return Script("batch" if lf.scope.batch else "loop", lf.config.to_json(), tools, responses, outcomes,
                      auth, tick_at, cancel_at, sched if concurrent else None)


def _response_json(U: Universe, label: str) -> Json:
    if label == "final":
        return {"final": "done"}
    if label == "error":
        return "error"
    if label == "[]":
        return []
    return [U.calls[label]]


@dataclass(frozen=True)
class ReplayResult:
    """A replayed run: the transitions taken and the invariants broken after each."""

    transitions: tuple[str, ...]
    violated: tuple[tuple[str, ...], ...]
    error: str | None = None  # the run raised (a variant may drive the engine off its rails)
    status: str | None = None

    @property
    def first_violation(self) -> int | None:
        return next((i for i, v in enumerate(self.violated) if v), None)


class _Scripted:
    """The script's answers, handed out in the order the engine (or the stepper) asks."""

    def __init__(self, script: Script) -> None:
        self.s = script
        self.resp = 0
        self.auth = 0
        self.executions = 0
        self.attempt = 0
        self.arrivals = 0
        self.cancel = CancelToken()

    def response(self) -> Json:
        r = self.s.responses[self.resp] if self.resp < len(self.s.responses) else {"final": "done"}
        self.resp += 1
        return r

    def outcome(self, ordinal: int, attempt: int) -> str:
        outs = self.s.outcomes[ordinal - 1] if ordinal - 1 < len(self.s.outcomes) else []
        return outs[attempt - 1] if attempt - 1 < len(outs) else "ok"

    def authorized(self) -> bool:
        a = self.s.authorize[self.auth] if self.auth < len(self.s.authorize) else True
        self.auth += 1
        return a

    def arrival(self, pending: tuple[int, ...], must: bool) -> int | None:
        """Section 5: the next entry of the script's schedule (for the engine's ScriptedBackground
        and for the stepper's arrival question alike: both ask at the same points, in order)."""
        sched = self.s.schedule or []
        pick = sched[self.arrivals] if self.arrivals < len(sched) else None
        self.arrivals += 1
        if pick is not None and pick not in pending:
            pick = None  # the script was recorded for another core, which asked elsewhere
        return pending[0] if must and pick is None else pick


def _tools(script: Script, sc: _Scripted) -> list[Tool]:
    counter = {"n": 0}

    def make(name: str) -> Any:
        def fn(args: dict[str, Json], ctx: ToolContext) -> Json:
            if ctx.attempt == 1:
                counter["n"] += 1
            n = counter["n"]
            label = sc.outcome(n, ctx.attempt)
            if label == LATE:
                sc.cancel.cancel()
                time.sleep(0.05)  # the engine notices the cancellation while the tool still runs
                return {"execution": n}
            if label == "ok":
                return {"execution": n}
            raise ToolFailure(label, "scripted by the counterexample")

        return fn

    return [Tool.define(t["name"], make(t["name"]), t.get("input_schema"), max_executions=t.get("max_executions"),
                        annotations=t.get("annotations"))
            for t in script.tools]


def replay_engine(script: Script, sem: Semantics = CORE) -> ReplayResult:
    """Run the script through the reference engine (with ``sem`` installed in the core) and
    check every invariant after every transition."""
    sc = _Scripted(script)
    tools = _tools(script, sc)
    events: list[tuple[str, tuple[str, ...]]] = []

    def observer(s: RunState, t: Transition) -> None:
        events.append((t.id, check_invariants(clone(s))))

    cfg = script.config
    error = None
    out = None
    with installed(sem) if sem is not CORE else _nullctx():
        try:
            if script.kind == "batch":
                calls = script.responses[0] if script.responses else []
                out = run_batch(calls, tools=tools, budget=cfg["max_executions"], mode=cfg["mode"],
                                principal=cfg["principal"], run_id="verify", observer=observer)
            else:
                out = _run_loop(script, sc, tools, observer)
        except Exception as exc:  # a variant may crash the engine: that is a divergence too
            error = f"{type(exc).__name__}: {exc}"
    path = list(out.transitions) if out is not None else [t for t, _ in events]
    violated: list[tuple[str, ...]] = [()] * len(path)
    used: set[int] = set()
    for tid, bad in events:  # a nested transition (cancel inside an execution) reports first
        for i, p in enumerate(path):
            if p == tid and i not in used:
                used.add(i)
                violated[i] = bad
                break
    return ReplayResult(tuple(path), tuple(violated), error, out.status if out is not None else None)


def _run_loop(script: Script, sc: _Scripted, tools: list[Tool], observer: Any) -> Any:
    cfg = script.config
    lim = core.Limits(
        max_rounds=cfg["max_rounds"], max_executions=cfg["max_executions"], max_tool_executions=cfg["max_tool_executions"],
        max_requests=cfg["max_requests"], max_retries=cfg["max_retries"], deadline=cfg["deadline"],
    )
    clock_calls = {"n": -1}

    def clock() -> float:
        # call 0 is the run's start; call k+1 is read before step k (one per engine iteration)
        clock_calls["n"] += 1
        k = clock_calls["n"] - 1
        if script.cancel_at is not None and k == script.cancel_at:
            sc.cancel.cancel()
        if script.tick_at is not None and k >= script.tick_at and cfg["deadline"] is not None:
            return float(cfg["deadline"])
        return 0.0

    def model(turn: Any) -> Json:
        r = sc.response()
        if r == "error":
            raise RuntimeError("the scripted model fails")
        return r

    def authorize(principal: str, name: str, args: dict[str, Json]) -> bool:
        return sc.authorized()

    conc: dict[str, Any] = {}
    if cfg.get("max_concurrency", 1) > 1:
        conc = {"max_concurrency": cfg["max_concurrency"], "overlap": "read-only", "schedule": sc.arrival}
    return run_loop(model, tools=tools, limits=lim, mode=cfg["mode"], on_limit=cfg["on_limit"],
                    principal=cfg["principal"], clock=clock, authorize=authorize if cfg.get("authorize") else None,
                    cancel=sc.cancel if cfg.get("cancel") else None, run_id="verify", observer=observer, **conc)


class _nullctx:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *a: object) -> None:
        return None


class _ScriptOracle:
    """The checker's oracle driven by a Script, so the stepper runs what the engine runs."""

    def __init__(self, U: Universe, script: Script, sc: _Scripted) -> None:
        self.U = U
        self.script = script
        self.sc = sc
        self.index = 0  # the step being taken
        self.m: Machine | None = None
        self.pending: list[Json] = []
        self.labels = {json.dumps(v, sort_keys=True): k for k, v in U.calls.items()}

    def label(self, call: Json) -> str:
        try:
            return self.labels[json.dumps(call, sort_keys=True)]
        except KeyError:
            raise ValueError(f"replay: call {call!r} is outside the scope's alphabet") from None

    def choose(self, point: str, options: Sequence[str]) -> str:
        assert self.m is not None
        s = self.m.s
        if point == "cancel":
            return "yes" if self.script.cancel_at == self.index else "no"
        if point == "tick":
            return "yes" if self.script.tick_at is not None and self.index >= self.script.tick_at else "no"
        if point == "auth":
            return "allow" if self.sc.authorized() else "deny"
        if point == "response":
            r = self.sc.response()
            if r == "error":
                return "error"
            if isinstance(r, dict):
                return "final"
            self.pending = list(r[1:])
            return self.label(r[0]) if r else "[]"
        if point == "next":
            if not self.pending:
                return "end"
            return self.label(self.pending.pop(0))
        if point == "outcome":
            ex = s.executions[-1]
            return self.sc.outcome(ex.ordinal, ex.attempts)
        if point == "arrival":
            pending = tuple(e.request for e in core.in_flight(s))
            pick = self.sc.arrival(pending, "none" not in options)
            if pick is None:
                return "none"
            ex = next(e for e in s.executions if e.request == pick)
            return f"#{pick}:{self.sc.outcome(ex.ordinal, ex.attempts)}"
        raise ValueError(f"replay: unexpected question {point!r}")


def replay_core(bounds: Bounds, scope: Scope, script: Script, sem: Semantics = CORE, max_steps: int = 200) -> ReplayResult:
    """Run the script through the checker's stepper (the core's guards and effects) to the end."""
    U = Universe.build(bounds, scope)
    cfg = next((c for c in U.configs if c.to_json() == script.config), None)
    if cfg is None:
        raise ValueError("replay: the script's configuration is not one of the scope's")
    sc = _Scripted(script)
    o = _ScriptOracle(U, script, sc)
    m = Machine(tables().spec.initial.id, RunState(cfg.config))
    path: list[str] = []
    violated: list[tuple[str, ...]] = []
    error = None
    terminal = tables().terminal
    while m.state not in terminal and len(path) < max_steps:
        o.m = m
        o.index = len(path)
        try:
            tr = step(sem, cfg.env, m, o)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            break
        path.append(tr.id)
        violated.append(check_invariants(m.s))
    return ReplayResult(tuple(path), tuple(violated), error, m.s.status)


def replay(cx: Mapping[str, Json], sem: Semantics = CORE) -> ReplayResult:
    """Replay a counterexample document (``counterexample_json``) through the engine."""
    return replay_engine(Script.from_json(cx["replay"]), sem)


# --------------------------------------------------------------------------------------------
# As data
# --------------------------------------------------------------------------------------------


def counterexample_json(lf: Lifted) -> dict[str, Json]:
    spec = load_spec()
    inv_doc = {i.id: i.doc for i in spec.invariants}
    steps = []
    for st in lf.steps:
        t = st.transition
        before, after = st.before.s, st.after.s
        d: dict[str, Json] = {
            "step": st.index,
            "transition": t.id,
            "name": t.name,
            "from": st.before.state,
            "to": st.after.state,
            "trigger": "cancel" if t.trigger == "cancel" else t.trigger,
            "guards": {"when": list(t.when), "unless": list(t.unless)},
            "effect": t.effect,
            "rules": list(t.rules),
            "environment": {p: lab for p, lab in st.choice if not (p in ("cancel", "tick") and lab == "no")},
        }
        if t.code:
            d["code"] = t.code
        if len(after.requests) > len(before.requests):
            r = after.requests[-1]
            d["request"] = {"index": r.index, "id": r.call_id, "name": r.name, "arguments": r.arguments}
        if len(after.answers) > len(before.answers):
            d["answer"] = after.answers[-1].to_json("verify")
        if len(after.executions) > len(before.executions):
            e = after.executions[-1]
            d["execution"] = {"ordinal": e.ordinal, "request": e.request, "tool": e.tool, "principal": e.principal}
        if after.status is not None and before.status is None:
            d["terminal"] = {"status": after.status, "stop_reason": after.stop_reason, "aborted": after.aborted}
        if st.violated:
            d["violated"] = list(st.violated)
        steps.append(d)
    path = lf.path
    failed = len(path) - 1 if lf.violated else None
    return {
        "format": FORMAT,
        "semantics": lf.semantics.name,
        "overrides": list(lf.semantics.overrides),
        "scope": lf.scope.name,
        "bounds": lf.scope.describe(),
        "config": lf.config.to_json(),
        "calls": lf.calls,
        "violated": [{"id": i, "doc": inv_doc.get(i, "")} for i in lf.violated],
        "steps": steps,
        "trace": {"path": path, "failed": failed},
        "replay": lf.script().to_json(),
        **({"schedule": schedule(lf)} if lf.config.config.max_concurrency > 1 else {}),
    }
