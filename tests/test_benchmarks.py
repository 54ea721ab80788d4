"""The benchmark scripts still run and still print what the README quotes (tiny sizes; no timing is
asserted: performance figures are read, never tested)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(script: str, *args: str, timeout: float = 300) -> str:
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_check_speed_prints_limit_check_and_skeleton() -> None:
    out = _run("check_speed.py", "--events", "3000", "--repeat", "1", "--memory", "--jobs", "2", "--stages",
               "--scaling", "1,3")
    assert "parse only" in out and "(the limit)" in out and "check/limit" in out
    assert "skeleton" in out and "leaving" in out  # the lower bound the README's Measured section cites
    events = int(re.search(r"^ledger: (\d+) events, (\d+) runs", out, re.M).group(1))  # type: ignore[union-attr]
    assert 3000 <= events < 3200
    # every printed ratio is the ratio of the printed rates (the figures the README quotes are consistent)
    rows = re.findall(r"parse only +([\d,]+) events/s \(the limit\) \| check +([\d,]+) events/s \| check/limit = "
                      r"(\d+)% \| skeleton +([\d,]+) events/s = (\d+)%", out)
    assert rows, out
    for limit, rate, pct, skel, skel_pct in rows:
        lim = float(limit.replace(",", ""))
        assert abs(float(rate.replace(",", "")) / lim * 100 - int(pct)) <= 1
        assert abs(float(skel.replace(",", "")) / lim * 100 - int(skel_pct)) <= 1
    # check's memory, measured on a child process (the kernel's peak RSS, which sees the parser), exit 0
    m = re.search(r"peak RSS of loopspec check \(a child process, the kernel's figure\): ([\d.]+) MB while checking "
                  r"(\d+) events, exit (\d+)", out)
    assert m is not None, out
    assert 10 < float(m.group(1)) < 200 and int(m.group(2)) == events and m.group(3) == "0", m.group(0)
    assert "peak traced memory (tracemalloc" in out
    assert "check --jobs 2" in out and "best: check/limit = " in out  # the --jobs ratio on one file
    # --scaling: per process count, the busiest process's CPU time against the parse's, and their quotient
    scal = re.findall(r"--jobs (\d+): busiest process ([\d.]+) s CPU against ([\d.]+) s to parse = (\d+)%", out)
    assert [int(j) for j, *_ in scal] == [1, 3], out
    for _, busy, parse, pct in scal:
        assert abs(float(parse) / float(busy) * 100 - int(pct)) <= 1 + 100 * 0.006 / float(busy)
    # --stages replays with stand-ins for RunChecker's setup and feed: they must keep up with its attributes
    assert re.search(r"stages of the check \(\w+\), CPU us/event.* replay -?[\d.]+ = [\d.]+;", out), out


def test_fuzz_speed_prints_limit_fuzz_and_floor() -> None:
    out = _run("fuzz_speed.py", "--examples", "5", "--json")
    for needle in ("raw ping-pong (the limit)", "same steps replayed raw", "fuzz campaign, one process",
                   "a clean campaign ends when its work is done"):
        assert needle in out, needle
    data = json.loads(out[out.index("{"):])
    # the figures are measured, not printed constants: they hang together
    assert data["pingPongPerSecond"] > 0 and data["fuzzTripsPerSecond"] > 0
    assert data["stats"]["examples"] == 5 and data["stats"]["steps"] == 40
    assert abs(data["fuzzShareOfLimit"] - data["fuzzTripsPerSecond"] / data["pingPongPerSecond"]) < 1e-9
    assert data["pingPongPerSecond"] == max(data["pingPongBeforeAfter"])


def test_fuzz_ttc_runs_ours_and_the_naive_driver() -> None:
    out = _run("fuzz_ttc.py", "--bugs", "conflict-reuse", "--naive-examples", "300", "--json")
    rows = json.loads(out[out.index("["):])
    assert [r["bug"] for r in rows] == ["conflict-reuse"]
    ours, naive = rows[0]["ours"], rows[0]["naive"]
    assert ours["first"] is not None and ours["first"] <= ours["total"]
    assert ("R7", 2) in [tuple(c) for c in ours["cases"]] or any(r == "R7" for r, _ in ours["cases"])
    assert naive["first"] is not None and naive["calls"] >= 1
    assert "ours: caught 1/1" in out and "naive: caught 1/1" in out


@pytest.mark.slow
@pytest.mark.parametrize("bug", ["timeout-as-failure", pytest.param("java:timeout-as-failure", marks=pytest.mark.skipif(
    shutil.which("javac") is None or shutil.which("java") is None, reason="javac/java not on PATH"))])
def test_fuzz_ttc_runs_a_write_bug_in_writes_mode(bug: str) -> None:
    """The write-tool variants (the Python and the Java executor's) are fuzzed in writes mode (protocol v1.2), by
    ours and by the naive driver."""
    out = _run("fuzz_ttc.py", "--bugs", bug, "--naive-examples", "60", "--timeout", "10", "--json")
    rows = json.loads(out[out.index("["):])
    assert [(r["bug"], r["mode"]) for r in rows] == [(bug, "writes")]
    ours, naive = rows[0]["ours"], rows[0]["naive"]
    assert ours["first"] is not None and ours["first"] <= ours["total"]  # the command may be stopped at --timeout
    assert naive["first"] is not None and naive["calls"] >= 1


@pytest.mark.slow
def test_verify_speed_quick_runs() -> None:
    out = _run("verify_speed.py", "--quick", "--scope", "concurrent", timeout=600)
    from loopspec.checker.bounds import load_bounds

    expected = load_bounds().scope("concurrent").expected["states"]
    row = re.search(r"^concurrent\s+([\d,]+) ", out, re.M)
    assert row and int(row.group(1).replace(",", "")) == expected, out  # the committed state count
    assert "time to exhaust the scopes measured" in out


def test_oracle_flow_counts_no_backward_entry() -> None:
    """The oracle's stages run in order: checking a ledger, a telemetry export and a transcript, control enters
    a module of an earlier stage (or the driver) from a later one not once (counted under sys.setprofile)."""
    out = _run("oracle_flow.py")
    assert out.count("backward entries (into an earlier stage or a driver): 0") == 3, out
    assert "_check -> _read" in out and "_check -> _judge" in out and "BACKWARD" not in out


def test_telemetry_speed_prints_time_per_span_beside_the_parse() -> None:
    out = _run("telemetry_speed.py", "--sizes", "400,800")
    rows = re.findall(r"^ +([\d,]+) spans \(.*\): parse only +([\d.]+) us/span \(the anchor\) \| check +([\d.]+) us/span "
                      r"= ([\d.]+) s \((\d+) runs, exit 0\)", out, re.M)
    assert len(rows) == 8, out  # two sizes of each shape, every file checked to a conforming verdict
    # array: runs of 4 spans; wide: one run; client: one trace per call stitched into conversations of 3; twins: the
    # same conversations all alike, none stitched
    assert [int(r[4]) for r in rows] == [100, 200, 1, 1, 133, 266, 399, 798]
