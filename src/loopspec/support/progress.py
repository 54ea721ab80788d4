"""A progress line for long runs: one line on stderr that updates in place on a terminal.

The formatting is pure (:func:`format_status` turns a :class:`Status` into text, :func:`eta_seconds`
and :func:`format_duration` do the arithmetic) and separate from the writer (:class:`ProgressLine`),
which decides *whether* and *how* to show it:

* on a terminal it rewrites one line in place (``\\r``, cut to the terminal's width so it never
  wraps), at most every ``interval`` seconds;
* when the stream is not a terminal (piped, redirected, captured by CI) it is silent, unless forced
  (the commands' ``--progress``), and then writes whole lines, at most one every two seconds, so a
  log stays readable.

Commands whose work does not call back often (a long read, a shrinking phase) show progress from a
background thread: :meth:`ProgressLine.ticking` polls a function for the current :class:`Status`.
Anything else printed to the same terminal should go through :meth:`ProgressLine.echo` (or follow
:meth:`ProgressLine.clear`), so a half-drawn progress line is never left in front of it.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Final

__all__ = ["ProgressLine", "Status", "eta_seconds", "format_duration", "format_status"]

#: Seconds between two redraws on a terminal / two lines written when forced on a non-terminal.
TTY_INTERVAL: Final = 0.2
LOG_INTERVAL: Final = 2.0


@dataclass(frozen=True, slots=True)
class Status:
    """What a long run has done so far (plain data; :func:`format_status` renders it).

    ``done`` out of ``total`` (None when unknown) measures how far the run is, in ``unit``
    ("examples", "files"; "bytes" is shown in MB). The rate counts ``count`` ``count_unit`` per
    second when given (steps/s while ``done`` counts examples), else ``done`` per second.
    ``findings`` (None: not shown) counts what was found so far, named ``finding`` (singular).
    ``phase`` says what the run is doing when that is not the obvious ("shrinking").
    """

    label: str
    seconds: float
    done: float = 0
    total: float | None = None
    unit: str = ""
    count: float | None = None
    count_unit: str = ""
    findings: int | None = None
    finding: str = "finding"
    phase: str = ""


def format_duration(seconds: float) -> str:
    """``7s``, ``1m05s``, ``2h03m`` (rounded to whole seconds; never negative)."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def eta_seconds(done: float, total: float | None, seconds: float) -> float | None:
    """Seconds left at the average rate so far; None when it cannot be told (no total, nothing done)."""
    if total is None or done <= 0 or seconds <= 0:
        return None
    if done >= total:
        return 0.0
    return seconds * (total - done) / done


def _amount(value: float, unit: str) -> str:
    if unit == "bytes":
        return f"{value / 1e6:,.1f}"
    return f"{value:,.0f}"


def _rate(per_second: float, unit: str) -> str:
    if unit == "bytes":
        return f"{per_second / 1e6:,.1f} MB/s"
    return f"{per_second:,.0f} {unit}/s".replace(" /s", "/s")


def _plural(n: int, word: str) -> str:
    if n == 1:
        return f"{n} {word}"
    if word.endswith(("s", "x", "ch", "sh")):
        return f"{n} {word}es"
    if word.endswith("y") and word[-2:-1] not in "aeiou":
        return f"{n} {word[:-1]}ies"
    return f"{n} {word}s"


def format_status(s: Status) -> str:
    """One line: label, how far (with the percentage when the total is known), rate, findings, ETA, phase.

    >>> format_status(Status("fuzz", 10.0, 50, 200, "examples", count=2900, count_unit="steps",
    ...                      findings=1, finding="divergence"))
    'fuzz: 50/200 examples (25%)  290 steps/s  1 divergence  ETA 30s'
    """
    unit = "MB" if s.unit == "bytes" else s.unit
    if s.total is not None:
        pct = 100.0 * s.done / s.total if s.total > 0 else 100.0
        how_far = f"{_amount(s.done, s.unit)}/{_amount(s.total, s.unit)} {unit}".rstrip() + f" ({min(pct, 100):.0f}%)"
    else:
        how_far = f"{_amount(s.done, s.unit)} {unit}".rstrip()
    parts = [f"{s.label}: {how_far}"]
    if s.seconds > 0:
        if s.count is not None and s.count_unit:
            parts.append(_rate(s.count / s.seconds, s.count_unit))
        elif s.unit:
            parts.append(_rate(s.done / s.seconds, s.unit))
    if s.findings is not None:
        parts.append(_plural(s.findings, s.finding))
    eta = eta_seconds(s.done, s.total, s.seconds)
    if eta is not None and s.done < (s.total or 0):
        parts.append(f"ETA {format_duration(eta)}")
    else:
        parts.append(f"{format_duration(s.seconds)} elapsed")
    if s.phase:
        parts.append(f"[{s.phase}]")
    return "  ".join(parts)


