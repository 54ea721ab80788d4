"""Running the language-neutral conformance vectors of ``spec/conformance/`` on the engine.

A vector names its tools by behaviour (``length``, ``upper``, ``echo``, ``whoami``) and its
failures by execution ordinal; this module turns that description into real :class:`Tool`
objects, runs the batch, and compares the observable result with ``expect`` field by field.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..spec.base import default_spec_path
from ..support import safejson
from .base import ToolFailure
from .reference import RunOutcome, Tool, ToolContext, run_batch

__all__ = [
    "VectorResult",
    "build_tools",
    "completion_orders",
    "load_batch_vectors",
    "load_concurrent_vectors",
    "load_loop_vectors",
    "observe",
    "run_batch_vector",
    "run_concurrent_vector",
    "run_loop_vector",
]

Json = Any


def conformance_dir() -> Path:
    return default_spec_path().parent / "conformance"


def load_batch_vectors(path: str | Path | None = None) -> dict[str, Json]:
    """A batch vector file, read through the hardened loader and checked for the shape
    ``run_batch_vector`` relies on; raises ValueError naming the file and the field."""
    p = Path(path) if path is not None else conformance_dir() / "batch.json"
    doc = safejson.load_json(p, what="vector file")  # JsonInputError is a ValueError
    if not isinstance(doc, dict) or doc.get("format") != "loopspec-batch-vectors/1":
        got = doc.get("format") if isinstance(doc, dict) else None
        raise ValueError(f"{p}: format: unsupported vector format {got!r} (loopspec-batch-vectors/1)")
    problem = _batch_shape(doc)
    if problem is not None:
        raise ValueError(f"{p}: {problem}")
    return doc


_BEHAVIOURS = ("length", "upper", "echo", "whoami")


def _tool_list_problem(tools: Json, where: str) -> str | None:
    if not isinstance(tools, list):
        return f"{where}: expected a list of tools"
    for j, t in enumerate(tools):
        w = f"{where}[{j}]"
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            return f"{w}: a tool is an object with a string name"
        if t.get("behaviour") not in _BEHAVIOURS:
            return f"{w}.behaviour: one of {', '.join(_BEHAVIOURS)}"
        if "inputSchema" in t and not isinstance(t["inputSchema"], dict):
            return f"{w}.inputSchema: expected an object"
    return None


def _batch_shape(doc: Mapping[str, Json]) -> str | None:
    """The first field of a batch vector file without the shape the runner needs (None: fine)."""
    toolsets = doc.get("toolsets", {})
    if not isinstance(toolsets, dict):
        return "toolsets: expected an object"
    for name, tools in toolsets.items():
        problem = _tool_list_problem(tools, f"toolsets.{name}")
        if problem:
            return problem
    cases = doc.get("cases")
    if not isinstance(cases, list):
        return "cases: expected a list"
    for i, c in enumerate(cases):
        w = f"cases[{i}]"
        if not isinstance(c, dict) or not isinstance(c.get("id"), str):
            return f"{w}: a case is an object with a string id"
        if "tools" in c:
            problem = _tool_list_problem(c["tools"], f"{w}.tools")
            if problem:
                return problem
        elif not isinstance(c.get("toolset"), str) or c["toolset"] not in toolsets:
            return f"{w}.toolset: names one of toolsets (or give tools)"
        if not isinstance(c.get("calls"), list):
            return f"{w}.calls: expected a list"
        b = c.get("budget")
        if b is not None and (b.__class__ is not int or b < 0):
            return f"{w}.budget: expected an integer >= 0 or null"
        if c.get("mode") not in ("abort", "continue"):
            return f"{w}.mode: abort or continue"
        if "principal" in c and not isinstance(c["principal"], str):
            return f"{w}.principal: expected a string"
        fails = c.get("failures", {})
        if not isinstance(fails, dict) or not all(k.isdigit() and len(k) <= 9 and isinstance(v, str)
                                                  for k, v in fails.items()):
            return f"{w}.failures: an object from execution numbers to failure categories"
        if not isinstance(c.get("expect"), dict):
            return f"{w}.expect: expected an object"
    return None


def _behaviour(kind: str, name: str, counter: Callable[[], int]) -> Callable[[dict[str, Json], ToolContext], Json]:
    if kind == "length":
        return lambda a, c: len(a["text"])
    if kind == "upper":
        return lambda a, c: a["text"].upper()
    if kind == "echo":
        return lambda a, c: {"tool": name, "arguments": a, "execution": counter()}
    if kind == "whoami":
        return lambda a, c: {"principal": c.principal}
    raise ValueError(f"unknown tool behaviour {kind!r}")


def build_tools(specs: list[Mapping[str, Json]], failures: Mapping[str, str] | None = None) -> list[Tool]:
    """Tools for one case. Executions are numbered across all tools of the case (1-based)."""
    state = {"n": 0}
    fail = {int(k): v for k, v in (failures or {}).items()}

    def current() -> int:
        return state["n"]

    tools = []
    for t in specs:
        inner = _behaviour(t["behaviour"], t["name"], current)

        def fn(a: dict[str, Json], c: ToolContext, inner: Callable[..., Json] = inner) -> Json:
            state["n"] += 1
            if state["n"] in fail:
                raise ToolFailure(fail[state["n"]], "injected by the vector")
            return inner(a, c)

        tools.append(Tool.define(t["name"], fn, t.get("inputSchema"), annotations=t.get("annotations")))
    return tools


def observe(outcome: RunOutcome) -> dict[str, Json]:
    """The fields a vector's ``expect`` compares (the protocol-visible shape)."""
    results = []
    for r in outcome.results:
        if r["status"] == "ok":
            results.append({"id": r["id"], "status": "ok", "output": r["output"]})
        else:
            results.append({"id": r["id"], "status": "error", "code": r["code"]})
    return {
        "results": results,
        "executed": outcome.executed,
        "executions": list(outcome.executions),
        "aborted": None if outcome.aborted is None else {"index": outcome.aborted[0], "code": outcome.aborted[1]},
    }


