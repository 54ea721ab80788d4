"""The hostile corpus: inputs that broke loopspec (issue 14), and more of the same kind.

Small files are committed under ``tests/hostile/files/``; regenerate them with

    python -m tests.hostile.make_corpus          # rewrite tests/hostile/files/
    python -m tests.hostile.make_corpus --check  # exit 1 when the committed files are stale

Large files (millions of bad lines, megabytes of random bytes, documents past the 16 MiB limit) are
never committed: :func:`write_large` writes them at test time, from a fixed seed. Every file is
built from the golden corpus (genuine reference-engine ledgers, transcripts, traces) with one
hostile change, so the rest of the file still checks and the test can see that nothing else was lost.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "oracle"
FILES = Path(__file__).resolve().parent / "files"

Json = Any

#: A run id full of what a terminal acts on: clear screen, carriage return, newline, CSI (C1), a
#: right-to-left override, a bell.
EVIL_ID = "evil\x1b[2J\r\nok   fake-run\x9b31m\u202egnp.exe\x07"


def _dumps(v: Json) -> str:
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


def _runs() -> dict[str, list[dict[str, Json]]]:
    runs: dict[str, list[dict[str, Json]]] = {}
    for line in (GOLDEN / "ledger-pass.ndjson").read_text(encoding="utf-8").splitlines():
        ev = json.loads(line)
        runs.setdefault(ev["run"], []).append(ev)
    return runs


def _ledger(*runs: list[dict[str, Json]] | list[str]) -> bytes:
    out: list[str] = []
    for r in runs:
        out += [x if isinstance(x, str) else _dumps(x) for x in r]
    return ("\n".join(out) + "\n").encode("utf-8")


def _edit(run: list[dict[str, Json]], k: int, change: Callable[[dict[str, Json]], None]) -> list[dict[str, Json]]:
    run = [dict(e) for e in run]
    change(run[k])
    return run


def _raw(run: list[dict[str, Json]], k: int, old: str, new: bytes | str) -> list[str]:
    """The run's lines with one textual replacement in line ``k`` (for what json.dumps cannot write)."""
    lines = [_dumps(e) for e in run]
    assert old in lines[k], (old, lines[k])
    lines[k] = lines[k].replace(old, new if isinstance(new, str) else new.decode("utf-8", "surrogateescape"), 1)
    return lines


def _bytes_ledger(lines: list[str]) -> bytes:
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape")


