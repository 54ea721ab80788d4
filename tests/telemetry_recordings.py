"""Real recordings for the oracle's golden corpus: pydantic-ai, the OpenAI Agents SDK and LangGraph, each
run with a scripted model (no network) and recorded by the real instrumentation and exporters.

    python -m tests.telemetry_recordings            # rewrite tests/golden/oracle/rec-*.{jsonl,json}
    python -m tests.telemetry_recordings --check    # record into a temporary folder, print the verdicts

* **pydantic-ai**: its own OpenTelemetry instrumentation (the ``Instrumentation`` capability;
  instrumentation format 5, the default, and format 2, the deprecated one that still uses the older
  names ``running tool`` / ``tool_arguments`` / ``tool_response``); the model is pydantic-ai's
  ``FunctionModel``; the history is ``ModelMessagesTypeAdapter.dump_json(result.all_messages())``.
* **OpenAI Agents SDK**: its tracing with OpenInference's tracing processor
  (``openinference-instrumentation-openai-agents``) bridging to OpenTelemetry; the SDK's own exporter to
  OpenAI is removed (``set_trace_processors([])``); the model is the SDK's ``OpenAIChatCompletionsModel``
  over an ``openai.AsyncOpenAI`` client whose HTTP transport is ``httpx.MockTransport`` answering scripted
  Chat Completions (nothing leaves the process); the history is ``RunResult.to_input_list()``.
* **LangGraph**: the prebuilt ReAct agent (``create_react_agent``) with a scripted chat model, traced by
  OpenLLMetry's LangChain instrumentation (``opentelemetry-instrumentation-langchain``); the history is
  ``messages_to_dict(result["messages"])``.

Spans go to one OpenTelemetry SDK ``TracerProvider`` (the instrumentations are instrumented once) whose
processors are switched per recording to two ``SimpleSpanProcessor``s: the OTLP/JSON file exporter (``opentelemetry-exporter-otlp-json-file``'s ``FileSpanExporter``) and the SDK's
``ConsoleSpanExporter`` writing to a file. Trace and span ids come from a counting id generator, so a
recording's ids (and so its report) are the same every time; times and generated UUIDs are real.

The must-fail scenarios are the frameworks' own behaviours that the fuzzer reports as differing from the
strict spec (docs/frameworks.md): pydantic-ai re-executes a repeated call id (R6) and executes a reused id
with other arguments (R7); the Agents SDK runs one of two identical calls of a response and answers only
it (R11), drops a later repeat of a call id without an answer (R11) and executes a call with an
undeclared argument (R4); LangGraph executes both calls that share an id (R6). The manifest
(``RECORDINGS.json``) lists each file with the exit code and rules its report must name.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import warnings
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

GOLDEN = Path(__file__).parent / "golden" / "oracle"
#: the recordings the TypeScript frameworks' own recorders make (not this module)
JS_RECORDINGS = ("rec-ai-sdk-", "rec-mastra-")

Json = Any

#: Each scenario: framework, name, the model's script (rounds of calls, or the final text), the expected
#: exit code and rules of each recording kind, and what it shows.
SCENARIOS: list[dict[str, Any]] = [
    {"framework": "pydantic-ai", "name": "pass", "format": 5,
     "script": [[("call_1", "get_weather", {"city": "Paris"}), ("call_2", "get_weather", {"city": "Oslo"})],
                "18C in Paris, 9C in Oslo."],
     "expect": {"otlp": (0, []), "console": (0, []), "history": (0, [])},
     "doc": "two calls with distinct ids, both executed and answered, then the final answer"},
    {"framework": "pydantic-ai", "name": "fail-replay-reexecuted", "format": 5,
     "script": [[("call_1", "get_weather", {"city": "Paris"})], [("call_1", "get_weather", {"city": "Paris"})],
                "18C."],
     "expect": {"otlp": (1, ["R6"]), "console": (1, ["R6"]), "history": (1, ["R6"])},
     "doc": "the model repeats call id call_1 with the same arguments in the next round: pydantic-ai executes it "
            "again (profile id_binding = none; the fuzzer's R6 replay-reexecuted); the history shows the new result"},
    {"framework": "pydantic-ai", "name": "v2-pass", "format": 2,
     "script": [[("call_1", "get_weather", {"city": "Paris"})], "18C."],
     "expect": {"otlp": (0, [])},
     "doc": "instrumentation format 2 (deprecated, still emitted when chosen): tool spans named 'running tool' "
            "with tool_arguments / tool_response"},
    {"framework": "pydantic-ai", "name": "v2-fail-conflict-executed", "format": 2,
     "script": [[("call_1", "get_weather", {"city": "Paris"})], [("call_1", "get_weather", {"city": "Oslo"})],
                "Done."],
     "expect": {"otlp": (1, ["R7"]), "console": (1, ["R7"])},
     "doc": "call id call_1 reused for other arguments: pydantic-ai executes it (the fuzzer's R7 "
            "executed-despite-id-conflict), recorded with the older attribute names"},
    {"framework": "openai-agents", "name": "pass",
     "script": [[("call_1", "get_weather", {"city": "Paris"}), ("call_2", "get_weather", {"city": "Oslo"})],
                "18C in Paris, 9C in Oslo."],
     "expect": {"otlp": (0, []), "console": (0, []), "history": (0, [])},
     "doc": "two calls with distinct ids, both executed and answered, then the final answer"},
    {"framework": "openai-agents", "name": "fail-identical-collapsed",
     "script": [[("call_1", "get_weather", {"city": "Paris"}), ("call_1", "get_weather", {"city": "Paris"})],
                "18C."],
     "expect": {"otlp": (1, ["R11"]), "console": (1, ["R11"]), "history": (0, [])},
     "doc": "two identical calls in one response: the SDK runs one and answers one (profile duplicate_ids = "
            "collapse-identical; the fuzzer's R11 answer-missing); to_input_list() keeps only one of them, so the "
            "history conforms and only the trace shows the second call"},
    {"framework": "openai-agents", "name": "fail-repeat-dropped",
     "script": [[("call_1", "get_weather", {"city": "Paris"})], [("call_1", "get_weather", {"city": "Paris"})],
                "18C."],
     "expect": {"otlp": (1, ["R11"]), "console": (1, ["R11"]), "history": (0, [])},
     "doc": "the model repeats call id call_1 with the same arguments in the next round: the SDK drops it "
            "without an answer (profile id_binding = drop-repeats; R6 asks for the stored result) and leaves it out "
            "of to_input_list(), so only the trace shows it"},
    {"framework": "openai-agents", "name": "fail-blank-id",
     "script": [[("  ", "get_weather", {"city": "Paris"})], "18C."],
     "expect": {"otlp": (1, ["R2"]), "console": (1, ["R2"]), "history": (1, ["R2"])},
     "doc": "a call id made of spaces: the SDK accepts it and runs the tool (profile blank_ids = "
            "refuse-proposal-if-empty; the fuzzer's R2 executed-despite-invalid-call)"},
    {"framework": "openai-agents", "name": "fail-undeclared-argument",
     "script": [[("call_1", "get_weather", {"city": "Paris", "unit": "F"})], "64F."],
     "expect": {"otlp": (1, ["R4"]), "console": (1, ["R4"])},
     "doc": "an argument the tool's schema does not declare (additionalProperties: false): the SDK drops it and "
            "runs the tool (profile additional_properties = ignored; the fuzzer's R4 "
            "executed-despite-invalid-argument), seen through the tool schema OpenInference records"},
    {"framework": "langgraph", "name": "pass",
     "script": [[("call_1", "get_weather", {"city": "Paris"}), ("call_2", "get_weather", {"city": "Oslo"})],
                "18C in Paris, 9C in Oslo."],
     "expect": {"otlp": (0, []), "console": (0, []), "history": (0, [])},
     "doc": "two calls with distinct ids, both executed and answered, then the final answer"},
    {"framework": "langgraph", "name": "fail-same-id-twice",
     "script": [[("call_1", "get_weather", {"city": "Paris"}), ("call_1", "get_weather", {"city": "Paris"})],
                "18C."],
     "expect": {"otlp": (1, ["R6"]), "console": (1, ["R6"]), "history": (1, ["R6"])},
     "doc": "two calls of one message share call id call_1 and arguments: ToolNode executes both (profile "
            "id_binding = none; the fuzzer's R6 replay-reexecuted); the history shows two different results"},
]

HISTORY_NAME = {"pydantic-ai": "pydantic-ai", "openai-agents": "items", "langgraph": "langchain"}


class _Ids:
    """A counting OpenTelemetry id generator: the same ids every time a recording is made."""

    def __init__(self) -> None:
        self.seed = 0
        self.n = 0

    def generate_span_id(self) -> int:
        self.n += 1
        return (self.seed << 32) | self.n

    def generate_trace_id(self) -> int:
        self.n += 1
        return (self.seed << 96) | self.n


class _Recorder:
    """One TracerProvider for the process (instrumentations are process-wide and instrumented once),
    whose span processors are switched to each recording's exporters."""

    def __init__(self) -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
        from opentelemetry.sdk.trace.id_generator import IdGenerator

        class Ids(_Ids, IdGenerator):
            pass

        class Switch(SpanProcessor):
            def __init__(self) -> None:
                self.current: list[Any] = []

            def on_start(self, span: Any, parent_context: Any = None) -> None:
                for p in self.current:
                    p.on_start(span, parent_context)

            def on_end(self, span: Any) -> None:
                for p in self.current:
                    p.on_end(span)

        self.ids = Ids()
        self.switch = Switch()
        self.provider = TracerProvider(id_generator=self.ids, resource=Resource.create(
            {"service.name": "loopspec-recording", "service.instance.id": "recording"}))
        self.provider.add_span_processor(self.switch)
        self.instrumented: set[str] = set()

    def start(self, out: Path, stem: str, seed: int) -> None:
        from opentelemetry.exporter.otlp.json.file import FileSpanExporter
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

        for p in (out / f"{stem}.otlp.jsonl", out / f"{stem}.console.json"):
            p.unlink(missing_ok=True)
        self.ids.seed, self.ids.n = seed, 0
        self.console = (out / f"{stem}.console.json").open("w", encoding="utf-8")
        self.switch.current = [SimpleSpanProcessor(FileSpanExporter(out / f"{stem}.otlp.jsonl")),
                               SimpleSpanProcessor(ConsoleSpanExporter(out=self.console))]

    def stop(self) -> None:
        for p in self.switch.current:
            p.shutdown()
        self.switch.current = []
        self.console.close()


