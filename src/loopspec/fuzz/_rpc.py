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

import json
import os
import select
import time
from collections.abc import Callable
from typing import Any, Final

__all__ = ["Channel", "Peer", "ProtocolFailure", "RpcError"]

Json = Any

JSONRPC: Final = "2.0"
MAX_LINE: Final = 16 * 1024 * 1024

# JSON-RPC 2.0 error codes
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL: Final = -32603
TOOL_FAILED: Final = -32000  # tool.execute: the tool failed; data.category is the failure class
MODEL_FAILED: Final = -32001  # model.next: the model failed


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


def _excerpt(raw: bytes, limit: int = 120) -> str:
    text = raw.decode("utf-8", errors="replace")
    return repr(text if len(text) <= limit else text[:limit] + "…")


class Channel:
    """One JSON value per line over raw file descriptors, with an optional inactivity timeout."""

    def __init__(self, rfd: int, wfd: int, *, timeout: float | None = None,
                 on_eof: Callable[[], str] | None = None) -> None:
        self.rfd, self.wfd = rfd, wfd
        self.timeout = timeout
        self.on_eof = on_eof  # extra evidence for a P1 (e.g. the process's exit code and stderr tail)
        self._buf = bytearray()
        self._start = 0
        self.sent = 0
        self.received = 0
        self.tap: Callable[[str, Json], None] | None = None  # sees every message: ("out" | "in", message)

    def send(self, message: Json) -> None:
        if self.tap is not None:
            self.tap("out", message)
        data = (json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False) + "\n").encode()
        view = memoryview(data)
        try:
            while view:
                n = os.write(self.wfd, view)
                view = view[n:]
        except (BrokenPipeError, ConnectionResetError, OSError) as exc:
            raise ProtocolFailure("P1", "exited", self._eof_detail(f"cannot write to its stdin ({exc.strerror})")) from None
        self.sent += 1

    def _eof_detail(self, what: str) -> str:
        extra = self.on_eof() if self.on_eof is not None else ""
        return what + (f"; {extra}" if extra else "")

    def receive(self) -> Json:
        """The next message. Blank lines are skipped."""
        while True:
            nl = self._buf.find(b"\n", self._start)
            if nl >= 0:
                line = bytes(self._buf[self._start:nl])
                self._start = nl + 1
                if self._start > 65536:
                    del self._buf[: self._start]
                    self._start = 0
                if not line.strip():
                    continue
                self.received += 1
                try:
                    msg = json.loads(line)
                except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
                    raise ProtocolFailure("P3", "malformed-json", f"a line that is not JSON: {_excerpt(line)}") from None
                if self.tap is not None:
                    self.tap("in", msg)
                return msg
            if len(self._buf) - self._start > MAX_LINE:
                raise ProtocolFailure("P3", "line-too-long", f"a line longer than {MAX_LINE} bytes")
            self._fill()

    def _fill(self) -> None:
        if self.timeout is not None:
            deadline = time.monotonic() + self.timeout
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ProtocolFailure("P2", "timeout", f"no message within {self.timeout:g} s")
                try:
                    ready, _, _ = select.select([self.rfd], [], [], left)
                except InterruptedError:  # pragma: no cover - PEP 475 retries for us
                    continue
                if ready:
                    break
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

        Raises :class:`RpcError` for an error response, :class:`ProtocolFailure` for anything else
        that goes wrong.
        """
        self._next_id += 1
        rid = self._next_id
        self.channel.send({"jsonrpc": JSONRPC, "id": rid, "method": method, "params": params})
        h = handler or self.handler
        while True:
            msg = self.channel.receive()
            kind = self._classify(msg)
            if kind == "request":
                self._answer(msg, h)
            elif kind == "notification":
                continue
            else:
                if msg.get("id") != rid:
                    if self.strict:
                        raise ProtocolFailure("P4", "wrong-id",
                                              f"a response with id {json.dumps(msg.get('id'))} while waiting for "
                                              f"the response to {method} (id {rid})")
                    continue
                if "error" in msg:
                    err = msg["error"]
                    if not isinstance(err, dict) or not isinstance(err.get("code"), int):
                        raise ProtocolFailure("P3", "bad-envelope", f"a malformed error object: {json.dumps(err)[:120]}")
                    raise RpcError(err["code"], str(err.get("message", "")), err.get("data"))
                return msg["result"]

    def notify(self, method: str, params: Json) -> None:
        self.channel.send({"jsonrpc": JSONRPC, "method": method, "params": params})

    def _classify(self, msg: Json) -> str:
        if not isinstance(msg, dict) or msg.get("jsonrpc") != JSONRPC:
            raise ProtocolFailure("P3", "not-jsonrpc", f"not a JSON-RPC 2.0 message: {json.dumps(msg)[:120]}")
        if "method" in msg:
            if not isinstance(msg["method"], str):
                raise ProtocolFailure("P3", "not-jsonrpc", f"a method that is not a string: {json.dumps(msg)[:120]}")
            return "request" if "id" in msg else "notification"
        if "id" in msg and (("result" in msg) != ("error" in msg)):
            return "response"
        raise ProtocolFailure("P3", "not-jsonrpc", f"neither a request nor a response: {json.dumps(msg)[:120]}")

    def _answer(self, msg: dict[str, Json], handler: Handler | None) -> None:
        rid = msg["id"]
        method = msg["method"]
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
