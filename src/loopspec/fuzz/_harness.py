"""The harness: runs one step (a ``batch.run`` or a ``loop.run``) against an implementation and
records the trace (``loopspec-trace/1``, what :mod:`loopspec.judge.batch` reads).

The harness owns the tools and, in loop mode, the model. A step carries a *script* for the tools:
the k-th execution the implementation starts (``tool.execute`` number k, 1-based, across all tools
of the step) gets ``script[k-1]`` — ``{"value": V}`` (the tool returns V) or ``{"fail": CATEGORY}``
(the tool fails with that category) — and executions past the end of the script return
``{"tool": name, "execution": k}``, so every execution is visible in the answers. A
``tool.execute`` for a tool that is not registered fails with INTERNAL_ERROR (the harness has no
such tool) and is recorded like any other execution: the judge then reports R3.

Every failure the harness injects carries a unique **canary** — in the JSON-RPC error's message
and in its ``data`` — recorded in the trace; the judge looks for it in everything the
implementation shows the model (R15: a failure's detail never reaches the model).

In loop mode the k-th ``model.next`` gets ``model[k-1]``: ``{"calls": [...]}``, ``{"final": str}``,
``{"error": str}`` (answered with a JSON-RPC error: the model failed) or ``{"raw": V}`` (V itself,
neither calls nor a final answer); ``{"final": "done"}`` after the end of the list.

**Scheduling.** The implementation's requests are answered here, in :meth:`_Recorder.__call__`,
each as it arrives (protocol v1 is sequential): the one place that decides when a request is
answered. A concurrent step (protocol v1.1, PROTOCOL.md section 7: ``config.concurrency``) goes to
:class:`_ConcurrentRecorder`, which holds every ``tool.execute`` answer and releases one at each
``tool.waiting`` of the implementation, the one the step's **schedule** picks (:func:`chooser`:
an explicit list of choices, or a PCT policy), and records each release and cancellation.
"""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..core import rules as core
from ..judge.verdict import CANARY_PREFIX, TRACE_FORMAT
from ..protocol.rpc import (
    HOLD,
    MAX_UNSOLICITED,
    MODEL_FAILED,
    REQUEST_CANCELLED,
    TOOL_FAILED,
    ProtocolFailure,
    RpcError,
    show,
)
from ._adapter import Impl, InProcessImpl, holds_answers
from ._steps import announces_concurrency, chooser, is_concurrent, realized_schedule
from ._vocab import DEFAULT_REPLY

__all__ = [
    "CANARY_MARK",
    "LATE_GRACE",
    "amend_late",
    "batch_params",
    "chooser",
    "default_output",
    "execution_cap",
    "failed_start_trace",
    "is_concurrent",
    "late_message",
    "realized_schedule",
    "run_batch_step",
    "run_loop_step",
    "run_step",
    "script_outcome",
    "trace_failed",
]

Json = Any

#: Every canary starts with this (and is unique within its step).
CANARY_MARK = CANARY_PREFIX


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
    out = {
        "tools": cfg["tools"], "budget": cfg["budget"], "mode": cfg["mode"], "principal": cfg["principal"],
        "calls": step["calls"],
    }
    if "concurrency" in cfg:
        out["concurrency"] = cfg["concurrency"]
    return out


def execution_cap(requests: int, retries: int = 0) -> int:
    """The most tool.execute requests the harness answers in one step: far more than the spec allows
    (one execution and ``retries`` retries per request), so the judge still sees the excess; past it
    the implementation is flooding the harness (P4)."""
    return 2 * requests * (retries + 1) + 16