_REC: list[_Recorder] = []


def _recorder() -> _Recorder:
    if not _REC:
        _REC.append(_Recorder())
    return _REC[0]


def _counter() -> Callable[[str], str]:
    n = [0]

    def get_weather(city: str) -> str:
        n[0] += 1
        return f"{city}: {17 + n[0]}C (reading {n[0]})"

    return get_weather


# --------------------------------------------------------------------------------------------
# pydantic-ai
# --------------------------------------------------------------------------------------------


def record_pydantic_ai(sc: dict[str, Any], out: Path, stem: str, seed: int) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.capabilities.instrumentation import Instrumentation
    from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.models.instrumented import InstrumentationSettings

    rec = _recorder()
    rec.start(out, stem, seed)
    script = list(sc["script"])

    def model(messages: list[Any], info: AgentInfo) -> ModelResponse:
        step = script.pop(0)
        if isinstance(step, str):
            return ModelResponse(parts=[TextPart(step)])
        return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=cid) for cid, name, args in step])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # format 2 is deprecated (that is the point of recording it)
        settings = InstrumentationSettings(tracer_provider=rec.provider, version=sc["format"])
    agent = Agent(FunctionModel(model, model_name="scripted"), name="weather",
                  capabilities=[Instrumentation(settings=settings)])
    agent.tool_plain(_counter())
    try:
        result = asyncio.run(agent.run("What is the weather in Paris and Oslo?"))
    finally:
        rec.stop()
    (out / f"{stem}.pydantic-ai.json").write_bytes(ModelMessagesTypeAdapter.dump_json(result.all_messages(),
                                                                                     indent=2) + b"\n")


