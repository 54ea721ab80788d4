"""Every command line the docs quote is a command loopspec accepts (issue 30).

Each `loopspec ...` line of a shell block, and each inline `loopspec ...` code span, of README.md, docs/*.md
and spec/PROTOCOL.md is

* **parsed** by the real argument parser: an option that does not exist, a choice that is not one, a
  misspelt command fails here (a fragment such as `loopspec fuzz --mode writes` may leave out a required
  argument: that alone is accepted);
* **run**, when it can run offline and in seconds in a scratch directory (cwd: a temporary directory where `examples/`,
  `spec/`, `tests/`, `docs/` and `diagrams/` of this checkout are visible): exit 0 or 1 (a finding is what
  several of them show), never 2 (usage or unreadable input) nor a crash. Long runs are bounded: fuzz gets
  `--max-examples 5 --time-budget 5 --shrink-time 5`, verify the batch scope at 2 calls (unless it names its
  own scopes, --writes or --mutants), demo `--engine-only`.

Parsed only, with the reason the test reports (see `why_not_run`): verify's long modes (--crosscheck,
--mutants, --writes: 20 s to minutes, run at small bounds by the checker's own tests), a placeholder (FILE, CMD, DIR, ...), a
file the reader brings (`my_adapter.py`, `runs.ndjson`) or that an earlier step makes, a server that runs
until stopped (`monitor`, `serve`), a framework or toolchain not installed here (Java, Node.js). The README's
quickstart is run for real, in order, by tests/test_readme_quickstart.py (and from the wheel by test_wheel).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shlex
import sys
from pathlib import Path

import pytest

from loopspec.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "spec" / "PROTOCOL.md"]
SHELL = ("sh", "bash", "console", "shell", "")
LINKED = ("examples", "spec", "tests", "docs", "diagrams")
OUTPUTS = ("--out", "--html", "--junit", "--report", "--diagram")
PLACEHOLDER = re.compile(r"(?<![\w.-])(?:[A-Z][A-Z_]*(?:\.\w+)?|\.\.\.|…)(?![\w-])|[<>|{}$*]|\[[a-z_]+=")


def quoted() -> list[tuple[str, str]]:
    """(where, command) for every loopspec command line of the docs, without its trailing comment."""
    found = []
    for f in DOCS:
        text = f.read_text(encoding="utf-8")
        name = f.relative_to(ROOT).as_posix()
        for m in re.finditer(r"```(\w*)\n(.*?)```", text, re.S):
            if m.group(1) not in SHELL:
                continue
            for line in m.group(2).splitlines():
                cmd = line.strip().removeprefix("$ ").removeprefix("python3 .ci/dev.py ")
                if cmd.startswith("loopspec "):
                    found.append((f"{name} (block)", _strip_comment(cmd)))
        for m in re.finditer(r"(?<!`)`(loopspec [a-z][\w-]*(?![\w:-])[^`]*)`(?!`)", text):  # not a message
            found.append((f"{name} (inline)", " ".join(_strip_comment(m.group(1)).split())))
    return found


def _strip_comment(line: str) -> str:
    """The command without its trailing comment, and without what a shell pipes or redirects it to."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "#>|" and i and line[i - 1].isspace():
            return line[:i].rstrip()
    return line


class _Refused(Exception):
    pass


def _strict(parser: argparse.ArgumentParser) -> None:
    def error(message: str) -> None:
        raise _Refused(message)

    parser.error = error  # type: ignore[method-assign]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _strict(sub)


def parse(argv: list[str]) -> argparse.Namespace | None:
    """The namespace, or None for a fragment that leaves out only required arguments; raises _Refused."""
    parser = build_parser()
    _strict(parser)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            return parser.parse_args(argv)
    except _Refused as exc:
        msg = str(exc)
        if msg.startswith("the following arguments are required"):
            return None
        if msg.endswith("expected one argument") and argv[-1].startswith("-"):
            return None  # an option named in prose, without its value
        if ("invalid" in msg or "not an integer" in msg) and any(PLACEHOLDER.fullmatch(a) for a in argv):
            return None  # a placeholder where a number goes (--jobs N)
        raise


COMMANDS = quoted()


def test_the_docs_quote_commands() -> None:
    where = {w.split(" ")[0] for w, _ in COMMANDS}
    assert len(COMMANDS) > 60 and {"README.md", "docs/cli.md", "docs/oracle.md"} <= where


