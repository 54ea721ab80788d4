"""The driver: a file goes through the oracle's stages in one direction, each called here in order.

    detect the format  →  read events  →  group them into runs  →  judge each run  →  record the verdict
    _detect               _read/          _group/                  _judge/             _record

No stage calls another; each hands plain data (``_items``, ``_records``) to the next through this module,
and an import-linter contract (``pyproject.toml``, "oracle-stages") keeps it so: a stage may import only the
shared data below the stages, never an earlier stage. Per format:

* **ledger**: lines → events (:class:`~._read.lines.LedgerReader`) → runs by run id
  (:class:`~._group.ledger.LedgerRuns`, runs interleaved) → each event replayed by its run's check as it
  arrives (:mod:`._judge.ledger`, :mod:`._judge.verdicts`) → a record as each run ends (streamed:
  memory grows with the open runs, not with the file);
* **transcripts and framework histories**: documents (:mod:`._read.documents`) → conversations, each read in
  the format it shows (:mod:`._read.conversations`; a conversation is one run) → the conversation judge
  (:mod:`._judge.conversation`) → records;
* **telemetry** (OTLP/JSON, console, the Agents SDK's own traces): documents → spans (:mod:`._read.telemetry`, :mod:`._read.agents_trace`) → runs by trace and agent
  invocation, each with its conversation read from its spans (:mod:`._group.telemetry`; a trace's spans
  may be anywhere in the file, so every span is read first) → the conversation judge, with what the
  spans record (:mod:`._judge.telemetry`) → records;
* **loopspec-trace/1**: documents → the fuzzer's own judge (:mod:`._judge.trace`) → records.

The formats (``--input-format``) and how ``auto`` decides are in :mod:`._detect`.
"""

from __future__ import annotations

import io
import itertools
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any, Final

from ..judge.verdict import default_spec
from ..spec.loader import Spec
from . import _detect, _record
from ._divergence import Divergence, RunInputError
from ._group import ledger as group_ledger
from ._group import telemetry as group_telemetry
from ._judge import verdicts
from ._judge.conversation import ASSUMPTION, WITNESSED, judge_conversation
from ._judge.ledger import RunChecker
from ._judge.telemetry import judge_run
from ._judge.trace import judge_trace, trace_events
from ._options import DEFAULT_OPTIONS, Options
from ._read.agents_trace import read_items as read_agents_items
from ._read.conversations import conversations
from ._read.documents import NDJSON_HINT, Doc, documents
from ._read.histories import FORMATS as HISTORY_FORMATS
from ._read.lines import LedgerReader, LostLine, guess_run, run_owner
from ._read.telemetry import MAX_SPANS, read_spans
from ._read.transcripts import FORMATS as TRANSCRIPT_FORMATS
from ._records import LEDGER_ASSUMPTIONS, MAX_ERRORS_SHOWN, InputError, RunRecord, Summary
from ._schema import bad_event, ledger_problem, unknown_type
from ._tables import EVENT_TYPES, tables_for

Json = Any

TELEMETRY_FORMATS: Final = ("otlp-json", "otel-console", "openai-agents-trace")
INPUT_FORMATS: Final = ("auto", "ledger", "trace", *TRANSCRIPT_FORMATS, *HISTORY_FORMATS, *TELEMETRY_FORMATS)


@dataclass
class FileResult:
    records: list[RunRecord] = field(default_factory=list)
    errors: list[InputError] = field(default_factory=list)  # the first MAX_ERRORS_SHOWN (summary counts all)
    summary: Summary = field(default_factory=Summary)

    def add_error(self, e: InputError) -> None:
        if len(self.errors) < MAX_ERRORS_SHOWN:
            self.errors.append(e)


def _open(path: str) -> IO[bytes]:
    if path == "-":
        return sys.stdin.buffer
    return open(path, "rb")