# --------------------------------------------------------------------------------------------
# OpenAI Agents SDK
# --------------------------------------------------------------------------------------------



def scripted_chat_client(script: list[Any], *, responses: bool = False) -> Any:
    """An OpenAI AsyncOpenAI client whose endpoint answers from ``script``, no network: each step a final text (a
    string) or the tool calls [(id, name, arguments), ...] of one response, as a Chat Completions body (or, with
    ``responses``, a Responses API body)."""
    import httpx
    from openai import AsyncOpenAI

    steps = list(script)
    k = [0]

    def chat(step: Any) -> dict[str, Json]:
        if isinstance(step, str):
            msg: dict[str, Json] = {"role": "assistant", "content": step}
        else:
            msg = {"role": "assistant", "content": None, "tool_calls": [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
                for cid, name, args in step]}
        return {
            "id": f"chatcmpl-{k[0]}", "object": "chat.completion", "created": 1_700_000_000 + k[0], "model": "gpt-4o",
            "choices": [{"index": 0, "message": msg, "finish_reason": "stop" if isinstance(step, str) else "tool_calls"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}

    def response(step: Any) -> dict[str, Json]:
        if isinstance(step, str):
            output: list[dict[str, Json]] = [{"type": "message", "id": f"msg_{k[0]}", "role": "assistant",
                                              "status": "completed",
                                              "content": [{"type": "output_text", "text": step, "annotations": []}]}]
        else:
            output = [{"type": "function_call", "id": f"fc_{k[0]}_{j}", "call_id": cid, "name": name,
                       "arguments": json.dumps(args), "status": "completed"} for j, (cid, name, args) in enumerate(step)]
        return {"id": f"resp_{k[0]}", "object": "response", "created_at": 1_700_000_000 + k[0], "model": "gpt-4o",
                "status": "completed", "output": output, "parallel_tool_calls": True, "tool_choice": "auto",
                "tools": [], "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15,
                                       "input_tokens_details": {"cached_tokens": 0},
                                       "output_tokens_details": {"reasoning_tokens": 0}}}

    def handler(request: httpx.Request) -> httpx.Response:
        k[0] += 1
        step = steps.pop(0)
        return httpx.Response(200, json=response(step) if responses else chat(step))

    return AsyncOpenAI(api_key="sk-scripted", base_url="http://scripted.invalid/v1",
                       http_client=httpx.AsyncClient(transport=httpx.MockTransport(handler)))


def record_openai_agents(sc: dict[str, Any], out: Path, stem: str, seed: int) -> None:
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        set_trace_processors,
        set_tracing_disabled,
    )
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    rec = _recorder()
    # tracing is what is recorded here: on, whatever the environment says (loopspec's own Agents SDK
    # adapter turns it off, and a run under pytest may inherit that)
    set_tracing_disabled(False)
    if "openai-agents" not in rec.instrumented:
        set_trace_processors([])  # no exporter to OpenAI: only the OpenTelemetry bridge below
        OpenAIAgentsInstrumentor().instrument(tracer_provider=rec.provider)
        rec.instrumented.add("openai-agents")
    rec.start(out, stem, seed)
    client = scripted_chat_client(sc["script"])
    weather = _counter()

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return weather(city)

    agent = Agent(name="weather", model=OpenAIChatCompletionsModel("gpt-4o", client), tools=[get_weather])
    try:
        result = asyncio.run(Runner.run(agent, "What is the weather in Paris and Oslo?"))
    finally:
        rec.stop()
    (out / f"{stem}.items.json").write_text(json.dumps(result.to_input_list(), indent=2, default=str) + "\n",
                                            encoding="utf-8")


