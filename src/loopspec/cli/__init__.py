"""The ``loopspec`` command line.

Exit codes (every subcommand):

* 0 — the check passed (no divergence, no violation, no counterexample)
* 1 — the check found a problem (its report says which rule and where)
* 2 — usage error or unreadable input (a one-line message names the file / field / line)
* 130 — interrupted by Ctrl-C (SIGINT); 143 — terminated by SIGTERM, 129 — by SIGHUP. All three end a
  command the same way: what it found so far is written (a fuzz campaign's ``campaign.json`` says
  ``interrupted``), the implementation's processes are ended, and no traceback is printed. A signal the
  command was started with ignored (``nohup``, a background job's SIGINT) stays ignored.

Each subcommand is a module of this package (``loopspec/cli/<command>.py``) exposing
``register(subparsers)``; the handler it sets returns the exit code. The options several commands
share (``--spec``, ``--format``, ``--progress``) come from :mod:`._common`. Bad input never produces a traceback; set
``LOOPSPEC_DEBUG=1`` to see one for an internal error.

This module imports nothing at module level but :mod:`sys`: the ``loopspec`` script's
``from loopspec.cli import main`` is then over at once, and everything else — the commands, the
engine, the spec — is imported inside :func:`main`, where a Ctrl-C ends with ``interrupted`` and
exit 130 instead of a traceback. ``loopspec --version`` imports no command at all.

Layer: the top, with the pytest plugin; it may import every package below it, and nothing imports it
but ``python -m loopspec``.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

__all__ = ["COMMAND_MODULES", "EXIT_FOUND", "EXIT_OK", "EXIT_USAGE", "UsageError", "build_parser", "main"]

_FROM_COMMON = ("EXIT_FOUND", "EXIT_OK", "EXIT_USAGE", "UsageError")


def __getattr__(name: str) -> Any:
    """The exit codes and :class:`UsageError` live in :mod:`._common` (imported when first asked for)."""
    if name in _FROM_COMMON:
        from . import _common

        return getattr(_common, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

#: Subcommand modules, in the order ``--help`` lists them.
COMMAND_MODULES: tuple[str, ...] = (
    "demo", "spec", "vectors", "diagram", "verify", "fuzz", "replay", "check", "serve", "monitor", "frameworks",
)


def build_parser() -> argparse.ArgumentParser:
    import argparse
    import importlib

    from ._common import plain_help

    parser = argparse.ArgumentParser(
        prog="loopspec",
        description="A formal spec, reference engine and conformance tools for LLM tool-calling loops.",
        epilog="Exit codes: 0 passed, 1 problem found, 2 usage error or unreadable input; "
               "130 interrupted (Ctrl-C), 143 terminated (SIGTERM), 129 hung up (SIGHUP).",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"loopspec.cli.{name}").register(sub)
    plain_help(parser)  # help texts come from docstrings: no reST markup on the terminal
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command (the ``loopspec`` entry point); returns its exit code. Everything a command
    prints goes through :class:`~loopspec.support.text.SafeStream`: whatever an input file or an
    implementation put in a report, no control character reaches the terminal raw."""
    out, err = sys.stdout, sys.stderr
    restore = _terminate_like_ctrl_c()
    try:
        from ..support.text import SafeStream

        sys.stdout, sys.stderr = SafeStream(out), SafeStream(err, progress=True)  # type: ignore[assignment]
        return _main(argv)
    except KeyboardInterrupt as exc:  # Ctrl-C before a command started (importing the commands, parsing)
        print(f"loopspec: {_interrupted(exc)}", file=sys.stderr)
        return _interrupt_code(exc)
    finally:
        sys.stdout, sys.stderr = out, err
        restore()


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived: raised where a Ctrl-C would be, so every ``except KeyboardInterrupt``
    that saves a command's work (a fuzz campaign writing ``campaign.json``, ending the implementation's
    process group) does the same for a ``kill``, a CI job's timeout or a closed terminal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _interrupted(exc: KeyboardInterrupt) -> str:
    if isinstance(exc, Terminated):
        import signal

        return f"terminated ({signal.Signals(exc.signum).name})"
    return "interrupted"


