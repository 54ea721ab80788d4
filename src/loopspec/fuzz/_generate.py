"""The fast seeded generator: examples of steps, each with what the strict spec expects of it.

Exploration does not go through Hypothesis step by step (its stateful engine alone costs more per
step than a round trip to the implementation). :class:`Generator` draws the same step data from a
seeded :class:`random.Random` — example ``i`` of a campaign from its own stream, so a campaign is the
same whatever ``PYTHONHASHSEED`` is — with:

* **swarm testing**: per example, a random subset of features (the id pool size, which call
  relations occur, failures on or off, tiny/small/large budgets, strict or lenient schemas, the
  mode; in loop mode the rounds, which limits are set, retries, model errors, odd replies);
* **coverage guidance**: every step is run through the reference driver as it is generated
  (:func:`predict`, the expected executions and answer of a correct implementation), so the
  generator knows which spec transitions each example takes before it is sent; about a third of
  the examples then aim at the reachable transition hit least so far;
* **focused examples** (loop mode): the first examples of every campaign, whatever its seed, and then
  every :data:`FOCUS_EVERY`-th, each isolate one loop feature (:data:`FOCUS`: malformed arguments, a malformed id, a call id
  repeated or reused in a later round, a failing tool, the step limit reached with calls in its last round, a
  call id repeated within one response) with everything that could diverge before it switched off, so that a run's
  first divergence, if any, is that feature's: a campaign meets each feature in isolation for any seed, not by luck.
  The opening ones (:meth:`Generator.opens`) run even after the campaign's shrink time has passed, so how loaded the machine
  is does not decide which features a campaign meets either.

The prediction (:mod:`._prediction`) doubles as the fast path of the judging stage. This is the first
stage of a campaign (generate → run → judge → reduce → report): it imports no other stage.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ..core import rules as core
from ..core.rules import RunState
from ._arguments import Arguments
from ._coverage import REACHABLE
from ._declared import Declaration
from ._prediction import ALL_ORDERS, Planned, Prediction, all_orders, matches, predict
from ._steps import is_concurrent
from ._vocab import (
    MALFORMED,
    PRINCIPALS,
    PROPS,
    RAW_REPLIES,
    RELATIONS,
    SCHEMA_POOL,
    TOOL_POOL,
    UNKNOWN_TOOLS,
    CallPlan,
    _unpack_args,
    _well_formed,
    build_config,
    malformed,
    resolve_call,
    script_entry,
    unknown_names,
)
from ._vocab import OUTPUT_POOL as _OUTPUTS

__all__ = ["ALL_ORDERS", "Ahead", "Generator", "Planned", "Prediction", "all_orders", "loop_features", "matches",
           "predict"]

Json = Any

_FAILS: Final = ("DEPENDENCY_TEMPORARY", "NOT_FOUND_OR_NOT_ACCESSIBLE", "INTERNAL_ERROR")
_LENIENT: Final = 0  # SCHEMA_POOL[0] accepts every object
_STRICT_SCHEMAS: Final = tuple(i for i, s in enumerate(SCHEMA_POOL) if s.get("required")
                               or s.get("additionalProperties") is False)

# --------------------------------------------------------------------------------------------
# Loop-mode features of an example (the shares the campaign prints)
# --------------------------------------------------------------------------------------------


def loop_features(s: RunState) -> set[str]:
    """What a loop run exercised across rounds: a replay or a conflict of an id bound in an earlier
    round, a failed execution followed by another execution of the same id (R10), a retry (R23),
    a limit hit in the middle of a proposal."""
    out: set[str] = set()
    rounds = {r.index: r.round for r in s.requests}
    answers = {a.index: a for a in s.answers}
    if s.aborted_answer is not None:
        answers[s.aborted_answer.index] = s.aborted_answer
    failed_ids: set[str] = set()
    first_in_round: dict[int, int] = {}
    for r in s.requests:
        first_in_round.setdefault(r.round, r.index)
    for r in s.requests:
        a = answers.get(r.index)
        if a is None:
            continue
        cid = r.call_id if isinstance(r.call_id, str) else None
        b = s.bindings.get(cid) if cid is not None else None
        earlier = b is not None and b.bound_at < r.index and rounds.get(b.bound_at, r.round) < r.round
        if a.replayed and earlier:
            out.add("cross-round replay")
        if a.code == "ID_CONFLICT" and earlier:
            out.add("cross-round conflict")
        if a.executed and cid in failed_ids:
            out.add("failure then same id again")
        if a.executed and a.status == "error" and cid is not None:
            failed_ids.add(cid)
        if a.code is not None and core.code_kind(a.code) == "limit" and r.index > first_in_round[r.round]:
            out.add("limit mid-proposal")
    if any(e.attempts > 1 for e in s.executions):
        out.add("retry (maxRetries)")
    return out


# --------------------------------------------------------------------------------------------
# The generator
# --------------------------------------------------------------------------------------------



@dataclass
class _Swarm:
    """One example's features."""

    ids: int
    relations: tuple[int, ...]
    failures: bool
    budgets: tuple[int, int]
    tools: int
    strict: bool
    modes: tuple[str, ...]
    max_calls: int
    rounds: int = 1
    limits: frozenset[str] = frozenset()
    retries: int = 0
    tool_limits: bool = False
    model_odd: bool = False
    deadline_zero: bool = False
    policy: tuple[str, ...] = ("throw", "error-result")
    target: str | None = None
    focus: str | None = None  # a focused example's feature (FOCUS)


