"""The streaming ledger checker: one run's events, replayed through the reference core.

A :class:`RunChecker` holds the core's :class:`~loopspec.core.rules.RunState` of one run and walks the
spec machine as the events arrive, one transition (a ledger *step*) at a time:

1. the **inputs** of the step are taken from the ledger: the clock reading (``t``), the model's
   reply (``model_proposed`` / ``model_final`` / ``model_failed``), each tool outcome
   (``execution_finished``), a cancellation (T28), and — only where the ledger holds nothing to
   recompute them from — the schema check of digest-only arguments (R4) and the authorization
   hook's answer (R24);
2. the **observed** transition is derived from what the step's first event says (a rejection's code,
   a validation's binding, a result's status, a terminal event's stop reason), never from ``via``
   alone, which is cross-checked afterwards (R27);
3. the **expected** transition is the first enabled one of the state's driving group, guards
   evaluated by the core (``loopspec.core.rules.GUARDS``) on the state (R0);
4. when they agree, the core's own effect functions update the state and the step's events are
   compared field by field with it (indices, call ids, codes, replayed outputs by digest, ordinals,
   attempts, principal, counters, coverage, ...); when they do not, the divergence is classified
   (:mod:`.classify`) and the run's verdict is that first violation.

Each event costs O(1) work (plus the proposal's size for ``model_proposed``) and a run keeps O(its
distinct call ids) memory: lists of the core state are bounded (:mod:`.window`) and only the last
:data:`STEP_WINDOW` steps are kept for the explanation and the diagram.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from ...core import rules as core
from ...core.ledger import digest
from ...core.rules import Answer, Outcome, RunConfig, RunState
from ...judge.loop import LoopConfig, parse_loop_config
from ...judge.verdict import TraceError
from ...spec.loader import Transition
from .._divergence import Checks, Divergence, RunInputError, _has_bool
from .._tables import BINDING_GUARDS, CONCURRENT_EFFECT_EVENTS, EFFECT_EVENTS, Tables, compile_groups
from . import classify as _classify
from .classify import OPENERS as _OPENERS
from .window import Recent
from .writes import WriteTracker

Json = Any

#: How many of a run's most recent steps are kept for its explanation and diagram.
STEP_WINDOW: Final = 32

#: A run with more requests than this keeps only its newest requests, answers and executions
#: (bounded memory per run; invariants are then no longer evaluated on its state).
TRIM_AFTER: Final = 4096

#: The stand-in for a model reply that was neither calls nor a final answer (receive_response
#: treats any non-list, non-dict value as a model error).
_MODEL_FAILED: Final = None


# A step as kept in the window: [number, transition id, line, first event, last event] (a list, for
# speed; :func:`step_record` turns it into a StepRecord for the explanation).
_N, _TID, _LINE, _FIRST, _LAST = range(5)


@dataclass(frozen=True, slots=True)
class StepRecord:
    """What the explanation needs about one conforming step."""

    number: int
    tid: str
    line: int
    index: int | None
    detail: str


def step_record(raw: list[Any]) -> StepRecord:
    first, last = raw[_FIRST], raw[_LAST]
    idx = first.get("index") if isinstance(first.get("index"), int) else None
    return StepRecord(raw[_N], raw[_TID], raw[_LINE], idx, _detail(first, last))


def _cid(ev: Mapping[str, Json]) -> str:
    c = ev.get("callId")
    tool = ev.get("tool")
    return (repr(c) if isinstance(c, str) else "<no valid id>") + " " + (tool if isinstance(tool, str) else "<no name>")


def _detail(first: Mapping[str, Json], last: Mapping[str, Json]) -> str:
    """A short account of a step, read from its events (computed only for explanations)."""
    typ = first.get("type")
    if typ == "model_requested":
        t2 = last.get("type")
        if t2 == "model_proposed":
            return f"round {last.get('round')}: {last.get('calls')} call(s) proposed"
        return f"round {last.get('round')}: " + ("the final answer" if t2 == "model_final" else "the model failed")
    if typ == "call_validated":
        return f"#{first.get('index')} {_cid(first)}: binding {first.get('binding')}"
    if typ == "call_rejected":
        return f"#{first.get('index')} {_cid(first)} → {first.get('code')}"
    if typ == "call_replayed":
        return f"#{first.get('index')} {_cid(first)}: replay of #{first.get('of')} → ok (replayed)"
    if typ == "execution_started":
        att = first.get("attempt")
        what = f"execution {first.get('ordinal')}" + (f", attempt {att}" if att != 1 else "")
        out = (" (in the background)" if last is _BACKGROUND else f" → {last.get('outcome')}" if last is not first
               else " (cut off)")
        return f"#{first.get('index')} {_cid(first)}: {what}{out}"
    if typ == "result_returned":
        return f"#{first.get('index')} → " + ("ok" if first.get("status") == "ok" else str(first.get("code")))
    if typ == "call_advanced":
        nxt = first.get("next")
        return f"next: #{nxt}" if nxt is not None else "no call left in the round"
    if typ == "round_decided":
        return f"round {first.get('round')} done: {first.get('answers')} answer(s) go back to the model"
    if typ == "run_terminal":
        return f"{first.get('status')}/{first.get('stopReason')}, coverage {first.get('coverage')}"
    if typ == "run_waiting":
        arr = first.get("arrived")
        return f"waiting on {first.get('inFlight')}" + (f": #{arr}'s result has arrived" if arr is not None else "")
    if typ == "execution_running":
        return f"#{first.get('index')} execution {first.get('ordinal')} runs on in the background"
    if typ == "execution_finished":
        return f"#{first.get('index')} {_cid(first)}: execution {first.get('ordinal')} lands → {first.get('outcome')}"
    if typ == "result_held":
        return f"#{first.get('index')} → {first.get('status')}, held: an earlier request is still executing"
    if typ == "execution_abandoned":
        return f"#{first.get('index')} execution {first.get('ordinal')} abandoned"
    return str(typ)


def _guard_sources() -> tuple[dict[str, str], dict[str, object]]:
    """How the compiled guard groups evaluate each guard: the core's function on the state, except the
    binding guards (one binding class per request, as the core's gate computes it) and arguments_valid
    when only a digest was recorded (the ledger's report is the input)."""
    src: dict[str, str] = {}
    ns: dict[str, object] = {}
    for name, fn in core.GUARDS.items():
        ns[f"g_{name}"] = fn
        src[name] = f"g_{name}(s)"
    for name, cls in BINDING_GUARDS.items():
        src[name] = f"c.binding() == {cls!r}"
    src["arguments_valid"] = "(c.args_valid_input if c.args_assumed else g_arguments_valid(s))"
    src["authorized"] = "c.auth_input"
    return src, ns


_GUARD_SRC, _GUARD_NS = _guard_sources()
_COMPILED: dict[tuple[int, tuple[tuple[str, bool], ...]], dict[str, Any]] = {}


def _expected_fns(tables: Tables, rc: RunConfig | None = None,
                  const: tuple[tuple[str, bool], ...] | None = None) -> dict[str, Any]:
    """The compiled driving groups, with the guards the run's configuration fixes folded in (``const``:
    :func:`_constant_guards` of ``rc``, when the caller has it)."""
    if const is None:
        const = _constant_guards(rc) if rc is not None else ()
    key = (id(tables), const)
    fns = _COMPILED.get(key)
    if fns is None:
        fns = _COMPILED[key] = compile_groups(tables, _GUARD_SRC, _GUARD_NS, dict(const))
    return fns


def _constant_guards(rc: RunConfig) -> tuple[tuple[str, bool], ...]:
    """The guards whose value a configuration fixes for the whole run, as the core computes them:
    ``within(n, None)`` always holds, a deadline of None never passes, and a sequential run
    (max_concurrency 1) has nothing in the background (``take_up_blocked`` and ``runs_on`` test
    max_concurrency > 1 first; the oracle sets ``arrival`` only for a concurrent run)."""
    lim = rc.limits
    out = []
    if rc.max_concurrency <= 1:
        out += [("result_arrived", False), ("take_up_blocked", False), ("runs_on", False)]
    if lim.deadline is None:
        out.append(("deadline_passed", False))
    if lim.max_rounds is None:
        out.append(("rounds_left", True))
    if lim.max_requests is None:
        out.append(("request_admitted", True))
    if lim.max_executions is None:
        out.append(("budget_left", True))
    if lim.max_tool_executions is None and all(v is None for v in rc.tool_limits.values()):
        out.append(("tool_budget_left", True))
    return tuple(out)


_ID_TYPES: Final[Mapping[str, Json]] = {"null": None, "number": 0, "boolean": False, "array": [], "object": {}}


def run_config(raw: Json, run_id: str) -> tuple[RunConfig, LoopConfig]:
    """The core's RunConfig from a ``run_started`` config; raises TraceError naming the field."""
    if not isinstance(raw, dict):
        raise TraceError("config", "must be an object")
    for k in ("tools", "limits", "mode", "onLimit", "principal", "batch"):
        if k not in raw:
            raise TraceError(f"config.{k}", "missing")
    if not isinstance(raw["batch"], bool):
        raise TraceError("config.batch", "must be true or false")
    params = {k: raw[k] for k in ("tools", "limits", "mode", "onLimit", "principal")}
    lc = parse_loop_config(params)
    mc, barriers = _concurrency_config(raw)
    rc = RunConfig(schemas=lc.schemas, limits=lc.limits, mode=lc.mode, on_limit=lc.on_limit, principal=lc.principal,
                   tool_limits=dict(lc.tool_limits), run_id=run_id, batch=raw["batch"], max_concurrency=mc,
                   barriers=barriers)
    return rc, lc


def _concurrency_config(raw: Mapping[str, Json]) -> tuple[int, frozenset[str]]:
    """Section 5: ``max_concurrency`` and the barriers (R30), recomputed from each tool's recorded MCP
    hints (``annotations``; MCP's defaults where none are recorded) and the overlap policy. The
    recorded ``barriers`` list must agree with them: it is the engine's statement of what it enforced."""
    conc = raw.get("concurrency")
    if conc is None:
        return 1, frozenset()
    if not isinstance(conc, dict):
        raise TraceError("config.concurrency", "must be an object")
    mc = conc.get("maxConcurrency")
    if mc.__class__ is not int or mc < 2:
        raise TraceError("config.concurrency.maxConcurrency", f"expected an integer of 2 or more, got {mc!r}")
    pol = conc.get("overlap")
    if pol not in core.OVERLAP_POLICIES:
        raise TraceError("config.concurrency.overlap", f"expected one of {', '.join(core.OVERLAP_POLICIES)}, "
                                                       f"got {pol!r}")
    barriers = set()
    for k, t in enumerate(raw["tools"]):
        hints = t.get("annotations") if isinstance(t, dict) else None
        if hints is not None and (not isinstance(hints, dict) or any(
                h not in core.HINT_DEFAULTS or v.__class__ is not bool for h, v in hints.items())):
            raise TraceError(f"config.tools[{k}].annotations", "expected MCP hints (readOnlyHint, idempotentHint, "
                                                               "destructiveHint, openWorldHint) with true or false")
        if not core.tool_overlaps(hints, pol):
            barriers.add(t["name"])
    got = conc.get("barriers")
    if not isinstance(got, list) or sorted(map(str, got)) != sorted(barriers):
        raise TraceError("config.concurrency.barriers",
                         f"records {got!r}, but the tools' annotations under overlap {pol!r} make "
                         f"{sorted(barriers)!r} the barriers (R30)")
    return mc, frozenset(barriers)


_Const = tuple[tuple[str, bool], ...]
_CONFIGS: dict[bytes | str, tuple[RunConfig, LoopConfig, _Const]] = {}


def cached_run_config(raw: Json, run_id: str, key: bytes | str | None = None) -> tuple[RunConfig, LoopConfig]:
    """run_config, memoized on the configuration's text (runs of one service share it). ``key``: the
    raw text from ``"config":`` to the end of the line, when the caller has it (the same bytes mean the
    same configuration); else the canonical JSON text of the configuration."""
    rc, lc, _const = _cached_setup(raw, run_id, key)
    return rc, lc


def _cached_setup(raw: Json, run_id: str, key: bytes | str | None) -> tuple[RunConfig, LoopConfig, _Const]:
    """:func:`cached_run_config` and the configuration's :func:`_constant_guards` (memoized with it)."""
    if key is None:
        try:
            key = _json_dumps_sorted(raw)
        except (TypeError, ValueError):
            rc, lc = run_config(raw, run_id)
            return rc, lc, _constant_guards(rc)
    hit = _CONFIGS.get(key)
    if hit is None:
        rc, lc = run_config(raw, "")
        hit = (rc, lc, _constant_guards(rc))
        if len(_CONFIGS) >= 256:
            _CONFIGS.clear()
        _CONFIGS[key] = hit
    rc, lc, const = hit
    return _with_run_id(rc, run_id), lc, const


_RC_FIELDS: Final = tuple(f.name for f in dataclasses.fields(RunConfig) if f.name != "run_id")


def _with_run_id(rc: RunConfig, run_id: str) -> RunConfig:
    """``dataclasses.replace(rc, run_id=run_id)`` without re-validating a configuration already
    validated (a copy per run: the cached one is shared)."""
    new = object.__new__(RunConfig)
    for name in _RC_FIELDS:
        object.__setattr__(new, name, getattr(rc, name))
    object.__setattr__(new, "run_id", run_id)
    return new


def _json_dumps_sorted(v: Json) -> str:
    import json

    return json.dumps(v, sort_keys=True, separators=(",", ":"), allow_nan=False)


class RunChecker:
    """Checks the events of one run, in order. ``feed`` raises :class:`Divergence` at the first
    violation and :class:`RunInputError` when the events cannot be read as a ledger."""

    # slots: every attribute of the hot path is read and written per event (a slot is a fixed offset)
    __slots__ = ("_bcls", "_bkey", "abandon_buf", "abandoned", "args_assumed", "args_valid_input", "auth_input",
                 "checks", "concurrent", "config", "cur", "effect_events", "events", "exp_fns", "expect", "first_line",
                 "inflight", "items", "items_first", "items_round", "last_line", "late_buf", "loop_config", "pos",
                 "ran_on", "reply", "req_digest", "req_key", "ret_next", "round_answers", "round_start", "run_id", "s",
                 "seq", "state", "step", "steps", "t", "terminal", "terminal_line", "window_start", "writes")

    def __init__(self, tables: Tables, run_id: str, started: Mapping[str, Json], line: int,
                 config_key: bytes | None = None) -> None:
        self.t = tables
        self.run_id = run_id
        self.first_line = line
        self.last_line = line
        now = started.get("t")
        if (now.__class__ is not float and now.__class__ is not int) or now < 0:
            raise RunInputError(f"run_started.t: expected a number of seconds (0 or more), got {now!r}", line)
        if started.get("v") != 1 or started.get("v").__class__ is not int:
            raise RunInputError(f"ledger version {started.get('v')!r} is not supported (this oracle reads version 1)",
                                line)
        try:
            self.config, self.loop_config, const = _cached_setup(started.get("config"), run_id, config_key)
        except TraceError as exc:
            raise RunInputError(f"run_started.{exc.where}: {exc.message}", line) from None
        s = RunState(self.config)
        self.s = s
        self.exp_fns = _expected_fns(tables, const=const)
        self.state = tables.spec.initial.id
        self.seq = 1
        self.events = 1
        self.step = 0
        self.cur: Transition | None = None
        self.expect: tuple[frozenset[str], ...] = ()
        self.pos = 0
        self.items: list[Json] = []
        self.items_round = 0  # the round of the latest proposal
        self.items_first = 0  # the request index its first call gets
        self.reply = ""  # the kind of the model's latest reply: calls, final or failed
        self.round_start = 0
        self.round_answers = 0
        self.args_assumed = False
        self.args_valid_input = True
        self.req_digest: Json = None
        self.req_key = ""
        self.auth_input = True
        self._bkey = -1
        self._bcls = ""
        self.checks = Checks()
        self.steps: deque[list[Any]] = deque(maxlen=STEP_WINDOW)
        self.window_start = self.state  # the state before the oldest kept step
        self.terminal = False
        self.inflight: tuple[int, int] | None = None  # (request, ordinal) of an execution cut off by the end
        self.terminal_line = 0
        # section 5 (max_concurrency > 1): executions run in the background
        self.concurrent = self.config.max_concurrency > 1
        self.effect_events = CONCURRENT_EFFECT_EVENTS if self.concurrent else EFFECT_EVENTS
        self.ret_next = 0  # the answer the step's next result_returned must be (answers commit in request order)
        self.ran_on: core.Execution | None = None  # the execution T31 left running
        self.abandon_buf: list[tuple[Mapping[str, Json], int]] = []  # execution_abandoned events of the end step
        self.late_buf: list[tuple[Mapping[str, Json], int]] = []  # results discarded within the end step
        self.abandoned: set[tuple[int, int]] = set()  # (request, ordinal) abandoned, whose late result may come
        #: section 6: the run's write events, across its restarts (None while the run has recorded none)
        self.writes: WriteTracker | None = None

    # -- inputs the guards read --------------------------------------------------------------
    def binding(self) -> str:
        """The core's classification of the current request against its id's binding (R5-R7, R10),
        computed once per request. Content is compared by key: the core's canonical content key when
        the arguments are recorded, (tool, arguments digest) when only the digest is — the digest is
        of the canonical JSON, so the two agree."""
        s = self.s
        idx = len(s.requests)
        if idx != self._bkey:
            self._bkey = idx
            b = s.bindings.get(s.current.call_id)  # type: ignore[arg-type]
            self._bcls = core.classify_binding(b.key if b is not None else None,
                                               b is not None and b.success is not None, self.req_key)
        return self._bcls

    def _bind(self, exp: Transition) -> None:
        """core.bind_id, with the request's content key computed once (see :meth:`binding`)."""
        r = self.s.current
        self.s.bindings[r.call_id] = core.Binding(r.name, self.req_key, r.index)  # type: ignore[index,arg-type]

    def expected(self) -> Transition:
        exp = self.exp_fns[self.state](self, self.s)
        if exp is None:  # pragma: no cover - the loader rules this out (every group ends unguarded)
            raise RuntimeError(f"spec gap: nothing enabled in state {self.state!r}")
        return exp  # type: ignore[no-any-return]

    def expected_or_none(self) -> Transition | None:
        """The transition the spec takes next, when it needs no further input (else None)."""
        if self.terminal or self.state not in ("decided", "returned"):
            return None
        try:
            return self.expected()
        except Exception:
            return None

    # -- feeding events ----------------------------------------------------------------------
    def feed(self, ev: Mapping[str, Json], line: int) -> None:
        seq = ev["seq"]
        if seq != self.seq + 1 or seq.__class__ is not int:
            raise self._seq_problem(seq, line)
        now = ev["t"]
        if (now.__class__ is not float and now.__class__ is not int) or now < 0:
            raise RunInputError(f"t: expected a number of seconds (0 or more), got {now!r}", line)
        self.seq = seq
        self.events += 1
        self.last_line = line
        typ = ev["type"]
        wt = self.writes
        if typ == "write_recorded" or typ == "write_failed":  # section 6: between the loop's steps (R27, R40)
            if wt is None:
                wt = self.writes = WriteTracker()
            if typ == "write_recorded":
                wt.on_write(self, ev, line)
            else:
                wt.on_failed(self, ev, line)
            return
        if wt is not None:
            wt.before(self, ev, typ, line)
        step = ev.get("step")
        if self.concurrent and (typ == "execution_abandoned" or self.abandon_buf) and self._buffered(ev, typ, line):
            return
        # a step number that is not a positive int (0, 0.0, false, 2.0) never continues a step: it
        # goes to _begin, which refuses it (before any step, self.step is 0 and self.cur is None)
        if step != self.step or step.__class__ is not int or self.cur is None:
            if step is None:
                raise self._untransitioned(ev, typ, line)
            self._begin(ev, typ, line)
        else:
            expect = self.expect
            pos = self.pos
            if pos >= len(expect) or typ not in expect[pos]:
                raise _classify.unexpected_event(self, ev, typ, line, expect[pos] if pos < len(expect) else frozenset())
            self.pos = pos + 1
            self.steps[-1][_LAST] = ev
        _HANDLERS[typ](self, ev, line)

    def _buffered(self, ev: Mapping[str, Json], typ: str, line: int) -> bool:
        """Section 5, the end of a run with executions in flight: its step records each abandoned execution
        (execution_abandoned), perhaps a discarded result of one, then run_terminal, which names the
        transition. Keep the step's events until run_terminal opens it (True: the event is kept)."""
        buf = self.abandon_buf
        step = ev.get("step")
        if typ == "execution_abandoned":
            if step.__class__ is not int or step <= self.step or (buf and step != buf[0][0]["step"]):
                raise RunInputError(f"execution_abandoned has step {step!r}: the abandoned executions are recorded "
                                    "by the step that ends the run, before its run_terminal", line)
            buf.append((ev, line))
            return True
        if typ == "late_result_discarded" and step is None:
            got = (ev.get("index"), ev.get("ordinal"))
            if any((b.get("index"), b.get("ordinal")) == got for b, _ in buf) and all(
                    (x.get("index"), x.get("ordinal")) != got for x, _ in self.late_buf):
                self.late_buf.append((ev, line))
                return True
            raise _classify.after_terminal_divergence(self, ev, line, before_terminal=True)
        if typ == "run_terminal" and step == buf[0][0]["step"]:
            return False
        raise _classify.abandoned_while_running(self, buf[0][0], buf[0][1], ev, line)

    def _seq_problem(self, seq: Json, line: int) -> RunInputError:
        if seq.__class__ is int and seq > self.seq + 1:
            return RunInputError(f"seq {seq} follows seq {self.seq}: {seq - self.seq - 1} event(s) of run "
                                 f"{self.run_id!r} are missing (or out of order)", line)
        return RunInputError(f"seq {seq!r} after seq {self.seq}: the run's events must be in order, numbered "
                             "1, 2, 3, …", line)

    def _untransitioned(self, ev: Mapping[str, Json], typ: str, line: int) -> Exception:
        if typ == "run_started":
            return RunInputError(f"a second run_started for run {self.run_id!r} (the first is on line "
                                 f"{self.first_line}): run ids must be unique", line)
        if typ == "late_result_discarded":
            return _classify.after_terminal_divergence(self, ev, line, before_terminal=True)
        return RunInputError(f"{typ} event without a step: events produced by a transition carry via and step",
                             line)

    def _begin(self, ev: Mapping[str, Json], typ: str, line: int) -> None:
        t = self.t
        opener = _OPENERS.get(typ)
        obs = opener(self, ev) if opener is not None else None
        if self.pos < len(self.expect):
            missing = self.expect[self.pos]
            if not ("execution_finished" in missing and obs is not None and obs.id in t.cancel):
                raise _classify.incomplete_step(self, ev, typ, line, missing, obs)
        step = ev["step"]
        if step.__class__ is not int or step <= self.step:
            raise RunInputError(f"step {step!r} after step {self.step}: steps number a run's transitions 1, 2, 3, …",
                                line)
        s = self.s
        s.now = ev["t"]  # checked by feed
        if self.concurrent and step > self.step + 1 and self.state == "executing":
            self._held_steps(step, ev, line)
        state = self.state
        if obs is not None and obs.id in t.cancel:
            exp = obs
        else:
            if state == "proposed":
                if self.concurrent:
                    self._arrival_input(obs, ev, line)
                if s.final is not None and self.writes is not None:  # section 6 (R46): from the run's write events
                    s.unreconciled = self.writes.unknown()
                elif s.final is not None:  # no write events: whether a write is still unknown, as the ledger reports it
                    s.unreconciled = ("reported",) if obs is not None and obs.id == t.unreconciled_stop else ()
                    if s.unreconciled:
                        self.checks.unreconciled_assumed = True
                before = len(s.requests)
                if not self.concurrent or not core.waits(s):
                    core.admit_pending(s)
                if len(s.requests) != before:
                    self._admitted(obs)
            elif state == "waiting" and obs is not None and obs.effect == "land":
                self._landing_input(ev, line)
            elif state == "validated":
                self.checks.auth_assumed = True
                self.auth_input = obs is None or obs.id != t.auth_check
            exp = self.exp_fns[state](self, s)
            if obs is not exp:
                raise _classify.diverge(self, exp, obs, ev, typ, line)
        if ev.get("via") != exp.id:
            raise _classify.via_mismatch(self, exp, ev, line)
        if step != self.step + 1:
            raise _classify.step_gap(self, exp, ev, line)
        self.step = step
        self.cur = exp
        self.expect = self.effect_events[exp.effect]  # type: ignore[index]
        self.pos = 1
        steps = self.steps
        if len(steps) == STEP_WINDOW:
            self.window_start = t.by_id[steps[0][_TID]].dest
        steps.append([step, exp.id, line, ev, ev])
        apply = _APPLY.get(exp.effect)  # type: ignore[arg-type]
        if self.concurrent:
            if exp.effect in ("start_execution", "retry_execution"):
                steps[-1][_LAST] = _BACKGROUND
            committed = self.ret_next = len(s.answers)
            if apply is not None:
                apply(self, exp)
            new = len(s.answers) - committed
            if new or exp.effect in _ANSWERING:
                # the answers this step commits, in request order (R11, R32): each a result_returned
                self.expect = self.expect + (_RESULT,) * new
                if typ == "result_returned" and not new:
                    raise _classify.answer_out_of_order(self, exp, ev, line)
        elif apply is not None:
            apply(self, exp)
        self.state = exp.dest

    # -- section 5: inputs from the environment (which result arrives) and steps that record nothing --------
    def _held_steps(self, step: int, ev: Mapping[str, Json], line: int) -> None:
        """A landed result whose answer is held (an earlier request is still executing, R32) is answered by a
        step that records nothing: the step numbers skip it. Replay each such step (the finish group's
        answer, committing no answer); a skipped step that would have recorded something is a gap."""
        s = self.s
        while self.step + 1 < step and self.state == "executing":
            exp = self.expected()
            if exp.effect not in _ANSWERING or s.current.index == len(s.answers):
                return  # not silent: the step-gap check reports it
            self.step += 1
            self.cur = exp
            self.expect = ()
            self.pos = 0
            held = {"type": "result_held", "index": s.current.index,
                    "status": "ok" if exp.effect == "store_success" else "error"}
            if len(self.steps) == STEP_WINDOW:
                self.window_start = self.t.by_id[self.steps[0][_TID]].dest
            self.steps.append([self.step, exp.id, line, held, held])
            _APPLY[exp.effect](self, exp)  # type: ignore[index]
            self.state = exp.dest

    def _in_flight(self, k: Json) -> bool:
        return k.__class__ is int and any(e.request == k for e in core.in_flight(self.s))

    def _arrival_input(self, obs: Transition | None, ev: Mapping[str, Json], line: int) -> None:
        """At ``proposed``: whether a result has arrived is the environment's choice (R31); the ledger says it
        by landing one first (T29, run_waiting with ``arrived``)."""
        s = self.s
        s.arrival = None
        if obs is not None and obs.effect == "wait":
            k = ev["arrived"]
            if k is None:
                return
            if not self._in_flight(k):
                raise _classify.no_execution_in_flight(self, ev, line, k)
            s.arrival = (k, _PENDING)

    def _landing_input(self, ev: Mapping[str, Json], line: int) -> None:
        """At ``waiting``: the result that lands (T33) is the one the ledger's execution_finished names."""
        s = self.s
        k = ev["index"]
        if s.arrival is not None:
            if k != s.arrival[0] or k.__class__ is not int:
                raise self._mismatch(ev, line, "R27", "ledger-inconsistent", "index", s.arrival[0], k,
                                     f"Then the result that lands is the one the run took first, request "
                                     f"#{s.arrival[0]}'s (run_waiting.arrived, R27); but the ledger lands request "
                                     f"#{k!r}'s.")
            return
        if not self._in_flight(k):
            raise _classify.no_execution_in_flight(self, ev, line, k)
        s.arrival = (k, _PENDING)

    def _admitted(self, obs: Transition | None) -> None:
        """A call became the newest request: fix its inputs (digest, and R4's answer when only a
        digest was recorded)."""
        s = self.s
        item = self.items[s.cursor] if s.cursor < len(self.items) else None
        d = self.req_digest = item.get("argsDigest") if isinstance(item, dict) else None
        recorded = isinstance(item, dict) and "arguments" in item
        r = s.current
        self.args_assumed = not recorded and isinstance(r.arguments, dict)
        if self.args_assumed:
            self.checks.args_assumed = True
            self.args_valid_input = obs is None or obs.id != self.t.schema_check
            self.req_key = f"{r.name}\x00{d}"
        elif recorded:
            self.checks.args_verified = True
            self.req_key = core.content_key(r.name, r.arguments) if core.well_formed(  # type: ignore[arg-type]
                r.call_id, r.name, r.arguments) else ""
        if r.index >= TRIM_AFTER and s.requests.__class__ is list:
            self._bound_lists()

    def _bound_lists(self) -> None:
        """A long run: from now on keep only the newest requests, answers and executions."""
        s = self.s
        s.requests = Recent.of(s.requests)
        s.answers = Recent.of(s.answers, sticky=_limit_answer)
        s.executions = Recent.of(s.executions)

    # -- effects: the core's update for the effect of the transition that fired ----------------
    def _apply_end_round(self, exp: Transition) -> None:
        s = self.s
        self.round_answers = len(s.answers) - self.round_start
        self.round_start = len(s.answers)
        core.end_round(s)

    def _apply_answer_error(self, exp: Transition) -> None:
        core.answer_error(self.s, exp.code)  # type: ignore[arg-type]

    def _apply_terminate(self, exp: Transition) -> None:
        s = self.s
        if self.concurrent:
            flying = core.in_flight(s)
        elif self.state == "executing" and s.executions:
            ex = s.executions[-1]
            self.inflight = (ex.request, ex.ordinal)
        reason = core.escalation_stop_reason(s) if exp.escalates is not None else exp.stop_reason
        assert reason is not None
        core.terminate(s, reason, self.t.spec.stop_reason(reason).status, escalated=exp.escalates is not None)
        if self.concurrent:
            self._abandoned(exp, [e for e in flying if e.abandoned])

    def _abandoned(self, exp: Transition, gone: list[core.Execution]) -> None:
        """R35: the end step records every execution in flight as abandoned, and only those; a result of
        one discarded within the step counts as discarded (R26)."""
        want = sorted((e.request, e.ordinal, e.tool, e.attempts) for e in gone)
        got = []
        for ev, line in self.abandon_buf:
            got.append((ev.get("index"), ev.get("ordinal"), ev.get("tool"), ev.get("attempt")))
            if ev.get("via") != exp.id:
                raise _classify.via_mismatch(self, exp, ev, line)
        try:
            same = sorted(got) == want and not any(x.__class__ is bool for g in got for x in g)
        except TypeError:
            same = False
        if not same:
            raise _classify.abandonment_mismatch(self, exp, want, got)
        self.abandoned = {(e.request, e.ordinal) for e in gone}
        self.checks.signal_assumed = bool(gone)
        for ev, _ in self.late_buf:
            self.abandoned.discard((ev["index"], ev["ordinal"]))
            self.s.discarded += 1
        self.abandon_buf = []
        self.late_buf = []

    def counters(self) -> dict[str, Json]:
        """The run's counters as the engine reports them (the engine's own function, on this state: it
        reads only ``.s``)."""
        global _ENGINE_COUNTERS
        if _ENGINE_COUNTERS is None:
            from ...engine.reference import _Run

            _ENGINE_COUNTERS = _Run.counters
        return _ENGINE_COUNTERS(self)  # type: ignore[arg-type]

    def close_at_eof(self) -> Divergence:
        return _classify.not_terminated(self)

    def step_records(self) -> list[StepRecord]:
        return [step_record(r) for r in self.steps]

    def current_index(self) -> int | None:
        ev = self.steps[-1][_FIRST] if self.steps else None
        i = ev.get("index") if ev is not None else None
        return i if isinstance(i, int) and not isinstance(i, bool) else None

    # -- per-event checks --------------------------------------------------------------------
    def _mismatch(self, ev: Mapping[str, Json], line: int, rule: str, kind: str, field_: str, want: Json, got: Json,
                  then: str, hint: str | None = None) -> Divergence:
        assert self.cur is not None
        return Divergence(rule, kind, then, {field_: want}, {field_: got}, index=self.current_index(),
                          expected_tid=self.cur.id, observed_tid=self.cur.id, invariant_hint=hint, at_step=False,
                          event=ev, line=line)

    def on_model_requested(self, ev: Mapping[str, Json], line: int) -> None:
        want = self.s.round + 1
        if ev["round"] != want or ev["round"].__class__ is not int:
            raise self._mismatch(ev, line, "R18", "wrong-round", "round", want, ev["round"],
                                 f"Then the run asks the model for round {want} (R18); but the ledger records a "
                                 f"request for round {ev['round']!r}.")

    def on_model_reply(self, ev: Mapping[str, Json], line: int) -> None:
        typ = ev["type"]
        s = self.s
        want_round = s.round + 1
        if typ == "model_proposed":
            proposal = ev["proposal"]
            if proposal.__class__ is not list:
                raise RunInputError(f"model_proposed.proposal: expected a list, got {type(proposal).__name__}", line)
            if ev["calls"] != len(proposal) or ev["calls"].__class__ is not int:
                raise self._mismatch(ev, line, "R27", "ledger-inconsistent", "calls", len(proposal), ev["calls"],
                                     f"Then the ledger's call count is the proposal's length, {len(proposal)} (R27); "
                                     f"but it records calls = {ev['calls']!r}.")
            calls = [self._call_of(item, ev, line, k) for k, item in enumerate(proposal)]
            self.items_first = len(s.requests)
            core.receive_response(s, calls)
            self.items = proposal
            self.items_round = s.round
            self.reply = "calls"
        elif typ == "model_final":
            core.receive_response(s, {"final": ""})
            self.reply = "final"
        else:
            core.receive_response(s, _MODEL_FAILED)
            self.reply = "failed"
        self.round_start = len(s.answers)
        if ev["round"] != want_round or ev["round"].__class__ is not int:
            raise self._mismatch(ev, line, "R18", "wrong-round", "round", want_round, ev["round"],
                                 f"Then the model's reply belongs to round {want_round} (R18); but the ledger records "
                                 f"round {ev['round']!r}.")

    def _call_of(self, item: Json, ev: Mapping[str, Json], line: int, k: int) -> Json:
        """The proposed call as the core sees it. Without recorded arguments, the arguments of an
        object are a stand-in carrying their digest: content equality (R5-R7) is digest equality."""
        if item.__class__ is not dict:
            raise RunInputError(f"model_proposed.proposal[{k}]: expected an object", line)
        if item.get("item", "object") != "object":
            return "<not an object>"
        call: dict[str, Json] = {}
        kind = item.get("callIdType")
        cid = item.get("callId")
        if kind is None:
            kind = "string" if isinstance(cid, str) else "null"
        if kind == "string":
            if not isinstance(cid, str):
                raise RunInputError(f"model_proposed.proposal[{k}].callId: callIdType is string but callId is "
                                    f"{cid!r}", line)
            call["id"] = cid
        elif kind != "missing":
            call["id"] = _ID_TYPES.get(kind)
        call["name"] = item.get("tool")
        d = item.get("argsDigest")
        if "arguments" in item:
            args = item["arguments"]
            call["arguments"] = args
            obj = isinstance(args, dict) and core.is_json(args)
            if obj != bool(item.get("argsObject")) or (isinstance(args, dict) and digest(args) != d):
                raise Divergence(
                    "R27", "ledger-inconsistent",
                    f"Then the proposal records the arguments with their digest and shape (R27); but item {k} "
                    f"records arguments {_short(args)} with argsDigest {d!r} and argsObject "
                    f"{item.get('argsObject')!r}, which do not match them.",
                    {"argsDigest": digest(args) if isinstance(args, dict) else None, "argsObject": obj},
                    {"argsDigest": d, "argsObject": item.get("argsObject")},
                    expected_tid=self.cur.id if self.cur else None, observed_tid=self.cur.id if self.cur else None,
                    at_step=False, event=ev, line=line)
        elif item.get("argsObject"):
            if not isinstance(d, str):
                raise RunInputError(f"model_proposed.proposal[{k}]: argsObject is true but argsDigest is {d!r}", line)
            call["arguments"] = {"\x00digest": d}
        else:
            call["arguments"] = None
        return call

    def _check_call_fields(self, ev: Mapping[str, Json], line: int) -> None:
        r = self.s.current
        if ev["index"] != r.index or ev["index"].__class__ is not int:
            raise self._mismatch(ev, line, "R11", "requests-out-of-order", "index", r.index, ev["index"],
                                 f"Then the call at position {self.s.cursor} of round {r.round} is request #{r.index} "
                                 f"(requests are numbered in arrival order, R11); but the ledger records it as "
                                 f"#{ev['index']!r}.", hint="INV-ONE-ANSWER-IN-ORDER")
        cid = r.call_id
        name = r.name
        want = (r.round, cid if cid.__class__ is str else None, name if name.__class__ is str else None,
                self.req_digest if self.s.focus is None else _request_digest(r))
        got = (ev["round"], ev["callId"], ev["tool"], ev["argsDigest"])
        if got != want or got[0].__class__ is not int:
            names = ("round", "callId", "tool", "argsDigest")
            k = _first_diff(got, want)
            raise self._mismatch(ev, line, "R27", "ledger-inconsistent", names[k], want[k], got[k],
                                 f"Then {ev['type']} describes request #{r.index}, the call proposed at position "
                                 f"{self.s.cursor} of round {r.round} ({names[k]} {want[k]!r}, R27); but it records "
                                 f"{names[k]} {got[k]!r}.")

    def on_call(self, ev: Mapping[str, Json], line: int) -> None:
        self._check_call_fields(ev, line)

    def on_call_replayed(self, ev: Mapping[str, Json], line: int) -> None:
        self._check_call_fields(ev, line)
        r = self.s.current
        at = self.s.bindings[r.call_id].success_at  # type: ignore[index]
        if ev["of"] != at or ev["of"].__class__ is not int:
            raise self._mismatch(ev, line, "R6", "replay-of-wrong-request", "of", at, ev["of"],
                                 f"Then request #{r.index} replays the stored success of id {r.call_id!r}, produced "
                                 f"by request #{at} (R6); but the ledger says it replays #{ev['of']!r}.",
                                 hint="INV-NO-CACHED-FAILURE")

    def on_execution_started(self, ev: Mapping[str, Json], line: int) -> None:
        self._check_call_fields(ev, line)
        ex = core._fx(self.s)
        if ev["ordinal"] != ex.ordinal or ev["ordinal"].__class__ is not int:
            raise self._mismatch(ev, line, "R12", "executions-miscounted", "ordinal", ex.ordinal, ev["ordinal"],
                                 f"Then this is execution {ex.ordinal} of the run (executions started are counted "
                                 f"one by one, R12); but the ledger numbers it {ev['ordinal']!r}.",
                                 hint="INV-EXEC-ACCOUNTING")
        if ev["attempt"] != ex.attempts or ev["attempt"].__class__ is not int:
            raise self._mismatch(ev, line, "R23", "attempts-miscounted", "attempt", ex.attempts, ev["attempt"],
                                 f"Then this is attempt {ex.attempts} of execution {ex.ordinal} (R23); but the ledger "
                                 f"records attempt {ev['attempt']!r}.", hint="INV-RETRY-BUDGET")
        p = ev.get("principal", _ABSENT)
        if p is _ABSENT:
            self.checks.principal_missing = True
        elif p != self.config.principal:
            raise self._mismatch(ev, line, "R16", "untrusted-principal", "principal", self.config.principal, p,
                                 f"Then every execution receives the run's trusted principal "
                                 f"{self.config.principal!r} in its context, whatever the arguments say (R16); "
                                 f"but execution {ex.ordinal} (request #{ex.request}) received {p!r}.",
                                 hint="INV-TRUSTED-PRINCIPAL")

    def on_execution_finished(self, ev: Mapping[str, Json], line: int) -> None:
        s = self.s
        ex = core._fx(s)
        got = (ev["index"], ev["callId"], ev["tool"], ev["ordinal"], ev["attempt"])
        want = (ex.request, s.current.call_id, ex.tool, ex.ordinal, ex.attempts)
        if got != want or _has_bool(got):
            names = ("index", "callId", "tool", "ordinal", "attempt")
            k = _first_diff(got, want)
            raise self._mismatch(ev, line, "R27", "ledger-inconsistent", names[k], want[k], got[k],
                                 f"Then execution_finished closes the execution just started ({names[k]} "
                                 f"{want[k]!r}, R27); but it records {names[k]} {got[k]!r}.")
        out = ev["outcome"]
        charged = ev.get("charged", True)  # section 6 (R45): false for a write that recorded no dispatch mark
        if charged.__class__ is not bool:
            raise RunInputError(f"execution_finished.charged: expected true or false, got {charged!r}", line)
        if out == "ok":
            d = ev["outputDigest"]
            if d.__class__ is not str:
                raise RunInputError(f"execution_finished.outputDigest: an ok outcome needs a digest, got {d!r}", line)
            core.record_outcome(s, Outcome(True, d, None, charged))
        elif out in core.FAILURE_CATEGORIES or out == "OUTCOME_UNKNOWN" or (out == "BUDGET_EXHAUSTED" and not charged):
            # section 6: a write's unknown outcome (R42), its refusal by the run's dispatch budget (R45)
            if ev["outputDigest"] is not None:
                raise self._mismatch(ev, line, "R27", "ledger-inconsistent", "outputDigest", None, ev["outputDigest"],
                                     f"Then a failed execution ({out}) has no output (R10, R27); but the ledger "
                                     f"records outputDigest {ev['outputDigest']!r}.")
            core.record_outcome(s, Outcome(False, None, out, charged))
        else:
            raise RunInputError(f"execution_finished.outcome: expected ok, one of {', '.join(core.FAILURE_CATEGORIES)}"
                                f", OUTCOME_UNKNOWN or (uncharged) BUDGET_EXHAUSTED, got {out!r}", line)

    def on_result(self, ev: Mapping[str, Json], line: int) -> None:
        if self.concurrent:
            a: Answer = self.s.answers[self.ret_next]
            self.ret_next += 1
        else:
            a = self.s.answers[-1]
        want_digest = a.output if a.status == "ok" else None
        if (ev["index"], ev["callId"], ev["status"], ev["code"], ev["replayed"], ev["outputDigest"]) != (
                a.index, a.call_id, a.status, a.code, a.replayed, want_digest) or ev["index"].__class__ is not int \
                or ev["replayed"].__class__ is not bool:
            raise _classify.result_mismatch(self, ev, line, a, want_digest)

    def on_run_waiting(self, ev: Mapping[str, Json], line: int) -> None:
        want = sorted(e.request for e in core.in_flight(self.s))
        got = ev["inFlight"]
        if not isinstance(got, list) or sorted(got, key=repr) != want or any(x.__class__ is not int for x in got):
            raise self._mismatch(ev, line, "R27", "ledger-inconsistent", "inFlight", want, got,
                                 f"Then the run waits with the executions of {_requests(want)} in flight (R27); but "
                                 f"the ledger records inFlight = {got!r}.", hint="INV-CONCURRENCY-BOUND")

    def on_execution_running(self, ev: Mapping[str, Json], line: int) -> None:
        ex = self.ran_on
        assert ex is not None
        got = (ev["index"], ev["ordinal"], ev["attempt"])
        want = (ex.request, ex.ordinal, ex.attempts)
        if got != want or _has_bool(got):
            names = ("index", "ordinal", "attempt")
            k = _first_diff(got, want)
            raise self._mismatch(ev, line, "R27", "ledger-inconsistent", names[k], want[k], got[k],
                                 f"Then execution_running names the execution just started ({names[k]} {want[k]!r}, "
                                 f"R27); but it records {names[k]} {got[k]!r}.")

    def _apply_run_on(self, exp: Transition) -> None:
        self.ran_on = core._fx(self.s)
        core.run_on(self.s)

    def on_call_advanced(self, ev: Mapping[str, Json], line: int) -> None:
        s = self.s
        want = len(s.requests) if s.response is not None and s.cursor < len(s.response) else None
        if ev["next"] != want or ev["next"].__class__ is bool:
            raise self._mismatch(ev, line, "R11", "wrong-next-request", "next", want, ev["next"],
                                 f"Then the next request is {'#' + str(want) if want is not None else 'none (the round is done)'}"
                                 f" (R11); but the ledger records next = {ev['next']!r}.",
                                 hint="INV-ONE-ANSWER-IN-ORDER")

    def on_round_decided(self, ev: Mapping[str, Json], line: int) -> None:
        s = self.s
        if (ev["round"], ev["answers"]) != (s.round, self.round_answers) or _has_bool((ev["round"], ev["answers"])):
            f = "round" if ev["round"] != s.round else "answers"
            want = s.round if f == "round" else self.round_answers
            raise self._mismatch(ev, line, "R18", "wrong-round-summary", f, want, ev[f],
                                 f"Then round {s.round} closes with its {self.round_answers} answer(s), all of which "
                                 f"go back to the model (R18); but the ledger records {f} = {ev[f]!r}.",
                                 hint="INV-ONE-ANSWER-IN-ORDER")

    def on_terminal(self, ev: Mapping[str, Json], line: int) -> None:
        s = self.s
        aborted = None if s.aborted is None else {"index": s.aborted[0], "code": s.aborted[1]}
        want = {"status": s.status, "stopReason": s.stop_reason, "coverage": s.coverage, "aborted": aborted,
                "counters": self.counters()}
        for k, v in want.items():
            if ev[k] != v or (k in ("aborted", "counters") and _bool_inside(ev[k])):
                raise _classify.terminal_mismatch(self, ev, line, k, v)
        self.terminal = True
        self.terminal_line = line

    # -- results -----------------------------------------------------------------------------
    def summary(self) -> dict[str, Json]:
        s = self.s
        return {
            "status": s.status, "stopReason": s.stop_reason, "coverage": s.coverage if s.status else None,
            "executed": s.executed, "requests": len(s.requests), "rounds": s.model_requests, "steps": self.step,
        }


def _request_digest(r: core.Request) -> Json:
    """The recorded digest of a request's arguments (a retry of a landed result, section 5)."""
    a = r.arguments
    if a.__class__ is dict and "\x00digest" in a:  # type: ignore[operator]
        return a["\x00digest"]  # type: ignore[index]
    return digest(a) if isinstance(a, dict) else None


def _first_diff(got: tuple[Any, ...], want: tuple[Any, ...]) -> int:
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if g != w or (g.__class__ is bool) != (w.__class__ is bool):
            return i
    return 0


def _bool_inside(v: Json) -> bool:
    """A JSON true/false among an object's values (counts, indices: never booleans)."""
    if v.__class__ is dict:
        for x in v.values():
            if x.__class__ is bool or (x.__class__ is dict and _bool_inside(x)):
                return True
    return False


def _limit_answer(a: Answer) -> bool:
    return a.code is not None and core.code_kind(a.code) == "limit"


def _one(tables: Tables, effect: str) -> Transition:
    return tables.by_id[tables.by_effect[effect][0]]


_ABSENT: Final = object()
_ENGINE_COUNTERS: Callable[[Any], dict[str, Json]] | None = None


def _short(v: Json, n: int = 40) -> str:
    from ...support.text import compact

    try:
        return compact(v, n)
    except (TypeError, ValueError):
        return repr(v)[:n]


_HANDLERS: Final[Mapping[str, Callable[[RunChecker, Mapping[str, Json], int], None]]] = {
    "model_requested": RunChecker.on_model_requested,
    "model_proposed": RunChecker.on_model_reply,
    "model_final": RunChecker.on_model_reply,
    "model_failed": RunChecker.on_model_reply,
    "call_rejected": RunChecker.on_call,
    "call_validated": RunChecker.on_call,
    "call_replayed": RunChecker.on_call_replayed,
    "execution_started": RunChecker.on_execution_started,
    "execution_finished": RunChecker.on_execution_finished,
    "result_returned": RunChecker.on_result,
    "call_advanced": RunChecker.on_call_advanced,
    "round_decided": RunChecker.on_round_decided,
    "run_terminal": RunChecker.on_terminal,
    "run_waiting": RunChecker.on_run_waiting,
    "execution_running": RunChecker.on_execution_running,
}

#: the effects whose step answers the request in focus (section 5: the answer may be held, R32)
_ANSWERING: Final = frozenset({"store_success", "answer_failure", "answer_error", "answer_replay"})
_RESULT: Final = frozenset({"result_returned"})
#: the outcome of a result that has arrived, until its execution_finished event is read
_PENDING: Final = Outcome(True, None, None)
#: the last event of a start step whose execution runs on in the background (for its account)
_BACKGROUND: Final[Mapping[str, Json]] = {"type": "execution_running"}


def _requests(idx: list[int]) -> str:
    return ", ".join(f"#{i}" for i in idx) if idx else "no request"

#: effect id -> the core update applied when a transition with that effect fires (the rest of the
#: effect needs an input that arrives with a later event: the reply, the outcome)
_APPLY: Final[Mapping[str, Callable[[RunChecker, Transition], None]]] = {
    "next_item": lambda c, e: core.next_item(c.s),
    "end_round": RunChecker._apply_end_round,
    "answer_error": RunChecker._apply_answer_error,
    "answer_replay": lambda c, e: core.answer_replay(c.s),
    "bind_id": RunChecker._bind,
    "start_execution": lambda c, e: core.begin_execution(c.s),
    "retry_execution": lambda c, e: core.begin_retry(c.s),
    "store_success": lambda c, e: core.store_success(c.s),
    "answer_failure": lambda c, e: core.answer_failure(c.s),
    "terminate": RunChecker._apply_terminate,
    "land": lambda c, e: core.land(c.s),
    "run_on": RunChecker._apply_run_on,
}
