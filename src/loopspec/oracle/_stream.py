"""Reading inputs: lines of a file (bounded length), and the ledger loop that demultiplexes runs.

Memory: the file is read line by line (a line longer than ``max_line`` bytes is skipped without
being held; its first 4 KiB are kept to tell whose line it was), each open run keeps one
:class:`~._ledger.RunChecker`, and a finished run leaves only a :class:`~._ledger.Finished` note
(to judge a late result and to tell an event after the terminal one from a new run; a run that did
not conform shares one note) — so memory grows with the number of *open* runs and their distinct
call ids, plus the run id and a small note per finished run, never with the number of events or of
bad lines.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any, Final
from zlib import crc32

from ..spec.loader import Spec
from ..support import safejson
from . import _json
from ._classify import after_terminal_divergence
from ._divergence import GAVE_UP, Divergence, Finished, RunInputError
from ._ledger import RunChecker
from ._records import InputError, RunRecord, conforming_record, unreadable_record, violation_record
from ._tables import EVENT_TYPES, tables_for
from ._writes import WriteTracker

Json = Any

#: Default longest line read (bytes); longer lines are skipped with an error naming the line. The same
#: limit bounds a transcript or trace file that is one JSON document.
DEFAULT_MAX_LINE: Final = safejson.MAX_BYTES

#: How much of an over-long line is kept to tell which run it belongs to.
HEAD: Final = 4096

_RUN_RE: Final = re.compile(rb'"run"\s*:\s*"((?:[^"\\]|\\.){1,200})"')


@dataclass(frozen=True)
class Options:
    max_line: int = DEFAULT_MAX_LINE
    allow_incomplete: bool = False
    validate: bool = False  # validate every event against the ledger JSON Schema (slow)

    @property
    def limits(self) -> safejson.Limits:
        """The loader's limits for these options (``max_line`` bounds a line and a whole document)."""
        return safejson.Limits(max_bytes=self.max_line, flag="--max-line-bytes")


DEFAULT_OPTIONS: Final = Options()


def read_lines(fh: IO[bytes], max_line: int) -> Iterator[tuple[int, bytes | None, str | None]]:
    """(line number, the line or None, an error or None), reading at most ``max_line`` bytes at once."""
    lim = Options(max_line=max_line).limits
    for n, raw, err, _head in safejson.iter_lines(fh, limits=lim):
        yield n, raw, err


#: How the engine writes every ledger line: the run id follows at a fixed offset (the top-level key).
_FAST_PREFIX: Final = b'{"v":1,"run":"'


def route_key(raw: bytes) -> bytes:
    """The run id a raw line names, as UTF-8 (what ``--jobs`` routes by): the first ``"run": "…"`` in
    the line's first 4096 bytes, as :func:`_guess_run` reads it for a line that cannot be read; b"" when
    there is none."""
    m = _RUN_RE.search(raw[:HEAD])
    if m is None:
        return b""
    key = m.group(1)
    if b"\\" in key:
        v = _guess_run(raw)
        return v.encode("utf-8", "surrogatepass") if v is not None else key
    return key


def run_owner(run: str, ways: int) -> int:
    """Which of ``ways`` processes owns a run (a hash that every process computes alike)."""
    return crc32(run.encode("utf-8", "surrogatepass")) % ways


def _guess_run(raw: bytes) -> str | None:
    m = _RUN_RE.search(raw[:4096])
    if m is None:
        return None
    try:
        v = _json.loads(b'"' + m.group(1) + b'"')
    except _json.JsonError:
        return None
    return v if isinstance(v, str) else None


