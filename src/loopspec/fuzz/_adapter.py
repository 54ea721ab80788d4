"""Implementations under test, seen from the harness, and the in-process adapter interface.

Two ways to plug an implementation in (spec/PROTOCOL.md):

* a **process** speaking newline-delimited JSON-RPC 2.0 on stdin/stdout, in any language
  (``loopspec fuzz --impl "java -cp build Executor"``);
* an **in-process Python object** with ``handle(method, params, call)`` — usually a subclass of
  :class:`Executor`, which turns the protocol into two methods, ``batch_run(params, execute)`` and
  ``loop_run(params, execute, model_next)``. Every message still goes through a JSON round trip,
  so an in-process run is judged exactly like a process run.

:class:`ReferenceExecutor` is loopspec's own engine behind that interface; ``loopspec serve``
exposes it as a process (a correct baseline, and a model for implementers).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Protocol, runtime_checkable

from .. import _core as core
from .._judge_loop import LOOP_RESULT_FIELDS
from ._rpc import (
    INTERNAL,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    Channel,
    Handler,
    Peer,
    ProtocolFailure,
    RpcError,
    process_activity,
)
from ._wire import WireError, decode_line

__all__ = [
    "PROTOCOL_VERSION",
    "Executor",
    "HeldAnswers",
    "Impl",
    "ImplFactory",
    "ModelFailure",
    "ReferenceExecutor",
    "StartError",
]

Json = Any
PROTOCOL_VERSION = 1

ExecuteFn = Callable[[str, str, dict[str, Json], str], Json]
ModelFn = Callable[[int, list[Json]], Json]


class StartError(Exception):
    """The implementation cannot be started at all (bad command, or it dies before initialize)."""


class ModelFailure(Exception):
    """``model.next`` answered with an error: the model failed (the run ends MODEL_ERROR, R18)."""


# --------------------------------------------------------------------------------------------
# The in-process interface
# --------------------------------------------------------------------------------------------


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
            return {"name": self.name, "version": self.version, "capabilities": self.capabilities()}
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
    from .._engine import ToolFailure

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

        from .._engine import ToolFailure
        from ._rpc import HOLD

        loop = asyncio.get_running_loop()
        fut = loop.create_future()

        answered: list[bool] = []

        def reply(result: Json = None, error: RpcError | None = None) -> None:
            answered.append(True)
            if not fut.done():
                with contextlib.suppress(RuntimeError):  # the run is over and its loop closed
                    fut.set_result((_roundtrip(result, "the result of tool.execute"), error))

        self._next += 1
        rid = self._next
        params = _roundtrip({"callId": call_id, "name": name, "arguments": arguments,
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
                result, error = _roundtrip(got, "the result of tool.execute"), None
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
        from .._engine import Tool, ToolContext

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
        from .._engine import run_batch

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


_LIMITS: Final = {"maxRounds": "max_rounds", "maxExecutions": "max_executions",
                  "maxToolExecutions": "max_tool_executions", "maxRequests": "max_requests",
                  "maxRetries": "max_retries", "deadline": "deadline"}


def _limits(raw: Json) -> Any:
    from .._core import Limits

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
    from .._engine import run_loop

    tools = executor._tools(params.get("tools"), execute)

    def model(turn: Any) -> Json:
        return model_next(turn.round, list(turn.results))

    try:
        out = run_loop(model, tools=tools, limits=_limits(params.get("limits")), mode=params.get("mode"),
                       on_limit=params.get("onLimit"), principal=params.get("principal", "anonymous"))
    except (ValueError, TypeError) as exc:
        raise RpcError(INVALID_PARAMS, str(exc)) from None
    return outcome_to_result(out)




# --------------------------------------------------------------------------------------------
# Implementations seen from the harness
# --------------------------------------------------------------------------------------------


class Impl:
    """One live implementation: a process or an in-process object."""

    info: dict[str, Json]

    def call(self, method: str, params: Json, handler: Handler) -> Json:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    @property
    def alive(self) -> bool:
        return True

    def ping_pong(self) -> None:
        """One raw round trip (used by the speed benchmark): an unknown method, answered by an error."""
        with contextlib.suppress(RpcError):
            self.call("$/ping", {}, lambda m, p: None)


def _roundtrip(value: Json, what: str) -> Json:
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


class InProcessImpl(Impl):
    def __init__(self, target: InProcess) -> None:
        self.target = target
        self.info = {}

    def call(self, method: str, params: Json, handler: Handler) -> Json:
        def back(m: str, p: Json) -> Json:
            return _roundtrip(handler(m, _roundtrip(p, f"the params of {m}")), f"the result of {m}")

        if hasattr(handler, "request") and holds_answers(self.target):  # a concurrent step (v1.1)
            back.held = HeldAnswers(handler.request, handler.notification)  # type: ignore[attr-defined]

        try:
            result = self.target.handle(method, _roundtrip(params, "params"), back)
        except (RpcError, ProtocolFailure):
            raise
        except Exception as exc:
            raise ProtocolFailure("P1", "crash", f"{method} raised {type(exc).__name__}: {exc}") from None
        return _roundtrip(result, f"the result of {method}")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.target.handle("shutdown", None, lambda m, p: None)


def holds_answers(target: Any) -> bool:
    """Does this in-process target (class or object) await held answers (:class:`HeldAnswers`), so it
    can run concurrent steps? An :class:`Executor` says so with ``holds_answers = True``."""
    return getattr(target, "holds_answers", False) is True


class StderrLog:
    """The implementation's stderr on disk, bounded: the first ``head`` bytes as they come, and the
    last ``tail`` bytes kept in memory and written by :meth:`close` after a line saying how much was
    left out. Opened without following a symlink at its path (one planted there is replaced)."""

    def __init__(self, path: str | os.PathLike[str], *, head: int = 256 * 1024, tail: int = 256 * 1024) -> None:
        self.path = os.fspath(path)
        self.head_limit, self.tail_limit = head, tail
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            self.fd = os.open(self.path, flags, 0o644)
        except OSError:
            if not os.path.islink(self.path):
                raise
            os.unlink(self.path)  # the link itself, never its target
            self.fd = os.open(self.path, flags | os.O_EXCL, 0o644)
        self.written = 0
        self.omitted = 0
        self._tail: collections.deque[bytes] = collections.deque()
        self._tail_bytes = 0
        self._lock = threading.Lock()
        self.closed = False

    def write(self, chunk: bytes) -> None:
        with self._lock:
            if self.closed:
                return
            room = self.head_limit - self.written
            if room > 0:
                part = chunk[:room]
                with contextlib.suppress(OSError):
                    os.write(self.fd, part)
                self.written += len(part)
                chunk = chunk[room:]
            if not chunk:
                return
            self._tail.append(chunk)
            self._tail_bytes += len(chunk)
            while self._tail_bytes - len(self._tail[0]) >= self.tail_limit:
                gone = self._tail.popleft()
                self._tail_bytes -= len(gone)
                self.omitted += len(gone)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True
            tail = b"".join(self._tail)
            if len(tail) > self.tail_limit:
                self.omitted += len(tail) - self.tail_limit
                tail = tail[-self.tail_limit:]
            with contextlib.suppress(OSError):
                if self.omitted:
                    os.write(self.fd, f"\n[loopspec: {self.omitted} bytes of stderr left out here]\n".encode())
                if tail:
                    os.write(self.fd, tail)
            os.close(self.fd)


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux /proc; empty elsewhere)."""
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/children") as fh:
                    kids = [int(k) for k in fh.read().split()]
            except (OSError, ValueError):
                continue
            out += kids
            todo += kids
    return out


