"""Section 6 in the oracle: the write rules checked from a run ledger, across the run's restarts.

A run whose write tools go through an operation ledger records each operation transition as a
``write_recorded`` event, and a process that resumes it after a crash starts with ``run_resumed``: the
run's operations as the operation ledger held them at the restart (SPEC.md R46, "In the run ledger").
:class:`WriteTracker` follows every key the run's events touch, across the processes, and checks:

* each transition is one of ``writes.toml`` from the state it names, and that state is the one the run's
  own events left the key in (R40) — a key confirmed or unknown that is sent again shows here (R44, R43);
* at a restart, the operation ledger's state of each of the run's keys can be reached from the state the
  run's events left it in (the crashed process's last events may be missing, never its transactions:
  R40), and the run's dispatch marks are not fewer than its events recorded;
* after a restart, every key ``dispatched`` is recorded unknown and every unknown key is reconciled before
  anything else (R46);
* the run's dispatch marks, over all its processes, never exceed its execution budget (R45), and a write
  execution is charged exactly when it recorded a dispatch mark (R45);
* an execution whose key ends unknown is answered ``OUTCOME_UNKNOWN`` (R42), one that ends confirmed ``ok``;
* at the terminal event no operation of the run is left in ``intent`` (nor ``dispatched``, unless the run
  was cancelled with the write in flight), and every one still unknown was reconciled after it became
  unknown (R46) — except a key a transition of which the operation ledger failed to record (a
  ``write_failed`` event, R40) in a run that ends UNRECONCILED. Whether the final answer finds a write unknown (T35) is computed from these events.

Pure bookkeeping over plain data: the verdicts are :class:`~loopspec.oracle._divergence.Divergence` /
:class:`~loopspec.oracle._divergence.RunInputError`, raised as the rest of the replay raises them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ...core import writes as w
from .._divergence import Divergence, RunInputError

if TYPE_CHECKING:
    from .._divergence import CheckerView as RunChecker

Json = Any

_STATES = frozenset(w.OP_STATES)
_SENDING = frozenset({"record_intent", "mark_dispatched"})
_RECONCILE = frozenset({"reconcile_applied", "reconcile_not_applied", "reconcile_unavailable"})


class WriteTracker:
    """The keys a run's write events touched and what is owed for them (see the module docstring)."""

    __slots__ = ("exec_ops", "failed", "keys", "marks", "owed", "own", "reconciled", "restarts")

    def __init__(self) -> None:
        self.keys: dict[str, str] = {}  # key -> the state the run's events (and restarts) left it in
        self.own: set[str] = set()  # the run's own operations: its intents, and those the ledger lists at a restart
        self.marks = 0  # the run's dispatch marks (R45), over all its processes
        self.reconciled: dict[str, bool] = {}  # unknown key -> reconciled since it became unknown
        self.owed: dict[str, str] | None = None  # after a restart: key -> what recovery owes it (R46)
        self.exec_ops: list[Mapping[str, Json]] = []  # the write events of the execution in progress
        self.restarts = 0
        self.failed: set[str] = set()  # keys a transition of which the operation ledger failed to record (R40)

    # -- the verdicts ------------------------------------------------------------------------------
    @staticmethod
    def _diverge(chk: RunChecker, ev: Mapping[str, Json], line: int, rule: str, kind: str, then: str,
                 expected: Json, observed: Json, hint: str | None) -> Exception:
        i = ev.get("index")
        return Divergence(rule, kind, then, expected, observed, index=i if i.__class__ is int else None,
                          expected_tid=chk.cur.id if chk.cur is not None else None,
                          observed_tid=chk.cur.id if chk.cur is not None else None, invariant_hint=hint,
                          at_step=False, event=ev, line=line)

    # -- run_resumed -------------------------------------------------------------------------------
    def restart(self, chk: RunChecker, ev: Mapping[str, Json], line: int) -> None:
        """A process resumes the run: compare the operation ledger's state with the run's events (R40), then
        note what recovery owes (R46)."""
        ops, marks = ev.get("operations"), ev.get("dispatched")
        if not isinstance(ops, list) or marks.__class__ is not int or marks < 0:
            raise RunInputError("run_resumed needs operations (a list) and dispatched (an integer >= 0)", line)
        self.restarts += 1
        listed: dict[str, str] = {}
        for k, op in enumerate(ops):
            if not isinstance(op, dict) or not isinstance(op.get("key"), str) or op.get("state") not in _STATES:
                raise RunInputError(f"run_resumed.operations[{k}]: expected {{key, tool, state}}", line)
            listed[op["key"]] = op["state"]
        for key in sorted(self.own):
            was = self.keys[key]
            now = listed.get(key)
            if now is None or not w.reachable(was, now):
                shown = "holds no operation for it" if now is None else f"holds it {now}"
                raise self._diverge(
                    chk, ev, line, "R40", "operation-lost",
                    f"Then the operation ledger keeps every transition that completed before the crash (R40): the run's "
                    f"events left key {key[:12]}… {was}, and the ledger can only have moved it on from there; but at "
                    f"restart {self.restarts} it {shown}.", {"state": f"reachable from {was}"}, {"state": now},
                    "INV-W-LEDGER-TRUTH")
        if marks < self.marks:
            raise self._diverge(
                chk, ev, line, "R40", "dispatch-marks-lost",
                f"Then the run's dispatch marks survive the crash (R40, R45): its events recorded {self.marks}; but at "
                f"restart {self.restarts} the operation ledger counts {marks}.", {"dispatched": self.marks},
                {"dispatched": marks}, "INV-W-LEDGER-TRUTH")
        self.marks = marks
        self.owed = {}
        for key, state in listed.items():
            self.keys[key] = state
            self.own.add(key)
            if state in ("dispatched", "unknown"):
                self.owed[key] = state
                self.reconciled[key] = False
        self._check_budget(chk, ev, line)

    def _recovered(self, chk: RunChecker, ev: Mapping[str, Json], line: int) -> None:
        """The first event after the recovery: nothing may still be owed (R46)."""
        owed = self.owed or {}
        self.owed = None
        left = sorted(k for k in owed if self.keys[k] == "dispatched" or not self.reconciled.get(k, True))
        if left:
            key = left[0]
            raise self._diverge(
                chk, ev, line, "R46", "not-reconciled-on-restart",
                f"Then after the restart every operation of the run dispatched without a result is recorded unknown, "
                f"and every unknown one is reconciled, before anything else (R46); but key {key[:12]}… "
                f"({owed[key]} at the restart) is still {self.keys[key]}, unreconciled, when the run goes on with "
                f"{ev.get('type')}.", {"reconciled": left}, {"type": ev.get("type")}, "INV-W-RECONCILED")

    # -- write_recorded ----------------------------------------------------------------------------
    def on_write(self, chk: RunChecker, ev: Mapping[str, Json], line: int) -> None:
        name = w.OP_BY_ID.get(ev.get("op"))  # type: ignore[arg-type]
        key, frm, to = ev.get("key"), ev.get("from"), ev.get("to")
        if name is None or not isinstance(key, str) or frm not in _STATES or to not in _STATES:
            raise RunInputError("write_recorded needs op (W01..W10), key, from and to (operation states)", line)
        known = self.keys.get(key)
        if known is not None and known != frm:
            self._lying(chk, ev, line, name, key, known, frm)
        try:
            dest = w.op_step(frm, name)
        except w.OpError:
            self._forbidden(chk, ev, line, name, key, frm)
        if self.owed is not None and name not in _RECONCILE and name != "lose_outcome":
            self._recovered(chk, ev, line)
        if dest != to:
            raise self._diverge(
                chk, ev, line, "R40", "operation-transition-not-in-machine",
                f"Then {name} ({ev.get('op')}) takes an operation from {frm} to {dest} (writes.toml); but the ledger "
                f"records it ending {to}.", {"to": dest}, {"to": to}, "INV-W-LEDGER-TRUTH")
        self.keys[key] = to
        if name == "record_intent":
            self.own.add(key)
        elif name == "mark_dispatched":
            self.marks += 1
            self._check_budget(chk, ev, line)
        if to == "unknown":
            self.reconciled[key] = name == "reconcile_unavailable"
        else:
            self.reconciled.pop(key, None)
        if ev.get("index") is not None:
            self.exec_ops.append(ev)

    def _lying(self, chk: RunChecker, ev: Mapping[str, Json], line: int, name: str, key: str, known: str,
               frm: str) -> None:
        if known == "confirmed" and name in _SENDING:
            rule, kind, inv = "R44", "confirmed-key-sent-again", "INV-W-ONE-EFFECT"
        elif known in ("unknown", "dispatched") and name in _SENDING:
            rule, kind, inv = "R43", "sent-again-before-reconciliation", "INV-W-NO-BLIND-REDISPATCH"
        else:
            rule, kind, inv = "R40", "operation-state-mismatch", "INV-W-LEDGER-TRUTH"
        raise self._diverge(
            chk, ev, line, rule, kind,
            f"Then key {key[:12]}… is {known}, as the run's own events left it{self._across()}; but the ledger "
            f"records {name} ({ev.get('op')}) from {frm}.", {"from": known}, {"from": frm, "op": ev.get("op")}, inv)

    def _forbidden(self, chk: RunChecker, ev: Mapping[str, Json], line: int, name: str, key: str, frm: str) -> None:
        if frm == "confirmed" and name in _SENDING:
            rule, kind, inv = "R44", "confirmed-key-sent-again", "INV-W-ONE-EFFECT"
        elif frm in ("unknown", "dispatched") and name in _SENDING:
            rule, kind, inv = "R43", "sent-again-before-reconciliation", "INV-W-NO-BLIND-REDISPATCH"
        elif name == "mark_dispatched":
            rule, kind, inv = "R39", "dispatch-without-intent", "INV-W-DURABLE-BEFORE-SEND"
        else:
            rule, kind, inv = "R40", "operation-transition-not-in-machine", "INV-W-LEDGER-TRUTH"
        sources = ", ".join(w.OP_TRANSITIONS[name][0])
        raise self._diverge(
            chk, ev, line, rule, kind,
            f"Then {name} ({ev.get('op')}) fires only from {sources} (writes.toml); but the ledger records it for "
            f"key {key[:12]}… in {frm}{self._across()}.", {"from": list(w.OP_TRANSITIONS[name][0])},
            {"from": frm, "op": ev.get("op")}, inv)

    def _across(self) -> str:
        return f", across {self.restarts} restart(s)" if self.restarts else ""

    def _check_budget(self, chk: RunChecker, ev: Mapping[str, Json], line: int) -> None:
        limit = chk.config.limits.max_executions
        if limit is not None and self.marks > limit:
            raise self._diverge(
                chk, ev, line, "R45", "dispatched-beyond-budget",
                f"Then a budget of {limit} allows at most {limit} dispatch marks in the run, after any number of "
                f"restarts (R45); but the run has recorded {self.marks}{self._across()}.", {"dispatched": limit},
                {"dispatched": self.marks}, "INV-W-DISPATCH-BUDGET")

    # -- the loop's events ---------------------------------------------------------------------------
    def before(self, chk: RunChecker, ev: Mapping[str, Json], typ: str, line: int) -> None:
        """Called for every other event of a run with writes, before the replay handles it."""
        if self.owed is not None:
            self._recovered(chk, ev, line)
        if typ == "execution_started":
            self.exec_ops = []
        elif typ == "execution_finished":
            self._finished(chk, ev, line)
        elif typ == "run_terminal":
            self._terminal(chk, ev, line)

    def _finished(self, chk: RunChecker, ev: Mapping[str, Json], line: int) -> None:
        ops = [o for o in self.exec_ops if o.get("index") == ev.get("index")]
        self.exec_ops = []
        if not ops:
            return  # not a write, or answered from the ledger's record of its request (R40): nothing new recorded
        marked = any(o.get("op") == w.OP_IDS["mark_dispatched"] for o in ops)
        charged = ev.get("charged", True)
        if charged.__class__ is not bool:
            return  # not a ledger the replay can read: it says so (execution_finished.charged)
        if charged is not marked:
            raise self._diverge(
                chk, ev, line, "R45", "charged-without-dispatch" if charged else "dispatch-not-charged",
                f"Then a write's execution uses the budgets up exactly when it recorded a dispatch mark (R45); but "
                f"request #{ev.get('index')}'s {'did not' if not marked else 'did'} and the ledger records charged "
                f"{str(charged).lower()}.", {"charged": marked}, {"charged": charged}, "INV-W-DISPATCH-BUDGET")
        last = ops[-1].get("to")
        out = ev.get("outcome")
        if last == "unknown" and out != w.OUTCOME_UNKNOWN:
            raise self._diverge(
                chk, ev, line, "R42", "unknown-answered-as-known",
                f"Then a write whose outcome is unknown is answered OUTCOME_UNKNOWN, never as a failure or a result "
                f"(R42); but request #{ev.get('index')}'s key is unknown and its execution records {out}.",
                {"outcome": w.OUTCOME_UNKNOWN}, {"outcome": out}, "INV-W-LEDGER-TRUTH")
        if last == "confirmed" and out != "ok":
            raise self._diverge(
                chk, ev, line, "R41", "confirmed-answered-as-failure",
                f"Then a write the external system confirmed is answered with its result (R41, R44); but request "
                f"#{ev.get('index')}'s key is confirmed and its execution records {out}.", {"outcome": "ok"},
                {"outcome": out}, "INV-W-LEDGER-TRUTH")

    def unknown(self) -> tuple[str, ...]:
        """The run's operations still unknown — or left ``dispatched`` or ``intent`` by a transition the operation
        ledger failed to record (``write_failed``, R40): what the final answer finds (T35, R46)."""
        return tuple(sorted(k for k in self.own if self.keys.get(k) == "unknown"
                            or (k in self.failed and self.keys.get(k) in ("dispatched", "intent"))))

    # -- write_failed ------------------------------------------------------------------------------
    def on_failed(self, chk: RunChecker, ev: Mapping[str, Json], line: int) -> None:
        """A transition the operation ledger failed to record (R40): the key's state is what the run's events left
        it in, and the run may end UNRECONCILED with it unsettled."""
        key, frm = ev.get("key"), ev.get("from")
        if w.OP_BY_ID.get(ev.get("op")) is None or not isinstance(key, str) or frm not in _STATES:  # type: ignore[arg-type]
            raise RunInputError("write_failed needs op (W01..W10), key and from (an operation state)", line)
        self.failed.add(key)

    def _terminal(self, chk: RunChecker, ev: Mapping[str, Json], line: int) -> None:
        status = ev.get("status")
        unreconciled = ev.get("stopReason") == "UNRECONCILED"
        for key in sorted(self.own):
            st = self.keys[key]
            # a run that ends UNRECONCILED may leave a key whose transition its operation ledger failed to record
            excused = unreconciled and key in self.failed
            if (st == "intent" or (st == "dispatched" and status != "CANCELLED")) and not excused:
                raise self._diverge(
                    chk, ev, line, "R46", "operation-left-in-flight",
                    f"Then a run that ends leaves none of its operations in intent (abandoned, W10) or dispatched "
                    f"(R46); but key {key[:12]}… is {st} at its terminal event.", {"state": "not intent/dispatched"},
                    {"state": st}, "INV-W-RECONCILED")
            if st == "unknown" and not self.reconciled.get(key, False) and not excused:
                raise self._diverge(
                    chk, ev, line, "R46", "unknown-not-reconciled-at-end",
                    f"Then every unknown outcome of the run is reconciled before its terminal state (R46); but key "
                    f"{key[:12]}… became unknown and was not looked up again before the run ended {status}.",
                    {"reconciled": True}, {"reconciled": False}, "INV-W-RECONCILED")
