"""Profile parameters (SPEC.md section 4): the loader's validation, and the profiled reference.

The strict default must be exactly the core's reference (R0-R28 unchanged); each documented choice
changes only what its parameter names.
"""

from __future__ import annotations

import pytest

from loopspec.core.profiles import params_for
from loopspec.judge.trace import judge
from loopspec.judge.verdict import TRACE_FORMAT
from loopspec.spec.base import SpecError
from loopspec.spec.loader import load_spec, parse_spec

SPEC_TEXT = load_spec().path


def _text() -> str:
    from pathlib import Path

    return Path(SPEC_TEXT).read_text(encoding="utf-8")


def test_shipped_profiles_load() -> None:
    spec = load_spec()
    assert {p.id for p in spec.profiles} >= {"pydantic-ai", "openai-agents", "langgraph"}
    for prof in spec.profiles:
        for c in prof.choices:
            assert c.value != spec.parameter(c.parameter).default
            assert c.source is None or c.source.startswith("https://")
    assert params_for(spec, "strict").strict(spec)
    assert not params_for(spec, "langgraph").strict(spec)


@pytest.mark.parametrize(("old", "new", "field"), [
    ('parameter = "budget"\nvalue = "per-proposal"', 'parameter = "budget"\nvalue = "sometimes"', "value"),
    ('parameter = "budget"\nvalue = "per-proposal"', 'parameter = "nope"\nvalue = "per-proposal"', "parameter"),
    ('parameter = "budget"\nvalue = "per-proposal"', 'parameter = "budget"\nvalue = "per-call"', "value"),
    ('source = "https://ai.pydantic.dev/api/usage/#pydantic_ai.usage.UsageLimits.tool_calls_limit"', 'source = "the docs"', "source"),
])
def test_loader_rejects_bad_profiles(old: str, new: str, field: str) -> None:
    text = _text()
    assert old in text
    with pytest.raises(SpecError) as err:
        parse_spec(text.replace(old, new, 1))
    assert field in str(err.value) and "pydantic-ai" in str(err.value)


def test_loader_rejects_a_parameter_without_meaning() -> None:
    text = _text().replace('meaning = { "run" = ', 'meanin = { "run" = ', 1)
    with pytest.raises(SpecError, match="meaning"):
        parse_spec(text)


def _batch(calls: list, execs: list, result: dict, budget: int = 5, mode: str = "continue") -> dict:
    events = [{"type": "execute", "callId": c["id"], "name": c["name"], "arguments": c["arguments"],
               "principal": "alice", "outcome": {"status": "ok", "output": k}} for k, c in enumerate(execs)]
    events.append({"type": "response", "result": result})
    return {"format": TRACE_FORMAT, "kind": "batch",
            "config": {"tools": [{"name": "lookup", "inputSchema": {"type": "object", "properties": {}}}],
                       "budget": budget, "mode": mode, "principal": "alice"},
            "calls": calls, "events": events}


C1 = {"id": "c1", "name": "lookup", "arguments": {}}


def test_R6_replay_under_strict_is_reexecution_under_id_binding_none() -> None:
    """R6: executing a repeated id is a deviation from the strict spec and a design choice under
    id_binding = none (LangGraph's profile)."""
    trace = _batch([C1, C1], [C1, C1], {"results": [{"id": "c1", "status": "ok", "output": 0},
                                                    {"id": "c1", "status": "ok", "output": 1}],
                                        "executed": 2, "aborted": None})
    strict = judge(trace)
    assert not strict.ok and strict.violation is not None and strict.violation.rule == "R6"
    assert judge(trace, profile="langgraph").ok


def test_R9_per_proposal_budget_refuses_the_whole_proposal() -> None:
    """R9 under budget = per-proposal: two calls over a budget of 1 run nothing (pydantic-ai)."""
    c2 = {"id": "c2", "name": "lookup", "arguments": {}}
    trace = _batch([C1, c2], [], {"results": [], "executed": 0,
                                  "aborted": {"index": 0, "code": "BUDGET_EXHAUSTED"}}, budget=1)
    assert not judge(trace).ok
    assert judge(trace, profile="pydantic-ai").ok
    # and the strict behaviour deviates from that profile
    strict_like = _batch([C1, c2], [C1], {"results": [{"id": "c1", "status": "ok", "output": 0},
                                                      {"id": "c2", "status": "error", "code": "BUDGET_EXHAUSTED"}],
                                          "executed": 1, "aborted": None}, budget=1)
    assert judge(strict_like).ok
    assert not judge(strict_like, profile="pydantic-ai").ok


