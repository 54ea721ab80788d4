"""Section 6 in the loop engine: the write tools of a run go through its durable operation ledger.

:func:`writes_for_run` wraps each write tool of a run (``Tool.write`` set) so that its execution is a
:class:`~loopspec.engine.oplog.WriteExecutor` request — intent, dispatch mark, send, result, answer (R39–R41),
``OUTCOME_UNKNOWN`` (R42), reconciliation before any re-send (R43), replay from the ledger (R44), the
dispatch budget (R45) — and, at the end of the run, reconciles what is unknown (R46).
:func:`resume` continues a crashed run: every unknown outcome of the run is reconciled through the
tool's lookup before anything else, then the loop runs again under the same run id, and each request
whose answer the ledger recorded gets that answer (nothing is sent again).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ..core import rules as core
from ..core import writes as w
from ..core.ledger import digest
from .oplog import (
    LedgerFailure,
    LedgerNotFound,
    OperationLedger,
    OpRecord,
    Rejected,
    WriteExecutor,
    WriteHandler,
)
from .oplog_open import open_operation_ledger

__all__ = [
    "RunWrites",
    "writes_for_run",
]

_NO_LIMIT = 2**31 - 1


_RESULT_OPS = frozenset({"confirm", "reconcile_applied", "replay"})  # the transitions that record or answer a result


@dataclasses.dataclass
class RunWrites:
    """What the engine needs of a run's writes: its tools (write tools wrapped), the reconciliations of R46, the
    restart's facts and the listener that turns each operation transition into a run ledger event (R27)."""

    tools: dict[str, Any]
    resuming: bool = False
    ex: WriteExecutor | None = None
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    #: the unknown keys found by the latest reconciliation (None: not reconciled yet)
    unreconciled: tuple[str, ...] | None = None

    @property
    def active(self) -> bool:
        return self.ex is not None

    def attach(self, emit: Callable[..., None]) -> None:
        """Record every operation transition in the run ledger as ``write_recorded`` (after its commit), and every
        one the operation ledger failed to record as ``write_failed`` (R40)."""
        if self.ex is None:
            return

        def told(index: int | None, call_id: str | None, tool: str, key: str, name: str, frm: str, rec: OpRecord) -> None:
            emit("write_recorded", None, index=index, callId=call_id, tool=tool, key=key, op=w.op_transition_id(name),
                 **{"from": frm, "to": rec.state}, resultDigest=digest(rec.result) if name in _RESULT_OPS else None)

        def failed(index: int | None, call_id: str | None, tool: str, key: str, name: str, frm: str) -> None:
            emit("write_failed", None, index=index, callId=call_id, tool=tool, key=key, op=w.op_transition_id(name),
                 **{"from": frm})
        self.ex.listener = told
        self.ex.failure_listener = failed

    def detach(self) -> None:
        if self.ex is not None:
            self.ex.listener = None
            self.ex.failure_listener = None

    def restart_facts(self) -> dict[str, Any]:
        """``run_resumed``'s facts: the run's operations and dispatch marks as the operation ledger holds them."""
        assert self.ex is not None
        ops = self.ex._read("list the run's operations", self.ex.ledger.operations, self.ex.run_id)
        return {"operations": [{"key": r.key, "tool": r.tool, "state": r.state} for r in ops],
                "dispatched": self.ex.dispatched()}

    def recover(self) -> None:
        """R46: dispatch marks without a result become unknown; every unknown operation is reconciled."""
        assert self.ex is not None
        with self.lock:
            self.ex.resume()

    def reconcile(self) -> list[str]:
        """The end-of-run reconciliation (R46), before the terminal state is chosen: the keys still unknown."""
        assert self.ex is not None
        with self.lock:
            done = list(self.ex.finish()["unreconciled"])
        self.unreconciled = tuple(done)
        return done

    def settle(self) -> tuple[str, ...] | None:
        """At the terminal step: the end-of-run reconciliation, unless the final answer's already ran (T35/T06)
        or a write is still running (a cancelled run: :meth:`finish` does it after the run)."""
        if self.ex is None:
            return ()
        if self.unreconciled is not None:
            return self.unreconciled
        if not self.lock.acquire(blocking=False):
            return None
        try:
            self.unreconciled = tuple(self.ex.finish()["unreconciled"])
        finally:
            self.lock.release()
        return self.unreconciled

    def finish(self, outcome: Any) -> Any:
        """The run's outcome with the keys still unknown (R46). The run ledger is complete by now: a reconciliation
        still due is recorded in the operation ledger only."""
        if self.ex is None:
            return outcome
        self.detach()
        if self.unreconciled is None:
            self.unreconciled = tuple(self.ex.finish()["unreconciled"])
        return dataclasses.replace(outcome, unreconciled=self.unreconciled)


