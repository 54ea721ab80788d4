"""The OpenAI Agents SDK's own tracing, recorded offline for the oracle's golden corpus (used by
tests/telemetry_instrumentations.py, group ``agents-sdk`` and ``agents-sdk-responses``).

Two exports of one run, both of what the SDK itself makes of its traces and spans:

* ``.agents.jsonl`` — a tracing processor of one's own, installed with ``set_trace_processors`` (the way
  docs/oracle.md tells users to keep the traces offline): ``span.export()`` as each span ends and
  ``trace.export()`` as the trace ends, one JSON object a line;
* ``.backend.jsonl`` — the SDK's own ``BatchTraceProcessor`` and ``BackendSpanExporter``, whose HTTP client's
  transport is an ``httpx2.MockTransport`` that writes each request body it is handed (``{"data": [...]}``, what
  the exporter posts to OpenAI) as a line, and answers 200: the exporter's real payload, nothing leaves the process.

Trace and span ids come from a counting generator installed on the SDK's trace provider (``gen_trace_id`` /
``gen_span_id``, in the SDK's formats ``trace_<32 hex>`` / ``span_<24 hex>``), so a recording's report is the
same every time; times are real.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class AgentsTracing:
    """The SDK's tracing, switched to each recording's two files."""

    def __init__(self) -> None:
        import httpx2
        from agents import set_trace_processors
        from agents.tracing import TracingProcessor, get_trace_provider
        from agents.tracing.processors import BackendSpanExporter, BatchTraceProcessor

        self.fh: Any = None
        self.backend: Any = None
        self.seed = 0
        self.n = 0
        me = self

        class JsonLines(TracingProcessor):
            """What a user writes to keep the SDK's traces offline (docs/oracle.md shows it)."""

            def on_trace_start(self, trace: Any) -> None:
                pass

            def on_trace_end(self, trace: Any) -> None:
                me.write(trace.export())

            def on_span_start(self, span: Any) -> None:
                pass

            def on_span_end(self, span: Any) -> None:
                me.write(span.export())

            def shutdown(self) -> None:
                pass

            def force_flush(self) -> None:
                pass

        def post(request: Any) -> Any:
            if me.backend is not None:
                me.backend.write(json.dumps(json.loads(request.content)) + "\n")
            return httpx2.Response(200, json={})

        exporter = BackendSpanExporter(api_key="sk-scripted", endpoint="http://scripted.invalid/v1/traces/ingest")
        exporter._client = httpx2.Client(transport=httpx2.MockTransport(post))
        self.batch = BatchTraceProcessor(exporter, schedule_delay=3600.0)
        set_trace_processors([JsonLines(), self.batch])
        provider = get_trace_provider()

        def trace_id() -> str:
            me.n += 1
            return f"trace_{me.seed:08x}{me.n:024x}"

        def span_id() -> str:
            me.n += 1
            return f"span_{me.seed:08x}{me.n:016x}"

        provider.gen_trace_id = trace_id  # type: ignore[method-assign]
        provider.gen_span_id = span_id  # type: ignore[method-assign]

    def write(self, item: Any) -> None:
        if item and self.fh is not None:
            self.fh.write(json.dumps(item) + "\n")

    def start(self, out: Path, stem: str, seed: int) -> None:
        self.seed, self.n = seed, 0
        self.fh = (out / f"{stem}.agents.jsonl").open("w", encoding="utf-8")
        self.backend = (out / f"{stem}.backend.jsonl").open("w", encoding="utf-8")

    def stop(self) -> None:
        self.batch.force_flush()
        for f in (self.fh, self.backend):
            f.close()
        self.fh = self.backend = None