def test_strict_profile_is_the_core_reference() -> None:
    trace = _batch([C1, C1], [C1], {"results": [{"id": "c1", "status": "ok", "output": 0},
                                                {"id": "c1", "status": "ok", "output": 0}],
                                    "executed": 1, "aborted": None})
    assert judge(trace).ok and judge(trace, profile="strict").ok
    assert judge(trace).to_json() == judge(trace, profile="strict").to_json()


# --------------------------------------------------------------------------------------------
# The loader: texts, and SPEC.md section 4 names every parameter
# --------------------------------------------------------------------------------------------

FINAL_TEXT = 'text = "Sorry, need more steps to process this request."\n'


def test_loader_requires_the_frameworks_text_for_a_value_that_needs_one() -> None:
    text = _text()
    assert FINAL_TEXT in text
    with pytest.raises(SpecError, match="text") as err:
        parse_spec(text.replace(FINAL_TEXT, "", 1))
    assert "langgraph" in str(err.value)


def test_loader_rejects_a_text_on_a_value_that_takes_none() -> None:
    text = _text().replace('parameter = "budget"\nvalue = "per-proposal"\n',
                           'parameter = "budget"\nvalue = "per-proposal"\ntext = "x"\n', 1)
    with pytest.raises(SpecError, match="takes no text"):
        parse_spec(text)


def test_spec_md_section_4_names_every_parameter_and_value_in_order() -> None:
    """P-DEFAULT: SPEC.md section 4 lists each parameter of loop.toml with its values, default first."""
    from pathlib import Path

    spec = load_spec()
    section = Path(spec.path).with_name("SPEC.md").read_text(encoding="utf-8").split("## 4. Profiles", 1)[1]
    for p in spec.parameters:
        line = next((ln for ln in section.splitlines() if ln.startswith(f"- `{p.id}` (")), None)
        assert line is not None, p.id
        assert " | ".join(f"`{v}`" for v in p.values) in line, p.id
        assert ", ".join(p.rules) in line.replace("–", "-") or p.rules[0] in line, p.id


# --------------------------------------------------------------------------------------------
# The newer parameters, on hand-made traces
# --------------------------------------------------------------------------------------------

TOOLS = [{"name": "lookup", "inputSchema": {"type": "object", "properties": {"q": {"type": "string"},
                                                                            "n": {"type": "integer"}}}}]
LIMITS = {"maxRounds": None, "maxExecutions": None, "maxToolExecutions": None, "maxRequests": None,
          "maxRetries": 0, "deadline": None}


def _ok(cid: str, out: object) -> dict:
    return {"id": cid, "status": "ok", "output": out}


def _loop(replies: list, shown: list, execs: list, result: dict, *, mode: str = "continue",
          limits: dict | None = None) -> dict:
    """A loop trace: model request k shows ``shown[k]``; ``execs`` are (call, outcome, round) in order."""
    events: list[dict] = []
    for k, (reply, res) in enumerate(zip(replies, shown, strict=True)):
        events.append({"type": "model", "round": k + 1, "results": res, "reply": reply})
        for call, outcome, _round in (e for e in execs if e[2] == k + 1):
            events.append({"type": "execute", "callId": call["id"], "name": call["name"],
                           "arguments": call["arguments"], "principal": "alice", "outcome": outcome})
    base = {"coverage": "COMPLETE" if result["status"] == "COMPLETED" else "PARTIAL", "aborted": None,
            "final": None, "results": [], "executed": 0}
    events.append({"type": "response", "result": {**base, **result, "rounds": len(replies)}})
    return {"format": TRACE_FORMAT, "kind": "loop",
            "config": {"tools": TOOLS, "limits": {**LIMITS, **(limits or {})}, "mode": mode, "onLimit": "throw",
                       "principal": "alice"},
            "events": events}


A = {"id": "c1", "name": "lookup", "arguments": {"q": "a"}}


def test_R18_an_empty_response_is_the_final_answer_under_final_answer() -> None:
    """R18 / empty_proposal: the Agents SDK and LangGraph end the run on a response without calls."""
    trace = _loop([{"calls": []}], [[]], [], {"status": "COMPLETED", "stopReason": "FINAL_ANSWER", "final": ""})
    assert not judge(trace).ok
    assert not judge(trace, profile="pydantic-ai").ok  # pydantic-ai asks again (next-round)
    assert judge(trace, profile="openai-agents").ok and judge(trace, profile="langgraph").ok


