"""The expected path on the spec machine for a failing step, for ``loopspec diagram --trace``: the
reference engine (the ``transitions`` machine) run on the step's configuration, fed the tool
outcomes and model replies the harness recorded."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..core.rules import HINT_DEFAULTS
from ..judge.batch import decision_position
from ..protocol.executor import parse_limits
from ._model import Finding

__all__ = ["batch_reference_path", "diagram_trace", "loop_reference_path", "outcome_tools"]

Json = Any


def diagram_trace(finding: Finding) -> dict[str, Json] | None:
    """``{"path": [transition ids of the expected run], "failed": position}`` for the failing step."""
    if not finding.traces:
        return None
    trace = finding.traces[-1]
    if trace.get("kind") == "writes":  # section 6's operation machine, not the loop's: no path to draw here
        return None
    v = finding.verdict.violation
    steps = loop_reference_path(trace) if trace.get("kind") == "loop" else batch_reference_path(trace)
    if steps is None:
        return None
    index = v.index if v is not None else None
    out: dict[str, Json] = {"path": [t for t, _ in steps], "failed": decision_position(steps, index)}
    if v is not None:
        out["label"] = f"counterexample: {v.rule} {v.kind}" + (f" ({v.invariant})" if v.invariant else "")
    out["source"] = "loopspec fuzz: the expected run of the failing step (reference engine, same tool outcomes)"
    return out


def outcome_tools(tools: Sequence[Mapping[str, Json]], outcomes: Sequence[Mapping[str, Json]]) -> list[Any]:
    """Engine tools that give the recorded outcomes in execution order (whatever tool runs)."""
    from ..engine.base import ToolFailure
    from ..engine.reference import Tool

    feed = iter(outcomes)

    def fn(args: dict[str, Json], ctx: Any) -> Json:
        o = next(feed, None)
        if o is None:
            return None
        if o.get("status") == "error":
            raise ToolFailure(o.get("category", "INTERNAL_ERROR"))
        return o.get("output")

    return [Tool.define(t["name"], fn, t.get("inputSchema"), max_executions=t.get("maxExecutions"),
                        annotations={k: v for k, v in (t.get("annotations") or {}).items()
                                     if k in HINT_DEFAULTS and isinstance(v, bool)})
            for t in tools]


def release_schedule(trace: Mapping[str, Json]) -> Any:
    """The engine schedule (a ScriptedBackground's) that lands, at each of its waits, the execution
    the harness released at the same release of a concurrent trace (PROTOCOL.md C7)."""
    releases = [e.get("execution") for e in trace["events"] if e.get("type") == "release"]
    started: list[int] = []  # request indices in start order (pending lists are in start order)
    j = 0

    def schedule(pending: tuple[int, ...], must: bool) -> int | None:
        nonlocal j
        for r in pending:
            if r not in started:
                started.append(r)
        if not must:
            return None
        k = releases[j] if j < len(releases) else None
        j += 1
        want = started[k - 1] if isinstance(k, int) and 0 < k <= len(started) else None
        return want if want in pending else pending[0]

    return schedule


def batch_reference_path(trace: Mapping[str, Json]) -> list[tuple[str, int | None]] | None:
    from ..engine.reference import run_batch

    try:
        cfg = trace["config"]
        outcomes = [e["outcome"] for e in trace["events"] if e.get("type") == "execute"]
        tools = outcome_tools(cfg["tools"], outcomes)
        steps: list[tuple[str, int | None]] = []
        conc = cfg.get("concurrency")
        extra: dict[str, Any] = {}
        if isinstance(conc, dict):  # a concurrent step: the engine lands what the harness released, in order
            extra = {"max_concurrency": conc.get("maxConcurrency"), "overlap": conc.get("overlap", "read-only"),
                     "schedule": release_schedule(trace)}
        run_batch(trace["calls"], tools=tools, budget=cfg["budget"], mode=cfg["mode"], principal=cfg["principal"],
                  observer=lambda s, t: steps.append((t.id, s.requests[-1].index if s.requests else None)), **extra)
    except Exception:
        return None
    return steps


def loop_reference_path(trace: Mapping[str, Json]) -> list[tuple[str, int | None]] | None:
    """The engine's transition path for a loop trace (replies and outcomes as recorded)."""
    from ..engine.reference import run_loop

    try:
        cfg = trace["config"]
        replies = [e["reply"] for e in trace["events"] if e.get("type") == "model"]
        outcomes = [e["outcome"] for e in trace["events"] if e.get("type") == "execute"]
        feed = iter(replies)

        def model(turn: Any) -> Json:
            r = next(feed, None)
            if r is None or "error" in r:
                raise RuntimeError("the model failed")
            return r.get("raw", r)

        steps: list[tuple[str, int | None]] = []
        run_loop(model, tools=outcome_tools(cfg["tools"], outcomes), limits=parse_limits(cfg.get("limits")),
                 mode=cfg.get("mode"), on_limit=cfg.get("onLimit"), principal=cfg.get("principal", "anonymous"),
                 observer=lambda s, t: steps.append((t.id, s.requests[-1].index if s.requests else None)))
    except Exception:
        return None
    return steps
