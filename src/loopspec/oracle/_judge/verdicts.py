"""A ledger run's life as the judge sees it: starting a run's check (or continuing it after a restart),
what is kept of a run that ended, and its verdict as :class:`~loopspec.oracle._records.Judged` data.

The group stage (:mod:`loopspec.oracle._group.ledger`) says which run an event belongs to; the checker
(:mod:`.ledger`) replays its events; these functions turn the checker's state into the verdict — the
rules verified and assumed, the violation with its explanation (:mod:`.explain`), where it happened, the
longest conforming prefix and the path on the spec machine — which the record stage then records.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ...judge.batch import pick_invariant
from ...judge.verdict import Violation
from .._divergence import Divergence, Finished, RunInputError
from .._records import LEDGER_NOT_WITNESSED, WRITE_RULES_VERIFIED, Judged
from .._tables import Tables
from .classify import after_terminal_divergence
from .explain import explanation
from .ledger import RunChecker
from .writes import WriteTracker

Json = Any

#: The stop reason a run without a terminal event is judged with when ``--allow-incomplete`` lets it end.
_INCOMPLETE: Final = {"incomplete": True}


def start(t: Tables, run: str, ev: Mapping[str, Json], line: int, raw: bytes) -> RunChecker:
    """The check of a run that starts with ``ev`` (``run_started``, or ``run_resumed`` when the ledger holds
    no earlier process of the run: it is then checked from the restart on). Raises :class:`RunInputError`
    or :class:`Divergence` when the run cannot be checked, and KeyError and the like for an event of the
    wrong shape."""
    typ = ev.get("type")
    if ev.get("seq") != 1 or ev.get("seq").__class__ is not int:
        raise RunInputError(f"{typ} has seq {ev.get('seq')!r}; a run's events are numbered from 1", line)
    chk = RunChecker(t, run, ev, line, config_key=_config_key(raw))
    if typ == "run_resumed":
        chk.writes = WriteTracker()
        chk.writes.restart(chk, ev, line)
    return chk


def resume(old: RunChecker, ev: Mapping[str, Json], line: int, raw: bytes) -> RunChecker:
    """``run_resumed`` for a run being checked: its process crashed (it has no terminal event), another goes
    on. The loop is replayed again from the restart, which is numbered from 1; the write rules go on across
    it. Raises :class:`RunInputError` (and KeyError and the like) when the new process's start cannot be
    read; the restart's own check is :func:`restart`."""
    if ev.get("seq") != 1 or ev.get("seq").__class__ is not int:
        raise RunInputError(f"run_resumed has seq {ev.get('seq')!r}; a resumed run's events are numbered from 1"
                            " again", line)
    new = RunChecker(old.t, old.run_id, ev, line, config_key=_config_key(raw))
    new.first_line, new.events = old.first_line, old.events + 1
    new.writes = old.writes if old.writes is not None else WriteTracker()
    return new


def restart(chk: RunChecker, ev: Mapping[str, Json], line: int) -> None:
    """Check the operations a resumed run starts with against the run's writes so far (raises
    :class:`Divergence` or :class:`RunInputError`)."""
    assert chk.writes is not None
    chk.writes.restart(chk, ev, line)


def _config_key(raw: bytes) -> bytes | None:
    k = raw.find(b'"config":')
    return raw[k:] if k >= 0 else None


def finished(chk: RunChecker) -> Finished:
    """What is kept of a run that ended conforming: enough to judge a late result."""
    return Finished(True, chk.inflight, chk.terminal_line, seq=chk.seq,
                    abandoned=chk.abandoned if chk.concurrent else None)


def after_end(fin: Finished, ev: Mapping[str, Json], line: int) -> Divergence | None:
    """An event of a run that ended conforming (numbered right after its last one): None when it is the late
    result of an execution the end cut off, else the violation it makes (R21; R26 for a late result used)."""
    if ev.get("type") == "late_result_discarded" and fin.late_expected(ev):
        return None
    return after_terminal_divergence(fin, ev, line)


# --------------------------------------------------------------------------------------------
# Verdicts
# --------------------------------------------------------------------------------------------


_CHECKS: dict[tuple[int, tuple[str, ...], bool], dict[str, list[str]]] = {}


