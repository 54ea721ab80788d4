"""The conformance oracle: check recorded run ledgers, traces and transcripts against the spec, run by run.

``loopspec check FILE...`` is its command line (``loopspec.cli.check``). From Python::

    from loopspec.oracle import check_file
    res = check_file("runs.ndjson")
    res.summary.exit_code, [r.violation.rule for r in res.records if r.violation]

One judge, two drivers: a ledger run is replayed through the pure reference core (the same guards
and effects as ``loopspec.core.rules.drive``), and every verdict is the fuzzer judge's
:class:`~loopspec.judge.verdict.Violation` / :class:`~loopspec.judge.verdict.Verdict`; ``loopspec-trace/1`` files
are judged by the fuzzer's judge itself. See docs/oracle.md.

Layer: a driver, beside ``fuzz``, ``checker`` and ``render`` (none of which it imports); it may import
``judge``, ``engine``, ``core``, ``spec`` and ``support``. A file goes through its stages in one direction:
see docs/oracle.md.
"""

from __future__ import annotations

from ._check import INPUT_FORMATS, FileResult, check_file, iter_check_file, read_text_input
from ._records import LEDGER_ASSUMPTIONS, LEDGER_NOT_WITNESSED, InputError, RunRecord, Summary
from ._stream import Options

__all__ = [
    "INPUT_FORMATS",
    "LEDGER_ASSUMPTIONS",
    "LEDGER_NOT_WITNESSED",
    "FileResult",
    "InputError",
    "Options",
    "RunRecord",
    "Summary",
    "check_file",
    "iter_check_file",
    "read_text_input",
]
