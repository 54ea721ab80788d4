"""An operation ledger from what a caller gave (:func:`open_operation_ledger`): ``None`` an in-memory one, a
``postgresql://`` URL the PostgreSQL one (the ``postgres`` extra), any other path SQLite, a ledger object
itself. It imports both back ends; neither imports it.
"""

from __future__ import annotations

from pathlib import Path

from .oplog import LedgerNotFound, MemoryOperationLedger, OperationLedger, SQLiteOperationLedger

__all__ = ["open_operation_ledger"]

def open_operation_ledger(ledger: OperationLedger | str | Path | None, *, create: bool = True) -> OperationLedger:
    """A ledger from what a caller gave: a ``postgresql://`` / ``postgres://`` URL means PostgreSQL (the extra
    ``postgres``), another path SQLite, ``None`` an in-memory one. ``create=False`` (what resuming a run does)
    opens an existing ledger only: a path or database without one is refused with
    :class:`~loopspec.engine.oplog.LedgerNotFound`, and nothing is created (nor is an in-memory ledger made)."""
    if ledger is None:
        if not create:
            raise LedgerNotFound("no operation ledger given: a run is continued from the ledger it recorded")
        return MemoryOperationLedger()
    if isinstance(ledger, str) and ledger.startswith(("postgresql://", "postgres://")):
        from .oplog_pg import PostgresOperationLedger

        return PostgresOperationLedger(ledger, create=create)
    if isinstance(ledger, str | Path):
        return SQLiteOperationLedger(ledger, create=create)
    return ledger
