"""The hostile runner itself measures what it claims (so the corpus tests can fail)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

from . import runner
from .runner import assert_all_json_parses, run_cli


def test_runner_sees_exit_code_and_output() -> None:
    run = run_cli(["--version"], wall=60)
    assert run.returncode == 0 and run.stdout.startswith("loopspec "), run.describe()
    assert run.peak_rss_mb > 5


def test_runner_finds_an_orphan_that_left_the_process_group(tmp_path: Path) -> None:
    """A grandchild that called setsid is outside the process group, yet found by its tag."""
    impl = tmp_path / "orphan.py"
    impl.write_text(textwrap.dedent("""
        import subprocess, sys
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    """))
    tag = uuid.uuid4().hex
    subprocess.run([sys.executable, str(impl)], env=dict(os.environ, **{runner.TAG: tag}), check=True)
    left = runner._tagged(tag)
    for pid, _ in left:
        os.kill(pid, signal.SIGKILL)
    assert len(left) == 1 and "time.sleep(30)" in left[0][1]


def test_runner_kills_a_hang_at_the_wall(tmp_path: Path) -> None:
    # a FIFO nobody writes to: `check` blocks opening it, so only the wall-clock limit ends the run
    fifo = tmp_path / "fifo.ndjson"
    os.mkfifo(fifo)
    run = run_cli(["check", str(fifo)], wall=2)
    assert run.timed_out and run.returncode == -1


def test_strict_json_refuses_nan(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text('{"a": NaN}')
    try:
        assert_all_json_parses([bad])
    except AssertionError as exc:
        assert "not valid JSON" in str(exc)
    else:
        raise AssertionError("NaN was accepted")


def test_peak_rss_is_the_childs_own_not_the_parents() -> None:
    """A child forked from a process holding 300 MB would report >= 300 MB (the high-water mark
    survives exec); through the launcher it reports its own size."""
    ballast = bytearray(300 * 1024 * 1024)
    for i in range(0, len(ballast), 4096):
        ballast[i] = 1
    run = run_cli(["--version"], wall=60)
    del ballast
    assert run.returncode == 0 and 5 < run.peak_rss_mb < 120, run.describe()


def test_exit_code_passes_through_the_launcher(tmp_path: Path) -> None:
    run = run_cli(["check", str(tmp_path / "missing.ndjson")], wall=60)
    assert run.returncode == 2 and "no such file" in run.stderr, run.describe()
