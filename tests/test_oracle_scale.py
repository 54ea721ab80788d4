"""The oracle at scale: a million events stream in bounded memory (the peak RSS of a child process,
on valid and on invalid input, and for one run as long as a ledger gets); a sharded corpus is checked on a
Dask LocalCluster with the same verdicts as one process; --jobs checks files in parallel."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from loopspec.oracle import check_file
from loopspec.oracle.corpus import shard_by_run, template_runs, write_corpus
from tests.hostile.runner import CliRun, assert_sane, run_cli
from tests.oracle_mutations import MUTATIONS, mutated, scenarios


def _child(path: Path, *args: str) -> CliRun:
    """``loopspec check`` of ``path`` in a child process: the peak RSS is the kernel's, so the
    parser's allocations count (tracemalloc sees only Python's)."""
    return run_cli(["check", "--quiet", *args, str(path)], wall=900)


_SUMMARY = re.compile(r"checked (\d+) runs?, (\d+) events? in 1 file: (\d+) conform, (\d+) violate")


def _summary(run: CliRun) -> tuple[int, int, int, int]:
    m = _SUMMARY.search(run.stdout)
    assert m is not None, run.describe()
    return tuple(int(x) for x in m.groups())  # type: ignore[return-value]


@pytest.mark.slow
def test_a_million_events_stream_in_bounded_memory(tmp_path: Path) -> None:
    """The peak RSS of a check does not grow with the file: 1M events (~220 MB) peak within the 100k-event
    file's peak plus the small note each finished run leaves (measured ~120 bytes; allowed 400)."""
    tmpl = template_runs(120)
    small, big = tmp_path / "small.ndjson", tmp_path / "big.ndjson"
    with small.open("w") as fh:
        s_info = write_corpus(fh, 100_000, templates=tmpl)
    with big.open("w") as fh:
        b_info = write_corpus(fh, 1_000_000, templates=tmpl)
    r_small, r_big = _child(small), _child(big)
    for r, info in ((r_small, s_info), (r_big, b_info)):
        assert_sane(r, exit_code=0, max_rss_mb=200)
        assert _summary(r) == (info["runs"], info["events"], info["runs"], 0)
    per_finished_run = 400 / 2**20
    assert r_big.peak_rss_mb < r_small.peak_rss_mb + per_finished_run * (b_info["runs"] - s_info["runs"]) + 4, \
        (r_small.peak_rss_mb, r_big.peak_rss_mb)
    assert r_big.peak_rss_mb < big.stat().st_size / 2**20 / 2


@pytest.mark.slow
def test_bad_lines_do_not_grow_memory(tmp_path: Path) -> None:
    """Invalid input, measured the same way: a corpus with 1 line in 50 bad and one with 1 line in 5
    bad (garbage, NaN, deep nesting, invalid UTF-8, a 30-digit integer) peak alike; every good run
    is still checked, the bad lines are counted and only the first 100 listed."""
    tmpl = template_runs(60)
    bad = [b"garbage {\n", b'{"t": NaN}\n', b"[" * 300 + b"\n", b'{"run": "\xff"}\n', b"9" * 30 + b"\n"]

    def corpus(path: Path, every: int) -> dict[str, int]:
        buf = io.StringIO()
        info = write_corpus(buf, 200_000, templates=tmpl)
        with path.open("wb") as fh:
            for k, line in enumerate(buf.getvalue().splitlines(keepends=True)):
                if k % every == every - 1:
                    fh.write(bad[k % len(bad)])
                fh.write(line.encode())
        return info

    few, many = tmp_path / "few.ndjson", tmp_path / "many.ndjson"
    i_few, i_many = corpus(few, 50), corpus(many, 5)
    r_few, r_many = _child(few), _child(many)
    for r, info in ((r_few, i_few), (r_many, i_many)):
        assert_sane(r, exit_code=2, max_rss_mb=200)
        assert _summary(r) == (info["runs"], info["events"], info["runs"], 0), r.describe()
        assert r.stderr.count("\n") == 101, r.describe()  # the first 100 errors and one line saying there are more
    assert r_many.peak_rss_mb < r_few.peak_rss_mb + 4, (r_few.peak_rss_mb, r_many.peak_rss_mb)


@pytest.mark.slow
def test_one_open_run_holds_its_call_ids(tmp_path: Path) -> None:
    """A single run as long as a ledger gets: its memory does not grow with its events (past 4096
    requests only the newest requests, answers and executions are kept) but does with its distinct
    call ids, whose bindings R5-R8 need for the whole run (docs/oracle.md: about 0.5 KB an id)."""
    from tests.hostile.make_corpus import long_run

    short = long_run(tmp_path / "short.ndjson", 4_000, 100)
    long_few = long_run(tmp_path / "long-few.ndjson", 16_000, 100)
    long_many = long_run(tmp_path / "long-many.ndjson", 16_000, 16_000)
    runs = {p.name: _child(p) for p in (short, long_few, long_many)}
    for r in runs.values():
        assert_sane(r, exit_code=0, max_rss_mb=200)
        assert _summary(r)[2] == 1
    assert runs["long-few.ndjson"].peak_rss_mb < runs["short.ndjson"].peak_rss_mb + 3, \
        {k: r.peak_rss_mb for k, r in runs.items()}
    per_id = (runs["long-many.ndjson"].peak_rss_mb - runs["long-few.ndjson"].peak_rss_mb) * 2**20 / 15_900
    assert per_id < 1024, per_id


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