# --------------------------------------------------------------------------------------------
# LangGraph
# --------------------------------------------------------------------------------------------


def record_langgraph(sc: dict[str, Any], out: Path, stem: str, seed: int) -> None:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, messages_to_dict
    from langchain_core.tools import StructuredTool
    from langgraph.prebuilt import create_react_agent
    from opentelemetry.instrumentation.langchain import LangchainInstrumentor

    os.environ["TRACELOOP_TRACE_CONTENT"] = "true"  # record messages and tool arguments
    rec = _recorder()
    if "langgraph" not in rec.instrumented:
        LangchainInstrumentor().instrument(tracer_provider=rec.provider)
        rec.instrumented.add("langgraph")
    rec.start(out, stem, seed)
    msgs = []
    for step in sc["script"]:
        if isinstance(step, str):
            msgs.append(AIMessage(content=step))
        else:
            msgs.append(AIMessage(content="", tool_calls=[{"name": n, "args": a, "id": c, "type": "tool_call"}
                                                          for c, n, a in step]))

    class Scripted(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kw: Any) -> Any:
            return self

    weather = _counter()

    def get_weather(city: str) -> str:
        """The weather in a city."""
        return weather(city)

    tool = StructuredTool.from_function(get_weather)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # create_react_agent: deprecated in favour of langchain.agents
            agent = create_react_agent(Scripted(messages=iter(msgs)), tools=[tool])
            result = asyncio.run(agent.ainvoke({"messages": [("user", "What is the weather in Paris and Oslo?")]}))
    finally:
        rec.stop()
    (out / f"{stem}.langchain.json").write_text(json.dumps(messages_to_dict(result["messages"]), indent=2) + "\n",
                                                encoding="utf-8")