def end_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill the implementation's process group and every descendant still found under it."""
    kids = _descendants(proc.pid) if proc.poll() is None else []
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    for k in kids:
        with contextlib.suppress(OSError):
            os.kill(k, signal.SIGKILL)
    if proc.poll() is None:
        with contextlib.suppress(OSError):
            proc.kill()


class ProcessImpl(Impl):
    def __init__(self, proc: subprocess.Popen[bytes], timeout: float | None, log: Any | None) -> None:
        self.proc = proc
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        self._tail: collections.deque[bytes] = collections.deque(maxlen=64)
        self._log = log
        self._drain = threading.Thread(target=self._drain_stderr, daemon=True, name="loopspec-impl-stderr")
        self._drain.start()
        self.exit_fd: int | None = None
        with contextlib.suppress(AttributeError, OSError):
            self.exit_fd = os.pidfd_open(proc.pid)
        self.channel = Channel(proc.stdout.fileno(), proc.stdin.fileno(), timeout=timeout, on_eof=self._evidence,
                               exit_fd=self.exit_fd, activity=lambda: process_activity(proc.pid))
        self.peer = Peer(self.channel, strict=True)
        self.info = {}
        self.healthy = True

    def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        fd = self.proc.stderr.fileno()
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except OSError:
                return
            if not chunk:
                return
            self._tail.append(chunk[-1024:])
            if self._log is not None:
                with contextlib.suppress(OSError, ValueError):
                    self._log.write(chunk)

    def stderr_tail(self, limit: int = 600) -> str:
        text = b"".join(self._tail).decode("utf-8", errors="replace").strip()
        return text[-limit:]

    def _evidence(self) -> str:
        try:
            code = self.proc.wait(timeout=0.5)
            parts = [f"exit status {code}"]
        except subprocess.TimeoutExpired:
            parts = ["still running"]
        self._drain.join(timeout=0.2)
        tail = self.stderr_tail()
        if tail:
            parts.append(f"stderr ends with: {tail!r}")
        return "; ".join(parts)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def call(self, method: str, params: Json, handler: Handler) -> Json:
        try:
            return self.peer.request(method, params, handler)
        except ProtocolFailure:
            self.healthy = False
            raise
        except BaseException:  # Ctrl-C in the middle of an exchange: the process state is unknown
            self.healthy = False
            raise

    def stray(self, wait: float = 0.0) -> bool:
        """Did the implementation send something after its last answer, unasked (or does it within
        ``wait`` seconds)?"""
        return self.channel.pending(wait)

    def close(self) -> None:
        """Ask for a clean shutdown (briefly), close the pipes and leave the exit to the reaper."""
        if self.proc.poll() is None and self.healthy:
            self.channel.timeout = 1.0
            with contextlib.suppress(RpcError, ProtocolFailure):
                self.peer.request("shutdown", None, lambda m, p: None)
        self._close_pipes()
        REAPER.add(self.proc)

    def kill(self) -> None:
        """End the process group now (after a hang or a protocol failure)."""
        end_group(self.proc)
        self._close_pipes()
        REAPER.add(self.proc)

    def _close_pipes(self) -> None:
        for f in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                if f is not None:
                    f.close()
        if self.exit_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.exit_fd)
            self.exit_fd = self.channel.exit_fd = None


