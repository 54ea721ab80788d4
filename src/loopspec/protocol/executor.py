"""The in-process side of the adapter protocol (spec/PROTOCOL.md): what an implementation written in Python
subclasses, and loopspec's own engine behind it.

:class:`Executor` turns the protocol into two methods, ``batch_run(params, execute)`` and
``loop_run(params, execute, model_next)``; :class:`HeldAnswers` lets async tool bodies await answers the
harness holds (protocol v1.1, concurrent steps); :class:`ReferenceExecutor` is the reference engine behind
that interface, and :func:`serve_stdio` serves any executor as a process (``loopspec serve``). The harness
side — starting processes, timeouts, reaping — is :mod:`loopspec.fuzz._adapter`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any, Final, Protocol, runtime_checkable

from ..core import rules as core
from ..judge.loop import LOOP_RESULT_FIELDS
from .rpc import INTERNAL, INVALID_PARAMS, METHOD_NOT_FOUND, ProtocolFailure, RpcError
from .wire import WireError, decode_line

__all__ = ["PROTOCOL_VERSION", "ExecuteFn", "Executor", "HeldAnswers", "InProcess", "ModelFailure", "ModelFn", "ReferenceExecutor", "outcome_to_result", "parse_limits", "reference_loop_run", "serve_stdio"]

Json = Any


PROTOCOL_VERSION = 1


ExecuteFn = Callable[[str, str, dict[str, Json], str], Json]


ModelFn = Callable[[int, list[Json]], Json]


class ModelFailure(Exception):
    """``model.next`` answered with an error: the model failed (the run ends MODEL_ERROR, R18)."""


@runtime_checkable
class InProcess(Protocol):
    def handle(self, method: str, params: Json, call: Callable[[str, Json], Json]) -> Json: ...


class Executor:
    """Base class for an implementation of the adapter protocol in Python.

    Override :meth:`batch_run` (and :meth:`loop_run` for loop mode). ``execute(call_id, name,
    arguments, principal)`` runs a tool on the harness and returns its output, or raises
    :class:`loopspec.ToolFailure` with the failure category. ``model_next(round, results)`` asks
    the harness's model for its next move and returns ``{"calls": [...]}`` or ``{"final": str}``
    (raises :class:`ModelFailure` when the model fails).
    """

    name = "python-executor"
    version = "0"
    #: the executor runs concurrent steps in process: its tool bodies are coroutines awaiting
    #: ``execute.held.execute(...)`` (:class:`HeldAnswers`), and it announces ``concurrency``
    holds_answers = False
    #: protocol 1.3: the executor's fixed registry, as MCP's ``tools/list`` gives tools ({name, description,
    #: inputSchema, annotations}); None: it takes the tools each batch.run / loop.run offers
    tools: list[dict[str, Json]] | None = None
    #: protocol 1.3: what it does not support, among ``continue`` (continue mode) and ``error-results`` (error
    #: answers per call: it rejects a whole batch instead, ``{"rejected": {"code"}, "executed": n}``)
    unsupported: tuple[str, ...] = ()

    def batch_run(self, params: dict[str, Json], execute: ExecuteFn) -> dict[str, Json]:
        raise NotImplementedError

    def loop_run(self, params: dict[str, Json], execute: ExecuteFn, model_next: ModelFn) -> dict[str, Json]:
        raise NotImplementedError

    def capabilities(self) -> dict[str, bool]:
        cls = type(self)
        return {"batch": cls.batch_run is not Executor.batch_run, "loop": cls.loop_run is not Executor.loop_run}

    # -- the protocol --------------------------------------------------------------------
    def handle(self, method: str, params: Json, call: Callable[[str, Json], Json]) -> Json:
        if method == "initialize":
            info: dict[str, Json] = {"name": self.name, "version": self.version, "capabilities": self.capabilities()}
            if self.tools is not None:
                info["tools"] = self.tools
            if self.unsupported:
                info["unsupported"] = list(self.unsupported)
            return info
        if method == "shutdown":
            return None
        if method == "batch.run":
            return self.batch_run(_params(params), _execute_via(call))
        if method == "loop.run":
            return self.loop_run(_params(params), _execute_via(call), _model_via(call))
        raise RpcError(METHOD_NOT_FOUND, f"no method {method}")


def _params(params: Json) -> dict[str, Json]:
    if not isinstance(params, dict):
        raise RpcError(INVALID_PARAMS, "params must be an object")
    return params


def _execute_via(call: Callable[[str, Json], Json]) -> ExecuteFn:
    from ..engine.base import ToolFailure

    held = getattr(call, "held", None)

    def execute(call_id: str, name: str, arguments: dict[str, Json], principal: str) -> Json:
        try:
            res = call("tool.execute", {"callId": call_id, "name": name, "arguments": arguments,
                                        "context": {"principal": principal}})
        except RpcError as err:
            cat = err.data.get("category") if isinstance(err.data, dict) else None
            raise ToolFailure(cat if cat in core.FAILURE_CATEGORIES else "INTERNAL_ERROR") from None
        if not isinstance(res, dict) or "output" not in res:
            raise ToolFailure("INTERNAL_ERROR")
        return res["output"]

    execute.held = held  # type: ignore[attr-defined]  # a concurrent step's HeldAnswers (or None)
    return execute


class HeldAnswers:
    """Protocol v1.1 for an in-process target (PROTOCOL.md section 7, section 6): async tool bodies
    await answers the harness holds and releases in the order its schedule picks.

    ``await held.execute(call_id, name, arguments, principal)`` sends the ``tool.execute`` at once (the
    start of the execution, C2) and awaits its release; a body cancelled while it waits sends
    ``$/cancelRequest`` (C5). :meth:`drive` runs the target's coroutine with a watcher that says
    ``tool.waiting`` (C3) when the event loop is idle — no callback ready, so every task is blocked —
    while answers are held: the framework has started everything it will start before a result
    lands. Only what the framework runs as tasks on this event loop is seen (work in another thread
    is not), which is why the framework adapters make their tool bodies coroutines."""

    #: consecutive idle passes of the event loop before ``tool.waiting`` (a task woken by a callback
    #: scheduled in the same pass is seen at the next one)
    QUIET: Final = 3
    #: passes when the loop gives no view of its ready queue (not the default asyncio loop)
    BLIND: Final = 64

    def __init__(self, request: Callable[..., Json], notify: Callable[[str, Json], None]) -> None:
        self._request = request
        self._notify = notify
        self._next = 0
        self._pending: list[Any] = []  # the futures of held answers
        self._wake: Any = None
        self.failure: BaseException | None = None

    async def execute(self, call_id: str, name: str, arguments: dict[str, Json], principal: str) -> Json:
        import asyncio

        from ..engine.base import ToolFailure
        from .rpc import HOLD

        loop = asyncio.get_running_loop()
        fut = loop.create_future()

        answered: list[bool] = []

        def reply(result: Json = None, error: RpcError | None = None) -> None:
            answered.append(True)
            if not fut.done():
                with contextlib.suppress(RuntimeError):  # the run is over and its loop closed
                    fut.set_result((roundtrip(result, "the result of tool.execute"), error))

        self._next += 1
        rid = self._next
        params = roundtrip({"callId": call_id, "name": name, "arguments": arguments,
                             "context": {"principal": principal}}, "the params of tool.execute")
        if self.failure is not None:
            raise ToolFailure("INTERNAL_ERROR")
        try:
            got = self._request(rid, "tool.execute", params, reply)
        except RpcError as err:
            got, fut = None, None
            result, error = None, err
        if fut is not None:
            if got is not HOLD:
                result, error = roundtrip(got, "the result of tool.execute"), None
            else:
                self._pending.append(fut)
                if self._wake is not None:
                    self._wake.set()
                try:
                    result, error = await fut
                except asyncio.CancelledError:  # (cancelling the task cancelled ``fut`` too)
                    if not answered:
                        self._notify("$/cancelRequest", {"id": rid})
                    raise
        if error is not None:
            cat = error.data.get("category") if isinstance(error.data, dict) else None
            raise ToolFailure(cat if cat in core.FAILURE_CATEGORIES else "INTERNAL_ERROR")
        if not isinstance(result, dict) or "output" not in result:
            raise ToolFailure("INTERNAL_ERROR")
        return result["output"]

    async def drive(self, coro: Any) -> Any:
        """Run ``coro`` (the framework's run) with the watcher beside it."""
        import asyncio

        self._wake = asyncio.Event()
        watcher = asyncio.ensure_future(self._watch())
        try:
            return await coro
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watcher

    async def _watch(self) -> None:
        import asyncio

        loop = asyncio.get_running_loop()
        quiet = 0
        while True:
            self._pending = [f for f in self._pending if not f.done()]
            if not self._pending:
                self._wake.clear()
                await self._wake.wait()
                quiet = 0
                continue
            await asyncio.sleep(0)
            ready = getattr(loop, "_ready", None)  # asyncio's ready queue (BaseEventLoop)
            if ready is None:
                quiet += 1
                enough = self.BLIND
            else:
                quiet = quiet + 1 if not ready else 0
                enough = self.QUIET
            if quiet < enough:
                continue
            quiet = 0
            try:
                self._notify("tool.waiting", {})
            except BaseException as exc:  # P4 past the notification limit: stop the run's tools
                self.failure = exc
                for f in self._pending:
                    if not f.done():
                        f.set_result((None, RpcError(INTERNAL, "the harness stopped this run")))
                return


def _model_via(call: Callable[[str, Json], Json]) -> ModelFn:
    def model_next(round_: int, results: list[Json]) -> Json:
        try:
            return call("model.next", {"round": round_, "results": results})
        except RpcError:
            raise ModelFailure("the model failed") from None

    return model_next


class ReferenceExecutor(Executor):
    """The reference engine behind the adapter interface (``loopspec serve``)."""

    name = "loopspec-reference"

    def __init__(self) -> None:
        from .. import __version__

        self.version = __version__

    def _tools(self, raw: Json, execute: ExecuteFn) -> list[Any]:
        from ..engine.reference import Tool, ToolContext

        if not isinstance(raw, list):
            raise RpcError(INVALID_PARAMS, "tools must be a list")
        tools = []
        for t in raw:
            if not isinstance(t, dict) or not isinstance(t.get("name"), str):
                raise RpcError(INVALID_PARAMS, "each tool needs a string name")
            name = t["name"]

            def fn(args: dict[str, Json], ctx: ToolContext, name: str = name) -> Json:
                return execute(ctx.call_id, name, args, ctx.principal)

            try:
                tools.append(Tool.define(name, fn, t.get("inputSchema"), max_executions=t.get("maxExecutions")))
            except (core.ToolDefinitionError, ValueError) as exc:
                raise RpcError(INVALID_PARAMS, str(exc)) from None
        return tools

    def batch_run(self, params: dict[str, Json], execute: ExecuteFn) -> dict[str, Json]:
        from ..engine.reference import run_batch

        tools = self._tools(params.get("tools"), execute)
        try:
            out = run_batch(params.get("calls", []), tools=tools, budget=params.get("budget"),
                            mode=params.get("mode", "abort"), principal=params.get("principal", "anonymous"))
        except (ValueError, TypeError) as exc:
            raise RpcError(INVALID_PARAMS, str(exc)) from None
        j = out.to_json()
        return {"results": j["results"], "executed": j["executed"], "aborted": j["aborted"]}

    def loop_run(self, params: dict[str, Json], execute: ExecuteFn, model_next: ModelFn) -> dict[str, Json]:
        return reference_loop_run(self, params, execute, model_next)


def parse_limits(raw: Json) -> Any:
    """A ``loop.run``'s ``limits`` as the protocol sends them (camelCase keys, null for no limit) as the core's
    ``Limits``, or None when there are none; :class:`RpcError` ``INVALID_PARAMS`` when they are not limits."""
    from ..core.rules import Limits

    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) - set(_LIMITS):
        raise RpcError(INVALID_PARAMS, f"limits must be an object with keys among {sorted(_LIMITS)}")
    try:
        return Limits(**{_LIMITS[k]: v for k, v in raw.items() if v is not None})
    except (ValueError, TypeError) as exc:
        raise RpcError(INVALID_PARAMS, str(exc)) from None


