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

from tests.telemetry_recordings import _Recorder, scripted_chat_client

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

#: The scenarios every group records; the Agents SDK's groups also record the handoff: the triage agent hands off
#: to the weather agent (its transfer_to_weather tool), which calls the tool and answers — one Runner run, so one
#: run of the oracle.
BASIC = tuple(SCRIPTS)
ALL_SCRIPTS: dict[str, list[Any]] = {
    **SCRIPTS,
    "handoff": [[("call_h", "transfer_to_weather", {})], [("call_1", "get_weather", {"city": "Paris"})],
                "18C in Paris."],
    # the SDK's own tracing only: the pass conversation with trace_include_sensitive_data=False (the spans keep no
    # inputs or outputs), and two Runner runs in one trace() (two runs, never one)
    "no-content": SCRIPTS["pass"],
    # and guardrails: an input guardrail that passes and an output guardrail that trips on the final answer (the
    # SDK raises OutputGuardrailTripwireTriggered after the conversation ended)
    "guardrails": SCRIPTS["pass"],
    "two-runs": [[("call_1", "get_weather", {"city": "Paris"})], "18C in Paris.",
                 [("call_2", "get_weather", {"city": "Oslo"})], "9C in Oslo."],
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
    # the Agents SDK's own tracing (not OpenTelemetry): tests/telemetry_sdk_tracing.py; with the Chat Completions
    # model (generation spans hold the messages) and the Responses model (response spans hold only the response id)
    "agents-sdk": ("openai-agents", ["openai-agents", "openai"]),
    "agents-sdk-responses": ("openai-agents-responses", ["openai-agents", "openai"]),
    # OpenInference's tracing processor for the Agents SDK (its other scenarios: tests/telemetry_recordings.py)
    "openinference-openai-agents": ("openai-agents", ["openai-agents", "openai",
                                                      "openinference-instrumentation-openai-agents"]),
    # Logfire (send_to_logfire=False; its spans through the same exporters): its Agents SDK, openai client and
    # pydantic-ai instrumentations
    "logfire-openai-agents": ("openai-agents", ["openai-agents", "openai", "logfire"]),
    "logfire-openai-agents-responses": ("openai-agents-responses", ["openai-agents", "openai", "logfire"]),
    "logfire-openai": ("openai-agents", ["openai-agents", "openai", "logfire"]),
    "logfire-pydantic-ai": ("pydantic-ai", ["pydantic-ai-slim", "logfire"]),
}

#: group -> the scenarios it records
SCENARIOS: dict[str, tuple[str, ...]] = {
    g: (*BASIC, "handoff") if fw.startswith("openai-agents") and g not in ("openinference-openai", "openai-v2",
                                                                             "logfire-openai")
    else BASIC for g, (fw, _) in GROUPS.items()}
SCENARIOS["openinference-openai-agents"] = ("handoff",)
SCENARIOS["agents-sdk"] = (*SCENARIOS["agents-sdk"], "no-content", "two-runs", "guardrails")
SCENARIOS["logfire-openai-agents"] = (*SCENARIOS["logfire-openai-agents"], "guardrails")