class _Reaper:
    """Processes that were asked to exit: collected without blocking; their process group is ended
    once the leader is gone (children it left behind), or at once when they linger."""

    def __init__(self) -> None:
        self.procs: list[tuple[subprocess.Popen[bytes], float]] = []

    def add(self, proc: subprocess.Popen[bytes]) -> None:
        self.procs.append((proc, time.monotonic()))
        self.poll()

    def poll(self, linger: float = 2.0) -> None:
        now = time.monotonic()
        keep = []
        for proc, since in self.procs:
            if proc.poll() is not None or now - since > linger:
                end_group(proc)
            if proc.poll() is None:
                keep.append((proc, since))
            elif proc.stderr is not None:
                with contextlib.suppress(OSError):
                    proc.stderr.close()
        self.procs = keep

    def wait_all(self, timeout: float = 2.0) -> None:
        for proc, _ in self.procs:
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                end_group(proc)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=timeout)
        self.poll(linger=0.0)


REAPER = _Reaper()


Target = str | Sequence[str] | InProcess | Callable[[], InProcess]


class ImplFactory:
    """Opens a fresh, initialized implementation on demand.

    For a command, one spare process is started ahead of time, so that starting a fresh process
    for every fuzz example costs (almost) nothing. For an in-process target, a class or zero-argument
    factory gives a fresh object each time; an object is reused.
    """

    def __init__(self, target: Target, *, timeout: float | None = 10.0, stderr_log: Any | None = None,
                 warm: bool = True, cwd: str | None = None, env: Mapping[str, str] | None = None,
                 label: str | None = None) -> None:
        self.target = target
        self.label = label  # what --impl said for an in-process target, so `loopspec replay` can be told again
        self.timeout = timeout
        self.stderr_log = stderr_log
        self.warm = warm
        self.cwd = cwd
        self.env = dict(env) if env is not None else None
        self.argv: list[str] | None = None
        if isinstance(target, str):
            try:
                self.argv = shlex.split(target)
            except ValueError as exc:
                raise StartError(f"cannot parse the command {target!r}: {exc}") from None
        elif isinstance(target, list | tuple):
            self.argv = [str(a) for a in target]
        if self.argv is not None and not self.argv:
            raise StartError("the implementation command is empty")
        self._spare: subprocess.Popen[bytes] | None = None
        self._open: list[Impl] = []
        self.started = 0
        self.info: dict[str, Json] | None = None

    def step_normalizer(self) -> Callable[[dict[str, Json]], dict[str, Json]] | None:
        """An in-process target's ``normalize_step`` (framework adapters: the steps the framework can
        express), or None."""
        t = self.target
        if self.argv is not None:  # a command that says which steps it can express (an isolated framework's)
            return getattr(t, "normalize_step", None)
        fn = getattr(t, "normalize_step", None)
        if fn is None:
            return None
        if isinstance(t, type):
            obj = t()
            return obj.normalize_step  # type: ignore[no-any-return]
        return fn  # type: ignore[no-any-return]

    def describe(self) -> str:
        if self.label is not None and hasattr(self.target, "adapter"):  # an isolated framework: its --impl name
            return self.label
        if self.argv is not None:
            return shlex.join(self.argv)
        if self.label is not None:
            return self.label
        t = self.target
        cls = t if isinstance(t, type) or (callable(t) and hasattr(t, "__qualname__")) else type(t)
        module, name = getattr(cls, "__module__", None), getattr(cls, "__qualname__", "")
        if module and module != "__main__" and "<" not in name:
            return f"{module}:{name}"  # --impl module:attr reruns it (loopspec replay, the CLI)
        return f"in-process {getattr(t, '__name__', type(t).__name__)}"

    def _spawn(self) -> subprocess.Popen[bytes]:
        assert self.argv is not None
        try:
            proc = subprocess.Popen(
                self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0,
                cwd=self.cwd, env=self.env, start_new_session=True,  # its own process group, ended with it
            )
        except OSError as exc:
            raise StartError(f"cannot start {shlex.join(self.argv)}: {exc.strerror or exc}") from None
        self.started += 1
        return proc

    def _new(self) -> Impl:
        if self.argv is None:
            t = self.target
            if isinstance(t, type) or (callable(t) and not isinstance(t, InProcess)):
                obj = t()
                if not isinstance(obj, InProcess):
                    raise StartError(f"{self.describe()} did not produce an object with handle(method, params, call)")
                return InProcessImpl(obj)
            if not isinstance(t, InProcess):
                raise StartError(f"{t!r} is neither a command nor an object with handle(method, params, call)")
            return InProcessImpl(t)
        proc = self._spare if self._spare is not None and self._spare.poll() is None else None
        if self._spare is not None and proc is None:
            _reap(self._spare)
        self._spare = None
        if proc is None:
            proc = self._spawn()
        if self.warm:
            self._spare = self._spawn()
        return ProcessImpl(proc, self.timeout, self.stderr_log)

    def open(self, mode: str = "batch") -> Impl:
        """A fresh implementation after the initialize handshake. Raises ProtocolFailure (P1..P6)."""
        impl = self._new()
        try:
            info = impl.call("initialize", {"protocolVersion": PROTOCOL_VERSION}, _refuse)
        except RpcError as err:
            _close_quietly(impl)
            raise ProtocolFailure("P6", "initialize-failed", f"initialize answered error {err.code}: {err.message}") from None
        except ProtocolFailure:
            _close_quietly(impl)
            raise
        problem = check_initialize_result(info, mode)
        if problem is not None:
            _close_quietly(impl)
            raise ProtocolFailure("P6", "initialize", problem)
        impl.info = info
        self.info = info
        self._open.append(impl)
        return impl

    def release(self, impl: Impl) -> None:
        """Done with ``impl``: a live one is shut down cleanly, a broken one is killed."""
        if impl in self._open:
            self._open.remove(impl)
        if isinstance(impl, ProcessImpl) and not impl.healthy:
            impl.kill()
        else:
            _close_quietly(impl)

    def close(self) -> None:
        for impl in list(self._open):
            self.release(impl)
        if self._spare is not None:
            _reap(self._spare)
            self._spare = None
        REAPER.wait_all()


