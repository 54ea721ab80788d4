"""``loopspec monitor``: the oracle live as an OTLP/HTTP endpoint.

The central claim is tested end to end: an application exporting its traces with the OpenTelemetry SDK's own
OTLP/HTTP protobuf exporter (tests/monitor_app.py: real pydantic-ai runs with a scripted model) gets, live, the
verdicts ``loopspec check`` gives on the same spans written by the OTLP/JSON file exporter, and the exit code
``check`` gives, after SIGTERM. The rest pins the endpoint's behaviour as the OTLP/HTTP specification asks
(success, partial success with the rejected count, 400, 413, 415, 429 with Retry-After), bounded memory
(``--max-open-runs``, ``--idle``), forwarding, the metrics, and that nothing accepted is lost."""

from __future__ import annotations

import base64
import gzip
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("prometheus_client")
pytest.importorskip("opentelemetry.proto")

from loopspec.monitor import (
    Monitor,
    Settings,
    _otlp,
)
from loopspec.monitor._runs import OpenTraces
from loopspec.spec.loader import default_spec

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "oracle"
PASS = GOLDEN / "rec-pydantic-ai-pass.otlp.jsonl"
REPLAY = GOLDEN / "rec-pydantic-ai-fail-replay-reexecuted.otlp.jsonl"

Json = Any