def test_R13_upfront_checks_abort_before_the_proposal_executes() -> None:
    """R13 / call_checks = upfront: pydantic-ai validates the whole response before it runs a call."""
    bad = {"id": "c2", "name": "shell", "arguments": {}}
    upfront = _batch([C1, bad], [], {"results": [], "executed": 0, "aborted": {"index": 1, "code": "UNKNOWN_TOOL"}},
                     mode="abort")
    assert not judge(upfront).ok
    assert judge(upfront, profile="pydantic-ai").ok
    per_call = _batch([C1, bad], [C1], {"results": [_ok("c1", 0)], "executed": 1,
                                        "aborted": {"index": 1, "code": "UNKNOWN_TOOL"}}, mode="abort")
    assert judge(per_call).ok
    assert not judge(per_call, profile="pydantic-ai").ok


def test_R13_concurrent_execution_runs_the_siblings_of_a_failure() -> None:
    """R13 / tool_execution = concurrent: LangGraph's ToolNode runs every call of the message."""
    c2 = {"id": "c2", "name": "lookup", "arguments": {}}
    events = [{"type": "execute", "callId": "c1", "name": "lookup", "arguments": {}, "principal": "alice",
               "outcome": {"status": "error", "category": "INTERNAL_ERROR"}},
              {"type": "execute", "callId": "c2", "name": "lookup", "arguments": {}, "principal": "alice",
               "outcome": {"status": "ok", "output": 1}},
              {"type": "response", "result": {"results": [], "executed": 2,
                                              "aborted": {"index": 0, "code": "INTERNAL_ERROR"}}}]
    trace = {**_batch([C1, c2], [], {}, mode="abort"), "events": events}
    strict = judge(trace)
    assert not strict.ok and strict.violation is not None and strict.violation.rule == "R13"
    assert judge(trace, profile="langgraph").ok


def test_R13_concurrent_keep_finished_keeps_the_answers_before_the_failure() -> None:
    """R13 / tool_execution = concurrent-keep-finished (Google ADK): the siblings still run, and the answers
    of the requests before the failing one are kept; the failing one and those after it get none. Under
    plain concurrent (LangGraph) every answer of the proposal is lost, under the strict spec the run
    stops at the failure."""
    c2 = {"id": "c2", "name": "lookup", "arguments": {}}
    c3 = {"id": "c3", "name": "lookup", "arguments": {}}

    def ex(cid: str, outcome: dict[str, object]) -> dict[str, object]:
        return {"type": "execute", "callId": cid, "name": "lookup", "arguments": {}, "principal": "alice",
                "outcome": outcome}

    def trace(results: list[dict[str, object]]) -> dict[str, object]:
        events = [ex("c1", {"status": "ok", "output": 1}), ex("c2", {"status": "error", "category": "INTERNAL_ERROR"}),
                  ex("c3", {"status": "ok", "output": 3}),
                  {"type": "response", "result": {"results": results, "executed": 3,
                                                  "aborted": {"index": 1, "code": "INTERNAL_ERROR"}}}]
        return {**_batch([C1, c2, c3], [], {}, mode="abort"), "events": events}

    kept, lost, all_kept = trace([_ok("c1", 1)]), trace([]), trace([_ok("c1", 1), _ok("c3", 3)])
    assert judge(kept, profile="google-adk").ok
    for wrong in (lost, all_kept):
        v = judge(wrong, profile="google-adk")
        assert v.violation is not None and v.violation.rule in ("R11", "R13"), v
    assert judge(lost, profile="langgraph").ok and not judge(kept, profile="langgraph").ok
    assert not judge(kept).ok  # strict: c3 never executes after the failure