def outcome_to_result(outcome: Any) -> dict[str, Json]:
    """A loop.run result from an engine RunOutcome (the fields of LOOP_RESULT_FIELDS)."""
    j = outcome.to_json()
    values = {**j, "rounds": j["counters"]["modelRequests"]}
    return {k: values[k] for k in LOOP_RESULT_FIELDS}


def reference_loop_run(executor: ReferenceExecutor, params: dict[str, Json], execute: ExecuteFn,
                       model_next: ModelFn) -> dict[str, Json]:
    from ..engine.reference import run_loop

    tools = executor._tools(params.get("tools"), execute)

    def model(turn: Any) -> Json:
        return model_next(turn.round, list(turn.results))

    try:
        out = run_loop(model, tools=tools, limits=parse_limits(params.get("limits")), mode=params.get("mode"),
                       on_limit=params.get("onLimit"), principal=params.get("principal", "anonymous"))
    except (ValueError, TypeError) as exc:
        raise RpcError(INVALID_PARAMS, str(exc)) from None
    return outcome_to_result(out)


def serve_stdio(executor: InProcess, rfd: int = 0, wfd: int = 1) -> None:
    """Run ``executor`` as an adapter process on the given descriptors until shutdown / EOF (the
    JSON-RPC server is :class:`loopspec.protocol.server.Server`).

    An executor that :func:`holds_answers` gets, in a ``batch.run`` whose params carry ``concurrency``
    (a concurrent step, PROTOCOL.md C1), an ``execute.held`` (:class:`HeldAnswers`) as in process
    (PROTOCOL.md section 6): its ``tool.execute`` requests are sent without waiting (C2), a
    ``tool.waiting`` is followed by reading until the harness releases one of them (C3), a
    ``$/cancelRequest`` names the request's id on the wire (C5), and the ``-32800`` answers to cancelled
    or abandoned requests (C5, C6) are ignored like any response nobody waits for."""
    from .server import RemoteError, Server

    def translate(exc: BaseException) -> tuple[int, str, Json]:
        if isinstance(exc, RpcError):
            return exc.code, exc.message, exc.data
        if isinstance(exc, ProtocolFailure):
            return INTERNAL, f"the harness broke the protocol: {exc}", None
        return INTERNAL, f"internal error: {type(exc).__name__}", None  # never a traceback on the wire

    def call(method: str, params: Json) -> Json:
        try:
            return server.call(method, params)
        except RemoteError as err:
            raise RpcError(err.code if err.code.__class__ is int else INTERNAL, str(err.message), err.data) from None

    def held_call() -> Callable[[str, Json], Json]:
        """``call`` with a concurrent step's held answers (``.held``), bridged to the wire."""
        wire: dict[Json, int] = {}  # HeldAnswers' request id -> its JSON-RPC id on the wire

        def request(rid: Json, method: str, params: Json, reply: Callable[..., None]) -> Json:
            from .rpc import HOLD

            def answered(result: Json, err: RemoteError | None) -> None:
                reply(result, None if err is None else RpcError(
                    err.code if err.code.__class__ is int else INTERNAL, str(err.message), err.data))

            wire[rid] = server.send_request(method, params, answered)
            return HOLD

        def notify(method: str, params: Json) -> None:
            if method == "$/cancelRequest" and isinstance(params, dict) and params.get("id") in wire:
                wid = wire[params["id"]]
                server.forget(wid)  # the harness answers it -32800 at once: ignored when read (C5)
                server.notify(method, {**params, "id": wid})
                return
            server.notify(method, params)
            if method == "tool.waiting":
                server.wait_answer()  # the one answer the harness releases now (C3)

        def bridged(method: str, params: Json) -> Json:
            return call(method, params)

        bridged.held = HeldAnswers(request, notify)  # type: ignore[attr-defined]
        bridged.wire = wire  # type: ignore[attr-defined]
        return bridged

    def handle(method: str, params: Json, _call: Any) -> Json:
        if not (method == "batch.run" and holds_answers(executor) and isinstance(params, dict)
                and isinstance(params.get("concurrency"), dict)):
            return executor.handle(method, params, call)
        bridged = held_call()
        try:
            return executor.handle(method, params, bridged)
        finally:
            for wid in bridged.wire.values():  # type: ignore[attr-defined]
                server.forget(wid)  # still held when the step is answered: answered -32800 after it (C6)

    server = Server(handle, rfd, wfd, translate=translate)
    server.serve()


_LIMITS: Final = {"maxRounds": "max_rounds", "maxExecutions": "max_executions",
                  "maxToolExecutions": "max_tool_executions", "maxRequests": "max_requests",
                  "maxRetries": "max_retries", "deadline": "deadline"}


def roundtrip(value: Json, what: str) -> Json:
    """``value`` through JSON text and the harness's own reader (the limits of spec/PROTOCOL.md)."""
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise ProtocolFailure("P5", "not-json", f"{what} is not JSON: {exc}") from None
    except RecursionError:
        raise ProtocolFailure("P3", "too-deep", f"{what} is nested too deep to write as JSON") from None
    try:
        return decode_line(text.encode("utf-8", "surrogatepass"))
    except WireError as exc:
        raise ProtocolFailure("P3", exc.kind, f"{what}: {exc.detail}") from None


def holds_answers(target: Any) -> bool:
    """Does this in-process target (class or object) await held answers (:class:`HeldAnswers`), so it
    can run concurrent steps? An :class:`Executor` says so with ``holds_answers = True``."""
    return getattr(target, "holds_answers", False) is True
