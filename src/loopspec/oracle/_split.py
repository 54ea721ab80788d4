"""``check --jobs N`` on one ledger file: N processes share it, each owning the runs its lines name.

Every process reads the whole file and numbers every line, but parses and checks only the lines whose
run it owns: a cheap scan reads the run id from the raw bytes (the ledger writer's fixed prefix
``{"v":1,"run":"…"``, else the first ``"run": "…"`` of the line, as a line that cannot be read is
attributed) and a CRC-32 of it picks the owner, so a run never spans processes and each process sees
its runs' events in order. Items (run records and input errors) are sent back in batches tagged with
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
import time
from collections.abc import Iterator
from typing import Any, Final

from .._judge import default_spec
from .._spec import Spec
from . import _json
from ._records import InputError, RunRecord, Summary
from ._stream import DEFAULT_OPTIONS, LedgerStream, Options, read_lines

Json = Any

#: Items per message from a worker to the parent.
BATCH: Final = 256

_EOF: Final = 1 << 62
_Key = tuple[int, int]


def _worker(path: str, me: int, ways: int, opts: Options, spec: Spec | None, conn: Any) -> None:
    stream: LedgerStream | None = None
    try:
        stream = LedgerStream(spec or default_spec(), path, opts)
        batch: list[tuple[_Key, RunRecord | InputError]] = []
        k = 0
        with open(path, "rb") as fh:
            for item in stream.run(fh, 1, split=(me, ways)):
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


def is_ledger(path: str, opts: Options = DEFAULT_OPTIONS) -> bool:
    """Would ``--input-format auto`` read this file as a ledger? (its first non-blank line is a ledger
    event; when that line is not JSON on its own, one of the next few lines is.)"""
    from ._check import _kind_of

    try:
        with open(path, "rb") as fh:
            seen = 0
            for _n, raw, _err in read_lines(fh, opts.max_line):
                if raw is not None and not raw.strip():
                    continue
                seen += 1
                try:
                    kind = _kind_of(_json.loads(raw)) if raw is not None else ""
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
                summary: Summary | None = None, info: dict[str, Any] | None = None) -> Iterator[RunRecord | InputError]:
    """Check one ledger file with ``jobs`` processes; yields what :func:`iter_check_file` yields, in the
    same order, and updates ``summary`` the same way. ``info["fallback"]`` tells where and why the rest of
    the file was checked in one process, when it was; else ``info["workerCpuSeconds"]`` the CPU time of
    each process."""
    summary = summary if summary is not None else Summary()
    summary.files += 1
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    workers: list[_Worker] = []
    for me in range(jobs):
        parent, child = ctx.Pipe(duplex=True)
        p = ctx.Process(target=_worker, args=(path, me, jobs, options, spec, child), daemon=True)
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
    stream = LedgerStream(spec or default_spec(), path, options)
    with open(path, "rb") as fh:
        for item in stream.run(fh, 1):
            if stream.at_eof or stream.line >= resume:
                yield emit(item)
    summary.events += stream.events
