"""Checking corpora beyond one machine with Dask (optional: ``pip install 'loopspec[dask]'``).

Runs are independent, so a corpus split into shards that each hold whole runs
(:func:`loopspec.oracle.corpus.shard_by_run`, or any split by run id) can be checked anywhere: a
``dask.bag`` over the shard paths maps each shard to its verdicts on whichever worker gets it (each
worker streams its shard with constant memory), and the per-shard summaries are merged. Pass a
``dask.distributed.Client`` to use a cluster; without one Dask's default scheduler runs it locally.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ._records import RunRecord, Summary

Json = Any


@dataclass
class CorpusResult:
    summary: Summary
    #: the records of every run that did not conform (violations and unreadable runs)
    problems: list[RunRecord] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _check_shard(path: str, input_format: str, max_line: int, allow_incomplete: bool) -> tuple[Summary, list[RunRecord],
                                                                                                list[str]]:
    from ._check import check_file
    from ._options import Options

    res = check_file(path, input_format=input_format,
                     options=Options(max_line=max_line, allow_incomplete=allow_incomplete))
    return res.summary, [r for r in res.records if r.verdict != "conforms"], [e.text() for e in res.errors]


def check_shards(paths: Sequence[str], *, client: Any = None, input_format: str = "auto",
                 max_line: int = 16 * 1024 * 1024, allow_incomplete: bool = False) -> CorpusResult:
    """Check every shard with ``dask.bag`` (one partition per shard) and merge the results."""
    import dask.bag as db

    bag = db.from_sequence(list(paths), npartitions=max(1, len(paths))).map(
        _check_shard, input_format=input_format, max_line=max_line, allow_incomplete=allow_incomplete)
    parts = client.compute(bag).result() if client is not None else bag.compute()
    out = CorpusResult(Summary())
    for summary, problems, errors in parts:
        out.summary.merge(summary)
        out.problems += problems
        out.errors += errors
    return out
