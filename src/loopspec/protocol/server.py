"""The implementation side of the adapter protocol over a pair of file descriptors (``loopspec serve``).

A JSON-RPC 2.0 server that is also a client: while it handles ``batch.run`` / ``loop.run`` it sends
``tool.execute`` and ``model.next`` requests to the harness and waits for their answers. It is the
reference implementers copy, so it answers everything JSON-RPC 2.0 asks it to, and keeps serving:

==============================================  =================================================
input                                            answer
==============================================  =================================================
a line that is not JSON (or past the loader's    ``-32700`` parse error, ``id: null``
limits: 16 MiB, depth 128, 20-digit integers,
``NaN``/``Infinity``, invalid UTF-8)
``[]``, a value that is not an object, a         ``-32600`` invalid request (``id`` echoed when it is
missing or wrong ``"jsonrpc"``, a method that    a string or an integer, else ``null``)
is not a string, an id that is not a string,
number or null, params that are not structured
a batch (a non-empty array)                      an array of the answers of its elements (none
                                                 when they are all notifications)
an unknown method                                ``-32601``
``initialize`` with a ``protocolVersion`` other  ``-32602`` invalid params
than 1, params of the wrong shape
an error inside the engine                       ``-32603``
a notification (no ``id``)                       nothing, whatever it says (``exit`` ends the
                                                 process)
a response nobody waits for                      ignored
==============================================  =================================================

A request from the harness while a ``batch.run`` is in progress (the protocol is sequential) gets
``-32600``; a response with another id is ignored. ``shutdown`` is answered ``null`` and ends the
process (exit 0), as does the end of input.

Held answers (protocol v1.1, spec/PROTOCOL.md sections 6 and 7): :meth:`Server.send_request` sends a
request without waiting for its answer, :meth:`Server.wait_answer` reads until the answer to one of
those arrives (at once when none is outstanding) and :meth:`Server.forget` drops one that was cancelled;
``loopspec.protocol.executor.serve_stdio`` builds a concurrent step's ``execute.held`` from them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Final

from ..support import safejson

Json = Any

JSONRPC: Final = "2.0"
PROTOCOL_VERSION: Final = 1

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL: Final = -32603

#: What an adapter reads: the loader's limits (spec/PROTOCOL.md section 1).
LIMITS: Final = safejson.DEFAULT_LIMITS


class Stop(BaseException):
    """The harness is gone (end of input, a broken pipe) or asked to stop. A BaseException, so that
    no ``except Exception`` of the engine between the request and its answer swallows it."""


class RemoteError(Exception):
    """The harness answered one of our requests with a JSON-RPC error."""

    def __init__(self, code: Json, message: Json, data: Json = None) -> None:
        self.code, self.message, self.data = code, message, data
        super().__init__(f"JSON-RPC error {code}: {message}")


def _error(rid: Json, code: int, message: str, data: Json = None) -> dict[str, Json]:
    err: dict[str, Json] = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return {"jsonrpc": JSONRPC, "id": rid, "error": err}


def _valid_id(v: Json) -> bool:
    return v is None or (isinstance(v, (str, int, float)) and not isinstance(v, bool))


class Lines:
    """Lines from a file descriptor, each at most ``limits.max_bytes`` long: a longer line is
    dropped while it is read (never held) and reported as such."""

    TOO_LONG: Final = object()

    def __init__(self, fd: int, limits: safejson.Limits = LIMITS) -> None:
        self.fd = fd
        self.limit = limits.max_bytes
        self.buf = bytearray()
        self.scanned = 0  # no newline in buf[:scanned]
        self.dropping = False

    def next(self) -> bytes | object:
        """The next line (without its newline), :attr:`TOO_LONG`, or raises :class:`Stop` at the end."""
        while True:
            nl = self.buf.find(b"\n", self.scanned)
            if nl >= 0:
                line = bytes(self.buf[:nl])
                del self.buf[: nl + 1]
                self.scanned = 0
                if self.dropping:
                    self.dropping = False
                    return self.TOO_LONG
                if len(line) > self.limit:
                    return self.TOO_LONG
                return line
            self.scanned = len(self.buf)
            if len(self.buf) > self.limit:
                self.buf.clear()
                self.scanned = 0
                self.dropping = True
            try:
                chunk = os.read(self.fd, 1 << 16)
            except OSError:
                raise Stop from None
            if not chunk:
                raise Stop
            self.buf += chunk


class Server:
    """Serves ``handle(method, params, call)`` (an :class:`loopspec.fuzz.Executor` or any object with
    that method) on ``rfd``/``wfd``; ``call(method, params)`` sends a request to the harness and
    returns its result (raising :class:`RemoteError` for an error answer)."""

    def __init__(self, handler: Callable[[str, Json, Callable[[str, Json], Json]], Json], rfd: int = 0,
                 wfd: int = 1, limits: safejson.Limits = LIMITS,
                 translate: Callable[[BaseException], tuple[int, str, Json]] | None = None) -> None:
        self.handler = handler
        self.lines = Lines(rfd, limits)
        self.wfd = wfd
        self.limits = limits
        self.translate = translate
        self.next_id = 0
        self.busy: str | None = None  # the method being handled (requests are sequential)
        #: requests sent by :meth:`send_request` and not answered yet: id -> reply(result, RemoteError | None)
        self.outstanding: dict[int, Callable[[Json, RemoteError | None], None]] = {}
        self.done = False

    # -- wire ------------------------------------------------------------------------------
    def send(self, message: Json) -> None:
        data = (safejson.dumps(message) + "\n").encode("utf-8")
        view = memoryview(data)
        try:
            while view:
                n = os.write(self.wfd, view)
                view = view[n:]
        except OSError:
            raise Stop from None

    def _read(self) -> tuple[Json, dict[str, Json] | None]:
        """The next message, or (None, the error answer to send) when the line cannot be read."""
        while True:
            line = self.lines.next()
            if line is Lines.TOO_LONG:
                return None, _error(None, PARSE_ERROR, "Parse error",
                                    self.limits.too_long("a message").removeprefix("a "))
            assert isinstance(line, bytes)
            if not line.strip():
                continue
            try:
                return safejson.parse_line(line, limits=self.limits, what="message"), None
            except safejson.JsonInputError as exc:
                return None, _error(None, PARSE_ERROR, "Parse error", exc.message())

    # -- serving ---------------------------------------------------------------------------
    def serve(self) -> None:
        """Answer messages until ``shutdown``, an ``exit`` notification or the end of input."""
        try:
            while not self.done:
                msg, err = self._read()
                if err is not None:
                    self.send(err)
                    continue
                answer = self._dispatch(msg)
                if answer is not None:
                    self.send(answer)
        except Stop:
            return

    def _dispatch(self, msg: Json) -> Json:
        if isinstance(msg, list):
            if not msg:
                return _error(None, INVALID_REQUEST, "Invalid Request", "an empty batch")
            answers = [a for a in (self._one(m) for m in msg) if a is not None]
            return answers or None
        return self._one(msg)

    def _one(self, msg: Json) -> dict[str, Json] | None:
        """The answer to one message (None for a notification or a stray response)."""
        if not isinstance(msg, dict):
            return _error(None, INVALID_REQUEST, "Invalid Request", "a JSON-RPC message is an object")
        rid = msg.get("id")
        echo = rid if _valid_id(rid) else None
        if "method" not in msg and ("result" in msg or "error" in msg):
            return None  # a response nobody is waiting for
        problem = _request_problem(msg)
        if problem is not None:
            return _error(echo, INVALID_REQUEST, "Invalid Request", problem)
        method = msg["method"]
        params = msg.get("params")
        notification = "id" not in msg
        if notification:
            if method == "exit":
                self.done = True
            return None
        if self.busy is not None:
            return _error(rid, INVALID_REQUEST, "Invalid Request",
                          f"a {method} request while {self.busy} is in progress (the protocol is sequential)")
        if method == "initialize":
            bad = _initialize_problem(params)
            if bad is not None:
                return _error(rid, INVALID_PARAMS, "Invalid params", bad)
        if method == "shutdown":
            self.done = True
        self.busy = method
        try:
            result = self.handler(method, params, self.call)
        except Stop:
            raise
        except Exception as exc:  # the engine's error, never a traceback on the wire
            code, message, data = self._translated(exc)
            return _error(rid, code, message, data)
        finally:
            self.busy = None
        try:
            safejson.dumps(result)
        except (ValueError, TypeError, RecursionError) as exc:
            return _error(rid, INTERNAL, "Internal error", f"the result is not JSON: {type(exc).__name__}")
        return {"jsonrpc": JSONRPC, "id": rid, "result": result}

    def _translated(self, exc: BaseException) -> tuple[int, str, Json]:
        if self.translate is not None:
            try:
                return self.translate(exc)
            except Exception:  # pragma: no cover - a translator that fails is an internal error
                pass
        return INTERNAL, "Internal error", type(exc).__name__

    # -- our requests to the harness ---------------------------------------------------------
    def send_request(self, method: str, params: Json, reply: Callable[[Json, RemoteError | None], None]) -> int:
        """Send a request and return its id without waiting: ``reply(result, error)`` gets its answer
        when :meth:`wait_answer` (or :meth:`call`) reads it."""
        self.next_id += 1
        rid = self.next_id
        self.outstanding[rid] = reply
        self.send({"jsonrpc": JSONRPC, "id": rid, "method": method, "params": params})
        return rid

    def notify(self, method: str, params: Json) -> None:
        self.send({"jsonrpc": JSONRPC, "method": method, "params": params})

    def forget(self, rid: Json) -> None:
        """No answer to this request is awaited any more (it was cancelled, or its step is over): when
        it comes it is a response nobody waits for, ignored."""
        self.outstanding.pop(rid, None)

    def wait_answer(self) -> bool:
        """Read until the answer to one outstanding request arrives and hand it to its reply (answering
        what arrives meanwhile); False at once when none is outstanding."""
        while self.outstanding:
            msg, err = self._read()
            if err is not None:
                self.send(err)
                continue
            if self._answered(msg):
                return True
            answer = self._dispatch(msg)
            if answer is not None:
                self.send(answer)
            if self.done:
                raise Stop
        return False

    def _answered(self, msg: Json) -> bool:
        """Is ``msg`` the answer to an outstanding request? Then it went to that request's reply."""
        if not (isinstance(msg, dict) and "method" not in msg and msg.get("jsonrpc") == JSONRPC
                and msg.get("id").__class__ is int and msg["id"] in self.outstanding
                and ("result" in msg or "error" in msg)):
            return False
        reply = self.outstanding.pop(msg["id"])
        if "error" in msg:
            e = msg["error"]
            reply(None, RemoteError(e.get("code"), e.get("message"), e.get("data")) if isinstance(e, dict)
                  else RemoteError(None, "a malformed error answer"))
        else:
            reply(msg["result"], None)
        return True

    def call(self, method: str, params: Json) -> Json:
        """Send a request to the harness; answer what arrives meanwhile; return its result."""
        self.next_id += 1
        rid = self.next_id
        self.send({"jsonrpc": JSONRPC, "id": rid, "method": method, "params": params})
        while True:
            msg, err = self._read()
            if err is not None:
                self.send(err)
                continue
            if isinstance(msg, dict) and "method" not in msg and msg.get("id") == rid and \
                    msg.get("id").__class__ is int and msg.get("jsonrpc") == JSONRPC:
                if "error" in msg:
                    e = msg["error"]
                    if isinstance(e, dict):
                        raise RemoteError(e.get("code"), e.get("message"), e.get("data"))
                    raise RemoteError(None, "a malformed error answer")
                if "result" in msg:
                    return msg["result"]
            if self._answered(msg):
                continue
            answer = self._dispatch(msg)
            if answer is not None:
                self.send(answer)
            if self.done:
                raise Stop


def _request_problem(msg: dict[str, Json]) -> str | None:
    if msg.get("jsonrpc") != JSONRPC:
        return 'a JSON-RPC 2.0 message has "jsonrpc": "2.0"'
    if not isinstance(msg.get("method"), str):
        return "method must be a string"
    if "id" in msg and not _valid_id(msg["id"]):
        return "id must be a string, a number or null"
    if "params" in msg and not isinstance(msg["params"], (dict, list)):
        return "params must be an object or an array"
    return None


def _initialize_problem(params: Json) -> str | None:
    if not isinstance(params, dict):
        return 'initialize takes {"protocolVersion": 1}'
    v = params.get("protocolVersion")
    if v.__class__ is not int or v != PROTOCOL_VERSION:
        shown = "missing" if "protocolVersion" not in params else safejson.dumps(v)
        shown = shown if len(shown) <= 40 else shown[:39] + "…"
        return f"unsupported protocolVersion {shown}: this implementation speaks version {PROTOCOL_VERSION}"
    return None
