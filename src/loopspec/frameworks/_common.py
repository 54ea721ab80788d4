"""What the framework adapters share: tool signatures from the harness's schemas, the bookkeeping of
one run (request indices across rounds, answers, executions counted in the tool bodies) and the
``loop.run`` result built from it.

Nothing here imports a framework. Every adapter follows the same recipe:

* the harness's proposal is mapped to the framework's own message types (calls the type cannot carry
  are listed by the adapter's :meth:`unrepresentable`, and the fuzzer does not propose them);
* tools are registered through the framework's normal path, as Python functions whose signature is
  built from the harness's input schema (:func:`python_signature`); the body counts the execution
  (:meth:`Run.enter`) and calls the harness's tool;
* the answers are read back from what the framework sends to the model in the next request (its
  tool-result messages), never from the framework's counters.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..core.rules import CODE_TABLE, FAILURE_CATEGORIES
from ..judge.verdict import CANARY_PREFIX
from ..protocol.executor import ExecuteFn, Executor, HeldAnswers, ModelFailure, ModelFn

Json = Any

__all__ = ["ABSENT", "FrameworkExecutor", "Run", "python_signature", "shown"]


class _Absent:
    """Default of an optional parameter: the property was not given (dropped before the harness sees it)."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()

_PY_TYPES: Mapping[str, type] = {"string": str, "integer": int, "boolean": bool}


def python_signature(schema: Mapping[str, Json] | None, first: Sequence[inspect.Parameter] = (),
                     *, var_kwargs: bool = True) -> tuple[inspect.Signature, dict[str, Any]]:
    """The Python signature a user would write for a tool with this (flat, R4) input schema.

    Required properties are keyword parameters without a default, optional ones default to
    :data:`ABSENT` (dropped before the harness sees the arguments), and a schema that allows other
    properties (``additionalProperties`` absent or true) gets ``**extra``."""
    schema = schema or {}
    props: Mapping[str, Json] = schema.get("properties", {}) or {}
    required = set(schema.get("required", []) or [])
    params = list(first)
    annotations: dict[str, Any] = {p.name: p.annotation for p in first}
    for name, prop in props.items():
        typ = _PY_TYPES[prop["type"]]
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=typ,
                                        default=inspect.Parameter.empty if name in required else ABSENT))
        annotations[name] = typ
    if var_kwargs and schema.get("additionalProperties", True) is not False:
        params.append(inspect.Parameter("extra", inspect.Parameter.VAR_KEYWORD, annotation=Any))
        annotations["extra"] = Any
    return inspect.Signature(params), annotations


def given(kwargs: Mapping[str, Json]) -> dict[str, Json]:
    """The arguments a tool body received, without the defaults of absent properties."""
    out: dict[str, Json] = {}
    for k, v in kwargs.items():
        if v is ABSENT:
            continue
        if k == "extra" and isinstance(v, dict):
            out.update(v)
        else:
            out[k] = v
    return out


def ok(call_id: Json, output: Json) -> dict[str, Json]:
    return {"id": call_id if isinstance(call_id, str) else None, "status": "ok", "output": output}


def error(call_id: Json, code: str) -> dict[str, Json]:
    return {"id": call_id if isinstance(call_id, str) else None, "status": "error", "code": code}


class ToolFailed(Exception):
    """Raised by a tool body when the harness's tool failed (carries the category, R17).

    Its message is what a real tool's exception carries: text the model must never see (R15), here a
    canary (:data:`loopspec.judge.verdict.CANARY_PREFIX`) the judge searches for in everything the framework
    shows the model."""

    def __init__(self, category: str, canary: str = "") -> None:
        self.category = category if category in FAILURE_CATEGORIES else "INTERNAL_ERROR"
        self.canary = canary
        super().__init__(f"tool failed ({self.category}): internal detail {canary}" if canary else self.category)


def shown(call_id: Json, code: str, content: Json) -> dict[str, Json]:
    """An error answer with the text the framework put in front of the model for it (R15: the judge
    compares it with the code's fixed message and searches it for a tool exception's canary)."""
    return {**error(call_id, code), "message": content}


