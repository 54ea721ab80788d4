"""loopspec fuzz in batch mode: correct implementations pass, every buggy one is caught and shrunk,
a badly behaved process is a finding (not a fuzzer crash), cases replay, files are on disk."""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import jsonschema
import pytest

from loopspec import ToolFailure
from loopspec.cli import main
from loopspec.fuzz import Executor, fuzz, replay
from loopspec.fuzz._adapter import ImplFactory
from loopspec.fuzz._campaign import Campaign
from loopspec.fuzz._model import load_case
from loopspec.protocol.executor import ReferenceExecutor
from loopspec.spec.loader import load_spec
from tests.fuzz_helpers import ROOT, case_path, example_cmd, schema_validator

SERVE = [sys.executable, "-m", "loopspec", "serve"]


def campaign(target: object, out: Path | None = None, **kw: object) -> object:
    factory = ImplFactory(target, timeout=kw.pop("timeout", 5.0))  # type: ignore[arg-type]
    try:
        return Campaign(factory, out=out, **kw).run()  # type: ignore[arg-type]
    finally:
        factory.close()


# --------------------------------------------------------------------------------------------
# Correct implementations find nothing
# --------------------------------------------------------------------------------------------


def test_reference_engine_in_process_has_no_divergence() -> None:
    r = campaign(ReferenceExecutor, max_examples=60, seed=3)
    assert r.ok, [f.verdict.violation.explanation for f in r.findings]
    assert r.stats["steps"] > 60


def test_loopspec_serve_process_has_no_divergence(tmp_path: Path) -> None:
    r = campaign(SERVE, out=tmp_path, max_examples=15, seed=4)
    assert r.ok, [f.verdict.violation.explanation for f in r.findings]
    summary = json.loads((tmp_path / "campaign.json").read_text())
    assert summary["ok"] is True and summary["findings"] == []


@pytest.mark.slow
def test_correct_python_example_passes_2000_examples(tmp_path: Path) -> None:
    t0 = time.perf_counter()
    r = campaign(example_cmd(), out=tmp_path, max_examples=2000, seed=11)
    assert r.ok, [f.verdict.violation.explanation for f in r.findings]
    assert r.stats["examples"] == 2000 and r.stats["steps"] == 16000 and r.stats["executionsObserved"] > 5000
    assert json.loads((tmp_path / "campaign.json").read_text())["coverage"]["missing"] == []
    print(f"\n2000-example campaign, correct Python example: {time.perf_counter() - t0:.1f} s, {r.stats}")


# --------------------------------------------------------------------------------------------
# Every buggy variant is caught, with a shrunk counterexample of at most 4 calls
# --------------------------------------------------------------------------------------------

BUGS = {  # bug -> the rule the fuzzer must report (others may be reported too)
    "budget-after": "R9",
    "conflict-reuse": "R7",
    "cache-by-args": "R8",
    "replay-reexecutes": "R6",
    "reorder-results": "R11",
    "unknown-tool-executed": "R3",
    "principal-from-args": "R16",
    "abort-loses-results": "R13",
    "miscount": "R12",
    "leaky-errors": "R15",
    "cached-failure": "R10",
    "raw-content": "R6",
    "state-leak": "R5",
    "lax-integer": "R4",
    "check-order": "R4",
    "continue-aborts": "R14",
    "drop-last": "R11",
    "leak-request-id": "R15",
}


@pytest.mark.slow
@pytest.mark.parametrize("bug", sorted(BUGS))
def test_every_buggy_variant_is_caught_and_shrunk(bug: str, tmp_path: Path) -> None:
    r = campaign(example_cmd(bug), out=tmp_path, max_examples=200, seed=20240601)  # the default options
    rules = {f.rule: f for f in r.findings}
    assert BUGS[bug] in rules, f"{bug}: found {sorted(rules)}"
    for f in r.findings:
        assert f.calls <= 4, f"{bug}: {f.rule} counterexample has {f.calls} calls"
        assert f.reproduced is True
        case = load_case(tmp_path / f"{f.cause}.json")
        assert case["provisional"] is False and case["verdict"]["violation"]["rule"] == f.rule
        assert (tmp_path / f"{f.cause}.txt").read_text().startswith(f"loopspec fuzz: divergence {f.rule}")