#: What each recording's report must say, from what really happened (``happened`` in the manifest):
#: (exit code, rules). LangGraph's ToolNode and pydantic-ai execute a repeated id (R6) and a reused one with other
#: arguments (R7); the Agents SDK drops a repeat without an answer (R11: seen where the spans hold the next request
#: and the model's outputs — OpenLLMetry with the client instrumented, the SDK's own and Logfire's spans with the
#: messages, and the openai client's one-call traces once stitched into their conversation, whose next request
#: re-sends the history without the repeat; OpenLLMetry's Agents SDK spans record no model output and the SDK's own
#: response spans (its Responses model) record no messages at all, so those verdicts conform and say what is not
#: recorded), refuses a reused id by raising (never executed: conforms), answers a failing tool with an error
#: message (conforms) and hands off without a tool span (conforms, one run).
EXPECT: dict[tuple[str, str], tuple[int, list[str]]] = {
    **{(g, s): (0, []) for g in GROUPS for s in SCENARIOS[g]},
    **{(g, "replay"): (1, ["R6"]) for g in GROUPS if GROUPS[g][0] in ("langgraph", "pydantic-ai")},
    **{(g, "conflict"): (1, ["R7"]) for g in GROUPS if GROUPS[g][0] in ("langgraph", "pydantic-ai")},
    **{(g, "replay"): (1, ["R11"]) for g in ("openllmetry-openai-agents", "agents-sdk", "logfire-openai-agents",
                                             "logfire-openai-agents-responses", "openinference-openai", "openai-v2",
                                             "logfire-openai")},
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


def _openai_agents(script: list[Any], log: _Log, *, responses: bool = False, handoff: bool = False,
                   instrument_client: Any = None, content: bool = True, runs: int = 1,
                   guardrails: bool = False) -> list[dict[str, Json]]:
    """One Runner run of the weather agent (``handoff``: started at a triage agent that hands off to it), its model
    the SDK's Chat Completions model (``responses``: its Responses model) over an openai client whose transport
    answers the script. ``content`` False: ``RunConfig(trace_include_sensitive_data=False)``; ``runs`` 2: two Runner
    runs one after the other in one ``trace()``; ``guardrails``: an input guardrail that passes (run before the
    model) and an output guardrail that trips on the final answer."""
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        OpenAIResponsesModel,
        RunConfig,
        Runner,
        function_tool,
        trace,
    )

    client = scripted_chat_client(script, responses=responses)
    if instrument_client is not None:
        instrument_client(client)

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return log(city)

    model = OpenAIResponsesModel("gpt-4o", client) if responses else OpenAIChatCompletionsModel("gpt-4o", client)
    checks: dict[str, Any] = {}
    if guardrails:
        from agents import GuardrailFunctionOutput, input_guardrail, output_guardrail

        @input_guardrail(name="on_topic", run_in_parallel=False)
        def on_topic(ctx: Any, agent: Any, inp: Any) -> GuardrailFunctionOutput:
            return GuardrailFunctionOutput(output_info="about the weather", tripwire_triggered=False)

        @output_guardrail(name="no_numbers")
        def no_numbers(ctx: Any, agent: Any, out: Any) -> GuardrailFunctionOutput:
            return GuardrailFunctionOutput(output_info="has digits", tripwire_triggered=any(c.isdigit() for c in out))

        checks = {"input_guardrails": [on_topic], "output_guardrails": [no_numbers]}
    agent = Agent(name="weather", model=model, tools=[get_weather], **checks)
    if handoff:
        agent = Agent(name="triage", model=model, handoffs=[agent])
    config = RunConfig(trace_include_sensitive_data=content)

    async def main() -> list[Any]:
        if runs == 1:
            return (await Runner.run(agent, "What is the weather in Paris and Oslo?", run_config=config)).to_input_list()
        items: list[Any] = []
        with trace("two runs"):
            for city in ("Paris", "Oslo")[:runs]:
                items += (await Runner.run(agent, f"What is the weather in {city}?", run_config=config)).to_input_list()
        return items

    return [x if isinstance(x, dict) else json.loads(json.dumps(x, default=str)) for x in asyncio.run(main())]


def _pydantic_ai(script: list[Any], log: _Log) -> list[str]:
    """One pydantic-ai agent run with a scripted ``FunctionModel``; what its history says was answered."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    steps = list(script)

    def model(messages: list[Any], info: AgentInfo) -> ModelResponse:
        step = steps.pop(0)
        if isinstance(step, str):
            return ModelResponse(parts=[TextPart(step)])
        return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=cid) for cid, name, args in step])

    agent = Agent(FunctionModel(model, model_name="scripted"), name="weather")

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return log(city)

    result = asyncio.run(agent.run("What is the weather in Paris and Oslo?"))
    return [f"{p.tool_call_id}: {str(p.content)[:60]}" for m in result.all_messages() if isinstance(m, ModelRequest)
            for p in m.parts if isinstance(p, ToolReturnPart)]


def _answered_items(items: list[dict[str, Json]]) -> list[str]:
    return [f"{x.get('call_id')}: {str(x.get('output'))[:60]}" for x in items if x.get("type") == "function_call_output"]


#: What instruments the openai client of a run (Logfire's ``instrument_openai`` takes the client).
_CLIENT: list[Any] = []


def _logfire(rec: _Recorder) -> Any:
    """Logfire configured to send nothing anywhere: its spans go to the recording's exporters (the recorder's
    switch as an additional span processor) with the recorder's counting ids."""
    import logfire

    logfire.configure(send_to_logfire=False, console=False, metrics=False, inspect_arguments=False,
                      service_name="loopspec-recording", service_version="recording",
                      # the machine's identity out of the committed recordings
                      resource_attributes={"host.id": "recording", "host.name": "recording",
                                           "service.instance.id": "recording"},
                      additional_span_processors=[rec.switch],
                      advanced=logfire.AdvancedOptions(id_generator=rec.ids))
    return logfire


