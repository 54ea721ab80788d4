"""Real recordings of the instrumentations people combine with the frameworks, each run in a process of its own
(instrumentors patch process-wide classes and do not all undo it): OpenInference for LangChain / LangGraph
(``openinference-instrumentation-langchain``) and for the openai client (``openinference-instrumentation-openai``),
OpenLLMetry for the Agents SDK and the openai client (``opentelemetry-instrumentation-openai-agents``,
``opentelemetry-instrumentation-openai``), and the official ``opentelemetry-instrumentation-openai-v2`` with
``opentelemetry-util-genai`` (the latest experimental GenAI conventions, content on spans).

    python -m tests.telemetry_instrumentations GROUP OUT_DIR     # one group's recordings; prints the manifest

Every group runs the same four scripted conversations, with no network (the Agents SDK's model is its Chat
Completions model over an ``openai.AsyncOpenAI`` client whose HTTP transport is ``httpx.MockTransport``; LangGraph's
is a scripted chat model):

* ``pass`` — two calls with distinct ids, both executed and answered, then the final answer;
* ``replay`` — the model repeats call id ``call_1`` with the same arguments in the next round (R6: the stored result
  is the answer, the tool is not run again);
* ``conflict`` — the model reuses ``call_1`` for other arguments in the next round (R7: refused, never executed);
* ``tool-error`` — the tool raises; the failure is answered as an error result (R10, R17) and the model answers.

What really happened is taken from the framework itself, not from the trace: the tool logs each execution
(``executed``), and the framework's own history says what was answered (``answered``). The manifest entry of each
recording carries both, and tests/test_oracle_instrumentations.py checks the oracle's verdict against them.

Exports go through the SDK's real exporters: the OTLP/JSON file exporter, the console exporter, and (``.pb.json``)
the protobuf JSON mapping of the OTLP request the OTLP/protobuf exporter encodes (``json_format.MessageToJson``: ids
in base64). Trace and span ids come from a counting id generator so a recording's report is the same every time.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import warnings
from importlib.metadata import version
from pathlib import Path
from typing import Any

from tests.telemetry_recordings import _Recorder

Json = Any

SCRIPTS: dict[str, list[Any]] = {
    "pass": [[("call_1", "get_weather", {"city": "Paris"}), ("call_2", "get_weather", {"city": "Oslo"})],
             "18C in Paris, 9C in Oslo."],
    "replay": [[("call_1", "get_weather", {"city": "Paris"})], [("call_1", "get_weather", {"city": "Paris"})],
               "18C."],
    "conflict": [[("call_1", "get_weather", {"city": "Paris"})], [("call_1", "get_weather", {"city": "Oslo"})],
                 "Done."],
    "tool-error": [[("call_1", "get_weather", {"city": "Atlantis"})], "No weather for Atlantis."],
}

#: group -> (framework, the packages whose versions the recording names)
GROUPS: dict[str, tuple[str, list[str]]] = {
    "openinference-langgraph": ("langgraph", ["langgraph", "langchain-core", "openinference-instrumentation-langchain"]),
    "openinference-openai": ("openai-agents", ["openai-agents", "openai", "openinference-instrumentation-openai"]),
    "openllmetry-openai-agents": ("openai-agents", ["openai-agents", "openai", "opentelemetry-instrumentation-openai-agents",
                                                    "opentelemetry-instrumentation-openai"]),
    "openllmetry-agents-only": ("openai-agents", ["openai-agents", "openai",
                                                  "opentelemetry-instrumentation-openai-agents"]),
    "openai-v2": ("openai-agents", ["openai-agents", "openai", "opentelemetry-instrumentation-openai-v2",
                                    "opentelemetry-util-genai"]),
    "openllmetry-langgraph": ("langgraph", ["langgraph", "langchain-core", "opentelemetry-instrumentation-langchain"]),
}

#: What each recording's report must say, from what really happened (``happened`` in the manifest):
#: (exit code, rules). LangGraph's ToolNode executes a repeated id (R6) and a reused one with other arguments (R7);
#: the Agents SDK drops a repeat without an answer (R11: seen where the spans hold the next request — OpenLLMetry
#: with the client instrumented, and the openai client's one-call traces once stitched into their conversation,
#: whose next request re-sends the history without the repeat; OpenLLMetry's Agents SDK spans record no model
#: output, so that verdict conforms and says the proposals are not recorded), refuses a reused id by raising
#: (never executed: conforms) and answers a failing tool with an error message (conforms).
EXPECT: dict[tuple[str, str], tuple[int, list[str]]] = {
    **{(g, "pass"): (0, []) for g in GROUPS},
    **{(g, "tool-error"): (0, []) for g in GROUPS},
    **{(g, "conflict"): (0, []) for g in GROUPS if GROUPS[g][0] != "langgraph"},
    **{(g, "replay"): (0, []) for g in GROUPS if GROUPS[g][0] != "langgraph"},
    **{(g, "replay"): (1, ["R6"]) for g in GROUPS if GROUPS[g][0] == "langgraph"},
    **{(g, "conflict"): (1, ["R7"]) for g in GROUPS if GROUPS[g][0] == "langgraph"},
    ("openllmetry-openai-agents", "replay"): (1, ["R11"]),
    ("openinference-openai", "replay"): (1, ["R11"]),
    ("openai-v2", "replay"): (1, ["R11"]),
}

PROTOBUF_JSON_GROUPS = ("openinference-langgraph", "openai-v2")


class _Log:
    """The tool, and what it really executed."""

    def __init__(self) -> None:
        self.executed: list[str] = []

    def __call__(self, city: str) -> str:
        self.executed.append(city)
        if city == "Atlantis":
            raise ValueError(f"no weather station in {city}")
        return f"{city}: {17 + len(self.executed)}C (reading {len(self.executed)})"


def _protobuf_json_exporter(path: Path) -> Any:
    from google.protobuf.json_format import MessageToJson
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class ProtobufJsonExporter(SpanExporter):
        """Each export as ``MessageToJson`` writes the ``ExportTraceServiceRequest`` (ids in base64)."""

        def export(self, spans: Any) -> SpanExportResult:
            with path.open("a", encoding="utf-8") as fh:
                fh.write(MessageToJson(encode_spans(spans)) + "\n")
            return SpanExportResult.SUCCESS

        def shutdown(self) -> None:
            pass

    return ProtobufJsonExporter()


def _start(rec: _Recorder, out: Path, stem: str, seed: int, group: str) -> None:
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    rec.start(out, stem, seed)
    if group in PROTOBUF_JSON_GROUPS:
        pb = out / f"{stem}.pb.json"
        pb.unlink(missing_ok=True)
        rec.switch.current.append(SimpleSpanProcessor(_protobuf_json_exporter(pb)))


# --------------------------------------------------------------------------------------------
# LangGraph under OpenInference
# --------------------------------------------------------------------------------------------


def _langgraph(script: list[Any], log: _Log) -> list[dict[str, Json]]:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, messages_to_dict
    from langchain_core.tools import StructuredTool
    from langgraph.prebuilt import create_react_agent

    msgs = [AIMessage(content=s) if isinstance(s, str) else
            AIMessage(content="", tool_calls=[{"name": n, "args": a, "id": c, "type": "tool_call"} for c, n, a in s])
            for s in script]

    class Scripted(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kw: Any) -> Any:
            return self

    def get_weather(city: str) -> str:
        """The weather in a city."""
        return log(city)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent: deprecated in favour of langchain.agents
        agent = create_react_agent(Scripted(messages=iter(msgs)), tools=[StructuredTool.from_function(get_weather)])
        result = asyncio.run(agent.ainvoke({"messages": [("user", "What is the weather in Paris and Oslo?")]}))
    return messages_to_dict(result["messages"])


def _answered_langchain(history: list[dict[str, Json]]) -> list[str]:
    out = []
    for m in history:
        if m.get("type") == "tool":
            d = m["data"]
            out.append(f"{d.get('tool_call_id')}: {d.get('status', 'success')}")
    return out


# --------------------------------------------------------------------------------------------
# The Agents SDK, its model over the openai client
# --------------------------------------------------------------------------------------------


def _openai_agents(script: list[Any], log: _Log) -> list[dict[str, Json]]:
    import httpx
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool
    from openai import AsyncOpenAI

    steps = list(script)
    k = [0]

    def handler(request: httpx.Request) -> httpx.Response:
        k[0] += 1
        step = steps.pop(0)
        if isinstance(step, str):
            msg: dict[str, Json] = {"role": "assistant", "content": step}
        else:
            msg = {"role": "assistant", "content": None, "tool_calls": [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
                for cid, name, args in step]}
        return httpx.Response(200, json={
            "id": f"chatcmpl-{k[0]}", "object": "chat.completion", "created": 1_700_000_000 + k[0],
            "model": "gpt-4o",
            "choices": [{"index": 0, "message": msg, "finish_reason": "stop" if isinstance(step, str) else "tool_calls"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})

    client = AsyncOpenAI(api_key="sk-scripted", base_url="http://scripted.invalid/v1",
                         http_client=httpx.AsyncClient(transport=httpx.MockTransport(handler)))

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return log(city)

    agent = Agent(name="weather", model=OpenAIChatCompletionsModel("gpt-4o", client), tools=[get_weather])
    result = asyncio.run(Runner.run(agent, "What is the weather in Paris and Oslo?"))
    return [x if isinstance(x, dict) else json.loads(json.dumps(x, default=str)) for x in result.to_input_list()]


def _answered_items(items: list[dict[str, Json]]) -> list[str]:
    return [f"{x.get('call_id')}: {str(x.get('output'))[:60]}" for x in items if x.get("type") == "function_call_output"]


def _instrument(group: str, rec: _Recorder) -> None:
    os.environ["OPENAI_API_KEY"] = "sk-scripted"
    if group == "openinference-langgraph":
        from openinference.instrumentation.langchain import LangChainInstrumentor

        LangChainInstrumentor().instrument(tracer_provider=rec.provider)
        return
    if group == "openllmetry-langgraph":
        from opentelemetry.instrumentation.langchain import LangchainInstrumentor

        os.environ["TRACELOOP_TRACE_CONTENT"] = "true"
        LangchainInstrumentor().instrument(tracer_provider=rec.provider)
        return
    from agents import set_trace_processors, set_tracing_disabled

    set_trace_processors([])  # never an exporter to OpenAI
    if group == "openinference-openai":
        from openinference.instrumentation.openai import OpenAIInstrumentor

        set_tracing_disabled(True)  # only the openai client is instrumented
        OpenAIInstrumentor().instrument(tracer_provider=rec.provider)
    elif group == "openllmetry-openai-agents":
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor as LlmetryOpenAI
        from opentelemetry.instrumentation.openai_agents import OpenAIAgentsInstrumentor

        os.environ["TRACELOOP_TRACE_CONTENT"] = "true"
        set_tracing_disabled(False)
        OpenAIAgentsInstrumentor().instrument(tracer_provider=rec.provider)
        LlmetryOpenAI().instrument(tracer_provider=rec.provider)
    elif group == "openllmetry-agents-only":
        from opentelemetry.instrumentation.openai_agents import OpenAIAgentsInstrumentor

        os.environ["TRACELOOP_TRACE_CONTENT"] = "true"
        set_tracing_disabled(False)
        OpenAIAgentsInstrumentor().instrument(tracer_provider=rec.provider)
    elif group == "openai-v2":
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor as OpenAIV2

        os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
        os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "span_only"
        set_tracing_disabled(True)
        OpenAIV2().instrument(tracer_provider=rec.provider)
    else:
        raise SystemExit(f"unknown group {group!r}")


def record_group(group: str, out: Path, seed0: int) -> list[dict[str, Any]]:
    """Make the four recordings of ``group`` into ``out`` (in this process); return their manifest entries."""
    os.environ.pop("OPENAI_AGENTS_DISABLE_TRACING", None)
    framework, packages = GROUPS[group]
    rec = _Recorder()
    _instrument(group, rec)
    versions = ", ".join(f"{p} {version(p)}" for p in [*packages, "opentelemetry-sdk",
                                                          "opentelemetry-exporter-otlp-json-file"])
    manifest: list[dict[str, Any]] = []
    for k, (name, script) in enumerate(SCRIPTS.items()):
        stem = f"rec-{group}-{name}"
        _start(rec, out, stem, seed0 + k, group)
        log = _Log()
        raised = None
        answered: list[str] | None = None
        try:
            if framework == "langgraph":
                answered = _answered_langchain(_langgraph(script, log))
            else:
                answered = _answered_items(_openai_agents(script, log))
        except Exception as exc:  # the framework ended the run with an exception: that is what happened
            raised = f"{type(exc).__name__}: {exc}".splitlines()[0]
        finally:
            rec.stop()
        proposed = [f"{c}: {n}({json.dumps(a)})" for step in script if not isinstance(step, str) for c, n, a in step]
        happened: dict[str, Json] = {"proposed": proposed, "executed": log.executed}
        if raised is None:
            happened["answered"] = answered
        else:
            happened["raised"] = raised
        kinds = ["otlp.jsonl", "console.json"] + (["pb.json"] if group in PROTOBUF_JSON_GROUPS else [])
        for kind in kinds:
            code, rules = EXPECT[(group, name)]
            manifest.append({"file": f"{stem}.{kind}", "inputFormat": "auto", "exit": code, "rules": rules,
                             "doc": f"{group} ({kind}): {name}. Recorded with {versions}.",
                             "group": group, "scenario": name, "happened": happened})
    return manifest


def main(argv: list[str]) -> int:
    group, out, seed0 = argv[0], Path(argv[1]), int(argv[2]) if len(argv) > 2 else 100
    print(json.dumps(record_group(group, out, seed0)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