class _Recorder:
    """Answers the implementation's requests during one step and records them."""

    def __init__(self, step: Mapping[str, Json], method: str) -> None:
        self.step = step
        self.method = method
        cfg = step["config"]
        self.names = {t["name"] for t in cfg["tools"]}
        self.script: Sequence[Mapping[str, Json]] = step.get("script", [])
        self.model: Sequence[Mapping[str, Json]] = step.get("model", [])
        self.events: list[dict[str, Json]] = []
        self.k = 0
        self.rounds = 0
        self.failure: ProtocolFailure | None = None
        self.salt: int | None = None
        if method == "loop.run":
            calls = sum(len(r["calls"]) for r in self.model if isinstance(r, dict) and isinstance(r.get("calls"), list))
            retries = (cfg.get("limits") or {}).get("maxRetries") or 0
            self.exec_cap = execution_cap(calls, retries if isinstance(retries, int) else 0)
            self.model_cap = len(self.model) + 8  # the model's script, then "final" answers a correct run stops at
        else:
            self.exec_cap = execution_cap(len(step.get("calls", [])))
            self.model_cap = 0

    # -- the one place that answers the implementation's requests -----------------------------
    def __call__(self, method: str, params: Json) -> Json:
        if self.failure is not None:  # an in-process implementation swallowed our failure: refuse everything
            raise RpcError(TOOL_FAILED, "the harness already stopped this run", {"category": "INTERNAL_ERROR"})
        if method == "tool.execute":
            return self.execute(params)
        if method == "model.next" and self.method == "loop.run":
            return self.model_next(params)
        self.failure = ProtocolFailure("P4", "unexpected-request",
                                       f"a {show(method, 40)} request from the implementation during {self.method}")
        raise self.failure

    def canary(self, k: int) -> str:
        if self.salt is None:
            self.salt = zlib.crc32(json.dumps([self.step.get("config"), self.step.get("calls"), self.step.get("model")],
                                              sort_keys=True, default=str).encode())
        return f"{CANARY_MARK}{self.salt:08x}-{k}"

    def execute(self, params: Json) -> Json:
        if not isinstance(params, dict):
            self.failure = ProtocolFailure("P5", "bad-params", "tool.execute params must be an object")
            raise self.failure
        if self.k >= self.exec_cap:
            self.failure = ProtocolFailure("P4", "flood", f"more than {self.exec_cap} tool.execute requests in one "
                                                          f"{self.method}")
            raise self.failure
        ctx = params.get("context")
        self.k += 1
        name = params.get("name")
        outcome = script_outcome(self.script, self.k, name, isinstance(name, str) and name in self.names)
        ev: dict[str, Json] = {
            "type": "execute", "callId": params.get("callId"), "name": name,
            "arguments": params.get("arguments"),
            "principal": ctx.get("principal") if isinstance(ctx, dict) else None,
        }
        if outcome.ok:
            ev["outcome"] = {"status": "ok", "output": outcome.output}
            self.events.append(ev)
            return {"output": outcome.output}
        secret = self.canary(self.k)
        ev["outcome"] = {"status": "error", "category": outcome.category, "canary": secret}
        self.events.append(ev)
        raise RpcError(TOOL_FAILED, f"tool failed: {secret}", {"category": outcome.category, "detail": secret})

    def model_next(self, params: Json) -> Json:
        if not isinstance(params, dict):
            self.failure = ProtocolFailure("P5", "bad-params", "model.next params must be an object")
            raise self.failure
        if self.rounds >= self.model_cap:
            self.failure = ProtocolFailure("P4", "flood", f"more than {self.model_cap} model.next requests in one "
                                                          "loop.run (the model had answered \"final\")")
            raise self.failure
        self.rounds += 1
        reply = dict(self.model[self.rounds - 1]) if self.rounds <= len(self.model) else dict(DEFAULT_REPLY)
        ev: dict[str, Json] = {"type": "model", "round": params.get("round"), "results": params.get("results"),
                               "reply": reply}
        extra = {k: v for k, v in params.items() if k not in ("round", "results")}
        if extra:  # whatever else the implementation shows the model (the judge searches it too)
            ev["extra"] = extra
        self.events.append(ev)
        if "error" in reply:
            raise RpcError(MODEL_FAILED, str(reply["error"]))
        if "raw" in reply:
            return reply["raw"]
        return reply


class _ConcurrentRecorder(_Recorder):
    """A concurrent step (PROTOCOL.md section 7): every ``tool.execute`` answer is held (C3) and
    released at a ``tool.waiting``, the one the schedule picks (C4); ``$/cancelRequest`` cancels a
    held one (C5); what is still held when the step is answered is answered ``-32800`` (C6)."""

    def __init__(self, step: Mapping[str, Json], method: str) -> None:
        super().__init__(step, method)
        self.choose = chooser(step.get("schedule", []))
        #: (execution number, JSON-RPC id, reply, result or None, error or None), in start order
        self.held: list[tuple[int, Json, Callable[..., None], Json, RpcError | None]] = []
        self.releases = 0
        self.notes = 0

    def request(self, rid: Json, method: str, params: Json, reply: Callable[..., None]) -> Json:
        if method != "tool.execute":
            return self(method, params)
        try:
            result, error = self(method, params), None
        except ProtocolFailure:
            raise
        except RpcError as err:
            if self.failure is not None:
                raise
            result, error = None, err
        self.held.append((self.k, rid, reply, result, error))
        return HOLD

    def notification(self, method: str, params: Json) -> None:
        if self.failure is not None:
            return
        if method == "tool.waiting" and self.held:
            n = len(self.held)
            c = self.choose(self.releases, [h[0] for h in self.held])
            k, _rid, reply, result, error = self.held.pop(c)
            self.releases += 1
            self.events.append({"type": "release", "execution": k, "choice": c, "of": n})
            reply(result, error)
            return
        if method == "$/cancelRequest":
            rid = params.get("id") if isinstance(params, dict) else None
            for i, h in enumerate(self.held):
                if h[1] == rid and rid is not None:
                    self.held.pop(i)
                    self.events.append({"type": "cancel", "execution": h[0]})
                    h[2](None, RpcError(REQUEST_CANCELLED, "request cancelled"))
                    return
        # anything else — another notification, tool.waiting with nothing held, cancelling a request
        # already answered or unknown — changes nothing, and is bounded like unsolicited traffic (P4)
        self.notes += 1
        if self.notes > MAX_UNSOLICITED:
            self.failure = ProtocolFailure("P4", "unsolicited-traffic",
                                           f"{self.notes} notifications during {self.method}; the last: {show(method, 40)}")
            raise self.failure

    def finish(self) -> None:
        """The step was answered (or failed): answer what is still held, so the exchange stays in step."""
        held, self.held = self.held, []
        for h in held:
            try:
                h[2](None, RpcError(REQUEST_CANCELLED, "the batch was answered while this execution ran"))
            except ProtocolFailure:
                return


