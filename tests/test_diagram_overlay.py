"""Trace and coverage overlays: inputs, path reconstruction from ledgers, highlighting, shading."""

from __future__ import annotations

import io
import json
import re
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from loopspec import (
    CancelToken,
    Ledger,
    Limits,
    Tool,
    ToolFailure,
    load_rules,
    load_spec,
    run_batch,
    run_loop,
)
from loopspec.render import (
    OverlayError,
    extract_machine,
    machine_dot,
    machine_mermaid,
    make_overlay,
    overlay_markdown,
    read_coverage,
    read_trace,
)
from loopspec.render import style as st
from loopspec.render.overlay import Coverage, Trace

SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"],
          "additionalProperties": False}


@pytest.fixture(scope="module")
def machine():
    spec = load_spec()
    return extract_machine(spec, load_rules(spec=spec))


def _edge_line(dot: str, tid: str) -> str:
    for line in dot.splitlines():
        m = re.search(r'\bid="?([\w]+)"?', line)
        if " -> " in line and m and tid in m.group(1).split("_"):
            return line
    raise AssertionError(f"no edge for {tid}")


# -- traces ----------------------------------------------------------------------------------

PATH = ["T04", "T14", "T20", "T21", "T27", "T12", "T24"]


def test_trace_numbers_the_steps_on_the_edges(machine) -> None:
    tr = read_trace(json.dumps({"path": PATH, "failed": None}), "t.json", machine)
    ov = make_overlay(machine, tr)
    assert [s.number for s in ov.steps] == list(range(1, len(PATH) + 1))
    assert [(s.source, s.dest) for s in ov.steps][:3] == [("decided", "proposed"), ("proposed", "validated"),
                                                          ("validated", "executing")]
    dot = machine_dot(machine, ov)
    for n, tid in enumerate(PATH, start=1):
        line = _edge_line(dot, tid)
        assert f"#{n}" in line, (tid, n)
        assert f'color="{st.PATH_COLOR}"' in line
    assert not [ln for ln in dot.splitlines() if " -> " in ln and f'color="{st.FAIL_COLOR}"' in ln]
    untouched = _edge_line(dot, "T03")
    assert f'color="{st.FAINT}"' in untouched and "#" not in re.sub(r'"#[0-9a-f]{6}"', "", untouched)


def test_trace_failing_step_is_red(machine) -> None:
    tr = read_trace(json.dumps({"path": PATH, "failed": 5}), "t.json", machine)
    ov = make_overlay(machine, tr)
    assert ov.failed_step is not None and ov.failed_step.transition == "T12"
    dot = machine_dot(machine, ov)
    line = _edge_line(dot, "T12")
    assert f'color="{st.FAIL_COLOR}"' in line and "✖ #6" in line
    assert f'color="{st.FAIL_COLOR}"' not in _edge_line(dot, "T24")
    # the state the failing step entered is outlined red
    node = next(ln for ln in dot.splitlines() if re.match(r"\s*returned \[", ln))
    assert f'color="{st.FAIL_COLOR}"' in node
    assert "failing step #6 (T12)" in dot
    assert "failing step 6" in machine_mermaid(machine, ov)
    assert "| 6 ✖ |" in overlay_markdown(machine, ov)


def test_trace_repeated_transition_lists_every_step(machine) -> None:
    path = ["T04", "T14", "T20", "T21", "T27", "T13", "T27", "T13", "T27", "T07", "T04", "T06"]
    ov = make_overlay(machine, Trace(tuple(path)))
    assert [s.number for s in ov.steps_of("T27")] == [5, 7, 9]
    assert "#5 #7 #9" in _edge_line(machine_dot(machine, ov), "T27")


def test_multi_source_transition_takes_its_source_from_the_walk(machine) -> None:
    ov = make_overlay(machine, Trace(("T04", "T14", "T20", "T28"), failed=3))
    assert ov.steps[-1].source == "executing" and ov.steps[-1].dest == "cancelled"


def test_trace_start_state(machine) -> None:
    tr = read_trace('{"path": ["T20", "T23"], "start": "validated"}', "t.json", machine)
    assert make_overlay(machine, tr).steps[0].source == "validated"


# -- coverage --------------------------------------------------------------------------------