def _replace(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


def _set(key: str, value: Json) -> Callable[[dict[str, Json]], None]:
    return lambda e: e.__setitem__(key, value)


def _deep(n: int) -> str:
    return "[" * n + "]" * n


def small_files() -> dict[str, bytes]:
    """Every committed hostile file: name -> bytes."""
    runs = _runs()
    m, b = runs["merchants"], runs["budget"]
    f: dict[str, bytes] = {}

    # -- ledgers (loopspec check) --------------------------------------------------------------
    # merchants: 0 run_started, 1 model_requested (step 1), 2 model_proposed, 3 call_validated (step 2),
    # 4 execution_started (step 3), 5 execution_finished (step 3), ... 36 run_terminal
    f["ledger-step0.ndjson"] = _ledger(_edit(m, 1, _set("step", 0)), b)
    f["ledger-step-false.ndjson"] = _ledger(_edit(m, 1, _set("step", False)), b)
    f["ledger-step-0.0.ndjson"] = _bytes_ledger(_raw(m, 1, '"step":1,', '"step":0.0,') + [_dumps(e) for e in b])
    f["ledger-step--0.0.ndjson"] = _bytes_ledger(_raw(m, 1, '"step":1,', '"step":-0.0,') + [_dumps(e) for e in b])
    f["ledger-t-soon.ndjson"] = _ledger(_edit(m, 5, _set("t", "soon")), b)
    f["ledger-t-negative.ndjson"] = _ledger(_edit(m, 2, _set("t", -100)), b)
    f["ledger-seq-true.ndjson"] = _ledger(_edit(m, 0, _set("seq", True)), b)
    f["ledger-bigint.ndjson"] = _bytes_ledger(_raw(m, 0, '"maxRounds":4', '"maxRounds":' + "1" + "0" * 30)
                                              + [_dumps(e) for e in b])
    f["ledger-huge-int.ndjson"] = _bytes_ledger(_raw(m, 3, '"index":0', '"index":' + "9" * 5000)
                                                + [_dumps(e) for e in b])
    f["ledger-1e400.ndjson"] = _bytes_ledger(_raw(m, 2, '"t":0.5', '"t":1e400') + [_dumps(e) for e in b])
    f["ledger-nan.ndjson"] = _bytes_ledger(_raw(m, 2, '"t":0.5', '"t":NaN') + [_dumps(e) for e in b])
    f["ledger-deep.ndjson"] = _bytes_ledger(_raw(m, 3, '"binding":"fresh"', '"binding":' + _deep(200))
                                            + [_dumps(e) for e in b])
    f["ledger-deep-20k.ndjson"] = _bytes_ledger([_deep(20_000)] + [_dumps(e) for e in b])
    f["ledger-bad-utf8.ndjson"] = _bytes_ledger(_raw(m, 3, '"callId":"c1"', b'"callId":"c\xff1"')
                                                + [_dumps(e) for e in b])
    f["ledger-surrogate.ndjson"] = _bytes_ledger(_raw(m, 3, '"callId":"c1"', '"callId":"c\\ud800"')
                                                 + [_dumps(e) for e in b])
    f["ledger-bom.ndjson"] = b"\xef\xbb\xbf" + _ledger(m, b)
    # the last line of run merchants is over --max-line-bytes 1024: named (its "run" is near its start) ...
    f["ledger-overlong-last.ndjson"] = _bytes_ledger(
        [_dumps(e) for e in m[:-1]] + [_dumps({**m[-1], "pad": "x" * 2000})] + [_dumps(e) for e in b])
    # ... or not (a pad before "run" pushes it past the 4 KiB kept of a skipped line)
    f["ledger-overlong-last-unnamed.ndjson"] = _bytes_ledger(
        [_dumps(e) for e in m[:-1]] + [_dumps({"pad": "x" * 5000, **m[-1]})] + [_dumps(e) for e in b])
    f["ledger-evil-id.ndjson"] = _ledger(m, [{**e, "run": EVIL_ID} for e in b])
    bad = [json.loads(x) for x in (GOLDEN / "ledger-fail-budget-relabelled.ndjson").read_text().splitlines()]
    f["ledger-evil-id-violation.ndjson"] = _ledger([{**e, "run": EVIL_ID + str(e["run"])} for e in bad])
    parts = [f[n] for n in ("ledger-step0.ndjson", "ledger-1e400.ndjson", "ledger-deep.ndjson", "ledger-bad-utf8.ndjson",
                            "ledger-t-soon.ndjson", "ledger-evil-id.ndjson")]
    f["ledger-everything.ndjson"] = b"".join(
        p.replace(b'"run":"merchants"', b'"run":"m%d"' % k).replace(b'"run":"budget"', b'"run":"b%d"' % k)
        for k, p in enumerate(parts))

    # -- transcripts and traces (loopspec check) -------------------------------------------------
    chat = (GOLDEN / "chat-pass.json").read_bytes()
    chat_doc = json.loads(chat)
    f["chat-bom.json"] = b"\xef\xbb\xbf" + chat
    f["chat-mixed.json"] = _dumps({"messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "x", "input": {}}]},
        {"role": "tool", "tool_call_id": "a", "content": "1"}]}).encode()
    f["chat-mixed-other-order.json"] = _dumps({"messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "tool_calls": [{"id": "a", "type": "function",
                                              "function": {"name": "x", "arguments": "{}"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "1"}]}]}).encode()
    f["chat-not-a-conversation.json"] = b'{"messages": 5}\n'
    f["chat-evil-id.ndjson"] = (_dumps({**chat_doc, "id": EVIL_ID}) + "\n").encode()
    f["chat-deep-arguments.json"] = _dumps({"messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "tool_calls": [{"id": "a", "type": "function",
                                              "function": {"name": "x", "arguments": _deep(5000)}}]},
        {"role": "tool", "tool_call_id": "a", "content": "1"},
        {"role": "assistant", "content": "done"}]}).encode()
    f["chat-lines-one-bad.ndjson"] = (_dumps(chat_doc) + "\n" + '{"messages": [1e400]}\n' + _dumps(chat_doc)
                                      + "\n").encode()
    f["anthropic.json"] = (GOLDEN / "anthropic-pass.json").read_bytes()
    trace = (GOLDEN / "traces.ndjson").read_text(encoding="utf-8").splitlines()[0]
    f["traces-bad-lines.ndjson"] = "\n".join([
        trace, trace.replace('"output": 1}', '"output": NaN}', 1), '{"format": "loopspec-trace/1", "x": '
        + _deep(300) + "}", trace.replace('"q": "x"', '"q": "\\udc00"', 1), trace]).encode() + b"\n"

    # -- fuzz cases (loopspec replay) ------------------------------------------------------------
    case = {"format": "loopspec-fuzz-case/1", "mode": "batch", "impl": "loopspec serve", "seed": 0,
            "failingStep": 0, "steps": [{
                "kind": "batch",
                "config": {"tools": [{"name": "lookup", "inputSchema": {
                    "type": "object", "properties": {"q": {"type": "string"}}}}],
                    "budget": 1, "mode": "abort", "principal": "alice"},
                "calls": [{"id": "c1", "name": "lookup", "arguments": {"q": "a"}},
                          {"id": "c2", "name": "lookup", "arguments": {"q": "b"}}],
                "script": [{"value": 4}]}],
            "verdict": {"ok": False, "violation": None, "expected": {}, "observed": {}}, "traces": []}
    case_text = json.dumps(case, indent=1)
    f["case-ok.json"] = case_text.encode()
    f["case-bom.json"] = b"\xef\xbb\xbf" + case_text.encode()
    f["case-deep.json"] = _replace(case_text, '"seed": 0', '"seed": ' + _deep(3000)).encode()
    f["case-bad-utf8.json"] = case_text.encode().replace(b'"alice"', b'"al\xffice"')
    f["case-nan.json"] = _replace(case_text, '"value": 4', '"value": NaN').encode()
    f["case-huge-int.json"] = _replace(case_text, '"seed": 0', '"seed": ' + "7" * 5000).encode()
    f["case-not-a-case.json"] = b'[1, 2, 3]\n'
    f["case-empty.json"] = b""

    # -- overlays (loopspec diagram --trace) -----------------------------------------------------
    f["path-ok.json"] = b'{"path": ["T04", "T14"], "failed": 1}\n'
    f["path-deep.json"] = ('{"path": ' + _deep(3000) + "}").encode()
    f["path-bad-utf8.json"] = b'{"path": ["T04", "T\xff14"], "failed": 1}\n'
    f["path-ledger-bad-line.ndjson"] = _bytes_ledger([_dumps(e) for e in m[:5]] + ['{"run": "merchants", "seq": '
                                                                                  + "9" * 400 + "}"])

    # -- bounds and spec files (loopspec verify --bounds, loopspec spec --file) ------------------
    bounds = (ROOT / "spec" / "bounds.toml").read_text(encoding="utf-8")
    f["bounds-deep.toml"] = (bounds + "\nextra = " + _deep(3000) + "\n").encode()
    f["bounds-bad-utf8.toml"] = bounds.encode() + b'\n# \xff\xfe not UTF-8\n'
    f["bounds-inf.toml"] = _replace(bounds, "[scope.batch]", "[scope.batch]\nweight = inf").encode()
    f["bounds-huge-int.toml"] = _replace(bounds, "[scope.batch]", "[scope.batch]\nweight = " + "9" * 5000).encode()
    f["bounds-syntax.toml"] = b"# bounds\n\n[scope.batch\ncalls = 2\n"
    f["bounds-evil-scope.toml"] = _replace(bounds, "[scope.batch]", '[scope."ba\\u001b[2J\\ntch"]').encode()
    f["spec-deep.toml"] = ("[meta]\nextra = " + _deep(3000) + "\n").encode()
    f["spec-bad-utf8.toml"] = b'[meta]\nname = "loop"\n# \xc3( not UTF-8\n'
    f["spec-huge-int.toml"] = b"[meta]\nextra = " + b"9" * 30 + b"\n"

    # -- vector files (loopspec vectors --file) --------------------------------------------------
    vec = json.loads((ROOT / "spec" / "conformance" / "batch.json").read_text(encoding="utf-8"))
    f["vectors-deep.json"] = ('{"format": "loopspec-batch-vectors/1", "cases": ' + _deep(3000) + "}").encode()
    f["vectors-bad-utf8.json"] = b'{"format": "loopspec-batch-vectors/1",\n "ca\xffses": []}\n'
    f["vectors-cases-not-a-list.json"] = b'{"format": "loopspec-batch-vectors/1", "cases": {"a": 1}}\n'
    bad_case = dict(vec["cases"][0], calls="not a list")
    f["vectors-bad-case.json"] = json.dumps({**vec, "cases": [bad_case]}, indent=1).encode()
    evil_case = dict(vec["cases"][0], id=EVIL_ID)
    f["vectors-evil-id.json"] = json.dumps({**vec, "cases": [evil_case]}).encode()
    return f


