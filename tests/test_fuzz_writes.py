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

from loopspec._judge import TraceError, judge
from loopspec.fuzz import replay
from loopspec.fuzz._adapter import ImplFactory
from loopspec.fuzz._campaign import Campaign
from loopspec.fuzz._model import _step_problem, load_case
from loopspec.fuzz._reduce import step_candidates
from loopspec.fuzz._rpc import ProtocolFailure
from loopspec.fuzz._writes_gen import WritesGenerator, writes_tools
from loopspec.fuzz._writes_harness import run_writes_step
from tests.fuzz_helpers import EXAMPLE, schema_validator

Json = Any

#: bug -> the rule the judge names
BUGS = {"key-by-call-id": "R37", "retry-without-lookup": "R43", "record-after-dispatch": "R39",
        "timeout-as-failure": "R42"}


def cmd(bug: str | None = None) -> str:
    return f"{sys.executable} {EXAMPLE}" + (f" --bug {bug}" if bug else "")


def wstep(values: list[str], script: list[Json], *, reconcile: str = "lookup", budget: int = 5,
          outages: list[int] | None = None) -> dict[str, Json]:
    return {"kind": "writes", "config": {"tools": writes_tools({"pay": reconcile}), "budget": budget, "principal": "alice"},
            "calls": [{"id": f"c{k + 1}", "name": "pay", "arguments": {"order": v, "amount": 5}}
                      for k, v in enumerate(values)],
            "script": script, "outages": outages or []}


#: a minimal step that exposes each bug
STEPS = {
    "key-by-call-id": wstep(["A", "A"], [{"value": 1}]),
    "retry-without-lookup": wstep(["A", "A"], [{"lose": "applied"}]),
    "record-after-dispatch": wstep(["A"], [{"restart": "applied"}]),
    "timeout-as-failure": wstep(["A"], [{"lose": "applied"}]),
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


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_each_broken_variant_is_caught_by_its_rule(bug: str) -> None:
    trace = run(bug, STEPS[bug])
    schema_validator("trace.schema.json").validate(trace)
    v = judge(trace).violation
    assert v is not None and v.rule == BUGS[bug], (v, trace["events"])
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
    st = wstep(["A", "B"], [{"restart": "applied"}, {"value": 1}], outages=[1])
    for cand in step_candidates(st):
        assert _step_problem(cand) is None
        assert all("order" in c["arguments"] for c in cand["calls"])


def test_generated_steps_are_replayable_and_deterministic() -> None:
    a, b = WritesGenerator(seed=7), WritesGenerator(seed=7)
    for i in range(30):
        sa, sb = a.example(i)[0], b.example(i)[0]
        assert [p.step for p in sa] == [p.step for p in sb]
        assert all(_step_problem(p.step) is None for p in sa)


@pytest.mark.slow
@pytest.mark.parametrize("bug", sorted(BUGS))
def test_a_campaign_finds_shrinks_and_replays_each_broken_variant(bug: str, tmp_path: Any) -> None:
    factory = ImplFactory(cmd(bug), timeout=10.0)
    try:
        factory.release(factory.open("writes"))
        result = Campaign(factory, mode="writes", max_examples=60, seed=1, out=tmp_path, shrink_seconds=2.0).run()
    finally:
        factory.close()
    found = {f.rule: f for f in result.findings}
    assert BUGS[bug] in found, sorted(found)
    f = found[BUGS[bug]]
    assert f.shrunk and f.reproduced and f.calls <= 2 and len(f.steps) == 1
    case = load_case(tmp_path / f"{f.rule}.json")
    schema_validator("fuzz-case.schema.json").validate(case)  # the case, its writes step and its trace
    again = replay(tmp_path / f"{f.rule}.json", cmd(bug))
    assert again.verdict is not None and again.verdict.violation is not None
    assert again.verdict.violation.rule == f.rule
    assert replay(tmp_path / f"{f.rule}.json", cmd()).ok  # the correct executor passes the shrunk case


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
              run("retry-without-lookup", wstep(["A", "A"], [{"lose": "applied"}]))]

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
