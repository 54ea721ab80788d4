"""An application that exports its traces the normal way, for tests/test_monitor.py and benchmarks.

    python tests/monitor_app.py ENDPOINT FILE [--runs N] [--json]

Runs pydantic-ai agents with a scripted model (``FunctionModel``, no network), instrumented by pydantic-ai
itself, through one OpenTelemetry SDK ``TracerProvider`` with two span processors: the SDK's
``BatchSpanProcessor`` with the OTLP/HTTP protobuf exporter (``opentelemetry-exporter-otlp-proto-http``)
pointed at ENDPOINT — what an application in production does — and the OTLP/JSON file exporter writing the
same spans to FILE, for ``loopspec check`` to judge the same spans from a file. Each run is its own trace.
The scenarios cycle: a conforming run, a call id repeated with the same arguments (pydantic-ai executes it
again: R6), a call id reused for other arguments (executed: R7).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

SCENARIOS: list[tuple[str, list[Any]]] = [
    ("pass", [[("call_1", "get_weather", {"city": "Paris"}), ("call_2", "get_weather", {"city": "Oslo"})],
              "18C in Paris, 9C in Oslo."]),
    ("replay", [[("call_1", "get_weather", {"city": "Paris"})], [("call_1", "get_weather", {"city": "Paris"})],
                "18C."]),
    ("conflict", [[("call_1", "get_weather", {"city": "Paris"})], [("call_1", "get_weather", {"city": "Oslo"})],
                  "Done."]),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("endpoint")
    ap.add_argument("file")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)

    from opentelemetry.exporter.otlp.json.file import FileSpanExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    from pydantic_ai import Agent
    from pydantic_ai.capabilities.instrumentation import Instrumentation
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.models.instrumented import InstrumentationSettings

    provider = TracerProvider(resource=Resource.create({"service.name": "loopspec-monitor-test"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=args.endpoint, timeout=10),
                                                   schedule_delay_millis=200))
    provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(args.file)))
    settings = InstrumentationSettings(tracer_provider=provider)

    for n in range(args.runs):
        _name, steps = SCENARIOS[n % len(SCENARIOS)]
        script = list(steps)
        readings = [0]

        def model(messages: list[Any], info: AgentInfo, script: list[Any] = script) -> ModelResponse:
            step = script.pop(0)
            if isinstance(step, str):
                return ModelResponse(parts=[TextPart(step)])
            return ModelResponse(parts=[ToolCallPart(name, a, tool_call_id=cid) for cid, name, a in step])

        def get_weather(city: str, readings: list[int] = readings) -> str:
            readings[0] += 1
            return f"{city}: {17 + readings[0]}C"

        agent = Agent(FunctionModel(model, model_name="scripted"), name="weather",
                      capabilities=[Instrumentation(settings=settings)])
        agent.tool_plain(get_weather)
        asyncio.run(agent.run("What is the weather?"))
    provider.shutdown()  # flushes the batch processor: every span is exported before the process ends
    return 0


if __name__ == "__main__":
    sys.exit(main())
