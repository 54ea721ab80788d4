"""Interrupting a sharded campaign (``fuzz --jobs 2``; issue 32 item 6): what any job already found is kept and
reported, SIGTERM ends the campaign at once (it waited for every shard to run to its end: 110 s measured), and
a SIGKILLed campaign takes its workers and their implementations along (they ran on, 3 still running 400 s
later). Each test starts a campaign that cannot end by itself (100,000 examples), lets a job find the bug
(its case file appears in --out: the worker sends the finding as soon as it is reduced), then signals it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .runner import TAG, _tagged, as_from_a_terminal

ROOT = Path(__file__).resolve().parent.parent.parent
EXAMPLE = ROOT / "examples" / "python" / "executor.py"

pytestmark = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="processes are found in /proc")


def _start(out: Path, tag: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ, **{TAG: tag}, PYTHONHASHSEED="0")
    env.pop("LOOPSPEC_DEBUG", None)
    return subprocess.Popen(
        [sys.executable, "-m", "loopspec", "fuzz", "--impl", f"{sys.executable} {EXAMPLE} --bug conflict-reuse",
         "--out", str(out), "--jobs", "2", "--max-examples", "100000", "--seed", "1", "--quiet", "--format", "json"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        preexec_fn=as_from_a_terminal)  # SIGINT at its default, as typed at a terminal


def _wait_for_a_case(proc: subprocess.Popen[bytes], out: Path, limit: float = 60.0) -> None:
    """Until a job's case is in --out (or ``limit`` seconds: the assertions then say what was lost)."""
    t0 = time.monotonic()
    while not list(out.glob("R7-*.json")) and time.monotonic() - t0 < limit:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    time.sleep(1.0)  # the jobs go on exploring: the signal comes in the middle of it


def _finish(proc: subprocess.Popen[bytes], tag: str, wait: float = 30.0) -> tuple[bytes, bytes, list]:
    try:
        out, err = proc.communicate(timeout=wait)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        for pid, _ in _tagged(tag):
            os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"still running {wait} s after the signal: {err[-2000:]!r}")
    left = []
    t0 = time.monotonic()
    while time.monotonic() - t0 < 3.0:  # processes told to exit have a moment
        left = _tagged(tag)
        if not left:
            break
        time.sleep(0.1)
    for pid, _ in left:
        os.kill(pid, signal.SIGKILL)
    return out, err, left


@pytest.mark.parametrize(("signum", "group"), [(signal.SIGINT, True), (signal.SIGTERM, False)],
                         ids=["ctrl-c", "sigterm"])
def test_an_interrupted_jobs_campaign_reports_what_its_jobs_found(tmp_path: Path, signum: int, group: bool) -> None:
    tag = os.urandom(8).hex()
    proc = _start(tmp_path, tag)
    _wait_for_a_case(proc, tmp_path)
    if group:
        os.killpg(proc.pid, signum)  # Ctrl-C: the whole foreground group, the workers too
    else:
        os.kill(proc.pid, signum)  # kill, a CI job's timeout: the campaign alone
    out, err, left = _finish(proc, tag, wait=30.0)
    assert b"Traceback" not in err, err[-3000:]
    assert proc.returncode == 1, (proc.returncode, err[-2000:])  # a finding: 1, as for any campaign
    doc = json.loads(out)
    assert doc["interrupted"] is True
    assert [f["rule"] for f in doc["findings"]] == ["R7"], doc["findings"]
    assert doc["stats"]["examples"] > 0  # the jobs' statistics up to the signal
    case = tmp_path / Path(doc["findings"][0]["case"]).name
    assert json.loads(case.read_text())["steps"]  # the case the job wrote is complete
    written = json.loads((tmp_path / "campaign.json").read_text())
    assert written["interrupted"] is True and [f["rule"] for f in written["findings"]] == ["R7"]
    assert not left, left


def test_a_killed_jobs_campaign_leaves_no_worker_or_implementation_running(tmp_path: Path) -> None:
    tag = os.urandom(8).hex()
    proc = _start(tmp_path, tag)
    _wait_for_a_case(proc, tmp_path)
    running = [cmd for _, cmd in _tagged(tag)]
    assert any("spawn_main" in c for c in running) and any(str(EXAMPLE) in c for c in running), running
    os.kill(proc.pid, signal.SIGKILL)
    _, _, left = _finish(proc, tag, wait=30.0)
    assert not left, left  # workers die with the campaign; the watchdog ends their implementations
    assert list(tmp_path.glob("R7-*.json"))  # the case a job found is kept


def _marked(needle: bytes) -> list[int]:
    pids = []
    for e in Path("/proc").iterdir():
        if not e.name.isdigit():
            continue
        try:
            if needle in (e / "environ").read_bytes().split(b"\0") and \
                    (e / "stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z":
                pids.append(int(e.name))
        except OSError:
            continue
    return pids


@pytest.mark.slow
def test_an_interrupted_dask_campaign_keeps_its_findings_and_ends_the_adapters_on_the_workers(tmp_path: Path) -> None:
    """``--dask``: SIGTERM to the campaign left the adapters running on the workers (4 of 6 still there 30 s
    later) and reported nothing. The campaign now sets a Dask Event; each task's watcher ends its
    implementations (by the shard's LOOPSPEC_CAMPAIGN mark) and the task returns what it had found."""
    distributed = pytest.importorskip("distributed")
    tag = os.urandom(8).hex()
    needle = f"LOOPSPEC_TEST_ADAPTER={tag}".encode()
    impl = f"env LOOPSPEC_TEST_ADAPTER={tag} {sys.executable} {EXAMPLE} --bug conflict-reuse"
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cl:
        env = dict(os.environ, PYTHONHASHSEED="0")
        env.pop("LOOPSPEC_DEBUG", None)
        proc = subprocess.Popen(
            [sys.executable, "-m", "loopspec", "fuzz", "--impl", impl, "--out", str(tmp_path), "--dask",
             cl.scheduler_address, "--max-examples", "100000", "--seed", "1", "--quiet", "--format", "json"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        try:
            t0 = time.monotonic()
            while not _marked(needle) and time.monotonic() - t0 < 60:
                assert proc.poll() is None, proc.communicate()
                time.sleep(0.2)
            time.sleep(8.0)  # the bug is found in the first examples (R7 after ~1 s); the shards go on exploring
            os.kill(proc.pid, signal.SIGTERM)
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        left = []
        t0 = time.monotonic()
        while time.monotonic() - t0 < 5.0:
            left = _marked(needle)
            if not left:
                break
            time.sleep(0.2)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    assert b"Traceback" not in err, err[-3000:]
    assert proc.returncode == 1, (proc.returncode, err[-2000:])
    doc = json.loads(out)
    assert doc["interrupted"] is True and [f["rule"] for f in doc["findings"]] == ["R7"], doc["findings"]
    assert doc["stats"]["examples"] > 0
    assert not left, f"{len(left)} adapters still running on the workers"
