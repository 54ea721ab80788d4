"""``loopspec serve`` (the reference implementers copy) fed everything JSON-RPC 2.0 says a server must
survive: each answer is the one the JSON-RPC 2.0 specification requires, and it keeps serving —
a good request after every bad one is answered. Run as a child: exit 0, bounded peak RSS, nothing
left running, every line it writes strict JSON."""

from __future__ import annotations

import json
import os

import pytest

from .runner import assert_sane, run_cli, strict_json

INIT = '{"jsonrpc": "2.0", "id": 100, "method": "initialize", "params": {"protocolVersion": 1}}'
INFO = {"name": "loopspec-reference", "capabilities": {"batch": True, "loop": True}}

#: (what is sent, the answer required: "id", "code" (None: a result), or None when nothing may be sent)
CASES: list[tuple[str, bytes, dict[str, object] | list[dict[str, object]] | None]] = [
    ("not JSON", b"{oops", {"id": None, "code": -32700}),
    ("NaN id", b'{"jsonrpc": "2.0", "id": NaN, "method": "initialize"}', {"id": None, "code": -32700}),
    ("5000-digit integer", b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": '
     + b"9" * 5000 + b"}}", {"id": None, "code": -32700}),
    ("1e400", b'{"jsonrpc": "2.0", "id": 1e400, "method": "initialize"}', {"id": None, "code": -32700}),
    ("invalid UTF-8", b'{"jsonrpc": "2.0", "id": 1, "method": "init\xffialize"}', {"id": None, "code": -32700}),
    ("nested 5000 deep", b'{"jsonrpc": "2.0", "id": 1, "method": "x", "params": ' + b"[" * 5000 + b"]" * 5000 + b"}",
     {"id": None, "code": -32700}),
    ("a line over 16 MiB", b'{"jsonrpc": "2.0", "id": 1, "method": "x", "params": ["' + b"x" * (17 * 1024 * 1024)
     + b'"]}', {"id": None, "code": -32700}),
    ("empty batch", b"[]", {"id": None, "code": -32600}),
    ("batch of non-objects", b"[1, 2]", [{"id": None, "code": -32600}, {"id": None, "code": -32600}]),
    ("batch", b'[' + INIT.encode() + b', {"jsonrpc": "2.0", "method": "note"}, {"jsonrpc": "2.0", "id": 7, '
     b'"method": "nope"}]', [{"id": 100, "code": None}, {"id": 7, "code": -32601}]),
    ("a batch of notifications", b'[{"jsonrpc": "2.0", "method": "a"}, {"jsonrpc": "2.0", "method": "b"}]', None),
    ("a string", b'"hello"', {"id": None, "code": -32600}),
    ("missing jsonrpc", b'{"id": 2, "method": "initialize", "params": {"protocolVersion": 1}}',
     {"id": 2, "code": -32600}),
    ("jsonrpc 1.0", b'{"jsonrpc": "1.0", "id": 3, "method": "initialize"}', {"id": 3, "code": -32600}),
    ("method not a string", b'{"jsonrpc": "2.0", "id": 4, "method": 5}', {"id": 4, "code": -32600}),
    ("id an object", b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "initialize"}', {"id": None, "code": -32600}),
    ("params a string", b'{"jsonrpc": "2.0", "id": 5, "method": "initialize", "params": "x"}',
     {"id": 5, "code": -32600}),
    ("unknown method", b'{"jsonrpc": "2.0", "id": 6, "method": "nope"}', {"id": 6, "code": -32601}),
    ("unknown notification", b'{"jsonrpc": "2.0", "method": "nope"}', None),
    ("protocolVersion 99", b'{"jsonrpc": "2.0", "id": 8, "method": "initialize", "params": {"protocolVersion": 99}}',
     {"id": 8, "code": -32602}),
    ("protocolVersion true", b'{"jsonrpc": "2.0", "id": 9, "method": "initialize", "params": {"protocolVersion": '
     b'true}}', {"id": 9, "code": -32602}),
    ("protocolVersion missing", b'{"jsonrpc": "2.0", "id": 10, "method": "initialize", "params": {}}',
     {"id": 10, "code": -32602}),
    ("batch.run params not an object", b'{"jsonrpc": "2.0", "id": 11, "method": "batch.run", "params": [1]}',
     {"id": 11, "code": -32602}),
    ("a stray response", b'{"jsonrpc": "2.0", "id": 12, "result": 5}', None),
    ("a blank line", b"   ", None),
]