@dataclass
class Run:
    """One batch.run / loop.run seen by an adapter: rounds, requests, answers and executions."""

    execute: ExecuteFn
    principal: str
    tools: Mapping[str, Json]  # name -> inputSchema, the allow-list the adapter registered
    rounds: int = 0
    proposals: list[list[Json]] = field(default_factory=list)  # the calls of each round, verbatim
    offsets: list[int] = field(default_factory=list)  # request index of each round's first call
    answers: dict[int, dict[str, Json]] = field(default_factory=dict)  # request index -> answer
    executed: int = 0
    failed_at: dict[int, str] = field(default_factory=dict)  # request index -> failure category
    final: str | None = None
    current: int = -1  # the round whose calls the framework is working on
    entered: set[int] = field(default_factory=set)  # requests whose tool body was entered
    #: calls the framework's message parser set aside (by position in the proposals): they are not
    #: requests, so a request index counts the calls before it that were not dropped
    dropped: set[int] = field(default_factory=set)
    #: round -> its request indices in the order the framework showed the model their answers (when that is
    #: not request order, e.g. smolagents sorts a step's observations by call id)
    shown_order: dict[int, list[int]] = field(default_factory=dict)

    @property
    def requests(self) -> int:
        return sum(len(p) for p in self.proposals)

    def propose(self, calls: list[Json]) -> None:
        self.offsets.append(self.requests)
        self.proposals.append(list(calls))
        self.current = len(self.proposals) - 1

    def index_of(self, call_id: Json, name: Json, round_: int | None = None) -> int | None:
        """The request index of the call with this id (and name) in a round (default: the current one)."""
        r = self.current if round_ is None else round_
        if r < 0:
            return None
        for j, c in enumerate(self.proposals[r]):
            if isinstance(c, dict) and c.get("id") == call_id and c.get("name") == name:
                return self.offsets[r] + j
        return None

    def call(self, index: int) -> Json:
        for r, off in enumerate(self.offsets):
            if off <= index < off + len(self.proposals[r]):
                return self.proposals[r][index - off]
        return None

    def _start(self, index: int | None, call_id: Json, received: dict[str, Json],
               principal: Json) -> tuple[Json, dict[str, Json], str, int]:
        self.executed += 1
        call = self.call(index) if index is not None else None
        args = call.get("arguments") if isinstance(call, dict) and isinstance(call.get("arguments"), dict) else received
        cid = call.get("id") if isinstance(call, dict) else call_id
        return cid, args, principal if isinstance(principal, str) else "", self.executed

    def _failed(self, index: int | None, exc: Exception, k: int) -> ToolFailed:
        category = getattr(exc, "category", "INTERNAL_ERROR")
        if index is not None:
            self.failed_at[index] = category
        return ToolFailed(category, f"{CANARY_PREFIX}{k}")

    def enter(self, index: int | None, call_id: Json, name: str, received: dict[str, Json], principal: Json) -> Json:
        """A tool body was entered: count the execution and run the harness's tool.

        The arguments sent to the harness are the proposal's (the framework says which call it runs
        by the id it passes to the body); when the framework coerced them (lax validation) the body
        received other values, but the execution is of that request all the same."""
        cid, args, who, k = self._start(index, call_id, received, principal)
        try:
            return self.execute(cid, name, args, who)
        except Exception as exc:
            raise self._failed(index, exc, k) from None

    @property
    def held(self) -> HeldAnswers | None:
        """A concurrent step's held answers (protocol v1.1), None in a sequential step."""
        return getattr(self.execute, "held", None)

    async def aenter(self, index: int | None, call_id: Json, name: str, received: dict[str, Json],
                     principal: Json) -> Json:
        """:meth:`enter` for an async tool body: in a concurrent step the body awaits the answer the
        harness holds (:class:`~loopspec.protocol.executor.HeldAnswers`), else it answers at once."""
        held = self.held
        if held is None:
            return self.enter(index, call_id, name, received, principal)
        cid, args, who, k = self._start(index, call_id, received, principal)
        try:
            return await held.execute(cid, name, args, who)
        except Exception as exc:
            raise self._failed(index, exc, k) from None

    def run_async(self, coro: Any) -> Any:
        """``asyncio.run(coro)``; in a concurrent step with the held answers' watcher beside it."""
        import asyncio

        held = self.held
        return asyncio.run(held.drive(coro) if held is not None else coro)

    def answer(self, index: int, result: dict[str, Json]) -> None:
        self.answers.setdefault(index, result)

    def round_results(self, round_: int) -> list[dict[str, Json]]:
        """The answers of one round, in request order (what the model is shown next, R18)."""
        return [self.answers[i] for i in self._order(round_) if i in self.answers]

    def next_reply(self, model_next: ModelFn) -> tuple[Json, str]:
        """The scripted model's next turn, as every adapter's model layer takes it: the answers of the current
        round (what the model is shown: :meth:`round_results`), the harness's reply for the new round, and
        that reply's kind (:func:`reply_kind`). Reading what the framework put in front of the model comes
        first and is the adapter's own; so is what it keeps of a final reply."""
        shown = self.round_results(self.current) if self.current >= 0 else []
        self.rounds += 1
        reply = model_next(self.rounds, shown)
        return reply, reply_kind(reply)

    def _order(self, round_: int) -> list[int]:
        off = self.offsets[round_]
        return self.shown_order.get(round_) or list(range(off, off + len(self.proposals[round_])))

    def results(self, upto: int | None = None) -> list[dict[str, Json]]:
        """Every answer the framework gave, in request order or, within a round, the order it showed them
        (a request it never answered has none)."""
        end = self.requests if upto is None else upto
        return [self.answers[i] for r in range(len(self.proposals)) for i in self._order(r)
                if i < end and i in self.answers]

    def request_index(self, position: int) -> int:
        """The request index of the call at this position of the proposals (dropped calls are no requests)."""
        return position - sum(1 for d in self.dropped if d < position)

    def round_positions(self, round_: int | None = None) -> range:
        r = self.current if round_ is None else round_
        return range(self.offsets[r], self.offsets[r] + len(self.proposals[r])) if r >= 0 else range(0)

    def outcome(self, status: str, stop_reason: str, aborted: tuple[int, str] | None = None) -> dict[str, Json]:
        upto = aborted[0] if aborted is not None else None
        results = self.results(upto)
        if aborted is not None:
            aborted = (self.request_index(aborted[0]), aborted[1])
        limit_answer = any(r.get("status") == "error" and CODE_TABLE.get(r.get("code", ""), ("",))[0] == "limit"
                           for r in results)
        return {
            "status": status, "stopReason": stop_reason,
            "coverage": "COMPLETE" if status == "COMPLETED" and not limit_answer else "PARTIAL",
            "executed": self.executed,
            "aborted": None if aborted is None else {"index": aborted[0], "code": aborted[1]},
            "final": self.final if stop_reason == "FINAL_ANSWER" else None,
            "results": results, "rounds": self.rounds,
        }

    def batch_result(self, aborted: tuple[int, str] | None = None) -> dict[str, Json]:
        return {"results": self.results(aborted[0] if aborted else None), "executed": self.executed,
                "aborted": None if aborted is None else {"index": self.request_index(aborted[0]),
                                                         "code": aborted[1]}}