def test_R6_drop_repeats_coalesces_a_repeated_call_across_rounds() -> None:
    """R6, R7 / id_binding = drop-repeats: the Agents SDK neither runs nor answers a call whose id already
    has an output for the same invocation, and refuses other content under that id."""
    out = {"status": "ok", "output": 0}
    trace = _loop([{"calls": [A]}, {"calls": [A]}, {"final": "x"}], [[], [_ok("c1", 0)], []], [(A, out, 1)],
                  {"status": "COMPLETED", "stopReason": "FINAL_ANSWER", "final": "x", "executed": 1,
                   "results": [_ok("c1", 0)]})
    assert not judge(trace).ok
    assert judge(trace, profile="openai-agents").ok
    other = {**A, "arguments": {"q": "b"}}
    refused = _loop([{"calls": [A]}, {"calls": [other]}], [[], [_ok("c1", 0)]], [(A, out, 1)],
                    {"status": "FAILED", "stopReason": "MODEL_ERROR", "executed": 1, "results": [_ok("c1", 0)]})
    assert not judge(refused).ok
    assert judge(refused, profile="openai-agents").ok


def test_R5_as_written_contents_tell_1_from_1_0() -> None:
    """R5 / content_equality = as-written: the SDK's fingerprint keeps 1 and 1.0 apart, so the second call
    is another invocation under a bound id (a refusal), where R5 would see the same content."""
    one = {"id": "c1", "name": "lookup", "arguments": {"n": 1}}
    one_0 = {"id": "c1", "name": "lookup", "arguments": {"n": 1.0}}
    out = {"status": "ok", "output": 0}
    refused = _loop([{"calls": [one]}, {"calls": [one_0]}], [[], [_ok("c1", 0)]], [(one, out, 1)],
                    {"status": "FAILED", "stopReason": "MODEL_ERROR", "executed": 1, "results": [_ok("c1", 0)]})
    assert judge(refused, profile="openai-agents").ok
    spec = load_spec()
    by_value = params_for(spec, "openai-agents").only(spec, [p.id for p in spec.parameters
                                                             if p.id != "content_equality"])
    assert not judge(refused, profile=by_value).ok  # by value the repeat is coalesced, not refused


def test_R19_the_last_rounds_calls_become_the_frameworks_final_text() -> None:
    """R19, R22 / rounds_exhausted = final-text: LangGraph's ReAct agent answers 'Sorry, need more steps'
    instead of running the calls of its last allowed model request."""
    text = "Sorry, need more steps to process this request."
    trace = _loop([{"calls": [A]}], [[]], [], {"status": "COMPLETED", "stopReason": "FINAL_ANSWER", "final": text},
                  limits={"maxRounds": 1})
    assert not judge(trace).ok
    assert judge(trace, profile="langgraph").ok
    wrong = _loop([{"calls": [A]}], [[]], [], {"status": "COMPLETED", "stopReason": "FINAL_ANSWER", "final": "x"},
                  limits={"maxRounds": 1})
    assert not judge(wrong, profile="langgraph").ok


def test_report_never_calls_an_unwitnessed_profile_difference_plain_conformance() -> None:
    """A rule whose profile parameter differs from the strict default, where no campaign met a case that
    shows the difference, is reported as conforming *with* that caveat (e.g. LangGraph has no execution
    budget, R9, and the adapter cannot pass one): never as plain conformance to the strict spec."""
    from loopspec.fuzz._model import CampaignResult
    from loopspec.fuzz._report import render_report, report_data

    stats = {"examples": 1, "steps": 1, "executionsObserved": 0, "seconds": 0.0}
    empty = CampaignResult(findings=[], seed=1, stats=stats, files=[])
    data = report_data(impl="x", info={}, mode="batch", profile="langgraph", result=empty, strict=empty, out=None)
    by_rule = {r["rule"]: r for r in data["rules"]}
    assert by_rule["R9"]["status"] == "conforms" and by_rule["R9"]["profileDiffersUnwitnessed"] == ["budget"]
    assert "profileDiffersUnwitnessed" not in by_rule["R16"]  # no profile parameter concerns R16
    text = render_report(data)
    assert "| R9 | " in text and "no campaign met a case where its profile's `budget`" in text
    strict = report_data(impl="x", info={}, mode="batch", profile=None, result=empty, strict=None, out=None)
    assert all("profileDiffersUnwitnessed" not in r for r in strict["rules"])


