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

from ._engine import RunOutcome, Tool, ToolContext, ToolFailure, run_batch
from ._spec import default_spec_path

__all__ = ["VectorResult", "build_tools", "load_batch_vectors", "observe", "run_batch_vector"]

Json = Any


def conformance_dir() -> Path:
    return default_spec_path().parent / "conformance"


def load_batch_vectors(path: str | Path | None = None) -> dict[str, Json]:
    p = Path(path) if path is not None else conformance_dir() / "batch.json"
    with p.open(encoding="utf-8") as fh:
        doc = json.load(fh)
    if doc.get("format") != "loopspec-batch-vectors/1":
        raise ValueError(f"{p}: unsupported vector format {doc.get('format')!r}")
    return doc  # type: ignore[no-any-return]


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

        tools.append(Tool.define(t["name"], fn, t.get("inputSchema")))
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
        for k in ("results", "executed", "executions", "aborted"):
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