def _isatty(stream: IO[str]) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


class ProgressLine:
    """Writes :class:`Status` lines to ``stream`` (default: stderr).

    Enabled when the stream is a terminal or when ``force`` is true (``--progress``); when disabled
    every method is a no-op. ``clock`` and ``width`` are for tests.
    """

    def __init__(self, stream: IO[str] | None = None, *, force: bool = False, interval: float | None = None,
                 clock: Callable[[], float] = time.monotonic, width: int | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = _isatty(self.stream)
        self.enabled = bool(force or self.tty)
        self.interval = interval if interval is not None else (TTY_INTERVAL if self.tty else LOG_INTERVAL)
        self.clock = clock
        self.started = clock()
        self._width = width
        self._last = float("-inf")
        self._shown = False  # a line is on screen (terminal) that the next output must clear
        self._lock = threading.RLock()
        self.latest: Status | None = None

    def elapsed(self) -> float:
        return self.clock() - self.started

    def _cut(self, line: str) -> str:
        width = self._width or shutil.get_terminal_size((100, 24)).columns
        return line if len(line) < width else line[: max(width - 2, 1)] + "…"

    def update(self, status: Status, *, now: bool = False) -> bool:
        """Show ``status`` unless the last line was shown less than ``interval`` ago (``now``: show anyway).
        Returns whether it was written."""
        if not self.enabled:
            return False
        with self._lock:
            self.latest = status
            t = self.clock()
            if not now and t - self._last < self.interval:
                return False
            self._last = t
            line = format_status(status)
            if self.tty:
                self.stream.write("\r\x1b[K" + self._cut(line))
                self._shown = True
            else:
                self.stream.write(line + "\n")
            self.stream.flush()
            return True

    def clear(self) -> None:
        """Erase the line on a terminal (before printing something else there)."""
        if not self.enabled or not self.tty:
            return
        with self._lock:
            if self._shown:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
                self._shown = False

    @contextlib.contextmanager
    def suspended(self) -> Iterator[None]:
        """Clear the line and hold it off while the caller prints elsewhere (e.g. a report on stdout that
        shares the terminal); the next update draws it again."""
        with self._lock:
            self.clear()
            yield

    def echo(self, text: str) -> None:
        """Print a line of text to the progress stream without mixing it into the progress line."""
        with self._lock:
            self.clear()
            self.stream.write(text + "\n")
            self.stream.flush()
            if self.enabled and self.latest is not None and self.tty:
                self.update(self.latest, now=True)

    def finish(self, status: Status | None = None) -> None:
        """Show the final status (or the latest) once more and end the line; nothing when disabled."""
        if not self.enabled:
            return
        with self._lock:
            final = status or self.latest
            if final is not None:
                self.update(final, now=True)
            if self.tty and self._shown:
                self.stream.write("\n")
                self.stream.flush()
                self._shown = False

    @contextlib.contextmanager
    def ticking(self, poll: Callable[[], Status | None], *, every: float | None = None) -> Iterator[ProgressLine]:
        """Update from a background thread: every ``every`` seconds (default: ``interval``) show ``poll()``
        (None: nothing new to show). The thread stops when the block exits; the line is then finished
        with the last status polled. ``poll`` must only read plain counters (it runs concurrently)."""
        if not self.enabled:
            yield self
            return
        stop = threading.Event()
        period = every if every is not None else self.interval

        def loop() -> None:
            while not stop.wait(period):
                try:
                    st = poll()
                except Exception:  # a progress line never breaks the run it describes
                    continue
                if st is not None:
                    self.update(st, now=True)

        th = threading.Thread(target=loop, name="loopspec-progress", daemon=True)
        th.start()
        try:
            yield self
        finally:
            stop.set()
            th.join()
            try:
                last = poll()
            except Exception:
                last = None
            self.finish(last)
