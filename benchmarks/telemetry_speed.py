"""How ``loopspec check``'s time on telemetry grows with its size, from 10k to 100k spans: it must be linear.

Two shapes that were quadratic (issue 32, item 9):

* **array**: console-exporter spans written as one JSON array (``[span, span, …]``), in runs of four spans
  (an agent invocation, a model call proposing one tool call, its execution, the final model call);
* **wide**: one model call proposing N tool calls (N = spans / 2 executions and results), every call executed
  (an ``execute_tool`` span each) and answered in the next model call's input: one run, OTLP/JSON.

And stitching (issue 28), which must not compare every pair of traces:

* **client**: only the model client instrumented, each model call a trace of its own; conversations of three
  calls with the same prompt, told apart by their tool call ids, stitched into one run each;
* **twins**: the same, every conversation identical (ids included): every later request matches many earlier
  conversations alike, so none is stitched.

For each size it prints the check's time per span beside the anchor, parsing the same file with the fastest
JSON parser loopspec ships (nothing else), both measured in a child process in the same round. With
``--previous REF`` (a git revision of this repository, e.g. the commit before the fix) the same check of that
revision runs beside it, stopped after ``--timeout`` seconds: its time per span grows with the size where
ours stays flat.

    python benchmarks/telemetry_speed.py                          # 10k, 20k, 50k, 100k spans
    python benchmarks/telemetry_speed.py --previous 1640d1c --timeout 120

No assertion: the numbers are for reading.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

Json = Any

_CHILD = r"""
import json, sys, time
src, path, what = sys.argv[1], sys.argv[2], sys.argv[3]
if src:
    sys.path.insert(0, src)
if what == "parse":
    try:
        import orjson
        loads = orjson.loads
    except ImportError:
        loads = json.loads
    t = time.process_time()
    loads(open(path, "rb").read()) if path.endswith(".json") else [loads(x) for x in open(path, "rb")]
    print(json.dumps({"seconds": time.process_time() - t}))
else:
    from loopspec.oracle import Options, check_file
    t = time.process_time()
    res = check_file(path, options=Options(max_line=1 << 30))
    print(json.dumps({"seconds": time.process_time() - t, "runs": res.summary.runs, "exit": res.summary.exit_code}))
