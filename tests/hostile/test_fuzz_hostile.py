"""``loopspec fuzz`` against hostile implementations (issue 14): each case runs the CLI as a child
with a wall-clock limit and asserts the exact exit code (never 70), the finding's rule and kind, a
bounded peak RSS measured from the child, nothing left running, and every file written parses as
strict JSON."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .runner import (
    TAG,
    _tagged,
    as_from_a_terminal,
    assert_all_json_parses,
    assert_sane,
    run_cli,
    strict_json,
    written_files,
)

ROOT = Path(__file__).resolve().parent.parent.parent
IMPL = Path(__file__).resolve().parent / "impls" / "hostile_impl.py"
EXAMPLE = ROOT / "examples" / "python" / "executor.py"


def impl(mode: str) -> str:
    return f"{sys.executable} {IMPL} {mode}"


def fuzz(out: Path, target: str, *extra: str, wall: float = 60.0) -> object:
    return run_cli(["fuzz", "--impl", target, "--out", str(out), "--seed", "1", "--quiet", *extra], wall=wall)


def findings(out: Path) -> dict[str, dict]:
    doc = strict_json((out / "campaign.json").read_text(encoding="utf-8"))
    return {f["rule"]: f for f in doc["findings"]}  # type: ignore[index]


def case(out: Path, rule: str) -> dict:
    """The case of (the first cause of) ``rule``: cases are named by their cause, ``P3-invalid-utf8.json``."""
    path = findings(out)[rule]["case"]
    return strict_json(Path(path).read_text(encoding="utf-8"))  # type: ignore[return-value]


def observed_error(out: Path, rule: str) -> dict:
    return case(out, rule)["verdict"]["violation"]["observed"]


def protocol_errors(out: Path) -> dict[str, str]:
    """code -> kind of the protocol error each reported case's failing step ended with."""
    errs = {}
    for rule in findings(out):
        perr = case(out, rule)["verdict"]["observed"].get("protocolError")
        if perr:
            errs[perr["code"]] = perr["kind"]
    return errs


# --------------------------------------------------------------------------------------------
# Hangs: a deadline per request from when it was sent, unsolicited traffic bounded
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("mode", "code", "kind"), [
    ("blank-lines", "P2", "timeout"),           # a blank line every 50 ms: the deadline still ends it
    ("notifications", "P4", "unsolicited-traffic"),
    ("tool-flood", "P4", "flood"),
])
def test_a_busy_pipe_never_hangs_the_fuzzer(mode: str, code: str, kind: str, tmp_path: Path) -> None:
    t0 = time.monotonic()
    run = fuzz(tmp_path, impl(mode), "--timeout", "1", "--max-examples", "5", "--shrink-time", "3", wall=90)
    assert_sane(run, exit_code=1, max_rss_mb=300)
    assert time.monotonic() - t0 < 60
    # the run ended with the protocol error (an executed flood is judged first: R1, unproposed calls)
    assert protocol_errors(tmp_path).get(code) == kind, findings(tmp_path)
    assert_all_json_parses(written_files(tmp_path))


@pytest.mark.parametrize(("mode", "code", "kind", "words"), [
    ("half-line", "P2", "timeout", "within 2 s"),                   # half an answer, then silence: the read's deadline
    ("half-line-exit", "P1", "exited", "after the partial line"),   # half an answer, then it dies between two writes
    ("exit-between-messages", "P1", "exited", "exit status 4"),     # a whole request, its answer read, then death
])
def test_half_a_message_is_a_finding_not_a_hang(mode: str, code: str, kind: str, words: str, tmp_path: Path) -> None:
    """Issue 32: an implementation that writes half a message and then stops (or dies between its two writes)."""
    t0 = time.monotonic()
    run = fuzz(tmp_path, impl(mode), "--timeout", "2", "--max-examples", "3", "--shrink-time", "3", wall=90)
    assert_sane(run, exit_code=1, max_rss_mb=300)
    assert time.monotonic() - t0 < 45
    assert protocol_errors(tmp_path).get(code) == kind, findings(tmp_path)
    detail = next(c["verdict"]["observed"]["protocolError"]["detail"] for c in (case(tmp_path, r) for r in
                                                                             findings(tmp_path)))
    assert words in detail, detail


