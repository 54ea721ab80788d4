"""The harness: runs one step (a ``batch.run``) against an implementation and records the trace.

The harness owns the tools. A step carries a *script* for them: the k-th execution the
implementation starts (``tool.execute`` number k, 1-based, across all tools of the step) gets
``script[k-1]`` — ``{"value": V}`` (the tool returns V) or ``{"fail": CATEGORY}`` (the tool fails
with that category) — and executions past the end of the script return
``{"tool": name, "execution": k}``, so every execution is visible in the answers. A
``tool.execute`` for a tool that is not registered fails with INTERNAL_ERROR (the harness has no
such tool) and is recorded like any other execution: the judge then reports R3.

The trace (``loopspec-trace/1``) is what :mod:`loopspec._judge` reads.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from .. import _core as core
from .._judge import TRACE_FORMAT
from ._adapter import Impl
from ._rpc import TOOL_FAILED, ProtocolFailure, RpcError, show

__all__ = ["amend_late", "batch_params", "default_output", "execution_cap", "late_message", "run_batch_step",
           "script_outcome"]

Json = Any


def default_output(name: Json, k: int) -> Json:
    return {"tool": name if isinstance(name, str) else None, "execution": k}


def script_outcome(script: Sequence[Mapping[str, Json]], k: int, name: Json, registered: bool) -> core.Outcome:
    """The outcome the harness gives execution ``k`` (1-based) of tool ``name``."""
    if not registered:
        return core.Outcome.failure("INTERNAL_ERROR")
    if k <= len(script):
        entry = script[k - 1]
        if "fail" in entry:
            return core.Outcome.failure(entry["fail"])
        return core.Outcome.success(entry.get("value"))
    return core.Outcome.success(default_output(name, k))


def batch_params(step: Mapping[str, Json]) -> dict[str, Json]:
    cfg = step["config"]
    return {
        "tools": cfg["tools"], "budget": cfg["budget"], "mode": cfg["mode"], "principal": cfg["principal"],
        "calls": step["calls"],
    }


def execution_cap(requests: int, retries: int = 0) -> int:
    """The most tool.execute requests the harness answers in one step: far more than the spec allows
    (one execution and ``retries`` retries per request), so the judge still sees the excess; past it
    the implementation is flooding the harness (P4)."""
    return 2 * requests * (retries + 1) + 16


class _Recorder:
    """Answers the implementation's requests during one step and records them."""

    def __init__(self, tools: Sequence[Mapping[str, Json]], script: Sequence[Mapping[str, Json]],
                 cap: int = 1_000) -> None:
        self.names = {t["name"] for t in tools}
        self.script = script
        self.events: list[dict[str, Json]] = []
        self.k = 0
        self.cap = cap
        self.failure: ProtocolFailure | None = None

    def __call__(self, method: str, params: Json) -> Json:
        if self.failure is not None:  # an in-process implementation swallowed our failure: refuse everything
            raise RpcError(TOOL_FAILED, "the harness already stopped this run", {"category": "INTERNAL_ERROR"})
        if method == "tool.execute":
            return self.execute(params)
        return self.unexpected(method)

    def unexpected(self, method: str) -> Json:
        self.failure = ProtocolFailure("P4", "unexpected-request", f"a {method!r} request from the implementation during batch.run")
        raise self.failure

    def execute(self, params: Json) -> Json:
        if not isinstance(params, dict):
            self.failure = ProtocolFailure("P5", "bad-params", "tool.execute params must be an object")
            raise self.failure
        if self.k >= self.cap:
            self.failure = ProtocolFailure("P4", "flood", f"more than {self.cap} tool.execute requests in one "
                                                          "batch.run (the spec allows one per call)")
            raise self.failure
        ctx = params.get("context")
        self.k += 1
        name = params.get("name")
        outcome = script_outcome(self.script, self.k, name, isinstance(name, str) and name in self.names)
        ev = {
            "type": "execute", "callId": params.get("callId"), "name": name,
            "arguments": params.get("arguments"),
            "principal": ctx.get("principal") if isinstance(ctx, dict) else None,
            "outcome": ({"status": "ok", "output": outcome.output} if outcome.ok
                        else {"status": "error", "category": outcome.category}),
        }
        self.events.append(ev)
        if outcome.ok:
            return {"output": outcome.output}
        raise RpcError(TOOL_FAILED, "tool failed", {"category": outcome.category})


def run_batch_step(impl: Impl, step: Mapping[str, Json]) -> dict[str, Json]:
    """Send one ``batch.run`` and return its trace. Never raises for a misbehaving implementation:
    protocol failures become a ``protocol-error`` event (the caller should then discard ``impl``)."""
    rec = _Recorder(step["config"]["tools"], step.get("script", []), execution_cap(len(step["calls"])))
    trace: dict[str, Json] = {
        "format": TRACE_FORMAT, "kind": "batch",
        "config": dict(step["config"]), "calls": step["calls"], "events": rec.events,
    }
    try:
        result = impl.call("batch.run", batch_params(step), rec)
    except ProtocolFailure as f:
        rec.events.append((rec.failure or f).to_event())
        return trace
    except RpcError as err:
        if rec.failure is not None:
            rec.events.append(rec.failure.to_event())
        else:
            rec.events.append(ProtocolFailure("P4", "error-response",
                                              f"batch.run answered error {err.code}: {err.message}").to_event())
        return trace
    if rec.failure is not None:
        rec.events.append(rec.failure.to_event())
    else:
        rec.events.append({"type": "response", "result": result})
        late = late_message(impl, "batch.run")
        if late is not None:
            amend_late(trace, late)
    return trace


#: How long a replay waits, after the answer to its last step, for a message that comes late.
LATE_GRACE = 0.05


def late_message(impl: Impl, answered: str, wait: float = 0.0) -> ProtocolFailure | None:
    """A message the implementation sent after its answer to ``answered``, unasked (a late
    ``tool.execute``, say), as a P4 finding of the step it belongs to; None when nothing came
    (within ``wait`` seconds)."""
    stray = getattr(impl, "stray", None)
    if stray is None or not stray(wait):
        return None
    channel = getattr(impl, "channel", None)
    what = "more output"
    if channel is not None:
        try:
            msg = channel.receive(time.monotonic() + 0.05, what="nothing (the step was answered)")
            if isinstance(msg, dict) and isinstance(msg.get("method"), str):
                what = f"a {show(msg['method'], 40)} request ({show(msg.get('params'), 80)})"
            else:
                what = f"the message {show(msg, 80)}"
        except ProtocolFailure as f:
            what = f"output that is not a message ({f.kind}: {f.detail})"
    if hasattr(impl, "healthy"):
        impl.healthy = False  # type: ignore[attr-defined]  # the exchange is out of step: restart it
    return ProtocolFailure("P4", "late-request", f"{what} arrived after its answer to {answered}")


def amend_late(trace: dict[str, Json], late: ProtocolFailure) -> None:
    """Make ``trace`` end with the late message's finding instead of its (earlier) answer."""
    events = trace["events"]
    if events and events[-1].get("type") == "response":
        events[-1] = {**late.to_event(), "answer": events[-1].get("result")}
    elif not events or events[-1].get("type") != "protocol-error":
        events.append(late.to_event())


def trace_failed(trace: Mapping[str, Json]) -> bool:
    """Did the step end with a protocol failure (the implementation should be restarted)?"""
    evs = trace.get("events") or []
    return bool(evs) and evs[-1].get("type") == "protocol-error"
