"""Run ``loopspec`` as a child process and measure what a hostile input did to it.

``run_cli`` gives the exit code, the output, the child's peak resident set size (``os.wait4``'s
``ru_maxrss``: the child and the descendants it waited for, measured by the kernel, so a parser's
C allocations count) and every process the run left behind. The child is started by a small
launcher (``_launch.py``) that reports its rusage: forked directly from pytest, the child would
start with pytest's resident size as its high-water mark (kept across ``exec``), and every
measurement would be at least that. A process is recognised as the run's
by a unique tag in its environment, so a grandchild that left the process group (``setsid``) is
still found. Leftovers are killed before ``run_cli`` returns; the test asserts there were none.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

_LAUNCH = Path(__file__).resolve().parent / "_launch.py"

#: The tag's name in the environment of every process a run starts.
TAG = "LOOPSPEC_HOSTILE_RUN"


@dataclass(frozen=True)
class CliRun:
    args: tuple[str, ...]
    returncode: int          # -1 when the wall-clock limit was hit (the process group was killed)
    stdout: str
    stderr: str
    seconds: float
    peak_rss_mb: float
    timed_out: bool
    leftovers: tuple[str, ...] = field(default=())  # command lines of processes still running after exit

    def describe(self) -> str:
        return (f"loopspec {' '.join(self.args)} -> exit {self.returncode} in {self.seconds:.1f} s, "
                f"peak {self.peak_rss_mb:.0f} MB\nstdout: {self.stdout[-2000:]}\nstderr: {self.stderr[-2000:]}")


def _tagged(tag: str) -> list[tuple[int, str]]:
    """Processes whose environment carries ``TAG=tag``: (pid, command line)."""
    found: list[tuple[int, str]] = []
    needle = f"{TAG}={tag}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            env = (entry / "environ").read_bytes()
            if needle not in env.split(b"\0"):
                continue
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[-1].split()[0] == "Z":  # a zombie is not running
            continue
        found.append((int(entry.name), cmd))
    return found


def as_from_a_terminal() -> None:
    """``preexec_fn`` for a child that must take Ctrl-C the way a command typed at a terminal does: SIGINT at
    its default action. A program started with SIGINT ignored keeps it ignored (Python does not install its
    KeyboardInterrupt handler then, and loopspec leaves it so: that is how ``cmd &`` and ``nohup`` keep a
    terminal's Ctrl-C away from a background job). A test process started as a background job has SIGINT
    ignored, and its children would inherit that and never see the test's Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_cli(args: Sequence[str], *, wall: float = 60.0, cwd: str | Path | None = None,
            stdin: bytes | None = None, env: Mapping[str, str] | None = None,
            settle: float = 0.3) -> CliRun:
    """Run ``python -m loopspec *args`` with a wall-clock limit; measure and clean up after it."""
    tag = uuid.uuid4().hex
    full_env = dict(os.environ if env is None else env)
    full_env[TAG] = tag
    full_env.setdefault("PYTHONHASHSEED", "0")
    full_env.pop("LOOPSPEC_DEBUG", None)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.TemporaryDirectory() as rdir:
        report = Path(rdir) / "rusage.json"
        start = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-S", str(_LAUNCH), str(report), sys.executable, "-m", "loopspec", *args],
            cwd=cwd, env=full_env,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=out, stderr=err, start_new_session=True,
        )
        if stdin is not None:
            assert proc.stdin is not None
            try:
                proc.stdin.write(stdin)
                proc.stdin.close()
            except BrokenPipeError:
                pass
        timed_out = False
        status = 0
        while True:
            pid, status, _ = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - start > wall:
                timed_out = True
                os.killpg(proc.pid, signal.SIGKILL)
                _, status, _ = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        proc.returncode = os.waitstatus_to_exitcode(status)  # so Popen does not wait again
        seconds = time.monotonic() - start
        peak = math.nan
        returncode = proc.returncode
        if report.is_file():  # the launcher's report on the command itself
            child = json.loads(report.read_text())
            peak = child["maxrss_kb"] / 1024
            returncode = os.waitstatus_to_exitcode(child["status"])
        # give orphans that were told to exit a moment, then collect what is still running
        deadline = time.monotonic() + settle
        left = _tagged(tag)
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            left = _tagged(tag)
        for pid, _ in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        out.seek(0)
        err.seek(0)
        return CliRun(
            args=tuple(args), returncode=-1 if timed_out else returncode,
            stdout=out.read().decode(errors="replace"), stderr=err.read().decode(errors="replace"),
            seconds=seconds, peak_rss_mb=peak, timed_out=timed_out, leftovers=tuple(cmd for _, cmd in left),
        )


def _reject_constant(name: str) -> None:
    raise ValueError(f"non-finite number {name} is not JSON")


def strict_json(text: str) -> object:
    """Parse ``text`` as RFC 8259 JSON: NaN and Infinity are refused (the stdlib accepts them)."""
    return json.loads(text, parse_constant=_reject_constant)


def written_files(root: str | Path) -> list[Path]:
    return sorted(p for p in Path(root).rglob("*") if p.is_file())


def assert_all_json_parses(paths: Iterable[Path]) -> None:
    """Every ``.json`` file parses strictly, every ``.ndjson``/``.jsonl`` line too."""
    for p in paths:
        if p.suffix == ".json":
            try:
                strict_json(p.read_text(encoding="utf-8"))
            except ValueError as exc:
                raise AssertionError(f"{p} is not valid JSON: {exc}") from None
        elif p.suffix in (".ndjson", ".jsonl"):
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
                if line.strip():
                    try:
                        strict_json(line)
                    except ValueError as exc:
                        raise AssertionError(f"{p}:{n} is not valid JSON: {exc}") from None


def assert_sane(run: CliRun, *, exit_code: int, max_rss_mb: float = 400.0) -> None:
    """The common assertions of every hostile case: no hang, the exact exit code (never 70), no
    traceback, bounded memory, nothing left running."""
    assert not run.timed_out, f"hung past the wall-clock limit:\n{run.describe()}"
    assert run.returncode != 70, f"internal error:\n{run.describe()}"
    assert "Traceback (most recent call last)" not in run.stderr, run.describe()
    assert run.returncode == exit_code, f"expected exit {exit_code}:\n{run.describe()}"
    assert run.peak_rss_mb <= max_rss_mb, f"peak RSS {run.peak_rss_mb:.0f} MB > {max_rss_mb} MB:\n{run.describe()}"
    assert not run.leftovers, f"processes left running: {run.leftovers}\n{run.describe()}"
