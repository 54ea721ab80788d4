"""The live monitor: an OTLP/HTTP endpoint that judges each agent run as its trace closes.

Four parts, each with its own thread:

* the HTTP server (one thread per connection) takes ``POST /v1/traces``, decodes the body
  (:mod:`._otlp`), refuses what it must (400, 413, 415, 429) and hands the accepted spans to the open
  traces (:mod:`._runs`); ``GET /metrics`` and ``GET /healthz`` answer from the counters;
* the judge (one thread) takes each closed trace and judges it exactly as ``loopspec check`` judges an
  OTLP/JSON file holding the same spans (:func:`loopspec.oracle.read_text_input`), printing one NDJSON
  line per run — the object ``check --format json`` lists for it, plus ``monitor`` (the trace, and why
  and, for an incomplete trace, with what note it was closed);
* the ticker closes traces idle for ``--idle`` seconds;
* the forwarder (with ``--forward URL``) sends every accepted request on, unchanged, to another OTLP
  endpoint, so the monitor can sit in front of a Collector.

Memory is bounded: at most ``--max-open-runs`` traces are open (the oldest beyond is judged as it stands,
with a note), at most ``--max-held-spans`` spans are held between acceptance and verdict (more is refused
with 429 and ``Retry-After``, which OTLP exporters honour by retrying), bodies beyond ``--max-body-bytes``
are refused with 413 (compressed or not). A span the server accepted (answered 200) is always judged:
when its trace closes, or at shutdown.
"""

from __future__ import annotations

import json
import queue
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import IO, Any, Final

from ..oracle import FileResult, InputError, RunRecord, Summary, check_trace, read_text_input
from ..spec.loader import Spec
from . import _otlp
from ._runs import Closed, Conversation, HeldConversations, OpenTraces

Json = Any

DEFAULT_PORT: Final = 4318  # the OTLP/HTTP port


@dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    idle: float = 30.0
    max_open_runs: int = 10_000
    max_held_spans: int = 1_000_000
    max_body_bytes: int = 16 * 1024 * 1024
    forward: str | None = None
    forward_queue: int = 1_000
    forward_timeout: float = 10.0
    remember_closed: int = 100_000
    #: how each verdict is printed: "json" (one NDJSON object per run) or "text" (one line per run, for people)
    format: str = "json"
    #: print only the verdicts of runs that did not conform
    quiet: bool = False


