"""The shared progress line (loopspec.support.progress): pure formatting, and a writer that is silent off a terminal."""

from __future__ import annotations

import io
import time

import pytest

from loopspec.support.progress import ProgressLine, Status, eta_seconds, format_duration, format_status


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


# -- pure formatting ------------------------------------------------------------------------------

@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0s"), (0.4, "0s"), (7.6, "8s"), (59, "59s"), (60, "1m00s"), (65, "1m05s"), (3599, "59m59s"),
    (3600, "1h00m"), (7380, "2h03m"), (-3, "0s"),
])
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_eta_is_the_remaining_work_at_the_average_rate() -> None:
    assert eta_seconds(50, 200, 10.0) == 30.0
    assert eta_seconds(200, 200, 10.0) == 0.0
    assert eta_seconds(0, 200, 10.0) is None       # nothing done yet: no rate
    assert eta_seconds(10, None, 10.0) is None     # no total: no ETA
    assert eta_seconds(10, 100, 0.0) is None


def test_a_fuzz_like_status_has_count_rate_findings_and_eta() -> None:
    s = Status("fuzz", 10.0, 50, 200, "examples", count=2900, count_unit="steps", findings=1, finding="divergence")
    assert format_status(s) == "fuzz: 50/200 examples (25%)  290 steps/s  1 divergence  ETA 30s"
    s2 = Status("fuzz", 10.0, 50, 200, "examples", count=2900, count_unit="steps", findings=2, finding="divergence",
                phase="shrinking")
    assert format_status(s2) == "fuzz: 50/200 examples (25%)  290 steps/s  2 divergences  ETA 30s  [shrinking]"


def test_bytes_are_shown_in_megabytes_with_their_rate() -> None:
    s = Status("check", 4.0, 25_000_000, 100_000_000, "bytes", findings=0, finding="violation")
    assert format_status(s) == "check: 25.0/100.0 MB (25%)  6.2 MB/s  0 violations  ETA 12s"


def test_without_a_total_the_line_says_elapsed_time_instead_of_an_eta() -> None:
    s = Status("check", 65.0, 1300, None, "runs")
    assert format_status(s) == "check: 1,300 runs  20 runs/s  1m05s elapsed"


def test_a_finished_run_shows_elapsed_not_eta() -> None:
    assert format_status(Status("x", 3.0, 10, 10, "files")) == "x: 10/10 files (100%)  3 files/s  3s elapsed"


@pytest.mark.parametrize(("n", "word", "text"), [(0, "finding", "0 findings"), (1, "finding", "1 finding"),
                                                 (3, "discrepancy", "3 discrepancies"), (2, "mismatch", "2 mismatches")])
def test_findings_are_counted_in_words(n: int, word: str, text: str) -> None:
    assert text in format_status(Status("x", 1.0, findings=n, finding=word))


# -- the writer -----------------------------------------------------------------------------------

S = Status("fuzz", 1.0, 1, 10, "examples")


def test_silent_when_not_a_terminal_and_not_forced() -> None:
    out = io.StringIO()
    p = ProgressLine(out)
    assert not p.enabled
    assert p.update(S, now=True) is False
    p.echo("hello")  # echo still prints the text itself
    p.finish(S)
    with p.ticking(lambda: S, every=0.001):
        time.sleep(0.01)
    assert out.getvalue() == "hello\n"


def test_forced_off_a_terminal_writes_whole_lines_every_two_seconds_at_most() -> None:
    out, clock = io.StringIO(), Clock()
    p = ProgressLine(out, force=True, clock=clock)
    assert p.enabled and not p.tty
    assert p.update(S)
    clock.t += 1.0
    assert not p.update(Status("fuzz", 2.0, 2, 10, "examples"))  # throttled
    clock.t += 1.5
    assert p.update(Status("fuzz", 3.5, 3, 10, "examples"))
    p.finish()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("fuzz: 1/10 examples") and lines[1].startswith("fuzz: 3/10 examples")
    assert lines[-1] == lines[1]  # finish repeats the latest status as a whole line
    assert "\r" not in out.getvalue() and "\x1b" not in out.getvalue()


def test_on_a_terminal_the_line_is_rewritten_in_place_and_cut_to_the_width() -> None:
    out, clock = Tty(), Clock()
    p = ProgressLine(out, clock=clock, width=30)
    assert p.enabled and p.tty
    p.update(S)
    clock.t += 0.5
    p.update(Status("fuzz", 2.0, 2, 10, "examples"))
    text = out.getvalue()
    assert text.count("\r\x1b[K") == 2 and "\n" not in text
    assert all(len(chunk) < 30 for chunk in text.split("\r\x1b[K") if chunk)
    assert text.endswith("…")
    p.finish()
    assert out.getvalue().endswith("\n")


def test_echo_clears_the_line_prints_and_redraws() -> None:
    out = Tty()
    p = ProgressLine(out, width=200)
    p.update(S, now=True)
    p.echo("a finding")
    text = out.getvalue()
    drawn = "\r\x1b[K" + format_status(S)
    assert text == drawn + "\r\x1b[K" + "a finding\n" + drawn


def test_ticking_polls_from_a_thread_and_finishes_with_the_last_status() -> None:
    out = io.StringIO()
    p = ProgressLine(out, force=True)
    n = {"done": 0}

    def poll() -> Status:
        n["done"] += 1
        return Status("check", 1.0, n["done"], None, "runs")

    with p.ticking(poll, every=0.005):
        time.sleep(0.1)
    lines = out.getvalue().splitlines()
    assert len(lines) >= 2  # at least one tick and the final line
    assert lines[-1] == f"check: {n['done']} runs  {n['done']} runs/s  1s elapsed"


def test_a_failing_poll_never_breaks_the_run() -> None:
    out = io.StringIO()
    p = ProgressLine(out, force=True)

    def poll() -> Status:
        raise RuntimeError("boom")

    with p.ticking(poll, every=0.001):
        time.sleep(0.02)
    assert out.getvalue() == ""
