"""The oracle at scale: a million events stream in bounded memory; a sharded corpus is checked on a
Dask LocalCluster with the same verdicts as one process; --jobs checks files in parallel."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest

from loopspec._judge import default_spec
from loopspec.oracle import check_file
from loopspec.oracle._stream import LedgerStream
from loopspec.oracle.corpus import shard_by_run, template_runs, write_corpus
from tests.oracle_mutations import MUTATIONS, mutated, scenarios


def _check_peak(path: Path) -> tuple[int, int, int]:
    tracemalloc.start()
    try:
        with path.open("rb") as fh:
            ls = LedgerStream(default_spec(), str(path))
            conform = sum(1 for r in ls.run(fh) if getattr(r, "verdict", "") == "conforms")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return ls.events, conform, peak


@pytest.mark.slow
def test_a_million_events_stream_in_bounded_memory(tmp_path: Path) -> None:
    """The peak memory of a check does not grow with the file: 1M events (~220 MB) peak well under
    the 100k-event file's peak plus the small note each finished run leaves (~200 bytes)."""
    tmpl = template_runs(120)
    small, big = tmp_path / "small.ndjson", tmp_path / "big.ndjson"
    with small.open("w") as fh:
        s_info = write_corpus(fh, 100_000, templates=tmpl)
    with big.open("w") as fh:
        b_info = write_corpus(fh, 1_000_000, templates=tmpl)
    s_events, s_conf, s_peak = _check_peak(small)
    b_events, b_conf, b_peak = _check_peak(big)
    assert (s_events, s_conf) == (s_info["events"], s_info["runs"])
    assert (b_events, b_conf) == (b_info["events"], b_info["runs"])
    per_finished_run = 400
    assert b_peak < s_peak + per_finished_run * (b_info["runs"] - s_info["runs"]) + 4_000_000, (s_peak, b_peak)
    assert b_peak < big.stat().st_size / 10


def _corpus_with_violations(path: Path, events: int) -> int:
    scen = scenarios()
    with path.open("w") as fh:
        info = write_corpus(fh, events, templates=template_runs(60))
        for m in MUTATIONS[:5]:
            for e in mutated(m, scen):
                e["run"] = f"bad-{m.name}"
                fh.write(json.dumps(e) + "\n")
    return info["runs"] + 5


@pytest.mark.slow
def test_sharded_corpus_on_a_dask_local_cluster(tmp_path: Path) -> None:
    pytest.importorskip("dask.bag")
    distributed = pytest.importorskip("dask.distributed")
    from loopspec.oracle.dask import check_shards

    src = tmp_path / "corpus.ndjson"
    runs = _corpus_with_violations(src, 30_000)
    shards = shard_by_run(src, tmp_path / "shards", 6)
    whole = check_file(str(src))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        res = check_shards([str(p) for p in shards], client=client)
    assert res.summary.runs == whole.summary.runs == runs
    assert res.summary.events == whole.summary.events
    assert (res.summary.conform, res.summary.violate) == (whole.summary.conform, whole.summary.violate) == (runs - 5, 5)
    assert res.summary.by_rule == whole.summary.by_rule
    assert sorted(r.run for r in res.problems) == sorted(f"bad-{m.name}" for m in MUTATIONS[:5])


def test_sharding_keeps_runs_whole(tmp_path: Path) -> None:
    src = tmp_path / "c.ndjson"
    with src.open("w") as fh:
        write_corpus(fh, 3000, templates=template_runs(20))
    shards = shard_by_run(src, tmp_path / "s", 3)
    seen: dict[str, int] = {}
    for k, p in enumerate(shards):
        for line in p.read_text().splitlines():
            run = json.loads(line)["run"]
            assert seen.setdefault(run, k) == k
    assert sum(check_file(str(p)).summary.conform for p in shards) == len(seen)