class Metrics:
    """The Prometheus counters of one monitor (its own registry, so several can run in one process)."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        r = self.registry = CollectorRegistry(auto_describe=True)
        self.runs = Counter("loopspec_monitor_runs", "Runs judged, by verdict", ["verdict"], registry=r)
        self.violations = Counter("loopspec_monitor_violations", "Violations found, by rule", ["rule"], registry=r)
        self.incomplete = Counter("loopspec_monitor_traces_closed_incomplete",
                                  "Traces judged before their root span arrived, by reason", ["reason"], registry=r)
        self.received = Counter("loopspec_monitor_spans_received", "Spans received in accepted requests", registry=r)
        self.rejected = Counter("loopspec_monitor_spans_rejected", "Spans refused (partial success or the whole "
                                "request refused), by reason", ["reason"], registry=r)
        self.requests = Counter("loopspec_monitor_requests", "Export requests, by HTTP status", ["status"],
                                registry=r)
        self.open_runs = Gauge("loopspec_monitor_open_traces", "Traces held open, waiting to close", registry=r)
        self.held = Gauge("loopspec_monitor_held_spans", "Spans held between acceptance and verdict", registry=r)
        self.latency = Histogram("loopspec_monitor_judge_seconds", "Time to judge one closed trace", registry=r,
                                 buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5))
        self.input_errors = Counter("loopspec_monitor_input_errors", "Unreadable spans or runs", registry=r)
        self.forwarded = Counter("loopspec_monitor_forwarded_requests", "Requests forwarded (--forward), by outcome",
                                 ["outcome"], registry=r)

    def render(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def text_line(obj: Json) -> str:
    """A verdict (check's JSON object for one run, with its ``monitor`` field) as one line for people."""
    from ..support.text import printable

    mon = obj.get("monitor") or {}
    where = f"trace {mon.get('trace')}, closed by {mon.get('closedBy')}"
    run = printable(str(obj.get("run")))
    if obj.get("verdict") == "conforms":
        return f"ok   {run} ({where}, {obj.get('events')} events)"
    v = obj.get("violation")
    if v:
        last = (v.get("explanation") or "").strip().splitlines()
        return (f"FAIL {run} ({where}): {v.get('rule')} {v.get('kind')}"
                + (f": {printable(last[-1])}" if last else ""))
    err = obj.get("error") or {}
    return f"UNREADABLE {run} ({where}): {printable(str(err.get('message', '')))}"


class Output:
    """NDJSON lines (or, with ``fmt="text"``, one line per verdict for people) on a stream; a reader that goes
    away does not stop the monitor (nor change its exit code). ``quiet``: conforming runs are not printed."""

    def __init__(self, out: IO[str], err: IO[str], fmt: str = "json", quiet: bool = False) -> None:
        self.out, self.err = out, err
        self.fmt, self.quiet = fmt, quiet
        self.lock = threading.Lock()
        self.closed = False

    def line(self, obj: Json) -> None:
        if self.quiet and obj.get("verdict") == "conforms":
            return
        text = text_line(obj) if self.fmt == "text" else json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
        with self.lock:
            if self.closed:
                return
            try:
                self.out.write(text + "\n")
                self.out.flush()
            except (OSError, ValueError):
                self.closed = True
                self.note("standard output was closed: verdicts are no longer printed (the metrics and the exit "
                          "code still count them)")

    def note(self, text: str) -> None:
        try:
            self.err.write(f"loopspec monitor: {text}\n")
            self.err.flush()
        except (OSError, ValueError):
            pass


class Monitor:
    """One monitor: call :meth:`start`, then :meth:`stop` (which judges everything still held)."""

    def __init__(self, settings: Settings, spec: Spec, out: IO[str] | None = None, err: IO[str] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 on_record: Callable[[RunRecord], None] | None = None,
                 on_error: Callable[[InputError], None] | None = None) -> None:
        self.s = settings
        # called on the judge thread with each verdict and each input error (the --html/--junit reports)
        self.on_record = on_record
        self.on_error = on_error
        self.spec = spec
        self.clock = clock
        self.output = Output(out or sys.stdout, err or sys.stderr, settings.format, settings.quiet)
        self.metrics = Metrics()
        self.traces = OpenTraces(idle=settings.idle, max_open=settings.max_open_runs,
                                 remember=settings.remember_closed)
        # one model client's traces (a model call each), held by the judge thread until no trace continues their
        # conversation for --idle seconds, then judged together (the oracle stitches them, as check does)
        self.conversations = HeldConversations(idle=settings.idle, max_open=settings.max_open_runs,
                                               remember=settings.remember_closed)
        self.lock = threading.Lock()  # the open traces and the held-span count
        self.pending_spans = 0  # closed, waiting for the judge
        self.judge_q: queue.Queue[Closed | None] = queue.Queue()
        self.summary = Summary()
        self.traces_judged = 0
        self.refused_bodies = 0
        self.forward_q: queue.Queue[tuple[bytes, dict[str, str]] | None] | None = (
            queue.Queue(maxsize=settings.forward_queue) if settings.forward else None)
        self.server: ThreadingHTTPServer | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- life cycle -------------------------------------------------------------------------------
    @property
    def address(self) -> tuple[str, int]:
        assert self.server is not None
        host, port = self.server.server_address[:2]
        return str(host), int(port)

    def start(self) -> None:
        self.server = _Server((self.s.host, self.s.port), _Handler)
        self.server.monitor = self
        specs: list[tuple[str, Callable[[], None]]] = [
            ("http", self.server.serve_forever), ("judge", self._judge_loop), ("ticker", self._tick_loop)]
        if self.forward_q is not None:
            specs.append(("forward", self._forward_loop))
        for name, fn in specs:
            t = threading.Thread(target=fn, name=f"loopspec-monitor-{name}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> Summary:
        """Stop accepting, judge every trace still open, wait for the judge and the forwarder; the summary."""
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        self._stop.set()
        with self.lock:
            closed = self.traces.all()
            self._enqueue(closed)
        self.judge_q.put(None)
        for t in self._threads:
            if t.name.endswith(("judge", "forward")):
                t.join(timeout=None if t.name.endswith("judge") else self.s.forward_timeout + 1)
        return self.summary

    def summary_line(self) -> str:
        s = self.summary
        rules = ", ".join(f"{r} ×{n}" for r, n in sorted(s.by_rule.items()))
        return (f"judged {s.runs} run(s) in {self.traces_judged} trace(s), {s.events} span(s): {s.conform} conform, "
                f"{s.violate} violate" + (f" ({rules})" if rules else "") + f", {s.unreadable} unreadable"
                + (f", {s.input_errors} input error(s)" if s.input_errors else "")
                + (f"; {self.refused_bodies} request(s) refused" if self.refused_bodies else ""))

    @property
    def exit_code(self) -> int:
        """``loopspec check``'s exit codes: 2 when anything was unreadable (a refused body included), else 1
        when a run violates the spec, else 0."""
        return 2 if self.refused_bodies else self.summary.exit_code

    # -- intake (HTTP threads) ----------------------------------------------------------------------
    def export(self, body: bytes, headers: dict[str, str]) -> tuple[int, bytes, str, dict[str, str]]:
        """Handle one ``POST /v1/traces``: (status, body, content type, extra headers)."""
        kind = _otlp.media_type(_otlp.header(headers, "content-type"))
        reply = kind if kind in (_otlp.PROTOBUF, _otlp.JSON) else _otlp.JSON
        try:
            raw = _otlp.inflate(body, _otlp.header(headers, "content-encoding"), self.s.max_body_bytes)
            cut = _otlp.by_trace(_otlp.decode(raw, _otlp.header(headers, "content-type"),
                                              max_bytes=self.s.max_body_bytes))
        except _otlp.BodyError as exc:
            return self.refuse(exc.status, exc.message, reply)
        now = self.clock()
        with self.lock:
            incoming = cut.accepted
            if incoming and self.traces.spans + self.pending_spans + incoming > self.s.max_held_spans:
                self.metrics.rejected.labels("flood: --max-held-spans reached").inc(incoming + cut.rejected)
                self.metrics.requests.labels("429").inc()
                body_, ctype = _otlp.status_body(reply, _otlp.RESOURCE_EXHAUSTED,
                                                 f"{self.traces.spans + self.pending_spans} spans are held, waiting "
                                                 f"for their verdict (--max-held-spans {self.s.max_held_spans}): "
                                                 "retry later")
                return 429, body_, ctype, {"Retry-After": "1"}
            late = [t for t in cut.traces if self.traces.was_closed(t)]
            for t in late:
                cut.reject("the trace was already judged (its root span had arrived before this span)",
                           cut.spans.pop(t))
                cut.traces.pop(t)
            for t, frags in cut.traces.items():
                self.traces.add(t, frags, cut.spans[t], now)
            closed = [c for t in cut.traces if t in cut.roots and (c := self.traces.close(t, "root")) is not None]
            closed += self.traces.overflow()
            self._enqueue(closed)
        self.metrics.received.inc(cut.accepted)
        for reason, n in cut.reasons.items():
            self.metrics.rejected.labels(reason).inc(n)
        self.metrics.requests.labels("200").inc()
        if self.forward_q is not None:
            self._forward(body, headers)
        message = "; ".join(f"{n} span(s): {r}" for r, n in sorted(cut.reasons.items()))
        out, ctype = _otlp.success_body(reply, cut.rejected, message)
        return 200, out, ctype, {}

    def refuse(self, status: int, message: str, reply: str) -> tuple[int, bytes, str, dict[str, str]]:
        self.refused_bodies += 1
        self.metrics.requests.labels(str(status)).inc()
        self.metrics.rejected.labels(f"request refused ({status})").inc()
        self.output.note(f"refused an export request ({status}): {message}")
        body, ctype = _otlp.status_body(reply, _otlp.INVALID_ARGUMENT, message)
        return status, body, ctype, {}

    def _enqueue(self, closed: list[Closed]) -> None:
        """(with the lock held) hand closed traces to the judge"""
        for c in closed:
            self.pending_spans += c.spans
            self.judge_q.put(c)
        self.metrics.open_runs.set(len(self.traces.open))
        self.metrics.held.set(self.traces.spans + self.pending_spans)

    # -- the judge ----------------------------------------------------------------------------------
    def _judge_loop(self) -> None:
        step = max(0.05, min(1.0, self.s.idle / 4))
        while True:
            try:
                c = self.judge_q.get(timeout=step)
            except queue.Empty:
                self._judge_conversations(self.conversations.expired(self.clock()))
                continue
            if c is None:
                self._judge_conversations(self.conversations.all())
                return
            held = False
            try:
                held = self.judge(c)
            except Exception as exc:  # a bug in judging one trace must not stop the monitor
                self.metrics.input_errors.inc()
                self.output.note(f"trace {c.trace}: internal error while judging it ({type(exc).__name__}: {exc}); "
                                 "please report it")
            finally:
                if not held:
                    with self.lock:
                        self.pending_spans -= c.spans
                        self.metrics.held.set(self.traces.spans + self.pending_spans)
            self._judge_conversations(self.conversations.overflow() + self.conversations.expired(self.clock()))

    def _judge_conversations(self, convs: list[Conversation]) -> None:
        for conv in convs:
            first = conv.traces[0]
            try:
                frags = [f for c in conv.traces for f in c.fragments]
                mon: dict[str, Json] = {"trace": first.trace, "closedBy": conv.traces[-1].reason,
                                        "conversation": {"traces": [c.trace for c in conv.traces],
                                                         "judgedBy": conv.reason}}
                notes = [c.note for c in conv.traces if c.note is not None]
                if conv.note is not None:
                    notes.append(conv.note)
                if notes:
                    mon["note"] = "; ".join(notes)
                self._judge_document(_otlp.document(frags), first.trace, len(conv.traces), mon,
                                     [c.reason for c in conv.traces if c.note is not None])
            except Exception as exc:  # a bug in judging one conversation must not stop the monitor
                self.metrics.input_errors.inc()
                self.output.note(f"trace {first.trace}: internal error while judging its conversation "
                                 f"({type(exc).__name__}: {exc}); please report it")
            finally:
                with self.lock:
                    self.pending_spans -= conv.spans
                    self.metrics.held.set(self.traces.spans + self.pending_spans)

    def judge(self, c: Closed) -> bool:
        """Judge a closed trace — or, when it is one model client's call (a trace of model calls only, no agent
        invocation), hold it with the conversation it continues (True): that is judged once no trace has
        continued it for ``--idle`` seconds."""
        t0 = time.perf_counter()
        keys, res = check_trace(_otlp.document(c.fragments), f"otlp-http:{c.trace}", spec=self.spec)
        if keys is not None:
            self.conversations.add(c, keys[0], keys[1], self.clock())
            return True
        assert res is not None
        mon: dict[str, Json] = {"trace": c.trace, "closedBy": c.reason}
        if c.note is not None:
            mon["note"] = c.note
        self._report(res, time.perf_counter() - t0, c.trace, 1, mon, [c.reason] if c.note is not None else [])
        return False

    def _judge_document(self, doc: bytes, trace: str, traces: int, mon: dict[str, Json],
                        incomplete: list[str]) -> None:
        t0 = time.perf_counter()
        res = read_text_input(doc, name=f"otlp-http:{trace}", input_format="otlp-json", spec=self.spec)
        self._report(res, time.perf_counter() - t0, trace, traces, mon, incomplete)

    def _report(self, res: FileResult, seconds: float, trace: str, traces: int, mon: dict[str, Json],
                incomplete: list[str]) -> None:
        self.metrics.latency.observe(seconds)
        self.traces_judged += traces
        self.summary.events += res.summary.events
        for reason in incomplete:
            self.metrics.incomplete.labels(reason).inc()
        for e in res.errors:
            self.summary.input_errors += 1
            self.metrics.input_errors.inc()
            self.output.note(f"trace {trace}: {e.message}")
            if self.on_error is not None:
                self.on_error(e)
        for rec in res.records:
            self.summary.add(rec)
            self.metrics.runs.labels(rec.verdict).inc()
            if rec.violation is not None:
                self.metrics.violations.labels(rec.violation.rule).inc()
            obj = rec.to_json()
            obj["monitor"] = mon
            self.output.line(obj)
            if self.on_record is not None:
                self.on_record(rec)

    def _tick_loop(self) -> None:
        step = max(0.05, min(1.0, self.s.idle / 4))
        while not self._stop.wait(step):
            with self.lock:
                self._enqueue(self.traces.expired(self.clock()))

    # -- forwarding ---------------------------------------------------------------------------------
    def _forward(self, body: bytes, headers: dict[str, str]) -> None:
        assert self.forward_q is not None
        keep = {k: v for k, v in headers.items() if k.lower() in ("content-type", "content-encoding")}
        try:
            self.forward_q.put_nowait((body, keep))
        except queue.Full:
            self.metrics.forwarded.labels("dropped: queue full").inc()

    def _forward_loop(self) -> None:
        assert self.forward_q is not None and self.s.forward is not None
        failures = 0
        while True:
            try:
                item = self.forward_q.get(timeout=0.2)
            except queue.Empty:
                if self._stop.is_set():
                    return
                continue
            if item is None:
                return
            body, headers = item
            req = urllib.request.Request(self.s.forward, data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=self.s.forward_timeout) as resp:
                    resp.read()
                self.metrics.forwarded.labels("ok").inc()
            except urllib.error.HTTPError as exc:
                self.metrics.forwarded.labels(f"http {exc.code}").inc()
                failures += 1
            except (OSError, ValueError) as exc:
                self.metrics.forwarded.labels("unreachable").inc()
                failures += 1
                if failures == 1:
                    self.output.note(f"cannot forward to {self.s.forward}: {exc}")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    monitor: Monitor


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "loopspec-monitor"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: bytes, ctype: str, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            body, ctype = self.server.monitor.metrics.render()
            self._send(200, body, ctype)
        elif path == "/healthz":
            self._send(200, b"ok\n", "text/plain; charset=utf-8")
        else:
            self._send(404, b"not found: POST /v1/traces, GET /metrics, GET /healthz\n", "text/plain; charset=utf-8")

    def do_POST(self) -> None:
        mon = self.server.monitor
        path = self.path.split("?", 1)[0]
        reply = _otlp.media_type(self.headers.get("Content-Type"))
        reply = reply if reply in (_otlp.PROTOBUF, _otlp.JSON) else _otlp.JSON
        if path != "/v1/traces":
            self.close_connection = True
            self._send(404, b"not found: this endpoint takes traces at /v1/traces\n", "text/plain; charset=utf-8")
            return
        try:
            body = self._body(mon.s.max_body_bytes)
        except _otlp.BodyError as exc:
            self.close_connection = True  # the rest of the body is not read
            self._send(*mon.refuse(exc.status, exc.message, reply)[:3])
            return
        status, out, ctype, extra = mon.export(body, dict(self.headers.items()))
        self._send(status, out, ctype, extra)

    def _body(self, limit: int) -> bytes:
        if (self.headers.get("Transfer-Encoding") or "").lower() == "chunked":
            return self._chunked(limit)
        length = self.headers.get("Content-Length")
        try:
            n = int(length) if length is not None else -1
        except ValueError:
            n = -1
        if n < 0:
            raise _otlp.BodyError(411 if length is None else 400, "Content-Length is missing or not a number")
        if n > limit:
            raise _otlp.BodyError(413, f"the body has {n} bytes, more than {limit} (--max-body-bytes)")
        return self.rfile.read(n)

    def _chunked(self, limit: int) -> bytes:
        out = bytearray()
        while True:
            line = self.rfile.readline(64)
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise _otlp.BodyError(400, "malformed chunked body") from None
            if size == 0:
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass
                return bytes(out)
            if len(out) + size > limit:
                raise _otlp.BodyError(413, f"the body is larger than {limit} bytes (--max-body-bytes)")
            out += self.rfile.read(size)
            self.rfile.readline(8)
