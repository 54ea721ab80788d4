"""loopspec fuzz in loop mode: loop.run / model.next, judged against the pure reference driver.

Loop semantics may still be refined; these tests derive the outcome fields from the engine's
RunOutcome.to_json() (LOOP_RESULT_FIELDS) rather than listing them.
"""

from __future__ import annotations

import copy
import json
import sys
import time
from pathlib import Path

import pytest

from loopspec.cli import main
from loopspec.fuzz._adapter import ImplFactory, InProcessImpl
from loopspec.fuzz._campaign import Campaign
from loopspec.fuzz._harness import run_loop_step
from loopspec.judge.loop import LOOP_RESULT_FIELDS
from loopspec.judge.trace import judge
from loopspec.protocol.executor import ReferenceExecutor
from tests.fuzz_helpers import LOOKUP, OPEN, call, case_path, example_cmd, schema_validator

SERVE = [sys.executable, "-m", "loopspec", "serve"]


def loop_step(model: list[dict], *, limits: dict | None = None, mode: str = "continue", on_limit: str = "throw",
              script: list[dict] | None = None, tools: list[dict] | None = None) -> dict:
    lim = {"maxRounds": None, "maxExecutions": None, "maxToolExecutions": None, "maxRequests": None,
           "maxRetries": 0, "deadline": None}
    lim.update(limits or {})
    return {"kind": "loop", "config": {
        "tools": tools or [{"name": "lookup", "inputSchema": LOOKUP}, {"name": "write", "inputSchema": OPEN}],
        "limits": lim, "mode": mode, "onLimit": on_limit, "principal": "alice"},
        "model": model, "script": script or []}


def ref_trace(st: dict) -> dict:
    return run_loop_step(InProcessImpl(ReferenceExecutor()), st)


def result_of(t: dict) -> dict:
    assert t["events"][-1]["type"] == "response"
    return t["events"][-1]["result"]


def campaign(target: object, out: Path | None = None, **kw: object) -> object:
    factory = ImplFactory(target, timeout=kw.pop("timeout", 5.0))  # type: ignore[arg-type]
    try:
        return Campaign(factory, mode="loop", out=out, **kw).run()  # type: ignore[arg-type]
    finally:
        factory.close()


def test_loop_result_fields_come_from_run_outcome() -> None:
    from loopspec.engine.reference import RunOutcome

    keys = set(RunOutcome.__dataclass_fields__)
    assert "rounds" in LOOP_RESULT_FIELDS and "runId" not in LOOP_RESULT_FIELDS
    assert {"status", "stopReason", "coverage", "executed", "aborted", "final", "results"} <= set(LOOP_RESULT_FIELDS)
    assert "counters" in keys  # rounds is derived from counters.modelRequests


def test_reference_loop_trace_and_result_follow_the_schemas() -> None:
    t = ref_trace(loop_step([{"calls": [call("c1", q="a"), call("c1", q="a")]}, {"calls": [call("c2", "shell")]},
                             {"final": "ok"}], script=[{"value": 3}]))
    assert judge(t).ok
    schema_validator("trace.schema.json").validate(t)
    schema_validator("adapter-protocol.schema.json", "loopRunResult").validate(result_of(t))
    r = result_of(t)
    assert (r["status"], r["stopReason"], r["rounds"], r["executed"], r["final"]) == (
        "COMPLETED", "FINAL_ANSWER", 3, 1, "ok")
    shown = [e["results"] for e in t["events"] if e["type"] == "model"]
    assert [len(x) for x in shown] == [0, 2, 1]  # each round sees the previous round's answers (R18)


def test_R18_model_shown_all_answers_instead_of_the_last_round() -> None:
    t = ref_trace(loop_step([{"calls": [call("c1", q="a")]}, {"calls": [call("c2", q="b")]}, {"final": "x"}]))
    bad = copy.deepcopy(t)
    models = [e for e in bad["events"] if e["type"] == "model"]
    models[2]["results"] = models[1]["results"] + models[2]["results"]
    v = judge(bad).violation
    assert v is not None and (v.rule, v.kind) == ("R18", "model-shown-wrong-results")
    assert v.explanation.startswith("Let a run with")


def test_R19_model_asked_past_max_rounds() -> None:
    t = ref_trace(loop_step([{"calls": [call("c1", q="a")]}, {"calls": []}], limits={"maxRounds": 1}))
    assert result_of(t)["stopReason"] == "MAX_ROUNDS"
    bad = copy.deepcopy(t)
    resp = bad["events"].pop()
    bad["events"].append({"type": "model", "round": 2, "results": result_of(t)["results"], "reply": {"calls": []}})
    bad["events"].append(resp)
    v = judge(bad).violation
    assert v is not None and (v.rule, v.kind) == ("R19", "model-asked-after-end")


def test_R28_model_asked_after_the_final_answer() -> None:
    t = ref_trace(loop_step([{"final": "done"}]))
    bad = copy.deepcopy(t)
    resp = bad["events"].pop()
    bad["events"].append({"type": "model", "round": 2, "results": [], "reply": {"final": "again"}})
    bad["events"].append(resp)
    assert judge(bad).violation.rule == "R28"