def _interrupt_code(exc: KeyboardInterrupt) -> int:
    """130 for Ctrl-C; 128 + the signal's number for SIGTERM (143) and SIGHUP (129), as a shell reports them."""
    return 128 + exc.signum if isinstance(exc, Terminated) else 130


def _terminate_like_ctrl_c() -> Any:
    """Make SIGTERM and SIGHUP raise :class:`Terminated` in this process while :func:`main` runs; returns the
    function that puts the previous handlers back. A signal inherited as ignored stays ignored; a forked
    child of this process (the fuzzer's generator helper, a worker) that gets one takes the default
    action, as it would have without this handler; off the main thread nothing is changed."""
    import os
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    owner = os.getpid()

    def handler(signum: int, frame: object) -> None:
        if os.getpid() != owner:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise Terminated(signum)

    previous = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is signal.SIG_DFL:
            previous[sig] = signal.signal(sig, handler)

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)

    return restore


def _main(argv: Sequence[str] | None) -> int:
    if list(sys.argv[1:] if argv is None else argv) == ["--version"]:  # the commands are not needed for it
        return _print_version()
    parser = build_parser()
    args = parser.parse_args(argv)
    # the command line as typed (reports quote it, and say how to run it again)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.version:
        return _print_version()
    from ._common import EXIT_OK, EXIT_USAGE, UsageError

    if not getattr(args, "handler", None):
        parser.print_help()
        return EXIT_USAGE
    from ..engine.base import EngineError
    from ..spec.base import SpecError
    from ..spec.loader import using_spec
    from ..support.text import printable

    try:
        # --spec (every command reading the spec has it: _common.add_spec_option) is the default spec
        # for the whole command: the engine, the judge, the checker and the oracle all use it
        with using_spec(getattr(args, "spec", None)) as spec:
            if getattr(args, "spec", None) is not None:
                _runnable(args, spec)
            return int(args.handler(args))
    except (UsageError, SpecError) as exc:
        print(f"loopspec {args.command}: error: {printable(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except EngineError as exc:
        if getattr(args, "spec", None) is None:
            raise_internal(args, exc)
            return 70
        # a spec chosen with --spec that the reference engine cannot run is bad input, not a crash
        print(f"loopspec {args.command}: error: --spec {printable(args.spec)}: the reference engine cannot run this "
              f"spec: {printable(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as exc:
        print(f"loopspec {args.command}: {_interrupted(exc)}", file=sys.stderr)
        return _interrupt_code(exc)
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:  # an internal error, not bad input
        raise_internal(args, exc)
        return 70


def _print_version() -> int:
    from .. import __version__

    print(f"loopspec {__version__}")
    return 0


#: Commands that only read the spec's data; every other one runs the reference engine or core on it.
DATA_ONLY: tuple[str, ...] = ("spec", "diagram")


def _runnable(args: argparse.Namespace, spec: Any) -> None:
    """A spec chosen with --spec must agree with the reference engine before a command runs it on it."""
    if args.command in DATA_ONLY:
        return
    from ..core.rules import check_against_spec
    from ..engine.base import EngineError

    problems = check_against_spec(spec)
    if problems:
        raise EngineError("the spec and the reference engine disagree:\n  " + "\n  ".join(problems)
                          + "\n(`loopspec spec --spec FILE` lists the differences)")


def raise_internal(args: argparse.Namespace, exc: Exception) -> None:
    """Report an internal error in one line (re-raise it with LOOPSPEC_DEBUG=1)."""
    import os

    from ..support.text import printable

    if os.environ.get("LOOPSPEC_DEBUG"):
        raise exc
    print(
        f"loopspec {args.command}: internal error: {type(exc).__name__}: {printable(str(exc))} "
        "(set LOOPSPEC_DEBUG=1 for a traceback; please report it)",
        file=sys.stderr,
    )

