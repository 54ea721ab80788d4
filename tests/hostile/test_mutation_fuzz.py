"""A Hypothesis mutation fuzz of every kind of file loopspec reads: genuine ledgers, transcripts,
framework histories and telemetry exports, traces, fuzz cases, overlays, vector files, spec and
bounds files, each changed where it hurts — a value of another type or out of range, a key dropped,
a line repeated, moved or cut, bytes spliced in from a hostile vocabulary — and run through the
command line in process. No input may end in an internal error (exit 70; ``LOOPSPEC_DEBUG`` makes it
raise here, so Hypothesis shrinks it and shows the traceback); a text report never carries a control
character; a JSON report is strict JSON.

``LOOPSPEC_FUZZ_EXAMPLES`` (default 120) sets the examples per file kind; CI runs the default, with
a fixed seed (``LOOPSPEC_FUZZ_RANDOM=1``: a new seed each run, for longer searches).
"""

from __future__ import annotations

import contextlib
import copy
import io
import itertools
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopspec.cli import main

from . import make_corpus

ROOT = make_corpus.ROOT
GOLDEN = make_corpus.GOLDEN
EXAMPLES = int(os.environ.get("LOOPSPEC_FUZZ_EXAMPLES", "120"))
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
REFERENCE = "loopspec.protocol.executor:ReferenceExecutor"

Json = Any

HOSTILE_VALUES: list[Json] = [
    None, True, False, 0, -1, 1, 2, 0.0, -0.0, 0.5, 1e308, 2**63, -(2**63) - 1, 10**19, "", " ", "x", "0",
    "T04", "run_started", "\x1b[2J\n", "\ud83d\ude00", [], {}, [[[[]]]], {"a": {"b": {}}}, ["x", 1, None],
    {"type": "run_terminal"}, "R9", "ok", "error", "abort", "continue", "INVALID_CALL", "DEPENDENCY_TEMPORARY",
]

SPLICES = [b"[", b"]", b"{", b"}", b",", b":", b'"', b"\\", b"\\ud800", b"1e400", b"-", b"NaN", b"Infinity",
           b"\xff", b"\xc3", b"\xef\xbb\xbf", b"\n", b"\r", b"\x00", b"9" * 25, b"[" * 300, b"true", b"null",
           b'"run":', b'"type":"run_terminal"', b'"step":0', b"=", b"[[", b"]]", b"inf", b"nan", b"'"]


# --------------------------------------------------------------------------------------------
# Mutations
# --------------------------------------------------------------------------------------------