def _run(impl: Impl, step: Mapping[str, Json], method: str, params: dict[str, Json],
         trace: dict[str, Json]) -> dict[str, Json]:
    rec = _ConcurrentRecorder(step, method) if is_concurrent(step) else _Recorder(step, method)
    trace["events"] = rec.events
    try:
        try:
            result = impl.call(method, params, rec)
        finally:
            if isinstance(rec, _ConcurrentRecorder):
                rec.finish()
    except ProtocolFailure as f:
        rec.events.append((rec.failure or f).to_event())
        return trace
    except RpcError as err:
        rec.events.append((rec.failure or ProtocolFailure(
            "P4", "error-response", f"{method} answered error {err.code}: {show(err.message, 200)}")).to_event())
        return trace
    if rec.failure is not None:
        rec.events.append(rec.failure.to_event())
        return trace
    rec.events.append({"type": "response", "result": result})
    # a message after this answer is this step's finding: whoever runs the next step on the same
    # process (the campaign, a replay) checks for one first (late_message), and a replay's last step
    # waits a moment for one
    return trace


def run_batch_step(impl: Impl, step: Mapping[str, Json]) -> dict[str, Json]:
    """Send one ``batch.run`` and return its trace. Never raises for a misbehaving implementation:
    protocol failures become a ``protocol-error`` event (the caller should then discard ``impl``)."""
    trace: dict[str, Json] = {"format": TRACE_FORMAT, "kind": "batch", "config": dict(step["config"]),
                              "calls": step["calls"]}
    info = getattr(impl, "info", None)
    if is_concurrent(step) and isinstance(impl, InProcessImpl) and not holds_answers(impl.target):
        # execute() answers at once (v1 only); an executor with held answers (HeldAnswers) is v1.1
        trace["events"] = [ProtocolFailure("P6", "capability", "this step runs concurrently (protocol v1.1), which "
                                           "needs an implementation process or an in-process executor with "
                                           "held answers; this one answers each execute() at once").to_event()]
        return trace
    if is_concurrent(step) and info and not announces_concurrency(info):
        # a concurrent step (a replayed case, say) for an implementation of protocol v1: it would wait
        # for answers the harness holds until the step times out; say so at once (PROTOCOL.md C1)
        trace["events"] = [ProtocolFailure("P6", "capability", "this step runs concurrently (protocol v1.1) and "
                                           "the implementation does not declare the 'concurrency' capability"
                                           ).to_event()]
        return trace
    return _run(impl, step, "batch.run", batch_params(step), trace)


def run_loop_step(impl: Impl, step: Mapping[str, Json]) -> dict[str, Json]:
    """Send one ``loop.run`` (the harness plays the model) and return its trace."""
    trace: dict[str, Json] = {"format": TRACE_FORMAT, "kind": "loop", "config": dict(step["config"])}
    return _run(impl, step, "loop.run", dict(step["config"]), trace)


def run_step(impl: Impl, step: Mapping[str, Json]) -> dict[str, Json]:
    kind = step.get("kind", "batch")
    if kind == "batch":
        return run_batch_step(impl, step)
    if kind == "loop":
        return run_loop_step(impl, step)
    raise ValueError(f"unknown step kind {kind!r}")


def failed_start_trace(step: Mapping[str, Json], failure: ProtocolFailure) -> dict[str, Json]:
    """The trace of a step whose implementation could not even be started/initialized."""
    kind = step.get("kind", "batch")
    trace: dict[str, Json] = {"format": TRACE_FORMAT, "kind": kind, "config": step["config"],
                              "events": [failure.to_event()]}
    if kind == "batch":
        trace["calls"] = step["calls"]
    return trace


def trace_failed(trace: Mapping[str, Json]) -> bool:
    """Did the step end with a protocol failure (the implementation should be restarted)?"""
    evs = trace.get("events") or []
    return bool(evs) and evs[-1].get("type") == "protocol-error"


# --------------------------------------------------------------------------------------------
# Messages after the answer
# --------------------------------------------------------------------------------------------

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
