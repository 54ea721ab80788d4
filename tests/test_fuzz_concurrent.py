"""The fuzzer's concurrent side (issue 16; spec/PROTOCOL.md section 7, SPEC.md section 5).

Protocol v1.1: the harness holds every ``tool.execute`` answer of a concurrent step and releases one
at each ``tool.waiting``, the one the step's schedule picks (C3, C4); ``$/cancelRequest`` cancels
(C5). Each classic race of examples/python/executor.py's concurrent mode is shown on a fixed minimal
step whose schedule exposes it (the rule it breaks named by the judge), the correct concurrent
executor passes the same steps, and one campaign finds, shrinks and replays a race with its schedule.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from loopspec.fuzz._adapter import ImplFactory
from loopspec.fuzz._campaign import Campaign
from loopspec.fuzz._generate import Generator, all_orders, matches, predict
from loopspec.fuzz._harness import chooser, realized_schedule, run_step
from loopspec.fuzz._model import load_case
from loopspec.fuzz._reduce import step_candidates
from loopspec.judge.trace import judge
from tests.fuzz_helpers import EXAMPLE, case_path, schema_validator

Json = Any
OPEN = {"type": "object", "properties": {}}


def cmd(bug: str | None = None) -> str:
    return f"{sys.executable} {EXAMPLE} --concurrent" + (f" --bug {bug}" if bug else "")


def cstep(n: int = 2, *, budget: int = 5, mode: str = "continue", script: list[Json] | None = None,
          schedule: Json = None, ids: list[str] | None = None, limit: int = 2) -> dict[str, Json]:
    ids = ids or [f"c{i + 1}" for i in range(n)]
    return {
        "kind": "batch",
        "config": {"tools": [{"name": "lookup", "inputSchema": OPEN, "annotations": {"readOnlyHint": True}},
                             {"name": "write", "inputSchema": OPEN}],
                   "budget": budget, "mode": mode, "principal": "alice",
                   "concurrency": {"maxConcurrency": limit, "overlap": "read-only"}},
        "calls": [{"id": cid, "name": "lookup", "arguments": {}} for cid in ids],
        "script": script or [],
        "schedule": schedule if schedule is not None else [],
    }


FAIL = {"fail": "INTERNAL_ERROR"}
#: bug -> (the step whose schedule exposes it, the rule named: SPEC.md section 5)
RACES: dict[str, tuple[dict[str, Json], str]] = {
    # R31: two take-ups both pass the budget check before either charges it
    "conc-budget-check-then-act": (cstep(2, budget=1), "R31"),
    # R32: the second result is released first; answers must stay in request order
    "conc-completion-order": (cstep(2, schedule=[1]), "R32"),
    # R32: the second call fails first; the first call's answer must not be lost
    "conc-sibling-failure-drops": (cstep(2, script=[{"value": 1}, FAIL], schedule=[1]), "R32"),
    # R33: the same id again while its execution runs waits for it (then replays)
    "conc-inflight-replay": (cstep(ids=["c1", "c1"]), "R33"),
    # R34: the later request fails first in time; the abort point is the earlier request's answer
    "conc-abort-first-in-time": (cstep(2, mode="abort", script=[{"value": 1}, FAIL], schedule=[1]), "R34"),
    # R35: request 0 fails (abort); request 1 still running must be cancelled
    "conc-no-cancel": (cstep(2, mode="abort", script=[FAIL]), "R35"),
}


@pytest.fixture(scope="module")
def live() -> Any:
    """One process per executor variant (each step starts fresh by the protocol)."""
    factories: dict[str | None, ImplFactory] = {}
    impls: dict[str | None, Any] = {}

    def get(bug: str | None) -> Any:
        if bug not in impls:
            factories[bug] = ImplFactory(cmd(bug), timeout=10.0, warm=False)
            impls[bug] = factories[bug].open("batch")
        return impls[bug]

    yield get
    for f in factories.values():
        f.close()


@pytest.mark.parametrize("bug", sorted(RACES))
def test_each_race_is_caught_by_its_rule_with_its_schedule(bug: str, live: Any) -> None:
    st, rule = RACES[bug]
    trace = run_step(live(bug), st)
    v = judge(trace)
    assert not v.ok and v.violation is not None
    assert v.violation.rule == rule, (bug, v.violation.rule, v.violation.explanation)
    assert "Let the harness release the tool answers in the order" in v.violation.explanation
    then = v.violation.explanation[v.violation.explanation.index("\nThen "):]
    cited = set(re.findall(r"\bR\d+\b", then))
    assert not cited or rule in cited, (rule, then)  # the "Then" sentence cites the rule the verdict names
    assert not cited & {"R9", "R11", "R13", "R14"} - {rule}, (rule, then)  # not the sequential form it renames
    schema_validator("trace.schema.json").validate(trace)


@pytest.mark.parametrize("bug", sorted(RACES))
def test_the_correct_concurrent_executor_passes_the_same_step(bug: str, live: Any) -> None:
    st, _ = RACES[bug]
    trace = run_step(live(None), st)
    assert judge(trace).ok, judge(trace).violation
    assert matches(trace, predict(st))  # the prediction's fast path sees the same releases and cancellations


def test_releases_follow_the_schedule_and_abandoned_executions_are_cancelled(live: Any) -> None:
    """C3-C5: with schedule [1] the second execution's answer goes out first; in abort mode the
    execution after the abort point is cancelled ($/cancelRequest) and still counts (R12, R35)."""
    trace = run_step(live(None), cstep(3, schedule=[1, 1], limit=3))
    rel = [(e["execution"], e["choice"], e["of"]) for e in trace["events"] if e["type"] == "release"]
    assert rel == [(2, 1, 3), (3, 1, 2), (1, 0, 1)]
    assert [a["id"] for a in trace["events"][-1]["result"]["results"]] == ["c1", "c2", "c3"]
    trace = run_step(live(None), RACES["conc-no-cancel"][0])
    kinds = [e["type"] for e in trace["events"]]
    assert kinds == ["execute", "execute", "release", "cancel", "response"]
    assert trace["events"][-1]["result"] == {"results": [], "executed": 2, "aborted": {"index": 0,
                                                                                      "code": "INTERNAL_ERROR"}}


def test_a_sequential_step_stays_v1_for_a_concurrent_executor(live: Any) -> None:
    st = cstep(2)
    del st["config"]["concurrency"]
    trace = run_step(live(None), st)
    assert judge(trace).ok and not any(e["type"] == "release" for e in trace["events"])


def test_chooser_lists_are_taken_mod_the_held_and_pct_is_deterministic() -> None:
    c = chooser([5, 1])
    assert [c(0, [1, 2]), c(1, [1, 2, 3]), c(2, [4, 7])] == [1, 1, 0]  # 5 mod 2; 1; past the end: 0
    runs = []
    for _ in range(2):
        p = chooser({"pct": 7, "depth": 2})
        runs.append([p(j, list(range(j + 1, j + 4))) for j in range(6)])
    assert runs[0] == runs[1] and all(0 <= x < 3 for x in runs[0])
    # over many seeds PCT picks every position of a held list at the first release
    assert {chooser({"pct": s, "depth": 1})(1, [1, 2, 3]) for s in range(40)} == {0, 1, 2}
    assert realized_schedule({"events": [{"type": "release", "choice": 2}, {"type": "release", "choice": 0}]}) == [2]


def test_generator_makes_concurrent_steps_only_when_asked() -> None:
    seq = Generator("batch", seed=1)
    assert not any("concurrency" in p.step["config"] for i in range(20) for p in seq.example(i)[0])
    conc = Generator("batch", seed=1, concurrency=True)
    steps = [p for i in range(20) for p in conc.example(i)[0]]
    concurrent = [p for p in steps if "concurrency" in p.step["config"]]
    assert len(concurrent) > len(steps) // 2
    assert any(isinstance(p.step["schedule"], dict) for p in concurrent)  # PCT for larger proposals
    assert any(p.prediction and p.prediction.releases and len(p.prediction.releases) > 1 for p in concurrent)


def test_a_campaign_finds_shrinks_and_replays_a_race_with_its_schedule(tmp_path: Path) -> None:
    factory = ImplFactory(cmd("conc-completion-order"), timeout=10.0)
    try:
        factory.release(factory.open("batch"))
        r = Campaign(factory, out=tmp_path, max_examples=60, seed=1, shrink_seconds=10.0).run()
    finally:
        factory.close()
    rules = {f.rule for f in r.findings}
    assert "R32" in rules, rules
    case = load_case(case_path(tmp_path, "R32"))
    schema_validator("fuzz-case.schema.json").validate(json.loads(case_path(tmp_path, "R32").read_text()))
    failing = case["steps"][-1]
    assert isinstance(failing["schedule"], list) and len(failing["calls"]) <= 3
    text = case_path(tmp_path, "R32", ".txt").read_text()
    assert "Let the harness release the tool answers in the order" in text
    # the expected path (loopspec diagram --trace) is the engine's concurrent run: where it waits (T30)
    # and lands the released results (T33)
    path = json.loads(case_path(tmp_path, "R32", ".path.json").read_text())["path"]
    assert {"T31", "T30", "T33"} <= set(path), path
    from loopspec.cli import main

    assert main(["replay", str(case_path(tmp_path, "R32")), "--impl", cmd("conc-completion-order")]) == 1
    assert main(["replay", str(case_path(tmp_path, "R32")), "--impl", cmd()]) == 0


def test_the_correct_concurrent_executor_passes_a_campaign() -> None:
    factory = ImplFactory(cmd(), timeout=10.0)
    try:
        factory.release(factory.open("batch"))
        c = Campaign(factory, max_examples=80, seed=5)
        assert c.settings.concurrency
        r = c.run()
    finally:
        factory.close()
    assert r.ok, [(f.rule, f.verdict.violation.explanation) for f in r.findings]
    # section 5's transitions are reachable and taken: waiting (T30), running on (T31), landing (T33)
    assert {"T30", "T31", "T33"} <= set(r.coverage["reachable"]) and r.coverage["missing"] == []
    assert all(r.coverage["transitions"][t] > 0 for t in ("T30", "T31", "T33"))
    assert set(r.coverage["unreachable"]) >= {"T29", "T32"} and "T30" not in r.coverage["unreachable"]


def test_all_orders_of_a_small_step_are_enumerated() -> None:
    """C4: three overlapping lookups have 3! completion orders with three slots, 2 x 2 with two."""
    orders = all_orders(cstep(3, limit=3))
    assert len(orders) == 6
    assert len({tuple(k for k, _, _ in p.releases or ()) for _, p in orders}) == 6
    assert orders[0][0] == []  # start order first
    assert len(all_orders(cstep(3, limit=2))) == 4
    assert all(p.response["results"] == orders[0][1].response["results"] for _, p in orders)  # R32


def test_reduction_shrinks_the_schedule_towards_start_order() -> None:
    st = cstep(3, schedule=[2, 1], limit=4)
    cands = step_candidates(st)
    assert {"schedule": [2]}.items() <= next(c for c in cands if c["schedule"] == [2]).items()
    assert any(c["schedule"] == [0, 1] for c in cands) and any(c["schedule"] == [2, 0] for c in cands)
    assert any(c["config"]["concurrency"]["maxConcurrency"] == 3 for c in cands)


def _engine_run(st: dict[str, Json]) -> Any:
    """The reference engine on a concurrent step: tool outcomes from its script in start order, the
    completion order from its schedule (a ScriptedBackground), results only when the run waits."""
    from loopspec.engine.base import ToolFailure
    from loopspec.engine.reference import Tool, run_batch

    script = st["script"]
    k = 0

    def fn(name: str) -> Json:
        nonlocal k
        k += 1
        if k <= len(script):
            if "fail" in script[k - 1]:
                raise ToolFailure(script[k - 1]["fail"])
            return script[k - 1].get("value")
        return {"tool": name, "execution": k}

    tools = [Tool.define(t["name"], lambda a, c, n=t["name"]: fn(n), t["inputSchema"], annotations=t["annotations"])
             for t in st["config"]["tools"]]
    choose = chooser(st["schedule"])
    j = 0

    def schedule(pending: tuple[int, ...], must: bool) -> int | None:
        nonlocal j
        if not must:
            return None
        j += 1
        return pending[choose(j - 1, list(range(len(pending))))]

    conc = st["config"]["concurrency"]
    return run_batch(st["calls"], tools=tools, budget=st["config"]["budget"], mode=st["config"]["mode"],
                     principal=st["config"]["principal"], max_concurrency=conc["maxConcurrency"],
                     overlap=conc["overlap"], schedule=schedule)


def test_the_prediction_is_the_engines_scripted_schedule() -> None:
    """The harness's reference for a concurrent step (core.drive landing the schedule's choice at
    each wait) is the reference engine's run with a ScriptedBackground making the same choices:
    same executions in start order, answers, executed count and abort point, for every completion
    order of 150 generated concurrent steps."""
    from loopspec.judge.batch import wire_answer

    gen = Generator("batch", seed=11, concurrency=True)
    compared = 0
    for i in range(40):
        for pl in gen.example(i)[0]:
            st = pl.step
            if "concurrency" not in st["config"] or not isinstance(st.get("schedule"), list) or compared >= 150:
                continue
            p = predict(st)
            out = _engine_run(st)
            assert p.state is not None
            assert list(out.executions) == [e.request for e in sorted(p.state.executions, key=lambda e: e.ordinal)]
            assert [wire_answer(a) for a in out.answers] == p.response["results"]
            assert out.executed == p.response["executed"]
            want = p.response["aborted"]
            assert out.aborted == (None if want is None else (want["index"], want["code"]))
            compared += 1
    assert compared >= 100


def test_a_concurrent_step_for_a_v1_implementation_is_a_P6_at_once() -> None:
    """C1: replaying a concurrent case against an implementation without the capability does not
    wait for the step's timeout."""
    factory = ImplFactory(f"{sys.executable} {EXAMPLE}", timeout=10.0, warm=False)
    try:
        trace = run_step(factory.open("batch"), cstep(2))
    finally:
        factory.close()
    assert trace["events"][-1]["code"] == "P6" and "concurrency" in trace["events"][-1]["detail"]
    assert judge(trace).violation.rule == "P6"


