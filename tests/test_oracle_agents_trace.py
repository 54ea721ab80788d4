"""``loopspec check`` on the OpenAI Agents SDK's own tracing (the items ``trace.export()`` / ``span.export()`` give, and
the ``{"data": [...]}`` payloads its ``BackendSpanExporter`` posts), on Logfire's instrumentations, and on handoffs
under every instrumentation of the Agents SDK. The recordings are real (tests/telemetry_instrumentations.py with
tests/telemetry_sdk_tracing.py: scripted model, no network); each verdict against what happened is checked by
tests/test_oracle_instrumentations.py, their exact reports by tests/test_oracle_golden.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from loopspec.oracle import check_file, read_text_input

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden" / "oracle"
RECORDINGS = [c for c in json.loads((GOLDEN / "RECORDINGS.json").read_text(encoding="utf-8")) if "happened" in c]
HANDOFFS = [c for c in RECORDINGS if c["scenario"] == "handoff"]


def _records(name: str) -> list[Any]:
    res = check_file(str(GOLDEN / name))
    assert not res.errors, res.errors
    return res.records


def _shape(recs: list[Any]) -> list[tuple[Any, ...]]:
    """What a run's record says, but where in the file (a note's location differs between the two shapes)."""
    import re

    return [(r.run, r.verdict, r.violation.rule if r.violation else None, r.checks["verified"], r.events,
             [re.sub(r" \(\$[^)]*line \d+\)", "", n) for n in r.summary.get("notes", ())]) for r in recs]


def test_handoffs_are_recorded_under_every_instrumentation_of_the_agents_sdk() -> None:
    assert {c["group"] for c in HANDOFFS} == {
        "agents-sdk", "agents-sdk-responses", "openinference-openai-agents", "openllmetry-openai-agents",
        "openllmetry-agents-only", "logfire-openai-agents", "logfire-openai-agents-responses"}


@pytest.mark.parametrize("case", HANDOFFS, ids=[c["file"] for c in HANDOFFS])
def test_a_handoff_keeps_one_run(case: dict[str, Any]) -> None:
    """The triage agent hands off to the weather agent, which calls the tool: one Runner run, so one run (the SDK
    records each agent as an invocation of its own), named after the first agent, with the handoff in its notes;
    the tool call is judged in it (the handoff's own transfer call has no tool span), and the run conforms."""
    (rec,) = _records(case["file"])
    assert "/" not in rec.run and rec.verdict == "conforms", (rec.run, rec.verdict)
    assert any("hands off between agents (triage → weather)" in n for n in rec.summary["notes"]), rec.summary
    h = case["happened"]
    assert h["executed"] == ["Paris"] and "call_1: Paris: 18C (reading 1)" in h["answered"]
    if case["group"] != "agents-sdk-responses":  # its response spans record no messages: nothing is matched
        assert rec.summary["executions"] == 1
        assert rec.summary["calls"] == 2  # transfer_to_weather and get_weather, each in its own model call


def test_the_two_exports_of_the_sdk_are_judged_alike() -> None:
    """A processor writing ``span.export()`` lines and the exporter's ``{"data": [...]}`` payloads hold the same
    items: the same runs, verdicts and coverage."""
    stems = sorted({c["file"].rsplit(".", 2)[0] for c in RECORDINGS if c["file"].endswith(".agents.jsonl")})
    assert len(stems) == 13
    for stem in stems:
        assert _shape(_records(f"{stem}.agents.jsonl")) == _shape(_records(f"{stem}.backend.jsonl")), stem


def test_logfire_reads_as_the_sdk_does() -> None:
    """Logfire's Agents SDK spans carry the SDK's span data as attributes: with the Chat Completions model they give
    what the SDK's own export gives; with the Responses model Logfire also records the request and the response,
    so where the SDK's own response spans show nothing, Logfire's runs are judged in full."""
    for s in ("pass", "replay", "conflict", "tool-error", "handoff"):
        own = [(r.verdict, r.violation.rule if r.violation else None, r.checks["verified"], r.summary["calls"])
               for r in _records(f"rec-agents-sdk-{s}.agents.jsonl")]
        for g in ("logfire-openai-agents", "logfire-openai-agents-responses"):
            lf = [(r.verdict, r.violation.rule if r.violation else None, r.checks["verified"], r.summary["calls"])
                  for r in _records(f"rec-{g}-{s}.otlp.jsonl")]
            assert lf == own, (g, s)
        (bare,) = _records(f"rec-agents-sdk-responses-{s}.agents.jsonl")
        assert bare.checks["verified"] == [] and bare.summary["calls"] == 0


def test_guardrail_spans_are_steps_of_the_run() -> None:
    """An input guardrail that passes and an output guardrail that trips on the final answer (the SDK raises after
    the conversation ended): the guardrail spans are steps, the run is judged in full and conforms, and its notes
    say the invocation span ended with an error."""
    for name in ("rec-agents-sdk-guardrails.agents.jsonl", "rec-agents-sdk-guardrails.backend.jsonl",
                 "rec-logfire-openai-agents-guardrails.otlp.jsonl"):
        case = next(c for c in RECORDINGS if c["file"] == name)
        assert case["happened"]["raised"].startswith("OutputGuardrailTripwireTriggered")
        (rec,) = _records(name)
        assert (rec.verdict, rec.summary["calls"], rec.summary["executions"]) == ("conforms", 2, 2), name
        assert {"R11", "R12", "R28"} <= set(rec.checks["verified"])
        assert any("ended with an error status" in n for n in rec.summary["notes"]), rec.summary


def test_logfire_pydantic_ai_is_pydantic_ais_own_instrumentation() -> None:
    """``logfire.instrument_pydantic_ai()`` turns on pydantic-ai's own instrumentation (source, logfire 5.4.0,
    ``integrations/pydantic_ai.py``: ``Agent.instrument_all(settings)``): the same coverage as pydantic-ai's recordings,
    the same violations for a re-executed repeat (R6) and a reused id (R7)."""
    (own,) = _records("rec-pydantic-ai-pass.otlp.jsonl")
    (lf,) = _records("rec-logfire-pydantic-ai-pass.otlp.jsonl")
    assert lf.checks["verified"] == own.checks["verified"] and lf.verdict == own.verdict == "conforms"
    (own6,) = _records("rec-pydantic-ai-fail-replay-reexecuted.otlp.jsonl")
    (lf6,) = _records("rec-logfire-pydantic-ai-replay.otlp.jsonl")
    assert (lf6.violation.rule, lf6.violation.kind) == (own6.violation.rule, own6.violation.kind) == (
        "R6", "replay-reexecuted")


# --------------------------------------------------------------------------------------------
# The reader, on items written by hand
# --------------------------------------------------------------------------------------------


def _span(n: int, parent: int | None, data: dict[str, Any], trace: int = 1, t: int = 0,
          error: Any = None) -> dict[str, Any]:
    return {"object": "trace.span", "id": f"span_{n:024x}", "trace_id": f"trace_{trace:032x}",
            "parent_id": f"span_{parent:024x}" if parent else None,
            "started_at": f"2026-01-01T00:00:{t:02d}.000000+00:00", "ended_at": f"2026-01-01T00:00:{t:02d}.500000+00:00",
            "span_data": data, "error": error}


def _gen(inp: list[Any], out: list[Any]) -> dict[str, Any]:
    return {"type": "generation", "input": inp, "output": out, "model": "m", "model_config": {}, "usage": None}


def _call(cid: str, city: str) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": cid, "type": "function", "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}}]}


