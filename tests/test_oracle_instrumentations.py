"""``loopspec check`` on the instrumentations people combine with the frameworks (tests/telemetry_instrumentations.py):
OpenInference for LangGraph and for the openai client, OpenLLMetry for the Agents SDK (with and without its openai
client instrumentation), the official openai-v2 instrumentation with opentelemetry-util-genai. The recordings are
real (scripted model, no network, the SDK's exporters); their exact reports are golden (tests/test_oracle_golden.py).
Here: each verdict against what really happened, no run split or invented, nothing verified that the spans do not
show, the three export shapes of one recording judged alike, and ``loopspec monitor``'s intake judged as ``check``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loopspec.monitor import _otlp
from loopspec.oracle import check_file, read_text_input

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden" / "oracle"
RECORDINGS = [c for c in json.loads((GOLDEN / "RECORDINGS.json").read_text(encoding="utf-8"))
              if "happened" in c and not c.get("stitching")]  # stitching's: tests/test_oracle_stitching.py
MESSAGE_RULES = ("R2", "R6", "R7", "R11", "R12", "R32")
#: the groups whose traces hold the framework's run: one run per recording
ONE_RUN = ("openinference-langgraph", "openllmetry-langgraph", "openllmetry-openai-agents", "openllmetry-agents-only",
           "agents-sdk", "openinference-openai-agents", "logfire-openai-agents", "logfire-openai-agents-responses",
           "logfire-pydantic-ai")
SHAPES = (".otlp.jsonl", ".console.json", ".pb.json", ".agents.jsonl", ".backend.jsonl")


def _records(name: str) -> list[Any]:
    res = check_file(str(GOLDEN / name))
    assert not res.errors, res.errors
    return res.records


def test_every_group_and_scenario_is_recorded() -> None:
    from tests.telemetry_instrumentations import GROUPS, SCENARIOS, kinds

    got = {(c["group"], c["scenario"]) for c in RECORDINGS}
    assert got == {(g, s) for g in GROUPS for s in SCENARIOS[g]}
    files = {c["file"] for c in RECORDINGS}
    assert files == {f"rec-{g}-{s}.{k}" for g in GROUPS for s in SCENARIOS[g] for k in kinds(g)}


@pytest.mark.parametrize("case", RECORDINGS, ids=[c["file"] for c in RECORDINGS])
def test_the_verdict_is_what_happened(case: dict[str, Any]) -> None:
    """What the framework did (its tool's log, its own history) decides the verdict, not the trace: an execution
    of a repeated id is R6, of a reused id with other arguments R7; a repeat dropped without an answer is R11
    where the trace holds the next request, and otherwise the verdict says the last proposal's results are not
    recorded."""
    recs = _records(case["file"])
    h = case["happened"]
    rules = sorted({r.violation.rule for r in recs if r.violation})
    ran = h["executed"]
    proposed = h["proposed"]
    if case["scenario"] == "replay" and len(ran) == 2:  # executed again: the stored result was not the answer
        assert rules == ["R6"]
    elif case["scenario"] == "conflict" and len(ran) == 2:  # the reused id ran
        assert rules == ["R7"]
    elif case["scenario"] == "replay" and len(ran) == 1 and len(h.get("answered", [])) < len(proposed):
        # dropped without an answer: R11, or said to be unseen
        if rules:
            assert rules == ["R11"]
        else:
            notes = [n for r in recs for n in r.summary.get("notes", ())]
            unseen = [r for r in recs if "R11" in r.checks["notWitnessed"] or any("no later" in n for n in notes)]
            assert unseen, "a dropped repeat neither reported nor said to be unseen"
    else:
        assert rules == [], (case["file"], rules)
    assert sorted(case["rules"]) == rules


@pytest.mark.parametrize("case", RECORDINGS, ids=[c["file"] for c in RECORDINGS])
def test_no_run_is_split_or_invented(case: dict[str, Any]) -> None:
    """A LangGraph graph run or an Agents SDK trace is one run (its node, chain and step spans inside it, its tool
    spans with it); where only the openai client is instrumented each model call is a trace of its own, and the
    traces of one conversation are stitched into one run, which starts at its first model call (not
    mid-conversation) and says from which traces it was stitched."""
    recs = _records(case["file"])
    assert not any("no-agent" in r.run for r in recs)
    if case["scenario"] == "two-runs":  # two Runner runs in one trace(), no handoff between them: two runs
        assert [(r.verdict, r.summary["executions"]) for r in recs] == [("conforms", 1), ("conforms", 1)]
        assert len({r.run for r in recs}) == 2 and all(r.run.startswith(recs[0].run.split("/")[0]) for r in recs)
        return
    assert len(recs) == 1
    if case["group"] == "agents-sdk-responses" or case["scenario"] == "no-content":
        # response spans, or spans whose content the run config left out, record no messages: executions not judged
        (rec,) = recs
        assert rec.summary["executions"] == 0 and rec.verdict == "conforms" and not rec.checks["verified"]
        assert any(f"{len(case['happened']['executed'])} execution(s) follow a model call whose output is not "
                   "recorded" in n for n in rec.summary["notes"]), rec.summary
    elif case["group"] in ONE_RUN:
        assert recs[0].summary["executions"] == len(case["happened"]["executed"])
        assert "stitched" not in recs[0].summary
    else:
        (r,) = recs
        st = r.summary["stitched"]
        assert r.summary["executions"] == 0 and len(st["traces"]) == r.events >= 2, st
        assert r.run == st["traces"][0] and len(st["evidence"]) == len(st["traces"]) - 1
        assert not any("starts mid-conversation" in n for n in r.summary.get("notes", ())), r.summary


def _all_records() -> Iterator[Any]:
    for c in json.loads((GOLDEN / "RECORDINGS.json").read_text(encoding="utf-8")):
        if c["file"].endswith(SHAPES):
            yield c["file"], _records(c["file"])


def test_nothing_is_verified_that_the_spans_do_not_show() -> None:
    """Without a recorded model output for every model call, no rule that needs the proposals is verified; a run
    without tool spans verifies no execution rule; a violated rule is never listed as not witnessed; every rule
    listed has its reason."""
    seen = 0
    for name, recs in _all_records():
        for r in recs:
            c = r.checks
            why = c.get("why", {})
            assert all(x in why for x in (*c["verified"], *c["assumed"])), (name, c)
            if r.violation is not None:
                assert r.violation.rule in c["verified"] and r.violation.rule not in c["notWitnessed"], name
                continue
            notes = " ".join(r.summary.get("notes", ()))
            if "output is not recorded" in notes or "have no recorded output" in " ".join(why.values()):
                seen += 1
                assert not set(MESSAGE_RULES) & set(c["verified"]), (name, c["verified"])
            if r.summary.get("executions") == 0:
                assert not {"R12", "R32", "R33", "R3", "R4"} & set(c["verified"]), (name, c["verified"])
    assert seen, "no recording without model outputs was checked"


def test_the_three_export_shapes_are_judged_alike() -> None:
    """The OTLP/JSON file exporter's lines, the console exporter's spans and the protobuf JSON mapping (base64
    ids, as MessageToJson writes them) of one recording give the same runs and verdicts."""
    stems = {c["file"].rsplit(".", 2)[0] for c in RECORDINGS if c["file"].endswith(".pb.json")}
    assert stems
    for stem in sorted(stems):
        shapes = [[(r.run, r.verdict, r.violation.rule if r.violation else None, r.checks["verified"])
                   for r in _records(f"{stem}.{kind}")] for kind in ("otlp.jsonl", "console.json", "pb.json")]
        assert shapes[0] == shapes[1] == shapes[2], stem


def monitor_verdicts(text: str) -> list[dict[str, Any]]:
    """What ``loopspec monitor``'s judge prints for the export requests in ``text`` (one JSON document each, as the
    protobuf JSON mapping or OTLP/JSON): each body decoded and cut by trace as the intake does, each trace closed by
    its root (its spans gathered until then, as the monitor's open traces do) and handed to the monitor's judge (which holds one model client's traces with the
    conversation they continue), then the monitor stopped (every held conversation judged)."""
    import io

    from loopspec.judge.verdict import default_spec
    from loopspec.monitor._service import Monitor, Settings

    out = io.StringIO()
    m = Monitor(Settings(idle=3600.0), default_spec(), out=out, err=io.StringIO())
    dec = json.JSONDecoder()
    pos = 0
    while pos < len(text):
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            break
        doc, pos = dec.raw_decode(text, pos)
        cut = _otlp.by_trace(_otlp.decode(json.dumps(doc).encode(), _otlp.JSON, max_bytes=1 << 24))
        assert cut.rejected == 0
        for tid, frags in cut.traces.items():
            m.traces.add(tid, frags, cut.spans[tid], now=0.0)
            if tid in cut.roots:
                closed = m.traces.close(tid, "root")
                assert closed is not None
                m.judge(closed)
    for closed in m.traces.all():
        m.judge(closed)
    m._judge_conversations(m.conversations.all())
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_monitor_judges_as_check() -> None:
    """``loopspec monitor``'s intake (the JSON body decoded, base64 ids made hex, cut by trace) and its judge (one
    model client's traces held with their conversation, then judged together) give the verdicts ``check`` gives on
    the file — the same stitched runs."""
    for c in RECORDINGS:
        if not c["file"].endswith(".pb.json"):
            continue
        live = sorted((v["run"], v["verdict"], (v.get("violation") or {}).get("rule"))
                      for v in monitor_verdicts((GOLDEN / c["file"]).read_text(encoding="utf-8")))
        want = sorted((r.run, r.verdict, r.violation.rule if r.violation else None) for r in _records(c["file"]))
        assert live == want, c["file"]


def test_base64_and_hex_ids_are_the_same_span() -> None:
    import base64

    def doc(tid: str, sid: str) -> str:
        return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{
            "traceId": tid, "spanId": sid, "name": "chat m", "startTimeUnixNano": "1", "endTimeUnixNano": "2",
            "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                           {"key": "gen_ai.output.messages", "value": {"stringValue": json.dumps(
                               [{"role": "assistant", "parts": [{"type": "text", "content": "hi"}]}])}}]}]}]}]}) + "\n"

    t, s = bytes(range(1, 17)), bytes(range(1, 9))
    a = read_text_input(doc(t.hex(), s.hex()).encode(), "a.otlp.jsonl")
    b = read_text_input(doc(base64.b64encode(t).decode(), base64.b64encode(s).decode()).encode(), "b.otlp.jsonl")
    assert not a.errors and not b.errors
    assert [r.run for r in a.records] == [r.run for r in b.records] == [t.hex()]
    bad = read_text_input(doc("AAECAw==", s.hex()).encode(), "c.otlp.jsonl")  # 4 bytes: not a trace id
    assert bad.errors and "must be a hex id (or the 16 bytes of one in base64)" in bad.errors[0].message


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "loopspec", "check", *args], capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}, timeout=120)


def test_check_reads_a_directory_recursively(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / ".hidden").mkdir()
    for name, dest in (("rec-openinference-langgraph-pass.otlp.jsonl", "a/pass.otlp.jsonl"),
                       ("rec-openinference-langgraph-replay.pb.json", "a/b/replay.pb.json"),
                       ("rec-openinference-langgraph-conflict.otlp.jsonl", ".hidden/x.otlp.jsonl")):
        (tmp_path / dest).write_bytes((GOLDEN / name).read_bytes())
    r = _cli(str(tmp_path), "--format", "json")
    assert r.returncode == 1, r.stderr
    rep = json.loads(r.stdout)
    assert rep["summary"]["files"] == 2
    assert [Path(x["file"]).name for x in rep["runs"]] == ["replay.pb.json", "pass.otlp.jsonl"]  # a/b/… < a/p…
    assert rep["summary"]["violationsByRule"] == {"R6": 1}
    (tmp_path / "empty").mkdir()
    r = _cli(str(tmp_path / "empty"))
    assert r.returncode == 2 and "holds no file" in r.stderr


def test_summary_events_are_the_runs_events() -> None:
    for name, _ in _all_records():
        res = check_file(str(GOLDEN / name))
        assert res.summary.events == sum(r.events for r in res.records), name


def test_every_assumption_in_a_summary_says_why() -> None:
    for p in sorted((GOLDEN / "expected").glob("*.json")):
        summary = json.loads(p.read_text(encoding="utf-8"))["summary"]
        for rule, a in summary["assumed"].items():
            assert a["why"], (p.name, rule)


def test_a_stray_tool_span_joins_the_run_that_proposed_its_call() -> None:
    """Two agent invocations in one trace, and a tool span outside both (an instrumentation that does not parent
    tool spans under the agent): it belongs to the run whose model call proposed its call id, not to a run of its
    own."""
    from tests.test_oracle_telemetry import agent, answers, calls, chat, otlp, text, tool, user

    a1, a2 = agent(1), agent(10)
    a2["startTimeUnixNano"], a2["endTimeUnixNano"] = "100", "200"
    a1["endTimeUnixNano"] = "99"
    spans = [a1, chat(2, 10, [user("go")], [calls(("c1", "lookup", {"q": "a"}))], parent=1),
             tool(3, 20, "c1", "lookup", {"q": "a"}, "A", parent=99),  # parent not in the file
             chat(4, 40, [user("go"), calls(("c1", "lookup", {"q": "a"})), answers(("c1", "A"))], [text("done")],
                  parent=1),
             a2, chat(11, 110, [user("again")], [text("hi")], parent=10)]
    res = read_text_input(otlp(*spans).encode(), "t.otlp.jsonl")
    assert not res.errors
    assert [(r.run.split("/")[-1][-2:], r.verdict, r.summary["executions"]) for r in res.records] == [
        ("01", "conforms", 1), ("0a", "conforms", 0)]
    assert "R12" in res.records[0].checks["verified"]


def test_a_model_call_recorded_twice_is_one_call() -> None:
    """OpenLLMetry's Agents SDK span (input only) with the openai client's span inside it (input and output): one
    model call, read from both, with a note."""
    from tests.test_oracle_telemetry import agent, calls, otlp, span, text, tool, user

    inp1, out1 = [user("go")], [calls(("c1", "lookup", {"q": "a"}))]
    inp2 = [user("go"), *out1, {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1",
                                                            "response": "A"}]}]
    outer1 = span("openai.response", 2, 1, 10, {"gen_ai.operation.name": "chat", "gen_ai.input.messages": inp1})
    inner1 = span("openai.chat", 3, 2, 11, {"gen_ai.operation.name": "chat", "gen_ai.input.messages": inp1,
                                           "gen_ai.output.messages": out1})
    outer2 = span("openai.response", 5, 1, 30, {"gen_ai.operation.name": "chat", "gen_ai.input.messages": inp2})
    inner2 = span("openai.chat", 6, 5, 31, {"gen_ai.operation.name": "chat", "gen_ai.input.messages": inp2,
                                           "gen_ai.output.messages": [text("done")]})
    res = read_text_input(otlp(agent(), outer1, inner1, tool(4, 20, "c1", "lookup", {"q": "a"}, "A"), outer2,
                               inner2).encode(), "t.otlp.jsonl")
    (rec,) = res.records
    assert rec.verdict == "conforms" and rec.events == 3 and rec.summary["calls"] == 1
    assert any("recorded twice" in n for n in rec.summary["notes"])
    assert {"R11", "R12", "R28"} <= set(rec.checks["verified"])