@given(hs.integers(0, 10_000), hs.integers(0, 10_000), hs.integers(1, 10_000))
def test_coverage_shading_is_monotone_in_counts(a: int, b: int, top: int) -> None:
    lo, hi = sorted((a, b))
    top = max(top, hi)
    assert st.luminance(st.coverage_color(lo, top)) >= st.luminance(st.coverage_color(hi, top))
    assert st.coverage_penwidth(lo, top) <= st.coverage_penwidth(hi, top)
    assert st.coverage_level(lo, top) <= st.coverage_level(hi, top)
    if hi > 0:
        assert st.coverage_level(hi, top) > 0


def test_coverage_shades_edges_and_states_by_count(machine) -> None:
    counts = {"T04": 40, "T14": 20, "T20": 10, "T21": 5, "T27": 1}
    cov = read_coverage(json.dumps({"transitions": counts, "runs": 3}), "c.json", machine)
    ov = make_overlay(machine, coverage=cov)
    dot = machine_dot(machine, ov)
    lums = []
    for tid in sorted(counts, key=counts.get):
        m = re.search(r'\bcolor="(#[0-9a-f]{6})"', _edge_line(dot, tid))
        assert m is not None
        lums.append(st.luminance(m.group(1)))
        assert f"×{counts[tid]}" in dot
    assert lums == sorted(lums, reverse=True), "more hits, darker edge"
    never = _edge_line(dot, "T03")
    assert f'color="{st.UNHIT_COLOR}"' in never and "dotted" in never and "×0" in never
    assert ov.state_count("decided") == 40 and ov.state_count("completed") == 0
    assert "5/28 transitions hit" in dot.replace(f"{len(machine.edges)}", "28")
    md = overlay_markdown(machine, ov)
    assert "never hit:" in md and "T03" in md


# -- ledgers ---------------------------------------------------------------------------------


def _tools(fail_temporary: bool = False) -> list[Tool]:
    def length(a, c):
        if fail_temporary:
            raise ToolFailure("DEPENDENCY_TEMPORARY")
        return len(a["text"])

    return [Tool.define("length", length, SCHEMA)]


call_st = hs.fixed_dictionaries({
    "id": hs.sampled_from(["a", "b", "c"]),
    "name": hs.sampled_from(["length", "length", "shell"]),
    "arguments": hs.one_of(hs.fixed_dictionaries({"text": hs.sampled_from(["x", "yy"])}), hs.just({"text": 1})),
})


@settings(max_examples=60, deadline=None)
@given(hs.lists(call_st, max_size=6), hs.integers(0, 3), hs.sampled_from(["abort", "continue"]))
def test_ledger_path_is_the_engine_path_for_batches(calls, budget, mode) -> None:
    machine = extract_machine(load_spec())
    sink = io.StringIO()
    out = run_batch(calls, tools=_tools(), budget=budget, mode=mode, ledger=Ledger(sink), run_id="r1")
    tr = read_trace(sink.getvalue(), "ledger.ndjson", machine)
    assert tr.path == out.transitions
    last = machine.state(machine.edge(tr.path[-1]).dest)
    assert (tr.failed is None) == (last.status == "COMPLETED")


def test_ledger_path_with_retries_rounds_and_cancellation(machine) -> None:
    sink = io.StringIO()
    ledger = Ledger(sink)
    turns = iter([[{"id": "a", "name": "length", "arguments": {"text": "x"}}], {"final": "ok"}])
    runs = [run_loop(lambda t: next(turns), tools=_tools(), ledger=ledger, run_id="loop", clock=lambda: 0.0)]
    runs.append(run_loop(lambda t: [{"id": "a", "name": "length", "arguments": {"text": "x"}}],
                         tools=_tools(fail_temporary=True), limits=Limits(max_rounds=1, max_retries=2),
                         ledger=ledger, run_id="retry", clock=lambda: 0.0))
    assert runs[-1].transitions.count("T22") == 2
    token = CancelToken()
    release = threading.Event()

    def slow(a, c):
        token.cancel()
        release.wait(2)
        return 1

    runs.append(run_loop(lambda t: [{"id": "z", "name": "slow", "arguments": {}}],
                         tools=[Tool.define("slow", slow, {"type": "object"})], cancel=token, ledger=ledger,
                         run_id="cancel", clock=lambda: 0.0))
    release.set()
    assert runs[-1].status == "CANCELLED"
    text = sink.getvalue()
    for out in runs:
        tr = read_trace(text, "l.ndjson", machine, run=out.run_id)
        assert tr.path == out.transitions, out.run_id
        assert tr.label == f"run {out.run_id}"
    assert read_trace(text, "l.ndjson", machine).path == runs[0].transitions, "default: the first run"
    cov = read_coverage(text, "l.ndjson", machine)
    total = {}
    for out in runs:
        for t in out.transitions:
            total[t] = total.get(t, 0) + 1
    assert dict(cov.transitions) == total and cov.runs == 3
    only = read_coverage(text, "l.ndjson", machine, run="retry")
    assert dict(only.transitions)["T22"] == 2 and only.runs == 1