def ledger_checks(t: Tables, chk: RunChecker) -> dict[str, list[str]]:
    """The run's checks (computed once per set of assumed rules: runs share the lists, which nothing
    mutates)."""
    assumed = tuple(chk.checks.assumed())
    writes = chk.writes is not None
    key = (id(t), assumed, writes)
    hit = _CHECKS.get(key)
    if hit is None:
        not_w = list(LEDGER_NOT_WITNESSED)
        skip = set(assumed) | set(not_w) | {"R0"}
        verified = [r for r in t.rule_ids if r not in skip]
        if writes:  # section 6, from the run's write events across its restarts (writes.py)
            verified += [r for r in WRITE_RULES_VERIFIED if r not in skip]
        hit = {"verified": verified, "assumed": list(assumed), "notWitnessed": not_w}
        if len(_CHECKS) > 64:
            _CHECKS.clear()
        _CHECKS[key] = hit
    return hit


def conforming(t: Tables, chk: RunChecker, *, incomplete: bool = False) -> Judged:
    """A run that conforms (with ``incomplete``: one without a terminal event, let end by
    ``--allow-incomplete``)."""
    summary = chk.summary()
    if incomplete:
        summary = {**summary, **_INCOMPLETE}
    return Judged(chk.run_id, "ledger", "conforms", chk.events, (chk.first_line, chk.last_line), summary,
                  ledger_checks(t, chk))


def at_eof(t: Tables, chk: RunChecker) -> Judged:
    """A run still open at the end of its file: it violates R21 (no terminal event)."""
    return violating(t, chk, chk.close_at_eof())


def violating(t: Tables, chk: RunChecker, d: Divergence, *, line: int | None = None) -> Judged:
    """The run's first violation ``d`` (``line``: where it was met, when ``d`` does not say)."""
    if d.line is None:
        d.line = line
    steps = chk.step_records()
    if not d.at_step and steps:
        failed_step = steps[-1]
        prefix = steps[:-1]
        path = [s.tid for s in prefix] + [failed_step.tid]
        failed: int | None = len(prefix)
    else:
        prefix = steps
        path = [s.tid for s in prefix]
        failed = None
        if d.expected_tid is not None:
            path.append(d.expected_tid)
            failed = len(prefix)
    omitted = (chk.step - len(steps)) if chk.step > len(steps) else 0
    event_index = chk.events - 1 if d.event is not None else chk.events
    last_ok_line = prefix[-1].line if prefix else chk.first_line
    rules = t.rules
    violated = d.invariants
    invariant = pick_invariant(t.spec, d.rule, violated)
    if invariant is None and d.invariant_hint in rules.get(d.rule, ()):
        invariant = d.invariant_hint
    v = Violation(rule=d.rule, kind=d.kind, index=d.index, expected=d.expected, observed=d.observed,
                  explanation=explanation(t, chk, d, prefix, omitted), invariant=invariant, invariants=violated,
                  transition=d.expected_tid, checked_by=rules.get(d.rule, ()))
    at = {"event": event_index, "seq": d.event.get("seq") if d.event is not None else None, "line": d.line,
          "observedTransition": d.observed_tid}
    pre = {"events": event_index, "steps": omitted + len(prefix), "lastLine": last_ok_line,
           "path": [s.tid for s in prefix], "start": chk.window_start, "omitted": omitted}
    trace: dict[str, Json] = {"path": path, "failed": failed, "label": f"run {chk.run_id}: {d.rule} {d.kind}"}
    if chk.window_start != t.spec.initial.id or omitted:
        trace["start"] = chk.window_start
    return Judged(chk.run_id, "ledger", "violates", chk.events, (chk.first_line, chk.last_line), chk.summary(),
                  ledger_checks(t, chk), v, at, pre, trace=trace)


def amendment(t: Tables, run: str, d: Divergence, ev: Mapping[str, Json], line: int, fin: Finished) -> Judged:
    """A run reported as conforming that a later event makes violate: the amendment of its verdict."""
    rules = t.rules
    inv = d.invariant_hint if d.invariant_hint in rules.get(d.rule, ()) else None
    expl = (f"Let run {run!r} end with its terminal event on line {fin.line} (conforming up to there).\n{d.then}")
    v = Violation(rule=d.rule, kind=d.kind, index=d.index, expected=d.expected, observed=d.observed, explanation=expl,
                  invariant=inv, invariants=(), transition=None, checked_by=rules.get(d.rule, ()))
    return Judged(run, "ledger", "violates", fin.seq, (fin.line, line), {}, {}, v,
                  {"event": fin.seq - 1, "seq": ev.get("seq"), "line": line, "observedTransition": ev.get("via")},
                  {"events": fin.seq - 1, "lastLine": fin.line}, amends=True)