def batch_model(calls: list[Json]) -> ModelFn:
    """A batch is a loop whose model proposes ``calls`` once and then gives its final answer."""

    def model_next(round_: int, results: list[Json]) -> Json:
        return {"calls": calls} if round_ == 1 else {"final": "end of batch"}

    return model_next


def reply_kind(reply: Json) -> str:
    """``calls``, ``final`` or ``invalid`` (neither: the model layer cannot produce a response, R18)."""
    if isinstance(reply, dict) and set(reply) == {"calls"} and isinstance(reply["calls"], list):
        return "calls"
    if isinstance(reply, dict) and set(reply) == {"final"} and isinstance(reply["final"], str):
        return "final"
    return "invalid"


class InvalidReply(ModelFailure):
    """The scripted model answered with something that is neither calls nor a final answer."""


class FrameworkExecutor(Executor):
    """An adapter that runs a real framework. Subclasses implement :meth:`run_loop` (one whole run,
    driven by ``model_next``) and say which proposals the framework's message types can carry."""

    framework = "?"
    #: how the adapter maps the harness's limits to the framework's (documentation, shown in reports)
    limit_support: ClassVar[Mapping[str, str]] = {}
    #: the framework settings that change the loop's behaviour (the settings matrix): setting -> its values,
    #: the adapter's default first (the setting the profile describes)
    SETTINGS: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    #: the values chosen for this class (:meth:`with_settings`); a setting not named has its default
    settings: ClassVar[Mapping[str, str]] = {}

    @classmethod
    def with_settings(cls, chosen: Mapping[str, str]) -> type[FrameworkExecutor]:
        """A subclass that runs the framework with these settings (``--impl 'NAME[setting=value,...]'``)."""
        for k, v in chosen.items():
            if k not in cls.SETTINGS:
                raise ValueError(f"{cls.framework} has no setting {k!r} (settings: {', '.join(cls.SETTINGS) or 'none'})")
            if v not in cls.SETTINGS[k]:
                raise ValueError(f"{cls.framework} setting {k} takes one of {', '.join(cls.SETTINGS[k])}, got {v!r}")
        label = ",".join(f"{k}={v}" for k, v in chosen.items())
        return type(f"{cls.__name__}[{label}]", (cls,), {"settings": {**cls.settings, **chosen},
                                                         "name": f"{cls.framework}[{label}]"})

    def setting(self, name: str) -> str:
        return self.settings.get(name, self.SETTINGS[name][0])

    #: the adapter's tool bodies await held answers in a concurrent step (:meth:`Run.aenter`)
    holds_answers = True

    def concurrent(self) -> bool:
        """Does the framework run at these settings execute the calls of one response concurrently (its
        default mode)? Then the adapter announces ``concurrency`` and the harness picks completion orders."""
        return False

    def capabilities(self) -> dict[str, bool]:
        return {**super().capabilities(), "concurrency": self.concurrent()}

    def settings_text(self) -> str:
        """The non-default settings, as ``--impl`` names them (empty at the defaults)."""
        return ",".join(f"{k}={v}" for k, v in self.settings.items() if v != self.SETTINGS[k][0])

    def unrepresentable(self, call: Json) -> str | None:
        """Why the framework's message types cannot carry this call (None when they can)."""
        if not isinstance(call, dict):
            return "a proposal item that is not an object"
        if "id" in call and not isinstance(call["id"], str):
            return "a non-string call id"
        if not isinstance(call.get("name"), str):
            return "a tool name that is not a string"
        return None

    def normalize_step(self, step: dict[str, Json]) -> dict[str, Json]:
        """The step the framework can express: unrepresentable calls removed, limits it has no
        equivalent for turned off (see :attr:`limit_support`)."""
        step = normalize_step(step, self.unrepresentable, self.supported_limits(), self.supports_error_result)
        cfg = step.get("config")
        if isinstance(cfg, dict) and isinstance(cfg.get("concurrency"), dict):
            if not self.concurrent():
                step["config"] = {k: v for k, v in cfg.items() if k != "concurrency"}
                step.pop("schedule", None)
            else:
                # no framework bounds the overlap of one response's calls or reads MCP hints (R29, R30):
                # every call of the response may run at once, which is what the step says
                step["config"] = {**cfg, "concurrency": {"maxConcurrency": max(2, len(step.get("calls", []))),
                                                         "overlap": "all"}}
        return step

    supports_error_result = False  # the error-result limit policy (R20)

    def supported_limits(self) -> frozenset[str]:
        return frozenset(k for k, v in self.limit_support.items() if not v.startswith("none"))

    def run_loop(self, run: Run, params: dict[str, Json], model_next: ModelFn, *, batch: bool) -> dict[str, Json]:
        raise NotImplementedError

    def _run(self, params: dict[str, Json], execute: ExecuteFn) -> Run:
        tools = {t["name"]: t.get("inputSchema") for t in params.get("tools", [])}
        return Run(execute=execute, principal=params.get("principal", "anonymous"), tools=tools)

    def batch_run(self, params: dict[str, Json], execute: ExecuteFn) -> dict[str, Json]:
        run = self._run(params, execute)
        loop_params = {"tools": params.get("tools", []), "mode": params.get("mode", "abort"),
                       "onLimit": "throw" if params.get("mode", "abort") == "abort" else "error-result",
                       "principal": params.get("principal", "anonymous"),
                       "limits": {"maxExecutions": params.get("budget"), "maxRounds": None}}
        out = self.run_loop(run, loop_params, batch_model(list(params.get("calls", []))), batch=True)
        aborted = out.get("aborted")
        return {"results": out["results"], "executed": out["executed"], "aborted": aborted}

    def loop_run(self, params: dict[str, Json], execute: ExecuteFn, model_next: ModelFn) -> dict[str, Json]:
        return self.run_loop(self._run(params, execute), params, model_next, batch=False)


