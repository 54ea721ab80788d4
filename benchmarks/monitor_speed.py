"""How fast ``loopspec monitor`` judges spans sent live, beside ``loopspec check`` on the same spans from a file.

    python benchmarks/monitor_speed.py [--traces 2000] [--batch 64] [--core 0]

The spans are a real pydantic-ai run recorded by its own instrumentation (tests/golden/oracle/
rec-pydantic-ai-pass.otlp.jsonl: 5 spans, one agent run), copied under fresh trace ids. A client process sends
them to a ``loopspec monitor`` process as the SDK's OTLP/HTTP exporter does (protobuf
``ExportTraceServiceRequest`` bodies of ``--batch`` traces, one connection, each request waiting for its
answer); the monitor is pinned to one core (``--core``), the client to the other. The figure is spans per
second of the monitor's own CPU time (and of wall time, from the first request to the last verdict). The
anchor, in the same run: ``loopspec check`` on the very same spans written as an OTLP/JSON file, one process
pinned to the same core. The monitor does more per span — HTTP, protobuf decoding, holding traces open,
one judging call per trace — so the ratio says what being live costs.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
RECORDING = ROOT / "tests" / "golden" / "oracle" / "rec-pydantic-ai-pass.otlp.jsonl"
TICKS = os.sysconf("SC_CLK_TCK")


def _spans() -> list[dict]:
    return [rs for line in RECORDING.read_text().splitlines() if line.strip()
            for rs in json.loads(line)["resourceSpans"]]


def _trace(template: list[dict], n: int) -> list[dict]:
    tid = f"{n + 1:032x}"
    out = json.loads(json.dumps(template))
    for rs in out:
        for ss in rs["scopeSpans"]:
            for sp in ss["spans"]:
                sp["traceId"] = tid
    return out


def _protobuf(resource_spans: list[dict]) -> bytes:
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    doc = json.loads(json.dumps({"resourceSpans": resource_spans}))
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for sp in ss["spans"]:
                for f in ("traceId", "spanId", "parentSpanId"):
                    if sp.get(f):
                        sp[f] = base64.b64encode(bytes.fromhex(sp[f])).decode()
    return json_format.Parse(json.dumps(doc), ExportTraceServiceRequest()).SerializeToString()


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def _runs_judged(url: str) -> int:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    return int(sum(float(m) for m in re.findall(r'^loopspec_monitor_runs_total\{[^}]*\} ([\d.e+]+)$', text, re.M)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--core", type=int, default=0)
    args = ap.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    core = cores[args.core % len(cores)]
    other = {c for c in cores if c != core} or {core}
    template = _spans()
    per_trace = sum(len(ss["spans"]) for rs in template for ss in rs["scopeSpans"])
    traces = [_trace(template, n) for n in range(args.traces)]
    spans = per_trace * args.traces
    bodies = [_protobuf([rs for t in traces[i:i + args.batch] for rs in t]) for i in range(0, len(traces), args.batch)]
    env = dict(os.environ, PYTHONPATH=str(SRC))

    # the anchor: check on the same spans from a file, one process on the same core
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "spans.otlp.jsonl"
        with path.open("w") as fh:
            for i in range(0, len(traces), args.batch):
                fh.write(json.dumps({"resourceSpans": [rs for t in traces[i:i + args.batch] for rs in t]}) + "\n")
        one = Path(tmp) / "one.otlp.jsonl"
        one.write_text(json.dumps({"resourceSpans": traces[0]}) + "\n")

        def check(p: Path) -> tuple[float, float, int]:
            t0 = time.perf_counter()
            chk = subprocess.Popen([sys.executable, "-m", "loopspec", "check", "--quiet", str(p)], env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            os.sched_setaffinity(chk.pid, {core})
            _, status, usage = os.wait4(chk.pid, 0)
            return time.perf_counter() - t0, usage.ru_utime + usage.ru_stime, status

        start_cpu = min(check(one)[1] for _ in range(3))  # a process's start-up and one trace
        check_wall, check_cpu, status = check(path)
    if os.waitstatus_to_exitcode(status) != 0:
        print("check did not pass on the benchmark's spans", file=sys.stderr)
        return 1

    mon = subprocess.Popen([sys.executable, "-m", "loopspec", "monitor", "--listen", "127.0.0.1:0", "--idle", "600"],
                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    os.sched_setaffinity(mon.pid, {core})
    os.sched_setaffinity(0, other)
    assert mon.stderr is not None
    m = re.search(r"http://([\d.]+):(\d+)/", mon.stderr.readline())
    assert m, "the monitor did not start"
    host, port = m.group(1), int(m.group(2))
    url = f"http://{host}:{port}"
    cpu0 = _cpu(mon.pid)
    conn = http.client.HTTPConnection(host, port, timeout=60)
    t0 = time.perf_counter()
    for body in bodies:
        conn.request("POST", "/v1/traces", body, {"Content-Type": "application/x-protobuf"})
        resp = conn.getresponse()
        resp.read()
        if resp.status != 200:
            print(f"the monitor answered {resp.status}", file=sys.stderr)
            return 1
    sent = time.perf_counter() - t0
    while _runs_judged(url) < args.traces:
        time.sleep(0.01)
    wall = time.perf_counter() - t0
    cpu = _cpu(mon.pid) - cpu0
    mon.terminate()
    mon.wait(timeout=60)

    print(f"{args.traces} traces, {spans} spans (real pydantic-ai spans, {per_trace} per run), {len(bodies)} requests "
          f"of {args.batch} traces; monitor and check each pinned to core {core}")
    print(f"  loopspec monitor : {spans / cpu:9,.0f} spans per CPU-second   {spans / wall:9,.0f} spans/s wall "
          f"(sent in {sent:.2f} s, last verdict at {wall:.2f} s)")
    print(f"  loopspec check   : {spans / check_cpu:9,.0f} spans per CPU-second   {spans / check_wall:9,.0f} spans/s wall "
          f"(the same spans from a file; process start included)")
    steady = spans / max(check_cpu - start_cpu, 1e-9)
    print(f"  loopspec check   : {steady:9,.0f} spans per CPU-second without its start-up ({start_cpu:.2f} s of CPU, "
          "measured on a one-trace file)")
    print(f"  monitor / check  : {check_cpu / cpu:.0%} of check's rate per CPU-second, "
          f"{spans / cpu / steady:.0%} of it without check's start-up")
    return 0


if __name__ == "__main__":
    sys.exit(main())
