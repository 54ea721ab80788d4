"""Reading lines: a file's lines with a bounded length, and a run ledger's events, one a line.

Memory: the file is read line by line; a line longer than ``max_line`` bytes is skipped without being
held (its first :data:`HEAD` bytes are kept to tell whose line it was). :class:`LedgerReader` yields each
event as a dict, or a :class:`LostLine` for a line that cannot be read (too long, not JSON, not an
object); the group stage (:mod:`loopspec.oracle._group.ledger`) decides whose run it was.

``--jobs`` on one file (:mod:`loopspec.oracle._split`) reads only the lines of the runs one process owns:
:func:`route_key` reads the run id from the raw line and :func:`run_owner` picks the process.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import IO, Any, Final
from zlib import crc32

from ...support import safejson
from .. import _json
from .._options import Options

Json = Any

#: How much of an over-long line is kept to tell which run it belongs to.
HEAD: Final = 4096

_RUN_RE: Final = re.compile(rb'"run"\s*:\s*"((?:[^"\\]|\\.){1,200})"')

#: How the engine writes every ledger line: the run id follows at a fixed offset (the top-level key).
_FAST_PREFIX: Final = b'{"v":1,"run":"'


def read_lines(fh: IO[bytes], max_line: int) -> Iterator[tuple[int, bytes | None, str | None]]:
    """(line number, the line or None, an error or None), reading at most ``max_line`` bytes at once."""
    lim = Options(max_line=max_line).limits
    for n, raw, err, _head in safejson.iter_lines(fh, limits=lim):
        yield n, raw, err


def route_key(raw: bytes) -> bytes:
    """The run id a raw line names, as UTF-8 (what ``--jobs`` routes by): the first ``"run": "…"`` in
    the line's first 4096 bytes, as :func:`guess_run` reads it for a line that cannot be read; b"" when
    there is none."""
    m = _RUN_RE.search(raw[:HEAD])
    if m is None:
        return b""
    key = m.group(1)
    if b"\\" in key:
        v = guess_run(raw)
        return v.encode("utf-8", "surrogatepass") if v is not None else key
    return key


def run_owner(run: str, ways: int) -> int:
    """Which of ``ways`` processes owns a run (a hash that every process computes alike)."""
    return crc32(run.encode("utf-8", "surrogatepass")) % ways


def guess_run(raw: bytes) -> str | None:
    """The run id a line that cannot be read names (the first ``"run": "…"`` of its head), or None."""
    m = _RUN_RE.search(raw[:4096])
    if m is None:
        return None
    try:
        v = _json.loads(b'"' + m.group(1) + b'"')
    except _json.JsonError:
        return None
    return v if isinstance(v, str) else None


class LostLine:
    """A line that cannot be read as an event: why, and the head it was read from (to tell its run)."""

    __slots__ = ("head", "message")

    def __init__(self, head: bytes, message: str) -> None:
        self.head = head
        self.message = message


class LedgerReader:
    """The events of a run ledger, in file order: iterating yields ``(line number, event, the raw line)``,
    the event a dict, or a :class:`LostLine` for a line that cannot be read. Blank lines are skipped.

    The loop is the hot path: one readline and one parse per event.

    ``split = (me, ways)`` (``--jobs`` on one file, see ``_split``): only the lines of the runs process
    ``me`` owns — a cheap scan reads the run id from the raw line (the ledger writer's fixed prefix, else
    the first ``"run": "…"``, as an unreadable line is attributed) and a hash of it picks the owner; every
    line is still numbered. ``lines``: (line number, line) of the lines to read, instead of reading ``fh``
    line by line (``_split.owned_lines``: the lines of the runs this process owns, found by a block-wise
    scan); a line longer than ``max_line`` comes as its first ``max_line + 1`` bytes without a newline.
    """

    def __init__(self, fh: IO[bytes], options: Options, first_line: int = 1, split: tuple[int, int] | None = None,
                 lines: Iterator[tuple[int, bytes]] | None = None) -> None:
        self.fh = fh
        self.opts = options
        self.first_line = first_line
        self.split = split
        self.lines = lines

    def __iter__(self) -> Iterator[tuple[int, Json, bytes]]:
        if self.split is None and self.lines is None:
            return self._plain()
        return self._general()

    def _plain(self) -> Iterator[tuple[int, Json, bytes]]:
        """The whole file, line by line (the hot path: one readline and one parse per event)."""
        opts = self.opts
        loads = safejson.fast_loader(opts.limits)
        readline = self.fh.readline
        limit = opts.max_line + 1
        n = self.first_line - 1
        while True:
            raw = readline(limit)
            if not raw:
                return
            n += 1
            if len(raw) == limit and not raw.endswith(b"\n"):
                yield n, self._too_long(raw, True), raw[:HEAD]
                continue
            if n == 1 and raw[:3] == b"\xef\xbb\xbf":
                raw = raw[3:]  # a byte order mark at the start of the file
            try:
                ev = loads(raw)
            except (ValueError, RecursionError) as exc:
                if raw.strip():
                    yield n, _not_json(raw, exc), raw
                continue
            if ev.__class__ is not dict:
                yield n, _not_object(ev), raw
                continue
            yield n, ev, raw

    def _general(self) -> Iterator[tuple[int, Json, bytes]]:
        """One process's share of a file split with ``--jobs`` (scanned here, or the lines given)."""
        fh = self.fh
        opts = self.opts
        loads = safejson.fast_loader(opts.limits)
        readline = fh.readline
        limit = opts.max_line + 1
        n = self.first_line - 1
        me, ways = self.split if self.split is not None else (0, 0)
        owners: dict[bytes, int] = {}  # run id bytes -> owning process
        nxt = self.lines.__next__ if self.lines is not None else None
        while True:
            if nxt is not None:
                try:
                    n, raw = nxt()
                except StopIteration:
                    break
            else:
                raw = readline(limit)
                if not raw:
                    break
                n += 1
            if ways and nxt is None:
                key = raw[14:raw.find(b'"', 14)] if raw.startswith(_FAST_PREFIX) else route_key(raw)
                if b"\\" in key:  # an escape: route by the id it spells
                    key = route_key(raw)
                owner = owners.get(key)
                if owner is None:
                    if len(owners) > 65536:
                        owners.clear()
                    owner = owners[key] = crc32(key) % ways
                if owner != me:
                    while raw and not raw.endswith(b"\n"):  # an over-long line: skip all of it
                        raw = readline(1 << 20)
                    continue
            if len(raw) == limit and not raw.endswith(b"\n"):
                yield n, self._too_long(raw, nxt is None), raw[:HEAD]
                continue
            if n == 1 and raw[:3] == b"\xef\xbb\xbf":
                raw = raw[3:]  # a byte order mark at the start of the file
            try:
                ev = loads(raw)
            except (ValueError, RecursionError) as exc:
                if raw.strip():
                    yield n, _not_json(raw, exc), raw
                continue
            if ev.__class__ is not dict:
                yield n, _not_object(ev), raw
                continue
            yield n, ev, raw

    def _too_long(self, raw: bytes, rest_unread: bool) -> LostLine:
        """An over-long line, of which ``raw`` was read: its head is kept, the rest of it skipped."""
        head = raw[:HEAD]
        while rest_unread and raw and not raw.endswith(b"\n"):
            raw = self.fh.readline(1 << 20)
        return LostLine(head, self.opts.limits.too_long("line") + ": skipped")


def _not_json(raw: bytes, exc: BaseException) -> LostLine:
    # "not JSON: …", or the limit the line is past
    msg = exc.message() if isinstance(exc, safejson.JsonInputError) else f"not JSON: {_json_reason(exc)}"
    return LostLine(raw, msg)


def _not_object(ev: Json) -> LostLine:
    return LostLine(b"", f"a ledger event must be a JSON object, got {_kind(ev)}")


def _kind(v: Json) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(v), "a number")


def _json_reason(exc: BaseException) -> str:
    if isinstance(exc, safejson.JsonInputError):
        return exc.message().removeprefix("not JSON: ")
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 (byte {exc.start})"
    msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if "recursion" in msg.lower() or "depth" in msg.lower():
        return "nested too deeply"
    return msg