def test_in_process_buggy_executor_is_caught(tmp_path: Path) -> None:
    """An in-process adapter (the Python API a project uses to fuzz its own executor)."""

    class BudgetAfter(Executor):
        def batch_run(self, params: dict, execute: object) -> dict:
            results, executed = [], 0
            for c in params["calls"]:
                try:
                    out = execute(c["id"], c["name"], c["arguments"], params["principal"])  # type: ignore[operator]
                    executed += 1
                    if executed > params["budget"]:
                        results.append({"id": c["id"], "status": "error", "code": "BUDGET_EXHAUSTED"})
                    else:
                        results.append({"id": c["id"], "status": "ok", "output": out})
                except ToolFailure as f:
                    executed += 1
                    results.append({"id": c["id"], "status": "error", "code": f.category})
                except (KeyError, TypeError):
                    results.append({"id": None, "status": "error", "code": "INVALID_CALL"})
            return {"results": results, "executed": executed, "aborted": None}

    r = fuzz(BudgetAfter, max_examples=100, seed=5, out=tmp_path, shrink_seconds=5.0)
    assert not r.ok
    assert all(f.calls <= 4 for f in r.findings)


# --------------------------------------------------------------------------------------------
# A badly behaved process is a finding with evidence; the campaign ends cleanly
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("bug", "code"), [("crash", "P1"), ("garbage", "P3"), ("wrong-id", "P4")])
def test_protocol_misbehaviour_is_a_finding(bug: str, code: str, tmp_path: Path) -> None:
    r = campaign(example_cmd(bug), out=tmp_path, max_examples=150, seed=7, shrink_seconds=5.0)
    assert code in {f.rule for f in r.findings}, [(f.rule, f.kind) for f in r.findings]
    f = next(f for f in r.findings if f.rule == code)
    assert f.calls <= 4
    detail = f.verdict.violation.observed["detail"]
    if bug == "crash":
        assert "exit status 3" in detail and "simulated crash" in detail  # evidence: status and stderr tail
    assert json.loads((tmp_path / "campaign.json").read_text())["ok"] is False


def test_a_hang_is_a_P2_finding_within_the_time_budget(tmp_path: Path) -> None:
    t0 = time.perf_counter()
    r = campaign(example_cmd("hang"), out=tmp_path, max_examples=100, seed=8, timeout=1.0, shrink_seconds=3.0)
    assert "P2" in {f.rule for f in r.findings}
    assert time.perf_counter() - t0 < 90
    assert case_path(tmp_path, "P2").is_file()
    detail = next(f for f in r.findings if f.rule == "P2").verdict.violation.observed["detail"]
    assert "no answer to batch.run" in detail and "of sending it" in detail, detail  # a deadline, not silence
    if _PROC:  # what it did meanwhile: the example sleeps (PROTOCOL.md, P2)
        assert re.search(r"in those [\d.]+ s it sent 0 request\(s\) and used [\d.]+ s of CPU: idle", detail), detail
    # the busy-pipe variants (blank lines, notifications, endless requests) are in tests/hostile


_PROC = Path("/proc/self/stat").is_file()  # where a process's CPU time can be read (Linux)

_SPIN = """
import json, sys, time
sys.stdin.readline()  # a first request, answered once the process is up (its start-up is not the wait's)
print(json.dumps({"jsonrpc": "2.0", "id": 1, "result": None}), flush=True)
sys.stdin.readline()  # the request it does not answer
if sys.argv[1] == "ask":  # one request of its own first (a tool.execute the harness answers)
    print(json.dumps({"jsonrpc": "2.0", "id": "x", "method": "tool.execute", "params": {}}), flush=True)
    sys.stdin.readline()
if sys.argv[1] == "sleep":
    time.sleep(60)
t = time.monotonic()
while time.monotonic() - t < 60:
    pass
"""


