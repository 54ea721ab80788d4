"""Real recordings of agent loops where only the openai client is instrumented, so every model call is a trace of its
own and the oracle must stitch the traces into their conversation (issue 28): pydantic-ai's agent over its OpenAI
Chat Completions model (``OpenAIChatModel`` on an ``openai.AsyncOpenAI`` client; pydantic-ai's own instrumentation
off), recorded by OpenInference's openai instrumentation, by the official openai-v2 instrumentation with
opentelemetry-util-genai (content on spans), and by OpenLLMetry's openai instrumentation; and the Agents SDK under
OpenLLMetry's openai instrumentation alone (the other client-only Agents SDK groups are in
tests/telemetry_instrumentations.py).

    python -m tests.telemetry_stitching GROUP OUT_DIR [SEED]    # one group's recordings; prints the manifest

The scripts are tests/telemetry_instrumentations.py's (pass, replay, conflict, tool-error), the model scripted and
answered over ``httpx.MockTransport`` (no network). pydantic-ai executes a repeated call id again (its result is a
new reading: R6) and executes a reused id with other arguments (R7); a tool that raises ends its run with the
exception. What really happened comes from the framework (the tool's log of executions, pydantic-ai's own message
history or the exception), is stored with each manifest entry (``happened``) and checked against the verdict by
tests/test_oracle_stitching.py.
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

from tests.telemetry_instrumentations import (
    SCRIPTS,
    _answered_items,
    _Log,
    _openai_agents,
    _protobuf_json_exporter,
)
from tests.telemetry_recordings import _Recorder, scripted_chat_client

Json = Any

#: group -> (framework, instrumentation, the packages whose versions the recording names)
GROUPS: dict[str, tuple[str, str, list[str]]] = {
    "openinference-openai-pydantic-ai": ("pydantic-ai", "openinference", [
        "pydantic-ai-slim", "openai", "openinference-instrumentation-openai"]),
    "openai-v2-pydantic-ai": ("pydantic-ai", "openai-v2", [
        "pydantic-ai-slim", "openai", "opentelemetry-instrumentation-openai-v2", "opentelemetry-util-genai"]),
    "openllmetry-openai-pydantic-ai": ("pydantic-ai", "openllmetry", [
        "pydantic-ai-slim", "openai", "opentelemetry-instrumentation-openai"]),
    "openllmetry-openai": ("openai-agents", "openllmetry", ["openai-agents", "openai",
                                                             "opentelemetry-instrumentation-openai"]),
}

#: (exit code, rules) each recording's report must have, from what happened: pydantic-ai re-executes a repeated id
#: (R6: another reading is the answer) and a reused one (R7: answered as a success); a tool's exception ends the run
#: (conforms: the last proposal is not answered, which the trace cannot tell from a run cut short). The Agents SDK
#: drops a repeat without an answer (R11), raises on a reused id (conforms) and answers a failing tool (conforms).
EXPECT: dict[tuple[str, str], tuple[int, list[str]]] = {
    **{(g, s): (0, []) for g in GROUPS for s in SCRIPTS},
    **{(g, "replay"): (1, ["R6"]) for g in GROUPS if GROUPS[g][0] == "pydantic-ai"},
    **{(g, "conflict"): (1, ["R7"]) for g in GROUPS if GROUPS[g][0] == "pydantic-ai"},
    ("openllmetry-openai", "replay"): (1, ["R11"]),
}

PROTOBUF_JSON_GROUPS = ("openai-v2-pydantic-ai",)
SEEDS = {g: 300 + 10 * k for k, g in enumerate(GROUPS)}




def _pydantic_ai(script: list[Any], log: _Log) -> list[str]:
    """One pydantic-ai agent run over its OpenAI Chat Completions model; what its own history says was answered."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ToolReturnPart
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel("gpt-4o", provider=OpenAIProvider(openai_client=scripted_chat_client(script)))
    agent = Agent(model)

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return log(city)

    result = asyncio.run(agent.run("What is the weather in Paris and Oslo?"))
    return [f"{p.tool_call_id}: {str(p.content)[:60]}" for m in result.all_messages() for p in m.parts
            if isinstance(p, ToolReturnPart)]


def _instrument(group: str, rec: _Recorder) -> None:
    os.environ["OPENAI_API_KEY"] = "sk-scripted"
    framework, inst, _ = GROUPS[group]
    if framework == "openai-agents":
        from agents import set_trace_processors, set_tracing_disabled

        set_trace_processors([])  # never an exporter to OpenAI
        set_tracing_disabled(True)  # only the openai client is instrumented
    if inst == "openinference":
        from openinference.instrumentation.openai import OpenAIInstrumentor

        OpenAIInstrumentor().instrument(tracer_provider=rec.provider)
    elif inst == "openai-v2":
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor as OpenAIV2

        os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
        os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "span_only"
        OpenAIV2().instrument(tracer_provider=rec.provider)
    elif inst == "openllmetry":
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor as LlmetryOpenAI

        os.environ["TRACELOOP_TRACE_CONTENT"] = "true"
        LlmetryOpenAI().instrument(tracer_provider=rec.provider)
    else:
        raise SystemExit(f"unknown group {group!r}")


