"""``check --jobs N`` on one ledger file: the file is split across processes by run and the report is the
one a single process writes (records, their order, errors, summary)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from loopspec.oracle import iter_check_file
from loopspec.oracle._options import Options
from loopspec.oracle._read.lines import route_key, run_owner
from loopspec.oracle._records import InputError, Summary
from loopspec.oracle._split import check_split, is_ledger
from tests.oracle_golden import GOLDEN

LEDGERS = sorted(p.name for p in GOLDEN.glob("ledger-*.ndjson"))


def _report(items: list[Any], summary: Summary) -> tuple[list[Any], dict[str, Any]]:
    return [x.to_json() for x in items], summary.to_json()


def both(path: Path, jobs: int, opts: Options | None = None, info: dict[str, Any] | None = None) -> None:
    opts = opts or Options()
    s = Summary()
    many = list(check_split(str(path), jobs, options=opts, summary=s, info=info))
    s1 = Summary()
    single = list(iter_check_file(str(path), options=opts, summary=s1))
    assert _report(many, s) == _report(single, s1)


def test_all_golden_ledgers_in_one_file(tmp_path: Path) -> None:
    """Every golden ledger (conforming runs, each must-fail mutation, bad lines, a run without its end) in
    one file, split two, three and four ways."""
    p = tmp_path / "all.ndjson"
    p.write_bytes(b"".join((GOLDEN / n).read_bytes().replace(b'"run":"', b'"run":"' + n.encode()[:12] + b"-")
                           for n in LEDGERS))
    for jobs in (2, 3, 4):
        both(p, jobs)
    both(p, 2, Options(allow_incomplete=True))


def test_a_line_that_misleads_the_scan_falls_back_to_one_process(tmp_path: Path) -> None:
    """A nested "run" before the top-level key: the scan routes the line elsewhere than its run; the
    workers notice and the file is checked again in one process (same report)."""
    lines = (GOLDEN / "ledger-pass.ndjson").read_text().splitlines()
    ev = json.loads(lines[3])
    decoy = next(f"elsewhere-{k}" for k in range(100) if run_owner(f"elsewhere-{k}", 2) != run_owner(ev["run"], 2))
    tricky = {"note": {"run": decoy}, **ev}
    assert route_key(json.dumps(tricky).encode()) == decoy.encode()
    lines[3] = json.dumps(tricky)
    p = tmp_path / "tricky.ndjson"
    p.write_text("\n".join(lines) + "\n")
    info: dict[str, Any] = {}
    both(p, 2, info=info)
    assert info == {"fallback": "line 4: the scan misread the run id"}
    info = {}
    both(GOLDEN / "ledger-pass.ndjson", 2, info=info)
    assert list(info) == ["workerCpuSeconds"] and len(info["workerCpuSeconds"]) == 2


def test_route_keys() -> None:
    assert route_key(b'{"v":1,"run":"a\\u0062","seq":1}') == b"ab"
    assert route_key(b'{"seq":1, "run" : "xy"}') == b"xy"
    assert route_key(b"[1,2]") == b""


def test_only_ledgers_are_split(tmp_path: Path) -> None:
    assert is_ledger(str(GOLDEN / "ledger-pass.ndjson"))
    assert not is_ledger(str(GOLDEN / "chat-pass.json"))
    assert not is_ledger(str(GOLDEN / "rec-pydantic-ai-pass.otlp.jsonl"))
    assert not is_ledger(str(tmp_path / "missing.ndjson"))


def test_cli_jobs_on_one_file(tmp_path: Path) -> None:
    import subprocess
    import sys

    p = GOLDEN / "ledger-mixed.ndjson"
    a = subprocess.run([sys.executable, "-m", "loopspec", "check", str(p), "--format", "json"], capture_output=True,
                       text=True, timeout=120)
    b = subprocess.run([sys.executable, "-m", "loopspec", "check", str(p), "--format", "json", "--jobs", "2"],
                       capture_output=True, text=True, timeout=120)
    assert a.returncode == b.returncode == 1 and a.stdout == b.stdout and a.stderr == b.stderr


def test_errors_are_counted_once(tmp_path: Path) -> None:
    s = Summary()
    items = list(check_split(str(GOLDEN / "ledger-bad-input.ndjson"), 3, summary=s))
    assert s.input_errors == sum(isinstance(x, InputError) for x in items) > 0