RECORDERS = {"pydantic-ai": record_pydantic_ai, "openai-agents": record_openai_agents, "langgraph": record_langgraph}
PACKAGES = {"pydantic-ai": ["pydantic-ai-slim"],
            "openai-agents": ["openai-agents", "openinference-instrumentation-openai-agents"],
            "langgraph": ["langgraph", "langchain-core", "opentelemetry-instrumentation-langchain"]}


def record(out: Path) -> list[dict[str, Any]]:
    """Make every recording into ``out``; return the manifest entries."""
    os.environ.setdefault("OPENAI_API_KEY", "sk-scripted")  # never used: the transport is scripted
    os.environ.setdefault("LOGFIRE_IGNORE_NO_CONFIG", "1")
    os.environ.pop("OPENAI_AGENTS_DISABLE_TRACING", None)  # read by the SDK when a trace starts
    manifest: list[dict[str, Any]] = []
    for seed, sc in enumerate(SCENARIOS, start=1):
        fw = sc["framework"]
        stem = f"rec-{fw}-{sc['name']}"
        RECORDERS[fw](sc, out, stem, seed)
        versions = ", ".join(f"{p} {version(p)}" for p in [*PACKAGES[fw], "opentelemetry-sdk",
                                                              "opentelemetry-exporter-otlp-json-file"])
        files = {"otlp": f"{stem}.otlp.jsonl", "console": f"{stem}.console.json",
                 "history": f"{stem}.{HISTORY_NAME[fw]}.json"}
        for kind, fname in files.items():
            if kind not in sc["expect"]:
                (out / fname).unlink(missing_ok=True)
                continue
            code, rules = sc["expect"][kind]
            manifest.append({"file": fname, "inputFormat": "auto", "exit": code, "rules": rules,
                             "doc": f"{fw} ({'OpenTelemetry ' + kind if kind != 'history' else 'message history'}"
                                    f"): {sc['doc']}. Recorded with {versions}."})
    manifest += record_instrumentations(out)
    from tests.telemetry_stitching import record_all  # only the openai client instrumented: traces to stitch

    manifest += record_all(out)
    return manifest


def record_instrumentations(out: Path) -> list[dict[str, Any]]:
    """The recordings of tests/telemetry_instrumentations.py: one process per instrumentation group (instrumentors
    patch process-wide classes)."""
    import subprocess

    from tests.telemetry_instrumentations import GROUPS

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root)])}
    manifest: list[dict[str, Any]] = []
    for k, group in enumerate(GROUPS):
        r = subprocess.run([sys.executable, "-m", "tests.telemetry_instrumentations", group, str(out),
                            str(100 + 10 * k)], capture_output=True, text=True, env=env, cwd=root, timeout=600)
        if r.returncode:
            raise SystemExit(f"recording {group} failed:\n{r.stderr}")
        manifest += json.loads(r.stdout)
    return manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="record into a temporary folder and print the verdicts")
    args = ap.parse_args(argv)
    if args.check:
        from loopspec.oracle import check_file

        with tempfile.TemporaryDirectory() as d:
            manifest = record(Path(d))
            bad = 0
            for c in manifest:
                res = check_file(str(Path(d) / c["file"]))
                rules = sorted({r.violation.rule for r in res.records if r.violation})
                ok = res.summary.exit_code == c["exit"] and rules == sorted(c["rules"])
                bad += not ok
                print(f"{'ok ' if ok else 'BAD'} {c['file']}: exit {res.summary.exit_code} {rules} "
                      f"(expected {c['exit']} {c['rules']})")
            return 1 if bad else 0
    # the AI SDK's and Mastra's recordings are made by their own recorders (src/loopspec/frameworks/js/src/
    # ai_sdk_telemetry.ts and mastra_telemetry.ts, tests/test_frameworks_typescript.py): kept as they are
    kept = [c for c in json.loads((GOLDEN / "RECORDINGS.json").read_text(encoding="utf-8"))
            if c["file"].startswith(JS_RECORDINGS)]
    manifest = record(GOLDEN) + kept
    (GOLDEN / "RECORDINGS.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {len(manifest)} recordings to {GOLDEN} (and RECORDINGS.json)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
