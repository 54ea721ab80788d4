"""Every command that reads a file, fed the hostile corpus (tests/hostile/files/, built by
make_corpus.py), run as a child process: the exact exit code (never 70), a one-line error naming the
file and the line where there is one, the other runs of the file still reported, bounded peak RSS,
nothing left running, every file written strict JSON, no control character on the terminal — and
the same output, byte for byte, under the standard library's JSON parser and under orjson."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from . import make_corpus
from .runner import CliRun, assert_all_json_parses, assert_sane, run_cli, written_files

FILES = make_corpus.FILES


def _line_of(name: str, needle: bytes) -> int:
    """The 1-based line of the generated file holding ``needle`` (the corpus follows spec/bounds.toml)."""
    data = (FILES / name).read_bytes()
    return data[: data.index(needle)].count(b"\n") + 1
SERVE = f"{sys.executable} -m loopspec serve"
PARSERS = ("json", "orjson")

#: Characters a terminal acts on, or that reorder a line; none may reach stdout or stderr.
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


@dataclass(frozen=True)
class Case:
    name: str
    args: tuple[str, ...]
    exit: int
    #: (file, line or None, text): a stderr line "loopspec CMD: error: FILE:LINE: …TEXT…" must exist
    errors: tuple[tuple[str, int | None, str], ...] = ()
    stdout: tuple[str, ...] = ()  # substrings stdout must hold (the runs that were not lost)
    max_rss_mb: float = 150.0
    out_dir: bool = False  # the command writes into {out}: every file there must be strict JSON
    extra: dict[str, str] = field(default_factory=dict)


def C(name: str, *args: str, exit: int, errors: tuple[tuple[str, int | None, str], ...] = (),
      stdout: tuple[str, ...] = (), **kw: object) -> Case:
    return Case(name, args, exit, errors, stdout, **kw)  # type: ignore[arg-type]


BUDGET_OK = "ok   budget (ledger"

CASES = [
    # -- check: ledgers ----------------------------------------------------------------------------
    C("step 0 opens a run", "check", "ledger-step0.ndjson", exit=2, stdout=(BUDGET_OK, "UNREADABLE merchants"),
      errors=(("ledger-step0.ndjson", 2, "run 'merchants': step 0 after step 0"),)),
    C("step false", "check", "ledger-step-false.ndjson", exit=2, stdout=(BUDGET_OK,),
      errors=(("ledger-step-false.ndjson", 2, "step False after step 0"),)),
    C("step 0.0", "check", "ledger-step-0.0.ndjson", exit=2, stdout=(BUDGET_OK,),
      errors=(("ledger-step-0.0.ndjson", 2, "step 0.0 after step 0"),)),
    C("step -0.0", "check", "ledger-step--0.0.ndjson", exit=2, stdout=(BUDGET_OK,),
      errors=(("ledger-step--0.0.ndjson", 2, "step -0.0 after step 0"),)),
    C("t soon", "check", "ledger-t-soon.ndjson", exit=2, stdout=(BUDGET_OK,),
      errors=(("ledger-t-soon.ndjson", 6, "t: expected a number of seconds (0 or more), got 'soon'"),)),
    C("t negative", "check", "ledger-t-negative.ndjson", exit=2, stdout=(BUDGET_OK,),
      errors=(("ledger-t-negative.ndjson", 3, "got -100"),)),
    C("first seq true", "check", "ledger-seq-true.ndjson", exit=2, stdout=(BUDGET_OK,),
      errors=(("ledger-seq-true.ndjson", 1, "run_started has seq True"),)),
    C("maxRounds 10**30", "check", "ledger-bigint.ndjson", exit=2, stdout=(BUDGET_OK,),
      errors=(("ledger-bigint.ndjson", 1, "run 'merchants': an integer of 31 digits (the limit is 20 digits)"),)),
    C("5000-digit index", "check", "ledger-huge-int.ndjson", exit=2, stdout=(BUDGET_OK,),
      errors=(("ledger-huge-int.ndjson", 4, "an integer of 5000 digits"),)),
    C("t 1e400", "check", "ledger-1e400.ndjson", exit=2, stdout=(BUDGET_OK,),
      errors=(("ledger-1e400.ndjson", 3, "the number 1e400 overflows a double"),)),
    C("t NaN", "check", "ledger-nan.ndjson", exit=2, stdout=(BUDGET_OK,),
      errors=(("ledger-nan.ndjson", 3, "NaN is not JSON"),)),
    C("nested 200 deep", "check", "ledger-deep.ndjson", exit=2, stdout=(BUDGET_OK,),
      errors=(("ledger-deep.ndjson", 4, "run 'merchants': nested more than 128 levels deep"),)),
    C("nested 20000 deep", "check", "ledger-deep-20k.ndjson", exit=2, stdout=(BUDGET_OK,),
      errors=(("ledger-deep-20k.ndjson", 1, "nested more than 128 levels deep"),)),
    C("invalid UTF-8", "check", "ledger-bad-utf8.ndjson", exit=2, stdout=(BUDGET_OK,),
      errors=(("ledger-bad-utf8.ndjson", 4, "not UTF-8: byte 0xff"),)),
    C("lone surrogate", "check", "ledger-surrogate.ndjson", exit=2, stdout=(BUDGET_OK,),
      errors=(("ledger-surrogate.ndjson", 4, "lone UTF-16 surrogate"),)),
    C("BOM", "check", "ledger-bom.ndjson", exit=0, stdout=(BUDGET_OK, "ok   merchants")),
    C("over-long last line, run named", "check", "--max-line-bytes", "1024", "ledger-overlong-last.ndjson", exit=2,
      stdout=(BUDGET_OK, "UNREADABLE merchants"),
      errors=(("ledger-overlong-last.ndjson", 37, "run 'merchants': line longer than 1024 bytes"),)),
    C("over-long last line, run not named: no false R21", "check", "--max-line-bytes", "1024",
      "ledger-overlong-last-unnamed.ndjson", exit=2, stdout=(BUDGET_OK, "UNREADABLE merchants"),
      errors=(("ledger-overlong-last-unnamed.ndjson", 37, "line longer than 1024 bytes"),
              ("ledger-overlong-last-unnamed.ndjson", 37, "could not be read and may have held it"))),
    C("control characters in a run id", "check", "ledger-evil-id.ndjson", exit=0,
      stdout=("ok   evil\\x1b[2J\\x0d\\x0aok   fake-run\\x9b31m\\u202egnp.exe\\x07 (ledger",)),
    C("control characters in a violating run", "check", "ledger-evil-id-violation.ndjson", exit=1,
      stdout=("FAIL evil\\x1b[2J",)),
    C("control characters, JSON report", "check", "--format", "json", "ledger-evil-id-violation.ndjson", exit=1),
    C("everything at once", "check", "ledger-everything.ndjson", exit=2,
      stdout=("ok   b0 (ledger", "ok   b3 (ledger", "ok   m5 (ledger", "5 unreadable"),
      errors=(("ledger-everything.ndjson", 2, "run 'm0': step 0"), ("ledger-everything.ndjson", 61, "run 'm1'"),
              ("ledger-everything.ndjson", 120, "run 'm2'"), ("ledger-everything.ndjson", 178, "run 'm3'"),
              ("ledger-everything.ndjson", 238, "run 'm4'"))),
    C("everything at once, JSON", "check", "--format", "json", "ledger-everything.ndjson", exit=2),
    C("--diagram at a file", "check", "--diagram", "ledger-bom.ndjson", "ledger-evil-id-violation.ndjson", exit=2,
      errors=((None, None, "--diagram ledger-bom.ndjson: is not a directory"),)),  # type: ignore[arg-type]
    C("--diagram with control characters in the run", "check", "--diagram", "{out}", "ledger-evil-id-violation.ndjson",
      exit=1, out_dir=True, stdout=("diagrams of 1 violating run(s)",)),
    # -- check: transcripts and traces -------------------------------------------------------------
    C("BOM before a transcript", "check", "chat-bom.json", exit=0, stdout=("ok   chat-bom.json#1",)),
    C("OpenAI then Anthropic in one conversation", "check", "chat-mixed.json", exit=2,
      errors=(("chat-mixed.json", 1, "mixes Anthropic Messages (messages[1].content[0]: a tool_use block) and "
                                     "OpenAI Chat Completions (messages[2]: role tool)"),)),
    C("Anthropic then OpenAI in one conversation", "check", "chat-mixed-other-order.json", exit=2,
      errors=(("chat-mixed-other-order.json", 1, "mixes OpenAI Chat Completions"),)),
    C("a forced format that the conversation contradicts", "check", "--input-format", "openai-chat",
      "anthropic.json", exit=2,
      errors=(("anthropic.json", 1, "is Anthropic Messages, but --input-format is openai-chat"),)),
    C("not a conversation", "check", "chat-not-a-conversation.json", exit=2,
      errors=(("chat-not-a-conversation.json", 1, 'not a conversation: expected an object with "messages"'),)),
    C("control characters in a conversation id", "check", "chat-evil-id.ndjson", exit=0,
      stdout=("ok   evil\\x1b[2J",)),
    C("arguments nested 5000 deep", "check", "chat-deep-arguments.json", exit=0),
    C("one bad conversation among good ones", "check", "chat-lines-one-bad.ndjson", exit=2,
      stdout=("ok   chat-lines-one-bad.ndjson#1", "ok   chat-lines-one-bad.ndjson#2"),
      errors=(("chat-lines-one-bad.ndjson", 2, "overflows a double"),)),
    C("a transcript document past the limit", "check", "--max-line-bytes", "1024", "chat-bom.json", exit=2,
      errors=(("chat-bom.json", 1, "a single JSON document larger than 1024 bytes"),)),
    C("bad trace lines among good ones", "check", "traces-bad-lines.ndjson", exit=2,
      errors=(("traces-bad-lines.ndjson", 2, "NaN is not JSON"), ("traces-bad-lines.ndjson", 3, "nested more than"),
              ("traces-bad-lines.ndjson", 4, "lone UTF-16 surrogate"))),
    # -- replay ------------------------------------------------------------------------------------
    C("replay: a good case", "replay", "case-ok.json", "--impl", SERVE, exit=0),
    C("replay: BOM", "replay", "case-bom.json", "--impl", SERVE, exit=0),
    C("replay: nested 3000 deep", "replay", "case-deep.json", "--impl", SERVE, exit=2,
      errors=(("case-deep.json", 5, "nested more than 128 levels deep"),)),
    C("replay: invalid UTF-8", "replay", "case-bad-utf8.json", "--impl", SERVE, exit=2,
      errors=(("case-bad-utf8.json", 26, "not UTF-8"),)),
    C("replay: NaN", "replay", "case-nan.json", "--impl", SERVE, exit=2,
      errors=(("case-nan.json", 46, "NaN is not JSON"),)),
    C("replay: 5000 digits", "replay", "case-huge-int.json", "--impl", SERVE, exit=2,
      errors=(("case-huge-int.json", 5, "an integer of 5000 digits"),)),
    C("replay: not a case", "replay", "case-not-a-case.json", "--impl", SERVE, exit=2,
      errors=(("case-not-a-case.json", None, "format: must be 'loopspec-fuzz-case/1'"),)),
    C("replay: empty", "replay", "case-empty.json", "--impl", SERVE, exit=2,
      errors=(("case-empty.json", 1, "nothing but whitespace"),)),
    # -- diagram --trace -----------------------------------------------------------------------------
    C("diagram: a good path", "diagram", "--trace", "path-ok.json", "--format", "md", "--out", "{out}", exit=0),
    C("diagram: nested 3000 deep", "diagram", "--trace", "path-deep.json", "--out", "{out}", exit=2,
      errors=(("path-deep.json", 1, "nested more than 128 levels deep"),)),
    C("diagram: invalid UTF-8", "diagram", "--trace", "path-bad-utf8.json", "--out", "{out}", exit=2,
      errors=(("path-bad-utf8.json", 1, "not UTF-8"),)),
    C("diagram: a ledger with a 400-digit seq", "diagram", "--trace", "path-ledger-bad-line.ndjson", "--out", "{out}",
      exit=2, errors=(("path-ledger-bad-line.ndjson", 6, "an integer of 400 digits"),)),
    # -- verify --bounds -----------------------------------------------------------------------------
    C("bounds: nested 3000 deep", "verify", "--bounds", "bounds-deep.toml", exit=2,
      errors=(("bounds-deep.toml", _line_of("bounds-deep.toml", b"extra = "), "nested more than 128 levels deep"),)),
    C("bounds: invalid UTF-8", "verify", "--bounds", "bounds-bad-utf8.toml", exit=2,
      errors=(("bounds-bad-utf8.toml", _line_of("bounds-bad-utf8.toml", b"\xff"), "not UTF-8"),)),
    C("bounds: inf", "verify", "--bounds", "bounds-inf.toml", exit=2,
      errors=(("bounds-inf.toml", None, "scope.batch.weight: the number inf is not finite"),)),
    C("bounds: 5000 digits", "verify", "--bounds", "bounds-huge-int.toml", exit=2,
      errors=(("bounds-huge-int.toml", _line_of("bounds-huge-int.toml", b"weight = "), "an integer of 5000 digits"),)),
    C("bounds: TOML syntax", "verify", "--bounds", "bounds-syntax.toml", exit=2,
      errors=(("bounds-syntax.toml", 3, "not valid TOML"),)),
    C("bounds: control characters in a scope name", "verify", "--bounds", "bounds-evil-scope.toml", exit=2,
      errors=(("bounds-evil-scope.toml", None, "scope.'ba\\x1b[2J\\ntch': a scope name is letters, digits"),)),
    # -- spec --file -----------------------------------------------------------------------------
    C("spec: nested 3000 deep", "spec", "--file", "spec-deep.toml", exit=2,
      errors=(("{abs}spec-deep.toml", 2, "nested more than 128 levels deep"),)),
    C("spec: invalid UTF-8", "spec", "--file", "spec-bad-utf8.toml", exit=2,
      errors=(("{abs}spec-bad-utf8.toml", 3, "not UTF-8"),)),
    C("spec: 30 digits", "spec", "--file", "spec-huge-int.toml", exit=2,
      errors=(("{abs}spec-huge-int.toml", None, "meta.extra: an integer of more than 20 digits"),)),
    # -- vectors --file ----------------------------------------------------------------------------
    C("vectors: nested 3000 deep", "vectors", "--file", "vectors-deep.json", exit=2,
      errors=((None, None, "vectors-deep.json:1: nested more than 128 levels deep"),)),  # type: ignore[arg-type]
    C("vectors: invalid UTF-8", "vectors", "--file", "vectors-bad-utf8.json", exit=2,
      errors=((None, None, "vectors-bad-utf8.json:2: not UTF-8"),)),  # type: ignore[arg-type]
    C("vectors: cases not a list", "vectors", "--file", "vectors-cases-not-a-list.json", exit=2,
      errors=((None, None, "vectors-cases-not-a-list.json: cases: expected a list"),)),  # type: ignore[arg-type]
    C("vectors: a case without calls", "vectors", "--file", "vectors-bad-case.json", exit=2,
      errors=((None, None, "vectors-bad-case.json: cases[0].calls: expected a list"),)),  # type: ignore[arg-type]
    C("vectors: control characters in a case id", "vectors", "--file", "vectors-evil-id.json", exit=0,
      stdout=("evil\\x1b[2J",)),
]


def _command(args: tuple[str, ...]) -> str:
    return args[0]


def _check_error_lines(case: Case, run: CliRun) -> None:
    lines = run.stderr.splitlines()
    cmd = _command(case.args)
    for file, line, text in case.errors:
        if file is None:
            want = f"loopspec {cmd}: error: "
        else:
            file = file.replace("{abs}", str(FILES) + "/")
            want = f"loopspec {cmd}: error: {file}:{line}: " if line is not None else f"loopspec {cmd}: error: {file}: "
        assert any(ln.startswith(want) and text in ln for ln in lines), \
            f"no stderr line starting {want!r} holding {text!r}:\n{run.describe()}"


def _run(case: Case, parser: str, out: Path) -> CliRun:
    args = [a.replace("{out}", str(out)) for a in case.args]
    import os

    env = dict(os.environ, LOOPSPEC_JSON_PARSER=parser, **case.extra)
    return run_cli(args, wall=120, cwd=FILES, env=env)


def test_the_committed_corpus_is_what_the_script_writes() -> None:
    assert not make_corpus.stale(), "run: python -m tests.hostile.make_corpus"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_file(case: Case, tmp_path: Path) -> None:
    runs = {}
    # TOML files never meet a JSON parser: one run is enough for them
    parsers = PARSERS if _command(case.args) not in ("verify", "spec") else PARSERS[:1]
    for parser in parsers:
        out = tmp_path / parser
        run = _run(case, parser, out)
        assert_sane(run, exit_code=case.exit, max_rss_mb=case.max_rss_mb)
        assert not UNSAFE.search(run.stdout) and not UNSAFE.search(run.stderr), \
            f"a control character reached the terminal:\n{run.describe()!r}"
        assert all(": error: " not in ln or ln.startswith("loopspec ") for ln in run.stderr.splitlines()), \
            run.describe()
        _check_error_lines(case, run)
        for s in case.stdout:
            assert s in run.stdout, f"{s!r} not in stdout:\n{run.describe()}"
        if "--format" in case.args and "json" in case.args:
            from .runner import strict_json

            strict_json(run.stdout)
        if case.out_dir:
            assert written_files(out), "nothing written"
        if out.exists():
            assert_all_json_parses(written_files(out))
        runs[parser] = (run.returncode, run.stdout.replace(str(out), "{out}"), run.stderr.replace(str(out), "{out}"))
    if len(runs) == 2:
        assert runs["json"] == runs["orjson"], \
            f"the parsers disagree:\n--- json\n{runs['json']}\n--- orjson\n{runs['orjson']}"
