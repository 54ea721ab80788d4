"""The ``loopspec`` command line.

Exit codes (every subcommand):

* 0 — the check passed (no divergence, no violation, no counterexample)
* 1 — the check found a problem (its report says which rule and where)
* 2 — usage error or unreadable input (a one-line message names the file / field / line)

Each subcommand is a module of this package (``loopspec/cli/<command>.py``) exposing
``register(subparsers)``; the handler it sets returns the exit code. The options several commands
share (``--spec``, ``--format``, ``--progress``) come from :mod:`._common`. Bad input never produces a traceback; set
``LOOPSPEC_DEBUG=1`` to see one for an internal error.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from .._spec import SpecError, using_spec
from .._text import printable
from ._common import EXIT_FOUND, EXIT_OK, EXIT_USAGE, UsageError

__all__ = ["COMMAND_MODULES", "EXIT_FOUND", "EXIT_OK", "EXIT_USAGE", "UsageError", "build_parser", "main"]

#: Subcommand modules, in the order ``--help`` lists them.
COMMAND_MODULES: tuple[str, ...] = (
    "demo", "spec", "vectors", "diagram", "verify", "fuzz", "replay", "check", "serve",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loopspec",
        description="A formal spec, reference engine and conformance tools for LLM tool-calling loops.",
        epilog="Exit codes: 0 passed, 1 problem found, 2 usage error or unreadable input.",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"loopspec.cli.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        from .. import __version__

        print(f"loopspec {__version__}")
        return EXIT_OK
    if not getattr(args, "handler", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        # --spec (every command reading the spec has it: _common.add_spec_option) is the default spec
        # for the whole command: the engine, the judge, the checker and the oracle all use it
        with using_spec(getattr(args, "spec", None)):
            return int(args.handler(args))
    except (UsageError, SpecError) as exc:
        print(f"loopspec {args.command}: error: {printable(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"loopspec {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:  # an internal error, not bad input
        if os.environ.get("LOOPSPEC_DEBUG"):
            raise
        print(
            f"loopspec {args.command}: internal error: {type(exc).__name__}: {printable(str(exc))} "
            "(set LOOPSPEC_DEBUG=1 for a traceback; please report it)",
            file=sys.stderr,
        )
        return 70

