"""What every subcommand shares: the exit codes, the usage error (exit 2) and the common options.

A command registers its options with these helpers so that the same option means the same thing,
with the same help text, everywhere:

* :func:`add_spec_option` — ``--spec FILE``: the spec (a ``loop.toml``) the command uses. The command
  line's ``main`` makes it the default for the whole command (the engine, the judge, the model
  checker, the oracle; the rules text ``SPEC.md``, ``bounds.toml``, ``conformance/`` and ``schema/``
  are looked for next to it), so a handler needs nothing more than to register the option;
* :func:`add_format_option` — ``--format``: how the report is printed (text for people, JSON for
  programs);
* :func:`add_progress_option` and :func:`progress_line` — ``--progress``: the progress line of a long
  run (:mod:`loopspec.support.progress`), shown on a terminal and, when forced, on any stderr;
* :func:`add_quiet_option` — ``--quiet``: only the verdict (the summary line, and what failed);
* :func:`add_jobs_option` and :func:`resolve_jobs` — ``--jobs N``: N processes, 0 = one per CPU;
* :class:`NextStep` and :func:`next_step` — the last lines of a command that found something: what else to
  look at, the doc section, and on the very last line the one command to run next; the same suggestion is the
  ``"next"`` field of the command's JSON output (:func:`next_json`), so both come from one place;
* :func:`add_out_option` — ``--out DIR``: the directory a command writes its files into; a command
  that always writes files defaults to ``loopspec-out/<command>`` (:func:`default_out`).

docs/cli.md describes this vocabulary; tests/test_cli_vocabulary.py pins it on every command.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Final

from ..support.progress import ProgressLine

__all__ = [
    "EXIT_FOUND",
    "EXIT_OK",
    "EXIT_USAGE",
    "FORMAT_HELP",
    "OUT_ROOT",
    "SPEC_HELP",
    "NextStep",
    "UsageError",
    "add_format_option",
    "add_jobs_option",
    "add_out_option",
    "add_progress_option",
    "add_quiet_option",
    "add_spec_option",
    "default_out",
    "next_json",
    "next_step",
    "plain",
    "plain_help",
    "progress_line",
    "resolve_jobs",
]

EXIT_OK = 0
EXIT_FOUND = 1
EXIT_USAGE = 2


class UsageError(Exception):
    """Raised by a subcommand for bad usage or unreadable input (exit 2)."""


SPEC_HELP: Final = ("the spec to use, a loop.toml (default: the spec shipped with loopspec); its rules (SPEC.md), "
                    "bounds.toml, conformance/ and schema/ are looked for in the same directory")

#: What each ``--format`` value means (a command may add its own).
FORMAT_HELP: Final = {
    "text": "a report for people",
    "json": "one JSON document on stdout, for programs",
}


_MARKUP: Final = re.compile(r":(?:func|mod|class|meth|data|attr|exc|ref):`~?([^`]+)`|``([^`]+)``|\*\*([^*]+)\*\*")


def plain(text: str | None) -> str | None:
    """A docstring's reST markup as plain text for ``--help``: ``code``, **bold** and :role:`x` lose their marks."""
    if not text:
        return text
    return _MARKUP.sub(lambda m: next(g for g in m.groups() if g is not None), text)


def plain_help(parser: argparse.ArgumentParser) -> None:
    """Make every help text of ``parser`` and its subcommands plain text (see :func:`plain`)."""
    parser.description = plain(parser.description)
    parser.epilog = plain(parser.epilog)
    for action in parser._actions:
        if isinstance(action.help, str) and action.help is not argparse.SUPPRESS:
            action.help = plain(action.help)
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                choice.help = plain(choice.help)
            for sub in dict.fromkeys(action.choices.values()):
                plain_help(sub)


def add_spec_option(parser: argparse.ArgumentParser, *aliases: str) -> argparse.Action:
    """``--spec FILE`` (dest ``spec``; default None = the shipped spec). ``aliases`` are older spellings
    kept working but not shown in the help (e.g. ``--file``)."""
    action = parser.add_argument("--spec", metavar="FILE", default=None, help=SPEC_HELP)
    for alias in aliases:
        parser.add_argument(alias, dest="spec", metavar="FILE", help=argparse.SUPPRESS)
    return action


