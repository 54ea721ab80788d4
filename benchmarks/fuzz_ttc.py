#!/usr/bin/env python3
"""Time to a counterexample, per bug: ``loopspec fuzz`` (default options) beside a naive random
differential driver written here (the anchor to beat), measured in the same run.

For every ``--bug`` of examples/python/executor.py (batch bugs in batch mode, loop bugs in loop mode; the
concurrent races ``conc-*`` with ``--concurrent``, where the fuzzer runs concurrent steps and chooses the
completion order, protocol v1.1 — the naive driver is sequential and cannot release answers out of order;
the write-tool variants of spec/writes.toml (``key-by-call-id``, ``retry-without-lookup``,
``record-after-dispatch``, ``timeout-as-failure`` and ``failed-before-lookup``, a recovery that is not
crash-safe; the Java example's too, as ``java:NAME``) in writes mode, protocol v1.2, where the harness plays
the external system, loses answers and restarts the implementation, at a send or at a lookup — the naive
driver then draws writes steps uniformly at random, 0-2 of the first 4 lookups cut, and judges them with the
same judge):

* **ours**: ``loopspec fuzz --impl "python executor.py --bug B" --seed S`` as a child process; the time
  from its start to the first reduced case (``"provisional": false``) on disk, the rule and the
  number of calls in that case, and the whole command's time;
* **naive**: :func:`naive_driver` below — about 100 lines: seeded ``random``, batches of up to 6 calls
  with ids from a pool of 3 (loop mode: up to 3 rounds of them; writes mode: up to 6 payments of 3 orders
  with a uniformly random environment script), each run against the implementation
  and against loopspec's reference engine with the same tool outcomes; no Hypothesis, no shrinking
  beyond keeping the smallest failing case. The time from its start to its first case on disk, and
  the calls in the smallest case it kept.

    python3 benchmarks/fuzz_ttc.py [--bugs a,b,...] [--seed S] [--naive-examples N] [-x] [--json]

``-x`` runs ours with ``loopspec fuzz -x`` (stop at the first reduced case, as ``pytest -x``): the command's
wall time is then the time to a reported case, printed beside the naive driver's time to its first case.
``java:text-tools`` (in the default list when javac is on PATH) is the executor of docs/adapters.md,
examples/java/wrapped/, fuzzed with ``--tools text-tools.json``; the naive driver then draws its calls over the
same two declared tools.

Prints a table and the medians; nothing is asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
EXAMPLE = ROOT / "examples" / "python" / "executor.py"
sys.path.insert(0, str(EXAMPLE.parent))

import executor as example  # noqa: E402  (the example's BUGS table)

LOOP_BUGS = ("rounds-off-by-one", "shows-all-results", "coverage-lies", "retry-extra", "tool-budget-ignored",
             "error-result-throws", "requests-skip-replays")
#: The children's environment: bytecode may be cached (as it is for an installed package), hashing fixed.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"PYTHONHASHSEED": "0"}
SKIP = ("hang",)  # a hang costs the per-request timeout by definition (10 s by default)
#: examples/java/LoopspecExecutor.java: three batch bugs and the write tools' five, the Python example's twins
#: (section 6, --mode writes; failed-before-lookup is a crash at a recovery's lookup, PROTOCOL.md W3)
JAVA_BUGS = ("replay-reexecutes", "conflict-reuse", "budget-after", *example.WRITE_BUGS)


def java_build() -> list[str] | None:
    """The Java example, compiled into a temporary directory (None without javac)."""
    import shutil

    if shutil.which("javac") is None or shutil.which("java") is None:
        return None
    build = Path(tempfile.mkdtemp(prefix="loopspec-java-"))
    done = subprocess.run(["javac", "--release", "17", "-d", str(build), str(ROOT / "examples" / "java" /
                                                                             "LoopspecExecutor.java")],
                          capture_output=True, timeout=300)
    if done.returncode != 0:
        return None
    return ["java", "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-cp", str(build), "LoopspecExecutor"]


def text_tools_build() -> list[str] | None:
    """examples/java/wrapped (TextTools and its adapter), compiled into a temporary directory."""
    import shutil

    if shutil.which("javac") is None:
        return None
    build = Path(tempfile.mkdtemp(prefix="loopspec-tt-"))
    sources = sorted(str(p) for p in (ROOT / "examples" / "java" / "wrapped").glob("*.java"))
    if subprocess.run(["javac", "--release", "17", "-d", str(build), *sources], capture_output=True,
                      timeout=300).returncode != 0:
        return None
    return ["java", "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-cp", str(build), "TextToolsAdapter"]


def watch(cmd: list[str], out: Path, timeout: float) -> dict[str, Any]:
    """Run ``cmd``; the time until a non-provisional case file appears in ``out``."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=out.parent, env=ENV)
    first: float | None = None
    while proc.poll() is None and time.perf_counter() - t0 < timeout:
        if first is None:
            for p in out.glob("*.json"):
                if p.name[:1] in "PR" and not p.name.endswith(".path.json"):
                    try:
                        doc = json.loads(p.read_text())
                    except (OSError, ValueError):
                        continue
                    if doc.get("provisional") is False:
                        first = time.perf_counter() - t0
                        break
        time.sleep(0.01)
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    total = time.perf_counter() - t0
    cases = []
    try:
        summary = json.loads((out / "campaign.json").read_text())
        cases = [(f["rule"], f["calls"]) for f in summary["findings"]]
    except (OSError, ValueError, KeyError):
        pass
    return {"first": first, "total": total, "cases": cases}


