"""An operation ledger from what a caller gave (:func:`open_operation_ledger`): ``None`` an in-memory one, a
``postgresql://`` URL the PostgreSQL one (the ``postgres`` extra), any other path SQLite, a ledger object
itself. It imports both back ends; neither imports it.
"""

from __future__ import annotations

from pathlib import Path

from .oplog import MemoryOperationLedger, OperationLedger, SQLiteOperationLedger

__all__ = ["open_operation_ledger"]

def open_operation_ledger(ledger: OperationLedger | str | Path | None) -> OperationLedger:
    """A ledger from what a caller gave: a ``postgresql://`` / ``postgres://`` URL means PostgreSQL (the extra
    ``postgres``), another path SQLite, ``None`` an in-memory one."""
    if ledger is None:
        return MemoryOperationLedger()
    if isinstance(ledger, str) and ledger.startswith(("postgresql://", "postgres://")):
        from .oplog_pg import PostgresOperationLedger

        return PostgresOperationLedger(ledger)
    if isinstance(ledger, str | Path):
        return SQLiteOperationLedger(ledger)
    return ledger
