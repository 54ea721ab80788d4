"""``loopspec monitor``: the oracle live, as an OpenTelemetry (OTLP/HTTP) endpoint.

Point an application's OTLP exporter (or a Collector's ``otlphttp`` exporter) at it::

    loopspec monitor                                   # listens on 127.0.0.1:4318
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://127.0.0.1:4318/v1/traces python my_agent.py

It accepts trace exports at ``/v1/traces`` (protobuf or JSON, gzip or not), judges each run when its trace
closes — its root span arrives, or ``--idle`` seconds pass without a span of it — and prints one verdict
per run as NDJSON on stdout: the object ``loopspec check --format json`` lists for that run, with a
``monitor`` field naming the trace and how it closed. ``GET /metrics`` serves Prometheus metrics, ``GET
/healthz`` says it is up. ``--forward URL`` sends every accepted request on to another OTLP endpoint.

On SIGINT or SIGTERM it stops accepting, judges what it still holds, prints it and exits with ``check``'s
exit codes: 0 every run conformed, 1 a run violated the spec, 2 something was unreadable (a refused
request body included). ``--html FILE`` and ``--junit FILE`` write, at that moment, the same reports as
``check`` does for every run judged since the start (one JUnit test case per run). See docs/monitor.md.
"""

from __future__ import annotations

import argparse
import sys
import threading
from typing import Any

from ._common import EXIT_USAGE, UsageError, add_format_option, add_quiet_option, add_spec_option
from ._reports import CheckReports, add_report_options, check_report_paths


def _listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT (e.g. 127.0.0.1:4318), got {text!r}")
    return (host.strip("[]") or "127.0.0.1"), int(port)


def _positive(kind: type) -> Any:
    def parse(text: str) -> Any:
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if v <= 0:
            raise argparse.ArgumentTypeError(f"must be more than 0, got {text!r}")
        return v

    return parse


def register(sub: Any) -> None:
    p = sub.add_parser("monitor", help="judge agent runs live: an OTLP/HTTP endpoint for OpenTelemetry traces",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--listen", metavar="HOST:PORT", type=_listen, default=("127.0.0.1", 4318),
                   help="where to listen (default 127.0.0.1:4318, the OTLP/HTTP port; port 0 picks a free one, "
                        "printed on stderr)")
    p.add_argument("--idle", metavar="S", type=_positive(float), default=30.0,
                   help="judge a trace whose root span has not arrived after S seconds without a span of it "
                        "(default 30)")
    p.add_argument("--max-open-runs", metavar="N", type=_positive(int), default=10_000,
                   help="at most N traces held open; beyond, the oldest is judged as it stands, with a note "
                        "(default 10000)")
    p.add_argument("--max-held-spans", metavar="N", type=_positive(int), default=1_000_000,
                   help="at most N spans held between acceptance and verdict; beyond, requests are refused with "
                        "429 and Retry-After (default 1000000)")
    p.add_argument("--max-body-bytes", metavar="N", type=_positive(int), default=16 * 1024 * 1024,
                   help="refuse a request body larger than N bytes, before or after gzip, with 413 (default 16 MiB)")
    p.add_argument("--forward", metavar="URL", default=None,
                   help="send every accepted request on, unchanged, to this OTLP/HTTP endpoint "
                        "(e.g. http://collector:4318/v1/traces)")
    add_spec_option(p)
    add_format_option(p, ("json", "text"), what="each run's verdict",
                      meanings={"json": "one NDJSON object per run on stdout, as check --format json lists it",
                                "text": "one line per run, for people"})
    add_quiet_option(p, "the verdicts of runs that violate the spec or cannot be read, not the conforming ones")
    add_report_options(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise UsageError("loopspec monitor needs prometheus-client (and opentelemetry-proto for protobuf bodies): "
                         "pip install 'loopspec[monitor]'") from None
    if args.forward is not None and not args.forward.startswith(("http://", "https://")):
        raise UsageError(f"--forward: expected an http:// or https:// URL, got {args.forward!r}")
    check_report_paths(args)
    from ..monitor import Monitor, Settings
    from ..spec.loader import default_spec

    host, port = args.listen
    settings = Settings(host=host, port=port, idle=args.idle, max_open_runs=args.max_open_runs,
                        max_held_spans=args.max_held_spans, max_body_bytes=args.max_body_bytes, forward=args.forward,
                        format=args.format, quiet=args.quiet)
    reports = (CheckReports(args, getattr(args, "argv", None), command="monitor",
                            sources=[f"http://{host}:{port}/v1/traces"]) if args.html or args.junit else None)
    mon = Monitor(settings, default_spec(), on_record=reports.record if reports else None,
                  on_error=reports.error if reports else None)
    try:
        mon.start()
    except OSError as exc:
        print(f"loopspec monitor: cannot listen on {host}:{port}: {exc.strerror or exc}", file=sys.stderr)
        if reports is not None:
            reports.abandon()
        return EXIT_USAGE
    h, p = mon.address
    print(f"loopspec monitor: listening on http://{h}:{p}/v1/traces (metrics: /metrics)", file=sys.stderr, flush=True)
    stop = threading.Event()
    try:
        while not stop.wait(3600):
            pass
    except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM, SIGHUP (cli.main raises Terminated for the last two)
        reason = "terminated" if type(exc).__name__ == "Terminated" else "interrupted"
        print(f"loopspec monitor: {reason}: judging the traces still open", file=sys.stderr, flush=True)
    mon.stop()
    print(f"loopspec monitor: {mon.summary_line()}", file=sys.stderr)
    if reports is not None:
        for path in reports.finish(mon.summary, mon.exit_code):
            print(f"loopspec monitor: wrote {path}", file=sys.stderr)
    return mon.exit_code
