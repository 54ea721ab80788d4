"""Hostile inputs too large to commit, written at test time with a fixed seed (make_corpus.py):
memory stays bounded — measured as the child's peak RSS, which sees the parser's allocations —
however many lines are bad, however large a line or a document is."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from . import make_corpus
from .runner import CliRun, assert_sane, run_cli

pytestmark = pytest.mark.slow


def check(*args: str, cwd: Path, parser: str = "orjson", wall: float = 300) -> CliRun:
    return run_cli(["check", *args], wall=wall, cwd=cwd, env=dict(os.environ, LOOPSPEC_JSON_PARSER=parser))


def test_memory_does_not_grow_with_bad_lines(tmp_path: Path) -> None:
    """Issue 14: 1M garbage lines took 258 MB, 3M 716 MB (every error kept). Now the first 100 errors
    of a file are shown and the rest counted: ten times the bad lines, the same peak."""
    small = make_corpus.garbage_ledger(tmp_path / "small.ndjson", 20_000)
    big = make_corpus.garbage_ledger(tmp_path / "big.ndjson", 200_000)
    r_small = check(small.name, cwd=tmp_path)
    r_big = check(big.name, cwd=tmp_path)
    for r in (r_small, r_big):
        assert_sane(r, exit_code=2, max_rss_mb=150)
        assert r.stderr.count("\n") <= 103, r.describe()  # 100 errors, the "more than 100" line, the run
        assert "more than 100 input errors: the rest are counted, not shown" in r.stderr
    assert "200000 input errors" in r_big.stdout or "input errors" in r_big.stdout, r_big.describe()
    assert r_big.peak_rss_mb < r_small.peak_rss_mb + 10, (r_small.peak_rss_mb, r_big.peak_rss_mb)
    # the one real run is still judged: it is complete, but lines past the garbage cannot be told apart
    assert "merchants" in r_big.stdout


def test_json_report_of_many_bad_lines_is_bounded_and_strict(tmp_path: Path) -> None:
    from .runner import strict_json

    big = make_corpus.garbage_ledger(tmp_path / "big.ndjson", 100_000)
    r = check("--format", "json", big.name, cwd=tmp_path)
    assert_sane(r, exit_code=2, max_rss_mb=150)
    doc = strict_json(r.stdout)
    assert isinstance(doc, dict) and len(doc["inputErrors"]) == 100
    assert doc["summary"]["inputErrors"] == doc["summary"]["inputErrorsNotListed"] + 100 > 100_000 - 1000


@pytest.mark.parametrize("fmt", ["auto", "ledger"])
def test_random_bytes(tmp_path: Path, fmt: str) -> None:
    """Issue 14: random bytes took 2.3 GB in 15 s."""
    p = make_corpus.random_bytes(tmp_path / "random.bin", 40_000_000)
    r = check("--input-format", fmt, p.name, cwd=tmp_path, wall=600)
    assert_sane(r, exit_code=2, max_rss_mb=150)


@pytest.mark.parametrize("one_line", [True, False], ids=["one line", "pretty"])
def test_a_document_past_16_mib(tmp_path: Path, one_line: bool) -> None:
    """A transcript file that is one 20 MB JSON document: refused with a message saying what to do,
    without holding more than the limit."""
    p = make_corpus.big_document(tmp_path / "big.json", 20_000_000, one_line)
    r = check(p.name, cwd=tmp_path)
    assert_sane(r, exit_code=2, max_rss_mb=150)
    assert f"{p.name}:1: " in r.stderr and "(the limit; --max-line-bytes raises it)" in r.stderr
    assert "write one conversation or trace a line (NDJSON)" in r.stderr


def test_a_16_mib_document_is_read(tmp_path: Path) -> None:
    """Just under the limit the same document is checked (the limit is not a guess)."""
    p = make_corpus.big_document(tmp_path / "big.json", 15_000_000, False)
    r = check("--quiet", p.name, cwd=tmp_path)
    assert_sane(r, exit_code=0, max_rss_mb=400)  # measured: 263 MB (15 MB pretty-printed, positions kept)


def test_a_line_past_16_mib_in_a_ledger(tmp_path: Path) -> None:
    runs = make_corpus._runs()
    m, b = runs["merchants"], runs["budget"]
    p = tmp_path / "huge-line.ndjson"
    with p.open("w") as fh:
        for e in m[:-1]:
            fh.write(make_corpus._dumps(e) + "\n")
        fh.write(make_corpus._dumps({**m[-1], "pad": "x" * (17 * 1024 * 1024)}) + "\n")
        for e in b:
            fh.write(make_corpus._dumps(e) + "\n")
    for parser in ("json", "orjson"):
        r = check(p.name, cwd=tmp_path, parser=parser)
        assert_sane(r, exit_code=2, max_rss_mb=150)
        assert f"{p.name}:37: run 'merchants': line longer than 16777216 bytes" in r.stderr, r.describe()
        assert "ok   budget" in r.stdout and "R21" not in r.stdout
