"""Stitching one model client's traces (one model call each) into conversations (issue 28): a later request that
carries an earlier call's request and answer exactly continues it; ambiguous matches and forks are not stitched and
say why; a conversation whose earliest recorded request already carries earlier rounds still starts
mid-conversation, and those rounds are judged from the history. ``loopspec monitor`` holds such traces and judges
the same stitched runs as ``check``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loopspec.monitor._runs import Closed, HeldConversations
from loopspec.oracle import check_file, read_text_input
from tests.test_oracle_instrumentations import monitor_verdicts
from tests.test_oracle_telemetry import answers, calls, otlp, span, text, user

Json = Any
A = ("c1", "lookup", {"q": "a"})
B = ("c2", "lookup", {"q": "b"})


def call(trace: int, start: int, inp: list[Json], out: list[Json] | None) -> dict[str, Json]:
    """One model call as the openai-v2 instrumentation records it: a trace of its own, a root chat span."""
    attrs: dict[str, Json] = {"gen_ai.operation.name": "chat", "gen_ai.input.messages": inp}
    if out is not None:
        attrs["gen_ai.output.messages"] = out
    return span("chat gpt-4o", 1, None, start, attrs, trace=trace)


def check(*spans: dict[str, Json]) -> list[Any]:
    res = read_text_input(otlp(*spans).encode(), "t.otlp.jsonl")
    assert not res.errors, res.errors
    return res.records


def conversation(second: list[Json], third: list[Json]) -> list[dict[str, Json]]:
    """user → A, B; then the results → ``second``; then ``third`` (the results of ``second``) → a final answer."""
    h1 = [user("go")]
    h2 = [*h1, calls(A, B), answers(("c1", "A"), ("c2", "B"))]
    return [call(1, 10, h1, [calls(A, B)]), call(2, 20, h2, second), call(3, 30, [*h2, *third], [text("done")])]


def test_one_call_traces_are_one_run_from_its_first_call() -> None:
    spans = conversation([calls(("c3", "lookup", {"q": "c"}))],
                         [calls(("c3", "lookup", {"q": "c"})), answers(("c3", "C"))])
    (r,) = check(*spans)
    assert r.verdict == "conforms" and r.run == f"{1:032x}" and r.events == 3
    assert r.summary["stitched"]["traces"] == [f"{t:032x}" for t in (1, 2, 3)]
    ev = r.summary["stitched"]["evidence"]
    assert len(ev) == 2 and "tool call id(s) c1, c2" in ev[0] and "2 tool result(s)" in ev[0]
    assert not any("mid-conversation" in n for n in r.summary["notes"])
    assert {"R11", "R28"} <= set(r.checks["verified"]) and "from" not in r.checks
    assert r.summary["calls"] == 3 and r.summary["results"] == 3


def test_the_deviations_of_the_whole_conversation_are_reported() -> None:
    # a repeat dropped: the next request re-sends the history without it (R11)
    spans = conversation([calls(A)], [])
    spans[2] = call(3, 30, json.loads(spans[1]["attributes"][1]["value"]["stringValue"]), [text("done")])
    (r,) = check(*spans)
    assert r.violation is not None and r.violation.rule == "R11"
    assert "re-sends trace" in r.summary["stitched"]["evidence"][1]
    # a replay answered with another result (re-executed: R6), a reused id answered (executed: R7)
    (r,) = check(*conversation([calls(A)], [calls(A), answers(("c1", "A again"))]))
    assert r.violation is not None and r.violation.rule == "R6"
    (r,) = check(*conversation([calls(("c1", "lookup", {"q": "z"}))],
                               [calls(("c1", "lookup", {"q": "z"})), answers(("c1", "Z"))]))
    assert r.violation is not None and r.violation.rule == "R7"


def test_arguments_as_json_text_or_as_an_object_are_the_same_call() -> None:
    """The normalisation the instrumentations impose: OpenInference records the arguments as the JSON text the
    model sent, openai-v2 as an object; an empty text part beside tool calls is no part."""
    out = [{"role": "assistant", "parts": [{"type": "text", "content": ""},
                                           {"type": "tool_call", "id": "c1", "name": "lookup",
                                            "arguments": {"q": "a", "n": 1}}]}]
    hist = [{"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "lookup",
                                             "arguments": '{"n": 1,  "q": "a"}'}]}]
    (r,) = check(call(1, 10, [user("go")], out), call(2, 20, [user("go"), *hist, answers(("c1", "A"))],
                                                          [text("done")]))
    assert r.verdict == "conforms" and len(r.summary["stitched"]["traces"]) == 2
    # another id in the history: not the same answer, not stitched
    other = [{"role": "assistant", "parts": [{**hist[0]["parts"][0], "id": "c9"}]}]
    recs = check(call(1, 10, [user("go")], out), call(2, 20, [user("go"), *other, answers(("c9", "A"))],
                                                          [text("done")]))
    assert len(recs) == 2 and all("stitched" not in r.summary for r in recs)
    assert any("starts mid-conversation" in n for n in recs[1].summary["notes"])


def test_two_conversations_that_match_alike_are_not_stitched() -> None:
    h1 = [user("go")]
    twin1, twin2 = call(1, 10, h1, [calls(A)]), call(2, 11, h1, [calls(A)])
    nxt = call(3, 30, [*h1, calls(A), answers(("c1", "A"))], [text("done")])
    recs = check(twin1, twin2, nxt)
    assert len(recs) == 3 and not any("stitched" in r.summary for r in recs)
    notes = " ".join(recs[2].summary["notes"])
    assert "continues the last model call of more than one conversation alike" in notes
    assert f"{1:032x}" in notes and f"{2:032x}" in notes and "starts mid-conversation" in notes


def twins(n: int, interleaved: bool) -> list[dict[str, Json]]:
    """``n`` identical conversations (ids included, as a scripted model gives them), all first calls then all second
    then all third (``interleaved``), or one conversation after the other."""
    h = [[user("go")], [user("go"), calls(A), answers(("c1", "A"))],
         [user("go"), calls(A), answers(("c1", "A")), calls(B), answers(("c2", "B"))]]
    outs = [[calls(A)], [calls(B)], [text("done")]]
    order = [(c, k) for k in range(3) for c in range(n)] if interleaved else [(c, k) for c in range(n) for k in range(3)]
    return [call(1 + 3 * c + k, 10 * t, h[k], outs[k]) for t, (c, k) in enumerate(order)]


def test_identical_conversations_are_stitched_only_where_one_conversation_fits() -> None:
    """Conversations identical to the id (a scripted model, a batch of the same prompt): run one after the other,
    each is stitched by itself; interleaved, every later request fits several conversations alike and nothing is
    stitched — never one conversation's request read as another's re-sent request (a false R11)."""
    recs = check(*twins(3, interleaved=False))
    assert [(r.verdict, len(r.summary["stitched"]["traces"])) for r in recs] == [("conforms", 3)] * 3
    recs = check(*twins(3, interleaved=True))
    assert len(recs) == 9 and all(r.verdict == "conforms" and "stitched" not in r.summary for r in recs)
    assert sum("more than one conversation alike" in " ".join(r.summary.get("notes", ())) for r in recs) == 6


def test_a_fork_is_not_stitched() -> None:
    h1 = [user("go")]
    h2 = [*h1, calls(A), answers(("c1", "A"))]
    recs = check(call(1, 10, h1, [calls(A)]), call(2, 20, h2, [text("done")]),
                 call(3, 30, [*h2, text("done"), user("and b?")], [text("b")]),  # continues trace 2
                 call(4, 40, [*h1, calls(A), answers(("c1", "other"))], [text("x")]))  # continues trace 1 again
    assert [len(r.summary.get("stitched", {}).get("traces", [1])) for r in recs] == [3, 1]
    assert "a fork, not stitched" in " ".join(recs[1].summary["notes"])


def test_a_request_re_sent_after_a_final_answer_or_carrying_no_round_starts_a_run() -> None:
    h = [user("go"), calls(A), answers(("c1", "A"))]
    recs = check(call(1, 10, h, [text("done")]), call(2, 20, h, [text("done again")]))  # a regenerated answer
    assert len(recs) == 2
    recs = check(call(1, 10, [user("go")], [calls(A)]), call(2, 20, [user("go")], [calls(A)]))  # two fresh starts
    assert len(recs) == 2
    # a new user turn after the final answer continues the conversation
    (r,) = check(call(1, 10, [user("go")], [text("hi")]), call(2, 20, [user("go"), text("hi"), user("more")],
                                                                 [text("ok")]))
    assert r.verdict == "conforms" and len(r.summary["stitched"]["traces"]) == 2


def test_a_conversation_whose_first_recorded_request_carries_earlier_rounds_is_judged_from_its_history() -> None:
    spans = conversation([calls(("c3", "lookup", {"q": "c"}))],
                         [calls(("c3", "lookup", {"q": "c"})), answers(("c3", "C"))])[1:]  # trace 1 not recorded
    (r,) = check(*spans)
    assert r.verdict == "conforms" and len(r.summary["stitched"]["traces"]) == 2
    assert any("starts mid-conversation" in n for n in r.summary["notes"])
    assert r.checks["from"]["R11"] == "spans and history"
    assert "from history" in r.checks["why"]["R11"] and "from spans" in r.checks["why"]["R11"]
    # a violation in the history is reported too
    h = [user("go"), calls(A), answers(("c1", "A")), calls(A), answers(("c1", "A, again"))]
    (r,) = check(call(5, 10, h, [text("done")]))
    assert r.violation is not None and r.violation.rule == "R6" and r.checks["from"]["R11"] == "history"
    assert r.checks["from"]["R6"] == "history" and "in the history the run's first request carries" in (
        r.checks["why"]["R6"])


def test_runs_of_an_agent_invocation_are_never_stitched() -> None:
    from tests.test_oracle_telemetry import agent, chat

    h1 = [user("go")]
    recs = check(agent(1, trace=1), chat(2, 10, h1, [calls(A)], trace=1),
                 call(2, 20, [*h1, calls(A), answers(("c1", "A"))], [text("done")]))
    assert len(recs) == 2 and not any("stitched" in r.summary for r in recs)


def test_a_call_without_a_recorded_output_may_be_retried() -> None:
    h = [user("go"), calls(A), answers(("c1", "A"))]
    (r,) = check(call(1, 10, [user("go")], [calls(A)]), call(2, 20, h, None), call(3, 30, h, [text("done")]))
    assert len(r.summary["stitched"]["traces"]) == 3 and "output (not recorded)" in r.summary["stitched"]["evidence"][1]


def test_the_text_report_says_what_was_stitched(tmp_path: Any) -> None:
    import subprocess
    import sys

    p = tmp_path / "t.otlp.jsonl"
    p.write_text(otlp(*conversation([calls(A)], [calls(A), answers(("c1", "A"))])), encoding="utf-8")
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, "-m", "loopspec", "check", str(p)], capture_output=True, text=True,
                       env={"PYTHONPATH": str(root / "src"), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "note: stitched from 3 traces" in r.stdout and "carries trace" in r.stdout


# -- loopspec monitor ----------------------------------------------------------------------------------------------


def test_held_conversations_join_by_key_and_close_idle_evicted_or_at_shutdown() -> None:
    h = HeldConversations(idle=5, max_open=2)

    def closed(t: str) -> Closed:
        return Closed(t, [{}], 1, "root", None)

    h.add(closed("a"), [], [("extends", 2, 7)], now=0)
    h.add(closed("b"), [("resends", 3, 9), ("extends", 3, 9), ("extends", 2, 7)], [("extends", 4, 1)], now=1)  # a's
    h.add(closed("x"), [], [("extends", 4, 1)], now=2)  # shares b's exit key
    h.add(closed("y"), [("extends", 4, 1)], [], now=3)  # continues either: joins neither
    assert sorted(len(c.traces) for c in h.held.values()) == [1, 1, 2]
    (ev,) = h.overflow()
    assert [c.trace for c in ev.traces] == ["a", "b"] and ev.reason == "evicted" and "--max-open-runs" in ev.note
    assert [c.traces[0].trace for c in h.expired(now=7.5)] == ["x"]
    assert [(c.traces[0].trace, c.reason) for c in h.all()] == [("y", "shutdown")] and h.spans == 0
    h.add(closed("late"), [("extends", 4, 1)], [], now=10)  # continues x, judged already: said so
    (late,) = h.all()
    assert late.note is not None and "continues the conversation of trace x, judged already" in late.note


def test_monitor_and_check_give_the_same_verdicts_on_stitched_traces() -> None:
    drop = conversation([calls(A)], [])
    drop[2] = call(3, 30, json.loads(drop[1]["attributes"][1]["value"]["stringValue"]), [text("done")])
    cases = [conversation([calls(A)], [calls(A), answers(("c1", "A"))]), drop,
             conversation([calls(A)], [calls(A), answers(("c1", "A again"))])]
    for spans in cases:
        text_ = otlp(*spans)
        want = [(r.run, r.verdict, r.violation.rule if r.violation else None, r.summary.get("stitched"))
                for r in check(*spans)]
        got = [(v["run"], v["verdict"], (v.get("violation") or {}).get("rule"), v["summary"].get("stitched"))
               for v in monitor_verdicts(text_)]
        assert got == want
        assert all(len(v["monitor"]["conversation"]["traces"]) == 3 for v in monitor_verdicts(text_))


# -- real recordings: only the openai client instrumented (tests/telemetry_stitching.py) ----------------------------

GOLDEN = Path(__file__).resolve().parent / "golden" / "oracle"
STITCHED = [c for c in json.loads((GOLDEN / "RECORDINGS.json").read_text(encoding="utf-8")) if c.get("stitching")]
CLIENT_ONLY = [c for c in json.loads((GOLDEN / "RECORDINGS.json").read_text(encoding="utf-8"))
               if c.get("stitching") or c.get("group") in ("openinference-openai", "openai-v2")]


def test_every_stitching_group_and_scenario_is_recorded() -> None:
    from tests.telemetry_instrumentations import SCRIPTS
    from tests.telemetry_stitching import GROUPS

    assert {(c["group"], c["scenario"]) for c in STITCHED} == {(g, s) for g in GROUPS for s in SCRIPTS}


@pytest.mark.parametrize("case", CLIENT_ONLY, ids=[c["file"] for c in CLIENT_ONLY])
def test_a_stitched_recording_reports_what_happened(case: dict[str, Any]) -> None:
    """One run per conversation, from its first model call, stitched from one trace per model call; its verdict is
    what the framework did: a repeated id executed again is R6, a reused id executed R7, a repeat dropped without an
    answer R11, anything else conforms."""
    res = check_file(str(GOLDEN / case["file"]))
    assert not res.errors
    (r,) = res.records
    h = case["happened"]
    ran, proposed, answered = h["executed"], h["proposed"], h.get("answered")
    rule = r.violation.rule if r.violation else None
    if case["scenario"] == "replay" and len(ran) == 2:
        assert rule == "R6"
    elif case["scenario"] == "conflict" and len(ran) == 2:
        assert rule == "R7"
    elif case["scenario"] == "replay" and answered is not None and len(answered) < len(proposed):
        assert rule == "R11"
    else:
        assert rule is None
    assert case["rules"] == ([rule] if rule else [])
    calls = r.events
    assert calls == len(r.summary.get("stitched", {}).get("traces", [r.run])) and r.summary["executions"] == 0
    assert not any("mid-conversation" in n for n in r.summary.get("notes", ()))
    if calls > 1:
        assert r.run == r.summary["stitched"]["traces"][0]


def test_the_export_shapes_of_a_stitched_recording_are_judged_alike_by_check_and_monitor() -> None:
    stems = sorted({c["file"].rsplit(".", 2)[0] for c in CLIENT_ONLY if c["file"].endswith(".pb.json")})
    assert len(stems) >= 8
    for stem in stems:
        shapes = []
        for kind in ("otlp.jsonl", "console.json", "pb.json"):
            shapes.append([(r.run, r.verdict, r.violation.rule if r.violation else None, r.checks["verified"],
                            r.summary.get("stitched")) for r in check_file(str(GOLDEN / f"{stem}.{kind}")).records])
        assert shapes[0] == shapes[1] == shapes[2], stem
        for kind in ("otlp.jsonl", "pb.json"):
            live = [(v["run"], v["verdict"], (v.get("violation") or {}).get("rule"), v["checks"]["verified"],
                     v["summary"].get("stitched"))
                    for v in monitor_verdicts((GOLDEN / f"{stem}.{kind}").read_text(encoding="utf-8"))]
            assert live == shapes[0], (stem, kind)


def test_a_trace_whose_messages_cannot_be_read_is_unreadable_and_the_others_are_still_stitched() -> None:
    bad = span("chat gpt-4o", 1, None, 5, {"gen_ai.operation.name": "chat", "gen_ai.input.messages": [1, 2]}, trace=9)
    res = read_text_input(otlp(bad, *conversation([calls(A)], [calls(A), answers(("c1", "A"))])).encode(),
                          "t.otlp.jsonl")
    assert [(r.verdict, len(r.summary.get("stitched", {}).get("traces", [1]))) for r in res.records] == [
        ("unreadable", 1), ("conforms", 3)]
    assert "a message must be an object" in json.dumps(res.records[0].to_json())