@dataclass(frozen=True)
class VectorResult:
    case_id: str
    passed: bool
    expected: Mapping[str, Json]
    observed: Mapping[str, Json]
    outcome: RunOutcome

    def diff(self) -> list[str]:
        out = []
        for k in self.expected:
            if self.expected.get(k) != self.observed.get(k):
                out.append(f"{k}: expected {json.dumps(self.expected.get(k))}, got {json.dumps(self.observed.get(k))}")
        return out


def run_batch_vector(case: Mapping[str, Json], toolsets: Mapping[str, Json]) -> VectorResult:
    specs = case["tools"] if "tools" in case else toolsets[case["toolset"]]
    tools = build_tools(specs, case.get("failures"))
    outcome = run_batch(
        case["calls"], tools=tools, budget=case["budget"], mode=case["mode"],
        principal=case.get("principal", "anonymous"), run_id=case["id"],
    )
    observed = observe(outcome)
    expected = {k: case["expect"].get(k) for k in ("results", "executed", "executions", "aborted")}
    return VectorResult(case["id"], observed == expected, expected, observed, outcome)


# --------------------------------------------------------------------------------------------
# Concurrent vectors (SPEC.md section 5)
# --------------------------------------------------------------------------------------------


def load_concurrent_vectors(path: str | Path | None = None) -> dict[str, Json]:
    p = Path(path) if path is not None else conformance_dir() / "concurrent.json"
    with p.open(encoding="utf-8") as fh:
        doc = json.load(fh)
    if doc.get("format") != "loopspec-concurrent-vectors/1":
        raise ValueError(f"{p}: unsupported vector format {doc.get('format')!r}")
    return doc  # type: ignore[no-any-return]


def completion_orders(case: Mapping[str, Json]) -> list[tuple[int, ...]]:
    """The completion orders a case is run under: every permutation of its request indices for
    ``"all"``, or the ones it lists."""
    import itertools

    sched = case["schedules"]
    if sched == "all":
        return list(itertools.permutations(range(len(case["calls"]))))
    return [tuple(s) for s in sched]


def in_order(order: tuple[int, ...]) -> Callable[[tuple[int, ...], bool], int | None]:
    """A completion order as the engine's schedule: a result is released only when the run waits for
    one (every take-up that can happen has happened), and then the first of ``order`` still running."""

    def schedule(pending: tuple[int, ...], must: bool) -> int | None:
        if not must:
            return None
        return next((i for i in order if i in pending), pending[0])

    return schedule


