"""The fuzzer's write side (issue 18; spec/PROTOCOL.md section 8, SPEC.md section 6, R36–R46).

Protocol v1.2: the harness plays the external system of write tools (its own idempotency record by
the key sent), loses answers, and kills the implementation at a send and starts a new process on the
same state directory. Each broken variant of spec/writes.toml in examples/python/executor.py is
caught on a fixed minimal step by the rule it breaks, the correct executor passes the same steps, and
a campaign finds, shrinks and replays each of them and finds nothing against the correct executor.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

from loopspec.fuzz import replay
from loopspec.fuzz._adapter import ImplFactory
from loopspec.fuzz._campaign import Campaign
from loopspec.fuzz._model import Finding, _step_problem, load_case
from loopspec.fuzz._reduce import step_candidates, trim_unused
from loopspec.fuzz._writes_gen import WritesGenerator, writes_tools
from loopspec.fuzz._writes_harness import run_writes_step
from loopspec.judge.trace import judge
from loopspec.judge.verdict import TraceError
from loopspec.protocol.rpc import ProtocolFailure
from tests.fuzz_helpers import EXAMPLE, schema_validator

Json = Any

#: bug -> the rule the judge names (the broken variants of spec/writes.toml; the Java example has all five too,
#: tests/test_fuzz_java.py)
BUGS = {"key-by-call-id": "R37", "retry-without-lookup": "R43", "record-after-dispatch": "R39",
        "timeout-as-failure": "R42"}
#: ... and the variant whose recovery is not crash-safe (a crash at a lookup, PROTOCOL.md W3)
CRASH_BUGS = {"failed-before-lookup": "R43"}
ALL_BUGS = {**BUGS, **CRASH_BUGS}


def cmd(bug: str | None = None) -> str:
    return f"{sys.executable} {EXAMPLE}" + (f" --bug {bug}" if bug else "")


def wstep(values: list[str], script: list[Json], *, reconcile: str = "lookup", budget: int = 5,
          outages: list[int] | None = None, crashes: list[int] | None = None) -> dict[str, Json]:
    st = {"kind": "writes", "config": {"tools": writes_tools({"pay": reconcile}), "budget": budget, "principal": "alice"},
          "calls": [{"id": f"c{k + 1}", "name": "pay", "arguments": {"order": v, "amount": 5}}
                    for k, v in enumerate(values)],
          "script": script, "outages": outages or []}
    if crashes is not None:
        st["crashes"] = crashes
    return st


#: a minimal step that exposes each bug
STEPS = {
    "key-by-call-id": wstep(["A", "A"], [{"value": 1}]),
    "retry-without-lookup": wstep(["A", "A"], [{"lose": "applied"}]),
    "record-after-dispatch": wstep(["A"], [{"restart": "applied"}]),
    "timeout-as-failure": wstep(["A"], [{"lose": "applied"}]),
    # killed at the send, then at the recovery's lookup: the next process must ask again
    "failed-before-lookup": wstep(["A"], [{"restart": "applied"}], crashes=[1]),
}


def run(bug: str | None, step: dict[str, Json]) -> dict[str, Json]:
    factory = ImplFactory(cmd(bug), timeout=10.0)
    try:
        impl = factory.open("writes")
        trace, after = run_writes_step(impl, step, lambda: factory.open("writes"), factory.release)
        if after is not None:
            factory.release(after)
        return trace
    finally:
        factory.close()


def test_the_examples_write_bugs_are_the_broken_variants_of_writes_toml() -> None:
    from loopspec.spec.writes import load_write_spec

    assert {v.id: v.fields["breaks"] for v in load_write_spec().variants} == ALL_BUGS


@pytest.mark.parametrize("bug", sorted(ALL_BUGS))
def test_each_broken_variant_is_caught_by_its_rule(bug: str) -> None:
    trace = run(bug, STEPS[bug])
    schema_validator("trace.schema.json").validate(trace)
    v = judge(trace).violation
    assert v is not None and v.rule == ALL_BUGS[bug], (v, trace["events"])
    assert v.explanation.startswith("Let a run of write tools") and "\nThen " in v.explanation
    # the correct executor passes the same step
    good = run(None, STEPS[bug])
    assert judge(good).ok, judge(good).violation


def test_a_restart_is_recovered_by_a_lookup_and_answered_from_it() -> None:
    """R39/R46: the process is killed at the send (the write applied); the new process finds the dispatch
    mark, asks the external system and answers the request with the result it recorded — one effect."""
    trace = run(None, wstep(["A", "A"], [{"restart": "applied"}]))
    kinds = [e["type"] for e in trace["events"]]
    assert kinds == ["execute", "restart", "lookup", "response"], kinds
    res = trace["events"][-1]["result"]
    assert [a["status"] for a in res["results"]] == ["ok", "ok"] and res["status"] == "COMPLETED"
    assert judge(trace).ok


@pytest.mark.parametrize(("st", "kinds"), [
    (wstep(["A"], [{"restart": "applied"}], crashes=[1]),
     ["execute", "restart", "lookup", "restart", "lookup", "response"]),
    (wstep(["A", "A"], [{"lose": "not-applied"}], crashes=[1, 2]),
     ["execute", "lookup", "restart", "lookup", "restart", "lookup", "execute", "response"]),
    (wstep(["A", "B"], [{"lose": "applied"}, {"lose": "applied"}], crashes=[1, 2, 3]),
     ["execute", "execute", "lookup", "restart", "lookup", "restart", "lookup", "restart", "lookup", "lookup",
      "response"]),
])
def test_a_lookup_cut_by_a_restart_leaves_the_key_unknown_and_is_asked_again(st: dict[str, Json],
                                                                             kinds: list[str]) -> None:
    """R43/R46 (PROTOCOL.md W3, W5): the harness kills the process at the lookups of ``crashes`` instead of
    answering; the new process's recovery asks again before anything else, and only an answered lookup
    settles the key (at most 3 restarts a step: the 4th crash is answered)."""
    trace = run(None, st)
    schema_validator("trace.schema.json").validate(trace)
    assert [e["type"] for e in trace["events"]] == kinds, trace["events"]
    cut = [e for e in trace["events"] if e["type"] == "lookup" and e["outcome"]["status"] == "restart"]
    assert len(cut) == min(len(st["crashes"]), 3) and trace["environment"]["crashes"] == st["crashes"]
    assert judge(trace).ok, judge(trace).violation
    assert sum(e["type"] == "execute" and e["outcome"]["applied"] for e in trace["events"]) <= len(set(
        c["arguments"]["order"] for c in st["calls"]))  # one effect per key


def test_a_resend_after_a_cut_lookup_is_R43_not_R39() -> None:
    """R43 (PROTOCOL.md W4): the key was cut at its send (R39's situation) and then at the recovery's lookup;
    the process that re-sends it had found the dispatch mark (it asked), so what it lost is the unanswered
    lookup: the finding is R43 resent-after-cut-lookup, with the cut lookup in the explanation. The same
    step without the crash passes (its lookup answers)."""
    st = STEPS["failed-before-lookup"]
    v = judge(run("failed-before-lookup", st)).violation
    assert v is not None and (v.rule, v.kind, v.index) == ("R43", "resent-after-cut-lookup", 0), v
    assert "no answer, the process was killed" in v.explanation and "R46" in v.explanation
    assert judge(run("failed-before-lookup", {**st, "crashes": []})).ok
    assert judge(run("failed-before-lookup", {k: x for k, x in st.items() if k != "crashes"})).ok


def test_an_older_trace_without_crashes_is_judged_as_before() -> None:
    """PROTOCOL.md W5: an absent ``crashes`` is none — a trace recorded before it keeps its verdict."""
    trace = run("retry-without-lookup", STEPS["retry-without-lookup"])
    assert "crashes" not in trace["environment"]
    v = judge(trace).violation
    assert v is not None and (v.rule, v.kind) == ("R43", "blind-redispatch")


def test_an_unavailable_lookup_leaves_the_run_unreconciled() -> None:
    """R42/R44/R46: the answer is lost, every lookup is unavailable (reconcile none): OUTCOME_UNKNOWN twice,
    nothing sent again, and the run ends TRUNCATED / UNRECONCILED with the key listed."""
    trace = run(None, wstep(["A", "A"], [{"lose": "applied"}], reconcile="none"))
    res = trace["events"][-1]["result"]
    assert [a.get("code") for a in res["results"]] == ["OUTCOME_UNKNOWN", "OUTCOME_UNKNOWN"]
    assert (res["status"], res["stopReason"], len(res["unreconciled"])) == ("TRUNCATED", "UNRECONCILED", 1)
    assert sum(e["type"] == "execute" for e in trace["events"]) == 1
    assert judge(trace).ok


def test_the_judge_names_a_wrong_end_of_run_R46() -> None:
    trace = run(None, wstep(["A"], [{"lose": "applied"}], reconcile="none"))
    trace["events"][-1]["result"].update(status="COMPLETED", stopReason=None, unreconciled=[])
    v = judge(trace).violation
    assert v is not None and (v.rule, v.kind) == ("R46", "end-of-run")


def test_an_implementation_without_the_capability_is_refused() -> None:
    """v1.0/v1.1 implementations keep working: --mode writes needs the writes capability (P6)."""
    factory = ImplFactory(f"{sys.executable} -m loopspec serve", timeout=10.0)
    try:
        with pytest.raises(ProtocolFailure) as exc:
            factory.open("writes")
        assert exc.value.code == "P6"
    finally:
        factory.close()


@pytest.mark.parametrize("bad", [
    {"config": {"tools": [{"name": "pay"}], "budget": 1, "principal": "a"}, "calls": []},
    {"config": {"tools": writes_tools({"pay": "record"}), "budget": -1, "principal": "a"}, "calls": []},
    {"config": {"tools": writes_tools({"pay": "record"}), "budget": 1, "principal": "a"},
     "calls": [{"id": "c1", "name": "pay", "arguments": {"amount": 1}}]},
    {"config": {"tools": writes_tools({"pay": "record"}), "budget": 1, "principal": "a"},
     "calls": [{"id": "c1", "name": "pay", "arguments": {"order": "A"}}, {"id": "c1", "name": "pay",
                                                                         "arguments": {"order": "B"}}]},
])
def test_a_malformed_writes_trace_is_a_trace_error_naming_the_field(bad: dict[str, Json]) -> None:
    trace = {"format": "loopspec-trace/1", "kind": "writes", **bad, "events": [{"type": "response", "result": {}}]}
    with pytest.raises(TraceError) as exc:
        judge(trace)
    assert exc.value.where.startswith("trace.")
    assert _step_problem({"kind": "writes", **bad}) is not None


def test_reduction_candidates_keep_the_key_arguments() -> None:
    st = wstep(["A", "B"], [{"restart": "applied"}, {"value": 1}], outages=[1], crashes=[2, 3])
    cands = step_candidates(st)
    for cand in cands:
        assert _step_problem(cand) is None
        assert all("order" in c["arguments"] for c in cand["calls"])
    # crashes at lookups shrink towards none, one at a time (PROTOCOL.md W5)
    assert [c["crashes"] for c in cands if c.get("crashes") != [2, 3]] == [[3], [2]]


def test_reduction_halves_calls_scripts_and_budgets_first() -> None:
    """PROTOCOL.md W5: a writes step's calls and script lose halves before single entries, and its budget is
    halved before it is lowered by one (each candidate taken is a run, often with a restart: a new process)."""
    st = wstep(["A", "B", "C", "A"], [{"value": 1}, {"lose": "applied"}, {"value": 2}, {"value": 3}], budget=9)
    cands = step_candidates(st)
    lens = [len(c["calls"]) for c in cands if c["calls"] != st["calls"]]
    assert lens[:2] == [2, 2] and set(lens[2:]) == {3}
    scripts = [len(c["script"]) for c in cands if c["calls"] == st["calls"] and c["script"] != st["script"]]
    assert scripts[:2] == [2, 2] and set(scripts[2:]) == {3}
    assert [c["config"]["budget"] for c in cands if c["config"]["budget"] != 9] == [4, 8]


def test_what_a_run_never_reached_is_trimmed_without_a_run() -> None:
    """Script entries past the last dispatch and crashes past the last lookup are read by index by the harness
    (PROTOCOL.md W2, W3): the trimmed step gives the same run, so the re-judged trace is what a run of it gives."""
    bug = "failed-before-lookup"
    big = wstep(["A"], [{"restart": "applied"}, {"value": 1}, {"fail": "INTERNAL_ERROR"}], crashes=[1, 3, 4])
    trace = run(bug, big)
    f = Finding(judge(trace), [big], [trace])
    assert f.rule == "R43"
    small = trim_unused(f, judge)
    assert small.rule == "R43" and small.size < f.size
    # two dispatches reached (the send, and the re-send after the cut lookup), two lookups
    assert small.steps[0]["script"] == big["script"][:2] and small.steps[0]["crashes"] == [1]
    again = run(bug, small.steps[0])
    assert again == small.traces[0]  # exactly the run of the trimmed step
    assert trim_unused(small, judge) is small
    assert trim_unused(Finding(judge(again), [small.steps[0]], [again]), judge).steps == small.steps


def test_generated_steps_are_replayable_and_deterministic() -> None:
    a, b = WritesGenerator(seed=7), WritesGenerator(seed=7)
    crashes = 0
    for i in range(30):
        sa, sb = a.example(i)[0], b.example(i)[0]
        assert [p.step for p in sa] == [p.step for p in sb]
        assert all(_step_problem(p.step) is None for p in sa)
        crashes += sum(bool(p.step.get("crashes")) for p in sa)
    assert 0 < crashes < 30  # some steps cut lookups (PROTOCOL.md W3), most do not


def test_drawing_crashes_leaves_the_rest_of_each_step_as_it_was() -> None:
    """The crashes come from a stream of their own: without them a step is what the generator drew before."""
    import random

    g = WritesGenerator(seed=5)
    for i in range(20):
        with_crashes = g.step(g.rng(i), random.Random(f"crashes:5:{i}"))
        with_crashes.pop("crashes", None)
        assert with_crashes == g.step(g.rng(i))


@pytest.mark.slow
@pytest.mark.parametrize("bug", sorted(ALL_BUGS))
def test_a_campaign_finds_shrinks_and_replays_each_broken_variant(bug: str, tmp_path: Any) -> None:
    factory = ImplFactory(cmd(bug), timeout=10.0)
    try:
        factory.release(factory.open("writes"))
        result = Campaign(factory, mode="writes", max_examples=60, seed=1, out=tmp_path, shrink_seconds=2.0).run()
    finally:
        factory.close()
    found = {f.rule: f for f in result.findings}
    assert ALL_BUGS[bug] in found, sorted(found)
    f = found[ALL_BUGS[bug]]
    assert f.shrunk and f.reproduced and f.calls <= 2 and len(f.steps) == 1
    case = load_case(tmp_path / f"{f.cause}.json")
    schema_validator("fuzz-case.schema.json").validate(case)  # the case, its writes step and its trace
    again = replay(tmp_path / f"{f.cause}.json", cmd(bug))
    assert again.verdict is not None and again.verdict.violation is not None
    assert again.verdict.violation.rule == f.rule
    assert replay(tmp_path / f"{f.cause}.json", cmd()).ok  # the correct executor passes the shrunk case


def test_a_campaign_finds_nothing_against_the_correct_executor(tmp_path: Any) -> None:
    factory = ImplFactory(cmd(), timeout=10.0)
    try:
        factory.release(factory.open("writes"))
        result = Campaign(factory, mode="writes", max_examples=50, seed=3, out=tmp_path).run()
    finally:
        factory.close()
    assert result.ok, [f.verdict.violation for f in result.findings]
    assert result.stats["executionsObserved"] > 30


def test_the_judge_takes_any_mutation_of_a_writes_trace_without_crashing() -> None:
    """A damaged trace (a conformance file, a case edited by hand) is a TraceError naming the field or a
    verdict — never another exception."""
    import contextlib
    import copy
    import random

    traces = [run(None, wstep(["A", "A", "B"], [{"restart": "applied"}, {"lose": "applied"}, {"value": 1}], outages=[2])),
              run("retry-without-lookup", wstep(["A", "A"], [{"lose": "applied"}])),
              run("failed-before-lookup", STEPS["failed-before-lookup"]),
              run(None, wstep(["A", "A"], [{"lose": "not-applied"}], crashes=[1, 2]))]

    def paths(v: Json, p: tuple[Json, ...] = ()) -> Any:
        yield p
        if isinstance(v, dict):
            for k in v:
                yield from paths(v[k], (*p, k))
        elif isinstance(v, list):
            for i, x in enumerate(v):
                yield from paths(x, (*p, i))

    r = random.Random(0)
    for _ in range(2000):
        t = copy.deepcopy(r.choice(traces))
        for _ in range(r.randint(1, 3)):
            p = r.choice(list(paths(t))[1:])
            cur = t
            for k in p[:-1]:
                cur = cur[k]
            junk = r.choice([None, 1, -1, "x", [], {}, [1], {"a": None}, True, 1.5, "OUTCOME_UNKNOWN", {"status": "ok"}])
            if r.random() < 0.2 and isinstance(cur, dict):
                del cur[p[-1]]
            else:
                cur[p[-1]] = junk
        with contextlib.suppress(TraceError):
            judge(t)


@pytest.mark.parametrize(("step", "field"), [
    ({"config": {"tools": 5, "budget": 1, "principal": "a"}, "calls": [], "script": []}, "steps[0].config.tools"),
    ({"config": {"tools": writes_tools({"pay": "record"}), "budget": 1, "principal": "a"},
      "calls": [{"id": "c1", "name": "pay", "arguments": {"order": [1], "amount": 1}}], "script": []},
     "steps[0].calls[0].arguments.order"),
    ({"config": {"tools": writes_tools({"pay": "record"}), "budget": 1, "principal": "a"}, "calls": [],
      "script": [{"restart": "maybe"}]}, "steps[0].script[0]"),
    ({"config": {"tools": writes_tools({"pay": "record"}), "budget": 1, "principal": "a"}, "calls": [],
      "script": [], "outages": "x"}, "steps[0].outages"),
    ({"config": {"tools": writes_tools({"pay": "record"}), "budget": 1, "principal": "a"}, "calls": [],
      "script": [], "crashes": [0]}, "steps[0].crashes"),
])
def test_a_malformed_writes_case_file_is_refused_naming_the_field(step: dict[str, Json], field: str,
                                                                 tmp_path: Any) -> None:
    import json

    from loopspec.fuzz._model import CaseError

    p = tmp_path / "case.json"
    p.write_text(json.dumps({"format": "loopspec-fuzz-case/1", "steps": [{"kind": "writes", **step}]}))
    with pytest.raises(CaseError) as exc:
        load_case(p)
    assert f": {field}" in str(exc.value), str(exc.value)


@pytest.mark.parametrize("st", [
    wstep(["A", "B", "A", "B"], [{"restart": "not-applied"}, {"value": {"ok": 3}}, {"restart": "not-applied"},
                                 {"lose": "applied"}], reconcile="record", budget=4, outages=[3]),
    wstep(["A", "B", "A"], [{"restart": "not-applied"}, {"value": {"ok": 5}}, {"lose": "applied"}],
          reconcile="record", budget=3, outages=[2]),
    wstep(["A", "C", "A"], [{"value": {"ok": 1}}, {"lose": "applied"}], budget=2, outages=[1]),
])
def test_a_lookup_of_an_unknown_key_belongs_to_that_key_not_to_the_request_before(st: dict[str, Json]) -> None:
    """R43/R46 (PROTOCOL.md W3): a lookup of B that comes while A's request is decided is B's request's (or
    the end of the run's) reconciliation, not an eager one; taken as A's, the judge saw B confirmed or
    reconciled too early (R44 / R46 findings against the correct executor, seeds 11 and 12 of 500 examples)."""
    trace = run(None, st)
    assert judge(trace).ok, judge(trace).violation


VARIANT = EXAMPLE.parents[2] / "tests" / "writes" / "variant_executor.py"


def run_variant(mode: str, step: dict[str, Json]) -> dict[str, Json]:
    factory = ImplFactory(f"{sys.executable} {VARIANT} {mode}", timeout=10.0)
    try:
        impl = factory.open("writes")
        trace, after = run_writes_step(impl, step, lambda: factory.open("writes"), factory.release)
        if after is not None:
            factory.release(after)
        return trace
    finally:
        factory.close()


def _seen(trace: dict[str, Json]) -> list[str]:
    return [e["type"] + (f":{e['outcome']['status']}" if e["type"] != "response" else "") for e in trace["events"]]


@pytest.mark.parametrize(("mode", "st", "events", "answers"), [
    # two redundant lookups before each new attempt: of a fresh key (A), of a key a lookup found not applied (A
    # again), of a fresh key after it (B)
    ("eager-lookup", wstep(["A", "A", "B"], [{"lose": "not-applied"}]),
     ["lookup:not-applied"] * 2 + ["execute:lost"] + ["lookup:not-applied"] * 3 + ["execute:ok"]
     + ["lookup:not-applied"] * 2 + ["execute:ok", "response"], ["OUTCOME_UNKNOWN", "ok", "ok"]),
    # the request's lookup is unavailable, asked again at once, and the request answered from the retry (the
    # correct executor answers it OUTCOME_UNKNOWN, and the end of the run's lookup settles the key)
    ("retry-lookup", wstep(["A", "A"], [{"lose": "applied"}], outages=[1]),
     ["execute:lost", "lookup:unavailable", "lookup:applied", "response"], ["OUTCOME_UNKNOWN", "ok"]),
])
def test_lookups_the_spec_allows_are_not_findings(mode: str, st: dict[str, Json], events: list[str],
                                                 answers: list[str]) -> None:
    """Issue 32: a lookup changes nothing (PROTOCOL.md W3) and is an attempt (R23, R45): an implementation that
    asks about a key whose outcome is known, or retries an unavailable lookup and answers from the retry, is
    correct. The judge said R39 missing-dispatch ("did not send it") to the first and R42 to the second."""
    trace = run_variant(mode, st)
    assert _seen(trace) == events
    res = trace["events"][-1]["result"]
    assert [a.get("code", a["status"]) for a in res["results"]] == answers and res["status"] == "COMPLETED"
    assert judge(trace).ok, judge(trace).violation


@pytest.mark.parametrize(("mode", "st", "kind", "words"), [
    ("shared-key", wstep(["A", "B"], [], reconcile="record"), "key-shared", "without applying it"),
    ("shared-key", wstep(["A", "B"], [], reconcile="lookup"), "key-shared", "took it for the same write"),
    ("made-up-unreconciled", wstep(["A"], [{"lose": "applied"}], reconcile="none"), "end-of-run",
     "not a key of the run's unknown writes"),
    ("null-unreconciled", wstep(["A", "B"], [{"lose": "applied"}, {"lose": "applied"}], reconcile="none"),
     "end-of-run", "None"),
])
def test_a_shared_key_and_made_up_unreconciled_keys_are_findings(mode: str, st: dict[str, Json], kind: str,
                                                                  words: str) -> None:
    """Issue 32: two business writes under one idempotency key (R37: the second answered with the first's
    result, never applied) and an outcome whose ``unreconciled`` holds made-up or null keys (R46: the keys are
    compared, not counted) passed the judge. The correct executor passes the same steps."""
    v = judge(run_variant(mode, st)).violation
    assert v is not None and (v.rule, v.kind) == ({"key-shared": "R37"}.get(kind, "R46"), kind), v
    assert words in v.explanation, v.explanation
    assert judge(run(None, st)).ok
