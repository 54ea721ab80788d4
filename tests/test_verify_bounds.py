"""The bounds file of loopspec verify: parsing, overrides, the committed expected figures, and the
default bound itself (every invariant holds; every spec transition reached)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from loopspec.checker.bounds import (
    BoundsError,
    apply_overrides,
    default_bounds_path,
    load_bounds,
    parse_bounds,
    update_expected,
)
from loopspec.checker.universe import Universe
from loopspec.cli import main
from loopspec.cli.verify import _section6
from loopspec.spec.loader import load_spec

UPDATE = "loopspec verify --update-expected"


def raw() -> dict:
    return tomllib.loads(default_bounds_path().read_text())


def test_default_bounds_meet_the_brief() -> None:
    """At least 6 calls, 3 ids, 3 tool names (allow-listed and not), 2 values, budgets 0..3, both
    modes, every failure category; the loop scope adds rounds, finals, model errors, the deadline,
    authorization, retries, limits and cancellation."""
    b = load_bounds()
    batch = b.scope("batch")
    assert batch.calls >= 6 and batch.ids >= 3 and len(b.values) == 2
    assert len(b.tools) >= 3 and any(not t.allow_listed for t in b.tools)
    assert set(batch.budgets) >= {0, 1, 2, 3} and set(batch.modes) == {"abort", "continue"}
    assert len(batch.failures) == 3
    loop = b.scope("loop")
    assert loop.cancel and loop.authorize and loop.model_error and loop.final and loop.deadline
    assert loop.max_retries >= 1 and loop.max_requests is not None and loop.calls > loop.max_requests
    # section 5: three calls in flight at once, a barrier, the same id twice, both modes, the
    # deadline and cancellation while executions run; the slow bounds add slots, retries, limits
    conc = b.scope("concurrent")
    assert max(conc.concurrency) >= 3 and conc.calls >= 3 and conc.ids >= 2 and not conc.slow
    assert set(conc.modes) == {"abort", "continue"} and conc.cancel and conc.deadline and 1 in conc.budgets
    tools = {t.name: t for t in b.tools}
    assert conc.tools is not None and any(tools[n].read_only for n in conc.tools)
    assert any(tools[n].allow_listed and not tools[n].read_only for n in conc.tools)
    slow = [s for s in b.scopes.values() if s.slow]
    assert {s.name for s in slow} == {"concurrent-4", "concurrent-retries", "writes-3"}
    assert any(s.calls > max(s.concurrency) for s in slow if s.concurrent) and any(s.max_retries for s in slow)
    # section 6: a write tool, in a default scope of its own (both modes, final answers) and no other
    writes = b.scope("writes")
    assert not writes.slow and writes.final and set(writes.modes) == {"abort", "continue"} and writes.tools
    assert [n for n in writes.tools if tools[n].write] == ["order"]
    assert all(not tools[n].write for sc in b.scopes.values() if not sc.name.startswith("writes")
               for n in (sc.tools or [t.name for t in b.tools if not t.write]))


@pytest.mark.parametrize(("path", "value", "message"), [
    (("scope", "batch", "calls"), "six", "scope.batch.calls"),
    (("scope", "batch", "modes"), ["abort", "sometimes"], "scope.batch.modes"),
    (("scope", "batch", "deadline"), 3.0, "a batch has no such setting"),
    (("scope", "loop", "max_rounds"), None, "finite max_rounds"),
    (("values",), ["svc-trusted", "x"], "principal must differ"),
    (("scope", "loop", "surprise"), 1, "unknown field"),
    (("scope", "concurrent", "concurrency"), [0], "scope.concurrent.concurrency"),
    (("scope", "concurrent", "tools"), ["lookup", "nope"], "no \\[\\[tool\\]\\] named 'nope'"),
    (("scope", "concurrent", "values"), 5, "at most 2"),
    (("scope", "batch", "expected", "reached"), ["T03", "T99"], "'T99' is not a transition of the spec"),
    (("scope", "batch", "expected", "reached"), ["T03", "T03"], "distinct transition ids"),
])
def test_bad_bounds_are_rejected_naming_the_field(path: tuple[str, ...], value: object, message: str) -> None:
    doc = raw()
    node = doc
    for k in path[:-1]:
        node = node[k]
    if value is None:
        node.pop(path[-1], None)
    else:
        node[path[-1]] = value
    with pytest.raises(BoundsError, match=message):
        parse_bounds(doc, "bounds.toml")


def test_overrides_change_one_scope_and_drop_its_expected_figures() -> None:
    b = apply_overrides(load_bounds(), ["batch.calls=2", "loop.budgets=[1]"])
    assert b.scope("batch").calls == 2 and b.scope("batch").expected == {}
    # what the scope reaches at the committed bounds stays: coverage within smaller ones is judged against it
    assert b.scope("batch").reaches == load_bounds().scope("batch").reaches is not None
    assert b.scope("loop").budgets == (1,)
    with pytest.raises(BoundsError, match=r"SCOPE\.FIELD=VALUE"):
        apply_overrides(load_bounds(), ["calls=2"])
    with pytest.raises(BoundsError, match="no scope"):
        apply_overrides(load_bounds(), ["nope.calls=2"])


def test_update_expected_rewrites_only_the_expected_tables(tmp_path: Path) -> None:
    p = tmp_path / "bounds.toml"
    p.write_text(default_bounds_path().read_text())
    text = update_expected(p, {"batch": {"states": 1, "transitions": 2, "depth": 3, "reached": ["T03", "T04"]}})
    doc = tomllib.loads(text)
    assert doc["scope"]["batch"]["expected"] == {"states": 1, "transitions": 2, "depth": 3, "reached": ["T03", "T04"]}
    assert doc["scope"]["loop"]["expected"] == raw()["scope"]["loop"]["expected"]
    assert doc["scope"]["batch"]["calls"] == raw()["scope"]["batch"]["calls"]


def test_universe_alphabet_is_closed_under_the_symmetries() -> None:
    """Every call with an id exists for every id, every call with a value for every value."""
    b = load_bounds()
    U = Universe.build(b, b.scope("batch"))
    labels = set(U.calls)
    for lab in labels:
        for cid in U.ids:
            if lab.startswith(f"{cid}:"):
                for other in U.ids:
                    assert lab.replace(f"{cid}:", f"{other}:", 1) in labels
        for v, w in ((b.values[0], b.values[1]), (b.values[1], b.values[0])):
            if f"({v})" in lab:
                assert lab.replace(f"({v})", f"({w})") in labels


def test_loopspec_verify_exhausts_the_default_bound(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`loopspec verify` at the default bound: exit 0, no invariant breaks, every spec transition is
    reached, and the figures are the ones committed in spec/bounds.toml (a change to the spec, the
    core or the checker shows up here)."""
    rc = main(["verify", "--format", "json", "--out", str(tmp_path)])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0 and report["passed"] and report["violation"] is None and report["unreached"] == []
    assert set(report["coverage"]["transitions"]) == {t.id for t in load_spec().transitions}
    # section 6's transitions, which only a write whose outcome is unknown takes (T34 abort_on_unknown, T35
    # final_answer_unreconciled), are reached too: by the scope with a write tool, and by no other
    section6 = _section6(load_spec())
    assert section6 == {"T34", "T35"}
    assert all(report["coverage"]["transitions"].values()), report["coverage"]["transitions"]
    assert report["answers"]["OUTCOME_UNKNOWN"] and report["stop_reasons"]["UNRECONCILED"]
    assert all(report["answers"].values()) and all(report["stop_reasons"].values())  # every code, every reason
    b = load_bounds()
    assert {sc.name for sc in b.scopes.values() if section6 & set(sc.reaches or ())} == {"writes", "writes-3"}
    # what each scope reaches is recorded, and together the scopes reach every transition of the spec
    loop_ids = [t.id for t in load_spec().transitions]
    assert {t for s in b.scopes.values() for t in (s.reaches or ())} == set(loop_ids)
    assert report["coverage"]["reachable"] == loop_ids
    assert report["coverage"]["complete"] and report["expected_differs"] == []
    for sc in report["scopes"]:
        exp = b.scope(sc["scope"]).expected
        got = {"states": sc["states"], "transitions": sc["transitions"], "depth": sc["depth"]}
        assert sc["complete"]
        assert got == exp, (f"scope {sc['scope']}: explored {got}, spec/bounds.toml expects {exp}. If the change "
                            f"is intended, run `{UPDATE}` and commit spec/bounds.toml with it.")
    assert json.loads((tmp_path / "coverage.json").read_text())["transitions"] == report["coverage"]["transitions"]


