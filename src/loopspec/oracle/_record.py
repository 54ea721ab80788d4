"""Recording verdicts: the last stage. A run's verdict (:class:`~loopspec.oracle._records.Judged`, from the
judge) becomes its :class:`~loopspec.oracle._records.RunRecord` in the report, located in its file; a line
or a file that cannot be read becomes an :class:`~loopspec.oracle._records.InputError`. The driver adds
each to the summary; the command line prints them (text or JSON) and draws the diagrams.
"""

from __future__ import annotations

from typing import Any

from ._records import InputError, Judged, RunRecord

Json = Any


def record(file: str, j: Judged) -> RunRecord:
    """The record of a run of ``file``; the path on the spec machine says which command drew it from where."""
    trace = j.trace
    if trace is not None:
        start = {"start": trace["start"]} if "start" in trace else {}
        trace = {"path": trace["path"], "failed": trace["failed"], "label": trace["label"],
                 "source": f"loopspec check {file}", **start}
    return RunRecord(file, j.run, j.input, j.verdict, j.events, j.lines, j.summary, j.checks, j.violation, j.at,
                     j.prefix, j.error, j.error_line, trace, j.amends)


def unreadable(file: str, run: str, events: int, lines: tuple[int, int], message: str, line: int | None,
               input_kind: str = "ledger") -> RunRecord:
    """The record of a run that cannot be judged: why, and the line that says so."""
    return RunRecord(file, run, input_kind, "unreadable", events, lines, error=message, error_line=line)


def input_error(file: str, line: int | None, message: str) -> InputError:
    """A line or a file that cannot be read and belongs to no run."""
    return InputError(file, line, message)