# -- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "where", "msg"),
    [
        ("", "f:", "empty"),
        ('{"path": ["T04",\n  "T99"]}', "f:2:", "unknown transition 'T99'"),
        ('{"path": ["T04",\n "T20"]}', "f:2:", "T20 cannot fire in state 'proposed'"),
        ('{"path": ["T04"], "failed": 3}', "f:1:", "failed"),
        ('{"path": ["T04"], "failed": true}', "f:1:", "failed"),
        ('{"path": "T04"}', "f:1:", "list of transition ids"),
        ('{"path": [],\n "faild": 1}', "f:2:", "unknown field 'faild'"),
        ('{"path": [], "start": "nowhere"}', "f:1:", "unknown state"),
        ('{"transitions": {"T04": 1}}', "f:1:", "coverage file"),
        ('{"path": \n [1,}', "f:2:", "not JSON"),
        ('[1, 2]', "f:1:", "JSON object"),
        ('{"run": "a", "type": "x", "via": "T04"}\n{"run": "a", "via": "T04"\n', "f:2:", "not JSON"),
        ('{"type": "x", "via": "T04"}\n', "f:1:", '"run"'),
        ('{"run": "a", "via": "T77"}\n{"run": "a", "via": "T04"}\n', "f:1:", "unknown transition 'T77'"),
        ('{"run": "a", "via": 4}\n', "f:1:", "via"),
        ('{"run": "a", "type": "m", "via": "T04"}\n{"run": "a", "type": "e", "via": "T21"}\n', "f:2:",
         "T21 cannot follow state 'proposed'"),
        ('{"run": "a", "type": "run_started"}\n', "f:1:", "took no transition"),
        ('\n\n', "f:", "empty"),
    ],
)
def test_bad_trace_input_names_file_and_line(machine, text: str, where: str, msg: str) -> None:
    with pytest.raises(OverlayError) as exc:
        read_trace(text, "f", machine)
    assert str(exc.value).startswith(where), str(exc.value)
    assert msg in str(exc.value)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize(
    ("text", "where", "msg"),
    [
        ('{"transitions": {"T04": 1,\n "T99": 2}}', "f:2:", "unknown transition 'T99'"),
        ('{"transitions": {\n"T04": -1}}', "f:2:", "count"),
        ('{"transitions": {"T04": 1.5}}', "f:1:", "count"),
        ('{"transitions": {"T04": false}}', "f:1:", "count"),
        ('{"transitions": [1]}', "f:1:", "object"),
        ('{"transitions": {}, "runs": -2}', "f:1:", "runs"),
        ('{"path": ["T04"]}', "f:1:", "trace file"),
    ],
)
def test_bad_coverage_input_names_file_and_line(machine, text: str, where: str, msg: str) -> None:
    with pytest.raises(OverlayError) as exc:
        read_coverage(text, "f", machine)
    assert str(exc.value).startswith(where) and msg in str(exc.value)


def test_run_selection_errors(machine) -> None:
    ledger = '{"run": "a", "type": "m", "via": "T04"}\n{"run": "b", "type": "m", "via": "T04"}\n'
    with pytest.raises(OverlayError, match=r"no run 'zz' in this ledger \(runs: a, b\)"):
        read_trace(ledger, "f", machine, run="zz")
    with pytest.raises(OverlayError, match="--run applies to ledger files only"):
        read_trace('{"path": []}', "f", machine, run="a")
    assert read_trace(ledger, "f", machine, run="b").label == "run b"


def test_make_overlay_rejects_a_path_that_is_not_a_walk(machine) -> None:
    with pytest.raises(ValueError, match=r"path\[1\]"):
        make_overlay(machine, Trace(("T04", "T04")))
    ov = make_overlay(machine, coverage=Coverage((("T04", 2),)))
    assert ov.count("T04") == 2 and ov.count("T05") == 0