@pytest.mark.slow
@pytest.mark.parametrize("scope", ["concurrent-4", "concurrent-retries", "writes-3"])
def test_larger_concurrent_bounds_hold_and_match_their_expected_figures(scope: str) -> None:
    """Sections 5 and 6 at the larger bounds (explored only when named): every invariant holds, and the
    figures are the ones committed beside the bounds (`loopspec verify --scope NAME --update-expected`)."""
    from loopspec.checker.explore import explore

    b = load_bounds()
    ex = explore(b, b.scope(scope))
    assert ex.complete and ex.violation is None
    got = {"states": ex.states, "transitions": ex.transitions, "depth": ex.depth}
    assert got == b.scope(scope).expected, f"run `loopspec verify --scope {scope} --update-expected` if intended"


def test_slow_scopes_are_explored_only_when_named(capsys: pytest.CaptureFixture[str]) -> None:
    small = ["--bound", "batch.calls=1", "--bound", "loop.calls=1", "--bound", "concurrent.calls=1"]
    assert main(["verify", *small, "--format", "json"]) == 0
    assert [s["scope"] for s in json.loads(capsys.readouterr().out)["scopes"]] == ["batch", "loop", "writes",
                                                                                 "concurrent"]
    assert main(["verify", "--scope", "concurrent-4", "--bound", "concurrent-4.calls=1", "--format", "json"]) == 0
    assert [s["scope"] for s in json.loads(capsys.readouterr().out)["scopes"]] == ["concurrent-4"]