def test_an_implementation_that_stops_reading_is_a_timeout_not_a_hung_write(tmp_path: Path) -> None:
    """Issue 32: an implementation that answers initialize and never reads its stdin again. A message larger
    than the pipe's buffer (a case with a 300 kB argument) blocked the harness in write() for ever: --timeout
    fired only on reads (replay was killed after 40 s). A write now waits as long as a read would: P2 after ~2 s."""
    made = fuzz(tmp_path / "found", f"{sys.executable} {EXAMPLE} --bug replay-reexecutes", "--max-examples", "20",
                "--shrink-time", "5", wall=90)
    assert_sane(made, exit_code=1)
    doc = case(tmp_path / "found", "R6")  # case files are named by their cause (issue 27)
    doc["steps"][0]["calls"][0]["arguments"] = {"flag": True, "pad": "x" * 300_000}
    big = tmp_path / "big.json"
    big.write_text(json.dumps(doc), encoding="utf-8")
    t0 = time.monotonic()
    run = run_cli(["replay", str(big), "--impl", impl("deaf-after-initialize"), "--timeout", "2"], wall=60)
    assert_sane(run, exit_code=1)
    assert time.monotonic() - t0 < 30, run.describe()
    assert "it stopped reading its stdin" in run.stdout and "P2" in run.stdout, run.describe()


def test_a_write_to_a_process_that_does_not_read_has_the_read_deadline() -> None:
    """protocol.rpc.Channel.send: with a timeout, a write the other side does not take ends in P2 (a message of
    1 MB into a pipe of 64 kB); without one (the implementation's own side of the protocol) it waits as before."""
    from loopspec.protocol.rpc import Channel, ProtocolFailure

    r, w = os.pipe()
    try:
        ch = Channel(os.open(os.devnull, os.O_RDONLY), w, timeout=0.5)
        t0 = time.monotonic()
        with pytest.raises(ProtocolFailure) as err:
            ch.send({"jsonrpc": "2.0", "id": 1, "method": "batch.run", "params": {"pad": "x" * 1_000_000}})
        assert 0.4 < time.monotonic() - t0 < 5
        assert (err.value.code, err.value.kind) == ("P2", "timeout") and "stopped reading" in err.value.detail
        assert os.get_blocking(w), "the pipe is left as it was"
    finally:
        os.close(r)
        os.close(w)


def test_endless_model_requests_are_a_flood_finding(tmp_path: Path) -> None:
    run = fuzz(tmp_path, impl("model-flood"), "--mode", "loop", "--timeout", "2", "--max-examples", "5",
               "--shrink-time", "3", wall=90)
    assert_sane(run, exit_code=1, max_rss_mb=300)
    assert protocol_errors(tmp_path).get("P4") == "flood", findings(tmp_path)


# --------------------------------------------------------------------------------------------
# Orphans: the implementation's process group is ended; the finding names the real cause
# --------------------------------------------------------------------------------------------


def test_a_child_holding_the_pipes_is_ended_and_the_exit_is_named(tmp_path: Path) -> None:
    run = fuzz(tmp_path, impl("fork-holder"), "--timeout", "5", "--max-examples", "5", "--shrink-time", "3",
               wall=90)
    assert_sane(run, exit_code=1, max_rss_mb=300)  # includes: no process left running
    err = observed_error(tmp_path, "P1")
    assert err["kind"] == "exited" and "exit status 3" in err["detail"], err
    assert "still open" in err["detail"]  # the cause: a process it started holds the pipe


