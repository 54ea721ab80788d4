"""Small text helpers shared by the command-line reports (plain data in, text out)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any, Final

# Characters a terminal may act on (C0 and C1 controls, DEL) or that change what a line shows (bidi
# overrides and isolates, line and paragraph separators).
_UNSAFE: Final = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def printable(text: str) -> str:
    """``text`` safe to show on a terminal as one line: control characters (newlines and escape
    sequences included) and bidi controls are shown as ``\\xNN`` / ``\\uNNNN``."""
    return _UNSAFE.sub(_escape, text) if _UNSAFE.search(text) else text


#: What a report may write to a terminal besides printable text: newline, tab and the colour
#: sequences of :func:`paint` (SGR: ESC [ digits/semicolons m), which change colour only.
_STREAM_UNSAFE: Final = re.compile("\x1b\\[[0-9;]*m|[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
#: The same, for a stream that also carries the progress line (carriage return, erase to end of line).
_PROGRESS_UNSAFE: Final = re.compile("\r\x1b\\[K|" + _STREAM_UNSAFE.pattern)


def _stream_escape(m: re.Match[str]) -> str:
    s = m.group()
    return s if len(s) > 1 else f"\\u{ord(s):04x}"


class SafeStream:
    """A text stream that escapes, as ``\\uNNNN``, every character a terminal could act on (cursor
    moves, screen clears, titles, hyperlinks, bidi overrides) — wherever in a report it came from.
    Newlines, tabs and colour sequences pass (and, with ``progress``, the progress line's carriage
    return + erase-line). ``\\uNNNN`` keeps a JSON document valid JSON (such characters can only
    occur inside its strings), so one guard serves both formats. Everything else (``isatty``,
    ``fileno``, ``encoding``, ``flush``…) is the wrapped stream's."""

    def __init__(self, stream: Any, *, progress: bool = False) -> None:
        self._stream = stream
        self._unsafe = _PROGRESS_UNSAFE if progress else _STREAM_UNSAFE

    def write(self, text: str) -> int:
        self._stream.write(self._unsafe.sub(_stream_escape, text) if self._unsafe.search(text) else text)
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def printable_lines(text: str) -> str:
    """:func:`printable` for each line of a multi-line text of our own (its newlines are kept)."""
    return "\n".join(printable(line) for line in text.split("\n"))


def compact(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain monospace table with a header rule."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()
    out = [line(headers), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in rows]
    return "\n".join(out)


def use_color(stream: Any = None) -> bool:
    stream = stream or sys.stdout
    return bool(getattr(stream, "isatty", lambda: False)()) and not os.environ.get("NO_COLOR")


def paint(text: str, code: str, enabled: bool) -> str:
    return f"\x1b[{code}m{text}\x1b[0m" if enabled else text


def write_atomic(path: str | Path, text: str | bytes) -> None:
    """Write ``text`` (or bytes) to ``path`` atomically: a temp file in the same directory, fsynced,
    then renamed over the target, with the permissions an ordinary new file would get."""
    with open_atomic(path, "wb") as fh:
        fh.write(text.encode("utf-8") if isinstance(text, str) else text)


@contextlib.contextmanager
def open_atomic(path: str | Path, mode: str = "w") -> Iterator[IO[Any]]:
    """A file to write ``path`` through, atomically: a temp file in the same directory, with the permissions
    an ordinary new file would get, fsynced and renamed over ``path`` when the block ends without an
    exception (removed when it raises). ``mode`` is ``"w"`` (UTF-8 text) or ``"wb"``."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; a report should be readable like any file
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