def add_format_option(parser: argparse.ArgumentParser, choices: Sequence[str] = ("text", "json"), *,
                      default: str | None = None, what: str = "the report",
                      meanings: dict[str, str] | None = None) -> argparse.Action:
    """``--format {text,json}`` with a help text naming every choice and the default."""
    default = default if default is not None else choices[0]
    means = {**FORMAT_HELP, **(meanings or {})}
    parts = [f"{c} ({means[c]})" if c in means else c for c in choices]
    helptext = f"how to print {what}: {', '.join(parts)}; default: {default}"
    return parser.add_argument("--format", choices=tuple(choices), default=default, help=helptext)


def add_progress_option(parser: argparse.ArgumentParser) -> argparse.Action:
    """``--progress``: show the progress line on stderr even when it is not a terminal."""
    return parser.add_argument(
        "--progress", action="store_true",
        help="show the progress line on stderr even when it is not a terminal (on a terminal it is always shown)")


def progress_line(args: argparse.Namespace, stream: IO[str] | None = None) -> ProgressLine:
    """The progress line for a command: enabled on a terminal, or everywhere with ``--progress``."""
    return ProgressLine(stream, force=bool(getattr(args, "progress", False)))


#: The one default output location: a command that always writes files writes them into OUT_ROOT/<command>.
OUT_ROOT: Final = "loopspec-out"


def default_out(command: str) -> str:
    """``loopspec-out/<command>``: where ``command`` writes its files when ``--out`` is not given."""
    return f"{OUT_ROOT}/{command}"


def add_out_option(parser: argparse.ArgumentParser, command: str, what: str, *, default: bool = True,
                   aliases: Sequence[str] = ()) -> argparse.Action:
    """``--out DIR``: the directory ``command`` writes ``what`` into. With ``default`` the command always
    writes and defaults to :func:`default_out`; without, it writes files only when ``--out`` is given.
    ``aliases`` are older spellings kept working but not shown in the help."""
    if default:
        helptext = f"the directory this command writes its files into: {what} (default: {default_out(command)})"
    else:
        helptext = f"the directory this command writes its files into: {what} (default: none, nothing is written)"
    action = parser.add_argument("--out", metavar="DIR", default=default_out(command) if default else None,
                                 help=helptext)
    for alias in aliases:
        parser.add_argument(alias, dest="out", metavar="DIR", help=argparse.SUPPRESS)
    return action


def add_quiet_option(parser: argparse.ArgumentParser,
                     what: str = "the summary line and what failed, not what passed") -> argparse.Action:
    """``--quiet``: print only the verdict (``what``)."""
    return parser.add_argument("--quiet", "-q", action="store_true", help=f"print only {what}")


def nonnegative(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be 0 (one per CPU) or more, got {v}")
    return v


def add_jobs_option(parser: argparse.ArgumentParser, what: str) -> argparse.Action:
    """``--jobs N``: N worker processes doing ``what``; 0 = one per CPU (:func:`resolve_jobs`)."""
    return parser.add_argument("--jobs", "-j", type=nonnegative, default=1, metavar="N",
                               help=f"N parallel processes: {what} (default 1; 0 = one per CPU)")


def resolve_jobs(jobs: int) -> int:
    """``--jobs``'s value as a process count: 0 is one per CPU this process may use."""
    if jobs != 0:
        return jobs
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True, slots=True)
class NextStep:
    """Where to go from a failing command: ``command``, the one to run next (with ``what`` it does), other
    commands worth running (``also``: (command, what it shows)) and the doc section. A command computes it once
    and gives it to both its outputs: the text's last lines (:meth:`print`) and its JSON's ``"next"``
    (:func:`next_json`)."""

    command: str
    what: str
    also: tuple[tuple[str, str], ...] = ()
    doc: str | None = None

    def print(self, stream: IO[str] | None = None) -> None:
        """The text report's last lines; the very last one is ``next: COMMAND   # what``."""
        import sys

        out = stream if stream is not None else sys.stdout
        for cmd, why in self.also:
            print(f"also: {cmd}   # {why}", file=out)
        if self.doc:
            print(f"docs: {self.doc}", file=out)
        print(f"next: {self.command}   # {self.what}", file=out)


def next_json(step: NextStep | None) -> str | None:
    """The ``"next"`` field of a command's JSON output: the command its text report's ``next:`` line names, or
    None when there is nothing to run next (nothing was found)."""
    return step.command if step is not None else None


def next_step(command: str, what: str, *, also: Sequence[tuple[str, str]] = (), doc: str | None = None,
              stream: IO[str] | None = None) -> None:
    """End a failing command's text report with where to go from here (:class:`NextStep`). A finding's report
    then never ends on a dead end."""
    NextStep(command, what, tuple(also), doc).print(stream)
