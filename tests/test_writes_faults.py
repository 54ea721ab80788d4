"""The write path under injected faults (issue 32): every fault at every point where the engine talks to its
operation ledger or to the external system, on SQLite and on PostgreSQL (tests/writes/faults.py says how each
fault is made). After each, the spec's promises: no key executed twice, every dispatched key confirmed or
reported by key (OUTCOME_UNKNOWN, ``unreconciled``), no run COMPLETED over an unknown write, nothing recorded
lost, the run ledger of all the processes conforming to ``loopspec check``, no process past its timeout — and
docs/writes.md's fault table is these results (``--overwrite`` rewrites it)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from .writes import faults as F


def _run_all(backend_of: Any, kind: str, shared: bool = False) -> list[F.Result]:
    """Every cell of ``kind``: each on a backend of its own, or (``shared``) all on one, each with its own run id
    and principal (so its own keys)."""
    results = []
    one = backend_of(0) if shared else None
    try:
        for n, cell in enumerate(F.cells(kind)):
            backend = one if one is not None else backend_of(n)
            try:
                results.append(F.run_cell(backend, cell, f"{kind[:2]}{n}"))
            finally:
                if one is None:
                    backend.close()
    finally:
        if one is not None:
            one.close()
    return results


def _verdict(results: list[F.Result], kind: str, overwrite: bool) -> None:
    bad = [f"{r.cell.row} {r.cell}: {p}" for r in results for p in r.problems]
    assert not bad, f"{len(bad)} broken promise(s):\n" + "\n".join(bad)
    col = F.column(results)
    if overwrite:
        F.write_column(kind, col)
        return
    doc = F.read_table(F.DOC.read_text(encoding="utf-8"))
    stale = [f"{row}: docs say {doc.get(row, {}).get(kind)!r}, the suite {got!r}" for row, got in col.items()
             if doc.get(row, {}).get(kind) != got]
    missing = [r for r in F.all_rows() if r not in doc]
    assert not stale and not missing, ("docs/writes.md's fault table is stale (python3 .ci/dev.py test "
                                       "tests/test_writes_faults.py --overwrite):\n" + "\n".join(stale + [
                                           f"missing row {m}" for m in missing]))


def test_every_fault_at_every_point_on_sqlite(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    started = time.monotonic()
    results = _run_all(lambda n: F.SQLiteBackend(tmp_path / f"ops{n}.sqlite"), "sqlite")
    assert len(results) == len(F.cells("sqlite")) >= 60
    _verdict(results, "sqlite", request.config.getoption("--overwrite"))
    assert time.monotonic() - started < 120


@pytest.mark.xdist_group("postgres")
def test_every_fault_at_every_point_on_postgres(pg_server: str, request: pytest.FixtureRequest) -> None:
    results = _run_all(lambda n: F.PostgresBackend(pg_server, f"faults{os.getpid()}"), "postgres", shared=True)
    assert len(results) == len(F.cells("postgres")) >= 80
    _verdict(results, "postgres", request.config.getoption("--overwrite"))


@pytest.mark.parametrize("point", ["result", "end-of-run"])
def test_a_real_full_disk_leads_where_the_injected_one_does(tmp_path: Path, point: str) -> None:
    """The table's SQLite "disk full" is the process's file size limit (EFBIG: SQLITE_IOERR_WRITE), which works
    anywhere. Where a small tmpfs can be mounted (root with CAP_SYS_ADMIN, as in CI), the same cells on a truly
    full filesystem (ENOSPC: SQLITE_FULL) keep every promise and end the same way."""
    import sqlite3

    with F.full_tmpfs(1024) as where:
        if where is None:
            pytest.skip("cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN)")
        cell = F.Cell(point, "disk-full", persistent=True)
        real = F.run_cell(F.FullDiskSQLite(where / "ops.sqlite"), cell, "full")
        assert real.problems == []
        limited = F.run_cell(F.SQLiteBackend(tmp_path / "ops.sqlite"), cell, "lim")
        assert real.summary == limited.summary, (real.summary, limited.summary)
        # and the fault is the real one: SQLite says the disk is full
        backend = F.FullDiskSQLite(where / "probe.sqlite")
        led = backend.open()
        backend.apply("disk-full", led)
        try:
            with pytest.raises(sqlite3.OperationalError, match="database or disk is full"):
                led.record_run("probe")
        finally:
            backend.clear("disk-full", led)
            led.close()