def record_group(group: str, out: Path, seed0: int) -> list[dict[str, Any]]:
    """Make the four recordings of ``group`` into ``out`` (in this process); return their manifest entries."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    os.environ.pop("OPENAI_AGENTS_DISABLE_TRACING", None)
    framework, _, packages = GROUPS[group]
    rec = _Recorder()
    _instrument(group, rec)
    versions = ", ".join(f"{p} {version(p)}" for p in [*packages, "opentelemetry-sdk",
                                                          "opentelemetry-exporter-otlp-json-file"])
    manifest: list[dict[str, Any]] = []
    for k, (name, script) in enumerate(SCRIPTS.items()):
        stem = f"rec-{group}-{name}"
        rec.start(out, stem, seed0 + k)
        if group in PROTOBUF_JSON_GROUPS:
            pb = out / f"{stem}.pb.json"
            pb.unlink(missing_ok=True)
            rec.switch.current.append(SimpleSpanProcessor(_protobuf_json_exporter(pb)))
        log = _Log()
        raised = None
        answered: list[str] | None = None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if framework == "pydantic-ai":
                    answered = _pydantic_ai(script, log)
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
                             "doc": f"{group} ({kind}): {name}; only the openai client instrumented, one trace per "
                                    f"model call (stitched). Recorded with {versions}.",
                             "group": group, "scenario": name, "stitching": True, "happened": happened})
    return manifest


def record_all(out: Path) -> list[dict[str, Any]]:
    """Every group's recordings, one process per group (instrumentors patch process-wide classes)."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root)])}
    manifest: list[dict[str, Any]] = []
    for group, seed in SEEDS.items():
        r = subprocess.run([sys.executable, "-m", "tests.telemetry_stitching", group, str(out), str(seed)],
                           capture_output=True, text=True, env=env, cwd=root, timeout=600)
        if r.returncode:
            raise SystemExit(f"recording {group} failed:\n{r.stderr}")
        manifest += json.loads(r.stdout)
    return manifest


def main(argv: list[str]) -> int:
    group, out = argv[0], Path(argv[1])
    seed0 = int(argv[2]) if len(argv) > 2 else SEEDS[group]
    print(json.dumps(record_group(group, out, seed0)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


def derived_cases(golden: Path) -> dict[str, tuple[str, int, list[str], str]]:
    """Golden inputs cut from the real recordings above (tests/oracle_golden.py writes them): the conversation
    recorded from its second model call on (the first trace lost: stitched, starting mid-conversation), from its last
    call only (the earlier rounds judged from the history alone), and two identical conversations interleaved (a
    scripted model's fixed ids: every later request fits both, so nothing is stitched)."""
    conflict = (golden / "rec-openai-v2-pydantic-ai-conflict.otlp.jsonl").read_text(encoding="utf-8").splitlines()
    pass_ = (golden / "rec-openinference-openai-pydantic-ai-pass.otlp.jsonl").read_text(encoding="utf-8").splitlines()

    def twin(line: str) -> str:
        doc = json.loads(line)
        for rs in doc["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for sp in ss["spans"]:
                    sp["traceId"] = "f" + sp["traceId"][1:]
                    for k in ("startTimeUnixNano", "endTimeUnixNano"):
                        sp[k] = str(int(sp[k]) + 1000)
        return json.dumps(doc, separators=(",", ":"))

    interleaved = [x for a in pass_ for x in (a, twin(a))]
    src = "cut from rec-openai-v2-pydantic-ai-conflict.otlp.jsonl (pydantic-ai executes a reused id with other arguments)"
    return {
        "otlp-stitch-mid-conversation.otlp.jsonl": (
            "\n".join(conflict[1:]) + "\n", 1, ["R7"],
            f"{src}, without its first trace: stitched from the other two, the run starts mid-conversation (its first "
            "round read from the history), R7 from the spans"),
        "otlp-stitch-history-only.otlp.jsonl": (
            conflict[-1] + "\n", 1, ["R7"],
            f"{src}, its last trace only: both earlier rounds are in that request's history, R7 from the history"),
        "otlp-stitch-twins.otlp.jsonl": (
            "\n".join(interleaved) + "\n", 0, [],
            "rec-openinference-openai-pydantic-ai-pass.otlp.jsonl twice, interleaved, the copy's trace ids changed: "
            "every later request fits both conversations alike, so none is stitched, and each says why"),
    }