# --------------------------------------------------------------------------------------------
# The naive random differential driver (the anchor)
# --------------------------------------------------------------------------------------------


def naive_driver(cmd: list[str], mode: str, seed: int, examples: int, out: Path,
                 declared: str | None = None) -> dict[str, Any]:
    from loopspec.fuzz._adapter import ImplFactory
    from loopspec.fuzz._harness import run_step
    from loopspec.fuzz._writes_harness import run_writes_step
    from loopspec.judge.trace import judge

    t0 = time.perf_counter()
    rng = random.Random(seed)
    crashes = random.Random(f"crashes:{seed}")  # its own stream: the other draws are what they were before it
    tools = [{"name": "lookup", "inputSchema": {"type": "object", "properties": {"q": {"type": "string"},
                                                                                "principal": {"type": "string"}}}},
             {"name": "write", "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}},
                                               "required": ["n"], "additionalProperties": False}}]
    args_pool = [{"q": "a"}, {"q": "b"}, {"n": 1}, {"n": 1.0}, {"n": True}, {}, {"q": "a", "principal": "mallory"},
                 {"n": 2, "x": 1}]

    names = ["lookup", "write", "write", "shell"]
    if declared is not None:  # the executor's own registry (--tools): the same tools, an unknown name beside
        tools = json.loads(Path(declared).read_text())["tools"]
        names = [t["name"] for t in tools] + ["shell"]
        args_pool = [{"text": "a"}, {"text": "Java"}, {"text": ""}, {}, {"text": 1}, {"text": "a", "x": 1}]

    def call() -> Any:
        roll = rng.random()
        if roll < 0.05:
            return {"name": "lookup", "arguments": {}}  # no id
        name = rng.choice(names)
        return {"id": rng.choice(["c1", "c2", "c3"]), "name": name, "arguments": dict(rng.choice(args_pool))}

    def script() -> list[dict[str, Any]]:
        return [{"fail": rng.choice(["DEPENDENCY_TEMPORARY", "INTERNAL_ERROR"])} if rng.random() < 0.3
                else {"value": rng.choice(["ok", 1, {"a": 1}])} for _ in range(rng.randint(0, 4))]

    def writes_step() -> dict[str, Any]:
        from loopspec.fuzz._writes_gen import writes_tools

        n = rng.randint(1, 6)
        env = [{"value": 1}, {"fail": "INTERNAL_ERROR"}, {"lose": "applied"}, {"lose": "not-applied"},
               {"restart": "applied"}, {"restart": "not-applied"}]
        return {"kind": "writes", "config": {"tools": writes_tools({"pay": rng.choice(["record", "lookup", "none"])}),
                                             "budget": rng.randint(1, 8), "principal": "alice"},
                "calls": [{"id": f"c{k + 1}", "name": "pay", "arguments": {"order": rng.choice("ABC"), "amount": 5}}
                          for k in range(n)],
                "script": [dict(rng.choice(env)) for _ in range(rng.randint(0, n + 2))], "outages": [],
                "crashes": sorted(crashes.sample(range(1, 5), crashes.randint(0, 2)))}

    def step() -> dict[str, Any]:
        if mode == "writes":
            return writes_step()
        cfg = {"tools": tools, "mode": rng.choice(["abort", "continue"]), "principal": "alice"}
        if mode == "batch":
            return {"kind": "batch", "config": {**cfg, "budget": rng.randint(0, 4)},
                    "calls": [call() for _ in range(rng.randint(1, 6))], "script": script()}
        limits = {"maxRounds": rng.choice([None, 1, 2]), "maxExecutions": rng.choice([None, 1, 2, 3]),
                  "maxToolExecutions": rng.choice([None, 1]), "maxRequests": rng.choice([None, 2, 3]),
                  "maxRetries": rng.choice([0, 1]), "deadline": None}
        model = [{"calls": [call() for _ in range(rng.randint(1, 3))]} for _ in range(rng.randint(1, 3))]
        return {"kind": "loop", "config": {**cfg, "limits": limits, "onLimit": rng.choice(["throw", "error-result"])},
                "model": model, "script": script()}

    factory = ImplFactory(cmd, timeout=10.0, warm=False)
    impl = factory.open(mode)
    best: tuple[int, dict[str, Any]] | None = None
    first = None
    try:
        for _ in range(examples):
            st = step()
            if mode == "writes":
                trace, after = run_writes_step(impl, st, lambda: factory.open(mode), factory.release)
                impl = after if after is not None else factory.open(mode)
            else:
                trace = run_step(impl, st)  # the reference is the judge's: same outcomes, strict spec
            if trace["events"][-1].get("type") != "response":
                factory.release(impl)
                impl = factory.open(mode)
            v = judge(trace)
            if not v.ok:
                n = len(st.get("calls", [])) if mode != "loop" else sum(len(m["calls"]) for m in st["model"])
                if best is None or n < best[0]:
                    best = (n, st)
                    tmp = out / "case.json.tmp"
                    tmp.write_text(json.dumps({"rule": v.violation.rule, "calls": n, "step": st}))
                    tmp.replace(out / "case.json")
                    if first is None:
                        first = time.perf_counter() - t0
    finally:
        factory.release(impl)
        factory.close()
    return {"first": first, "total": time.perf_counter() - t0, "calls": best[0] if best else None}


