"""Bring your own executor (issue 27): declared tools, the whole-batch rejection outcome (R47), every distinct
cause named by cause, -x, readable cases, the corpus in --out, and the smaller defects, each with a test that
fails before its fix."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from loopspec import ToolFailure
from loopspec.cli import main
from loopspec.fuzz import DeclarationError, Executor, ReferenceExecutor, fuzz, load_declaration
from loopspec.fuzz._adapter import ImplFactory, InProcessImpl
from loopspec.fuzz._campaign import Campaign
from loopspec.fuzz._declared import Declaration, judging_profile
from loopspec.fuzz._generate import Generator
from loopspec.fuzz._harness import run_step
from loopspec.fuzz._model import Finding, load_case
from loopspec.fuzz._reduce import step_candidates
from loopspec.fuzz._report import char_notes, render_finding, report_data
from loopspec.fuzz._vocab import unknown_names
from loopspec.judge.trace import judge
from tests.fuzz_helpers import ROOT, example_cmd

TOOLS_FILE = ROOT / "examples" / "java" / "wrapped" / "text-tools.json"
TEXT = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"],
        "additionalProperties": False}
TOOLS = [{"name": "length", "inputSchema": TEXT, "annotations": {"readOnlyHint": True}},
         {"name": "upper", "inputSchema": TEXT, "annotations": {"readOnlyHint": True}}]


class FixedRegistry(ReferenceExecutor):
    """A correct executor with a registry of its own: it answers by its tools, whatever batch.run offers."""

    def batch_run(self, params: dict, execute: Any) -> dict:
        return super().batch_run({**params, "tools": TOOLS}, execute)


class DeclaresItsTools(FixedRegistry):
    tools = TOOLS


# --------------------------------------------------------------------------------------------
# Declared tools
# --------------------------------------------------------------------------------------------


def test_a_fixed_registry_gets_artifacts_without_a_declaration_and_none_with_it(tmp_path: Path) -> None:
    undeclared = fuzz(FixedRegistry, max_examples=40, seed=5, out=tmp_path / "a", shrink_seconds=5)
    assert not undeclared.ok  # the harness's own tools (lookup, search, write) are not the executor's
    declared = fuzz(FixedRegistry, tools={"tools": TOOLS}, max_examples=60, seed=5, out=tmp_path / "b")
    assert declared.ok, [f.cause for f in declared.findings]
    assert declared.params["declared"]["tools"][0]["name"] == "length"


def test_an_executor_declares_its_tools_in_initialize(tmp_path: Path) -> None:
    r = fuzz(DeclaresItsTools, max_examples=40, seed=6, out=tmp_path)
    assert r.ok and r.params["declared"]["source"] == "the initialize result"
    case_steps = json.loads((tmp_path / "campaign.json").read_text())["parameters"]["declared"]
    assert [t["name"] for t in case_steps["tools"]] == ["length", "upper"]


def test_every_step_offers_exactly_the_declared_registry_and_proposes_other_names_too() -> None:
    gen = Generator("batch", seed=2, declared=load_declaration(TOOLS_FILE))
    names, invalid, modes = set(), 0, set()
    for i in range(40):
        for pl in gen.example(i)[0]:
            step = pl.step
            assert [t["name"] for t in step["config"]["tools"]] == ["length", "upper"]
            modes.add(step["config"]["mode"])
            for c in step["calls"]:
                if isinstance(c, dict) and isinstance(c.get("name"), str):
                    names.add(c["name"])
                    args = c.get("arguments")
                    if c["name"] in ("length", "upper") and isinstance(args, dict) and (
                            set(args) - {"text"} or not isinstance(args.get("text"), str)):
                        invalid += 1
    assert {"length", "upper"} <= names and names & set(unknown_names(("length", "upper")))
    assert invalid > 0  # deliberately invalid arguments (R4)
    assert modes == {"abort"}  # "continue" is declared unsupported


def test_the_reducer_never_drops_a_declared_tool() -> None:
    step = {"kind": "batch", "config": {"tools": TOOLS, "budget": 1, "mode": "abort", "principal": "a"},
            "calls": [{"id": "c1", "name": "length", "arguments": {"text": "a"}}], "script": []}
    assert any(len(c["config"]["tools"]) == 1 for c in step_candidates(step))
    assert all(len(c["config"]["tools"]) == 2 for c in step_candidates(step, keep_tools=True))


def test_a_declaration_that_cannot_be_used_names_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(DeclarationError, match=r"tools\[0\] \(x\): inputSchema.properties.a.type"):
        load_declaration({"tools": [{"name": "x", "inputSchema": {"type": "object",
                                                                  "properties": {"a": {"type": "number"}}}}]})
    with pytest.raises(DeclarationError, match="declared twice"):
        load_declaration([{"name": "x"}, {"name": "x"}])
    with pytest.raises(DeclarationError, match="unsupported"):
        load_declaration({"tools": TOOLS, "unsupported": ["loop-mode"]})
    bad = tmp_path / "tools.json"
    bad.write_text('{"tools": [{"name": ""}]}')
    assert main(["fuzz", "--impl", example_cmd(), "--tools", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "tools[0]: must be an object with a non-empty string name" in capsys.readouterr().err


def test_tools_are_read_from_a_running_mcp_server(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    server = tmp_path / "server.py"
    server.write_text(
        "try:\n    from mcp.server.mcpserver import MCPServer as Server\n"
        "except ImportError:\n    from mcp.server.fastmcp import FastMCP as Server\n"
        "app = Server('text-tools')\n"
        "@app.tool(annotations={'readOnlyHint': True})\n"
        "def length(text: str) -> int:\n    'The number of code points of a text.'\n    return len(text)\n"
        "@app.tool()\ndef upper(text: str) -> str:\n    'A text in upper case.'\n    return text.upper()\n"
        "app.run()\n")
    d = load_declaration(f"mcp:{sys.executable} {server}", timeout=60)
    assert d.names == ("length", "upper") and d.tools is not None
    assert d.tools[0]["annotations"] == {"readOnlyHint": True}
    assert d.schemas["length"].required == frozenset({"text"})
    # the whole command: the campaign offers the server's registry, read through the mcp SDK
    out = tmp_path / "out"
    assert main(["fuzz", "--impl", example_cmd(), "--tools", f"mcp:{sys.executable} {server}", "--max-examples",
                 "10", "--seed", "1", "--quiet", "--out", str(out)]) == 0
    declared = json.loads((out / "campaign.json").read_text())["parameters"]["declared"]
    assert declared["source"].startswith("mcp:") and [t["name"] for t in declared["tools"]] == ["length", "upper"]


def test_in_concurrent_steps_the_declared_annotations_decide_the_overlap() -> None:
    """R30: which calls may overlap follows each tool's MCP hints. With a declaration, the step carries the
    declared annotations (none where none were declared: MCP's defaults, not read-only), never the harness's
    random ones."""
    tools = [TOOLS[0], {"name": "upper", "inputSchema": TEXT, "annotations": {"destructiveHint": True}},
             {"name": "note", "inputSchema": TEXT}]
    gen = Generator("batch", seed=3, concurrency=True, declared=load_declaration({"tools": tools}))
    seen = 0
    for i in range(30):
        for pl in gen.example(i)[0]:
            if "concurrency" in pl.step["config"]:
                seen += 1
                assert [(t["name"], t.get("annotations")) for t in pl.step["config"]["tools"]] == \
                    [("length", {"readOnlyHint": True}), ("upper", {"destructiveHint": True}), ("note", None)]
    assert seen > 0


# --------------------------------------------------------------------------------------------
# The whole-batch rejection (R47)
# --------------------------------------------------------------------------------------------


def _trace(calls: list, result: dict, executions: list | None = None, mode: str = "abort") -> dict:
    events = [{"type": "execute", "callId": c, "name": n, "arguments": a, "principal": "a",
               "outcome": {"status": "ok", "output": 1}} for c, n, a in executions or []]
    return {"format": "loopspec-trace/1", "kind": "batch",
            "config": {"tools": TOOLS, "budget": 3, "mode": mode, "principal": "a"}, "calls": calls,
            "events": [*events, {"type": "response", "result": result}]}


WHOLE = judging_profile(None, {"unsupported": ["error-results"]})
UNKNOWN = {"id": "c1", "name": "Length", "arguments": {"text": "a"}}
GOOD = {"id": "c1", "name": "length", "arguments": {"text": "a"}}


def test_a_rejection_that_loses_nothing_conforms_only_where_the_profile_says_so() -> None:
    t = _trace([UNKNOWN], {"rejected": {"code": "UNKNOWN_TOOL"}, "executed": 0})
    v = judge(t).violation
    assert v is not None and (v.rule, v.kind) == ("R47", "rejected-whole-batch")
    assert judge(t, profile=WHOLE).ok


def test_answers_of_calls_that_ran_are_lost_by_a_later_rejection() -> None:
    t = _trace([GOOD, UNKNOWN | {"id": "c2"}], {"rejected": {"code": "UNKNOWN_TOOL"}, "executed": 1},
               [("c1", "length", {"text": "a"})])
    v = judge(t, profile=WHOLE).violation
    assert v is not None and (v.rule, v.kind, v.index) == ("R11", "answer-lost-after-rejection", 0)


def test_a_valid_id_refused_is_named_so_never_a_missing_execution() -> None:
    call = {**GOOD, "id": "\x1c"}  # not Unicode White_Space: a valid id (R2)
    v = judge(_trace([call], {"rejected": {"code": "INVALID_CALL"}, "executed": 0}), profile=WHOLE).violation
    assert v is not None and (v.rule, v.kind) == ("R2", "valid-id-rejected")
    # the same refusal as an abort at that request (before the fix: R11 execution-missing)
    aborted = judge(_trace([call], {"results": [], "executed": 0, "aborted": {"index": 0, "code": "INVALID_CALL"}}))
    assert aborted.violation is not None and aborted.violation.rule == "R2"
    assert aborted.violation.kind == "wrongly-answered-invalid-call"


def test_other_rejections_name_what_they_lose() -> None:
    cont = _trace([UNKNOWN], {"rejected": {"code": "UNKNOWN_TOOL"}, "executed": 0}, mode="continue")
    v = judge(cont, profile=WHOLE).violation
    assert v is not None and (v.rule, v.kind) == ("R14", "rejected-in-continue-mode")
    wrong = judge(_trace([UNKNOWN], {"rejected": {"code": "INVALID_CALL"}, "executed": 0}), profile=WHOLE).violation
    assert wrong is not None and wrong.kind == "wrongly-rejected-invalid-call"
    miscounted = judge(_trace([UNKNOWN], {"rejected": {"code": "UNKNOWN_TOOL"}, "executed": 2}), profile=WHOLE)
    assert miscounted.violation is not None and miscounted.violation.rule == "R12"
    shape = judge(_trace([UNKNOWN], {"rejected": {"code": "UNKNOWN_TOOL"}, "executed": 0, "results": []}))
    assert shape.violation is not None and shape.violation.rule == "P5"


# --------------------------------------------------------------------------------------------
# Distinct causes, -x, readable cases, the corpus
# --------------------------------------------------------------------------------------------


class RejectsWholeBatches(Executor):
    """A batch executor in the style of an executor written before the spec: answers of calls that already
    ran are lost when a later call is refused (R11), and an unknown tool is refused as a malformed call."""

    tools = TOOLS
    unsupported = ("continue", "error-results")

    def batch_run(self, params: dict, execute: Any) -> dict:
        results, seen, executed = [], {}, 0
        for c in params["calls"]:
            if not (isinstance(c, dict) and isinstance(c.get("id"), str) and c["id"].strip()
                    and c.get("name") in ("length", "upper") and isinstance(c.get("arguments"), dict)):
                return {"rejected": {"code": "INVALID_CALL"}, "executed": executed}
            key = json.dumps([c["name"], c["arguments"]], sort_keys=True)
            if c["id"] in seen:
                if seen[c["id"]][0] != key:
                    return {"rejected": {"code": "ID_CONFLICT"}, "executed": executed}
                results.append({"id": c["id"], "status": "ok", "output": seen[c["id"]][1]})
                continue
            if executed >= params["budget"]:
                return {"rejected": {"code": "BUDGET_EXHAUSTED"}, "executed": executed}
            executed += 1
            try:
                out = execute(c["id"], c["name"], c["arguments"], params["principal"])
            except ToolFailure as f:
                return {"rejected": {"code": f.category}, "executed": executed}
            seen[c["id"]] = (key, out)
            results.append({"id": c["id"], "status": "ok", "output": out})
        return {"results": results, "executed": executed, "aborted": None}


def test_every_distinct_cause_is_reported_and_named_by_cause(tmp_path: Path) -> None:
    r = fuzz(RejectsWholeBatches, max_examples=150, seed=3, out=tmp_path, shrink_seconds=20)
    causes = {f.cause for f in r.findings}
    assert "R11-answer-lost-after-rejection" in causes and "R2-wrongly-rejected-invalid-call" in causes, causes
    assert len(causes) >= 3, causes
    for f in r.findings:
        assert (tmp_path / f"{f.cause}.json").is_file() and (tmp_path / f"{f.cause}.txt").is_file()
        assert f.calls <= 3 and f.reproduced
    doc = json.loads((tmp_path / "campaign.json").read_text())
    assert {f["cause"] for f in doc["findings"]} == causes


def test_exitfirst_stops_at_the_first_reduced_case(tmp_path: Path) -> None:
    factory = ImplFactory(RejectsWholeBatches)
    try:
        factory.release(factory.open("batch"))
        r = Campaign(factory, max_examples=150, seed=3, out=tmp_path, exitfirst=True).run()
    finally:
        factory.close()
    assert len(r.findings) == 1 and r.stats["stoppedBy"] == "exitfirst" and r.findings[0].shrunk


def test_old_cases_survive_a_new_campaign_and_are_reported_fixed_when_they_pass(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o"
    argv = ["fuzz", "--max-examples", "60", "--seed", "3", "--out", str(out), "--quiet"]
    assert main([*argv, "--impl", example_cmd("conflict-reuse")]) == 1
    first = sorted(p.name for p in out.glob("R*.json") if not p.name.endswith(".path.json"))
    assert first
    # a new campaign with another seed that finds less: the old cases are replayed first and kept
    assert main([*argv[:4], "1", *argv[5:], "--max-examples", "1", "--impl", example_cmd("conflict-reuse")]) == 1
    assert sorted(p.name for p in out.glob("R*.json") if not p.name.endswith(".path.json")) == first
    doc = json.loads((out / "campaign.json").read_text())
    assert {e["status"] for e in doc["corpus"]} == {"still-failing"}
    capsys.readouterr()
    assert main(["replay", str(out), "--impl", example_cmd("conflict-reuse")]) == 1
    assert "still diverge" in capsys.readouterr().out
    # fixed: the correct executor passes them; they move to fixed/, reported, never deleted silently
    assert main([*argv, "--impl", example_cmd()]) == 0
    assert not list(out.glob("R*.json")) and sorted(p.name for p in (out / "fixed").glob("R*.json")
                                                     if not p.name.endswith(".path.json")) == first
    assert "fixed:" in capsys.readouterr().out


def test_an_old_case_named_by_its_rule_alone_is_kept_under_its_cause(tmp_path: Path) -> None:
    r = fuzz(example_cmd("conflict-reuse"), max_examples=60, seed=3, out=tmp_path)
    f = next(f for f in r.findings if f.rule == "R7")
    (tmp_path / f"{f.cause}.json").rename(tmp_path / "R7.json")  # as a campaign before causes wrote it
    again = fuzz(example_cmd("conflict-reuse"), max_examples=1, seed=9, out=tmp_path)
    assert f.cause in {g.cause for g in again.findings} and (tmp_path / f"{f.cause}.json").is_file()
    assert not (tmp_path / "R7.json").exists()
    entry = next(e for e in again.corpus if e["case"].endswith("R7.json"))
    assert entry["status"] == "renamed" and entry["now"].endswith(f"{f.cause}.json")


def test_cases_prefer_readable_ids_and_name_the_code_point_that_is_the_cause() -> None:
    plain = Finding(judge(_trace([GOOD], {"rejected": {"code": "INVALID_CALL"}, "executed": 0})), [{"calls": [GOOD]}], [])
    odd = Finding(plain.verdict, [{"calls": [{**GOOD, "id": "\x1c\x1c"}]}], [])
    assert plain.size < odd.size  # the reducer takes the readable candidate when the case still fails
    notes = char_notes({"calls": [{**GOOD, "id": "\x1c"}, {**GOOD, "id": "\u00a0"}]})
    assert notes[0].startswith("U+001C INFORMATION SEPARATOR FOUR (in the id of #0): not Unicode White_Space")
    assert "Java's isBlank() counts it as white space" in notes[0]
    assert notes[1].startswith("U+00A0 NO-BREAK SPACE") and "Java's isBlank() does not count it" in notes[1]


# --------------------------------------------------------------------------------------------
# The smaller defects
# --------------------------------------------------------------------------------------------


class Leaky(Executor):  # defined at module level: `module:qualname` reruns it
    def batch_run(self, params: dict, execute: Any) -> dict:
        return {"results": [], "executed": 0, "aborted": None}


def test_the_replay_line_can_run(tmp_path: Path) -> None:
    r = fuzz(Leaky, max_examples=5, seed=1, out=tmp_path, shrink_seconds=3)
    f = r.findings[0]
    text = render_finding(f, r.impl or "", str(tmp_path / f"{f.cause}.json"))
    assert "--impl tests.test_fuzz_declared:Leaky" in text and "<class" not in text
    assert r.impl == "tests.test_fuzz_declared:Leaky"


def test_writes_coverage_counts_the_operation_machine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fuzz", "--mode", "writes", "--impl", example_cmd(), "--max-examples", "4", "--seed", "2",
                 "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "of the 0 spec transitions" not in out
    assert "transitions of writes.toml (section 6's operation machine) reachable in writes mode" in out
    cov = json.loads((tmp_path / "coverage.json").read_text())
    assert set(cov["transitions"]) >= {"W01", "W10"} and cov["transitions"]["W01"] > 0


def test_the_report_says_not_exercised_instead_of_conforms_seen_0(tmp_path: Path) -> None:
    r = fuzz(DeclaresItsTools, tools=TOOLS_FILE, max_examples=20, seed=2)
    data = report_data(impl="x", info={}, mode="batch", profile=None, result=r, strict=None, out=None)
    by = {e["rule"]: e for e in data["rules"]}
    assert by["R14"]["status"] == "not-exercised" and by["R14"]["unsupported"] == ["continue", "error-results"]
    assert all(not (e["status"] == "conforms" and "seen: 0 " in e.get("exercised", "") and
                    all(part.startswith("0 ") for part in e["exercised"][6:].split(", "))) for e in data["rules"])


def test_a_declared_profile_travels_with_the_case(tmp_path: Path) -> None:
    r = fuzz(RejectsWholeBatches, max_examples=60, seed=3, out=tmp_path, shrink_seconds=5)
    f = r.findings[0]
    case = load_case(tmp_path / f"{f.cause}.json")
    assert case["declared"]["unsupported"] == ["continue", "error-results"]
    impl = InProcessImpl(RejectsWholeBatches())
    trace = run_step(impl, case["steps"][-1])
    assert not judge(trace, profile=judging_profile(None, case["declared"])).ok
    assert isinstance(Declaration(), Declaration)


def test_the_python_template_adapter_passes_a_campaign(tmp_path: Path) -> None:
    adapter = ROOT / "examples" / "python" / "template_adapter.py"
    code = [line for line in adapter.read_text().splitlines() if line.strip() and not line.startswith(("#", " "))]
    assert len(adapter.read_text().splitlines()) < 75 and code  # small enough to copy
    r = fuzz(f"{sys.executable} {adapter}", max_examples=25, seed=4, out=tmp_path)
    assert r.ok, [f.cause for f in r.findings]


def test_in_writes_mode_the_annotations_decide_which_declared_tools_are_writes(tmp_path: Path) -> None:
    from loopspec.fuzz._writes_gen import WritesGenerator

    declared = load_declaration({"tools": [
        {"name": "charge", "inputSchema": {"type": "object", "properties": {"invoice": {"type": "string"},
                                                                            "cents": {"type": "integer"}},
                                           "required": ["invoice"]}, "annotations": {"destructiveHint": True}},
        {"name": "balance", "inputSchema": {"type": "object", "properties": {"invoice": {"type": "string"}}},
         "annotations": {"readOnlyHint": True}}]})
    steps = [pl.step for i in range(10) for pl in WritesGenerator(seed=1, declared=declared).example(i)[0]]
    for st in steps:
        assert [(t["name"], t["kind"], t["key"]["arguments"]) for t in st["config"]["tools"]] == \
            [("charge", "write", ["invoice"])]  # balance is read-only: no write
        assert all(c["name"] == "charge" and c["arguments"]["invoice"] in ("A", "B", "C") for c in st["calls"])
    r = fuzz(example_cmd("key-by-call-id"), mode="writes", tools=declared.to_json(), max_examples=30, seed=1,
             out=tmp_path)
    assert "R37" in {f.rule for f in r.findings}
    with pytest.raises(ValueError, match="no declared tool is a write"):
        WritesGenerator(seed=1, declared=load_declaration([{"name": "x", "annotations": {"readOnlyHint": True}}]))
