"""``fuzz --out`` on a disk that fills up after a finding (issue 32 item 8): the campaign stops there, names the
file it could not write and why, keeps what it wrote, writes campaign.json if there is still room, and exits 1
(something was found) — it exited 70 "internal error, please report it", with no path and no campaign.json.

A full disk is made two ways: the process's file size limit (``RLIMIT_FSIZE``, with SIGXFSZ ignored: EFBIG, as
tests/writes/faults.py does; anyone can set it), and a real full file system (a small tmpfs, when this test may
mount one: ENOSPC)."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
EXAMPLE = ROOT / "examples" / "python" / "executor.py"


def _fuzz(out: Path, *, fsize: int | None = None) -> subprocess.CompletedProcess[str]:
    def limit() -> None:
        if fsize is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    env = dict(os.environ)
    env.pop("LOOPSPEC_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "loopspec", "fuzz", "--impl", f"{sys.executable} {EXAMPLE} --bug conflict-reuse",
         "--out", str(out), "--max-examples", "30", "--seed", "1"],
        env=env, capture_output=True, text=True, timeout=120, preexec_fn=limit)


def test_a_case_too_large_to_write_stops_the_campaign_with_the_path_and_campaign_json(tmp_path: Path) -> None:
    """Every file may hold 5,700 bytes: the case (~5,950 bytes) cannot be written, campaign.json (~5,400) can."""
    p = _fuzz(tmp_path, fsize=5700)
    assert p.returncode == 1, (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr and "internal error" not in p.stderr, p.stderr
    case = tmp_path / "R7-conflict-reused.json"
    assert f"loopspec fuzz: error: --out: cannot write {case}: File too large" in p.stderr, p.stderr
    assert not case.exists() and not list(tmp_path.glob(".R7-*"))  # no half file, no temp file left
    doc = json.loads((tmp_path / "campaign.json").read_text())
    assert doc["stats"]["stoppedBy"] == "out-unwritable"
    assert doc["stats"]["outError"] == f"cannot write {case}: File too large"
    assert [f["rule"] for f in doc["findings"]] == ["R7"]
    assert "STOPPED: cannot write" in p.stdout and "campaign: " not in p.stdout  # no next step naming a lost file


def test_a_full_file_system_keeps_what_was_written_and_says_so(tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)],
                                           capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        (mnt / "fill").write_bytes(b"\0" * 56_000)  # ~8 KB left: the case fits, its explanation does not
        out = mnt / "out"
        p = _fuzz(out)
        assert p.returncode == 1, (p.returncode, p.stderr[-2000:])
        assert "Traceback" not in p.stderr and "internal error" not in p.stderr, p.stderr
        assert "No space left on device" in p.stderr and f"kept in {out}" in p.stderr, p.stderr
        assert str(out / "campaign.json") + " could not be written either" in p.stderr, p.stderr
        kept = json.loads((out / "R7-conflict-reused.json").read_text())  # written before the disk was full
        assert kept["steps"]
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
