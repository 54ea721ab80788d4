"""``check --jobs N`` on one ledger file: N processes share it, each owning the runs its lines name.

Every process reads the whole file and numbers every line, but parses and checks only the lines whose
run it owns: a cheap scan (:func:`owned_lines`: blocks of the file split into lines in C) reads the run
id from the raw bytes (the ledger writer's fixed prefix ``{"v":1,"run":"…"``, else the first
``"run": "…"`` of the line, as a line that cannot be read is attributed) and a CRC-32 of it picks the
owner, so a run never spans processes and each process sees its runs' events in order. Each process
publishes its read position (shared memory), so the parent can show how far the file has been read. Items (run records and input errors) are sent back in batches tagged with
the line they were produced at; the parent merges the N sorted streams as they come and yields them,
so the report is the one a single process writes, streamed.

Two things are not local to a run, and are settled in two phases: at the end of the file, a run left
open is judged against the last line that could not be read and given to a run (``lost_line``), so each
process reports its own and waits for the largest before it closes its open runs (their records come
last, in the order the runs started, as in one process).

A line whose scanned run id is not the one the parser reads (a ``"run"`` key inside a nested object
before the top-level one, a repeated ``"run"`` key) stops the process that meets it at that line. Every
item before that line is already right (the runs were partitioned alike up to there) and has been
yielded; the parent then checks the file in one process and yields its items from that line on.
"""

from __future__ import annotations

import contextlib
import heapq
import multiprocessing as mp
import os
import time
from collections.abc import Callable, Iterator
from typing import Any, Final
from zlib import crc32

from ..judge.verdict import default_spec
from ..spec.loader import Spec
from . import _json
from ._check import LedgerCheck
from ._detect import kind_of
from ._options import DEFAULT_OPTIONS, Options
from ._read.lines import _FAST_PREFIX, read_lines, route_key
from ._records import InputError, RunRecord, Summary

Json = Any

#: Items per message from a worker to the parent.
BATCH: Final = 256

_EOF: Final = 1 << 62
_Key = tuple[int, int]

#: Bytes read at once by the scan.
BLOCK: Final = 1 << 20


def owned_lines(fh: Any, me: int, ways: int, limit: int, tell: Callable[[int], None] | None = None,
                block_size: int = BLOCK) -> Iterator[tuple[int, bytes]]:
    """(line number, line) of every line of ``fh`` whose run process ``me`` of ``ways`` owns, numbering
    every line; each line as ``fh.readline(limit)`` returns it (with its newline; a line of ``limit`` bytes
    or more as its first ``limit`` bytes, the rest of it skipped). The file is read in blocks and split in
    C, so a line another process owns costs a slice, a dict lookup and a comparison. ``tell`` is given
    the bytes read so far after each block (the progress line)."""
    mine: dict[bytes, bool] = {}  # run id bytes (as scanned) -> owned by this process
    get = mine.get
    prefix = _FAST_PREFIX
    n = 0
    read = fh.read
    parts: list[bytes] = []  # the start of the current line, read with earlier blocks
    have = 0  # their length
    skip = False  # within a line longer than the limit, already given: drop up to its newline
    offset = 0

    def owner(raw: bytes, nl: bool) -> bool:
        """Whether ``raw`` (a whole line, without its newline) is ours: the key as the readline scan
        reads it (the fast prefix, else the first ``"run": "…"``)."""
        if raw.startswith(prefix):
            j = raw.find(b'"', 14)
            key = raw[14:j] if j >= 0 else raw[14:] if nl else raw[14:-1]
        else:
            key = route_key(raw)
        if b"\\" in key:  # an escape: route by the id it spells (not cached: the loop looks up raw keys)
            key = route_key(raw)
            if b"\\" in key:
                return crc32(key) % ways == me
        got = mine.get(key)
        if got is None:
            if len(mine) > 65536:
                mine.clear()
            got = mine[key] = crc32(key) % ways == me
        return got

    while True:
        block = read(block_size)
        if not block:
            break
        offset += len(block)
        if tell is not None:
            tell(offset)
        if skip:
            k = block.find(b"\n")
            if k < 0:
                continue
            block = block[k + 1:]
            skip = False
        if parts:
            k = block.find(b"\n")
            if k < 0:
                parts.append(block)
                have += len(block)
                if have >= limit:  # a line too long: its first bytes decide, the rest is dropped
                    n += 1
                    head = b"".join(parts)[:limit]
                    parts, have, skip = [], 0, True
                    if owner(head, False):
                        yield n, head
                continue
            line = b"".join(parts) + block[:k]
            parts, have = [], 0
            block = block[k + 1:]
            n += 1
            if len(line) >= limit:
                line = line[:limit]
                if owner(line, False):
                    yield n, line
            elif owner(line, True):
                yield n, line + b"\n"
        lines = block.split(b"\n")
        tail = lines.pop()
        for raw in lines:
            n += 1
            if raw[:14] == prefix:  # (a slice and a partition: cheaper than startswith and find with a start)
                key, quote, _rest = raw[14:].partition(b'"')
                got = get(key) if quote else None
                if got is False:
                    continue
                if got is True and len(raw) < limit:
                    yield n, raw + b"\n"
                    continue
            if len(raw) >= limit:
                raw = raw[:limit]
                if owner(raw, False):
                    yield n, raw
            elif owner(raw, True):
                yield n, raw + b"\n"
        if tail:
            if len(tail) >= limit:
                n += 1
                tail = tail[:limit]
                skip = True
                if owner(tail, False):
                    yield n, tail
            else:
                parts, have = [tail], len(tail)
    if parts:  # the last line, without a newline
        n += 1
        line = b"".join(parts)
        if owner(line, False):
            yield n, line


