"""The harness side of protocol v1.2 (spec/PROTOCOL.md section 8): one ``writes.run`` step.

The harness plays the **external system** of the step's write tools: it keeps its own idempotency
record by the key the implementation sends (``context.idempotencyKey``), counts each business key's
effects, answers each dispatch (``tool.execute``) as the step's tool script says — applied and
answered, rejected, applied or not with the answer lost (a timeout), or applied or not and the
implementation's process **killed** (SIGKILL of its group) without an answer — and answers lookups
(``tool.lookup``) from its record, or ``unavailable`` for the step's ``outages``, or kills the process
instead of answering at the step's ``crashes`` (a crash during reconciliation). After a kill it
starts a new process on the same state directory and sends the same ``writes.run`` (a resume).

Everything is recorded in a ``loopspec-trace/1`` trace of kind ``writes``, which
:mod:`loopspec.judge.writes` decides.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import zlib
from collections.abc import Callable, Mapping
from typing import Any, Final

from ..core.writes import RUN_ID, business_key
from ..judge.verdict import CANARY_PREFIX, TRACE_FORMAT
from ..protocol.rpc import TOOL_FAILED, ProtocolFailure, RpcError, show
from ._adapter import Impl, InProcessImpl

__all__ = [
    "LOST",
    "MAX_RESTARTS",
    "run_writes_step",
    "writes_params",
]

Json = Any

#: JSON-RPC error code of a dispatch whose answer is lost (a timeout; PROTOCOL.md W2).
LOST: Final = -32002
#: Restarts a step may ask for (at dispatches and lookups together); later ``restart`` entries are taken as
#: ``lose``, later ``crashes`` are answered as usual.
MAX_RESTARTS: Final = 3

#: Where state directories are made: memory-backed when the system has it (/dev/shm). The harness kills
#: processes, never the machine, so what a process wrote to the page cache survives its kill on any
#: file system; on tmpfs an fsync costs nothing (a writes step ran ~4x faster than on the disk's /tmp).
_STATE_ROOT: Final = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK | os.X_OK) else None

FAILURES: Final = ("DEPENDENCY_TEMPORARY", "NOT_FOUND_OR_NOT_ACCESSIBLE", "INTERNAL_ERROR")


class _Restart(BaseException):
    """Raised out of the handler to abandon the process mid-request (never caught by the RPC layer)."""


def writes_params(step: Mapping[str, Json], state_dir: str) -> dict[str, Json]:
    cfg = step["config"]
    return {"tools": cfg["tools"], "budget": cfg["budget"], "principal": cfg["principal"],
            "runId": cfg.get("runId", RUN_ID), "stateDir": state_dir, "calls": step["calls"]}


class _Remote:
    """The external system of one step, across the implementation's processes."""

    def __init__(self, step: Mapping[str, Json]) -> None:
        self.step = step
        cfg = step["config"]
        self.tools = {t["name"]: t for t in cfg["tools"] if isinstance(t, dict) and isinstance(t.get("name"), str)}
        self.run_id = cfg.get("runId", RUN_ID)
        self.script = step.get("script", [])
        self.outages = {n for n in step.get("outages", []) if isinstance(n, int)}
        self.crashes = {n for n in step.get("crashes", []) if isinstance(n, int)}
        self.record: dict[str, Json] = {}  # key sent -> the output recorded when it was applied
        self.events: list[dict[str, Json]] = []
        self.k = 0  # dispatches
        self.lookups = 0
        self.restarts = 0
        self.process = 1
        self.failure: ProtocolFailure | None = None
        self.cap = 2 * len(step.get("calls", [])) * (MAX_RESTARTS + 2) + 16
        self.salt = zlib.crc32(json.dumps([cfg, step.get("calls")], sort_keys=True, default=str).encode())

    def __call__(self, method: str, params: Json) -> Json:
        if self.failure is not None:
            raise RpcError(TOOL_FAILED, "the harness already stopped this run", {"category": "INTERNAL_ERROR"})
        if method == "tool.execute":
            return self.execute(params)
        if method == "tool.lookup":
            return self.lookup(params)
        self.failure = ProtocolFailure("P4", "unexpected-request", f"a {show(method, 40)} request during writes.run")
        raise self.failure

    def _common(self, params: Json, what: str) -> tuple[Json, Json, Json, Json]:
        if not isinstance(params, dict):
            self.failure = ProtocolFailure("P5", "bad-params", f"{what} params must be an object")
            raise self.failure
        ctx = params.get("context") if isinstance(params.get("context"), dict) else {}
        key = ctx.get("idempotencyKey")
        if not isinstance(key, str) or not key or len(key) > 1024:
            self.failure = ProtocolFailure("P5", "bad-params", f"{what} needs context.idempotencyKey, a non-empty "
                                                               "string of at most 1024 characters (PROTOCOL.md W2)")
            raise self.failure
        return params.get("name"), params.get("arguments"), ctx.get("principal"), key

    def execute(self, params: Json) -> Json:
        name, args, principal, key = self._common(params, "tool.execute")
        if self.k >= self.cap:
            self.failure = ProtocolFailure("P4", "flood", f"more than {self.cap} tool.execute requests in one writes.run")
            raise self.failure
        self.k += 1
        tool = self.tools.get(name) if isinstance(name, str) else None
        ev: dict[str, Json] = {"type": "execute", "callId": params.get("callId"), "name": name, "arguments": args,
                               "principal": principal, "key": key,
                               "business": business_key(tool, args, principal, self.run_id), "process": self.process}
        self.events.append(ev)
        entry = self.script[self.k - 1] if self.k <= len(self.script) else {}
        entry = entry if isinstance(entry, dict) else {}
        if tool is None:  # no such tool: nothing applied
            ev["outcome"] = {"status": "error", "category": "INTERNAL_ERROR", "applied": False}
            raise RpcError(TOOL_FAILED, "tool failed: no such tool", {"category": "INTERNAL_ERROR"})
        dedup = tool.get("reconcile") == "record" and key in self.record
        value = entry.get("value", {"tool": name, "execution": self.k})
        if "restart" in entry or "lose" in entry:
            how = entry.get("restart", entry.get("lose"))
            applied = how == "applied" and not dedup
            if applied:
                self.record[key] = value
            restart = "restart" in entry and self.restarts < MAX_RESTARTS
            ev["outcome"] = {"status": "restart" if restart else "lost", "applied": applied}
            if applied:
                ev["outcome"]["output"] = value
            if restart:
                self.restarts += 1
                raise _Restart()
            raise RpcError(LOST, "timed out", {"outcome": "unknown"})
        if dedup:  # the record answers the first result, applies nothing
            ev["outcome"] = {"status": "ok", "output": self.record[key], "applied": False, "deduplicated": True}
            return {"output": self.record[key]}
        if "fail" in entry and entry["fail"] in FAILURES:
            secret = f"{CANARY_PREFIX}{self.salt:08x}-{self.k}"
            ev["outcome"] = {"status": "error", "category": entry["fail"], "applied": False, "canary": secret}
            raise RpcError(TOOL_FAILED, f"tool failed: {secret}", {"category": entry["fail"], "detail": secret})
        self.record[key] = value
        ev["outcome"] = {"status": "ok", "output": value, "applied": True}
        return {"output": value}

    def lookup(self, params: Json) -> Json:
        name, args, principal, key = self._common(params, "tool.lookup")
        if self.lookups >= self.cap:
            self.failure = ProtocolFailure("P4", "flood", f"more than {self.cap} tool.lookup requests in one writes.run")
            raise self.failure
        self.lookups += 1
        tool = self.tools.get(name) if isinstance(name, str) else None
        ev: dict[str, Json] = {"type": "lookup", "name": name, "arguments": args, "principal": principal, "key": key,
                               "business": business_key(tool, args, principal, self.run_id), "process": self.process}
        self.events.append(ev)
        if self.lookups in self.crashes and self.restarts < MAX_RESTARTS:  # no answer: the process is killed
            ev["outcome"] = {"status": "restart"}
            self.restarts += 1
            raise _Restart()
        if tool is None or tool.get("reconcile") == "none" or self.lookups in self.outages:
            ev["outcome"] = {"status": "unavailable"}
            raise RpcError(TOOL_FAILED, "lookup unavailable", {"category": "DEPENDENCY_TEMPORARY"})
        if key in self.record:
            ev["outcome"] = {"status": "applied", "output": self.record[key]}
            return {"applied": True, "output": self.record[key]}
        ev["outcome"] = {"status": "not-applied"}
        return {"applied": False}


