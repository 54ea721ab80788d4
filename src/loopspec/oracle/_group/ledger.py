"""Grouping a run ledger's events into runs: the runs of one file are interleaved, one event a line.

:class:`LedgerRuns` keeps, for each run id, either the run's open check (an object of the judge's, which
this stage only holds) or, once the run has ended, a small :class:`~loopspec.oracle._divergence.Finished`
note (enough to judge a late result and to tell an event after the terminal one from a new run; a run
that did not conform shares one note). It decides what an event of a run that is not open means — a new
run, a run id used again, an event after the run's end, a run that starts in the middle — and whose run a
line that cannot be read was, without judging anything.

Memory grows with the number of *open* runs, plus the run id and a small note per finished run, never
with the number of events or of bad lines.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from .._divergence import GAVE_UP, Finished
from .._tables import EVENT_TYPES

Json = Any

# What an event of a run that is not open is (:meth:`LedgerRuns.not_open`):
ERROR: Final = "error"  # an input error of the file (the message)
UNREADABLE: Final = "unreadable"  # the run cannot be checked (the message)
START: Final = "start"  # the run starts here
AFTER: Final = "after"  # an event after the end of a run that conformed: judge it against the run's note
IGNORE: Final = "ignore"  # the run's verdict is already given


class LedgerRuns:
    """The runs of one ledger file: open (id -> the judge's check) and finished (id -> note)."""

    def __init__(self) -> None:
        self.open: dict[str, Any] = {}
        self.finished: dict[str, Finished] = {}
        self.lost_line = 0  # the last line that could not be read and could not be given to a run

    def not_open(self, ev: Mapping[str, Json], run: Json) -> tuple[str, Any]:
        """What an event of a run that is not open is: (:data:`ERROR`, message), (:data:`UNREADABLE`,
        message: the run is given up), (:data:`START`, None), (:data:`AFTER`, the run's note: the event
        follows it in order) or (:data:`IGNORE`, None)."""
        if not isinstance(run, str) or not run:
            return ERROR, 'a ledger event needs "run": a non-empty string'
        typ = ev.get("type")
        if not isinstance(typ, str) or typ not in EVENT_TYPES:
            return ERROR, None  # the event's type is what is wrong (the caller says why)
        fin = self.finished.get(run)
        if fin is not None:
            if not fin.conformed:
                return IGNORE, None  # the run's verdict is already given; its later events change nothing
            if typ == "run_started":
                return ERROR, (f"run id {run!r} is used again: its run already ended on line {fin.line} (run ids "
                               "must be unique in a ledger)")
            if ev.get("seq") != fin.seq + 1:
                return ERROR, (f"seq {ev.get('seq')!r} follows seq {fin.seq} of run {run!r}, which ended on line "
                               f"{fin.line}")
            fin.seq += 1
            return AFTER, fin
        if typ not in ("run_started", "run_resumed"):
            self.finished[run] = GAVE_UP
            return UNREADABLE, (f"run {run!r} starts with {typ} (seq {ev.get('seq')!r}), not run_started: its "
                                "configuration is unknown, so it cannot be checked")
        return START, None

    def opened(self, run: str, chk: Any) -> None:
        self.open[run] = chk

    def ended(self, run: str, note: Finished) -> None:
        """The run ended conforming: ``note`` is what is kept of it."""
        del self.open[run]
        self.finished[run] = note

    def given_up(self, run: str) -> None:
        """The run's verdict is a violation or unreadable (or it could not start): its later events are ignored."""
        self.open.pop(run, None)
        self.finished[run] = GAVE_UP

    def lost(self, line: int, run: str | None) -> tuple[str, Any]:
        """Line ``line`` cannot be read and names ``run`` (or none): it ends that open run as unreadable
        ((:data:`UNREADABLE`, the run's check)), is the first line of a run that is then unreadable
        ((:data:`START`, None)), or is an input error of the file ((:data:`ERROR`, None)) — and a run still
        open at the end of the file is then not blamed for a missing terminal event (the line may have
        held it)."""
        chk = self.open.get(run) if run is not None else None
        if chk is not None:
            return UNREADABLE, chk
        if run is not None and run not in self.finished:
            self.finished[run] = GAVE_UP
            return START, None
        self.lost_line = line
        return ERROR, None

    def left_open(self) -> list[Any]:
        """The runs still open (at the end of the file), in the order they started; they are given up."""
        left = list(self.open.values())
        for run in list(self.open):
            self.given_up(run)
        return left