LIMIT_KEYS = ("maxRounds", "maxExecutions", "maxToolExecutions", "maxRequests", "maxRetries", "deadline")


def normalize_step(step: dict[str, Json], unrepresentable: Callable[[Json], str | None],
                   limits: frozenset[str], error_result: bool) -> dict[str, Json]:
    step = dict(step)
    cfg = dict(step["config"])
    if step.get("kind", "batch") == "batch":
        step["calls"] = [c for c in step.get("calls", []) if unrepresentable(c) is None]
        if "maxExecutions" not in limits:
            cfg["budget"] = max(cfg.get("budget", 0), 64)  # no execution budget: never the binding limit
        step["config"] = cfg
        return step
    model = []
    for reply in step.get("model", []):
        if isinstance(reply, dict) and set(reply) == {"calls"} and isinstance(reply["calls"], list):
            reply = {"calls": [c for c in reply["calls"] if unrepresentable(c) is None]}
        model.append(reply)
    step["model"] = model
    lim = dict(cfg.get("limits", {}))
    for k in LIMIT_KEYS:
        if k not in limits and lim.get(k) is not None:
            lim[k] = 0 if k == "maxRetries" else None
    cfg["limits"] = lim
    if "maxToolExecutions" not in limits:
        cfg["tools"] = [{k: v for k, v in t.items() if k != "maxExecutions"} for t in cfg["tools"]]
    if not error_result:
        cfg["onLimit"] = "throw"
    step["config"] = cfg
    return step
