"""Shared pytest options."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--overwrite", action="store_true", default=False,
                     help="regenerate golden files (tests/golden/...) instead of comparing with them")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """A throw-away PostgreSQL server for the session (tests/pg_server.py): a conninfo template, ``{db}`` to fill.
    Modules that use it are in the xdist group ``postgres``, so one worker starts it once."""
    from .pg_server import Unavailable, postgres_server

    try:
        with postgres_server() as server:
            yield server
    except Unavailable as exc:
        pytest.skip(str(exc))