@pytest.mark.parametrize("isolation", ["campaign", "example"])
def test_helpers_that_leave_the_process_group_are_ended_with_the_implementation(tmp_path: Path,
                                                                                  isolation: str) -> None:
    """Issue 32 item 7: every implementation process starts 3 double-forked daemons (orphaned at once, in
    sessions of their own) and 3 helpers in process groups of their own; a correct executor otherwise. Ending
    its process group (and the descendants listed while it lives) left every daemon and, once the leader had
    gone first, the helpers running: each carries the implementation's mark (LOOPSPEC_IMPL) and is ended by
    it. ``assert_sane`` finds every process the run left (by the test's own mark) and fails on any."""
    run = fuzz(tmp_path, impl("daemons"), "--max-examples", "6", "--isolation", isolation, wall=120)
    assert_sane(run, exit_code=0, max_rss_mb=300)
    assert json.loads((tmp_path / "campaign.json").read_text())["stats"]["processesStarted"] >= 1


# --------------------------------------------------------------------------------------------
# Values that broke the writer: big integers, deep nesting, NaN / Infinity, invalid UTF-8
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("mode", "kind"), [
    ("bigint", "integer-too-long"), ("deep", "too-deep"), ("nan", "non-finite-number"),
    ("infinity", "non-finite-number"), ("invalid-utf8", "invalid-utf8"),
])
def test_hostile_values_are_P3_findings_and_every_file_is_strict_json(mode: str, kind: str, tmp_path: Path) -> None:
    run = fuzz(tmp_path, impl(mode), "--max-examples", "5", "--shrink-time", "3")
    assert_sane(run, exit_code=1, max_rss_mb=300)
    assert observed_error(tmp_path, "P3")["kind"] == kind
    assert_all_json_parses(written_files(tmp_path))


# --------------------------------------------------------------------------------------------
# Attribution, stale files, the stderr log
# --------------------------------------------------------------------------------------------


def test_a_late_tool_execute_is_a_finding_of_its_own_step(tmp_path: Path) -> None:
    run = fuzz(tmp_path, impl("late-execute"), "--max-examples", "20", "--shrink-time", "5")
    assert_sane(run, exit_code=1, max_rss_mb=300)
    found = findings(tmp_path)
    assert set(found) == {"P4"}, found  # never blamed on the next step as R1, R5, R11-R13
    c = case(tmp_path, "P4")
    assert c["verdict"]["violation"]["kind"] == "late-request"
    assert "tool.execute" in c["verdict"]["violation"]["observed"]["detail"]
    assert len(c["steps"]) == 1


def test_an_earlier_campaigns_unreadable_case_is_kept_and_reported(tmp_path: Path) -> None:
    """--out is a corpus (issue 27): nothing in it is deleted silently, not even a case that cannot be replayed
    (a provisional one an interrupted campaign left without steps)."""
    stale = {"format": "loopspec-fuzz-case/1", "provisional": True, "steps": []}
    (tmp_path / "R6.json").write_text(json.dumps(stale, indent=2))
    (tmp_path / "R6.txt").write_text("loopspec fuzz: divergence R6\n")
    (tmp_path / "notes.json").write_text("{}")  # not ours: kept
    run = fuzz(tmp_path, f"{sys.executable} {EXAMPLE}", "--max-examples", "5")
    assert_sane(run, exit_code=0)
    assert (tmp_path / "R6.json").exists() and (tmp_path / "R6.txt").exists()
    assert (tmp_path / "notes.json").exists()
    corpus = strict_json((tmp_path / "campaign.json").read_text())["corpus"]  # type: ignore[index]
    assert [e["status"] for e in corpus] == ["unreadable"] and "steps" in corpus[0]["why"]


def test_the_stderr_log_is_bounded_and_never_follows_a_symlink(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "impl-stderr.log").symlink_to(victim)
    run = fuzz(out, impl("stderr-flood"), "--max-examples", "30", wall=90)
    assert_sane(run, exit_code=0, max_rss_mb=300)
    assert victim.read_text() == "precious\n"
    log = out / "impl-stderr.log"
    assert not log.is_symlink() and 0 < log.stat().st_size <= 600 * 1024
    assert b"bytes of stderr left out here" in log.read_bytes()