def run_concurrent_vector(case: Mapping[str, Json], toolsets: Mapping[str, Json]) -> list[tuple[tuple[int, ...], VectorResult]]:
    """Run the case once per completion order; each must give ``expect``."""
    specs = case["tools"] if "tools" in case else toolsets[case["toolset"]]
    out = []
    for order in completion_orders(case):
        tools = build_tools(specs, case.get("failures"))
        outcome = run_batch(
            case["calls"], tools=tools, budget=case["budget"], mode=case["mode"],
            principal=case.get("principal", "anonymous"), run_id=case["id"],
            max_concurrency=case["maxConcurrency"], overlap=case.get("overlap", "read-only"), schedule=in_order(order),
        )
        observed = observe(outcome)
        expected = {k: case["expect"].get(k) for k in ("results", "executed", "executions", "aborted")}
        out.append((order, VectorResult(case["id"], observed == expected, expected, observed, outcome)))
    return out


# --------------------------------------------------------------------------------------------
# Loop vectors
# --------------------------------------------------------------------------------------------


def load_loop_vectors(path: str | Path | None = None) -> dict[str, Json]:
    p = Path(path) if path is not None else conformance_dir() / "loop.json"
    doc = safejson.load_json(p, what="vector file")
    if not isinstance(doc, dict) or doc.get("format") != "loopspec-loop-vectors/1":
        got = doc.get("format") if isinstance(doc, dict) else None
        raise ValueError(f"{p}: format: unsupported vector format {got!r} (loopspec-loop-vectors/1)")
    return doc  # type: ignore[no-any-return]


class _FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _loop_behaviour(kind: str, name: str, attempt: Callable[[], int]) -> Callable[[dict[str, Json], ToolContext], Json]:
    if kind == "record":
        return lambda a, c: {"id": a.get("key"), "name": f"rec-{a.get('key')}", "secret": "CANARY"}
    return _behaviour(kind, name, attempt)


def _denied(patterns: list[Mapping[str, Json]], tool_name: str, arguments: Mapping[str, Json]) -> bool:
    from ..core.rules import canonical_json

    for p in patterns:
        if p.get("tool") == tool_name and all(
            k in arguments and canonical_json(arguments[k]) == canonical_json(v)
            for k, v in p.get("arguments", {}).items()
        ):
            return True
    return False


def run_loop_vector(case: Mapping[str, Json], toolsets: Mapping[str, Json]) -> VectorResult:
    import threading

    from ..core.ledger import Ledger
    from ..core.rules import Limits
    from .oplog import MemoryOperationLedger
    from .reference import CancelToken, run_loop

    specs = case["tools"] if "tools" in case else toolsets[case["toolset"]]
    clock_cfg = case.get("clock", {})
    per_model = float(clock_cfg.get("perModelRequest", 0))
    per_attempt = float(clock_cfg.get("perAttempt", 0))
    cancel_cfg = case.get("cancel", {})
    fail = {int(k): v for k, v in case.get("failures", {}).items()}
    clock = _FakeClock()
    token = CancelToken() if cancel_cfg else None
    ledger = Ledger()
    ended = threading.Event()
    ledger.subscribe(lambda ev: ended.set() if ev["type"] == "run_terminal" else None)
    attempts = {"n": 0}
    external = _External(case.get("external", {}))
    workers_done = threading.Event()
    workers_done.set()

    def current() -> int:
        return attempts["n"]

    tools = []
    for t in specs:
        inner = _loop_behaviour(t["behaviour"], t["name"], current)

        def fn(a: dict[str, Json], c: ToolContext, inner: Callable[..., Json] = inner) -> Json:
            attempts["n"] += 1
            k = attempts["n"]
            try:
                if cancel_cfg.get("duringAttempt") == k and token is not None:
                    workers_done.clear()
                    token.cancel()
                    ended.wait(10)  # the result arrives only after the run is terminal (R26)
                if k in fail:
                    raise ToolFailure(fail[k], "injected by the vector")
                return inner(a, c)
            finally:
                clock.now += per_attempt
                if cancel_cfg.get("duringAttempt") == k:
                    workers_done.set()

        if "write" in t:  # section 6: a write, sent to the case's external system through the operation ledger
            tools.append(_write_tool(t, inner, external, attempts))
            continue
        tools.append(Tool.define(t["name"], fn, t.get("inputSchema"), fields=t.get("fields"),
                                 max_executions=t.get("maxExecutions")))

    script = list(case["model"])
    asked = {"n": 0}

    def model(turn: Any) -> Json:
        i = asked["n"]
        asked["n"] += 1
        if i >= len(script):
            raise AssertionError(f"vector {case['id']}: the run asked for model response {i + 1}, the script has {len(script)}")
        entry = script[i]
        clock.now += per_model
        if cancel_cfg.get("afterModelRequest") == i + 1 and token is not None:
            token.cancel()
        if entry.get("error"):
            raise RuntimeError("scripted model failure")
        return entry

    lim = case.get("limits", {})
    limits = Limits(
        max_rounds=lim.get("maxRounds"), max_executions=lim.get("maxExecutions"),
        max_tool_executions=lim.get("maxToolExecutions"), max_requests=lim.get("maxRequests"),
        max_retries=lim.get("maxRetries") or 0, deadline=lim.get("deadline"),
    )
    deny = case.get("deny", [])
    seen: list[list[Json]] = []

    def model_spy(turn: Any) -> Json:
        if turn.round > 1:
            seen.append([_shape(r) for r in turn.results])
        return model(turn)

    outcome = run_loop(
        model_spy, tools=tools, limits=limits, mode=case["mode"], on_limit=case["onLimit"],
        principal=case.get("principal", "anonymous"), clock=clock,
        authorize=(lambda p, name, args: not _denied(deny, name, args)) if deny else None,
        cancel=token, ledger=ledger, run_id=case["id"], operation_ledger=MemoryOperationLedger(),
    )
    workers_done.wait(10)
    observed: dict[str, Json] = {
        "status": outcome.status,
        "stopReason": outcome.stop_reason,
        "coverage": outcome.coverage,
        "rounds": outcome.counters["modelRequests"],
        "results": [_shape(r) for r in outcome.results],
        "executed": outcome.executed,
        "executions": list(outcome.executions),
        "aborted": None if outcome.aborted is None else {"index": outcome.aborted[0], "code": outcome.aborted[1]},
    }
    exp = case["expect"]
    expected = {k: exp.get(k) for k in observed}
    if "counters" in exp:
        discarded = sum(1 for e in ledger.events if e["type"] == "late_result_discarded")
        counters = dict(outcome.counters, discarded=discarded)
        observed["counters"] = {k: counters[k] for k in exp["counters"]}
        expected["counters"] = exp["counters"]
    if "modelSaw" in exp:
        observed["modelSaw"] = seen
        expected["modelSaw"] = exp["modelSaw"]
    if "sends" in exp:
        observed["sends"] = external.sends
        expected["sends"] = exp["sends"]
    if "unreconciled" in exp:
        observed["unreconciled"] = len(outcome.unreconciled)
        expected["unreconciled"] = exp["unreconciled"]
    return VectorResult(case["id"], observed == expected, expected, observed, outcome)