#: Loop-mode focused examples, in the order a campaign takes them (see the module docstring): each feature with
#: the relations of its calls. Everything else is off: lenient schemas, no failures (but for "failure"), continue
#: mode, no limits (but the step limit for "last-round"), no retries, well-formed model replies.
FOCUS: Final[dict[str, tuple[str, ...]]] = {
    # a call whose arguments are not an object (R2, R1's first check), then one without a valid id or name: one in
    # the last response of each step, beside a well-formed call (alone, its response would have no call to run)
    "malformed-arguments": ("fresh",),
    "malformed-id": ("fresh",),
    "replay": ("fresh", "replay"),  # a call id repeated with the same content in a later round (R6)
    "conflict": ("fresh", "conflict"),  # a call id reused for other content in a later round (R7)
    "failure": ("fresh",),  # a tool that fails (its exception text must not reach the model, R15)
    "last-round": ("fresh",),  # the step limit reached with calls in the last allowed round (R19, R11)
    "duplicate": ("fresh", "replay", "conflict"),  # a call id repeated within one response (R5-R7, R11)
}
#: the malformed shapes (MALFORMED) of each malformed focus
_SHAPES: Final = {"malformed-arguments": ("arguments-string", "arguments-list", "missing-arguments", "null-arguments"),
                  "malformed-id": ("missing-id", "numeric-id", "blank-id", "empty-id", "numeric-name",
                                   "unicode-blank-id", "not-an-object", "null")}
#: after the first len(FOCUS) examples, every FOCUS_EVERY-th example is a focused one (the next feature in turn)
FOCUS_EVERY: Final = 6


