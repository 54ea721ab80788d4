"""``check --jobs N`` on one ledger file: N processes share it, each owning the runs its lines name.

Every process reads the whole file and numbers every line, but parses and checks only the lines whose
run it owns: a cheap scan reads the run id from the raw bytes (the ledger writer's fixed prefix
``{"v":1,"run":"…"``, else the first ``"run": "…"`` of the line, as a line that is not JSON is
attributed) and a CRC-32 of it picks the owner, so a run never spans processes and each process sees
its runs' events in order. Items (run records and input errors) are sent back in batches tagged with
the line they were produced at (end-of-file records after every line, in the order their runs
started); the parent merges the N sorted streams, so the report is the one a single process writes.

A line whose scanned run id differs from the one the parser reads (a ``"run"`` key inside a nested
object before the top-level one, a repeated ``"run"`` key) would put a run's events in two processes:
each process notices when it meets an event of a run it does not own, and the file is then checked
again in one process. The parent holds the records until every process has finished (to fall back
cleanly), so ``--jobs`` on one file trades streaming output for speed.
"""

from __future__ import annotations

import contextlib
import heapq
import multiprocessing as mp
import os
import sys
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
BATCH: Final = 512

_EOF_LINE: Final = 1 << 62


def _worker(path: str, me: int, ways: int, opts: Options, spec: Spec | None, parser: str, conn: Any) -> None:
    try:
        _json.use_parser(parser)
        stream = LedgerStream(spec or default_spec(), path, opts)
        batch: list[tuple[tuple[int, int], RunRecord | InputError]] = []
        k = 0
        with open(path, "rb") as fh:
            for item in stream.run(fh, 1, split=(me, ways)):
                if stream.at_eof:
                    key = (_EOF_LINE, item.lines[0] if isinstance(item, RunRecord) else 0)
                else:
                    key = (stream.line, k)
                k += 1
                batch.append((key, item))
                if len(batch) >= BATCH:
                    conn.send(("items", batch))
                    batch = []
        if batch:
            conn.send(("items", batch))
        conn.send(("done", (stream.events, stream.misrouted, time.process_time())))
    except BaseException as exc:  # reported by the parent, which then checks the file in one process
        with contextlib.suppress(Exception):
            conn.send(("failed", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def _stream_of(conn: Any, state: dict[str, Any]) -> Iterator[tuple[tuple[int, int], RunRecord | InputError]]:
    while True:
        try:
            kind, payload = conn.recv()
        except EOFError:
            state["failed"] = "a worker ended without its results"
            return
        if kind == "items":
            yield from payload
        elif kind == "done":
            state["events"] += payload[0]
            state["misrouted"] = state["misrouted"] or payload[1]
            state["cpu"].append(payload[2])
            return
        else:
            state["failed"] = payload
            return


def is_ledger(path: str, opts: Options = DEFAULT_OPTIONS) -> bool:
    """Would ``--input-format auto`` read this file as a ledger? (its first non-blank line is a ledger
    event; when that line is not JSON on its own, one of the next lines is.)"""
    from ._check import _kind_of

    try:
        with open(path, "rb") as fh:
            seen = 0
            first = True
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
                if first and kind:
                    return False
                first = False
                if seen > 8:
                    return False
    except OSError:
        return False
    return False


def check_split(path: str, jobs: int, *, options: Options = DEFAULT_OPTIONS, spec: Spec | None = None,
                summary: Summary | None = None, info: dict[str, Any] | None = None) -> Iterator[RunRecord | InputError]:
    """Check one ledger file with ``jobs`` processes; yields what :func:`iter_check_file` yields, in the
    same order, and updates ``summary`` the same way. ``info["fallback"]`` says why the file was checked
    again in one process, when it was; else ``info["workerCpuSeconds"]`` the CPU time of each process."""
    from ._check import iter_check_file

    summary = summary if summary is not None else Summary()
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    pipes = []
    procs = []
    for me in range(jobs):
        recv, send = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_worker, args=(path, me, jobs, options, spec, _json.PARSER, send), daemon=True)
        p.start()
        send.close()
        pipes.append(recv)
        procs.append(p)
    state: dict[str, Any] = {"events": 0, "misrouted": False, "failed": None, "cpu": []}
    try:
        items = [item for _key, item in heapq.merge(*(_stream_of(c, state) for c in pipes), key=lambda x: x[0])]
    finally:
        for c in pipes:
            c.close()
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
    if state["failed"] or state["misrouted"]:
        if info is not None:
            info["fallback"] = "misrouted" if state["misrouted"] else f"failed: {state['failed']}"
        if state["failed"] and os.environ.get("LOOPSPEC_DEBUG"):
            print(f"loopspec check: --jobs fell back to one process: {state['failed']}", file=sys.stderr)
        yield from iter_check_file(path, input_format="ledger", options=options, spec=spec, summary=summary)
        return
    if info is not None:
        info["workerCpuSeconds"] = state["cpu"]
    summary.files += 1
    summary.events += state["events"]
    for item in items:
        if isinstance(item, InputError):
            summary.input_errors += 1
        else:
            summary.add(item)
        yield item