# --------------------------------------------------------------------------------------------
# Ctrl-C and --shrink-time are honoured; campaign.json is written on the way out
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("signum", "group", "code"), [(signal.SIGINT, True, 130), (signal.SIGTERM, False, 143),
                                                     (signal.SIGHUP, False, 129)], ids=["ctrl-c", "sigterm", "sighup"])
def test_ctrl_c_writes_campaign_json_and_leaves_nothing_running(tmp_path: Path, signum: int, group: bool,
                                                                code: int) -> None:
    """Ctrl-C (SIGINT to the terminal's process group), SIGTERM (``kill``, a CI job's timeout: to loopspec
    alone) and SIGHUP (the terminal closed) all end the campaign the same way: campaign.json written and
    saying interrupted, the implementation's processes ended, the exit code 128 + the signal."""
    tag = os.urandom(8).hex()
    env = dict(os.environ, **{TAG: tag}, PYTHONHASHSEED="0")
    proc = subprocess.Popen(
        [sys.executable, "-m", "loopspec", "fuzz", "--impl", impl("blank-lines"), "--out", str(tmp_path),
         "--timeout", "30", "--max-examples", "5", "--quiet"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        preexec_fn=as_from_a_terminal)  # SIGINT at its default even when this test runs as a background job
    # Ctrl-C while the campaign waits on the implementation: once the implementation runs (the tagged
    # process whose program is hostile_impl.py — not loopspec itself or its forked generator, whose
    # command lines name it too, as --impl's value), well inside the 30 s deadline of the first step;
    # a fixed sleep raced the fuzzer's own start-up under load
    t0 = time.monotonic()
    while not [pid for pid, cmd in _tagged(tag) if cmd.split()[1:2] == [str(IMPL)]] and time.monotonic() - t0 < 60:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    time.sleep(1)
    if group:
        os.killpg(proc.pid, signum)
    else:
        os.kill(proc.pid, signum)
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    left = _tagged(tag)
    for pid, _ in left:
        os.kill(pid, signal.SIGKILL)
    assert proc.returncode in (1, code), (proc.returncode, out, err)
    assert b"Traceback" not in err
    doc = strict_json((tmp_path / "campaign.json").read_text())
    assert doc["interrupted"] is True  # type: ignore[index]
    assert not left, left
    assert_all_json_parses(written_files(tmp_path))


def test_shrink_time_bounds_the_campaign_after_the_first_divergence(tmp_path: Path) -> None:
    t0 = time.monotonic()
    run = fuzz(tmp_path, f"{sys.executable} {EXAMPLE} --bug replay-reexecutes", "--max-examples", "100000",
               "--shrink-time", "2", wall=120)
    assert_sane(run, exit_code=1)
    assert time.monotonic() - t0 < 40
    assert "R6" in findings(tmp_path)


# --------------------------------------------------------------------------------------------
# Protocol v1.2 (writes.run): a hostile implementation of write tools is a finding, never a crash
# --------------------------------------------------------------------------------------------

WRITES_IMPL = Path(__file__).resolve().parent / "impls" / "hostile_writes_impl.py"


@pytest.mark.parametrize(("mode", "rule"), [
    ("no-key", "P5"), ("lookup-list", "P5"),
    ("bad-result", "R39"), ("short-result", "R39"),  # it sends nothing: request #0 was never dispatched (first)
    ("stranger", None), ("crash-on-resume", None),
])
def test_a_hostile_writes_implementation_is_a_finding(mode: str, rule: str | None, tmp_path: Path) -> None:
    run = fuzz(tmp_path, f"{sys.executable} {WRITES_IMPL} {mode}", "--mode", "writes", "--max-examples", "6",
               "--shrink-time", "3", wall=90)
    assert_sane(run, exit_code=1)
    found = findings(tmp_path)
    if rule is not None:
        assert rule in found, sorted(found)
    assert_all_json_parses(written_files(tmp_path))