def _instrument(group: str, rec: _Recorder) -> Any:
    """Instrument the process for ``group``; the Agents SDK's own tracing returns its recorder."""
    os.environ["OPENAI_API_KEY"] = "sk-scripted"
    if group == "logfire-pydantic-ai":
        _logfire(rec).instrument_pydantic_ai()
        return None
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
    if group in ("agents-sdk", "agents-sdk-responses"):
        from tests.telemetry_sdk_tracing import AgentsTracing

        set_tracing_disabled(False)
        return AgentsTracing()
    if group == "openinference-openai-agents":
        from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor as OIAgents

        set_tracing_disabled(False)
        OIAgents().instrument(tracer_provider=rec.provider)
        return None
    if group in ("logfire-openai-agents", "logfire-openai-agents-responses"):
        set_tracing_disabled(False)
        _logfire(rec).instrument_openai_agents()
        return None
    if group == "logfire-openai":
        set_tracing_disabled(True)  # only the openai client is instrumented
        _CLIENT.append(_logfire(rec).instrument_openai)
        return None
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
    return None


#: group -> the files each recording is exported to
def kinds(group: str) -> list[str]:
    if group in ("agents-sdk", "agents-sdk-responses"):
        return ["agents.jsonl", "backend.jsonl"]
    return ["otlp.jsonl", "console.json"] + (["pb.json"] if group in PROTOBUF_JSON_GROUPS else [])


def record_group(group: str, out: Path, seed0: int) -> list[dict[str, Any]]:
    """Make the recordings of ``group`` into ``out`` (in this process); return their manifest entries."""
    os.environ.pop("OPENAI_AGENTS_DISABLE_TRACING", None)
    os.environ.setdefault("LOGFIRE_IGNORE_NO_CONFIG", "1")
    framework, packages = GROUPS[group]
    rec = _Recorder()
    sdk = _instrument(group, rec)
    otel = [] if sdk is not None else ["opentelemetry-sdk", "opentelemetry-exporter-otlp-json-file"]
    versions = ", ".join(f"{p} {version(p)}" for p in [*packages, *otel])
    manifest: list[dict[str, Any]] = []
    for k, name in enumerate(SCENARIOS[group]):
        script = ALL_SCRIPTS[name]
        stem = f"rec-{group}-{name}"
        if sdk is not None:
            sdk.start(out, stem, seed0 + k)
        else:
            _start(rec, out, stem, seed0 + k, group)
        log = _Log()
        raised = None
        answered: list[str] | None = None
        try:
            if framework == "langgraph":
                answered = _answered_langchain(_langgraph(script, log))
            elif framework == "pydantic-ai":
                answered = _pydantic_ai(script, log)
            else:
                answered = _answered_items(_openai_agents(
                    script, log, responses=framework == "openai-agents-responses", handoff=name == "handoff",
                    instrument_client=_CLIENT[0] if _CLIENT else None, content=name != "no-content",
                    runs=2 if name == "two-runs" else 1, guardrails=name == "guardrails"))
        except Exception as exc:  # the framework ended the run with an exception: that is what happened
            raised = f"{type(exc).__name__}: {exc}".splitlines()[0]
        finally:
            if sdk is not None:
                sdk.stop()
            else:
                rec.stop()
        proposed = [f"{c}: {n}({json.dumps(a)})" for step in script if not isinstance(step, str) for c, n, a in step]
        happened: dict[str, Json] = {"proposed": proposed, "executed": log.executed}
        if raised is None:
            happened["answered"] = answered
        else:
            happened["raised"] = raised
        for kind in kinds(group):
            code, rules = EXPECT.get((group, name), (None, None))
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
