"""The oracle across restarts (SPEC.md R46, "In the run ledger"): a run ledger written by a crashed process and
the process that resumed it is one run; the write rules hold across the restart. The ledgers are the golden
corpus' real crashed-and-resumed runs (tests/oracle_restarts.py), mutated the way a broken implementation would
record them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from loopspec.oracle import read_text_input

from .writes.merchant import kills

GOLDEN = Path(__file__).parent / "golden" / "oracle"


def _run(name: str) -> list[dict[str, Any]]:
    lines = (GOLDEN / "ledger-restart-pass.ndjson").read_text(encoding="utf-8").splitlines()
    return [ev for ev in map(json.loads, lines) if ev["run"] == name]


def _verdict(evs: list[dict[str, Any]]) -> tuple[str, str | None, str | None]:
    (rec,) = read_text_input("".join(json.dumps(e) + "\n" for e in evs).encode()).records
    v = rec.violation
    return rec.verdict, v.rule if v else None, v.kind if v else None


def _resumed_at(evs: list[dict[str, Any]]) -> int:
    return next(i for i, e in enumerate(evs) if e["type"] == "run_resumed")


def test_R46_every_crash_point_resumed_conforms_across_the_restart() -> None:
    for point in ("after-intent", "after-dispatch-mark", "after-send", "after-result", "after-answer", "after-lookup"):
        evs = _run(f"restart-{point}")
        assert sum(e["type"] == "run_resumed" for e in evs) == len(kills(point))  # after-lookup: two restarts
        assert _verdict(evs) == ("conforms", None, None), point


def test_R44_a_resumed_process_that_sends_a_confirmed_key_again_is_caught() -> None:
    """After a crash after-result the key is confirmed; a resumed process that forgot it and records a new intent
    (from absent) for the replayed request re-sends a confirmed write."""
    evs = _run("restart-after-result")
    r = _resumed_at(evs)
    i = next(i for i, e in enumerate(evs) if i > r and e["type"] == "write_recorded" and e["op"] == "W09")
    evs[i].update(op="W01", **{"from": "absent", "to": "intent"}, resultDigest=None)
    assert _verdict(evs) == ("violates", "R44", "confirmed-key-sent-again")


def test_R43_a_key_unknown_across_the_restart_is_not_sent_before_its_lookup() -> None:
    """Crash after the send: at the restart the key is dispatched; recorded unknown, then sent again without the
    lookup (the reconciliation replaced by a new intent) — the lost answer's write may be applied twice."""
    evs = _run("restart-lookup-after-send")
    r = _resumed_at(evs)
    i = next(i for i, e in enumerate(evs) if i > r and e["type"] == "write_recorded" and e["op"] == "W06")
    evs[i].update(op="W01", **{"from": "unknown", "to": "intent"}, resultDigest=None)
    verdict, rule, kind = _verdict(evs)
    assert (verdict, rule) == ("violates", "R43"), kind


def test_R45_dispatch_marks_of_every_process_count_against_the_budget() -> None:
    """Budget 1: the crashed process's dispatch mark (A-1) and the resumed one's (B-2) are two."""
    evs = _run("restart-after-result")
    for e in evs:
        if e["type"] in ("run_started", "run_resumed"):
            e["config"]["limits"]["maxExecutions"] = 1
    verdict, rule, kind = _verdict(evs)
    assert (verdict, rule) in (("violates", "R45"), ("violates", "R9")), kind


def test_R40_the_restart_must_not_hold_less_than_the_events_recorded() -> None:
    evs = _run("restart-after-result")
    evs[_resumed_at(evs)]["dispatched"] = 0
    assert _verdict(evs)[:2] == ("violates", "R40")


def test_a_run_ledger_that_starts_at_the_restart_is_checked_from_there() -> None:
    evs = _run("restart-after-send")
    assert _verdict(evs[_resumed_at(evs):]) == ("conforms", None, None)


def test_malformed_write_events_make_the_run_unreadable_never_a_traceback() -> None:
    evs = _run("restart-after-send")
    r = _resumed_at(evs)
    w = next(i for i, e in enumerate(evs) if e["type"] == "write_recorded")
    f = next(i for i, e in enumerate(evs) if e["type"] == "execution_finished")
    for i, field, value in ((w, "op", ["W01"]), (r, "operations", {"a": 1}), (r, "operations", [{"key": 5}]),
                            (r, "dispatched", -1), (f, "charged", "no"), (w, "from", "elsewhere")):
        bad = [dict(e) for e in evs]
        bad[i][field] = value
        assert _verdict(bad) == ("unreadable", None, None), (field, value)