def write_small(out: Path = FILES) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, data in small_files().items():
        p = out / name
        p.write_bytes(data)
        written.append(p)
    return written


def stale(out: Path = FILES) -> list[str]:
    """Committed files that differ from what this script writes (or are missing, or extra)."""
    want = small_files()
    have = {p.name for p in out.iterdir()} if out.is_dir() else set()
    bad = [n for n, d in want.items() if not (out / n).is_file() or (out / n).read_bytes() != d]
    return sorted(bad + [n for n in have - set(want)])


# --------------------------------------------------------------------------------------------
# Large files, written at test time (fixed seed)
# --------------------------------------------------------------------------------------------


def garbage_ledger(path: Path, bad_lines: int, seed: int = 14) -> Path:
    """A ledger whose one real run is followed by ``bad_lines`` lines of assorted garbage."""
    rng = random.Random(seed)
    m = _runs()["merchants"]
    kinds = [lambda i: f"garbage line {i} {{", lambda i: '{"run": 3, "type": "run_started"}',
             lambda i: "[" * 50, lambda i: '{"t": 1e400}', lambda i: '"\\ud800"', lambda i: "9" * 30]
    with path.open("w", encoding="utf-8") as fh:
        fh.write(_dumps(m[0]) + "\n")
        for i in range(bad_lines):
            fh.write(rng.choice(kinds)(i) + "\n")
        for e in m[1:]:
            fh.write(_dumps(e) + "\n")
    return path