class LedgerStream:
    """Checks the runs of one ledger file; ``feed`` lines, then ``close``. Yields records as runs end."""

    def __init__(self, spec: Spec, file: str, options: Options = DEFAULT_OPTIONS) -> None:
        self.t = tables_for(spec)
        self.file = file
        self.opts = options
        self.open: dict[str, RunChecker] = {}
        self.finished: dict[str, Finished] = {}
        self.events = 0
        self.error_count = 0
        self.lost_line = 0  # the last line that could not be read and could not be given to a run
        # --jobs on one file (see run's split and _split)
        self.split: tuple[int, int] | None = None
        self.misrouted_at = 0  # the first line whose scanned run id is not the one the parser read
        self.at_eof = False
        self.line = 0  # the line the latest item was yielded at

    def _error(self, line: int | None, message: str) -> InputError:
        self.error_count += 1
        return InputError(self.file, line, message)

    def run(self, fh: IO[bytes], first_line: int = 1, split: tuple[int, int] | None = None,
            lines: Iterator[tuple[int, bytes]] | None = None) -> Iterator[RunRecord | InputError]:
        """Check every event read from ``fh`` (numbering lines from ``first_line``), then close the
        runs left open. The loop is the hot path: one readline, one parse, one dict lookup and the
        run's ``feed`` per event.

        ``split = (me, ways)`` (``--jobs`` on one file, see ``_split``): check only the lines of the runs
        this process owns — a cheap scan reads the run id from the raw line (the ledger writer's fixed
        prefix, else the first ``"run": "…"`` as an unreadable line is attributed) and a hash of it
        picks the owner; every line is still numbered. The runs left open are not closed (the caller
        calls :meth:`close` once it knows every process's ``lost_line``), and reading stops at the first
        line the scan routed wrongly (``misrouted_at``). ``self.line`` is the line each item was
        yielded at.

        ``lines``: (line number, line) of the lines to check, instead of reading ``fh`` line by line
        (``_split.owned_lines``: the lines of the runs this process owns, found by a block-wise scan);
        a line longer than ``max_line`` comes as its first ``max_line + 1`` bytes without a newline."""
        loads = safejson.fast_loader(self.opts.limits)
        types = EVENT_TYPES
        open_runs = self.open
        readline = fh.readline
        limit = self.opts.max_line + 1
        validate = self.opts.validate
        n = first_line - 1
        events = 0
        me, ways = split if split is not None else (0, 0)
        owners: dict[bytes, int] = {}  # run id bytes -> owning process
        self.split = split
        nxt = lines.__next__ if lines is not None else None
        try:
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
                    head = raw[:HEAD]
                    while nxt is None and raw and not raw.endswith(b"\n"):
                        raw = readline(1 << 20)
                    self.line = n
                    yield from self._lost(n, head, self.opts.limits.too_long("line") + ": skipped")
                    continue
                if n == 1 and raw[:3] == b"\xef\xbb\xbf":
                    raw = raw[3:]  # a byte order mark at the start of the file
                try:
                    ev = loads(raw)
                except (ValueError, RecursionError) as exc:
                    if not raw.strip():
                        continue
                    self.line = n
                    yield from self._bad_line(n, raw, exc)
                    continue
                if ev.__class__ is not dict:
                    self.line = n
                    yield from self._lost(n, b"", f"a ledger event must be a JSON object, got {_kind(ev)}")
                    continue
                events += 1
                run = ev.get("run")
                chk = open_runs.get(run) if run.__class__ is str else None  # type: ignore[arg-type]
                if chk is None:
                    if ways and run.__class__ is str and run_owner(run, ways) != me:  # type: ignore[arg-type]
                        self.misrouted_at = n  # the scan read another run id than the parser did
                        return
                    self.line = n
                    yield from self._not_open(ev, n, run, raw)
                    continue
                typ = ev.get("type")
                if typ.__class__ is not str or typ not in types:
                    self.line = n
                    yield self._close_unreadable(chk, n, _unknown_type(ev))
                    continue
                if validate:
                    msg = _schema_problem(ev)
                    if msg is not None:
                        self.line = n
                        yield self._close_unreadable(chk, n, msg)
                        continue
                if typ == "run_resumed":  # section 6 (R46): another process continues the run after a crash
                    self.line = n
                    yield from self._resumed(chk, ev, n, raw)
                    continue
                try:
                    chk.feed(ev, n)
                except Divergence as d:
                    self.line = n
                    yield self._violation(chk, d, ev, n)
                except RunInputError as e:
                    self.line = n
                    yield self._close_unreadable(chk, e.line or n, e.message)
                except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError) as exc:
                    self.line = n
                    yield self._close_unreadable(chk, n, _explain_bad_event(ev, exc))
                else:
                    if chk.terminal:
                        self.line = n
                        del open_runs[chk.run_id]
                        self.finished[chk.run_id] = Finished(True, chk.inflight, chk.terminal_line, seq=chk.seq,
                                                                abandoned=chk.abandoned if chk.concurrent else None)
                        yield conforming_record(self.t, chk, self.file)
        finally:
            self.events += events
        self.at_eof = True
        if not ways:
            yield from self.close()

    def _lost(self, n: int, head: bytes, message: str) -> Iterator[RunRecord | InputError]:
        """Line ``n`` cannot be read: it ends the run it belongs to (told from ``head``) as unreadable,
        or, when no open run can be named, is an input error of the file — and a run still open at the
        end of the file is then not blamed for a missing terminal event (line ``n`` may have held it)."""
        run = _guess_run(head) if head else None
        chk = self.open.get(run) if run is not None else None
        if chk is not None:
            yield self._close_unreadable(chk, n, message)
            return
        if run is not None and run not in self.finished:  # the first line of a run: the run is unreadable
            self.finished[run] = GAVE_UP
            yield unreadable_record(self.file, run, 1, (n, n), message, n)
            return
        self.lost_line = n
        yield self._error(n, message + (f" (an event of run {run!r}?)" if run else ""))

    def _not_open(self, ev: dict[str, Json], n: int, run: Json, raw: bytes = b"") -> Iterator[RunRecord | InputError]:
        if not isinstance(run, str) or not run:
            yield self._error(n, 'a ledger event needs "run": a non-empty string')
            return
        typ = ev.get("type")
        if not isinstance(typ, str) or typ not in EVENT_TYPES:
            yield self._error(n, _unknown_type(ev))
            return
        fin = self.finished.get(run)
        if fin is not None:
            yield from self._after_end(fin, ev, n, run)
            return
        if typ not in ("run_started", "run_resumed"):
            self.finished[run] = GAVE_UP
            yield unreadable_record(self.file, run, 1, (n, n),
                                    f"run {run!r} starts with {typ} (seq {ev.get('seq')!r}), not run_started: its "
                                    "configuration is unknown, so it cannot be checked", n)
            return
        if self.opts.validate:
            msg = _schema_problem(ev)
            if msg is not None:
                self.finished[run] = GAVE_UP
                yield unreadable_record(self.file, run, 1, (n, n), msg, n)
                return
        try:
            if ev.get("seq") != 1 or ev.get("seq").__class__ is not int:
                raise RunInputError(f"{typ} has seq {ev.get('seq')!r}; a run's events are numbered from 1", n)
            k = raw.find(b'"config":')
            chk = RunChecker(self.t, run, ev, n, config_key=raw[k:] if k >= 0 else None)
            if typ == "run_resumed":  # the ledger holds no earlier process of the run: checked from the restart on
                chk.writes = WriteTracker()
                chk.writes.restart(chk, ev, n)
            self.open[run] = chk
        except Divergence as d:
            self.finished[run] = GAVE_UP
            yield unreadable_record(self.file, run, 1, (n, n), d.then, n)
        except RunInputError as e:
            self.finished[run] = GAVE_UP
            yield unreadable_record(self.file, run, 1, (n, n), e.message, e.line or n)
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            self.finished[run] = GAVE_UP
            yield unreadable_record(self.file, run, 1, (n, n), _explain_bad_event(ev, exc), n)

    def _resumed(self, old: RunChecker, ev: dict[str, Json], n: int, raw: bytes) -> Iterator[RunRecord]:
        """``run_resumed`` for an open run: its process crashed (it has no terminal event), another goes on. The
        loop is replayed again from the restart, which is numbered from 1; the write rules go on across it."""
        run = old.run_id
        try:
            if ev.get("seq") != 1 or ev.get("seq").__class__ is not int:
                raise RunInputError(f"run_resumed has seq {ev.get('seq')!r}; a resumed run's events are numbered from 1"
                                    " again", n)
            k = raw.find(b'"config":')
            new = RunChecker(self.t, run, ev, n, config_key=raw[k:] if k >= 0 else None)
        except RunInputError as e:
            yield self._close_unreadable(old, e.line or n, e.message)
            return
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            yield self._close_unreadable(old, n, _explain_bad_event(ev, exc))
            return
        new.first_line, new.events = old.first_line, old.events + 1
        new.writes = old.writes if old.writes is not None else WriteTracker()
        self.open[run] = new
        try:
            new.writes.restart(new, ev, n)
        except Divergence as d:
            yield self._violation(new, d, ev, n)
        except RunInputError as e:
            yield self._close_unreadable(new, e.line or n, e.message)

    def _after_end(self, fin: Finished, ev: dict[str, Json], n: int, run: str) -> Iterator[RunRecord | InputError]:
        if not fin.conformed:
            return  # the run's verdict is already given; its later events change nothing
        typ = ev.get("type")
        if typ == "run_started":
            yield self._error(n, f"run id {run!r} is used again: its run already ended on line {fin.line} (run ids must "
                                 "be unique in a ledger)")
            return
        if ev.get("seq") != fin.seq + 1:
            yield self._error(n, f"seq {ev.get('seq')!r} follows seq {fin.seq} of run {run!r}, which ended on line "
                                 f"{fin.line}")
            return
        fin.seq += 1
        if typ == "late_result_discarded" and fin.late_expected(ev):
            return
        d = after_terminal_divergence(fin, ev, n)
        fin.conformed = False
        yield _amendment(self.t, self.file, run, d, ev, n, fin)

    def _violation(self, chk: RunChecker, d: Divergence, ev: dict[str, Json], n: int) -> RunRecord:
        del self.open[chk.run_id]
        self.finished[chk.run_id] = GAVE_UP
        if d.line is None:
            d.line = n
        return violation_record(self.t, chk, d, self.file)

    def _close_unreadable(self, chk: RunChecker, line: int, message: str) -> RunRecord:
        del self.open[chk.run_id]
        self.finished[chk.run_id] = GAVE_UP
        return unreadable_record(self.file, chk.run_id, chk.events, (chk.first_line, line), message, line)

    def _bad_line(self, n: int, raw: bytes, exc: BaseException) -> Iterator[RunRecord | InputError]:
        # "not JSON: …", or the limit the line is past
        msg = exc.message() if isinstance(exc, safejson.JsonInputError) else f"not JSON: {_json_reason(exc)}"
        yield from self._lost(n, raw, msg)

    def close(self) -> Iterator[RunRecord]:
        for chk in list(self.open.values()):
            del self.open[chk.run_id]
            self.finished[chk.run_id] = GAVE_UP
            if self.opts.allow_incomplete:
                rec = conforming_record(self.t, chk, self.file)
                rec.verdict = "conforms"
                rec.summary = {**rec.summary, "incomplete": True}
                yield rec
                continue
            if self.lost_line > chk.last_line:
                yield unreadable_record(
                    self.file, chk.run_id, chk.events, (chk.first_line, self.lost_line),
                    f"run {chk.run_id!r} has no terminal event, but line {self.lost_line} could not be read and may "
                    "have held it: the run cannot be judged", self.lost_line)
                continue
            yield violation_record(self.t, chk, chk.close_at_eof(), self.file)