def _run(trace: int, base: int, city: str, t0: int) -> list[dict[str, Any]]:
    """One Runner run of one agent: a call, its execution, the final answer."""
    user = {"role": "user", "content": f"weather in {city}?"}
    return [
        _span(base, None, {"type": "custom", "name": "task", "data": {"sdk_span_type": "task", "name": "w"}},
              trace, t0),
        _span(base + 1, base, {"type": "agent", "name": "weather", "handoffs": [], "tools": ["get_weather"],
                               "output_type": "str"}, trace, t0),
        _span(base + 2, base + 1, _gen([user], [_call(f"c{base}", city)]), trace, t0 + 1),
        _span(base + 3, base + 1, {"type": "function", "name": "get_weather", "input": json.dumps({"city": city}),
                                   "output": "18C", "mcp_data": None}, trace, t0 + 2),
        _span(base + 4, base + 1, _gen([user, _call(f"c{base}", city),
                                        {"role": "tool", "tool_call_id": f"c{base}", "content": "18C"}],
                                       [{"role": "assistant", "content": "18C."}]), trace, t0 + 3)]


def test_two_runner_runs_in_one_trace_are_two_runs() -> None:
    """``with trace(...)``: two Runner runs, no handoff between them: two runs, never merged."""
    items = _run(1, 1, "Paris", 0) + _run(1, 20, "Oslo", 10)
    res = read_text_input("".join(json.dumps(x) + "\n" for x in items).encode(), "t.agents.jsonl")
    assert not res.errors
    assert [(r.run.split("/")[1][-2:], r.verdict, r.summary["executions"]) for r in res.records] == [
        ("02", "conforms", 1), ("15", "conforms", 1)]
    assert all(r.input == "openai-agents-trace" for r in res.records)


