"""The Java 17 example executor (examples/java) passes fuzz campaigns in batch, loop and writes mode,
and its deliberate bugs are found by the rules they break.

Compiled with the javac on PATH; skipped when there is none.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from loopspec.fuzz import replay
from loopspec.fuzz._adapter import ImplFactory
from loopspec.fuzz._campaign import Campaign
from tests.fuzz_helpers import ROOT

JAVA_SOURCE = ROOT / "examples" / "java" / "LoopspecExecutor.java"

pytestmark = [pytest.mark.skipif(shutil.which("javac") is None or shutil.which("java") is None,
                                 reason="javac/java not on PATH"),
              pytest.mark.xdist_group("java")]  # one worker compiles the executor once (pytest-xdist)


@pytest.fixture(scope="module")
def java_cmd(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    build = tmp_path_factory.mktemp("java-build")
    done = subprocess.run(["javac", "--release", "17", "-d", str(build), str(JAVA_SOURCE)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return ["java", "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-cp", str(build), "LoopspecExecutor"]


def run(cmd: list[str], mode: str, n: int, isolation: str, out: Path | None = None) -> object:
    factory = ImplFactory(cmd, timeout=20.0)
    try:
        return Campaign(factory, mode=mode, max_examples=n, seed=17, isolation=isolation, out=out).run()
    finally:
        factory.close()


@pytest.mark.parametrize("mode", ["batch", "loop"])
def test_java_executor_short_campaign_fresh_process_per_example(java_cmd: list[str], mode: str) -> None:
    r = run(java_cmd, mode, 8, "example")
    assert r.ok, [f.verdict.violation.explanation for f in r.findings]
    assert r.stats["examples"] >= 8 and r.stats["steps"] >= 8 and r.stats["executionsObserved"] > 0, r.stats
    assert r.stats["processesStarted"] >= 8  # a fresh JVM per example, as asked


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["batch", "loop"])
def test_java_executor_passes_2000_examples(java_cmd: list[str], mode: str, tmp_path: Path) -> None:
    """One JVM for the campaign (--isolation campaign): a JVM start per example would dominate."""
    t0 = time.perf_counter()
    r = run(java_cmd, mode, 2000, "campaign", tmp_path)
    assert r.ok, [f.verdict.violation.explanation for f in r.findings]
    assert r.stats["examples"] == 2000 and r.stats["executionsObserved"] > 5000
    assert r.stats["processesStarted"] <= 3  # the probe's, its warm spare, the campaign's
    print(f"\n2000-example {mode} campaign, Java example: {time.perf_counter() - t0:.1f} s, {r.stats}")


JAVA_BUGS = {"replay-reexecutes": "R6", "conflict-reuse": "R7", "budget-after": "R9"}


@pytest.mark.slow
@pytest.mark.parametrize("bug", sorted(JAVA_BUGS))
def test_java_buggy_variants_are_caught_and_reduced(java_cmd: list[str], bug: str, tmp_path: Path) -> None:
    r = run([*java_cmd, "--bug", bug], "batch", 200, "campaign", tmp_path)
    rules = {f.rule for f in r.findings}
    assert JAVA_BUGS[bug] in rules, f"{bug}: found {sorted(rules)}"
    assert all(f.calls <= 4 and f.reproduced for f in r.findings), [(f.rule, f.calls) for f in r.findings]


def test_java_concurrent_executor_on_a_thread_pool_passes(java_cmd: list[str]) -> None:
    """--concurrent (protocol v1.1): the thread-pool executor answers each race step of
    tests/test_fuzz_concurrent.py exactly as predicted (releases and cancellations included,
    R31-R35), and a short concurrent campaign finds nothing."""
    from loopspec.fuzz._generate import matches, predict
    from loopspec.fuzz._harness import run_step
    from loopspec.judge.trace import judge
    from tests.test_fuzz_concurrent import RACES

    factory = ImplFactory([*java_cmd, "--concurrent"], timeout=20.0, warm=False)
    try:
        impl = factory.open("batch")
        for bug, (st, _) in RACES.items():
            trace = run_step(impl, st)
            assert judge(trace).ok and matches(trace, predict(st)), (bug, judge(trace).violation)
        factory.release(impl)
        c = Campaign(factory, mode="batch", max_examples=60, seed=3)
        assert c.settings.concurrency
        r = c.run()
    finally:
        factory.close()
    assert r.ok, [f.verdict.violation.explanation for f in r.findings]


# --------------------------------------------------------------------------------------------
# Write tools (protocol v1.2, PROTOCOL.md section 8): the Java ledger is a fsync'ed JSON-lines journal
# --------------------------------------------------------------------------------------------


def test_java_writes_steps_catch_each_broken_variant_by_its_rule(java_cmd: list[str]) -> None:
    """Each --bug of the write tools breaks the fixed minimal step of tests/test_fuzz_writes.py with the
    rule it breaks (R37, R43, R39, R42, and R43 resent-after-cut-lookup for failed-before-lookup); the
    correct Java executor passes the same steps, and a restart (the process killed at the send) is
    recovered from the journal by a lookup, one effect."""
    from loopspec.fuzz._writes_harness import run_writes_step
    from loopspec.judge.trace import judge
    from tests.test_fuzz_writes import ALL_BUGS, STEPS, wstep

    def step(cmd: list[str], st: dict[str, object]) -> dict[str, object]:
        factory = ImplFactory(cmd, timeout=20.0)
        try:
            trace, after = run_writes_step(factory.open("writes"), st, lambda: factory.open("writes"), factory.release)
            if after is not None:
                factory.release(after)
            return trace
        finally:
            factory.close()

    for bug, rule in ALL_BUGS.items():
        v = judge(step([*java_cmd, "--bug", bug], STEPS[bug])).violation
        assert v is not None and v.rule == rule, (bug, v)
        assert judge(step(java_cmd, STEPS[bug])).ok, bug
    # R43/R46 (PROTOCOL.md W3): killed at the send, then at the recovery's lookup: the next JVM asks again
    cut = step(java_cmd, STEPS["failed-before-lookup"])
    assert [e["type"] for e in cut["events"]] == ["execute", "restart", "lookup", "restart", "lookup", "response"]
    assert judge(cut).ok, judge(cut).violation
    # ... where --bug failed-before-lookup had journalled the key failed before the cut lookup: the third JVM
    # sends it again without asking (W4: a re-send after a cut lookup, not R39's after a cut send)
    bad = step([*java_cmd, "--bug", "failed-before-lookup"], STEPS["failed-before-lookup"])
    assert [e["type"] for e in bad["events"]] == ["execute", "restart", "lookup", "restart", "execute", "response"]
    v = judge(bad).violation
    assert v is not None and (v.rule, v.kind, v.index) == ("R43", "resent-after-cut-lookup", 0), v
    # without the crash the lookup answers and overwrites the early 'failed': the bug is only the crash's
    assert judge(step([*java_cmd, "--bug", "failed-before-lookup"], {**STEPS["failed-before-lookup"], "crashes": []})).ok
    trace = step(java_cmd, wstep(["A", "A"], [{"restart": "applied"}]))
    assert [e["type"] for e in trace["events"]] == ["execute", "restart", "lookup", "response"], trace["events"]
    res = trace["events"][-1]["result"]
    assert [a["status"] for a in res["results"]] == ["ok", "ok"] and res["status"] == "COMPLETED"
    assert judge(trace).ok


def test_java_writes_campaign_finds_nothing_against_the_correct_executor(java_cmd: list[str], tmp_path: Path) -> None:
    r = run(java_cmd, "writes", 50, "campaign", tmp_path)
    assert r.ok, [f.verdict.violation.explanation for f in r.findings]
    assert r.stats["examples"] >= 50 and r.stats["executionsObserved"] > 30, r.stats


JAVA_WRITE_BUGS = {"key-by-call-id": "R37", "retry-without-lookup": "R43", "record-after-dispatch": "R39",
                   "timeout-as-failure": "R42", "failed-before-lookup": "R43"}


@pytest.mark.parametrize("bug", sorted(JAVA_WRITE_BUGS))
def test_java_writes_campaign_finds_and_shrinks_each_broken_variant(java_cmd: list[str], bug: str,
                                                                   tmp_path: Path) -> None:
    factory = ImplFactory([*java_cmd, "--bug", bug], timeout=20.0)
    try:
        r = Campaign(factory, mode="writes", max_examples=60, seed=1, isolation="campaign", out=tmp_path,
                     shrink_seconds=2.0).run()
    finally:
        factory.close()
    found = {f.rule: f for f in r.findings}
    assert JAVA_WRITE_BUGS[bug] in found, f"{bug}: found {sorted(found)}"
    f = found[JAVA_WRITE_BUGS[bug]]
    assert f.shrunk and f.reproduced and f.calls <= 2 and len(f.steps) == 1, (f.calls, f.steps)
    if bug == "failed-before-lookup":  # the crash at the recovery's lookup survives the reduction (W3, W5)
        assert f.verdict.violation is not None and f.verdict.violation.kind == "resent-after-cut-lookup"
        assert f.steps[0].get("crashes"), f.steps
    assert replay(tmp_path / f"{f.cause}.json", java_cmd, timeout=20.0).ok  # the correct executor passes the case


def test_java_ledger_drops_a_journal_line_cut_by_a_kill(java_cmd: list[str], tmp_path: Path) -> None:
    """R39/R46: a process killed in the middle of a journal write leaves a last line without its newline;
    the next process takes the ledger as it was before that line (the write stays dispatched, so
    unreconciled with reconcile none), truncates the cut line and appends whole lines after it."""
    import json

    from loopspec.fuzz._writes_gen import writes_tools

    state = tmp_path / "state"
    state.mkdir()
    journal = state / "ledger.jsonl"
    lines = [{"t": "new", "key": "k1", "run": "r1", "tool": "pay", "arguments": {"order": "A", "amount": 5},
              "state": "intent"}, {"t": "mark", "key": "k1", "run": "r1"}]
    cut = json.dumps({"t": "set", "key": "k1", "state": "confirmed", "result": {"note": "x" * 400}})[:-9]
    journal.write_text("".join(json.dumps(x) + "\n" for x in lines) + cut)
    params = {"tools": writes_tools({"pay": "none"}), "budget": 3, "principal": "alice", "runId": "r1",
              "stateDir": str(state), "calls": []}
    msgs = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
            {"jsonrpc": "2.0", "id": 2, "method": "writes.run", "params": params},
            {"jsonrpc": "2.0", "id": 3, "method": "shutdown"}]
    done = subprocess.run(java_cmd, input="".join(json.dumps(m) + "\n" for m in msgs), capture_output=True,
                          text=True, timeout=60)
    replies = [json.loads(x) for x in done.stdout.splitlines()]
    assert replies[0]["result"]["capabilities"]["writes"] is True, replies
    assert replies[1]["result"] == {"results": [], "status": "TRUNCATED", "stopReason": "UNRECONCILED",
                                    "unreconciled": ["k1"]}, replies[1]
    text = journal.read_text()
    assert text.endswith("\n") and cut not in text
    assert [json.loads(x)["t"] for x in text.splitlines()] == ["new", "mark", "all", "all"]


# --------------------------------------------------------------------------------------------
# An executor you cannot change (docs/adapters.md): TextTools, wrapped, fuzzed with --tools
# --------------------------------------------------------------------------------------------

WRAPPED = ROOT / "examples" / "java" / "wrapped"


@pytest.fixture(scope="module")
def text_tools(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    build = tmp_path_factory.mktemp("text-tools-build")
    done = subprocess.run(["javac", "--release", "17", "-d", str(build), *map(str, sorted(WRAPPED.glob("*.java")))],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return ["java", "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-cp", str(build), "TextToolsAdapter"]


def test_text_tools_gets_every_distinct_cause_and_only_about_what_it_declared(text_tools: list[str],
                                                                               tmp_path: Path) -> None:
    import json
    import re

    from loopspec.fuzz import fuzz

    r = fuzz(text_tools, tools=WRAPPED / "text-tools.json", seed=1, out=tmp_path, timeout=20.0)
    causes = {f.cause for f in r.findings}
    doc = (ROOT / "docs" / "adapters.md").read_text()
    block = doc.split("The report it gets", 1)[1].split("```")[1]
    documented = set(re.findall(r"^  ([PR]\d+-[a-z0-9-]+)", block, re.M))
    assert causes == documented, (sorted(causes), sorted(documented))  # the guide shows this very campaign
    assert len(causes) >= 6
    for f in r.findings:
        assert f.reproduced is True and f.calls <= 2
        for t in f.traces:  # every finding is about the declared registry: length and upper
            assert [tool["name"] for tool in t["config"]["tools"]] == ["length", "upper"]
            assert t["config"]["mode"] == "abort"
    assert not any(f.kind == "execution-missing" for f in r.findings)
    campaign = json.loads((tmp_path / "campaign.json").read_text())
    assert campaign["parameters"]["declared"]["unsupported"] == ["continue", "error-results"]
    # old cases survive a new campaign: replayed first, still failing, kept
    again = fuzz(text_tools, tools=WRAPPED / "text-tools.json", seed=2, max_examples=3, out=tmp_path, timeout=20.0)
    assert causes <= {f.cause for f in again.findings}
    assert {e["status"] for e in again.corpus} == {"still-failing"} and len(again.corpus) == len(causes)