def iter_check_file(path: str, *, input_format: str = "auto", options: Options = DEFAULT_OPTIONS,
                    spec: Spec | None = None, summary: Summary | None = None,
                    on_open: Callable[[IO[bytes]], None] | None = None) -> Iterator[RunRecord | InputError]:
    """Check one file; yields run records and input errors as they come. ``summary`` is updated.
    ``on_open`` is given the opened file (the command line's progress line reads its position)."""
    spec = spec or default_spec()
    summary = summary if summary is not None else Summary()
    summary.files += 1
    name = path
    try:
        fh = _open(path)
    except FileNotFoundError:
        summary.input_errors += 1
        yield _record.input_error(name, None, "no such file")
        return
    except IsADirectoryError:
        summary.input_errors += 1
        yield _record.input_error(name, None, "is a directory, not a file")
        return
    except OSError as exc:
        summary.input_errors += 1
        yield _record.input_error(name, None, f"cannot read: {exc.strerror}")
        return
    if on_open is not None:
        on_open(fh)
    try:
        for item in _check_open(fh, name, input_format, options, spec, summary):
            if isinstance(item, InputError):
                summary.input_errors += 1
            else:
                summary.add(item)
            yield item
    except OSError as exc:
        summary.input_errors += 1
        yield _record.input_error(name, None, f"cannot read: {exc.strerror or exc}")
    finally:
        if fh is not sys.stdin.buffer:
            fh.close()


def check_file(path: str, *, input_format: str = "auto", options: Options = DEFAULT_OPTIONS,
               spec: Spec | None = None) -> FileResult:
    res = FileResult()
    for item in iter_check_file(path, input_format=input_format, options=options, spec=spec, summary=res.summary):
        if isinstance(item, InputError):
            res.add_error(item)
        else:
            res.records.append(item)
    return res


def read_text_input(data: bytes, name: str = "<memory>", **kw: Any) -> FileResult:
    """Check in-memory bytes (tests, notebooks)."""
    res = FileResult()
    spec = kw.pop("spec", None) or default_spec()
    opts = kw.pop("options", Options())
    fmt = kw.pop("input_format", "auto")
    res.summary.files += 1
    for item in _check_open(io.BytesIO(data), name, fmt, opts, spec, res.summary):
        if isinstance(item, InputError):
            res.summary.input_errors += 1
            res.add_error(item)
        else:
            res.summary.add(item)
            res.records.append(item)
    return res


Keys = tuple[list[tuple[str, int, int]], list[tuple[str, int, int]]]


def check_trace(data: bytes, name: str = "<trace>", *, spec: Spec | None = None) -> tuple[Keys | None,
                                                                                            FileResult | None]:
    """One trace as an OTLP/JSON document (what ``loopspec monitor`` judges), read once: when it is one model
    client's call (no agent invocation, model calls only) that may belong to a longer conversation, the keys of the
    conversation it may continue and of where it may itself be continued — message prefixes (how, length, hash), as
    the group stage stitches such traces (:mod:`._group.stitch`; hashes of this process) — and no verdict yet (the
    caller judges it with the traces of its conversation); for any other trace, its verdicts, exactly as
    :func:`read_text_input` gives them."""
    spec = spec or default_spec()
    fh = io.BytesIO(data)
    head = _detect.detect(fh, "otlp-json", DEFAULT_OPTIONS)  # 1. detect
    if head.first is None or head.early:
        return None, read_text_input(data, name, input_format="otlp-json", spec=spec)
    docs = documents(head.first, itertools.chain(head.peeked, head.lines), head.one_line, name,  # 2. read
                     DEFAULT_OPTIONS, head.doc if head.one_line or head.whole else None, whole=head.whole)
    spans = []
    errors = []
    for s in read_spans(docs, name, "otlp-json"):
        if isinstance(s, InputError):
            errors.append(s)
        else:
            spans.append(s)
    if not errors and len(spans) <= MAX_SPANS:
        keys = group_telemetry.conversation_keys(spans)  # 3. group
        if keys is not None:
            return keys, None
    res = FileResult()
    res.summary.files += 1
    for e in errors:
        res.summary.input_errors += 1
        res.add_error(e)
    if len(spans) <= MAX_SPANS:
        for rec in _judge_spans(spans, name, "otlp-json", spec, res.summary):  # 3. group, 4. judge, 5. record
            res.summary.add(rec)
            res.records.append(rec)
    return None, res