def _serve(lines: list[bytes]) -> tuple[list[object], object]:
    run = run_cli(["serve"], stdin=b"\n".join(lines) + b"\n", wall=120,
                  env=dict(os.environ, LOOPSPEC_JSON_PARSER="orjson"))
    assert_sane(run, exit_code=0, max_rss_mb=200)
    return [strict_json(x) for x in run.stdout.splitlines()], run


def _matches(answer: object, want: dict[str, object]) -> bool:
    if not isinstance(answer, dict) or answer.get("jsonrpc") != "2.0" or answer.get("id") != want["id"]:
        return False
    if want["code"] is None:
        return "result" in answer and "error" not in answer
    err = answer.get("error")
    return isinstance(err, dict) and err.get("code") == want["code"] and isinstance(err.get("message"), str) \
        and "result" not in answer


def _marker(k: int) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 1000 + k, "method": "initialize",
                       "params": {"protocolVersion": 1}}).encode()


@pytest.fixture(scope="module")
def session() -> list[list[object]]:
    """One serve process fed every case, each followed by a good initialize (id 1000 + k): the
    answers between two of those belong to the case."""
    lines: list[bytes] = []
    for k, (_, sent, _) in enumerate(CASES):
        lines += [sent, _marker(k)]
    answers, _ = _serve(lines)
    out: list[list[object]] = []
    cur: list[object] = []
    for a in answers:
        if isinstance(a, dict) and isinstance(a.get("id"), int) and a["id"] >= 1000 and "result" in a:
            assert a["id"] == 1000 + len(out), a  # every marker answered, in order: it kept serving
            assert {k: a["result"][k] for k in INFO} == INFO
            out.append(cur)
            cur = []
        else:
            cur.append(a)
    assert len(out) == len(CASES) and cur == []
    return out


@pytest.mark.parametrize("k", range(len(CASES)), ids=[c[0] for c in CASES])
def test_serve_answers_and_keeps_serving(session: list[list[object]], k: int) -> None:
    name, _, want = CASES[k]
    got = session[k]
    if want is None:
        assert got == [], (name, got)
    elif isinstance(want, list):
        assert len(got) == 1 and isinstance(got[0], list) and len(got[0]) == len(want), (name, got)
        assert all(_matches(a, w) for a, w in zip(got[0], want, strict=True)), (name, got)
    else:
        assert len(got) == 1 and _matches(got[0], want), (name, got)  # type: ignore[arg-type]


def test_a_batch_run_with_a_hostile_harness_in_the_middle() -> None:
    """While serve waits for a tool.execute answer, the harness sends garbage and a request: each gets
    its error answer, then the real answer completes the batch."""
    run_req = {"jsonrpc": "2.0", "id": 1, "method": "batch.run", "params": {
        "tools": [{"name": "a"}], "calls": [{"id": "c1", "name": "a", "arguments": {}}], "budget": 1,
        "mode": "abort", "principal": "p"}}
    lines = [INIT.encode(), json.dumps(run_req).encode(), b"{oops",
             b'{"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {"protocolVersion": 1}}',
             b'{"jsonrpc": "2.0", "id": 99, "result": "not ours"}',
             b'{"jsonrpc": "2.0", "id": 1, "result": {"output": 5}}',
             b'{"jsonrpc": "2.0", "id": 3, "method": "shutdown"}', INIT.encode()]
    answers, run = _serve(lines)
    assert answers[0]["id"] == 100  # type: ignore[index]
    assert answers[1]["method"] == "tool.execute" and answers[1]["params"]["callId"] == "c1"  # type: ignore[index]
    assert answers[2]["error"]["code"] == -32700  # type: ignore[index]
    assert answers[3]["id"] == 2 and answers[3]["error"]["code"] == -32600  # type: ignore[index]
    assert answers[4] == {"jsonrpc": "2.0", "id": 1, "result": {
        "results": [{"id": "c1", "status": "ok", "output": 5}], "executed": 1, "aborted": None}}
    assert answers[5] == {"jsonrpc": "2.0", "id": 3, "result": None}
    assert len(answers) == 6, run  # shutdown ends it: the last initialize is not read


def test_end_of_input_while_waiting_for_the_harness() -> None:
    run_req = {"jsonrpc": "2.0", "id": 1, "method": "batch.run", "params": {
        "tools": [{"name": "a"}], "calls": [{"id": "c1", "name": "a", "arguments": {}}], "budget": 1,
        "mode": "abort", "principal": "p"}}
    answers, _ = _serve([json.dumps(run_req).encode()])
    assert [a["method"] for a in answers] == ["tool.execute"]  # type: ignore[index]
