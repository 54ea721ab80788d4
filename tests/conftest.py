"""Shared pytest options."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--overwrite", action="store_true", default=False,
                     help="regenerate golden files (tests/golden/...) instead of comparing with them")
