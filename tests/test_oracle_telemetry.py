"""``loopspec check`` on OpenTelemetry GenAI traces and framework histories: the readers, what a run
witnesses, grouping into runs, and bad telemetry's one-line errors. The real frameworks' recordings and
their exact reports are in the golden corpus (tests/test_oracle_golden.py, ``rec-*``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loopspec.oracle import read_text_input
from loopspec.oracle._read.documents import iter_concatenated

Json = Any

ROOT = Path(__file__).resolve().parents[1]


def _val(v: Json) -> dict[str, Json]:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    return {"stringValue": v if isinstance(v, str) else json.dumps(v)}


def span(name: str, sid: int, parent: int | None, start: int, attrs: dict[str, Json], *, trace: int = 1,
         error: bool = False) -> dict[str, Json]:
    s: dict[str, Json] = {"traceId": f"{trace:032x}", "spanId": f"{sid:016x}", "name": name, "kind": 1,
                          "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + 1),
                          "attributes": [{"key": k, "value": _val(v)} for k, v in attrs.items()],
                          "status": {"code": 2} if error else {}}
    if parent is not None:
        s["parentSpanId"] = f"{parent:016x}"
    return s


def otlp(*spans: dict[str, Json]) -> str:
    return "".join(json.dumps({"resourceSpans": [{"resource": {"attributes": []},
                                                  "scopeSpans": [{"scope": {"name": "t"}, "spans": [s]}]}]}) + "\n"
                   for s in spans)


def user(text: str) -> dict[str, Json]:
    return {"role": "user", "parts": [{"type": "text", "content": text}]}


def calls(*cs: tuple[str, str, dict[str, Json]]) -> dict[str, Json]:
    return {"role": "assistant", "parts": [{"type": "tool_call", "id": c, "name": n, "arguments": a} for c, n, a in cs]}


def answers(*rs: tuple[str, str]) -> dict[str, Json]:
    return {"role": "tool", "parts": [{"type": "tool_call_response", "id": c, "response": r} for c, r in rs]}


def text(t: str) -> dict[str, Json]:
    return {"role": "assistant", "parts": [{"type": "text", "content": t}]}


TOOLS = [{"type": "function", "name": "lookup",
          "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "additionalProperties": False}}]


def chat(sid: int, start: int, inp: list[Json], out: list[Json], *, parent: int = 1, trace: int = 1,
         defs: list[Json] | None = None) -> dict[str, Json]:
    attrs: dict[str, Json] = {"gen_ai.operation.name": "chat", "gen_ai.input.messages": inp,
                              "gen_ai.output.messages": out}
    if defs is not None:
        attrs["gen_ai.tool.definitions"] = defs
    return span("chat m", sid, parent, start, attrs, trace=trace)


def tool(sid: int, start: int, cid: str | None, name: str, args: dict[str, Json], result: str, *, parent: int = 1,
         trace: int = 1, error: bool = False) -> dict[str, Json]:
    attrs: dict[str, Json] = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                              "gen_ai.tool.call.arguments": args, "gen_ai.tool.call.result": result}
    if cid is not None:
        attrs["gen_ai.tool.call.id"] = cid
    return span(f"execute_tool {name}", sid, parent, start, attrs, trace=trace, error=error)


def agent(sid: int = 1, trace: int = 1, parent: int | None = None) -> dict[str, Json]:
    return span("invoke_agent a", sid, parent, 0, {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"},
                trace=trace)


def run(*spans: dict[str, Json], defs: bool = False) -> list[Any]:
    res = read_text_input(otlp(*spans).encode(), "t.otlp.jsonl")
    assert not res.errors, res.errors
    return res.records


A = ("c1", "lookup", {"q": "a"})
B = ("c2", "lookup", {"q": "b"})


def good(*extra: dict[str, Json], defs: list[Json] | None = None) -> list[dict[str, Json]]:
    return [agent(),
            chat(2, 10, [user("go")], [calls(A, B)], defs=defs),
            tool(3, 20, "c1", "lookup", {"q": "a"}, "A"),
            tool(4, 30, "c2", "lookup", {"q": "b"}, "B"),
            chat(5, 40, [user("go"), calls(A, B), answers(("c1", "A"), ("c2", "B"))], [text("done")], defs=defs),
            *extra]


def test_a_conforming_run_lists_what_it_verified() -> None:
    (rec,) = run(*good(defs=TOOLS))
    assert rec.verdict == "conforms" and rec.input == "otlp-json"
    assert rec.summary["executions"] == 2 and rec.summary["recorded"] == ["messages", "executions", "tool definitions"]
    assert rec.checks["verified"] == ["R2", "R3", "R4", "R6", "R7", "R11", "R12", "R28", "R32", "R33"]
    assert "R9" in rec.checks["notWitnessed"]


def test_without_executions_fewer_rules_are_verified() -> None:
    spans = [s for s in good() if "execute_tool" not in s["name"]]
    (rec,) = run(*spans)
    assert rec.verdict == "conforms"
    assert rec.checks["verified"] == ["R11", "R28"] and rec.checks["assumed"] == ["R2", "R6", "R7"]


@pytest.mark.parametrize(("extra", "rule", "kind"), [
    ([tool(6, 50, "c1", "lookup", {"q": "a"}, "A")], "R28", "executed-after-final"),
])
def test_execution_after_the_final_answer(extra: list[Json], rule: str, kind: str) -> None:
    (rec,) = run(*good(*extra))
    assert (rec.violation.rule, rec.violation.kind) == (rule, kind)


def test_unknown_tool_and_invalid_arguments_executed() -> None:
    bad = ("c3", "shell", {"cmd": "ls"})
    spans = [agent(), chat(2, 10, [user("go")], [calls(bad)], defs=TOOLS), tool(3, 20, "c3", "shell", bad[2], "x")]
    (rec,) = run(*spans)
    assert (rec.violation.rule, rec.violation.kind) == ("R3", "executed-despite-unknown-tool")
    extra = ("c4", "lookup", {"q": "a", "more": 1})
    spans = [agent(), chat(2, 10, [user("go")], [calls(extra)], defs=TOOLS), tool(3, 20, "c4", "lookup", extra[2], "x")]
    (rec,) = run(*spans)
    assert (rec.violation.rule, rec.violation.kind) == ("R4", "executed-despite-invalid-argument")


def test_execution_without_a_request_and_twice() -> None:
    spans = [agent(), chat(2, 10, [user("go")], [calls(A)]), tool(3, 20, "c9", "lookup", {"q": "z"}, "Z")]
    (rec,) = run(*spans)
    assert (rec.violation.rule, rec.violation.kind) == ("R12", "execution-without-request")
    spans = [agent(), chat(2, 10, [user("go")], [calls(A)]), tool(3, 20, "c1", "lookup", {"q": "a"}, "A"),
             tool(4, 21, "c1", "lookup", {"q": "a"}, "A")]
    (rec,) = run(*spans)
    assert (rec.violation.rule, rec.violation.kind) == ("R12", "executed-twice")


def test_replay_after_a_failed_execution_may_run_again() -> None:
    """R6 applies to a stored success; a failure is never cached (R10), so running the repeat is fine."""
    spans = [agent(), chat(2, 10, [user("go")], [calls(A)]),
             tool(3, 20, "c1", "lookup", {"q": "a"}, "boom", error=True),
             chat(4, 30, [user("go"), calls(A), answers(("c1", "boom"))], [calls(A)]),
             tool(5, 40, "c1", "lookup", {"q": "a"}, "A"),
             chat(6, 50, [user("go"), calls(A), answers(("c1", "boom")), calls(A), answers(("c1", "A"))],
                  [text("done")])]
    (rec,) = run(*spans)
    assert rec.verdict == "conforms", rec.violation and rec.violation.explanation


def test_runs_are_grouped_by_trace_and_agent_invocation() -> None:
    one = good()
    other = [agent(20), chat(21, 100, [user("go")], [calls(A)], parent=20),
             tool(22, 110, "c1", "lookup", {"q": "a"}, "A", parent=20),
             tool(23, 120, "c1", "lookup", {"q": "a"}, "A", parent=20)]
    third = [agent(1, trace=2), chat(2, 10, [user("go")], [text("hi")], trace=2)]
    recs = run(*one, *other, *third)
    assert [r.verdict for r in recs] == ["conforms", "violates", "conforms"]
    assert recs[0].run == f"{1:032x}/{1:016x}" and recs[1].run == f"{1:032x}/{20:016x}" and recs[2].run == f"{2:032x}"


def test_parent_cycles_and_orphans_do_not_hang() -> None:
    a = span("x", 1, 2, 0, {})
    b = span("y", 2, 1, 0, {})
    c = chat(3, 10, [user("go")], [text("hi")], parent=99)
    (rec,) = run(a, b, c)
    assert rec.verdict == "conforms"


def test_openinference_and_older_flattened_attributes() -> None:
    attrs = {"openinference.span.kind": "LLM", "llm.input_messages.0.message.role": "user",
             "llm.input_messages.0.message.content": "go", "llm.output_messages.0.message.role": "assistant",
             "llm.output_messages.0.message.tool_calls.0.tool_call.id": "c1",
             "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "lookup",
             "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": '{"q": "a"}'}
    old = {"gen_ai.operation.name": "chat", "gen_ai.prompt.0.role": "user", "gen_ai.prompt.0.content": "go",
           "gen_ai.prompt.1.role": "assistant", "gen_ai.prompt.1.tool_calls.0.id": "c1",
           "gen_ai.prompt.1.tool_calls.0.name": "lookup", "gen_ai.prompt.1.tool_calls.0.arguments": '{"q": "a"}',
           "gen_ai.prompt.2.role": "tool", "gen_ai.prompt.2.tool_call_id": "c1", "gen_ai.prompt.2.content": "A",
           "gen_ai.completion.0.role": "assistant", "gen_ai.completion.0.content": "done"}
    spans = [agent(), span("generation", 2, 1, 10, attrs),
             span("get", 3, 1, 20, {"openinference.span.kind": "TOOL", "tool.name": "lookup",
                                     "input.value": '{"q": "a"}', "output.value": "A"}),
             span("tool again", 4, 1, 25, {"openinference.span.kind": "TOOL", "tool.name": "lookup",
                                            "input.value": '{"q": "a"}', "output.value": "A"}),
             span("chat old", 5, 1, 30, old)]
    (rec,) = run(*spans)
    assert (rec.violation.rule, rec.violation.kind) == ("R12", "executed-twice")
    (rec,) = run(*[s for s in spans if s["name"] != "tool again"])
    assert rec.verdict == "conforms" and rec.summary["calls"] == 1 and rec.summary["results"] == 1


def test_console_exporter_output_is_read_with_its_lines(tmp_path: Path) -> None:
    def cspan(name: str, sid: int, parent: int | None, t: str, attrs: dict[str, Json]) -> str:
        return json.dumps({"name": name, "context": {"trace_id": "0x" + "ab" * 16, "span_id": f"0x{sid:016x}",
                                                     "trace_state": "[]"},
                           "kind": "SpanKind.INTERNAL", "parent_id": None if parent is None else f"0x{parent:016x}",
                           "start_time": t, "end_time": t, "status": {"status_code": "UNSET"},
                           "attributes": attrs, "events": [], "links": [], "resource": {}}, indent=4) + "\n"

    text_ = (cspan("chat m", 2, None, "2026-01-01T00:00:00.000001Z",
                   {"gen_ai.operation.name": "chat", "gen_ai.input.messages": json.dumps([user("go")]),
                    "gen_ai.output.messages": json.dumps([calls(A)])})
             + cspan("execute_tool lookup", 3, None, "2026-01-01T00:00:00.000002Z",
                     {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup",
                      "gen_ai.tool.call.id": "c1", "gen_ai.tool.call.arguments": '{"q": "a"}'})
             + cspan("chat m", 4, None, "2026-01-01T00:00:00.000003Z",
                     {"gen_ai.operation.name": "chat", "gen_ai.input.messages": json.dumps([user("go")]),
                      "gen_ai.output.messages": json.dumps([calls(A)])}))
    res = read_text_input(text_.encode(), "c.json")
    (rec,) = res.records
    assert rec.input == "otel-console" and rec.violation is not None
    starts = [k + 1 for k, line in enumerate(text_.splitlines()) if line == "{"]
    assert rec.violation.rule == "R11" and rec.at["line"] == starts[2] and rec.lines == (starts[0], starts[2])


def test_concatenated_values_report_the_line_of_a_broken_one() -> None:
    got = list(iter_concatenated('{"a": 1}\n{"b":\n  2}\n\n{"c": oops}\n'))
    assert [x for _, x in got[:2]] == [{"a": 1}, {"b": 2}] and got[1][0] == 2
    assert got[2][0] == 5 and isinstance(got[2][1], ValueError)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "loopspec", "check", *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


def test_bad_telemetry_gets_one_line_errors(tmp_path: Path) -> None:
    good_text = otlp(*good())
    bad_span = span("x", 5, None, 0, {})
    bad_span["traceId"] = "not hex"
    lines = good_text.splitlines()
    lines.insert(2, "{not json")
    lines.insert(3, otlp(bad_span).strip())
    lines.insert(4, json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "ab", "spanId": "cd",
                                                                            "attributes": [{"key": 1}]}]}]}]}))
    p = tmp_path / "bad.otlp.jsonl"
    p.write_text("\n".join(lines) + "\n")
    r = cli(str(p))
    assert r.returncode == 2, r.stderr
    errs = r.stderr.splitlines()
    assert errs == [
        f"loopspec check: error: {p}:3: not JSON: Expecting property name enclosed in double quotes (column 2)",
        f"loopspec check: error: {p}:4: resourceSpans[0].scopeSpans[0].spans[0].traceId: must be a hex id (or the 16 bytes of one in base64)",
        f"loopspec check: error: {p}:5: resourceSpans[0].scopeSpans[0].spans[0].attributes[0]: an attribute must be "
        '{"key": string, "value": AnyValue}',
    ], errs
    assert "checked 1 run" in r.stdout and "1 conform" in r.stdout
    c = tmp_path / "cut.console.json"
    c.write_text('{\n    "name": "chat m",\n    "context": {"trace_id": "0x01", "span_id": "0x02"},\n    "start_time": ')
    r = cli(str(c))
    assert r.returncode == 2 and r.stderr.startswith(f"loopspec check: error: {c}:4: not JSON: ") and "Traceback" not in (
        r.stderr)
    h = tmp_path / "history.json"
    h.write_text(json.dumps([{"kind": "request", "parts": [{"part_kind": "user-prompt", "content": "go"}]},
                             {"kind": "response", "parts": [{"part_kind": "tool-call", "tool_name": "t",
                                                             "args": {}, "tool_call_id": "c"}]},
                             {"kind": "request", "parts": [{"part_kind": "tool-return", "content": 1}]}], indent=1))
    r = cli(str(h))
    assert r.returncode == 2 and r.stderr.strip().endswith("$[2].parts[0].tool_call_id: missing (a tool return answers "
                                                           "one call id)"), r.stderr


def test_histories_are_detected_and_read() -> None:
    pai = [{"kind": "request", "parts": [{"part_kind": "user-prompt", "content": "go"}]},
           {"kind": "response", "parts": [{"part_kind": "tool-call", "tool_name": "t", "args": None,
                                           "tool_call_id": "c"}]},
           {"kind": "request", "parts": [{"part_kind": "retry-prompt", "tool_name": "t", "tool_call_id": "c",
                                          "content": "bad"}]},
           {"kind": "response", "parts": [{"part_kind": "tool-call", "tool_name": "t", "args": "{}",
                                           "tool_call_id": "c"}]},
           {"kind": "request", "parts": [{"part_kind": "tool-return", "tool_name": "t", "tool_call_id": "c",
                                          "content": "ok", "outcome": "success"}]},
           {"kind": "response", "parts": [{"part_kind": "text", "content": "done"}]}]
    (rec,) = read_text_input(json.dumps(pai).encode(), "h.json").records
    assert rec.input == "pydantic-ai" and rec.verdict == "conforms", rec.violation  # an error is never cached (R10)
    lc = [{"type": "human", "data": {"content": "go"}},
          {"type": "ai", "data": {"content": "", "tool_calls": [], "invalid_tool_calls": [
              {"name": "t", "args": "{oops", "id": "c", "error": "bad JSON", "type": "invalid_tool_call"}]}},
          {"type": "ai", "data": {"content": "done", "tool_calls": []}}]
    (rec,) = read_text_input(json.dumps(lc).encode(), "l.json").records
    assert rec.input == "langchain" and (rec.violation.rule, rec.violation.kind) == ("R11", "result-missing")


@pytest.mark.slow
@pytest.mark.frameworks
def test_the_recordings_are_reproducible() -> None:
    """Record every scenario again with the real frameworks and exporters: same verdicts as the manifest."""
    for mod in ("pydantic_ai", "agents", "langgraph", "opentelemetry.sdk", "opentelemetry.exporter.otlp.json.file",
                "openinference.instrumentation.openai_agents", "opentelemetry.instrumentation.langchain",
                "openinference.instrumentation.langchain", "openinference.instrumentation.openai",
                "opentelemetry.instrumentation.openai", "opentelemetry.instrumentation.openai_agents",
                "opentelemetry.instrumentation.openai_v2", "opentelemetry.util.genai"):
        pytest.importorskip(mod)
    r = subprocess.run([sys.executable, "-m", "tests.telemetry_recordings", "--check"], capture_output=True, text=True,
                       timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("\nok ") + r.stdout.startswith("ok ") == len(  # the AI SDK's, Mastra's: their recorders' test
        [c for c in json.loads((ROOT / "tests/golden/oracle/RECORDINGS.json").read_text())
         if not c["file"].startswith(("rec-ai-sdk-", "rec-mastra-"))])


def _ai_sdk_conflict_with_tool_times(tmp_path: Path, first: tuple[int, int], second: tuple[int, int]) -> Path:
    """The real AI SDK conflict recording (one id executed in rounds 1 and 2) with its two tool spans' times set."""
    src = Path(__file__).resolve().parent / "golden" / "oracle" / "rec-ai-sdk-fail-conflict-executed.otlp.jsonl"
    tools = iter([first, second])
    lines = []
    for line in src.read_text(encoding="utf-8").splitlines():
        doc = json.loads(line)
        for rs in doc["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    if span["name"].startswith("execute_tool"):
                        start, end = next(tools)
                        span["startTimeUnixNano"], span["endTimeUnixNano"] = str(start), str(end)
        lines.append(json.dumps(doc))
    out = tmp_path / "conflict.otlp.jsonl"
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def test_r33_needs_an_overlap_beyond_the_clock_s_millisecond(tmp_path: Path) -> None:
    """R33 from spans: the AI SDK's tool spans start on whole milliseconds (observed, ai 7.0.185), so a second
    execution of one id started within the first's millisecond is no evidence that both were in flight (CI met
    R33 instead of R7 when round 2 ran within 1 ms); an overlap longer than the clock's step still is."""
    from loopspec.oracle import check_file

    t = 1_796_494_773_582_000_000  # round 1's tool starts here; round 2's at t + 1 ms (as recorded)
    second = (t + 1_000_000, t + 1_055_000)
    same_ms = check_file(str(_ai_sdk_conflict_with_tool_times(tmp_path, (t, t + 1_050_000), second)))
    assert sorted({r.violation.rule for r in same_ms.records if r.violation}) == ["R7"]
    overlap = check_file(str(_ai_sdk_conflict_with_tool_times(tmp_path, (t, t + 2_500_000), second)))
    assert sorted({r.violation.rule for r in overlap.records if r.violation}) == ["R33"]
