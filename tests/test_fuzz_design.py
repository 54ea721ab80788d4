"""The fuzzer's design (issue 15): the seeded generator and its prediction, coverage, the canary
search, state leaks, process reuse, --time-budget, --jobs and Dask, the package's layout."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loopspec.cli import main
from loopspec.fuzz import ReferenceExecutor, fuzz
from loopspec.fuzz._adapter import ImplFactory, InProcessImpl
from loopspec.fuzz._campaign import Campaign
from loopspec.fuzz._coverage import REACHABLE, UNREACHABLE
from loopspec.fuzz._generate import Ahead, Generator, matches
from loopspec.fuzz._harness import run_step
from loopspec.fuzz._paths import batch_reference_path, loop_reference_path
from loopspec.judge.trace import judge
from tests.fuzz_helpers import ROOT, example_cmd

FUZZ = ROOT / "src" / "loopspec" / "fuzz"


def run(target: object, out: Path | None = None, **kw: object) -> object:
    factory = ImplFactory(target, timeout=kw.pop("timeout", 10.0))  # type: ignore[arg-type]
    try:
        return Campaign(factory, out=out, **kw).run()  # type: ignore[arg-type]
    finally:
        factory.close()


# --------------------------------------------------------------------------------------------
# The generator: deterministic, predicted exactly, the path read off the prediction is the engine's
# --------------------------------------------------------------------------------------------


def _digest(mode: str, hashseed: str) -> str:
    code = ("import hashlib, json, sys; from loopspec.fuzz._generate import Generator; "
            f"g = Generator({mode!r}, seed=7); h = hashlib.sha256()\n"
            "for i in range(40):\n    h.update(json.dumps([p.step for p in g.example(i)[0]], sort_keys=True).encode())\n"
            "print(h.hexdigest())")
    env = dict(os.environ, PYTHONHASHSEED=hashseed)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("mode", ["batch", "loop"])
def test_same_seed_same_examples_whatever_the_hash_seed(mode: str) -> None:
    assert _digest(mode, "1") == _digest(mode, "2") == _digest(mode, "random")


@pytest.mark.parametrize("mode", ["batch", "loop"])
def test_prediction_path_is_the_engines_and_a_correct_trace_matches_it(mode: str) -> None:
    """The transitions read off the predicted run are the engine's observer path, step by step; the
    reference implementation's trace is exactly the prediction (the fast path), and a changed
    trace is never taken for it."""
    gen = Generator(mode, seed=3)
    impl = InProcessImpl(ReferenceExecutor())
    paths = batch_reference_path if mode == "batch" else loop_reference_path
    n = 0
    for i in range(60):
        for pl in gen.example(i)[0]:
            trace = run_step(impl, pl.step)
            engine = paths(trace)
            assert engine is not None and [t for t, _ in engine] == pl.prediction.transitions, pl.step
            assert matches(trace, pl.prediction)
            result = trace["events"][-1]["result"]
            if result["results"]:
                first = result["results"][0]
                tampered = json.loads(json.dumps(trace))
                r0 = tampered["events"][-1]["result"]["results"][0]
                if first["status"] == "ok":
                    r0["output"] = [r0["output"]]
                else:
                    r0["request_id"] = "x loopspec-canary-1"
                assert not matches(tampered, pl.prediction)
                assert not judge(tampered).ok
                n += 1
    assert n > 50


def test_fast_path_keeps_true_and_1_apart() -> None:
    gen = Generator("batch", seed=5)
    impl = InProcessImpl(ReferenceExecutor())
    for i in range(200):
        for pl in gen.example(i)[0]:
            trace = run_step(impl, pl.step)
            res = trace["events"][-1]["result"]["results"]
            for r in res:
                if r["status"] == "ok" and r["output"] is True:
                    r["output"] = 1
                    assert not matches(trace, pl.prediction) and not judge(trace).ok
                    return
    pytest.fail("no output true in 200 examples")


# --------------------------------------------------------------------------------------------
# Coverage: every transition the protocol can reach, in both modes, and the file diagram draws
# --------------------------------------------------------------------------------------------


def test_reachable_and_unreachable_transitions_name_the_whole_spec() -> None:
    from loopspec.spec.loader import load_spec

    ids = {t.id for t in load_spec().transitions}
    assert set(REACHABLE["batch"]) | set(REACHABLE["loop"]) | set(UNREACHABLE) == ids
    assert not (set(UNREACHABLE) & (set(REACHABLE["batch"]) | set(REACHABLE["loop"])))


@pytest.mark.parametrize("mode", ["batch", "loop"])
def test_default_campaign_reaches_every_reachable_transition_and_diagram_draws_it(
        mode: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o"
    assert main(["fuzz", "--impl", "loopspec.fuzz:ReferenceExecutor", "--mode", mode, "--seed", "1",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    n = len(REACHABLE[mode])
    assert f"coverage: {n} of the {n} spec transitions reachable in {mode} mode were taken (all)" in text
    doc = json.loads((out / "campaign.json").read_text())
    assert doc["coverage"]["missing"] == [] and doc["ok"] is True
    cov = json.loads((out / "coverage.json").read_text())
    assert all(cov["transitions"][t] > 0 for t in REACHABLE[mode])
    assert main(["diagram", "--coverage", str(out / "coverage.json"), "--format", "mermaid",
                 "--out", str(tmp_path / "d")]) == 0
    if mode == "loop":  # the shares of the cross-round features, printed
        line = next(ln for ln in text.splitlines() if ln.startswith("loop examples with:"))
        for feature in ("cross-round replay", "cross-round conflict", "failure then same id again",
                        "limit mid-proposal", "retry (maxRetries)"):
            share = float(line.split(feature + " ")[1].split("%")[0])
            assert share > 0, line


def test_a_short_campaign_says_which_transitions_it_missed(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Coverage is a measurement that can come out short: one example of one step misses most."""
    assert main(["fuzz", "--impl", "loopspec.fuzz:ReferenceExecutor", "--mode", "loop", "--seed", "1",
                 "--max-examples", "1", "--steps", "1", "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "; never: " in text
    assert json.loads((tmp_path / "campaign.json").read_text())["coverage"]["missing"]


# --------------------------------------------------------------------------------------------
# R15: a canary in every injected failure; the judge searches everything shown to the model
# --------------------------------------------------------------------------------------------


class LeakyReference(ReferenceExecutor):
    """The reference engine, except that a failed tool's error message (its canary) is copied into
    the request_id of the error answers the model sees — a field R15 allows, with any text."""

    def handle(self, method: str, params: object, call: object) -> object:
        self.secret = ""

        def spy(m: str, p: object) -> object:
            try:
                return call(m, p)  # type: ignore[operator]
            except Exception as exc:
                self.secret = getattr(exc, "message", "")
                raise

        out = super().handle(method, params, spy)
        if method in ("batch.run", "loop.run") and isinstance(out, dict) and getattr(self, "secret", ""):
            for r in out.get("results", []):
                if r.get("status") == "error":
                    r["request_id"] = f"{r.get('request_id')} ({self.secret})"
        return out


def test_a_canary_copied_into_an_allowed_field_is_R15(tmp_path: Path) -> None:
    r = fuzz(LeakyReference, max_examples=60, seed=2, out=tmp_path)
    assert {f.rule for f in r.findings} == {"R15"}, [(f.rule, f.kind) for f in r.findings]
    f = r.findings[0]
    assert f.kind == "secret-shown-to-model" and f.calls <= 2
    assert "loopspec-canary-" in json.dumps(f.verdict.violation.observed)


@pytest.mark.parametrize("mode", ["batch", "loop"])
def test_leak_request_id_bug_of_the_example_is_caught(mode: str, tmp_path: Path) -> None:
    r = run(example_cmd("leak-request-id"), tmp_path, mode=mode, max_examples=200, seed=4)
    assert "R15" in {f.rule for f in r.findings}, [(f.rule, f.kind) for f in r.findings]
    assert all(f.calls <= 4 and f.reproduced for f in r.findings)


def test_correct_example_never_leaks_a_canary(tmp_path: Path) -> None:
    r = run(example_cmd(), tmp_path, mode="loop", max_examples=100, seed=4)
    assert r.ok and r.stats["executionsObserved"] > 100


# --------------------------------------------------------------------------------------------
# One process reused; state leaking between runs is a finding of its own (R5)
# --------------------------------------------------------------------------------------------


def test_one_process_serves_the_whole_clean_campaign() -> None:
    r = run(example_cmd(), max_examples=100, seed=9)
    assert r.ok and r.stats["examples"] == 100 and r.stats["steps"] == 800
    assert r.stats["processesStarted"] <= 2  # the probe's warm spare, then the one the campaign used
    assert r.stats["judged"] == 0  # every trace was exactly the prediction


def test_state_leaking_between_runs_is_R5_reproduced_with_its_history(tmp_path: Path) -> None:
    r = run(example_cmd("state-leak"), tmp_path, max_examples=100, seed=3)
    f = next(f for f in r.findings if f.rule == "R5")
    assert f.kind == "state-carried-over" and f.reproduced is True and len(f.steps) >= 2
    assert "Symptom" in f.verdict.violation.explanation


# --------------------------------------------------------------------------------------------
# The campaign ends when its work is done; --time-budget; --jobs; Dask
# --------------------------------------------------------------------------------------------


def test_a_buggy_campaign_finishes_its_examples_at_full_speed(tmp_path: Path) -> None:
    r = run(example_cmd("conflict-reuse"), tmp_path, max_examples=150, seed=1)
    assert "R7" in {f.rule for f in r.findings}
    assert r.stats["examples"] == 150 and r.stats["stoppedBy"] is None


def test_time_budget_stops_the_campaign(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    t0 = time.perf_counter()
    assert main(["fuzz", "--impl", example_cmd(), "--max-examples", "1000000", "--time-budget", "1.5",
                 "--out", str(tmp_path), "--seed", "1", "--format", "json"]) == 0
    assert time.perf_counter() - t0 < 30
    doc = json.loads(capsys.readouterr().out)
    assert doc["stats"]["stoppedBy"] == "time-budget" and 0 < doc["stats"]["examples"] < 1000000
    assert doc["parameters"]["timeBudget"] == 1.5


def test_jobs_shard_the_examples_and_merge_the_findings(tmp_path: Path) -> None:
    r = run(example_cmd("conflict-reuse"), tmp_path, max_examples=120, seed=1, jobs=2)
    assert "R7" in {f.rule for f in r.findings}
    assert r.stats["examples"] == 120 and r.stats["jobs"] == 2 and r.stats["processesStarted"] >= 2
    assert json.loads((tmp_path / "campaign.json").read_text())["findings"][0]["rule"] == "R7"


@pytest.mark.slow
def test_dask_local_cluster_runs_the_shards(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cl:
        r = run(example_cmd("replay-reexecutes"), tmp_path, max_examples=80, seed=2, dask=cl.scheduler_address,
                jobs=2)
    assert "R6" in {f.rule for f in r.findings}
    assert r.stats["examples"] == 80


# --------------------------------------------------------------------------------------------
# The package: no import cycles, no Hypothesis on the campaign's path
# --------------------------------------------------------------------------------------------


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            out.add(node.module.split(".")[0])
    return out


def test_the_fuzz_package_has_no_import_cycles() -> None:
    graph = {p.stem: _imports(p) & {q.stem for q in FUZZ.glob("*.py")} for p in FUZZ.glob("*.py")}
    state: dict[str, int] = {}

    def visit(n: str, stack: list[str]) -> None:
        if state.get(n) == 1:
            raise AssertionError(f"import cycle: {' -> '.join([*stack, n])}")
        if state.get(n) == 2:
            return
        state[n] = 1
        for m in sorted(graph.get(n, ())):
            visit(m, [*stack, n])
        state[n] = 2

    for n in graph:
        if n != "__init__":
            visit(n, [])
    assert {"_generate", "_harness", "_reduce", "_campaign", "_report"} <= set(graph)


def test_fuzzing_does_not_import_hypothesis() -> None:
    code = "import sys, loopspec.fuzz, loopspec.cli.fuzz; print('hypothesis' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"


def test_in_process_replay_hint_is_a_command_that_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """module:attr, importable from the current directory (as python -m pytest does)."""
    (tmp_path / "my_executor.py").write_text(
        "from loopspec.fuzz import ReferenceExecutor\n\n"
        "class Bad(ReferenceExecutor):\n"
        "    def batch_run(self, params, execute):\n"
        "        out = super().batch_run(params, execute)\n"
        "        out['executed'] += 1\n"
        "        return out\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "my_executor", raising=False)
    assert main(["fuzz", "--impl", "my_executor:Bad", "--max-examples", "20", "--seed", "1", "--out", "o",
                 "--quiet"]) == 1
    capsys.readouterr()
    text = next((tmp_path / "o").glob("R*.txt")).read_text()
    hint = next(ln for ln in text.splitlines() if ln.startswith("replay:")).split(":", 1)[1].strip()
    assert hint.startswith("loopspec replay ") and "--impl my_executor:Bad" in hint
    import shlex

    argv = shlex.split(hint)[1:]
    assert main(argv) == 1  # the hint runs, and reproduces the divergence


@pytest.mark.slow
@pytest.mark.frameworks
def test_a_framework_campaign_is_the_same_whatever_the_hash_seed(tmp_path: Path) -> None:
    """Same seed, same campaign, with PYTHONHASHSEED 1 and 2: the steps, the executions, the findings."""
    from loopspec.frameworks import installed

    if not installed("openai-agents"):
        pytest.skip("openai-agents not installed")

    def once(hashseed: str) -> tuple:
        out = tmp_path / hashseed
        env = dict(os.environ, PYTHONHASHSEED=hashseed)
        proc = subprocess.run([sys.executable, "-m", "loopspec", "fuzz", "--impl", "openai-agents", "--max-examples",
                               "6", "--seed", "5", "--shrink-time", "900", "--out", str(out), "--format", "json"], env=env,
                              capture_output=True, text=True, timeout=900)
        doc = json.loads(proc.stdout)
        # --shrink-time ends exploration that long after the first finding, so a short one makes the number
        # of examples explored depend on how fast the reductions ran (CI saw 1 step at --shrink-time 2 with
        # one hash seed and 3 with the other; a clean clone's run at load 8 saw 12 steps against 13 at
        # --shrink-time 60, where the reductions take 9 s on a free core). At 900 s all 6 examples always run
        # (about 15 s). The reductions are bounded in time, so the cases' sizes are not compared.
        assert doc["stats"]["shrinkTimeSpent"] is False and doc["stats"]["examples"] == 6, doc["stats"]
        return (doc["stats"]["steps"], doc["stats"]["executionsObserved"],
                sorted((f["rule"], f["kind"]) for f in doc["findings"]))

    first = once("1")
    assert first[0] > 0 and first[2]  # it ran, and found the SDK's known deviations from the strict spec
    assert once("2") == first


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the generator helper is forked")
def test_the_generator_helper_ends_when_its_campaign_is_gone() -> None:
    """The forked helper holds only the write end of its pipe: when the campaign dies without close()
    (SIGKILL, a benchmark's kill at its timeout), the helper's next write fails and it exits. It used to
    keep the read end open too and block on the full pipe for ever (observed: an orphan helper left by
    benchmarks/fuzz_ttc.py, blocked in anon_pipe_write)."""
    import signal

    ahead = Ahead(Generator("batch", seed=1), range(100_000))
    ahead.fh.close()  # the campaign's read end is gone, as when its process is killed
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        pid, _ = os.waitpid(ahead.pid, os.WNOHANG)
        if pid:
            return
        time.sleep(0.05)
    os.kill(ahead.pid, signal.SIGKILL)
    os.waitpid(ahead.pid, 0)
    pytest.fail("the generator helper outlived its campaign")


def test_a_loop_campaign_runs_its_opening_focused_examples_whatever_the_shrink_time(tmp_path: Path) -> None:
    """The focused examples that open a loop campaign (one per FOCUS feature) run even after the shrink time has
    passed, so which features a campaign meets does not depend on how loaded the machine is: with no shrink time
    at all, a divergence met in the opening still lets the rest of the opening run, and nothing after it."""
    from loopspec.fuzz._generate import FOCUS

    r = run(example_cmd("rounds-off-by-one"), tmp_path, mode="loop", max_examples=60, seed=3, shrink_seconds=0.0)
    assert r.findings and r.stats["stoppedBy"] == "shrink-time"
    assert r.stats["examples"] == len(FOCUS), r.stats
    # the swarm examples after the opening are not exempt: a divergence there stops the campaign at once
    g = Generator("loop", seed=3)
    assert [g.opens(i) for i in range(len(FOCUS) + 2)] == [True] * len(FOCUS) + [False, False]