def _lines(path: Path) -> list[dict[str, Json]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _merged(path: Path) -> dict[str, Json]:
    """Every span of a recording (one export request a line) as one request."""
    return {"resourceSpans": [rs for d in _lines(path) for rs in d["resourceSpans"]]}


_WHERE = [(re.compile(r"resourceSpans\[\d+\]\.scopeSpans\[\d+\]\.spans\[\d+\]"), "span[*]"), (re.compile(r"line \d+"), "line *"),
          (re.compile(r'"line": \d+'), '"line": *')]


def _same_run(live: dict[str, Json], want: dict[str, Json]) -> None:
    """The same verdict, rules, checks, counts and explanation; only where things are differs (the monitor's
    locations are in the trace's spans as one document, the file's in its lines)."""
    live, want = dict(live), dict(want)
    for k in ("file", "lines", "monitor"):
        live.pop(k, None), want.pop(k, None)

    def norm(v: Json) -> str:
        text = json.dumps(v, sort_keys=True)
        for rx, sub in _WHERE:
            text = rx.sub(sub, text)
        return text

    assert norm(live) == norm(want)


def _to_protobuf(doc: dict[str, Json]) -> bytes:
    """An OTLP/JSON request as the protobuf an SDK exporter sends (ids from hex to bytes)."""
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    doc = json.loads(json.dumps(doc))
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for sp in ss["spans"]:
                for obj in (sp, *sp.get("links", [])):
                    for f in ("traceId", "spanId", "parentSpanId"):
                        if obj.get(f):
                            obj[f] = base64.b64encode(bytes.fromhex(obj[f])).decode()
    return json_format.Parse(json.dumps(doc), ExportTraceServiceRequest()).SerializeToString()


@pytest.fixture
def monitor() -> Any:
    made: list[Monitor] = []

    def make(**kw: Any) -> Monitor:
        kw.setdefault("idle", 30.0)
        m = Monitor(Settings(host="127.0.0.1", port=0, **kw), default_spec(), out=io.StringIO(), err=io.StringIO())
        m.start()
        made.append(m)
        return m

    yield make
    for m in made:
        if not m._stop.is_set():
            m.stop()


def _post(m: Monitor, body: bytes, ctype: str = _otlp.JSON, path: str = "/v1/traces",
          headers: dict[str, str] | None = None) -> tuple[int, bytes, dict[str, str]]:
    host, port = m.address
    req = urllib.request.Request(f"http://{host}:{port}{path}", data=body, method="POST",
                                 headers={"Content-Type": ctype, **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read(), dict(r.headers.items())
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers.items())


def _get(m: Monitor, path: str) -> tuple[int, str]:
    host, port = m.address
    with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=10) as r:
        return r.status, r.read().decode()


def _verdicts(m: Monitor) -> list[dict[str, Json]]:
    assert isinstance(m.output.out, io.StringIO)
    return [json.loads(x) for x in m.output.out.getvalue().splitlines()]


def _wait(cond: Any, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)


# -- decoding --------------------------------------------------------------------------------------


def test_protobuf_json_and_gzip_bodies_decode_to_the_same_spans() -> None:
    doc = _lines(PASS)[0]
    from_json = _otlp.decode(json.dumps(doc).encode(), "application/json; charset=utf-8", max_bytes=1 << 20)
    pb = _to_protobuf(doc)
    from_pb = _otlp.decode(_otlp.inflate(gzip.compress(pb), "gzip", 1 << 20), _otlp.PROTOBUF, max_bytes=1 << 20)
    ids = lambda rs: [(s["traceId"], s["spanId"], s.get("parentSpanId", ""))  # noqa: E731
                      for r in rs for ss in r["scopeSpans"] for s in ss["spans"]]
    assert ids(from_pb) == ids(from_json) and ids(from_json)
    assert all(re.fullmatch(r"[0-9a-f]{32}", t) for t, _, _ in ids(from_pb))
    # the protobuf JSON mapping (base64 ids, what MessageToJson writes) is the same data
    b64 = json.loads(json.dumps(doc))
    for sp in b64["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        sp["traceId"] = base64.b64encode(bytes.fromhex(sp["traceId"])).decode()
    assert ids(_otlp.decode(json.dumps(b64).encode(), _otlp.JSON, max_bytes=1 << 20))[0] == ids(from_json)[0]


def test_a_gzip_bomb_is_refused_as_too_large_without_inflating_it_all() -> None:
    bomb = gzip.compress(b"{" + b" " * (8 << 20) + b"}")
    with pytest.raises(_otlp.BodyError) as e:
        _otlp.inflate(bomb, "gzip", 1 << 20)
    assert e.value.status == 413


def test_open_traces_close_on_idle_and_overflow_oldest_first() -> None:
    t = OpenTraces(idle=5, max_open=2)
    t.add("a", [{}], 1, now=0)
    t.add("b", [{}], 2, now=1)
    t.add("c", [{}], 3, now=2)
    (ev,) = t.overflow()
    assert (ev.trace, ev.reason, ev.spans) == ("a", "evicted", 1) and "--max-open-runs" in (ev.note or "")
    assert [c.trace for c in t.expired(now=6.5)] == ["b"]
    assert t.spans == 3 and t.was_closed("a") and t.was_closed("b") and not t.was_closed("c")
    assert [(c.trace, c.reason) for c in t.all()] == [("c", "shutdown")] and t.spans == 0


# -- the endpoint ------------------------------------------------------------------------------------


def test_json_and_protobuf_exports_are_judged_as_check_judges_the_file(monitor: Any) -> None:
    from loopspec.oracle import check_file

    m = monitor()
    for doc in _lines(PASS):
        assert _post(m, json.dumps(doc).encode())[0] == 200
    for doc in _lines(REPLAY):
        status, body, headers = _post(m, gzip.compress(_to_protobuf(doc)), _otlp.PROTOBUF,
                                      headers={"Content-Encoding": "gzip"})
        assert status == 200 and body == b"" and headers["Content-Type"] == _otlp.PROTOBUF
    m.stop()
    got = {v["run"]: v for v in _verdicts(m)}
    for path in (PASS, REPLAY):
        for rec in check_file(str(path)).records:
            live = got.pop(rec.run)
            assert live["monitor"]["closedBy"] == "root"
            _same_run(live, rec.to_json())
    assert not got
    assert m.exit_code == 1  # a violation, as check exits


def test_refusals_follow_otlp_http(monitor: Any) -> None:
    m = monitor(max_body_bytes=4096)
    status, body, _ = _post(m, b"{not json")
    assert status == 400 and json.loads(body)["code"] == 3 and "not JSON" in json.loads(body)["message"]
    status, body, _ = _post(m, b"\xff\xff\xff", _otlp.PROTOBUF)
    assert status == 400 and b"protobuf" in body
    status, _, _ = _post(m, b"x" * 5000)
    assert status == 413
    status, _, _ = _post(m, gzip.compress(b'{"resourceSpans": []' + b" " * 10_000 + b"}"),
                         headers={"Content-Encoding": "gzip"})
    assert status == 413
    assert _post(m, b"{}", "text/plain")[0] == 415
    assert _post(m, b"{}", path="/v1/logs")[0] == 404
    assert m.refused_bodies == 5 and m.exit_code == 2  # unreadable input: check's exit code 2


def test_spans_without_ids_are_a_partial_success_with_the_rejected_count(monitor: Any) -> None:
    m = monitor()
    doc = _lines(PASS)[0]
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    spans.append({"name": "orphan", "spanId": "00000000000000aa"})  # no trace id
    spans.append({"name": "zero", "traceId": "0" * 32, "spanId": "00000000000000bb"})
    status, body, _ = _post(m, json.dumps(doc).encode())
    assert status == 200
    ps = json.loads(body)["partialSuccess"]
    assert ps["rejectedSpans"] == "2" and "traceId" in ps["errorMessage"]
    _, pb_body, _ = _post(m, _to_protobuf(_lines(PASS)[0]) + b"", _otlp.PROTOBUF)
    assert pb_body == b""  # nothing rejected: the empty ExportTraceServiceResponse


def test_a_span_arriving_after_its_trace_was_judged_is_refused_not_judged_alone(monitor: Any) -> None:
    m = monitor()
    for doc in _lines(PASS):
        assert _post(m, json.dumps(doc).encode())[0] == 200
    _wait(lambda: m.traces_judged == 1)
    late = json.loads(json.dumps(_lines(PASS)[0]))
    late["resourceSpans"][0]["scopeSpans"][0]["spans"] = late["resourceSpans"][0]["scopeSpans"][0]["spans"][:1]
    status, body, _ = _post(m, json.dumps(late).encode())
    assert status == 200 and json.loads(body)["partialSuccess"]["rejectedSpans"] == "1"
    assert "already judged" in json.loads(body)["partialSuccess"]["errorMessage"]
    m.stop()
    assert len(_verdicts(m)) == 1


def _without_root(doc: dict[str, Json], trace: str) -> dict[str, Json]:
    d = json.loads(json.dumps(doc))
    for rs in d["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            ss["spans"] = [dict(s, traceId=trace) for s in ss["spans"] if s.get("parentSpanId")]
    return d


def test_held_traces_close_when_idle_when_too_many_are_open_and_at_shutdown(monitor: Any) -> None:
    m = monitor(idle=0.3, max_open_runs=2)
    doc = _merged(PASS)
    _post(m, json.dumps(_without_root(doc, "a" * 32)).encode())
    _wait(lambda: m.traces_judged == 1)  # idle
    for t in ("b" * 32, "c" * 32, "d" * 32):
        _post(m, json.dumps(_without_root(doc, t)).encode())
    _wait(lambda: m.traces_judged == 2)  # the oldest of three open, beyond --max-open-runs 2
    m.stop()  # the rest: shutdown (or idle, if the ticker got there first)
    closed = [(v["monitor"]["trace"][0], v["monitor"]["closedBy"]) for v in _verdicts(m)]
    assert closed[:2] == [("a", "idle"), ("b", "evicted")]
    assert {t for t, _ in closed} == {"a", "b", "c", "d"}
    assert all("judged without its root span" in v["monitor"]["note"] for v in _verdicts(m))


def test_a_flood_is_refused_with_429_and_nothing_accepted_is_lost(monitor: Any) -> None:
    m = monitor(max_held_spans=6)
    doc = _merged(PASS)  # 4 spans, 3 without the root
    accepted = 0
    refused = 0
    for n in range(4):
        status, _, headers = _post(m, json.dumps(_without_root(doc, f"{n + 1:032x}")).encode())
        if status == 429:
            refused += 1
            assert headers["Retry-After"] == "1"
        else:
            accepted += 1
    assert refused >= 1 and accepted >= 1
    m.stop()
    assert len({v["monitor"]["trace"] for v in _verdicts(m)}) == accepted


def test_metrics_and_health(monitor: Any) -> None:
    m = monitor()
    for doc in _lines(REPLAY):
        _post(m, json.dumps(doc).encode())
    _wait(lambda: m.traces_judged == 1)
    assert _get(m, "/healthz") == (200, "ok\n")
    status, text = _get(m, "/metrics")
    assert status == 200
    assert 'loopspec_monitor_runs_total{verdict="violates"} 1.0' in text
    assert 'loopspec_monitor_violations_total{rule="R6"} 1.0' in text
    assert re.search(r"loopspec_monitor_spans_received_total [1-9]", text)
    assert "loopspec_monitor_judge_seconds_count 1.0" in text
    assert "loopspec_monitor_open_traces 0.0" in text


def test_forwarding_sends_each_accepted_request_on_unchanged(monitor: Any) -> None:
    downstream = monitor()
    host, port = downstream.address
    front = monitor(forward=f"http://{host}:{port}/v1/traces")
    for doc in _lines(PASS):
        assert _post(front, gzip.compress(_to_protobuf(doc)), _otlp.PROTOBUF,
                     headers={"Content-Encoding": "gzip"})[0] == 200
    _wait(lambda: downstream.traces_judged == 1)
    front.stop()
    downstream.stop()
    strip = lambda v: {k: x for k, x in v.items() if k != "monitor"}  # noqa: E731
    assert [strip(v) for v in _verdicts(front)] == [strip(v) for v in _verdicts(downstream)]
    assert "loopspec_monitor_forwarded_requests_total{outcome=\"ok\"}" in front.metrics.render()[0].decode()


# -- the command, with the SDK's own exporter ----------------------------------------------------------


def _start_cli(*extra: str, stdout: Any = subprocess.PIPE) -> tuple[subprocess.Popen[str], str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.Popen([sys.executable, "-m", "loopspec", "monitor", "--listen", "127.0.0.1:0", *extra],
                            stdout=stdout, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stderr is not None
    line = proc.stderr.readline()
    m = re.search(r"http://([\d.]+):(\d+)/v1/traces", line)
    assert m, line
    return proc, f"http://{m.group(1)}:{m.group(2)}/v1/traces"


@pytest.mark.frameworks
def test_an_application_exporting_with_the_sdk_gets_checks_verdicts_live(tmp_path: Path) -> None:
    pytest.importorskip("pydantic_ai")
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    proc, url = _start_cli("--idle", "60")
    recorded = tmp_path / "spans.otlp.jsonl"
    app = subprocess.run([sys.executable, str(ROOT / "tests" / "monitor_app.py"), url, str(recorded), "--runs", "3"],
                         capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    assert app.returncode == 0, app.stderr
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    live = {v["run"]: v for v in map(json.loads, out.splitlines())}
    assert {v["monitor"]["closedBy"] for v in live.values()} == {"root"}  # every run closed by its root span
    check = subprocess.run([sys.executable, "-m", "loopspec", "check", "--format", "json", str(recorded)],
                           capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    runs = json.loads(check.stdout)["runs"]
    assert len(runs) == len(live) == 3
    for want in runs:
        _same_run(live[want["run"]], want)
    assert sorted((r.get("violation") or {}).get("rule") or "-" for r in runs) == ["-", "R6", "R7"]
    assert proc.returncode == check.returncode == 1, err
    assert "judged 3 run(s) in 3 trace(s)" in err


def test_sigterm_judges_what_is_held_and_a_closed_stdout_does_not_change_the_exit_code() -> None:
    r, w = os.pipe()
    proc, url = _start_cli("--idle", "600", stdout=w)
    os.close(w)
    os.close(r)  # nobody reads the verdicts
    for doc in [_merged(REPLAY)]:  # the violating run, its root span held back: judged only at shutdown
        body = json.dumps(_without_root(doc, "ab" * 16)).encode()
        req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 200
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert "judging the traces still open" in err and "1 violate (R6 ×1)" in err
    assert "standard output was closed" in err
    assert proc.returncode == 1


def test_the_protobuf_decoding_is_protobufs_own_json_mapping(tmp_path: Path) -> None:
    """The hand-written OTLP/JSON mapping of the trace messages (fast) against json_format (slow), on real
    spans plus every field the real ones leave empty: events, links, status, flags, arrays, kvlists, bytes."""
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    doc = _merged(REPLAY)
    sp = doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    sp.update(flags=257, traceState="k=v", droppedAttributesCount=2, droppedEventsCount=1, droppedLinksCount=3,
              status={"code": 2, "message": "boom"},
              events=[{"timeUnixNano": "5", "name": "exception", "attributes": [
                  {"key": "b", "value": {"bytesValue": "AAEC"}},
                  {"key": "a", "value": {"arrayValue": {"values": [{"intValue": "-3"}, {"doubleValue": 1.5}]}}},
                  {"key": "k", "value": {"kvlistValue": {"values": [{"key": "x", "value": {"boolValue": True}}]}}},
                  {"key": "e", "value": {"arrayValue": {}}}]}],
              links=[{"traceId": "ab" * 16, "spanId": "cd" * 8, "traceState": "s", "flags": 1,
                      "attributes": [{"key": "l", "value": {"stringValue": "v"}}]}])
    doc["resourceSpans"][0]["schemaUrl"] = "https://opentelemetry.io/schemas/1.21.0"
    body = _to_protobuf(doc)
    mine = _otlp.decode(body, _otlp.PROTOBUF, max_bytes=1 << 20)
    theirs = json_format.MessageToDict(ExportTraceServiceRequest.FromString(body))["resourceSpans"]
    _otlp._ids_to_hex(theirs, base64_ok=True)
    for rs in theirs:  # json_format writes enums by name; OTLP/JSON by number
        for ss in rs["scopeSpans"]:
            for s in ss["spans"]:
                kinds = {"SPAN_KIND_INTERNAL": 1, "SPAN_KIND_SERVER": 2, "SPAN_KIND_CLIENT": 3,
                         "SPAN_KIND_PRODUCER": 4, "SPAN_KIND_CONSUMER": 5}
                if "kind" in s:
                    s["kind"] = kinds[s["kind"]]
                if "code" in s.get("status", {}):
                    s["status"]["code"] = {"STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}[s["status"]["code"]]
                for link in s.get("links", []):
                    _otlp._ids_to_hex([{"scopeSpans": [{"spans": [link]}]}], base64_ok=True)
    assert json.dumps(mine, indent=1, sort_keys=True) == json.dumps(theirs, indent=1, sort_keys=True)


def test_html_and_junit_reports_are_written_at_shutdown_as_check_writes_them(tmp_path: Path) -> None:
    """issue 31: ``--html``/``--junit`` where ``check`` has them: one JUnit case per judged run, the failures
    those of ``check --junit`` on the same spans from a file, valid against the JUnit schema CI systems read."""
    import xml.etree.ElementTree as ET

    html, junit = tmp_path / "live.html", tmp_path / "live.xml"
    proc, url = _start_cli("--idle", "600", "--html", str(html), "--junit", str(junit))
    docs = {"pass": _merged(PASS), "replay": _merged(REPLAY)}
    for doc in docs.values():
        req = urllib.request.Request(url, data=json.dumps(doc).encode(), headers={"Content-Type": "application/json"},
                                     method="POST")
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 200
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert f"wrote {html}" in err and f"wrote {junit}" in err

    both = tmp_path / "both.otlp.jsonl"
    both.write_text("".join(json.dumps(d) + "\n" for d in docs.values()))
    want = tmp_path / "check.xml"
    check = subprocess.run([sys.executable, "-m", "loopspec", "check", str(both), "--junit", str(want)],
                           capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    assert check.returncode == 1, check.stderr

    def cases(path: Path) -> list[tuple[str, str]]:
        root = ET.parse(path).getroot()
        return sorted((c.get("name") or "", next((k.tag for k in c if k.tag in ("failure", "error", "skipped")), "ok"))
                      for c in root.iter("testcase"))

    live = cases(junit)
    assert live == cases(want) and len(live) == len(out.splitlines()) == 2
    assert [k for _, k in live].count("failure") == 1
    xmlschema = pytest.importorskip("xmlschema")
    xmlschema.XMLSchema(str(ROOT / "tests" / "golden" / "junit" / "junit-10.xsd")).validate(str(junit))
    page = html.read_text()
    assert page.startswith("<!DOCTYPE html>") and "loopspec monitor" in page and "R6" in page


def test_one_model_clients_traces_are_held_and_judged_as_one_stitched_run_when_idle(monitor: Any) -> None:
    """Only the openai client instrumented (openai-v2 under pydantic-ai): each model call arrives as a trace of its
    own, closed by its root at once; the monitor holds them with their conversation and judges it once no trace has
    continued it for --idle seconds — the stitched run and the verdict check gives (R6: the repeat re-executed),
    sent as protobuf."""
    from loopspec.oracle import check_file

    path = GOLDEN / "rec-openai-v2-pydantic-ai-replay.otlp.jsonl"
    m = monitor(idle=0.5)
    for doc in _lines(path):
        assert _post(m, _to_protobuf(doc), _otlp.PROTOBUF)[0] == 200
    _wait(lambda: m.traces_judged == 3)
    (live,) = _verdicts(m)
    (want,) = check_file(str(path)).records
    _same_run(live, want.to_json())
    assert live["violation"]["rule"] == "R6" and len(live["summary"]["stitched"]["traces"]) == 3
    assert live["monitor"]["conversation"] == {"traces": live["summary"]["stitched"]["traces"], "judgedBy": "idle"}
    assert m.exit_code == 1
    m.stop()