def test_the_payload_and_array_shapes_and_the_format_flag() -> None:
    items = [{"object": "trace", "id": "trace_" + "0" * 31 + "1", "workflow_name": "w", "group_id": None,
              "metadata": None}, *_run(1, 1, "Paris", 0)]
    for data in (json.dumps({"data": items}), json.dumps(items, indent=1)):
        res = read_text_input(data.encode(), "x.json")
        assert not res.errors and [r.verdict for r in res.records] == ["conforms"], res.errors
    res = read_text_input(json.dumps({"data": items}).encode(), "x.json", input_format="openai-agents-trace")
    assert [r.input for r in res.records] == ["openai-agents-trace"]


def test_a_damaged_item_is_named_by_line_and_field() -> None:
    items = _run(1, 1, "Paris", 0)
    del items[2]["trace_id"]
    items[3]["started_at"] = "yesterday"
    res = read_text_input("".join(json.dumps(x) + "\n" for x in items).encode(), "d.agents.jsonl")
    msgs = [(e.line, e.message) for e in res.errors]
    assert (3, "$.trace_id: must be the trace's id (a string)") in msgs
    assert any(line == 4 and m.startswith("$.started_at: must be an ISO 8601 time") for line, m in msgs), msgs


def test_a_failing_function_span_is_a_failed_execution() -> None:
    """The SDK sets ``error`` on a function span whose tool raised: the execution failed; its result is what the
    model was sent (the next request shows it)."""
    from loopspec.oracle._group.telemetry import runs
    from loopspec.oracle._read.agents_trace import read_items
    from loopspec.oracle._read.documents import Doc

    items = _run(1, 1, "Atlantis", 0)
    items[3]["error"] = {"message": "Error running tool (non-fatal)", "data": {"tool_name": "get_weather"}}
    (rec,) = read_text_input("".join(json.dumps(x) + "\n" for x in items).encode(), "e.agents.jsonl").records
    assert rec.verdict == "conforms" and rec.summary["executions"] == 1
    spans = list(read_items(iter([Doc(x, k + 1, None, k + 1) for k, x in enumerate(items)]), "e"))
    (run,) = runs(spans)
    (x,) = [i.execution for i in run.items or [] if i.kind == "execution"]
    assert (x.name, x.args, x.ok, x.id) == ("get_weather", {"city": "Atlantis"}, False, None)


def test_the_docs_processor_writes_what_check_reads(tmp_path: Path) -> None:
    """The processor docs/oracle.md shows, run as it is written on a scripted Agents SDK run (no network, the SDK's
    exporter to OpenAI removed first): the file it writes is read by ``check`` as the run it was."""
    pytest.importorskip("agents")
    import re
    import subprocess
    import sys

    doc = (ROOT / "docs" / "oracle.md").read_text(encoding="utf-8")
    section = doc[doc.index("**The Agents SDK's own tracing**"):]
    snippet = re.search(r"```python\n(.*?)```", section, re.S).group(1)  # type: ignore[union-attr]
    run = '''
import asyncio, httpx
from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool
from openai import AsyncOpenAI
script = [[("call_1", "get_weather", {"city": "Paris"})], "18C."]
def handler(request):
    step = script.pop(0)
    msg = ({"role": "assistant", "content": step} if isinstance(step, str) else {"role": "assistant", "content": None,
           "tool_calls": [{"id": c, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                          for c, n, a in step]})
    return httpx.Response(200, json={"id": "x", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "message": msg, "finish_reason": "stop"}]})
client = AsyncOpenAI(api_key="sk-scripted", base_url="http://scripted.invalid/v1",
                     http_client=httpx.AsyncClient(transport=httpx.MockTransport(handler)))
@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return "18C"
agent = Agent(name="weather", model=OpenAIChatCompletionsModel("m", client), tools=[get_weather])
asyncio.run(Runner.run(agent, "weather?"))
'''
    prog = "from agents import set_trace_processors, set_tracing_disabled\nset_trace_processors([])\n" \
           "set_tracing_disabled(False)\n" + snippet + run
    env = {"PATH": os.environ.get("PATH", ""), "OPENAI_API_KEY": "sk-scripted", "PYTHONPATH": str(ROOT / "src")}
    r = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, cwd=tmp_path, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    (rec,) = _records_at(tmp_path / "agents.jsonl")
    assert (rec.input, rec.verdict, rec.summary["calls"], rec.summary["executions"]) == (
        "openai-agents-trace", "conforms", 1, 1)
    assert "R12" in rec.checks["verified"] and "R28" in rec.checks["verified"]


def _records_at(path: Path) -> list[Any]:
    res = check_file(str(path))
    assert not res.errors, res.errors
    return res.records