def _check_open(fh: IO[bytes], name: str, fmt: str, opts: Options, spec: Spec,
                summary: Summary) -> Iterator[RunRecord | InputError]:
    """One open file through the stages: detect, then the pipeline of its format."""
    head = _detect.detect(fh, fmt, opts)  # 1. detect
    first = head.first
    if first is None:
        if head.early:
            if len(head.early) == 1 and fmt != "ledger":
                n, _, err = head.early[0]
                yield _record.input_error(name, n, (err or "unreadable line") + NDJSON_HINT)
            else:
                for n, _, err in head.early:
                    yield _record.input_error(name, n, err or "unreadable line")
        else:
            yield _record.input_error(name, None, "the file is empty")
        return
    if head.format == "ledger":
        check = LedgerCheck(spec, name, opts)
        if fh.seekable():
            fh.seek(0)  # the reader reads (and reports) the over-long lines again
            src: IO[bytes] = fh
        else:  # stdin: put back the lines read to decide the format
            for n, _, err in head.early:
                yield _record.input_error(name, n, err or "unreadable line")
            src = _Prepend([first[1] or b"\n"] + [x[1] or b"\n" for x in head.peeked], fh)
        try:
            yield from check.run(src, 1 if fh.seekable() else first[0])
        finally:
            summary.events += check.events
        return
    for n, _, err in head.early:
        yield _record.input_error(name, n, err or "unreadable line")
    docs = documents(first, itertools.chain(head.peeked, head.lines), head.one_line, name, opts,  # 2. read
                     head.doc if head.one_line or head.whole else None, whole=head.whole)
    if head.format in TELEMETRY_FORMATS:
        yield from _check_telemetry(docs, name, head.format, spec, summary)
    elif head.format == "trace":
        yield from _check_traces(docs, name, spec, summary)
    else:
        yield from _check_conversations(docs, name, None if head.format == "transcript" else head.format, opts, spec,
                                        summary)


class _Prepend(io.RawIOBase):
    """A byte stream that yields ``head`` (lines already read) before the rest of ``fh``."""

    def __init__(self, head: list[bytes], fh: IO[bytes]) -> None:
        self.head = list(reversed(head))
        self.fh = fh

    def readline(self, size: int | None = -1) -> bytes:  # type: ignore[override]
        if self.head:
            return self.head.pop()
        return self.fh.readline(size if size is not None else -1)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False


# --------------------------------------------------------------------------------------------
# Documents: traces, conversations, telemetry
# --------------------------------------------------------------------------------------------


def _check_traces(docs: Iterator[Doc | InputError], name: str, spec: Spec,
                  summary: Summary) -> Iterator[RunRecord | InputError]:
    for d in docs:
        if isinstance(d, InputError):
            yield d
            continue
        summary.events += trace_events(d.value)
        yield _record.record(name, judge_trace(d.value, d.number, d.line, spec))  # 4. judge, 5. record


def _check_conversations(docs: Iterator[Doc | InputError], name: str, fmt: str | None, opts: Options, spec: Spec,
                         summary: Summary) -> Iterator[RunRecord | InputError]:
    """Transcripts and histories: each conversation read is one run (there is nothing to group)."""
    t = tables_for(spec)
    for c in conversations(docs, name, fmt):  # 2. read
        if isinstance(c, InputError):
            yield c
            continue
        summary.events += c.entries
        if c.items is None:
            yield _record.unreadable(name, c.id, c.entries, (c.line, c.line), c.error or "", c.error_line, c.format)
            continue
        j = judge_conversation(c, t.rules, t.rule_ids, allow_incomplete=opts.allow_incomplete)  # 4. judge
        yield _record.record(name, j)  # 5. record


def _check_telemetry(docs: Iterator[Doc | InputError], name: str, fmt: str, spec: Spec,
                     summary: Summary) -> Iterator[RunRecord | InputError]:
    """Read every span of the file (a trace's spans may be anywhere in it), group them into runs and judge
    each run's conversation and executions."""
    spans = []
    read = read_agents_items(docs, name) if fmt == "openai-agents-trace" else read_spans(docs, name, fmt)
    for s in read:  # 2. read
        if isinstance(s, InputError):
            yield s
        else:
            spans.append(s)
    if len(spans) > MAX_SPANS:
        return
    yield from _judge_spans(spans, name, fmt, spec, summary)


def _judge_spans(spans: list[Any], name: str, fmt: str, spec: Spec, summary: Summary) -> Iterator[RunRecord]:
    t = tables_for(spec)
    for r in group_telemetry.runs(spans):  # 3. group
        summary.events += r.spans  # a run's events are its model calls and executions, as its record says
        if r.items is None:
            yield _record.unreadable(name, r.id, r.spans, r.lines, r.error or "", r.error_line, fmt)
            continue
        yield _record.record(name, judge_run(r, fmt, t))  # 4. judge, 5. record