@pytest.mark.skipif(not _PROC, reason="the CPU time of a process is read from /proc")
@pytest.mark.parametrize(("behaviour", "requests", "verdict"),
                         [("spin", 0, "busy, it computes without answering (and without asking anything)"),
                          ("ask", 1, "busy, it computes without answering"),
                          ("sleep", 0, "idle, it waits for something that does not come")])
def test_a_P2_says_what_the_process_did_while_it_was_waited_for(behaviour: str, requests: int, verdict: str) -> None:
    import subprocess

    from loopspec.fuzz._adapter import ProcessImpl
    from loopspec.protocol.rpc import ProtocolFailure

    proc = subprocess.Popen([sys.executable, "-c", _SPIN, behaviour], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, bufsize=0)
    impl = ProcessImpl(proc, 1.5, None)
    try:
        assert impl.call("ping", {}, lambda method, params: None) is None
        with pytest.raises(ProtocolFailure) as info:
            impl.call("batch.run", {}, lambda method, params: {"status": "ok"})
    finally:
        proc.kill()
        proc.wait()
    assert info.value.code == "P2"
    m = re.search(r"; in those ([\d.]+) s it sent (\d+) request\(s\)(?:, the last [\d.]+ s in)? and used ([\d.]+) s "
                  r"of CPU: (.*)$",
                  info.value.detail)
    assert m is not None, info.value.detail
    assert float(m.group(1)) >= 1.5 and int(m.group(2)) == requests
    assert m.group(4) == verdict, info.value.detail


def test_waited_for_names_the_share_of_a_core() -> None:
    from loopspec.protocol.rpc import waited_for

    assert waited_for(10.0, 0, None) == "in those 10.0 s it sent 0 request(s)"
    assert waited_for(10.0, 2, (6.0, None), 0.25) == ("in those 10.0 s it sent 2 request(s), the last 0.2 s in and used "
                                                      "6.0 s of CPU: busy, it computes without answering")
    # a loaded machine: little CPU, but runnable all along
    assert waited_for(10.0, 0, (2.0, 9.9)).endswith("2.0 s of CPU: busy, it computes without answering (and "
                                                     "without asking anything)")
    assert waited_for(10.0, 0, (0.3, 0.4)).endswith("0.3 s of CPU: idle, it waits for something that does not come")
    assert waited_for(10.0, 0, (2.0, 2.5)) == "in those 10.0 s it sent 0 request(s) and used 2.0 s of CPU"