def _worker(path: str, me: int, ways: int, opts: Options, spec: Spec | None, conn: Any, read: Any = None) -> None:
    stream: LedgerCheck | None = None
    try:
        stream = LedgerCheck(spec or default_spec(), path, opts)
        batch: list[tuple[_Key, RunRecord | InputError]] = []
        k = 0
        with open(path, "rb") as fh:
            tell = None if read is None else lambda offset: read.__setitem__(me, offset)
            for item in stream.run(fh, 1, split=(me, ways), lines=owned_lines(fh, me, ways, opts.max_line + 1, tell)):
                batch.append(((stream.line, k), item))
                k += 1
                if len(batch) >= BATCH:
                    conn.send(("items", batch))
                    batch = []
        if stream.misrouted_at:
            batch.append(((stream.misrouted_at, -1), None))  # type: ignore[arg-type]
        conn.send(("items", batch))
        conn.send(("lost", stream.lost_line))
        if stream.misrouted_at:
            return
        _kind, lost = conn.recv()  # the largest lost_line of all the processes
        stream.lost_line = max(stream.lost_line, lost)
        batch = []
        for item in stream.close():
            batch.append(((_EOF, item.lines[0]), item))
            if len(batch) >= BATCH:
                conn.send(("items", batch))
                batch = []
        conn.send(("items", batch))
        conn.send(("done", (stream.events, time.process_time())))
    except (EOFError, BrokenPipeError):
        pass  # the parent stopped listening (it fell back to one process)
    except BaseException as exc:  # the parent checks the file in one process from the line after the last item
        with contextlib.suppress(Exception):
            line = stream.line + 1 if stream is not None and not stream.at_eof else 1
            conn.send(("items", [((line, -1), None)]))
            conn.send(("failed", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


class _Worker:
    def __init__(self, conn: Any, proc: Any) -> None:
        self.conn, self.proc = conn, proc
        self.lost = 0
        self.events = 0
        self.cpu = 0.0
        self.failed: str | None = None

    def items(self, until: str) -> Iterator[tuple[_Key, RunRecord | InputError | None]]:
        """Items up to the worker's next ``until`` message ("lost" or "done")."""
        while True:
            try:
                kind, payload = self.conn.recv()
            except (EOFError, OSError):
                self.failed = self.failed or "a process ended without its results"
                return
            if kind == "items":
                yield from payload
            elif kind == "lost":
                self.lost = payload
                if until == "lost":
                    return
            elif kind == "done":
                self.events, self.cpu = payload
                return
            else:
                self.failed = payload
                return


def _position(fh: Any) -> int:
    try:
        return os.lseek(fh.fileno(), 0, os.SEEK_CUR)
    except (OSError, ValueError):
        return 0


def is_ledger(path: str, opts: Options = DEFAULT_OPTIONS) -> bool:
    """Would ``--input-format auto`` read this file as a ledger? (its first non-blank line is a ledger
    event; when that line is not JSON on its own, one of the next few lines is.)"""
    try:
        with open(path, "rb") as fh:
            seen = 0
            for _n, raw, _err in read_lines(fh, opts.max_line):
                if raw is not None and not raw.strip():
                    continue
                seen += 1
                try:
                    kind = kind_of(_json.loads(raw)) if raw is not None else ""
                except _json.JsonError:
                    kind = ""
                if kind == "ledger":
                    return True
                if (seen == 1 and kind) or seen > 8:
                    return False
    except OSError:
        return False
    return False


def check_split(path: str, jobs: int, *, options: Options = DEFAULT_OPTIONS, spec: Spec | None = None,
                summary: Summary | None = None, info: dict[str, Any] | None = None,
                on_read: Callable[[Callable[[], int]], None] | None = None) -> Iterator[RunRecord | InputError]:
    """Check one ledger file with ``jobs`` processes; yields what :func:`iter_check_file` yields, in the
    same order, and updates ``summary`` the same way. ``info["fallback"]`` tells where and why the rest of
    the file was checked in one process, when it was; else ``info["workerCpuSeconds"]`` the CPU time of
    each process. ``on_read`` is given a function telling how many bytes of the file have been read
    (the slowest process's read position; callable from any thread), for a progress line."""
    summary = summary if summary is not None else Summary()
    summary.files += 1
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    read = ctx.RawArray("q", jobs)  # each process's read position (shared memory, written once per block)
    if on_read is not None:
        on_read(lambda: min(read))
    workers: list[_Worker] = []
    for me in range(jobs):
        parent, child = ctx.Pipe(duplex=True)
        p = ctx.Process(target=_worker, args=(path, me, jobs, options, spec, child, read), daemon=True)
        p.start()
        child.close()
        workers.append(_Worker(parent, p))

    def emit(item: RunRecord | InputError) -> RunRecord | InputError:
        if isinstance(item, InputError):
            summary.input_errors += 1
        else:
            summary.add(item)
        return item

    resume: int | None = None  # the line from which one process takes over
    why = ""
    try:
        for (line, k), item in heapq.merge(*(w.items("lost") for w in workers), key=lambda x: x[0]):
            if k == -1:  # a misrouted line (or a process that failed there): everything before it is right
                resume = line
                break
            yield emit(item)  # type: ignore[arg-type]
        failed = next((w.failed for w in workers if w.failed), None)
        if resume is not None:
            why = f"line {resume}: " + (f"a process failed ({failed})" if failed else "the scan misread the run id")
        if resume is None:
            lost = max(w.lost for w in workers)
            for w in workers:
                w.conn.send(("close", lost))
            for _key, item in heapq.merge(*(w.items("done") for w in workers), key=lambda x: x[0]):
                yield emit(item)  # type: ignore[arg-type]
            failed = next((w.failed for w in workers if w.failed), None)
            if failed:  # pragma: no cover - a worker died while closing its runs
                raise RuntimeError(f"--jobs: a process failed while closing its runs: {failed}")
            summary.events += sum(w.events for w in workers)
            if info is not None:
                info["workerCpuSeconds"] = [w.cpu for w in workers]
            return
    finally:
        for w in workers:
            w.conn.close()
        for w in workers:
            w.proc.join(timeout=5)
            if w.proc.is_alive():
                w.proc.kill()
                w.proc.join()
    if info is not None:
        info["fallback"] = why
    # one process from line `resume` on (the items before it were yielded already, and are the same)
    stream = LedgerCheck(spec or default_spec(), path, options)
    with open(path, "rb") as fh:
        if on_read is not None:
            on_read(lambda: _position(fh))
        for item in stream.run(fh, 1):
            if stream.at_eof or stream.line >= resume:
                yield emit(item)
    summary.events += stream.events