def test_R22_final_invented_and_coverage_dishonest() -> None:
    t = ref_trace(loop_step([{"calls": [call("c1", q="a"), call("c2", q="b")]}],
                            limits={"maxExecutions": 1}, on_limit="error-result"))
    r = result_of(t)
    assert (r["status"], r["coverage"]) == ("COMPLETED", "PARTIAL")
    lies = copy.deepcopy(t)
    result_of(lies)["coverage"] = "COMPLETE"
    assert (judge(lies).violation.rule, judge(lies).violation.invariant) == ("R22", "INV-PARTIAL-COVERAGE")
    invented = copy.deepcopy(t)
    result_of(invented)["final"] = "all good"
    assert judge(invented).violation.kind == "wrong-final"


def test_R23_retries_are_budgeted() -> None:
    st = loop_step([{"calls": [call("c1", q="a")]}], limits={"maxRetries": 1},
                   script=[{"fail": "DEPENDENCY_TEMPORARY"}, {"value": 5}])
    t = ref_trace(st)
    assert [e["type"] for e in t["events"]].count("execute") == 2  # one execution, two attempts
    assert result_of(t)["executed"] == 1 and result_of(t)["results"][0]["output"] == 5
    bad = copy.deepcopy(t)
    ev = next(e for e in bad["events"] if e["type"] == "execute")
    i = bad["events"].index(ev)
    bad["events"].insert(i + 2, {**copy.deepcopy(ev), "outcome": {"status": "ok", "output": 6}})
    v = judge(bad).violation
    assert v is not None and v.rule == "R23"


def test_model_error_ends_the_run_failed() -> None:
    t = ref_trace(loop_step([{"calls": [call("c1", q="a")]}, {"error": "boom"}]))
    assert (result_of(t)["status"], result_of(t)["stopReason"]) == ("FAILED", "MODEL_ERROR")
    t = ref_trace(loop_step([{"raw": {"calls": "x"}}]))
    assert result_of(t)["stopReason"] == "MODEL_ERROR"
    bad = copy.deepcopy(t)
    result_of(bad).update(status="COMPLETED", stopReason="FINAL_ANSWER")
    assert judge(bad).violation.kind == "wrong-terminal-state"


def test_reference_engine_in_process_has_no_loop_divergence() -> None:
    r = campaign(ReferenceExecutor, max_examples=80, seed=3)
    assert r.ok, [f.verdict.violation.explanation for f in r.findings]
    assert r.stats["examples"] >= 80 and r.stats["steps"] >= 80 and r.stats["executionsObserved"] > 0, r.stats


def test_loopspec_serve_has_no_loop_divergence() -> None:
    r = campaign(SERVE, max_examples=12, seed=4)
    assert r.ok, [f.verdict.violation.explanation for f in r.findings]
    assert r.stats["examples"] >= 12 and r.stats["steps"] >= 12 and r.stats["executionsObserved"] > 0, r.stats


@pytest.mark.slow
def test_correct_python_example_passes_2000_loop_examples(tmp_path: Path) -> None:
    t0 = time.perf_counter()
    r = campaign(example_cmd(), out=tmp_path, max_examples=2000, seed=12)
    assert r.ok, [f.verdict.violation.explanation for f in r.findings]
    assert r.stats["examples"] == 2000 and r.stats["modelRequests"] > 16000 and r.stats["executionsObserved"] > 5000
    assert json.loads((tmp_path / "campaign.json").read_text())["coverage"]["missing"] == []
    print(f"\n2000-example loop campaign, correct Python example: {time.perf_counter() - t0:.1f} s, {r.stats}")


LOOP_BUGS = {
    "rounds-off-by-one": "R19",
    "shows-all-results": "R18",
    "coverage-lies": "R22",
    "retry-extra": "R23",
    "tool-budget-ignored": "R19",
    "error-result-throws": "R20",
    "requests-skip-replays": "R19",
    "replay-reexecutes": "R6",
}


@pytest.mark.slow
@pytest.mark.parametrize("bug", sorted(LOOP_BUGS))
def test_every_loop_bug_is_caught_and_shrunk(bug: str, tmp_path: Path) -> None:
    r = campaign(example_cmd(bug), out=tmp_path, max_examples=200, seed=20240602)  # the default options
    rules = {f.rule for f in r.findings}
    assert LOOP_BUGS[bug] in rules, f"{bug}: found {sorted(rules)}"
    for f in r.findings:
        assert f.calls <= 4, f"{bug}: {f.rule} counterexample has {f.calls} calls"
        assert f.reproduced is True


def test_cli_fuzz_loop_mode_and_replay(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o"
    assert main(["fuzz", "--mode", "loop", "--impl", example_cmd("coverage-lies"), "--max-examples", "80",
                 "--seed", "1", "--out", str(out), "--quiet", "--shrink-time", "5"]) == 1
    assert "R22" in capsys.readouterr().out
    assert main(["replay", str(case_path(out, "R22")), "--impl", example_cmd("coverage-lies")]) == 1
    assert main(["replay", str(case_path(out, "R22")), "--impl", example_cmd()]) == 0
