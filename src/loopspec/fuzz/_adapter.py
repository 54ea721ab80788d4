"""Implementations under test, seen from the harness: starting them (a process speaking the adapter protocol
on stdin/stdout in any language, ``loopspec fuzz --impl "java -cp build Executor"``, or an in-process Python
object), timeouts, stderr capture, and ending a process group with all its descendants.

The implementer's side of the protocol — :class:`~loopspec.protocol.executor.Executor`, its held answers and
the reference engine behind it — is :mod:`loopspec.protocol.executor`. Every in-process message still goes
through a JSON round trip, so an in-process run is judged exactly like a process run.
"""

from __future__ import annotations

import collections
import contextlib
import os
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from ..protocol.executor import PROTOCOL_VERSION, HeldAnswers, InProcess, holds_answers, roundtrip
from ..protocol.rpc import (
    Channel,
    Handler,
    Peer,
    ProtocolFailure,
    RpcError,
    process_activity,
)
from ._declared import Declaration, DeclarationError, from_initialize

Json = Any

__all__ = [
    "Impl",
    "ImplFactory",
    "StartError",
]


class StartError(Exception):
    """The implementation cannot be started at all (bad command, or it dies before initialize)."""


# --------------------------------------------------------------------------------------------
# The in-process interface
# --------------------------------------------------------------------------------------------


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


class InProcessImpl(Impl):
    def __init__(self, target: InProcess) -> None:
        self.target = target
        self.info = {}

    def call(self, method: str, params: Json, handler: Handler) -> Json:
        def back(m: str, p: Json) -> Json:
            return roundtrip(handler(m, roundtrip(p, f"the params of {m}")), f"the result of {m}")

        if hasattr(handler, "request") and holds_answers(self.target):  # a concurrent step (v1.1)
            back.held = HeldAnswers(handler.request, handler.notification)  # type: ignore[attr-defined]

        try:
            result = self.target.handle(method, roundtrip(params, "params"), back)
        except (RpcError, ProtocolFailure):
            raise
        except Exception as exc:
            raise ProtocolFailure("P1", "crash", f"{method} raised {type(exc).__name__}: {exc}") from None
        return roundtrip(result, f"the result of {method}")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.target.handle("shutdown", None, lambda m, p: None)


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


#: Every implementation process carries ``LOOPSPEC_IMPL=<a value of its own>`` in its environment, and so does
#: everything it starts: a helper that leaves its process group (``setsid``) or is orphaned on purpose (a
#: double-forked daemon) is still found by it, in /proc, and ended with the implementation.
IMPL_MARK: Final = "LOOPSPEC_IMPL"
#: Every process of a sharded campaign (its --jobs workers, their implementations and their helpers) carries
#: ``LOOPSPEC_CAMPAIGN=<the campaign's value>``: what the campaign's watchdog ends when the campaign is gone.
CAMPAIGN_MARK: Final = "LOOPSPEC_CAMPAIGN"


def marked(name: str, value: str) -> list[int]:
    """The processes (of this user, Linux /proc; none elsewhere) whose environment holds ``name=value``; not
    this process, not a zombie (its environment reads empty)."""
    needle = f"{name}={value}".encode()
    me = os.getpid()
    found: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for e in entries:
        if not e.isdigit() or int(e) == me:
            continue
        try:
            with open(f"/proc/{e}/environ", "rb") as fh:
                env = fh.read()
        except OSError:
            continue
        if needle in env and needle in env.split(b"\0"):
            found.append(int(e))
    return found


def end_marked(name: str, value: str, *, rounds: int = 4) -> int:
    """SIGKILL every process marked ``name=value``, again until none is left (one may fork meanwhile);
    returns how many were killed."""
    killed = 0
    for _ in range(rounds):
        pids = marked(name, value)
        if not pids:
            break
        for p in pids:
            with contextlib.suppress(OSError):
                os.kill(p, signal.SIGKILL)
                killed += 1
        time.sleep(0.01)
    return killed


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Have the kernel send ``sig`` to this process when its parent dies (Linux ``PR_SET_PDEATHSIG``; nothing
    elsewhere). A --jobs worker calls it first thing: a campaign killed with SIGKILL takes its workers along."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, sig, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before the call: the signal will not come
        os.kill(os.getpid(), sig)


_WATCHDOG = r"""
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
needle = sys.argv[1].encode()
while os.read(0, 4096):
    pass
for _ in range(20):
    pids = []
    for e in os.listdir("/proc"):
        if e.isdigit() and int(e) != os.getpid():
            try:
                with open("/proc/%s/environ" % e, "rb") as fh:
                    if needle in fh.read().split(b"\0"):
                        pids.append(int(e))
            except OSError:
                pass
    if not pids:
        break
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    time.sleep(0.05)
"""


class Watchdog:
    """A small process that outlives the campaign by a moment: when the campaign ends — or dies, even by
    SIGKILL (its end of the pipe closes with it) — it kills every process marked ``name=value``. It runs in a
    session of its own (a Ctrl-C to the terminal does not reach it) and ignores SIGINT, SIGTERM and SIGHUP;
    it does not carry the mark itself."""

    def __init__(self, name: str, value: str) -> None:
        import sys

        env = {k: v for k, v in os.environ.items() if k not in (name, IMPL_MARK)}
        self.proc: subprocess.Popen[bytes] | None = None
        with contextlib.suppress(OSError):
            self.proc = subprocess.Popen([sys.executable, "-S", "-I", "-c", _WATCHDOG, f"{name}={value}"],
                                         stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, env=env, start_new_session=True,
                                         close_fds=True)

    def close(self, wait: float = 3.0) -> None:
        """The campaign is over: the watchdog ends what is left, and exits."""
        if self.proc is None:
            return
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


def end_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill the implementation's process group, every descendant still found under it and every process
    that carries its mark (:data:`IMPL_MARK`): helpers that left the group or were orphaned on purpose."""
    kids = _descendants(proc.pid) if proc.poll() is None else []
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    for k in kids:
        with contextlib.suppress(OSError):
            os.kill(k, signal.SIGKILL)
    if proc.poll() is None:
        with contextlib.suppress(OSError):
            proc.kill()
    mark = getattr(proc, "loopspec_mark", None)
    if mark is not None:
        end_marked(IMPL_MARK, mark)


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
        #: what the implementation declared in its initialize result (tools, unsupported), or None
        self.declared: Declaration | None = None
        #: set when the campaign stops this factory's shard from outside (an interrupted --dask campaign): no
        #: implementation is started any more
        self.halted = False

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
        mark = os.urandom(8).hex()
        env = {**(self.env if self.env is not None else os.environ), IMPL_MARK: mark}
        try:
            proc = subprocess.Popen(
                self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0,
                cwd=self.cwd, env=env, start_new_session=True,  # its own process group, ended with it
            )
        except OSError as exc:
            raise StartError(f"cannot start {shlex.join(self.argv)}: {exc.strerror or exc}") from None
        proc.loopspec_mark = mark  # type: ignore[attr-defined]  # what end_group looks for in /proc
        self.started += 1
        return proc

    def _new(self) -> Impl:
        if self.halted:
            raise StartError("the campaign was stopped")
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
        try:  # protocol 1.3: the tools it has, what it does not support
            declared = from_initialize(info)
        except DeclarationError as exc:
            _close_quietly(impl)
            raise ProtocolFailure("P6", "initialize", str(exc)) from None
        impl.info = info
        self.info = info
        self.declared = declared
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