def assumption_notes(input_kind: str) -> dict[str, str]:
    if input_kind == "ledger":
        return dict(LEDGER_ASSUMPTIONS)
    if input_kind in WITNESSED:
        return {r: ASSUMPTION for r, how in WITNESSED[input_kind].items() if how == "assumed"}
    if input_kind in TELEMETRY_FORMATS:
        return {r: ASSUMPTION for r in ("R6", "R7")}
    return {}


# --------------------------------------------------------------------------------------------
# Ledgers
# --------------------------------------------------------------------------------------------


class LedgerCheck:
    """Checks the runs of one ledger file as its events are read, and yields a record as each run ends.

    ``run`` reads the file; ``close`` ends the runs left open (``run`` calls it at the end of the file,
    except on one process's share of a file split with ``--jobs``, whose caller closes once it knows every
    process's ``lost_line``). ``line``: the line the latest item was yielded at; ``misrouted_at``: the first
    line whose scanned run id was not the one the parser read (``--jobs``: reading stops there)."""

    def __init__(self, spec: Spec, file: str, options: Options = DEFAULT_OPTIONS) -> None:
        self.t = tables_for(spec)
        self.file = file
        self.opts = options
        self.runs = group_ledger.LedgerRuns()
        self.events = 0
        self.misrouted_at = 0
        self.at_eof = False
        self.line = 0

    @property
    def lost_line(self) -> int:
        """The last line that could not be read and could not be given to a run."""
        return self.runs.lost_line

    @lost_line.setter
    def lost_line(self, value: int) -> None:
        self.runs.lost_line = value

    def run(self, fh: IO[bytes], first_line: int = 1, split: tuple[int, int] | None = None,
            lines: Iterator[tuple[int, bytes]] | None = None) -> Iterator[RunRecord | InputError]:
        """Check every event read from ``fh`` (numbering lines from ``first_line``), then close the runs left
        open. The loop is the hot path: per event, the reader's readline and parse, one dict lookup for the
        run, and the run's ``feed``. ``split`` and ``lines``: see :class:`~._read.lines.LedgerReader`."""
        t = self.t
        file = self.file
        types = EVENT_TYPES
        open_runs = self.runs.open
        validate = self.opts.validate
        me, ways = split if split is not None else (0, 0)
        events = 0
        it = iter(LedgerReader(fh, self.opts, first_line, split, lines))  # 2. read
        try:
            for n, ev, raw in it:
                if ev.__class__ is not dict:
                    self.line = n
                    yield from self._lost(n, ev)
                    continue
                events += 1
                run = ev.get("run")
                chk = open_runs.get(run) if run.__class__ is str else None  # 3. group
                if chk is None:
                    if ways and run.__class__ is str and run_owner(run, ways) != me:
                        self.misrouted_at = n  # the scan read another run id than the parser did
                        return
                    self.line = n
                    yield from self._not_open(ev, n, run, raw)
                    continue
                typ = ev.get("type")
                if typ.__class__ is not str or typ not in types:
                    self.line = n
                    yield self._unreadable(chk, n, unknown_type(ev))
                    continue
                if validate:
                    msg = ledger_problem(ev)
                    if msg is not None:
                        self.line = n
                        yield self._unreadable(chk, n, msg)
                        continue
                if typ == "run_resumed":  # section 6 (R46): another process continues the run after a crash
                    self.line = n
                    yield from self._resumed(chk, ev, n, raw)
                    continue
                try:
                    chk.feed(ev, n)  # 4. judge
                except Divergence as d:
                    self.line = n
                    yield self._violation(chk, d, n)
                except RunInputError as e:
                    self.line = n
                    yield self._unreadable(chk, e.line or n, e.message)
                except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError) as exc:
                    self.line = n
                    yield self._unreadable(chk, n, bad_event(ev, exc))
                else:
                    if chk.terminal:
                        self.line = n
                        self.runs.ended(chk.run_id, verdicts.finished(chk))
                        yield _record.record(file, verdicts.conforming(t, chk))  # 5. record
        finally:
            it.close()
            self.events += events
        self.at_eof = True
        if not ways:
            yield from self.close()

    def _lost(self, n: int, lost: LostLine) -> Iterator[RunRecord | InputError]:
        """Line ``n`` cannot be read: it ends the run it belongs to (told from its head) as unreadable, or,
        when no open run can be named, is an input error of the file."""
        run = guess_run(lost.head) if lost.head else None
        what, chk = self.runs.lost(n, run)
        if what == group_ledger.UNREADABLE:
            yield self._unreadable(chk, n, lost.message)
        elif what == group_ledger.START:  # the first line of a run: the run is unreadable
            assert run is not None
            yield _record.unreadable(self.file, run, 1, (n, n), lost.message, n)
        else:
            yield _record.input_error(self.file, n, lost.message + (f" (an event of run {run!r}?)" if run else ""))

    def _not_open(self, ev: dict[str, Json], n: int, run: Json, raw: bytes) -> Iterator[RunRecord | InputError]:
        what, arg = self.runs.not_open(ev, run)
        if what == group_ledger.ERROR:
            yield _record.input_error(self.file, n, arg if arg is not None else unknown_type(ev))
        elif what == group_ledger.UNREADABLE:
            yield _record.unreadable(self.file, run, 1, (n, n), arg, n)
        elif what == group_ledger.AFTER:
            d = verdicts.after_end(arg, ev, n)  # 4. judge the event against the run's end
            if d is not None:
                arg.conformed = False
                yield _record.record(self.file, verdicts.amendment(self.t, run, d, ev, n, arg))
        elif what == group_ledger.START:
            yield from self._start(ev, n, run, raw)

    def _start(self, ev: dict[str, Json], n: int, run: str, raw: bytes) -> Iterator[RunRecord]:
        if self.opts.validate:
            msg = ledger_problem(ev)
            if msg is not None:
                self.runs.given_up(run)
                yield _record.unreadable(self.file, run, 1, (n, n), msg, n)
                return
        try:
            self.runs.opened(run, verdicts.start(self.t, run, ev, n, raw))
        except Divergence as d:
            self.runs.given_up(run)
            yield _record.unreadable(self.file, run, 1, (n, n), d.then, n)
        except RunInputError as e:
            self.runs.given_up(run)
            yield _record.unreadable(self.file, run, 1, (n, n), e.message, e.line or n)
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            self.runs.given_up(run)
            yield _record.unreadable(self.file, run, 1, (n, n), bad_event(ev, exc), n)

    def _resumed(self, old: RunChecker, ev: dict[str, Json], n: int, raw: bytes) -> Iterator[RunRecord]:
        """``run_resumed`` for an open run: its process crashed, another goes on (checked across the restart)."""
        try:
            new = verdicts.resume(old, ev, n, raw)
        except RunInputError as e:
            yield self._unreadable(old, e.line or n, e.message)
            return
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            yield self._unreadable(old, n, bad_event(ev, exc))
            return
        self.runs.opened(old.run_id, new)
        try:
            verdicts.restart(new, ev, n)
        except Divergence as d:
            yield self._violation(new, d, n)
        except RunInputError as e:
            yield self._unreadable(new, e.line or n, e.message)

    def _violation(self, chk: RunChecker, d: Divergence, n: int) -> RunRecord:
        self.runs.given_up(chk.run_id)
        return _record.record(self.file, verdicts.violating(self.t, chk, d, line=n))

    def _unreadable(self, chk: RunChecker, line: int, message: str) -> RunRecord:
        self.runs.given_up(chk.run_id)
        return _record.unreadable(self.file, chk.run_id, chk.events, (chk.first_line, line), message, line)

    def close(self) -> Iterator[RunRecord]:
        """The runs left open at the end of the file: each violates R21 (no terminal event), unless
        ``--allow-incomplete``, or unless a line that could not be read came after its last event."""
        lost = self.runs.lost_line
        for chk in self.runs.left_open():
            if self.opts.allow_incomplete:
                yield _record.record(self.file, verdicts.conforming(self.t, chk, incomplete=True))
            elif lost > chk.last_line:
                yield _record.unreadable(
                    self.file, chk.run_id, chk.events, (chk.first_line, lost),
                    f"run {chk.run_id!r} has no terminal event, but line {lost} could not be read and may "
                    "have held it: the run cannot be judged", lost)
            else:
                yield _record.record(self.file, verdicts.at_eof(self.t, chk))