# --------------------------------------------------------------------------------------------
# Cases: files, schema, diagram path, replay
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def conflict_case(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fuzz-conflict")
    r = campaign(example_cmd("conflict-reuse"), out=out, max_examples=100, seed=1, shrink_seconds=5.0)
    assert "R7" in {f.rule for f in r.findings}
    return out


def test_case_file_validates_against_its_schema(conflict_case: Path) -> None:
    schema_validator("fuzz-case.schema.json").validate(json.loads(case_path(conflict_case, "R7").read_text()))


def test_diagram_trace_is_the_expected_path_with_the_failed_transition(conflict_case: Path) -> None:
    spec = load_spec()
    dt = json.loads(case_path(conflict_case, "R7", ".path.json").read_text())
    assert {"path", "failed"} <= set(dt)
    validator = jsonschema.Draft202012Validator(
        json.loads((ROOT / "spec" / "schema" / "transition-path.schema.json").read_text()))
    validator.validate(dt)
    assert all(spec.transition(t) for t in dt["path"])
    assert dt["path"][0] == "T04"
    assert spec.transition(dt["path"][-1]).dest in {"completed", "rejected", "failed", "truncated"}
    case = load_case(case_path(conflict_case, "R7"))
    assert dt["path"][dt["failed"]] == "T12"  # the conflict's rejection, where the implementation reused
    # the judge names the decision of that request: the rejection, or in abort mode the abort it causes
    assert case["verdict"]["violation"]["transition"] in ("T12", "T24")


def test_diagram_draws_the_counterexample_path(conflict_case: Path, tmp_path: Path) -> None:
    assert main(["diagram", "--trace", str(case_path(conflict_case, "R7", ".path.json")), "--format", "mermaid",
                 "--out", str(tmp_path)]) == 0
    text = next(tmp_path.glob("*.mmd")).read_text()
    assert "T12" in text and "failing step" in text


def test_replay_reproduces_the_case_and_passes_on_a_correct_implementation(conflict_case: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    case = str(case_path(conflict_case, "R7"))
    assert main(["replay", case, "--impl", example_cmd("conflict-reuse")]) == 1
    assert "R7 conflict-reused" in capsys.readouterr().out
    assert main(["replay", case, "--impl", example_cmd()]) == 0
    rr = replay(case, ReferenceExecutor)
    assert rr.ok


def test_cli_fuzz_exit_codes_and_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o"
    code = main(["fuzz", "--impl", example_cmd("leaky-errors"), "--max-examples", "60", "--seed", "2",
                 "--out", str(out), "--quiet", "--shrink-time", "5"])
    assert code == 1
    text = capsys.readouterr().out
    assert "R15" in text and str(case_path(out, "R15", ".txt")) in text
    assert json.loads((out / "campaign.json").read_text())["findings"][0]["rule"] == "R15"
    assert main(["fuzz", "--impl", example_cmd(), "--max-examples", "20", "--seed", "2", "--out", str(out),
                 "--quiet"]) == 0


@pytest.mark.parametrize("argv", [
    ["fuzz", "--impl", "/nonexistent/executor"],
    ["fuzz", "--impl", f"{sys.executable} -c 'import sys; sys.exit(4)'"],
    ["fuzz", "--impl", f"{sys.executable} -c 'print(42)'", "--timeout", "2"],
    ["fuzz", "--impl", "'unbalanced"],
    ["replay", "/nonexistent/case.json", "--impl", "true"],
])
def test_cli_usage_errors_exit_2_without_traceback(argv: list[str], tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*argv, *(["--out", str(tmp_path)] if argv[0] == "fuzz" else [])]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1


def test_cli_replay_rejects_a_malformed_case(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "case.json"
    bad.write_text(json.dumps({"format": "loopspec-fuzz-case/1", "steps": [{"kind": "batch", "config": {}}]}))
    assert main(["replay", str(bad), "--impl", example_cmd()]) == 2
    assert "steps[0].calls" in capsys.readouterr().err


def test_protocol_messages_follow_the_published_schema() -> None:
    """Every message of a session with the reference adapter validates against adapter-protocol.schema.json."""
    from loopspec.fuzz._harness import run_step
    from loopspec.fuzz._strategies import batch_steps

    validators = {name: schema_validator("adapter-protocol.schema.json", name) for name in (
        "message", "batchRunParams", "batchRunResult", "toolExecuteParams", "toolExecuteResult", "toolExecuteError",
        "initializeResult")}
    pending: dict[object, str] = {}
    seen: set[str] = set()

    def tap(direction: str, msg: dict) -> None:
        validators["message"].validate(msg)
        if "method" in msg:
            pending[(direction, msg.get("id"))] = msg["method"]
            if msg["method"] == "batch.run":
                validators["batchRunParams"].validate(msg["params"])
            elif msg["method"] == "tool.execute":
                validators["toolExecuteParams"].validate(msg["params"])
            seen.add(msg["method"])
            return
        method = pending.pop(("in" if direction == "out" else "out", msg["id"]))
        if method == "batch.run":
            validators["batchRunResult"].validate(msg["result"])
        elif method == "tool.execute":
            validators["toolExecuteResult" if "result" in msg else "toolExecuteError"].validate(
                msg.get("result", msg.get("error")))
        elif method == "initialize":
            validators["initializeResult"].validate(msg["result"])

    factory = ImplFactory(SERVE, warm=False)
    impl = factory._new()
    impl.channel.tap = tap  # type: ignore[attr-defined]
    from hypothesis import HealthCheck, given, settings

    impl.call("initialize", {"protocolVersion": 1}, lambda m, p: None)

    @settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(batch_steps())
    def check(st: dict) -> None:
        run_step(impl, st)

    try:
        check()
    finally:
        factory.release(impl)
        factory.close()
    assert {"initialize", "batch.run", "tool.execute"} <= seen