def check_initialize_result(info: Json, mode: str) -> str | None:
    if not isinstance(info, dict):
        return "the initialize result must be an object {name, version, capabilities}"
    if not isinstance(info.get("name"), str) or not isinstance(info.get("version"), str):
        return "the initialize result needs string name and version"
    caps = info.get("capabilities")
    if not isinstance(caps, dict) or not all(isinstance(caps.get(k, False), bool) for k in ("batch", "loop")):
        return "the initialize result needs capabilities {batch: bool, loop: bool}"
    if not caps.get(mode, False):
        return f"the implementation does not declare the {mode!r} capability"
    return None


def _refuse(method: str, params: Json) -> Json:
    raise ProtocolFailure("P4", "unexpected-request", f"a {method} request during initialize")


def _close_quietly(impl: Impl) -> None:
    with contextlib.suppress(Exception):
        impl.close()


def _reap(proc: subprocess.Popen[bytes]) -> None:
    for f in (proc.stdin, proc.stdout, proc.stderr):
        try:
            if f is not None:
                f.close()
        except OSError:
            pass
    end_group(proc)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=2.0)


def serve_stdio(executor: InProcess, rfd: int = 0, wfd: int = 1) -> None:
    """Run ``executor`` as an adapter process on the given descriptors until shutdown / EOF (the
    JSON-RPC server is :class:`loopspec._serve.Server`).

    An executor that :func:`holds_answers` gets, in a ``batch.run`` whose params carry ``concurrency``
    (a concurrent step, PROTOCOL.md C1), an ``execute.held`` (:class:`HeldAnswers`) as in process
    (PROTOCOL.md section 6): its ``tool.execute`` requests are sent without waiting (C2), a
    ``tool.waiting`` is followed by reading until the harness releases one of them (C3), a
    ``$/cancelRequest`` names the request's id on the wire (C5), and the ``-32800`` answers to cancelled
    or abandoned requests (C5, C6) are ignored like any response nobody waits for."""
    from .._serve import RemoteError, Server

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
            from ._rpc import HOLD

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
