"""What every subcommand shares: the exit codes and the usage error (exit 2)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FOUND = 1
EXIT_USAGE = 2


class UsageError(Exception):
    """Raised by a subcommand for bad usage or unreadable input (exit 2)."""