def _paths(v: Json, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(v, dict):
        for k, x in v.items():
            yield from _paths(x, (*prefix, k))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from _paths(x, (*prefix, i))


def _get(v: Json, path: tuple[Any, ...]) -> Json:
    for p in path:
        v = v[p]
    return v


@st.composite
def mutated_value(draw: st.DrawFn, doc: Json) -> Json:
    """``doc`` with one to three structural changes."""
    doc = json.loads(json.dumps(doc))
    for _ in range(draw(st.integers(1, 3))):
        paths = list(itertools.islice(_paths(doc), 4000))
        path = draw(st.sampled_from(paths))
        op = draw(st.sampled_from(["replace", "replace", "replace", "delete", "wrap", "duplicate"]))
        if not path:
            doc = copy.deepcopy(draw(st.sampled_from(HOSTILE_VALUES))) if op == "replace" else [doc]
            continue
        parent, key = _get(doc, path[:-1]), path[-1]
        if op == "replace":
            parent[key] = copy.deepcopy(draw(st.sampled_from(HOSTILE_VALUES)))  # never share a value
        elif op == "delete":
            del parent[key]
        elif op == "wrap":
            parent[key] = [parent[key]] if draw(st.booleans()) else {"v": parent[key]}
        elif isinstance(parent, list):
            parent.insert(key, json.loads(json.dumps(parent[key])))
        else:
            parent[key] = [parent[key], parent[key]]
    return doc


@st.composite
def spliced(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` with one to three slices replaced by hostile bytes."""
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(data)))
        j = draw(st.integers(i, min(len(data), i + 8)))
        data = data[:i] + draw(st.sampled_from(SPLICES)) + data[j:]
    return data


@st.composite
def mutated_lines(draw: st.DrawFn, lines: list[Json]) -> bytes:
    """NDJSON values with a structural change to some lines, lines repeated, moved or cut."""
    lines = list(lines)
    for _ in range(draw(st.integers(1, 3))):
        k = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["mutate", "mutate", "mutate", "repeat", "drop", "move", "cut"]))
        if op == "mutate":
            lines[k] = draw(mutated_value(lines[k]))
        elif op == "repeat":
            lines.insert(k, lines[k])
        elif op == "drop" and len(lines) > 1:
            del lines[k]
        elif op == "move":
            lines.insert(draw(st.integers(0, len(lines) - 1)), lines.pop(k))
        elif op == "cut":
            lines = lines[: k + 1]
    return ("\n".join(json.dumps(x, ensure_ascii=False) for x in lines) + "\n").encode("utf-8", "surrogatepass")


def _json_kind(doc: Json) -> st.SearchStrategy[bytes]:
    return st.one_of(
        mutated_value(doc).map(lambda d: json.dumps(d, indent=1, ensure_ascii=False).encode("utf-8", "surrogatepass")),
        spliced(json.dumps(doc, indent=1).encode()),
    )


def _ndjson_kind(lines: list[Json]) -> st.SearchStrategy[bytes]:
    text = ("\n".join(json.dumps(x) for x in lines) + "\n").encode()
    return st.one_of(mutated_lines(lines), mutated_lines(lines), spliced(text))


# --------------------------------------------------------------------------------------------
# Running the command line in process
# --------------------------------------------------------------------------------------------

_counter = itertools.count()


@contextlib.contextmanager
def _debug() -> Iterator[None]:
    old = os.environ.get("LOOPSPEC_DEBUG")
    os.environ["LOOPSPEC_DEBUG"] = "1"  # an internal error raises (Hypothesis shows and shrinks it)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("LOOPSPEC_DEBUG", None)
        else:
            os.environ["LOOPSPEC_DEBUG"] = old


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with _debug(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    assert code != 70, err.getvalue()
    return code, out.getvalue(), err.getvalue()


def _file(tmp: Path, suffix: str, data: bytes) -> Path:
    p = tmp / f"in-{next(_counter)}{suffix}"
    p.write_bytes(data)
    return p


def _assert_text_safe(out: str, err: str) -> None:
    m = UNSAFE.search(out) or UNSAFE.search(err)
    assert m is None, f"control character {m.group()!r} reached the terminal:\n{out[-2000:]}\n{err[-2000:]}"


#: states a mutated bounds file may make one scope explore in the fuzz (see test_bounds_files)
STATE_BUDGET = 300

FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=not os.environ.get("LOOPSPEC_FUZZ_RANDOM"),
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])


def _check_both_formats(path: Path, *extra: str) -> None:
    code, out, err = run(["check", *extra, str(path)])
    assert code in (0, 1, 2)
    _assert_text_safe(out, err)
    code2, out2, _ = run(["check", "--format", "json", *extra, str(path)])
    assert code2 == code
    doc = json.loads(out2, parse_constant=lambda c: pytest.fail(f"{c} in a JSON report"))
    assert doc["summary"]["exitCode"] == code


def _ndjson(path: Path) -> list[Json]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def _runs_of(path: Path, n: int) -> list[Json]:
    lines = _ndjson(path)
    keep = list(dict.fromkeys(e["run"] for e in lines))[:n]
    return [e for e in lines if e["run"] in keep]


LEDGER = _runs_of(GOLDEN / "ledger-pass.ndjson", 3)
LEDGER_BAD = _ndjson(GOLDEN / "ledger-fail-budget-relabelled.ndjson")
LEDGER_CONCURRENT = _runs_of(GOLDEN / "ledger-concurrent-pass.ndjson", 4)  # section 5: held answers, abandonment


# --------------------------------------------------------------------------------------------
# The targets
# --------------------------------------------------------------------------------------------


@FUZZ
@given(data=st.one_of(_ndjson_kind(LEDGER), _ndjson_kind(LEDGER_BAD), _ndjson_kind(LEDGER_CONCURRENT)))
def test_ledgers(tmp_path: Path, data: bytes) -> None:
    _check_both_formats(_file(tmp_path, ".ndjson", data))


TRANSCRIPTS = [json.loads((GOLDEN / n).read_text(encoding="utf-8")) for n in (
    "chat-pass.json", "chat-fail-conflict.json", "responses-pass.json", "responses-items.json", "anthropic-pass.json",
    "anthropic-fail-conflict.json", "rec-pydantic-ai-pass.pydantic-ai.json", "rec-langgraph-pass.langchain.json",
    "rec-openai-agents-pass.items.json")]


@FUZZ
@given(data=st.sampled_from(TRANSCRIPTS).flatmap(_json_kind))
def test_transcripts_and_histories(tmp_path: Path, data: bytes) -> None:
    _check_both_formats(_file(tmp_path, ".json", data))


@FUZZ
@given(data=st.sampled_from([_ndjson(GOLDEN / "rec-openai-agents-pass.otlp.jsonl"),
                             _ndjson(GOLDEN / "rec-pydantic-ai-pass.otlp.jsonl")]).flatmap(_ndjson_kind))
def test_telemetry(tmp_path: Path, data: bytes) -> None:
    _check_both_formats(_file(tmp_path, ".jsonl", data))


@FUZZ
@given(data=_ndjson_kind(_ndjson(GOLDEN / "traces.ndjson")))
def test_traces(tmp_path: Path, data: bytes) -> None:
    _check_both_formats(_file(tmp_path, ".ndjson", data), "--input-format", "trace")


CASE = json.loads((make_corpus.FILES / "case-ok.json").read_text(encoding="utf-8"))


@FUZZ
@given(data=_json_kind(CASE))
def test_fuzz_cases(tmp_path: Path, data: bytes) -> None:
    code, out, err = run(["replay", str(_file(tmp_path, ".json", data)), "--impl", REFERENCE])
    assert code in (0, 1, 2)
    _assert_text_safe(out, err)


@FUZZ
@given(data=st.one_of(_json_kind({"path": ["T04", "T14", "T20"], "failed": 2, "start": "decided", "label": "x"}),
                      _ndjson_kind(LEDGER[:40])))
def test_overlays(tmp_path: Path, data: bytes) -> None:
    f = _file(tmp_path, ".json", data)
    code, out, err = run(["diagram", "--trace", str(f), "--format", "md", "--out", str(tmp_path / "d")])
    assert code in (0, 2)
    _assert_text_safe(out, err)


VECTORS = json.loads((ROOT / "spec" / "conformance" / "batch.json").read_text(encoding="utf-8"))
VECTORS = {**VECTORS, "cases": VECTORS["cases"][:3]}


@FUZZ
@given(data=_json_kind(VECTORS))
def test_vector_files(tmp_path: Path, data: bytes) -> None:
    code, out, err = run(["vectors", "--file", str(_file(tmp_path, ".json", data))])
    assert code in (0, 1, 2)
    _assert_text_safe(out, err)


def _toml_kind(path: Path) -> st.SearchStrategy[bytes]:
    lines = path.read_bytes().splitlines(keepends=True)

    @st.composite
    def line_edits(draw: st.DrawFn) -> bytes:
        ls = list(lines)
        for _ in range(draw(st.integers(1, 3))):
            k = draw(st.integers(0, len(ls) - 1))
            op = draw(st.sampled_from(["value", "drop", "repeat"]))
            if op == "value" and b"=" in ls[k]:
                key = ls[k].split(b"=", 1)[0]
                v = draw(st.sampled_from([b"-1", b"0", b"true", b'"x"', b"[]", b"{}", b"inf", b"nan", b"1.5",
                                          b"9" * 30, b'["T99"]', b"[[1]]", b'"' + b"\\u0000" + b'"']))
                ls[k] = key + b"= " + v + b"\n"
            elif op == "drop":
                del ls[k]
            else:
                ls.insert(k, ls[k])
        return b"".join(ls)

    return st.one_of(line_edits(), spliced(path.read_bytes()))


@FUZZ
@given(data=_toml_kind(ROOT / "spec" / "bounds.toml"))
def test_bounds_files(tmp_path: Path, data: bytes) -> None:
    """A bounds file (verify --bounds) read and explored: every scope that loads is model-checked up to
    a state budget (the file itself sets how large an exploration is, so the budget keeps each example
    short; running out of it is the only stop allowed besides a finding)."""
    from loopspec.checker.bounds import BoundsError, load_bounds
    from loopspec.checker.explore import explore

    f = _file(tmp_path, ".toml", data)
    with _debug():
        try:
            bounds = load_bounds(f)
            scopes = [bounds.scope(name) for name in list(bounds.scopes)]
        except BoundsError as exc:
            _assert_text_safe(str(exc), "")
            return
        for scope in scopes:
            try:
                explore(bounds, scope, max_states=STATE_BUDGET)
            except RuntimeError as exc:
                if not str(exc).startswith(f"more than {STATE_BUDGET} states"):
                    raise


@FUZZ
@given(data=_toml_kind(ROOT / "spec" / "loop.toml"))
def test_spec_files(tmp_path: Path, data: bytes) -> None:
    code, out, err = run(["spec", "--file", str(_file(tmp_path, ".toml", data))])
    assert code in (0, 1, 2)
    _assert_text_safe(out, err)