def test_idle_notifications_are_bounded() -> None:
    """C3/C5: tool.waiting with nothing held and cancellations of unknown requests change nothing,
    and past the notification limit they are a P4 finding (a flood), never a hang or a crash."""
    from loopspec.fuzz._harness import _ConcurrentRecorder
    from loopspec.protocol.rpc import MAX_UNSOLICITED, ProtocolFailure

    rec = _ConcurrentRecorder(cstep(2), "batch.run")
    for n in range(MAX_UNSOLICITED):
        rec.notification("tool.waiting" if n % 2 else "$/cancelRequest", {"id": n})
    assert rec.events == []
    with pytest.raises(ProtocolFailure) as exc:
        rec.notification("tool.waiting", {})
    assert exc.value.code == "P4" and exc.value.kind == "unsolicited-traffic"


@pytest.mark.slow
@pytest.mark.parametrize("bug", sorted(RACES))
def test_every_race_is_caught_by_a_campaign_and_shrunk_with_its_schedule(bug: str, tmp_path: Path) -> None:
    """The Done-when of issue 16 for the fuzzer: each race of the example's concurrent mode is found
    by a default-seeded campaign, shrunk to at most 3 calls, reproduced in a fresh process, and its
    case holds the schedule that exposes it."""
    factory = ImplFactory(cmd(bug), timeout=10.0)
    try:
        factory.release(factory.open("batch"))
        r = Campaign(factory, out=tmp_path, max_examples=100, seed=1, shrink_seconds=10.0).run()
    finally:
        factory.close()
    rule = RACES[bug][1]
    found = {f.rule: f for f in r.findings}
    assert rule in found, f"{bug}: found {sorted(found)}"
    f = found[rule]
    assert f.calls <= 3 and f.reproduced is True
    case = load_case(tmp_path / f"{f.cause}.json")
    assert isinstance(case["steps"][-1]["schedule"], list)
    assert "Let the harness release the tool answers" in (tmp_path / f"{f.cause}.txt").read_text()


def test_an_in_process_implementation_gets_no_concurrent_steps() -> None:
    """The in-process Executor API answers each execute() at once (v1): a campaign against one that
    claims the capability stays sequential, and a concurrent step for it is a P6 at once."""
    from loopspec.fuzz._adapter import InProcessImpl
    from loopspec.protocol.executor import ReferenceExecutor

    class Claims(ReferenceExecutor):
        def capabilities(self) -> dict[str, bool]:
            return {**super().capabilities(), "concurrency": True}

    factory = ImplFactory(Claims)
    try:
        factory.release(factory.open("batch"))
        assert not Campaign(factory, max_examples=1, seed=1).settings.concurrency
    finally:
        factory.close()
    trace = run_step(InProcessImpl(Claims()), cstep(2))
    assert trace["events"][-1]["code"] == "P6"