class _External:
    """The external system behind a case's write tools (section 6): it applies each send (once per key when it
    keeps a record), loses the answers of the sends ``lostAnswers`` names, and answers lookups by key unless
    ``lookup`` is ``unavailable``."""

    def __init__(self, cfg: Mapping[str, Json]) -> None:
        self.lost = set(cfg.get("lostAnswers", ()))
        self.lookup_up = cfg.get("lookup", "available") == "available"
        self.applied: dict[str, Json] = {}
        self.sends = 0

    def lookup(self, key: str, arguments: Mapping[str, Json]) -> tuple[bool, Json]:
        if not self.lookup_up:
            raise ConnectionError("the lookup is unavailable (scripted by the vector)")
        return key in self.applied, self.applied.get(key)


def _write_tool(t: Mapping[str, Json], inner: Callable[..., Json], external: _External,
                attempts: dict[str, int]) -> Tool:
    from ..core.writes import WriteTool

    reconcile = t["write"]["reconcile"]

    def send(a: dict[str, Json], c: ToolContext) -> Json:
        key = c.idempotency_key or ""
        if reconcile == "record" and key in external.applied:
            return external.applied[key]  # the idempotency record: not applied again
        external.sends += 1
        attempts["n"] += 1
        out = inner(a, c)
        external.applied[key] = out
        if external.sends in external.lost:
            raise TimeoutError("the answer was lost (scripted by the vector)")
        return out

    return Tool.define(t["name"], send, t.get("inputSchema"), fields=t.get("fields"),
                       max_executions=t.get("maxExecutions"),
                       write=WriteTool(t["name"], tuple(t["write"]["keyArguments"]), reconcile=reconcile),
                       lookup=external.lookup if reconcile != "none" else None)


def _shape(r: Mapping[str, Json]) -> dict[str, Json]:
    if r["status"] == "ok":
        return {"id": r["id"], "status": "ok", "output": r["output"]}
    return {"id": r["id"], "status": "error", "code": r["code"]}