@pytest.mark.parametrize(("where", "cmd"), COMMANDS, ids=[f"{w}: {c}"[:90] for w, c in COMMANDS])
def test_every_quoted_command_line_parses(where: str, cmd: str) -> None:
    argv = shlex.split(cmd)[1:]
    try:
        ns = parse(argv)
    except _Refused as exc:
        pytest.fail(f"{where}: `{cmd}` is refused by the parser: {exc}")
    if ns is None:  # a fragment: its options still exist
        sub = argv[0]
        known = {s for a in _subparser(sub)._actions for s in a.option_strings}
        for a in argv[1:]:
            if a.startswith("--"):
                assert a.split("=", 1)[0] in known, f"{where}: `{cmd}`: {sub} has no option {a}"


def _subparser(name: str) -> argparse.ArgumentParser:
    action = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[name]


def _impl_available(impl: str) -> str | None:
    from loopspec.frameworks import FRAMEWORKS, installed

    if PLACEHOLDER.search(impl):
        return f"a placeholder: {impl}"
    name = impl.split("[", 1)[0]
    if name in FRAMEWORKS:
        return None if installed(name) else f"the framework {name} is not installed here"
    if ":" in impl and " " not in impl:
        return None
    words = shlex.split(impl)
    if words[0] in ("java", "node", "npx", "mvn", "gradle"):
        return f"needs {words[0]}, the reader's toolchain"
    for w in words[1:]:
        if w.endswith((".py", ".js", ".ts", ".jar")) and not (Path.cwd() / w).exists():
            return f"{w} is the reader's own file"
    return None


def why_not_run(argv: list[str], ns: argparse.Namespace | None) -> str | None:
    """None when the command can run here; else why it is only parsed."""
    if ns is None:
        return "a fragment (it leaves out a required argument)"
    if argv[0] in ("monitor", "serve"):
        return f"{argv[0]} is a server that runs until it is stopped"
    long = {"--crosscheck", "--mutants", "--writes"} & set(argv)
    if argv[0] == "verify" and long:
        return (f"long-running ({', '.join(sorted(long))}: 20 s to minutes); the checker's own tests run these modes "
                "at small bounds")
    if "--update-expected" in argv:
        return "--update-expected rewrites the spec's bounds file (here, the repository's own)"
    if argv[0] == "frameworks":
        return "installs npm packages (needs Node.js and the network)"
    outputs = {argv[i + 1] for i, a in enumerate(argv[:-1]) if a in OUTPUTS}
    for i, a in enumerate(argv):
        if argv[i - 1] == "--impl" and i:
            reason = _impl_available(a)
            if reason:
                return reason
            continue
        if PLACEHOLDER.search(a):
            return f"a placeholder: {a}"
        if a in outputs or a.startswith("-") or i == 0:
            continue
        if ("/" in a or re.search(r"\.(json|ndjson|jsonl|toml|py|md|txt)$", a)) and not (Path.cwd() / a).exists():
            return f"{a} is a file the reader brings, or an earlier step makes"
        if a.startswith("mcp:"):
            return "asks a running MCP server"
    if getattr(ns, "dask", None):
        return "needs a Dask scheduler"
    return None


def bounded(argv: list[str]) -> list[str]:
    """``argv`` with a bound on how long it runs (the docs' values are for real campaigns)."""
    out = list(argv)
    if argv[0] == "fuzz":
        for flag, value in (("--max-examples", "5"), ("--time-budget", "5"), ("--shrink-time", "5")):
            if flag in out:
                out[out.index(flag) + 1] = value
            else:
                out += [flag, value]
    if argv[0] == "verify" and not {"--scope", "--writes", "--mutants", "--crosscheck"} & set(argv):
        out += ["--scope", "batch", "--bound", "batch.calls=2"]
    if argv[0] == "verify" and "--mutants" in argv:
        out += ["--bound", "batch.calls=3"] if "--writes" not in argv else []
    if argv[0] == "demo" and "--engine-only" not in argv:
        out.append("--engine-only")
    return out


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # The docs' commands assume the environment loopspec is installed in is the active one, so `python`
    # in an --impl line is that environment's interpreter (as after `pip install loopspec` in a venv).
    # CI runs the suite without activating .venv, so put this interpreter's directory first on PATH.
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    for name in LINKED:
        (tmp_path / name).symlink_to(ROOT / name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(("where", "cmd"), COMMANDS, ids=[f"{w}: {c}"[:90] for w, c in COMMANDS])
def test_every_quoted_command_line_runs_or_says_why_not(where: str, cmd: str, scratch: Path) -> None:
    argv = shlex.split(cmd)[1:]
    ns = parse(argv)
    reason = why_not_run(argv, ns)
    if reason is not None:
        pytest.skip(f"parsed only: {reason}")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(bounded(argv))
    assert code in (0, 1), f"{where}: `{cmd}` exited {code}: {err.getvalue()[-2000:]}"
    assert "internal error" not in err.getvalue()
