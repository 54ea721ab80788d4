"""The command line's help: plain text on the terminal, a real help text for --format on every command
that reports, and a top-level list that says what each command (the demo above all) really does."""

from __future__ import annotations

import argparse
import re

import pytest

from loopspec.cli import COMMAND_MODULES, build_parser
from loopspec.cli._common import plain

#: commands that print a report
REPORTERS = ("demo", "spec", "vectors", "verify", "check", "fuzz", "replay")
#: commands that read the spec (serve runs the reference engine on it)
SPEC_READERS = ("demo", "spec", "vectors", "diagram", "verify", "fuzz", "replay", "check", "serve")
MARKUP = re.compile(r"``|\*\*|:(?:func|mod|class|meth|data|attr|exc|ref):`")


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_plain_strips_rest_markup() -> None:
    assert plain("``loopspec fuzz``: see :func:`~loopspec.fuzz.fuzz` and **exit 2**") == \
        "loopspec fuzz: see loopspec.fuzz.fuzz and exit 2"
    assert plain(None) is None and plain("") == ""


@pytest.mark.parametrize("command", ["", *COMMAND_MODULES])
def test_help_is_plain_text(command: str) -> None:
    parser = build_parser() if not command else _subparsers()[command]
    text = parser.format_help()
    assert not MARKUP.search(text), MARKUP.search(text)


@pytest.mark.parametrize("command", REPORTERS)
def test_every_reporting_command_has_format_json_with_a_real_help_text(command: str) -> None:
    sub = _subparsers()[command]
    fmt = next(a for a in sub._actions if "--format" in a.option_strings)
    assert set(fmt.choices) >= {"text", "json"} and fmt.default == "text"
    assert fmt.help and "json (" in fmt.help and "default: text" in fmt.help


def test_top_level_help_says_what_the_demo_shows() -> None:
    text = " ".join(build_parser().format_help().split())
    demo = text[text.index("demo "):text.index(" spec ")]
    for part in ("engine", "model checker", "fuzzer", "oracle", "frameworks"):
        assert part in demo, (part, demo)


@pytest.mark.parametrize("command", SPEC_READERS)
def test_every_command_reading_the_spec_has_spec_file(command: str) -> None:
    sub = _subparsers()[command]
    spec = next(a for a in sub._actions if "--spec" in a.option_strings)
    assert spec.dest == "spec" and spec.default is None and spec.help and "loop.toml" in spec.help