def test_report_a_finding_explained_only_by_an_observed_choice_is_a_deviation() -> None:
    """P-EVIDENCE: LangGraph's re-execution of a repeated id conforms to its profile only through
    id_binding = none, which nothing documents (evidence = observed): the report says R6 deviates, and
    names the observed choice; a finding a documented choice explains stays a design choice."""
    from loopspec.fuzz._model import CampaignResult, Finding
    from loopspec.fuzz._report import render_report, report_data

    replay = _batch([C1, C1], [C1, C1], {"results": [{"id": "c1", "status": "ok", "output": 0},
                                                     {"id": "c1", "status": "ok", "output": 1}],
                                         "executed": 2, "aborted": None})
    strict_v = judge(replay)
    assert strict_v.violation is not None and strict_v.violation.rule == "R6"
    assert judge(replay, profile="langgraph").ok
    stats = {"examples": 1, "steps": 1, "executionsObserved": 2, "seconds": 0.0}
    empty = CampaignResult(findings=[], seed=1, stats=stats, files=[])
    found = CampaignResult(findings=[Finding(strict_v, [{}], [replay])], seed=1, stats=stats, files=[])
    data = report_data(impl="x", info={}, mode="batch", profile="langgraph", result=empty, strict=found, out=None)
    r6 = next(r for r in data["rules"] if r["rule"] == "R6")
    assert r6["status"] == "deviates" and r6["observedOnly"] == ["id_binding"]
    assert "explained only by the observed (undocumented) choice `id_binding`" in render_report(data)
    # pydantic-ai: a two-call proposal over a budget of 1 is refused whole (budget = per-proposal, source)
    c2 = {"id": "c2", "name": "lookup", "arguments": {}}
    refused = _batch([C1, c2], [], {"results": [], "executed": 0,
                                    "aborted": {"index": 0, "code": "BUDGET_EXHAUSTED"}}, budget=1)
    v = judge(refused)
    assert v.violation is not None
    found = CampaignResult(findings=[Finding(v, [{}], [refused])], seed=1, stats=stats, files=[])
    data = report_data(impl="x", info={}, mode="batch", profile="pydantic-ai", result=empty, strict=found, out=None)
    row = next(r for r in data["rules"] if r["rule"] == v.violation.rule)
    assert row["status"] == "design-choice" and row["parameters"] == ["budget"]


def test_R15_error_text_accepts_a_frameworks_own_text_never_a_canary_unless_exception_text() -> None:
    """R15 / error_text: the framework's own text in an error answer is a design choice (framework-text);
    the tool exception's canary in it is R15's divergence, except under exception-text (LangGraph's
    handle_tool_errors=True)."""
    from loopspec.judge.verdict import CANARY_PREFIX

    failed = {"status": "error", "category": "INTERNAL_ERROR"}

    def trace(message: str) -> dict:
        t = _batch([C1], [], {"results": [{"id": "c1", "status": "error", "code": "INTERNAL_ERROR",
                                           "message": message}], "executed": 1, "aborted": None})
        t["events"].insert(0, {"type": "execute", "callId": "c1", "name": "lookup", "arguments": {},
                               "principal": "alice", "outcome": failed})
        return t

    own = trace("An error occurred while running the tool. Please try again.")
    leak = trace(f"Error: ToolFailed('tool failed: {CANARY_PREFIX}1')\n Please fix your mistakes.")
    v = judge(own)
    assert v.violation is not None and (v.violation.rule, v.violation.kind) == ("R15", "unsafe-error-message")
    v = judge(leak)
    assert v.violation is not None and (v.violation.rule, v.violation.kind) == ("R15", "exception-text-shown")
    assert judge(own, profile="openai-agents").ok
    v = judge(leak, profile="openai-agents")
    assert v.violation is not None and v.violation.kind == "exception-text-shown"
    assert judge(leak, profile="langgraph").ok


def test_risks_rank_duplicate_side_effects_first_and_name_the_avoiding_setting() -> None:
    """The risk view: strict divergences ranked by consequence (a call executed twice before an
    exception shown to the model before the rest); a setting whose campaign did not find the rule is named."""
    from loopspec.frameworks._risks import consequence, rank_risks

    assert consequence("R6", "replay-reexecuted") == "executed-twice"
    assert consequence("R7", "executed-despite-id-conflict") == "executed-twice"
    assert consequence("R9", "executed-despite-budget-exhausted") == "past-budget"
    assert consequence("R3", "executed-despite-unknown-tool") == "not-allowed"
    assert consequence("R11", "answer-missing") == "result-lost"
    assert consequence("R15", "exception-text-shown") == "exception-shown"
    assert consequence("R28", "wrong-terminal-state") == "final-replaced"
    assert consequence("R2", "check-order") == "other"

    def row(rule: str, kind: str, status: str = "design-choice") -> dict:
        return {"rule": rule, "kind": kind, "status": status, "explanation": "Let … Then …", "case": None}

    report = {"rules": [row("R15", "exception-text-shown"), row("R2", "check-order"), row("R16", "x", "conforms"),
                        {**row("R6", "replay-reexecuted", "deviates"), "observedOnly": ["id_binding"]}]}
    risks = rank_risks([("langgraph", "loop", report)],
                       {("langgraph", "loop"): [("handle_tool_errors=text", {"R6", "R2"})]})
    assert [r.rule for r in risks] == ["R6", "R15", "R2"]
    assert risks[0].observed_only == ["id_binding"] and risks[0].avoided_by == []
    assert risks[1].avoided_by == ["handle_tool_errors=text"]
    # a setting "avoids" a rule only when a campaign of the same size at the defaults found it
    risks = rank_risks([("langgraph", "loop", report)],
                       {("langgraph", "loop"): [("handle_tool_errors=text", {"R6", "R2"})]},
                       {("langgraph", "loop"): {"R6", "R2"}})
    assert risks[1].rule == "R15" and risks[1].avoided_by == []