"""


def _hex(n: int, width: int) -> str:
    return f"{n:0{width}x}"


def _console(trace: int, span: int, parent: int | None, name: str, attrs: dict[str, Json], t: int) -> dict[str, Json]:
    def iso(ns: int) -> str:
        return f"2026-01-01T00:{(ns // 60_000_000) % 60:02d}:{(ns // 1_000_000) % 60:02d}.{ns % 1_000_000:06d}Z"

    return {"name": name, "context": {"trace_id": "0x" + _hex(trace, 32), "span_id": "0x" + _hex(span, 16),
                                      "trace_state": "[]"},
            "kind": "SpanKind.INTERNAL", "parent_id": None if parent is None else "0x" + _hex(parent, 16),
            "start_time": iso(t), "end_time": iso(t + 1), "status": {"status_code": "UNSET"}, "attributes": attrs,
            "events": [], "links": [], "resource": {"attributes": {"service.name": "bench"}, "schema_url": ""}}


def _messages(msgs: list[dict[str, Json]]) -> str:
    return json.dumps(msgs)


def array_file(path: Path, spans: int) -> int:
    """Console spans as one JSON array, in runs of four; returns the number of spans written."""
    out = []
    user = {"role": "user", "parts": [{"type": "text", "content": "weather?"}]}
    for r in range(spans // 4):
        trace, base, t = r + 1, 4 * r + 1, 10 * r
        call = {"type": "tool_call", "id": f"call_{r}", "name": "get_weather", "arguments": {"city": "Paris"}}
        proposal = {"role": "assistant", "parts": [call]}
        result = {"role": "tool", "parts": [{"type": "tool_call_response", "id": f"call_{r}", "response": "18C"}]}
        final = {"role": "assistant", "parts": [{"type": "text", "content": "18C."}]}
        out.append(_console(trace, base, None, "invoke_agent weather",
                            {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "weather"}, t))
        out.append(_console(trace, base + 1, base, "chat scripted", {
            "gen_ai.operation.name": "chat", "gen_ai.input.messages": _messages([user]),
            "gen_ai.output.messages": _messages([proposal])}, t + 1))
        out.append(_console(trace, base + 2, base, "execute_tool get_weather", {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather", "gen_ai.tool.call.id": f"call_{r}",
            "gen_ai.tool.call.arguments": json.dumps({"city": "Paris"}), "gen_ai.tool.call.result": "18C"}, t + 2))
        out.append(_console(trace, base + 3, base, "chat scripted", {
            "gen_ai.operation.name": "chat", "gen_ai.input.messages": _messages([user, proposal, result]),
            "gen_ai.output.messages": _messages([final])}, t + 3))
    path.write_text(json.dumps(out, indent=1), encoding="utf-8")
    return len(out)


def _otlp_span(span: int, parent: int | None, name: str, attrs: dict[str, Json], t: int) -> dict[str, Json]:
    return {"traceId": _hex(1, 32), "spanId": _hex(span, 16), "parentSpanId": "" if parent is None else _hex(parent, 16),
            "name": name, "kind": 1, "startTimeUnixNano": str(t), "endTimeUnixNano": str(t + 1),
            "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attrs.items()], "status": {}}


def wide_file(path: Path, spans: int) -> int:
    """One model call proposing N calls (N = spans // 2 - 1), N executions, one model call with the N results:
    OTLP/JSON, one span a line; returns the number of spans written."""
    n = max(spans // 2 - 1, 1)
    user = {"role": "user", "parts": [{"type": "text", "content": "weather everywhere?"}]}
    calls = [{"type": "tool_call", "id": f"call_{k}", "name": "get_weather", "arguments": {"city": f"c{k}"}}
             for k in range(n)]
    proposal = {"role": "assistant", "parts": calls}
    results = {"role": "tool", "parts": [{"type": "tool_call_response", "id": f"call_{k}", "response": f"{k}C"}
                                        for k in range(n)]}
    lines = [_otlp_span(1, None, "invoke_agent weather", {"gen_ai.operation.name": "invoke_agent"}, 0),
             _otlp_span(2, 1, "chat scripted", {"gen_ai.operation.name": "chat",
                                               "gen_ai.input.messages": _messages([user]),
                                               "gen_ai.output.messages": _messages([proposal])}, 1)]
    for k in range(n):
        lines.append(_otlp_span(3 + k, 1, "execute_tool get_weather", {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather", "gen_ai.tool.call.id": f"call_{k}",
            "gen_ai.tool.call.arguments": json.dumps({"city": f"c{k}"}), "gen_ai.tool.call.result": f"{k}C"}, 10 + 2 * k))
    lines.append(_otlp_span(3 + n, 1, "chat scripted", {
        "gen_ai.operation.name": "chat", "gen_ai.input.messages": _messages([user, proposal, results]),
        "gen_ai.output.messages": _messages([{"role": "assistant", "parts": [{"type": "text", "content": "ok"}]}])},
        10 + 2 * n + 5))
    with path.open("w", encoding="utf-8") as fh:
        for sp in lines:
            fh.write(json.dumps({"resourceSpans": [{"resource": {}, "scopeSpans": [{"scope": {}, "spans": [sp]}]}]})
                     + "\n")
    return len(lines)


def client_file(path: Path, spans: int, twins: bool = False) -> int:
    """Only the model client instrumented: conversations of three model calls, each call a trace of its own (a root
    chat span), which the check stitches by content; the same user prompt in every conversation, told apart by
    their tool call ids — or, ``twins``, every conversation the same, ids included (each later request matches
    every earlier conversation alike: nothing may be stitched). OTLP/JSON, one span a line, the conversations
    interleaved (all first calls, then all second, then all third); returns the number of spans written."""
    n = max(spans // 3, 1)
    user = {"role": "user", "parts": [{"type": "text", "content": "weather?"}]}

    def tc(cid: str, city: str) -> dict[str, Json]:
        return {"role": "assistant", "parts": [{"type": "tool_call", "id": cid, "name": "get_weather",
                                                "arguments": {"city": city}}]}

    def res(cid: str, out: str) -> dict[str, Json]:
        return {"role": "tool", "parts": [{"type": "tool_call_response", "id": cid, "response": out}]}

    final = {"role": "assistant", "parts": [{"type": "text", "content": "18C, 9C."}]}
    lines = []
    for step in range(3):
        for c in range(n):
            a, b = ("call_1", "call_2") if twins else (f"call_{c}_a", f"call_{c}_b")
            h = [[user], [user, tc(a, "Paris"), res(a, "18C")],
                 [user, tc(a, "Paris"), res(a, "18C"), tc(b, "Oslo"), res(b, "9C")]][step]
            out = [tc(a, "Paris"), tc(b, "Oslo"), final][step]
            sp = _otlp_span(1, None, "chat gpt-4o", {"gen_ai.operation.name": "chat",
                                                     "gen_ai.input.messages": _messages(h),
                                                     "gen_ai.output.messages": _messages([out])}, 1000 * step + c)
            sp["traceId"] = _hex(1 + step * n + c, 32)
            lines.append(sp)
    with path.open("w", encoding="utf-8") as fh:
        for sp in lines:
            fh.write(json.dumps({"resourceSpans": [{"resource": {}, "scopeSpans": [{"scope": {}, "spans": [sp]}]}]})
                     + "\n")
    return len(lines)


def _child(src: str, path: Path, what: str, timeout: float) -> dict[str, Json] | None:
    try:
        out = subprocess.run([sys.executable, "-c", _CHILD, src, str(path), what], capture_output=True, text=True,
                             timeout=timeout, check=True)
    except subprocess.TimeoutExpired:
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _previous_src(ref: str, into: Path) -> str:
    """``src/`` and ``spec/`` of git revision ``ref`` of this repository, extracted into ``into``."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "src", "spec"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return str(into / "src")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10000,20000,50000,100000", help="spans per file (comma-separated)")
    ap.add_argument("--shapes", default="array,wide,client,twins",
                    help="comma-separated: array, wide, client (one trace per model call, stitched), twins")
    ap.add_argument("--previous", metavar="REF", help="also time the check of this git revision (e.g. before a fix)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds before a run of --previous is stopped")
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    load = " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "unknown"
    print(f"load average: {load} ({os.cpu_count()} CPUs); CPU seconds of a child process per file, in us per span")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        prev = None
        if args.previous:
            (tmp / "previous").mkdir()
            prev = _previous_src(args.previous, tmp / "previous")
        ours = str(ROOT / "src")
        for shape in args.shapes.split(","):
            make = {"array": array_file, "wide": wide_file, "client": client_file,
                    "twins": lambda p, n: client_file(p, n, twins=True)}[shape]
            print(f"{shape}: " + {
                "array": "console spans as one JSON array, runs of 4 spans",
                "wide": "one model call proposing N calls, N executions, N results (OTLP/JSON)",
                "client": "one trace per model call, conversations of 3 calls to stitch, told apart by call ids",
                "twins": "one trace per model call, every conversation identical (none may be stitched)"}[shape])
            for size in sizes:
                path = tmp / f"{shape}-{size}.{'json' if shape == 'array' else 'otlp.jsonl'}"
                n = make(path, size)
                parse = _child("", path, "parse", 600)
                check = _child(ours, path, "check", 3600)
                assert parse is not None and check is not None
                row = (f"  {n:>7,} spans ({path.stat().st_size / 1e6:5.1f} MB): parse only "
                       f"{parse['seconds'] / n * 1e6:6.2f} us/span (the anchor) | check {check['seconds'] / n * 1e6:7.2f} "
                       f"us/span = {check['seconds']:.2f} s ({check['runs']} runs, exit {check['exit']})")
                if prev is not None:
                    old = _child(prev, path, "check", args.timeout)
                    row += (f" | {args.previous}: " + (f"{old['seconds'] / n * 1e6:8.2f} us/span = {old['seconds']:.2f} s"
                                                       if old is not None else f"stopped after {args.timeout:.0f} s "
                                                       f"(> {args.timeout / n * 1e6:.0f} us/span)"))
                print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