def _amendment(t: Any, file: str, run: str, d: Divergence, ev: dict[str, Json], n: int, fin: Finished) -> RunRecord:
    from ..judge.verdict import Violation

    rules = t.rules
    inv = d.invariant_hint if d.invariant_hint in rules.get(d.rule, ()) else None
    expl = (f"Let run {run!r} end with its terminal event on line {fin.line} (conforming up to there).\n{d.then}")
    v = Violation(rule=d.rule, kind=d.kind, index=d.index, expected=d.expected, observed=d.observed, explanation=expl,
                  invariant=inv, invariants=(), transition=None, checked_by=rules.get(d.rule, ()))
    return RunRecord(file, run, "ledger", "violates", fin.seq, (fin.line, n), {}, {}, v,
                     {"event": fin.seq - 1, "seq": ev.get("seq"), "line": n, "observedTransition": ev.get("via")},
                     {"events": fin.seq - 1, "lastLine": fin.line}, amends=True)


def _kind(v: Json) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(v), "a number")


def _unknown_type(ev: dict[str, Json]) -> str:
    typ = ev.get("type")
    if typ is None:
        return 'the event has no "type"'
    return f"unknown event type {typ!r} (ledger v1 knows: {', '.join(sorted(EVENT_TYPES))})"


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


def _schema_problem(ev: dict[str, Json]) -> str | None:
    from ._schema import ledger_problem

    return ledger_problem(ev)


def _explain_bad_event(ev: dict[str, Json], exc: BaseException) -> str:
    msg = _schema_problem(ev)
    if msg is not None:
        return msg
    return f"{ev.get('type')} event could not be read ({type(exc).__name__}: {exc})"