def test_conforms_rows_say_how_many_examples_met_the_rules_preconditions() -> None:
    """A "conforms" row carries the rule's exercised preconditions (e.g. replays across rounds seen), counted
    from the judged traces (loopspec.fuzz._exercised), never a bare "no divergence"."""
    from loopspec.fuzz._campaign import CampaignResult
    from loopspec.fuzz._exercised import describe, exercised
    from loopspec.fuzz._report import render_report, report_data

    a = {"id": "c1", "name": "lookup", "arguments": {"q": "a"}}
    b = {"id": "c1", "name": "lookup", "arguments": {"q": "b"}}
    trace = _loop([{"calls": [a]}, {"calls": [a, b]}, {"final": "x"}], [[], [], []], [], {"status": "COMPLETED",
                  "stopReason": "FINAL_ANSWER", "final": "x"})
    counts = exercised(trace)
    assert counts["R6"] == 1 and counts["R6 across rounds"] == 1 and counts["R7"] == 1
    assert counts["R7 across rounds"] == 1 and counts["R18"] == 1
    assert describe("R6", counts) == "seen: 1 replays (same id, same content), 1 replays across rounds"
    stats = {"examples": 1, "steps": 1, "executionsObserved": 0, "seconds": 0.0, "exercised": dict(counts)}
    empty = CampaignResult(findings=[], seed=1, stats=stats, files=[])
    data = report_data(impl="x", info={}, mode="loop", profile=None, result=empty, strict=None, out=None)
    r6 = next(r for r in data["rules"] if r["rule"] == "R6")
    assert r6["status"] == "conforms" and r6["exercised"].endswith(", 1 replays across rounds")
    assert "| R6 | Replay: same id, same content | conforms (seen: 1 replays" in render_report(data)


def test_every_conforms_row_carries_a_count() -> None:
    """Issue 17: each "conforms" row says how many judged steps met the rule's preconditions — the rules every
    step is checked against count its requests, executions, answers, runs or concurrent steps, and a rule with no
    precondition of its own counts the steps judged."""
    from loopspec.fuzz._campaign import CampaignResult
    from loopspec.fuzz._exercised import exercised
    from loopspec.fuzz._report import report_data

    a = {"id": "c1", "name": "lookup", "arguments": {"q": "a"}}
    c = {"id": "c2", "name": "lookup", "arguments": {"q": "c"}}
    trace = _loop([{"calls": [a, c]}, {"final": "x"}], [[], []], [], {"status": "COMPLETED",
                  "stopReason": "FINAL_ANSWER", "final": "x"})
    counts = exercised(trace)
    assert counts["R0"] == 1 and counts["R1"] == 2 and counts["R11"] == 1 and counts["R28"] == 1
    assert counts["R21"] == 1 and "R22" not in counts and "R29" not in counts  # ended by its final answer; sequential
    stats = {"examples": 1, "steps": 1, "executionsObserved": 0, "seconds": 0.0, "exercised": dict(counts)}
    data = report_data(impl="x", info={}, mode="loop", profile=None, out=None,
                       result=CampaignResult(findings=[], seed=1, stats=stats, files=[]), strict=None)
    bare = [r["rule"] for r in data["rules"] if r["status"] == "conforms" and not r.get("exercised")]
    assert not bare, bare
    r29 = next(r for r in data["rules"] if r["rule"] == "R29")
    assert r29["exercised"] == "seen: 0 concurrent steps"
