"""Newline-delimited JSON-RPC 2.0 over a pair of file descriptors (spec/PROTOCOL.md).

Both sides of the adapter protocol send requests, so one :class:`Peer` does both: ``request()``
sends a request and, while it waits for the answer, serves the requests the other side sends
(a ``tool.execute`` arriving in the middle of a ``batch.run``); ``serve()`` answers requests until
``shutdown`` or end of input.

Everything the other side can get wrong raises :class:`ProtocolFailure` with a protocol code
(P1 process gone, P2 timeout, P3 not JSON-RPC, P4 envelope error, P5 bad shape) and the evidence,
never a Python traceback.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import time
from collections.abc import Callable
from typing import Any, Final

from .wire import MAX_LINE, WireError, decode_line

__all__ = ["HOLD", "Channel", "Peer", "ProtocolFailure", "RpcError"]

Json = Any

JSONRPC: Final = "2.0"

# JSON-RPC 2.0 error codes
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL: Final = -32603
TOOL_FAILED: Final = -32000  # tool.execute: the tool failed; data.category is the failure class
MODEL_FAILED: Final = -32001  # model.next: the model failed
REQUEST_CANCELLED: Final = -32800  # v1.1: an abandoned tool.execute (PROTOCOL.md C5, C6)


class _Hold:
    def __repr__(self) -> str:
        return "HOLD"


#: A handler's result meaning "answer this request later" (protocol v1.1, PROTOCOL.md C3): the
#: handler keeps the ``reply`` callable it was given and calls it when it releases the answer.
HOLD: Final = _Hold()


class RpcError(Exception):
    """A JSON-RPC error response (in either direction)."""

    def __init__(self, code: int, message: str, data: Json = None) -> None:
        self.code, self.message, self.data = code, message, data
        super().__init__(f"JSON-RPC error {code}: {message}")

    def to_json(self) -> dict[str, Json]:
        out: dict[str, Json] = {"code": self.code, "message": self.message}
        if self.data is not None:
            out["data"] = self.data
        return out


class ProtocolFailure(Exception):
    """The other side broke the adapter protocol. ``code`` is P1..P7 (spec/PROTOCOL.md)."""

    def __init__(self, code: str, kind: str, detail: str) -> None:
        self.code, self.kind, self.detail = code, kind, detail
        super().__init__(f"{code} {kind}: {detail}")

    def to_event(self) -> dict[str, Json]:
        return {"type": "protocol-error", "code": self.code, "kind": self.kind, "detail": self.detail}


try:  # the fast encoder when installed (what the harness sends is its own data: never NaN, ints < 2**64)
    import orjson as _orjson

    def _encode(message: Json) -> bytes:
        try:
            return _orjson.dumps(message) + b"\n"
        except TypeError:  # an integer past 64 bits, say: the standard encoder writes it
            return (json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False) + "\n").encode()
except ImportError:  # pragma: no cover - orjson is optional
    def _encode(message: Json) -> bytes:
        return (json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False) + "\n").encode()


def show(value: Json, limit: int = 120) -> str:
    """``value`` as compact JSON text cut to ``limit`` characters (never raises)."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)[: limit + 1]
    return text if len(text) <= limit else text[:limit] + "…"


def _excerpt(raw: bytes, limit: int = 120) -> str:
    text = raw[: limit * 4].decode("utf-8", errors="replace")
    return repr(text if len(text) <= limit else text[:limit] + "…")


#: Unsolicited traffic tolerated while one request is outstanding (notifications and blank lines):
#: past either bound the implementation is flooding the pipe, a P4 finding (spec/PROTOCOL.md, Limits).
MAX_UNSOLICITED: Final = 1000
MAX_UNSOLICITED_BYTES: Final = 1024 * 1024
#: Requests the other side may send while one of ours is outstanding (the harness's recorders
#: bound tool.execute and model.next more tightly, by what the step can legitimately need).
MAX_NESTED_REQUESTS: Final = 10_000
#: Bytes the other side may send while one of our requests is outstanding (its messages are kept
#: as evidence, so this bounds the memory one step can take).
MAX_BYTES_PER_REQUEST: Final = 64 * 1024 * 1024
#: After the process exited, how long to wait for the rest of its output before naming the cause.
EXIT_GRACE: Final = 0.3