def focus_of(i: int) -> str | None:
    """The feature example ``i`` of a loop campaign focuses on (None: a swarm example)."""
    names = list(FOCUS)
    if i < len(names):
        return names[i]
    if i % FOCUS_EVERY == 0:
        return names[(i // FOCUS_EVERY) % len(names)]
    return None


def _focus(sw: _Swarm, feature: str, r: random.Random) -> None:
    """Turn a loop example's swarm into a focused one (:data:`FOCUS`)."""
    sw.focus = feature
    sw.relations = tuple(sorted(RELATIONS.index(x) for x in FOCUS[feature]))
    sw.ids = r.choice((1, 2))
    sw.failures = feature == "failure"
    sw.strict = False
    sw.modes = ("continue",)
    sw.max_calls = 2 if feature == "duplicate" else min(sw.max_calls, 2)
    sw.rounds = 4 if feature == "last-round" else r.choice((2, 3))
    sw.limits = frozenset({"maxRounds"}) if feature == "last-round" else frozenset()
    sw.retries = 0
    sw.tool_limits = False
    sw.model_odd = False
    sw.deadline_zero = False
    sw.policy = ("throw",)
    sw.budgets = (5, 8)
    sw.tools = 1


#: feature nudges that make a transition likely (coverage guidance)
def _nudge(sw: _Swarm, target: str) -> None:
    rel = set(sw.relations)
    if target in ("T09",):
        rel.add(RELATIONS.index("malformed"))
    elif target == "T10":
        rel.add(RELATIONS.index("unknown-tool"))
    elif target == "T11":
        rel.add(RELATIONS.index("invalid-arguments"))
        sw.strict = True
    elif target == "T12":
        rel.add(RELATIONS.index("conflict"))
    elif target == "T13":
        rel.add(RELATIONS.index("replay"))
    elif target == "T15":
        rel.add(RELATIONS.index("replay"))
        sw.failures = True
        sw.budgets = (3, 6)
    elif target in ("T18", "T26"):
        sw.budgets = (0, 1)
        sw.limits = sw.limits | {"maxExecutions"}
    elif target in ("T23", "T25"):
        sw.failures = True
    elif target == "T24":
        sw.modes = ("abort",)
        rel.add(RELATIONS.index("malformed"))
    elif target == "T22":
        sw.failures = True
        sw.retries = 2
    elif target == "T19":
        sw.tool_limits = True
    elif target == "T08":
        sw.limits = sw.limits | {"maxRequests"}
    elif target == "T02":
        sw.limits = sw.limits | {"maxRounds"}
        sw.rounds = 4
    elif target in ("T05", "T06"):
        sw.model_odd = True
    elif target == "T01":
        sw.deadline_zero = True
    sw.relations = tuple(sorted(rel))
    sw.target = target


#: MCP hints of the tool pool in concurrent steps (R30): lookups and searches read, a write does not.
_HINTS: Final = {"lookup": {"readOnlyHint": True}, "search": {"readOnlyHint": True, "openWorldHint": True}}


def _make_concurrent(r: random.Random, step: dict[str, Json], *, declared: bool = False) -> None:
    """Make a batch step concurrent (protocol v1.1): a bound, an overlap policy, the tools' hints and
    a schedule — every choice drawn for a small proposal (which, over a campaign, draws every
    completion order of it; the campaign also enumerates them, PROTOCOL.md C4), a PCT policy for a
    larger one."""
    cfg = step["config"]
    tools = []
    for t in cfg["tools"]:
        if declared:  # the declared MCP annotations decide (R30), MCP's defaults where there are none
            tools.append(t)
            continue
        hints = _HINTS.get(t["name"]) or {"readOnlyHint": False, "idempotentHint": r.random() < 0.5,
                                          "destructiveHint": r.random() < 0.5}
        tools.append({**t, "annotations": dict(hints)})
    overlap = r.choice(("read-only", "read-only", "idempotent", "all"))
    step["config"] = {**cfg, "tools": tools,
                      "concurrency": {"maxConcurrency": r.choice((2, 2, 3, 4)), "overlap": overlap}}
    n = len(step["calls"])
    if n <= 3:
        step["schedule"] = []  # every completion order is run (all_orders)
    else:
        step["schedule"] = {"pct": r.getrandbits(31), "depth": r.choice((1, 1, 2, 3))}



class Generator:
    """Examples of ``steps`` steps, example ``i`` from its own seeded stream (plus the coverage seen
    so far, when ``guided``)."""

    def __init__(self, mode: str, *, seed: int, steps: int = 8, max_calls: int = 6,
                 normalize: Callable[[dict[str, Json]], dict[str, Json]] | None = None,
                 guided: bool = True, concurrency: bool = False, declared: Declaration | None = None) -> None:
        if mode not in ("batch", "loop"):
            raise ValueError(f"mode must be batch or loop, got {mode!r}")
        self.mode, self.seed, self.steps, self.max_calls = mode, seed, steps, max_calls
        self.normalize = normalize
        self.guided = guided
        self.concurrency = concurrency and mode == "batch"
        #: the implementation's declared registry (None: the harness draws its own from the pools)
        self.declared = declared if declared is not None and declared.tools is not None else None
        self.modes = declared.modes if declared is not None else ("abort", "continue")
        self.source: Arguments | None = None
        self.unknown: tuple[str, ...] = UNKNOWN_TOOLS
        if self.declared is not None:
            self.source = Arguments(self.declared.tools or ())
            self.unknown = unknown_names(self.declared.names)
        self.hits: Counter[str] = Counter()
        self.reachable = REACHABLE["batch-concurrent" if self.concurrency else mode]

    def opens(self, i: int) -> bool:
        """Is example ``i`` one of the focused examples that open a loop campaign, one per feature (they run even
        after the shrink time has passed)?"""
        return self.mode == "loop" and i < len(FOCUS) and focus_of(i) is not None

    def rng(self, i: int) -> random.Random:
        return random.Random(self.seed * 1_000_003 + i * 7_919 + (1 if self.mode == "loop" else 0))

    def _declared_tools(self) -> list[dict[str, Json]]:
        """The declared tools, one list object for every step (the prediction caches their parsed schemas by it)."""
        tools = getattr(self, "_tools", None)
        if tools is None:
            tools = self._tools = [dict(t) for t in self.declared.tools or ()] if self.declared is not None else []
        return tools

    def swarm(self, r: random.Random) -> _Swarm:
        rel = tuple(sorted({0} | {i for i in range(1, len(RELATIONS)) if r.random() < 0.55}))
        lo = r.choice((0, 0, 1, 2, 5))
        sw = _Swarm(
            ids=r.choice((1, 2, 3, 3)), relations=rel, failures=r.random() < 0.6,
            budgets=(lo, lo + r.choice((0, 1, 2, 3))), tools=r.randint(1, len(TOOL_POOL)),
            strict=r.random() < 0.5, modes=r.choice((("abort",), ("continue",), ("abort", "continue"))),
            max_calls=r.randint(1, self.max_calls),
        )
        if "continue" not in self.modes:  # declared unsupported: abort mode only
            sw.modes = ("abort",)
        if self.mode == "loop":
            sw.rounds = r.randint(1, 4)
            sw.limits = frozenset(k for k in ("maxRounds", "maxExecutions", "maxToolExecutions", "maxRequests")
                                  if r.random() < 0.3)
            sw.retries = r.choice((0, 0, 1, 2))
            sw.tool_limits = r.random() < 0.25
            sw.model_odd = r.random() < 0.3
            sw.deadline_zero = r.random() < 0.02
            sw.policy = r.choice((("throw",), ("error-result",), ("throw", "error-result")))
        if self.guided and r.random() < 0.35:
            missing = sorted(self.reachable, key=lambda t: (self.hits.get(t, 0), t))
            _nudge(sw, missing[0] if self.hits.get(missing[0], 0) < 8 else r.choice(missing[:4]))
        return sw

    def _lenient(self, r: random.Random, sw: _Swarm) -> dict[str, Json]:
        """A focused example's configuration: its tools accept every object (nothing fails a schema first)."""
        if self.declared is not None:
            return self._config(r, sw)
        return build_config((sw.tools, SCHEMA_POOL[_LENIENT], SCHEMA_POOL[_LENIENT], SCHEMA_POOL[_LENIENT],
                             r.randint(*sw.budgets), "continue", r.choice(PRINCIPALS)))

    # -- drawing -----------------------------------------------------------------------------
    def _call_plan(self, r: random.Random, sw: _Swarm, tools: int) -> CallPlan:
        bits = r.getrandbits
        args = _unpack_args((bits(len(PROPS)), bits(3 * len(PROPS)), bits(13)))
        return (r.choice(sw.relations), r.randrange(sw.ids), r.randrange(tools), bits(12) & 7, bits(2),
                r.randrange(len(self.unknown)), r.randrange(len(MALFORMED)), args)

    def _config(self, r: random.Random, sw: _Swarm) -> dict[str, Json]:
        if self.declared is not None:  # exactly the declared registry, in every step
            return {"tools": self._declared_tools(), "budget": r.randint(*sw.budgets), "mode": r.choice(sw.modes),
                    "principal": r.choice(PRINCIPALS)}
        def schema() -> dict[str, Json]:
            return SCHEMA_POOL[r.choice(_STRICT_SCHEMAS) if sw.strict and r.random() < 0.7
                               else (_LENIENT if r.random() < 0.3 else r.randrange(len(SCHEMA_POOL)))]

        plan = (sw.tools, schema(), schema(), schema(), r.randint(*sw.budgets), r.choice(sw.modes),
                r.choice(PRINCIPALS))
        return build_config(plan)

    def _script(self, r: random.Random, sw: _Swarm, n: int) -> list[dict[str, Json]]:
        out = []
        for _ in range(n):
            if sw.failures and r.random() < (0.6 if sw.retries else 0.4):
                cat = "DEPENDENCY_TEMPORARY" if sw.retries and r.random() < 0.6 else r.choice(_FAILS)
                out.append({"fail": cat})
            else:
                out.append(script_entry(r.randrange(len(_OUTPUTS))))
        return out

    def _calls(self, r: random.Random, sw: _Swarm, tools: list[dict[str, Json]], earlier: list[Json],
               n: int) -> list[Json]:
        calls = []
        for _ in range(n):
            c = resolve_call(self._call_plan(r, sw, len(tools)), earlier, tools, self.source, self.unknown)
            calls.append(c)
            earlier.append(c)
        return calls

    def batch_step(self, r: random.Random, sw: _Swarm) -> dict[str, Json]:
        cfg = self._config(r, sw)
        n = r.randint(0, sw.max_calls)
        calls = self._calls(r, sw, cfg["tools"], [], n)
        step = {"kind": "batch", "config": cfg, "calls": calls, "script": self._script(r, sw, r.randint(0, 4))}
        if self.concurrency and r.random() < 0.8:
            _make_concurrent(r, step, declared=self.declared is not None)
        return step

    def loop_step(self, r: random.Random, sw: _Swarm) -> dict[str, Json]:
        if sw.focus is not None:
            return self._focused_loop_step(r, sw)
        base = self._config(r, sw)
        tools = []
        for t in base["tools"]:
            m = r.choice((0, 1, 1, 2)) if sw.tool_limits and r.random() < 0.6 else None
            tools.append({**t, "maxExecutions": m} if m is not None else t)

        def lim(key: str, values: Sequence[int]) -> int | None:
            return r.choice(values) if key in sw.limits else None

        limits = {"maxRounds": lim("maxRounds", (0, 1, 2, 3)), "maxExecutions": lim("maxExecutions", (0, 1, 2, 3)),
                  "maxToolExecutions": lim("maxToolExecutions", (0, 1, 2)),
                  "maxRequests": lim("maxRequests", (0, 1, 2, 3, 4)), "maxRetries": sw.retries,
                  "deadline": 0 if sw.deadline_zero else None}
        model: list[dict[str, Json]] = []
        earlier: list[Json] = []
        for k in range(r.randint(1, sw.rounds)):
            if sw.model_odd and r.random() < 0.25:
                roll = r.random()
                model.append({"final": "the answer"} if roll < 0.4 else {"error": "the model failed"} if roll < 0.7
                             else {"raw": RAW_REPLIES[r.randrange(len(RAW_REPLIES))]})
                break
            n = r.randint(0 if k else 1, sw.max_calls)
            model.append({"calls": self._calls(r, sw, tools, earlier, n)})
        config = {"tools": tools, "limits": limits, "mode": base["mode"], "onLimit": r.choice(sw.policy),
                  "principal": base["principal"]}
        n_exec = sum(len(m["calls"]) for m in model if "calls" in m)
        return {"kind": "loop", "config": config, "model": model,
                "script": self._script(r, sw, min(6, n_exec + r.randint(0, 2)))}

    def _focused_loop_step(self, r: random.Random, sw: _Swarm) -> dict[str, Json]:
        """A focused example's loop step: every round proposes calls (1 to max_calls), the step limit, when set,
        below the rounds the model has; only plain outputs are scripted, and failures only for "failure"."""
        base = self._lenient(r, sw)
        tools = base["tools"]
        rounds = sw.rounds if sw.focus == "last-round" else r.randint(2, sw.rounds)
        limit = r.choice((1, 2)) if sw.focus == "last-round" else None
        limits = {"maxRounds": limit, "maxExecutions": None, "maxToolExecutions": None, "maxRequests": None,
                  "maxRetries": 0, "deadline": None}
        model: list[dict[str, Json]] = []
        earlier: list[Json] = []
        for _ in range(rounds):
            calls: list[Json] = []
            for _ in range(r.randint(2 if sw.focus == "duplicate" else 1, sw.max_calls)):
                # repeats of a call of an earlier round, or (duplicate) of this response
                calls.append(self._focused_call(r, sw, tools, calls if sw.focus == "duplicate" else earlier,
                                                len(earlier) + len(calls)))
            if sw.focus in _SHAPES and len(model) == rounds - 1:  # every step holds a malformed call, last
                odd = {"id": f"call_{len(earlier) + len(calls) + 1}", "name": tools[0]["name"], "arguments": {}}
                calls.append(malformed(odd, r.choice(_SHAPES[sw.focus])))
            earlier.extend(calls)
            model.append({"calls": calls})
        model.append({"final": "the answer"})
        n_exec = sum(len(m["calls"]) for m in model if "calls" in m)
        script: list[dict[str, Json]] = []
        for _ in range(min(6, n_exec)):
            if sw.failures and r.random() < 0.5:
                script.append({"fail": r.choice(_FAILS)})
            else:
                script.append({"value": r.choice(("ok", 1, {"b": 1}, [1, "a"]))})
        mode = "continue" if "continue" in self.modes else "abort"  # (an implementation may declare abort only)
        config = {"tools": tools, "limits": limits, "mode": mode, "onLimit": "throw", "principal": base["principal"]}
        return {"kind": "loop", "config": config, "model": model, "script": script}

    def _focused_call(self, r: random.Random, sw: _Swarm, tools: list[dict[str, Json]], earlier: list[Json],
                      n: int) -> Json:
        """A focused example's call (the step's ``n``-th): a repeat of one of ``earlier`` (replay, conflict) or a
        call under an id no other call of the step has, so the focused relation is the step's only repeated id (a
        malformed focus adds its malformed call apart, :meth:`_focused_loop_step`)."""
        plan = self._call_plan(r, sw, len(tools))
        relation = RELATIONS[plan[0]]
        if relation in ("replay", "conflict") and any(_well_formed(c) for c in earlier):
            return resolve_call(plan, earlier, tools, self.source, self.unknown)
        call = resolve_call((RELATIONS.index("fresh"), *plan[1:]), earlier, tools, self.source, self.unknown)
        call["id"] = f"call_{n + 1}"
        return call

    def example(self, i: int) -> tuple[list[Planned], set[str]]:
        """Example ``i``: its steps with their predictions, and the loop-mode features it shows."""
        r = self.rng(i)
        sw = self.swarm(r)
        feature = focus_of(i) if self.mode == "loop" else None
        if feature is not None:
            _focus(sw, feature, r)
        out: list[Planned] = []
        features: set[str] = set()
        make = self.loop_step if self.mode == "loop" else self.batch_step
        for _ in range(self.steps):
            step = make(r, sw)
            if self.normalize is not None:
                step = self.normalize(step)
            variants: list[tuple[list[int], Prediction]] = []
            if self.concurrency and is_concurrent(step) and step.get("schedule") == [] \
                    and len(out) < 2 * self.steps:
                variants = all_orders(step)[1:]  # the other completion orders, as steps of their own
            try:
                p: Prediction | None = predict(step)
            except (ValueError, TypeError, KeyError):
                p = None
            if p is not None:
                self.hits.update(p.transitions)
                if self.mode == "loop" and p.state is not None:
                    features |= loop_features(p.state)
                p.state = None  # not needed any more (and not worth sending between processes)
            out.append(Planned(step, p))
            for sched, vp in variants:
                self.hits.update(vp.transitions)
                vp.state = None
                out.append(Planned({**step, "schedule": sched}, vp))
        return out, features


# --------------------------------------------------------------------------------------------
# Generating ahead, in a helper process
# --------------------------------------------------------------------------------------------


class Ahead:
    """The generator's examples ``0, 1, …`` produced by a forked helper process while the campaign
    runs the current one: generation and prediction cost the campaign nothing while the
    implementation keeps one core busy and the harness another's. The helper sends each example
    (pickled, length-prefixed) over a pipe; the pipe's buffer is the backpressure. The examples are
    the same as :meth:`Generator.example` gives in order (the generator is deterministic)."""

    def __init__(self, gen: Generator, indices: Sequence[int]) -> None:
        import os
        import pickle
        import signal

        self.indices = list(indices)
        rfd, wfd = os.pipe()
        # Ctrl-C is the campaign's to handle: SIGINT is blocked across the fork so that the helper
        # ignores it before it can ever be delivered there (a terminal sends it to the whole group)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        pid = -1
        try:
            pid = os.fork()
        finally:
            if pid != 0:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        if pid == 0:  # the helper: only the generator, only the pipe
            try:
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
                # nothing of the campaign's but the pipe: stdin/stdout/stderr to /dev/null, so the
                # helper never holds the terminal or a caller's pipes open after the campaign ended
                null = os.open(os.devnull, os.O_RDWR)
                for std in (0, 1, 2):
                    os.dup2(null, std)
                os.close(null)
                # the read end too: were it open here, a campaign killed without close() (SIGKILL) would
                # leave the helper blocked on a full pipe for ever instead of ending at EPIPE
                os.closerange(3, wfd)
                os.closerange(wfd + 1, 1 << 16)
                with os.fdopen(wfd, "wb", buffering=1 << 16) as fh:
                    for i in self.indices:
                        data = pickle.dumps(gen.example(i), protocol=pickle.HIGHEST_PROTOCOL)
                        fh.write(len(data).to_bytes(4, "little"))
                        fh.write(data)
                        fh.flush()
            except BaseException:
                pass
            finally:
                os._exit(0)
        os.close(wfd)
        self.pid = pid
        self.fh = os.fdopen(rfd, "rb", buffering=1 << 16)
        self.next = 0

    def get(self, i: int) -> tuple[list[Planned], set[str]] | None:
        """Example ``i`` (they must be asked for in order), or None if the helper is gone."""
        import pickle

        if self.next >= len(self.indices) or self.indices[self.next] != i:
            return None
        head = self.fh.read(4)
        if len(head) < 4:
            return None
        data = self.fh.read(int.from_bytes(head, "little"))
        self.next += 1
        result: tuple[list[Planned], set[str]] = pickle.loads(data)
        return result

    def close(self) -> None:
        import contextlib
        import os
        import signal

        with contextlib.suppress(OSError):
            self.fh.close()
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.waitpid(self.pid, 0)
