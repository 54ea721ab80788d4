"""The conformance oracle: check recorded run ledgers, traces and transcripts against the spec, run by run.

``loopspec check FILE...`` is its command line (``loopspec.cli.check``). From Python::

    from loopspec.oracle import check_file
    res = check_file("runs.ndjson")
    res.summary.exit_code, [r.violation.rule for r in res.records if r.violation]

One judge, two drivers: a ledger run is replayed through the pure reference core (the same guards
and effects as ``loopspec.core.rules.drive``), and every verdict is the fuzzer judge's
:class:`~loopspec.judge.verdict.Violation` / :class:`~loopspec.judge.verdict.Verdict`; ``loopspec-trace/1`` files
are judged by the fuzzer's judge itself. See docs/oracle.md.

A file goes through five stages in one direction, called in order by the driver (``_check``; ``_split``
for ``--jobs N`` on one ledger), none calling another or back into an earlier one:

1. **detect** (``_detect``): the file's format, from its head;
2. **read** (``_read/``): bytes into events — a ledger's lines as event objects, documents as each
   conversation's items (in the format it shows) or as telemetry spans;
3. **group** (``_group/``): events into runs — a ledger's interleaved events by run id, spans by trace and
   agent invocation (a transcript's conversation is one run already);
4. **judge** (``_judge/``): each run against the spec — replayed through the reference core, or walked item
   by item; the verdict as data (``_records.Judged``);
5. **record** (``_record``): each verdict as the report's :class:`RunRecord`.

The stages hand each other plain data from the modules below them (``_items``, ``_records``, ``_options``,
``_divergence``, ``_tables``, ``_schema``, ``_json``); pyproject.toml's "oracle-stages" import contract keeps
every stage from importing an earlier one. See docs/oracle.md.

Layer: a driver, beside ``fuzz``, ``checker`` and ``render`` (none of which it imports); it may import
``judge``, ``engine``, ``core``, ``spec`` and ``support``.
"""

from __future__ import annotations

from ._check import INPUT_FORMATS, FileResult, check_file, check_trace, iter_check_file, read_text_input
from ._options import Options
from ._records import LEDGER_ASSUMPTIONS, LEDGER_NOT_WITNESSED, InputError, RunRecord, Summary

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
    "check_trace",
    "iter_check_file",
    "read_text_input",
]