def waited_for(seconds: float, requests: int, activity: tuple[float, float | None] | None,
               last: float | None = None) -> str:
    """What an implementation did while a request of the harness went unanswered (a P2's evidence): the
    requests it sent meanwhile and, when known, ``activity`` = (CPU seconds it used, seconds it was runnable:
    running or waiting for a CPU; None when the system does not tell). Runnable half the time or more is
    *busy* (computing, whatever the machine's load lets it have); 5% or less is *idle* (blocked: waiting for
    something). Without the runnable time the CPU time decides, which a loaded machine makes smaller.
    ``last``: when its last request came, in seconds after the harness's request was sent."""
    text = f"in those {seconds:.1f} s it sent {requests} request(s)"
    if requests and last is not None:
        text += f", the last {last:.1f} s in"
    if activity is None:
        return text
    cpu, runnable = activity
    text += f" and used {cpu:.1f} s of CPU"
    share = (runnable if runnable is not None else cpu) / seconds if seconds > 0 else 0.0
    if share >= 0.5:
        text += ": busy, it computes without answering" + (" (and without asking anything)" if not requests else "")
    elif share <= 0.05:
        text += ": idle, it waits for something that does not come"
    return text


def process_activity(pid: int) -> tuple[float, float | None] | None:
    """(CPU seconds, runnable seconds) of process ``pid`` so far, over all its threads (not its children),
    from Linux's /proc: the CPU time from ``stat``, the runnable time (on a CPU or waiting in its run
    queue) from the threads' ``schedstat`` when the kernel keeps it (else None). None where /proc cannot
    be read (another system, a process gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
        fields = stat[stat.rindex(b")") + 2:].split()
        cpu = (int(fields[11]) + int(fields[12])) / _TICKS
    except (OSError, ValueError, IndexError):
        return None
    runnable = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as fh:
                on_cpu, queued = fh.read().split()[:2]
            runnable += int(on_cpu) + int(queued)
    except (OSError, ValueError):
        return cpu, None
    return cpu, runnable / 1e9


def activity_since(before: tuple[float, float | None] | None,
                   now: tuple[float, float | None] | None) -> tuple[float, float | None] | None:
    """The activity between two readings of :func:`process_activity`."""
    if before is None or now is None:
        return None
    return now[0] - before[0], (None if before[1] is None or now[1] is None else now[1] - before[1])


def _clock_ticks() -> int:
    try:
        return os.sysconf("SC_CLK_TCK")
    except (AttributeError, ValueError, OSError):  # pragma: no cover - not a POSIX system
        return 100


#: the unit of /proc's CPU times (clock ticks per second)
_TICKS: Final = _clock_ticks()


class Channel:
    """One JSON value per line over raw file descriptors.

    ``receive(deadline)`` waits until an absolute ``time.monotonic()`` deadline: the time a request
    may take is measured from when it was sent, whatever arrives meanwhile. ``exit_fd`` (a pidfd)
    lets a wait notice that the process itself exited while something else holds its pipes open.
    """

    def __init__(self, rfd: int, wfd: int, *, timeout: float | None = None,
                 on_eof: Callable[[], str] | None = None, exit_fd: int | None = None,
                 activity: Callable[[], tuple[float, float | None] | None] | None = None) -> None:
        self.rfd, self.wfd = rfd, wfd
        self.activity = activity  # the other side's process_activity, when it is a process (a P2's evidence)
        self.timeout = timeout
        self.on_eof = on_eof  # extra evidence for a P1 (e.g. the process's exit code and stderr tail)
        self.exit_fd = exit_fd
        self._exited = False
        self._buf = bytearray()
        self._start = 0
        self.sent = 0
        self.received = 0
        self.bytes_in = 0  # bytes of the messages received
        self.blank_lines = 0  # blank lines received since reset_unsolicited()
        self.blank_bytes = 0
        self.tap: Callable[[str, Json], None] | None = None  # sees every message: ("out" | "in", message)

    def send(self, message: Json, deadline: float | None = None) -> None:
        """Write one message. A write waits for the other side to read, as long as a read would wait for it to
        answer: until ``deadline`` (an absolute ``time.monotonic()``), by default the channel's timeout from
        now — past it, the other side stopped reading (P2), never a hang in ``write()``."""
        if self.tap is not None:
            self.tap("out", message)
        data = _encode(message)
        view = memoryview(data)
        if deadline is None:
            deadline = self.deadline()
        blocking = deadline is None
        try:
            if not blocking:
                os.set_blocking(self.wfd, False)
            while view:
                try:
                    n = os.write(self.wfd, view)
                except BlockingIOError:
                    n = 0
                view = view[n:]
                if view and not blocking:
                    assert deadline is not None
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise ProtocolFailure(
                            "P2", "timeout", f"it stopped reading its stdin: {len(data) - len(view)} of the {len(data)} "
                            f"bytes of a message written, the rest not taken within {self.timeout:g} s" + (
                                "" if self.exit_fd is None or not self._exit_ready() else "; it has exited"))
                    select.select([], [self.wfd], [], left)
        except (BrokenPipeError, ConnectionResetError, OSError) as exc:
            raise ProtocolFailure("P1", "exited", self._eof_detail(f"cannot write to its stdin ({exc.strerror})")) from None
        finally:
            if not blocking:
                with contextlib.suppress(OSError):
                    os.set_blocking(self.wfd, True)
        self.sent += 1

    def _exit_ready(self) -> bool:
        try:
            ready, _, _ = select.select([self.exit_fd], [], [], 0)
        except (OSError, ValueError):
            return False
        return bool(ready)

    def _eof_detail(self, what: str) -> str:
        extra = self.on_eof() if self.on_eof is not None else ""
        return what + (f"; {extra}" if extra else "")

    def deadline(self) -> float | None:
        """The deadline of a request sent now (None: wait for ever)."""
        return None if self.timeout is None else time.monotonic() + self.timeout

    def _line(self) -> bytes | None:
        """The next complete line in the buffer (blank ones skipped and counted), or None."""
        while True:
            nl = self._buf.find(b"\n", self._start)
            if nl < 0:
                return None
            line = bytes(self._buf[self._start:nl])
            self._start = nl + 1
            if self._start > 65536:
                del self._buf[: self._start]
                self._start = 0
            if line.strip():
                return line
            self.blank_lines += 1
            self.blank_bytes += len(line) + 1

    def receive(self, deadline: float | None = None, *, what: str = "a message") -> Json:
        """The next message (blank lines are skipped), waiting until ``deadline`` at most."""
        while True:
            line = self._line()
            if line is not None:
                self.received += 1
                self.bytes_in += len(line)
                try:
                    msg = decode_line(line)
                except WireError as exc:
                    raise ProtocolFailure("P3", exc.kind, exc.detail) from None
                if self.tap is not None:
                    self.tap("in", msg)
                return msg
            if len(self._buf) - self._start > MAX_LINE:
                raise ProtocolFailure("P3", "line-too-long", f"a line longer than {MAX_LINE} bytes")
            if self.blank_lines > MAX_UNSOLICITED or self.blank_bytes > MAX_UNSOLICITED_BYTES:
                raise ProtocolFailure("P4", "unsolicited-traffic",
                                      f"{self.blank_lines} blank lines ({self.blank_bytes} bytes) while waiting for "
                                      f"{what}")
            self._fill(deadline, what)

    def pending(self, wait: float = 0.0) -> bool:
        """Has something arrived that nobody asked for yet (a complete line, or bytes ready to read),
        or does it arrive within ``wait`` seconds?"""
        if bytes(self._buf[self._start:]).strip():
            return True
        try:
            ready, _, _ = select.select([self.rfd], [], [], wait)
        except (OSError, ValueError):
            return False
        return bool(ready)

    def _fill(self, deadline: float | None, what: str) -> None:
        grace: float | None = None
        while True:
            now = time.monotonic()
            limit = deadline if grace is None else (grace if deadline is None else min(deadline, grace))
            left = None if limit is None else limit - now
            if left is not None and left <= 0:
                if grace is not None and (deadline is None or grace <= deadline):
                    raise ProtocolFailure("P1", "exited", self._eof_detail(
                        "the process exited, but its stdout is still open (a process it started holds it)"))
                raise ProtocolFailure("P2", "timeout", f"no answer to {what} within {self.timeout:g} s of sending it"
                                      if self.timeout is not None else f"no answer to {what}")
            fds = [self.rfd]
            if self.exit_fd is not None and not self._exited:
                fds.append(self.exit_fd)
            try:
                ready, _, _ = select.select(fds, [], [], left)
            except InterruptedError:  # pragma: no cover - PEP 475 retries for us
                continue
            if self.rfd in ready:
                break
            if self.exit_fd is not None and self.exit_fd in ready:
                self._exited = True
                grace = time.monotonic() + EXIT_GRACE
        try:
            chunk = os.read(self.rfd, 1 << 16)
        except OSError as exc:
            raise ProtocolFailure("P1", "exited", self._eof_detail(f"cannot read its stdout ({exc.strerror})")) from None
        if not chunk:
            rest = bytes(self._buf[self._start:])
            tail = f" after the partial line {_excerpt(rest)}" if rest.strip() else ""
            raise ProtocolFailure("P1", "exited", self._eof_detail(f"its stdout closed{tail}"))
        self._buf += chunk


Handler = Callable[[str, Json], Json]


class Peer:
    """A JSON-RPC 2.0 endpoint that can send requests and answer the other side's."""

    def __init__(self, channel: Channel, handler: Handler | None = None, *, strict: bool = True) -> None:
        self.channel = channel
        self.handler = handler
        self.strict = strict  # harness side: anything unexpected is a ProtocolFailure
        self._next_id = 0
        self.closed = False

    def request(self, method: str, params: Json, handler: Handler | None = None) -> Json:
        """Send a request; serve incoming requests until its response arrives; return its result.

        The request has a deadline from when it was sent (the channel's timeout): requests served
        and messages received meanwhile do not extend it. Notifications and blank lines meanwhile
        are bounded (MAX_UNSOLICITED, MAX_UNSOLICITED_BYTES), and so are nested requests.
        Raises :class:`RpcError` for an error response, :class:`ProtocolFailure` for anything else
        that goes wrong.
        """
        self._next_id += 1
        rid = self._next_id
        ch = self.channel
        ch.send({"jsonrpc": JSONRPC, "id": rid, "method": method, "params": params})
        deadline = ch.deadline()
        h = handler or self.handler
        ch.blank_lines = ch.blank_bytes = 0
        notes = note_bytes = nested = 0
        what = f"{method} (id {rid})"
        start_bytes = ch.bytes_in
        sent_at, active_at = time.monotonic(), ch.activity() if ch.activity is not None else None
        last_request: float | None = None
        while True:
            try:
                msg = ch.receive(deadline, what=what)
            except ProtocolFailure as exc:
                if exc.code != "P2":
                    raise
                now = ch.activity() if ch.activity is not None and active_at is not None else None
                raise ProtocolFailure("P2", exc.kind, exc.detail + "; " + waited_for(
                    time.monotonic() - sent_at, nested, activity_since(active_at, now), last_request)) from None
            if ch.bytes_in - start_bytes > MAX_BYTES_PER_REQUEST:
                raise ProtocolFailure("P4", "flood", f"more than {MAX_BYTES_PER_REQUEST} bytes of messages while "
                                                     f"waiting for the answer to {what}")
            kind = self._classify(msg)
            if kind == "request":
                nested += 1
                last_request = time.monotonic() - sent_at
                if nested > MAX_NESTED_REQUESTS:
                    raise ProtocolFailure("P4", "flood", f"more than {MAX_NESTED_REQUESTS} requests while waiting "
                                                         f"for the answer to {what}")
                self._answer(msg, h)
            elif kind == "notification" and hasattr(h, "notification"):
                h.notification(msg["method"], msg.get("params"))  # type: ignore[union-attr]
            elif kind == "notification":
                notes += 1
                note_bytes += len(show(msg, 1 << 20))
                if notes > MAX_UNSOLICITED or note_bytes > MAX_UNSOLICITED_BYTES:
                    raise ProtocolFailure("P4", "unsolicited-traffic",
                                          f"{notes} notifications ({note_bytes} bytes) while waiting for the answer "
                                          f"to {what}; the last: {show(msg)}")
            else:
                if msg.get("id") != rid:
                    if self.strict:
                        raise ProtocolFailure("P4", "wrong-id",
                                              f"a response with id {show(msg.get('id'), 40)} while waiting for "
                                              f"the response to {what}")
                    continue
                if "error" in msg:
                    err = msg["error"]
                    if not isinstance(err, dict) or not isinstance(err.get("code"), int) or isinstance(
                            err.get("code"), bool):
                        raise ProtocolFailure("P3", "bad-envelope", f"a malformed error object: {show(err)}")
                    raise RpcError(err["code"], str(err.get("message", ""))[:2000], err.get("data"))
                return msg["result"]

    def notify(self, method: str, params: Json) -> None:
        self.channel.send({"jsonrpc": JSONRPC, "method": method, "params": params})

    def _classify(self, msg: Json) -> str:
        if not isinstance(msg, dict) or msg.get("jsonrpc") != JSONRPC:
            raise ProtocolFailure("P3", "not-jsonrpc", f"not a JSON-RPC 2.0 message: {show(msg)}")
        if "method" in msg:
            if not isinstance(msg["method"], str):
                raise ProtocolFailure("P3", "not-jsonrpc", f"a method that is not a string: {show(msg)}")
            return "request" if "id" in msg else "notification"
        if "id" in msg and (("result" in msg) != ("error" in msg)):
            return "response"
        raise ProtocolFailure("P3", "not-jsonrpc", f"neither a request nor a response: {show(msg)}")

    def _answer(self, msg: dict[str, Json], handler: Handler | None) -> None:
        rid = msg["id"]
        method = msg["method"]
        if handler is not None and hasattr(handler, "request"):  # may hold the answer (v1.1)
            def reply(result: Json = None, error: RpcError | None = None) -> None:
                if error is not None:
                    self.channel.send({"jsonrpc": JSONRPC, "id": rid, "error": error.to_json()})
                else:
                    self.channel.send({"jsonrpc": JSONRPC, "id": rid, "result": result})

            try:
                got = handler.request(rid, method, msg.get("params"), reply)
            except RpcError as err:
                reply(error=err)
                return
            if got is not HOLD:
                reply(got)
            return
        if handler is None:
            self.channel.send({"jsonrpc": JSONRPC, "id": rid,
                               "error": {"code": METHOD_NOT_FOUND, "message": f"no method {method}"}})
            return
        try:
            result = handler(method, msg.get("params"))
        except RpcError as err:
            self.channel.send({"jsonrpc": JSONRPC, "id": rid, "error": err.to_json()})
            return
        self.channel.send({"jsonrpc": JSONRPC, "id": rid, "result": result})

    def serve(self, handler: Handler | None = None) -> None:
        """Answer requests until ``shutdown`` (answered, then return) or end of input."""
        h = handler or self.handler
        while not self.closed:
            self.channel.blank_lines = self.channel.blank_bytes = 0
            try:
                msg = self.channel.receive()
            except ProtocolFailure as f:
                if f.code == "P1":
                    return
                raise
            kind = self._classify(msg)
            if kind == "request":
                if msg["method"] == "shutdown":
                    self.channel.send({"jsonrpc": JSONRPC, "id": msg["id"], "result": None})
                    self.closed = True
                    return
                self._answer(msg, h)
            elif kind == "notification" and msg["method"] == "exit":
                return