def random_bytes(path: Path, size: int, seed: int = 14) -> Path:
    path.write_bytes(random.Random(seed).randbytes(size))
    return path


def big_document(path: Path, size: int, one_line: bool) -> Path:
    """A JSON array of conversations of about ``size`` bytes: one line, or pretty-printed."""
    conv = json.loads((GOLDEN / "chat-pass.json").read_text(encoding="utf-8"))
    unit = json.dumps(conv)
    n = size // (len(unit) + 2) + 1
    sep = "," if one_line else ",\n"
    path.write_text("[" + sep.join([unit] * n) + "]\n", encoding="utf-8")
    return path


def long_run(path: Path, calls: int, ids: int) -> Path:
    """One loop run of the reference engine with ``calls`` calls over ``ids`` distinct call ids, no
    limits: a single open run that is as long as a ledger gets (the memory one run may hold)."""
    from loopspec.core.ledger import Ledger, dumps_event
    from loopspec.engine.reference import Limits, Tool, run_loop

    led = Ledger()
    per_round = 50
    rounds = [[{"id": f"id{(r * per_round + k) % ids}", "name": "lookup",
                "arguments": {"q": f"q{(r * per_round + k) % ids}"}}
               for k in range(per_round)] for r in range(calls // per_round)]
    script: list[Json] = [*rounds, {"final": "done"}]
    tool = Tool.define("lookup", lambda a, c: len(a["q"]), {"type": "object", "properties": {"q": {"type": "string"}}})
    run_loop(lambda turn: script[turn.round - 1], tools=[tool], limits=Limits(max_rounds=None), ledger=led,
             run_id="long")
    with path.open("w", encoding="utf-8") as fh:
        for ev in led.events:
            fh.write(dumps_event(ev) + "\n")
    return path


def main(argv: list[str]) -> int:
    if "--check" in argv:
        bad = stale()
        if bad:
            print("stale hostile files (python -m tests.hostile.make_corpus): " + ", ".join(bad))
            return 1
        return 0
    for p in write_small():
        print(p.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