def _holds_run(ledger: Any, run_id: str) -> bool:
    """Did run ``run_id`` start with ``ledger`` (``record_run``) or record anything in it? A ledger object without
    ``holds_run`` is asked for the run's operations and dispatch marks."""
    holds = getattr(ledger, "holds_run", None)
    if callable(holds):
        return bool(holds(run_id))
    return bool(ledger.operations(run_id)) or ledger.dispatches(run_id) > 0


def _name(ops: Any) -> str:
    if isinstance(ops, str) and ops.startswith(("postgresql://", "postgres://")):
        return "a PostgreSQL database"
    return str(ops) if isinstance(ops, str | os.PathLike) else type(ops).__name__


@contextlib.contextmanager
def writes_for_run(tools: Mapping[str, Any], ops: Any, config: core.RunConfig, *,
                   resuming: bool = False) -> Iterator[RunWrites]:
    """The run's writes (:class:`RunWrites`): write tools wrapped so that each request goes through the operation
    ledger ``ops``; without write tools, the tools as they are."""
    from .base import EngineError, ToolFailure, Uncharged, WriteAnswer

    writes = {n: t for n, t in tools.items() if t.write is not None}
    if not writes:
        if resuming:
            raise EngineError("resume: the run has no write tools, so the operation ledger holds nothing to resume")
        yield RunWrites(dict(tools))
        return
    opened = not hasattr(ops, "transition")  # a path (or None): ours to close
    # R46: a run is continued from the ledger that holds it; one that does not exist is never created
    ledger: OperationLedger = open_operation_ledger(ops, create=not resuming)
    try:
        if resuming and not _holds_run(ledger, config.run_id):
            raise LedgerNotFound(f"resume: run {config.run_id!r} is not in this operation ledger ({_name(ops)}): it "
                                 "did not start with it, so nothing is known of its writes and resuming from it would "
                                 "send them all again (give the ledger the run used)")
        record = getattr(ledger, "record_run", None)
        if not resuming and callable(record):
            try:  # R46: what a resume after a crash before the first write finds
                record(config.run_id)
            except Exception as exc:
                raise LedgerFailure(f"the operation ledger cannot record the start of run {config.run_id!r}, so the "
                                    f"run does not start (nothing was sent): {type(exc).__name__}: {exc}") from exc
    except BaseException:
        if opened:
            ledger.close()
        raise
    current: dict[str, Any] = {}  # tool name -> the ToolContext of the request being answered

    def sender(name: str) -> Callable[[Mapping[str, Any], str], Any]:
        fn = writes[name].fn

        def send(arguments: Mapping[str, Any], key: str) -> Any:
            ctx = dataclasses.replace(current[name], idempotency_key=key)
            try:
                return fn(dict(arguments), ctx)
            except ToolFailure as f:  # the tool says the external system did not apply it (R41)
                raise Rejected(f.category) from None
        return send

    handlers = {n: WriteHandler(t.write, sender(n), t.lookup) for n, t in writes.items()}
    limit = config.limits.max_executions
    ex = WriteExecutor(ledger, handlers, config.principal, config.run_id,
                       budget=_NO_LIMIT if limit is None else limit)
    rw = RunWrites({}, resuming, ex)
    lock = rw.lock

    def through_ledger(name: str) -> Callable[[dict[str, Any], Any], Any]:
        def fn(arguments: dict[str, Any], ctx: Any) -> Any:
            with lock:  # one write at a time: the executor answers a run's requests in order
                current[name] = ctx
                answer = ex.call(ctx.request_index, ctx.call_id, name, arguments, reuse=ctx.attempt <= 1)
                charged = ex.marked  # R45: only an execution that recorded a dispatch mark uses the budgets up
            if answer["status"] == "ok":
                return answer["output"] if charged else Uncharged(answer["output"])
            code = answer["code"]
            if code in core.FAILURE_CATEGORIES and charged:
                raise ToolFailure(code)
            raise WriteAnswer(code, charged)  # OUTCOME_UNKNOWN (R42), BUDGET_EXHAUSTED (R45), a recorded answer
        return fn

    rw.tools = {n: (dataclasses.replace(t, fn=through_ledger(n)) if n in writes else t) for n, t in tools.items()}
    try:
        yield rw
    finally:
        rw.detach()
        if opened:
            ledger.close()