def watch_naive(cmd: list[str], out: Path, timeout: float) -> dict[str, Any]:
    """Run the naive driver as a child (its interpreter start and imports count, as ours do)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=ENV)
    first = None
    while proc.poll() is None and time.perf_counter() - t0 < timeout:
        if first is None and (out / "case.json").exists():
            first = time.perf_counter() - t0
        time.sleep(0.01)
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    total = time.perf_counter() - t0
    calls = None
    with contextlib.suppress(OSError, ValueError, KeyError):
        calls = json.loads((out / "case.json").read_text())["calls"]
    return {"first": first, "total": total, "calls": calls}


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--naive-child":
        cmd, mode, seed, examples, out, declared = json.loads(sys.argv[2])
        naive_driver(cmd, mode, seed, examples, Path(out), declared)
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bugs", help="comma-separated bugs, java:NAME for the Java executor's (default: all but hang)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--naive-examples", type=int, default=1000, help="batches/runs the naive driver tries")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-java", action="store_true", help="leave out the Java executor's bugs")
    ap.add_argument("-x", "--exitfirst", action="store_true",
                    help="run ours with loopspec fuzz -x: its command's wall time is the time to a reported case")
    args = ap.parse_args()
    bugs = args.bugs.split(",") if args.bugs else [b for b in sorted(example.BUGS) if b not in SKIP]
    wants_java = any(b.startswith("java:") for b in bugs) or (args.bugs is None and not args.no_java)
    java = java_build() if wants_java else None
    if java is None and any(b.startswith("java:") for b in bugs):
        raise SystemExit("fuzz_ttc: the java: bugs need javac and java on PATH")
    if java is not None and args.bugs is None:
        bugs += [f"java:{b}" for b in JAVA_BUGS] + ["java:text-tools"]
    wrapped = text_tools_build() if "java:text-tools" in bugs else None
    # warm up: the interpreter's bytecode cache for loopspec and the example (a user's installed copy has it)
    subprocess.run([sys.executable, "-m", "loopspec", "fuzz", "--impl", f"{sys.executable} {EXAMPLE}",
                    "--max-examples", "2", "--out", tempfile.mkdtemp(), "--quiet"], env=ENV, capture_output=True)
    rows = []
    for bug in bugs:
        name = bug.split(":", 1)[-1]  # a java: bug has the Python example's name for the same defect
        mode = "loop" if name in LOOP_BUGS else "writes" if name in example.WRITE_BUGS else "batch"
        declared = None
        if bug == "java:text-tools":
            assert wrapped is not None
            cmd, declared = wrapped, str(ROOT / "examples" / "java" / "wrapped" / "text-tools.json")
        elif bug.startswith("java:"):
            assert java is not None
            cmd = [*java, "--bug", bug.split(":", 1)[1]]
        else:
            cmd = [sys.executable, str(EXAMPLE), "--bug", bug]
            if bug in example.CONCURRENT_BUGS:  # the races of section 5: the executor's concurrent mode
                cmd.append("--concurrent")
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "out"
            import shlex

            ours = watch([sys.executable, "-m", "loopspec", "fuzz", "--impl", shlex.join(cmd), "--mode", mode,
                          "--seed", str(args.seed), "--out", str(out), "--quiet"]
                         + (["--tools", declared] if declared else []) + (["-x"] if args.exitfirst else []),
                         out, args.timeout)
            naive_out = Path(tmp) / "naive"
            naive_out.mkdir()
            naive = watch_naive([sys.executable, __file__, "--naive-child", json.dumps(
                [cmd, mode, args.seed, args.naive_examples, str(naive_out), declared])], naive_out, args.timeout)
        rows.append({"bug": bug, "mode": mode, "ours": ours, "naive": naive})
        o, n = ours, naive
        cases = ", ".join(f"{r} {c}" for r, c in o["cases"]) or "none"
        print(f"{bug:<26} {mode:<6} ours {fmt(o['first'])} to a reduced case (cases: {cases}; command "
              f"{o['total']:.1f} s) | naive {fmt(n['first'])} to its first case ({n['calls']} calls kept)",
              flush=True)
    ours_t = [r["ours"]["first"] for r in rows]
    naive_t = [r["naive"]["first"] for r in rows]
    found = [t for t in ours_t if t is not None]
    nfound = [t for t in naive_t if t is not None]
    print(f"\nours: caught {len(found)}/{len(rows)}; median {fmt(statistics.median(found) if found else None)}, "
          f"worst {fmt(max(found) if found else None)}; largest case "
          f"{max((c for r in rows for _, c in r['ours']['cases']), default=0)} calls")
    if args.exitfirst:
        walls = [r["ours"]["total"] for r in rows if r["ours"]["first"] is not None]
        print(f"ours -x: the command reported its case and exited in a median {fmt(statistics.median(walls) if walls else None)}"
              f" wall, worst {fmt(max(walls) if walls else None)}")
    print(f"naive: caught {len(nfound)}/{len(rows)}; median {fmt(statistics.median(nfound) if nfound else None)}, "
          f"worst {fmt(max(nfound) if nfound else None)}")
    if args.json:
        print(json.dumps(rows, indent=2))
    return 0


def fmt(t: float | None) -> str:
    return "  never" if t is None else f"{t:5.2f} s"


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
