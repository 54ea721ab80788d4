"""`loopspec check` shows progress on long inputs: a line on stderr (a terminal, or --progress) with how
far it has read, the rate, the violations so far and an ETA; nothing when piped without --progress."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from loopspec.cli import main
from loopspec.cli.check import _END, _Reading, results
from loopspec.oracle._options import Options

GOLDEN = Path(__file__).resolve().parent / "golden" / "oracle"
PASS = GOLDEN / "ledger-pass.ndjson"
FAIL = GOLDEN / "ledger-fail-reexecute-replay.ndjson"


def test_no_progress_when_stderr_is_not_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(PASS)]) == 0
    assert capsys.readouterr().err == ""


def test_progress_when_asked_ends_with_the_whole_input_read(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(PASS), str(FAIL), "--progress", "--quiet"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    total = (PASS.stat().st_size + FAIL.stat().st_size) / 1e6
    assert err[-1].startswith(f"check: {total:,.1f}/{total:,.1f} MB (100%)")
    assert "1 violation" in err[-1] and "runs checked]" in err[-1]


def test_progress_counts_files_with_parallel_jobs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(PASS), str(PASS), "--jobs", "2", "--progress", "--format", "json"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("check: 2/2 files (100%)") and "0 violations" in err[-1]


def test_the_read_position_is_sampled_from_the_open_file(tmp_path: Path) -> None:
    big = tmp_path / "a.ndjson"
    big.write_bytes(b"x" * 1_000_000)
    r = _Reading([str(big), str(PASS)], parallel=False)
    assert r.total == 1_000_000 + PASS.stat().st_size
    with big.open("rb") as fh:
        r.opened(fh)
        fh.read(400_000)
        st = r.status(2.0)
        assert st.unit == "bytes" and 400_000 <= st.done <= 1_000_000 and st.total == r.total
    r.file_done()
    assert r.status(3.0).done == 1_000_000  # a closed file counts whole; the next is not open yet
    stdin = _Reading(["-"], parallel=False)
    assert stdin.total is None and stdin.status(1.0).unit == "files"  # a pipe has no size: count files


def test_progress_on_a_terminal_rewrites_one_line(tmp_path: Path) -> None:
    """A real pseudo-terminal: the line is redrawn in place (\\r, erase) and never printed when piped."""
    import pty

    ledger = tmp_path / "big.ndjson"
    runs = PASS.read_text().splitlines()
    with ledger.open("w") as fh:
        for i in range(60):
            for line in runs:
                fh.write(line.replace('"run":"', f'"run":"r{i}-', 1) + "\n")
    pid, fd = pty.fork()
    if pid == 0:  # the child: stdout and stderr are the terminal
        os.execv(sys.executable, [sys.executable, "-m", "loopspec", "check", str(ledger), "--quiet"])
    out = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    _, status = os.waitpid(pid, 0)
    text = out.decode()
    assert os.waitstatus_to_exitcode(status) == 0, text
    assert "\r\x1b[Kcheck: " in text and "(100%)" in text and "[780 runs check" in text  # cut to the width
    piped = subprocess.run([sys.executable, "-m", "loopspec", "check", str(ledger), "--quiet"], capture_output=True,
                           text=True, timeout=120)
    assert piped.returncode == 0 and piped.stderr == "" and "check:" not in piped.stdout


def test_progress_of_one_file_split_across_processes_counts_bytes(capsys: pytest.CaptureFixture[str],
                                                                  tmp_path: Path) -> None:
    """--jobs 2 on one ledger: the line counts the bytes the processes have read (the slowest one's position),
    as one process does, not files."""
    ledger = tmp_path / "big.ndjson"
    runs = PASS.read_text().splitlines()
    with ledger.open("w") as fh:
        for i in range(40):
            for line in runs:
                fh.write(line.replace('"run":"', f'"run":"r{i}-', 1) + "\n")
    assert main(["check", str(ledger), "--jobs", "2", "--progress", "--quiet"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    total = ledger.stat().st_size / 1e6
    assert err[-1].startswith(f"check: {total:,.1f}/{total:,.1f} MB (100%)"), err
    r = _Reading([str(ledger)], parallel=False)
    seen = []
    for item, _summary in results([str(ledger)], "auto", Options(), 2, on_open=r.opened, on_read=r.reading):
        if r.read is not None and not seen:  # the first record: the processes have read at least a block
            seen.append(r.status(1.0))
        if item is not _END:
            assert r.read is not None
    assert seen and seen[0].unit == "bytes" and 0 < seen[0].done <= seen[0].total == ledger.stat().st_size
    assert r.read is not None and r.read() == ledger.stat().st_size  # every process read the whole file