def run_writes_step(impl: Impl, step: Mapping[str, Json],
                    reopen: Callable[[], Impl], release: Callable[[Impl], None]) -> tuple[dict[str, Json], Impl | None]:
    """Run one writes step, restarting the implementation where the script says; returns the trace and the
    live implementation afterwards (None when it had to be dropped). Never raises for a misbehaving
    implementation: protocol failures become a ``protocol-error`` event."""
    trace: dict[str, Json] = {"format": TRACE_FORMAT, "kind": "writes", "config": dict(step["config"]),
                              "calls": step["calls"], "environment": {"outages": list(step.get("outages", []))}}
    if step.get("crashes"):  # absent in older traces: none
        trace["environment"]["crashes"] = list(step["crashes"])
    remote = _Remote(step)
    trace["events"] = remote.events
    if isinstance(impl, InProcessImpl):
        remote.events.append(ProtocolFailure("P6", "capability", "a writes step restarts the implementation's "
                                             "process, which needs an implementation process").to_event())
        return trace, impl
    state = tempfile.mkdtemp(prefix="loopspec-w-", dir=_STATE_ROOT)
    cur: Impl | None = impl
    try:
        while True:
            assert cur is not None
            try:
                result = cur.call("writes.run", writes_params(step, state), remote)
            except _Restart:
                release(cur)  # unhealthy: the process group is killed (SIGKILL)
                cur = None
                remote.events.append({"type": "restart", "process": remote.process + 1})
                remote.process += 1
                try:
                    cur = reopen()
                except Exception as exc:  # the new process could not start or initialize
                    f = exc if isinstance(exc, ProtocolFailure) else ProtocolFailure("P1", "exited", str(exc))
                    remote.events.append(f.to_event())
                    return trace, None
                continue
            except ProtocolFailure as f:
                remote.events.append((remote.failure or f).to_event())
                return trace, cur
            except RpcError as err:
                remote.events.append((remote.failure or ProtocolFailure(
                    "P4", "error-response", f"writes.run answered error {err.code}: {show(err.message, 200)}")).to_event())
                return trace, cur
            if remote.failure is not None:
                remote.events.append(remote.failure.to_event())
                return trace, cur
            remote.events.append({"type": "response", "result": result})
            return trace, cur
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(state, ignore_errors=True)
