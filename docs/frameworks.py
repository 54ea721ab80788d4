#!/usr/bin/env python3
"""Regenerate docs/frameworks.md: fuzz each installed framework under its profile, in batch and loop
mode, with a fixed seed, and collect the conformance reports.

    .venv/bin/python docs/frameworks.py                # every framework, 60 examples per campaign
    .venv/bin/python docs/frameworks.py --examples 200 langgraph
    .venv/bin/python docs/frameworks.py --add ai-sdk mastra   # run these, merge them into the page as it is

Each campaign runs `loopspec fuzz --impl NAME --profile NAME --mode MODE --report ...` (which adds a
strict campaign for the design choices); then, for the settings matrix, one strict campaign per other
value of each setting the adapter declares (`--impl 'NAME[setting=value]'`, --matrix-examples each).
The raw reports and cases stay in build/frameworks/. The page opens with the scorecard (framework x rule,
one mark each, every framework on the page side by side, read from the per-rule tables of its campaigns), then
the risk view (the strict divergences ranked by consequence), the settings matrix and the profile conformance.

`--add NAME...` runs only the named frameworks' campaigns and merges them into the page as it is: their
sections, summary and matrix rows and risk entries replace theirs (or are added), and the scorecard is
regenerated from every framework's per-rule table (a framework whose environment is missing here, e.g.
Google ADK without .venv-adk, keeps what its last campaigns found).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: A framework campaign depends on string hashing somewhere (the framework or its adapter; not located),
#: so the same seed finds the same rules only under one string-hash seed (measured: two runs of the openai-agents loop
#: campaign named different design choices under random hashing, the same ones under a fixed seed).
ENV = {**os.environ, "PYTHONHASHSEED": "0"}
sys.path.insert(0, str(ROOT / "src"))

from loopspec.frameworks import FRAMEWORKS, NODE, PACKAGES, framework_version, installed, resolve  # noqa: E402
from loopspec.frameworks._risks import CONSEQUENCES, rank_risks  # noqa: E402
from loopspec.support.text import write_atomic  # noqa: E402

#: --from-build: assemble the page from the reports a previous run left in build/frameworks/ (no campaign)
REUSE = False
#: the campaigns (their build/frameworks/ directories) whose reports were reused, and those that ran
REUSED: list[str] = []
REUSED_DATES: set[str] = set()  # the dates the reused reports carry
FRESH: list[str] = []


def campaign(impl: str, mode: str, out: Path, examples: int, seed: int, shrink: float,
             profile: str | None) -> tuple[dict, float]:
    """One `loopspec fuzz` run with a report: (the report's JSON, seconds)."""
    report = out / "report.md"
    if REUSE and report.with_suffix(".json").is_file():
        REUSED.append(out.name)
        data = json.loads(report.with_suffix(".json").read_text(encoding="utf-8"))
        REUSED_DATES.add(str(data.get("date")))
        return data, sum((data.get(k) or {}).get("seconds", 0.0) for k in ("stats", "strictStats"))
    FRESH.append(out.name)
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "loopspec", "fuzz", "--impl", impl, "--mode", mode, "--max-examples", str(examples),
           "--seed", str(seed), "--shrink-time", str(shrink), "--out", str(out), "--report", str(report), "--quiet"]
    if profile is not None:
        cmd += ["--profile", profile]
    subprocess.run(cmd, check=False, cwd=ROOT, env=ENV)
    if not report.is_file():
        raise SystemExit(f"{impl} {mode}: no report")
    return json.loads(report.with_suffix(".json").read_text(encoding="utf-8")), time.perf_counter() - t0


#: settings that only act between model requests: the settings matrix varies them in loop mode only
LOOP_ONLY = {"recursion_limit", "max_iterations", "early_stopping_method", "reflect_on_tool_use", "tool_use_behavior"}


def probes(names: list[str], out: Path) -> dict[str, list[dict]]:
    """Run every probe (loopspec.frameworks._probes) on each framework, judged like a strict campaign's finding:
    framework -> the report entries (rule, kind, status, explanation, case) of the probes that diverge."""
    from loopspec.frameworks._probes import PROBES
    from loopspec.fuzz._adapter import ImplFactory, InProcessImpl
    from loopspec.fuzz._harness import run_step
    from loopspec.fuzz._model import CampaignResult, Finding
    from loopspec.fuzz._report import report_data
    from loopspec.judge.trace import judge

    out.mkdir(parents=True, exist_ok=True)
    stats = {"examples": 0, "steps": 0, "executionsObserved": 0, "seconds": 0.0}
    found_by: dict[str, list[dict]] = {}
    for name in names:
        rules: dict[tuple[str, str], dict] = {}
        target = resolve(name)
        factory = None
        if isinstance(target, str):  # a framework in its own environment: one adapter process for its probes
            factory = ImplFactory(target, timeout=30.0, warm=False)
            process = factory.open("loop")
        for pid, (_what, step) in PROBES.items():
            step = target.normalize_step(step) if factory is not None else target().normalize_step(step)
            trace = run_step(process if factory is not None else InProcessImpl(target()), step)
            v = judge(trace)
            if v.ok or v.violation is None or (v.violation.rule, v.violation.kind) in rules:
                continue
            f = Finding(v, [step], [trace], shrunk=True)
            case = out / f"{name}-{pid}.json"
            case.write_text(json.dumps(f.case_json({"impl": name, "seed": None, "probe": pid}), indent=1) + "\n",
                            encoding="utf-8")
            data = report_data(impl=name, info={}, mode="loop", profile=name, out=None,
                               result=CampaignResult(findings=[], seed=0, stats=stats, files=[]),
                               strict=CampaignResult(findings=[f], seed=0, stats=stats, files=[]))
            entry = next(r for r in data["rules"] if r["rule"] == v.violation.rule)
            rules[(v.violation.rule, v.violation.kind)] = {**entry, "case": str(case)}
        if factory is not None:
            factory.release(process)
            factory.close()
        found_by[name] = list(rules.values())
        print(f"probes {name}: {sorted(rules)}", file=sys.stderr)
    return found_by


#: the per-rule statuses of a report that are divergences (the others: conforms, not-exercised)
DIVERGES = ("design-choice", "deviates")


def found(data: dict) -> set[str]:
    return {r["rule"] for r in data["rules"] if r["status"] in DIVERGES}


def rel(path: str | None) -> str | None:
    """A path of the page, relative to the checkout (a reused report may name another checkout's build/)."""
    return _BUILD.sub("build/frameworks/", path.replace(str(ROOT) + "/", "")) if path else path


_BUILD = re.compile(r"(?<![\w./-])/\S*?/build/frameworks/")


#: the scorecard's marks: a per-rule result of the page -> its mark (the worst over the framework's modes)
MARKS = (("deviates", "✗"), ("design choice", "≈"), ("conforms", "✓"), ("not exercised", "·"))
_SECTION = re.compile(r"^## (\S+) (\S+) — (batch|loop) mode$", re.M)
_RULE_ROW = re.compile(r"^\| (R\d+) \| ([^|]*) \| (.*) \|$", re.M)
SCORE_BEGIN = "<!-- scorecard: generated by docs/frameworks.py from the per-rule tables below -->"
SCORE_END = "<!-- end of scorecard -->"


def scorecard(page: str) -> str:
    """Framework x rule, one mark each: ✗ when a campaign (batch or loop) of the framework deviates from its
    profile on the rule, else ≈ when its profile's documented choice explains a strict divergence, else ✓; read
    from the "Per rule" tables of the page's sections (one per framework and mode)."""
    order = [n for n in (*FRAMEWORKS, *NODE)]
    marks: dict[tuple[str, str], str] = {}
    titles: dict[str, str] = {}
    heads = list(_SECTION.finditer(page))
    for k, m in enumerate(heads):
        name = m.group(1)
        body = page[m.end():heads[k + 1].start() if k + 1 < len(heads) else len(page)]
        for row in _RULE_ROW.finditer(body):
            rule, title, result = row.group(1), row.group(2).strip(), row.group(3).replace("*", "").strip()
            titles[rule] = title
            mark = next((mk for word, mk in MARKS if result.startswith(word)), "?")
            old = marks.get((name, rule))
            rank = [mk for _, mk in MARKS]
            if old is None or rank.index(mark) < rank.index(old):
                marks[(name, rule)] = mark
    names = [n for n in order if any(fw == n for fw, _ in marks)]
    rules = sorted(titles, key=lambda r: int(r[1:]))
    lines = [SCORE_BEGIN, "", "## Scorecard", "",
             "One mark per framework and rule, its batch and loop campaigns together, judged under the framework's "
             "profile: **✗** deviates (something its profile does not allow, or only an `observed` choice explains), "
             "**≈** a design choice (a strict divergence its documented or source-graded profile explains), **✓** "
             "conforms (no campaign found a divergence), **·** not exercised (no campaign met its preconditions: "
             "e.g. the concurrency rules for an adapter without the `concurrency` capability). The sections below "
             "say what each mark stands for.", "",
             "| rule | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for r in rules:
        lines.append(f"| {r} {titles[r]} | " + " | ".join(marks.get((n, r), "–") for n in names) + " |")
    lines += ["", "| deviations | " + " | ".join(str(sum(marks.get((n, r)) == "✗" for r in rules)) for n in names)
              + " |", "", SCORE_END]
    return "\n".join(lines)


def with_scorecard(page: str) -> str:
    """The page with its scorecard (re)generated, after the opening paragraph."""
    card = scorecard(page)
    if SCORE_BEGIN in page:
        a, b = page.index(SCORE_BEGIN), page.index(SCORE_END) + len(SCORE_END)
        return page[:a] + card + page[b:]
    first = page.index("\n\n", page.index("Generated on")) + 2  # after the generation paragraph
    return page[:first] + card + "\n\n" + page[first:]


#: The TypeScript note on the last allowed round (issue 29: "a call executed in the last allowed step and never
#: answered"): which frameworks give their caller those results, with the quoted lines of the pinned versions.
LAST_ROUND = (
    " At the step limit (R19) the spec answers the last allowed round: its calls run and their answers are in the "
    "outcome, though no model request shows them. Each framework checks its limit before the next model request, "
    "after the last step's tools ran, so all four execute the calls of their last allowed step; they differ in "
    "whether their caller receives the results. The AI SDK's `generate` returns them in `responseMessages` "
    "(documented, `ai/docs/03-ai-sdk-core/15-tools-and-tool-calling.mdx`: “The `responseMessages` property contains "
    "the accumulated response messages from the call as an array of `ModelMessage` objects that you can add to your "
    "conversation history”; `ai/dist/index-D1zb0Eh5.d.ts`: “Response messages can be either assistant messages or "
    "tool messages.”). Mastra's `generate` result holds them in its response messages (observed; its output's "
    "`toolResults`, `@mastra/core/dist/stream/base/output.d.ts`: “Resolves to array of all tool execution "
    "results.”). OpenAI Agents JS throws before the next model request "
    "(`@openai/agents-core/dist/runner/turnPreparation.mjs`: ``throw new MaxTurnsExceededError(`Max turns "
    "(${state._maxTurns}) exceeded`, state);``) and the error carries the run state, whose public `history` holds "
    "the turn's results (`dist/runState.mjs`: “The history of the agent run. This includes the input items and the "
    "new items generated during the run.”). So these three answer the last round as the spec does (conforms: "
    "tests/test_frameworks_typescript.py, `test_the_calls_of_the_last_allowed_round`): what no model was shown is "
    "still answered to the caller. LangGraph JS (createReactAgent v1 and v2, createAgent) raises once the tools "
    "node of the last round has run (`@langchain/langgraph/dist/pregel/index.js`: "
    "`if (loop.status === \"out_of_steps\") throw new GraphRecursionError([`) and `invoke`'s caller receives only "
    "that error: the agents have no checkpointer by default, and neither stops the last round's calls (Python's "
    "create_react_agent answers them with its fixed text instead; createAgent does so only with a "
    "`remainingSteps` state field, `langchain/dist/agents/nodes/AgentNode.js`: `const remainingSteps = "
    "\"remainingSteps\" in state ? state.remainingSteps : void 0;`). Those calls ran and are never answered: "
    "R11 `last-round-unanswered`, a deviation no profile choice explains."
)


#: The TypeScript note on Mastra's own traces (issue 29), recorded with the pinned @mastra/otel-exporter 1.4.0 and
#: @mastra/observability 1.17.9 (tests/golden/oracle/RECORDINGS.json).
MASTRA_TRACES = (
    " Mastra's own traces are in the oracle's golden corpus (`tests/golden/oracle/rec-mastra-*`, recorded by "
    "`src/loopspec/frameworks/js/src/mastra_telemetry.ts` with @mastra/observability 1.17.9 through "
    "@mastra/otel-exporter 1.4.0, both pinned in package.json, given the OpenTelemetry SDK's InMemorySpanExporter "
    "and serialized by the JsonTraceSerializer the AI SDK recorder uses). Its GenAI-named spans (`invoke_agent`, "
    "`chat`, `execute_tool` with `gen_ai.tool.call.id`) do not say what the model proposed: the `chat` span of a "
    "response that held tool calls carries `gen_ai.output.messages` = "
    "`[{\"role\":\"assistant\",\"parts\":[{\"type\":\"text\",\"content\":\"\"}]}]` and no input "
    "messages; the calls appear only in Mastra's own `model_chunk` spans under it (`mastra.model_chunk.output`), "
    "which `loopspec check` reads (observed). The pass and tool-error recordings conform, the replay is R6 and the "
    "conflict R7; what was sent back to the model is not recorded, so R11 and R15 are not witnessed there."
)


#: the page's paragraph on the TypeScript frameworks (written by a full run, replaced by --add)
_TS_MARKER = re.compile(r"^The TypeScript frameworks (?:were added on|ran with) .*$", re.M)


def _ts_paragraph(lead: str) -> str:
    """The paragraph on how the TypeScript frameworks run, after ``lead`` (when and with which versions)."""
    return (lead + " (the versions the committed package-lock.json pins, "
            "src/loopspec/frameworks/js/). Each runs as a Node.js process speaking the adapter protocol "
            "(loopspec.frameworks.typescript), with the framework's own loop, a scripted model driven by "
            "`model.next` and tools whose executions go to `tool.execute`; the adapter reads the answers "
            "from what the framework puts in front of the model, as the Python adapters do. The frameworks start a "
            "response's tool calls together (their default), and the adapters announce the `concurrency` "
            "capability: in a concurrent batch step each tool body sends its `tool.execute` when the "
            "framework starts it and awaits the answer the harness holds and releases in the order the "
            "step's schedule picks (protocol section 7; `tool.waiting` when Node's event loop has run "
            "dry), and a body whose abort signal fires sends `$/cancelRequest`, so R29-R35 are "
            "exercised as for the Python frameworks (observed: the four answer in request order whatever "
            "the completion order; in abort mode Agents JS and LangGraph JS abort the other bodies and "
            "keep no answer of the response). The AI SDK "
            "and Mastra have no way to end a run on a tool failure (its exception becomes a result the "
            "model sees), so their steps run in continue mode only; LangGraph's abort mode is "
            "ToolNode's `handleToolErrors: false`, the Agents SDK's `errorFunction: null`." + LAST_ROUND
            + MASTRA_TRACES)


def add(names: list[str], args: argparse.Namespace) -> int:
    """--add: run these frameworks' campaigns and merge them into the page as it is (module docstring)."""
    build = ROOT / "build" / "frameworks"
    page = Path(args.out).read_text(encoding="utf-8")
    reports: list[tuple[str, str, dict]] = []
    matrix: dict[tuple[str, str], list[tuple[str, set[str]]]] = {}
    baselines: dict[tuple[str, str], set[str]] = {}
    sections: list[str] = []
    summary: list[str] = []
    matrix_rows: list[str] = []
    versions = []
    for name in names:
        if not installed(name):
            print(f"{name}: not installed here, skipped", file=sys.stderr)
            continue
        ver = framework_version(name)
        versions.append(f"{name} {ver}")
        for mode in ("batch", "loop"):
            data, dt = campaign(name, mode, build / f"{name}-{mode}", args.examples, args.seed, args.shrink_time, name)
            reports.append((name, mode, data))
            body = (build / f"{name}-{mode}" / "report.md").read_text(encoding="utf-8").split("\n", 1)[1]
            body = _BUILD.sub("build/frameworks/", body.replace(str(ROOT) + "/", ""))
            sections.append(f"## {name} {ver} — {mode} mode\n\nCampaigns (profile + strict): {dt:.0f} s.\n"
                            + body.replace("\n## ", "\n### ").replace("\n### R", "\n#### R"))
            n = {k: sum(r["status"] == k for r in data["rules"]) for k in ("conforms", "design-choice", "deviates")}
            dev = ", ".join(r["rule"] + (" (observed choice only)" if r.get("observedOnly") is not None else "")
                            for r in data["rules"] if r["status"] == "deviates") or "none"
            summary.append(f"| {name} | {ver} | {mode} | {n['conforms']} | {n['design-choice']} | "
                           f"{n['deviates']} ({dev}) | {dt:.0f} |")
            print(f"{name} {mode}: {n['deviates']} deviation(s), {dt:.0f} s", file=sys.stderr)
            if args.matrix_examples <= 0:
                continue
            bdata, _ = campaign(name, mode, build / f"{name}-{mode}-defaults", args.matrix_examples, args.seed,
                                args.matrix_shrink_time, None)
            base = found(bdata)
            baselines[(name, mode)] = base
            for setting, values in resolve(name).adapter.SETTINGS.items():
                for value in values[1:]:
                    label = f"{setting}={value}"
                    mdata, mdt = campaign(f"{name}[{label}]", mode, build / f"{name}-{mode}-{setting}-{value}",
                                          args.matrix_examples, args.seed, args.matrix_shrink_time, None)
                    rules = found(mdata)
                    matrix.setdefault((name, mode), []).append((label, rules))
                    added = {r["rule"]: r["kind"] for r in mdata["rules"] if r["status"] in DIVERGES
                             and r["rule"] not in base}
                    gone = sorted(base - rules, key=lambda r: int(r[1:]))
                    if added or gone:
                        matrix_rows.append(
                            f"| {name} | {mode} | `{label}` | "
                            + (", ".join(f"{r} ({k})" for r, k in sorted(added.items(), key=lambda x: int(x[0][1:])))
                               or "—") + " | " + (", ".join(gone) or "—") + f" | {mdt:.0f} |")
    done = {n.split()[0] for n in versions}
    # the risk view: the added frameworks' entries replace theirs, at the end of each consequence group
    risks = rank_risks(reports, matrix, baselines)
    lines = page.split("\n")
    out: list[str] = []
    skipping = False
    for ln in lines:  # drop the added frameworks' old risk entries (an entry runs to the next one or heading)
        if ln.startswith("- **"):
            skipping = ln[4:].split("**", 1)[0] in done
        elif ln.startswith("#"):
            skipping = False
        if not skipping:
            out.append(ln)
    page = "\n".join(out)
    for cid, meaning in CONSEQUENCES:
        group = [r for r in risks if r.consequence == cid]
        if not group:
            continue
        entry: list[str] = []
        for r in group:
            if r.status == "design-choice":
                verdict = ("a documented choice (" + (", ".join(f"`{p}`" for p in r.parameters)
                                                       or "a combination of its documented choices") + ")")
            elif r.observed_only is not None:
                verdict = ("**a deviation**: nothing documents it (observed choice "
                           + (", ".join(f"`{p}`" for p in r.observed_only)
                              or "needed in a combination of its choices") + ")")
            else:
                verdict = "**a deviation** from the framework's own profile"
            avoid = ("; not found with " + ", ".join(f"`{s}`" for s in r.avoided_by)) if r.avoided_by else ""
            entry += [f"- **{r.framework}**, {r.mode} mode, {r.rule} `{r.kind}` — {verdict}{avoid}.", "",
                      "  ```", *("  " + ln for ln in r.explanation.splitlines()), "  ```", ""]
            if r.case:
                entry += [f"  Case: `{rel(r.case)}`", ""]
        heading = f"### {meaning[0].upper() + meaning[1:]}"
        if heading in page:
            at = page.index(heading) + len(heading)
            nxt = re.compile(r"^## |^### ", re.M).search(page, at)
            end = nxt.start() if nxt else len(page)
        else:  # a group the page did not have: before the settings matrix
            end = page.index("## Settings matrix")
            entry = [heading, "", *entry]
        page = page[:end] + "\n".join(entry) + "\n" + page[end:]
    # summary and matrix rows, sections
    def replace_rows(text: str, header: str, rows: list[str]) -> str:
        at = text.index(header)
        end = text.index("\n\n", at)
        kept = [ln for ln in text[at:end].split("\n") if not any(ln.startswith(f"| {n} |") for n in done)]
        return text[:at] + "\n".join(kept + rows) + text[end:]

    page = replace_rows(page, "| framework | version | mode | conforms |", summary)
    page = replace_rows(page, "| framework | mode | setting (others at the adapter's default) |", matrix_rows)
    heads = list(_SECTION.finditer(page))
    for k in reversed(range(len(heads))):
        if heads[k].group(1) in done:
            end = heads[k + 1].start() if k + 1 < len(heads) else len(page)
            page = page[:heads[k].start()] + page[end:]
    page = page.rstrip("\n") + "\n\n" + "\n".join(sections)
    note = (f"The TypeScript frameworks were added on {date.today().isoformat()} by `python docs/frameworks.py --add "
            f"{' '.join(n.split()[0] for n in versions)} --examples {args.examples} --shrink-time {args.shrink_time:g} "
            f"--matrix-examples {args.matrix_examples} --matrix-shrink-time {args.matrix_shrink_time:g} --seed "
            f"{args.seed}` with {', '.join(versions)}")
    if done & set(NODE):
        ts_note = _ts_paragraph(note)
        page = _TS_MARKER.sub(ts_note, page) if _TS_MARKER.search(page) else page.replace(
            "\n\nEach framework runs in process", "\n\n" + ts_note + "\n\nEach framework runs in process", 1)
    write_atomic(args.out, with_scorecard(page))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", default=[*FRAMEWORKS, *NODE])
    ap.add_argument("--add", action="store_true",
                    help="run only the named frameworks and merge them into the page as it is (module docstring)")
    ap.add_argument("--examples", type=int, default=60)
    ap.add_argument("--matrix-examples", type=int, default=30,
                    help="examples of each settings-matrix campaign (0: no settings matrix)")
    ap.add_argument("--seed", type=int, default=20260101)
    ap.add_argument("--shrink-time", type=float, default=300.0,
                    help="seconds a campaign may go on after its first finding (a campaign cut short finds "
                         "fewer rules and the page says so; the default lets every campaign finish)")
    ap.add_argument("--matrix-shrink-time", type=float, default=30.0,
                    help="--shrink-time of each settings-matrix campaign (it only has to find which rules a setting "
                         "changes; the shrunk cases of the risk view come from the main campaigns)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "frameworks.md"))
    ap.add_argument("--from-build", action="store_true",
                    help="run no campaign that already has a report in build/frameworks/ (its seconds are the "
                         "campaigns' own); the probes always run")
    args = ap.parse_args()
    global REUSE
    REUSE = args.from_build
    if args.add:
        return add(args.names, args)
    build = ROOT / "build" / "frameworks"
    sections = []
    summary = ["| framework | version | mode | conforms | design choices | deviations | seconds |",
               "|---|---|---|---|---|---|---|"]
    reports: list[tuple[str, str, dict]] = []
    matrix: dict[tuple[str, str], list[tuple[str, set[str]]]] = {}
    baselines: dict[tuple[str, str], set[str]] = {}
    matrix_rows = ["| framework | mode | setting (others at the adapter's default) | strict findings: added | "
                   "strict findings: gone | seconds |", "|---|---|---|---|---|---|"]
    versions = []
    for name in args.names:
        ver = framework_version(name) if installed(name) else None
        if ver is None:
            print(f"{name}: not installed (pip install 'loopspec[{name}]'; google-adk: its own environment, "
                  "python3 .ci/dev.py loopspec --version builds .venv-adk), skipped", file=sys.stderr)
            continue
        versions.append(f"{name} {ver}")
        for mode in ("batch", "loop"):
            data, dt = campaign(name, mode, build / f"{name}-{mode}", args.examples, args.seed, args.shrink_time, name)
            reports.append((name, mode, data))
            body = (build / f"{name}-{mode}" / "report.md").read_text(encoding="utf-8").split("\n", 1)[1]
            body = _BUILD.sub("build/frameworks/", body.replace(str(ROOT) + "/", ""))
            sections.append(f"## {name} {ver} — {mode} mode\n\nCampaigns (profile + strict): {dt:.0f} s.\n"
                            + body.replace("\n## ", "\n### ").replace("\n### R", "\n#### R"))
            n = {k: sum(r["status"] == k for r in data["rules"]) for k in ("conforms", "design-choice", "deviates")}
            dev = ", ".join(r["rule"] + (" (observed choice only)" if r.get("observedOnly") is not None else "")
                            for r in data["rules"] if r["status"] == "deviates") or "none"
            cut = [k for k in ("stats", "strictStats") if (data.get(k) or {}).get("shrinkTimeSpent")]
            if cut:  # the campaign stopped before its examples ran out: it may have missed rules
                dev += " — cut short by --shrink-time (" + ", ".join(
                    "profile" if k == "stats" else "strict" for k in cut) + " campaign)"
            summary.append(f"| {name} | {ver} | {mode} | {n['conforms']} | {n['design-choice']} | "
                           f"{n['deviates']} ({dev}) | {dt:.0f} |")
            print(f"{name} {mode}: {n['deviates']} deviation(s), {n['design-choice']} design choice(s), {dt:.0f} s",
                  file=sys.stderr)
            if args.matrix_examples <= 0:
                continue
            # the baseline: the adapter's default settings in a campaign of the matrix's size and seed, so that a
            # difference is the setting's, not the campaign's size
            bdata, _ = campaign(name, mode, build / f"{name}-{mode}-defaults", args.matrix_examples, args.seed,
                                args.matrix_shrink_time, None)
            base = found(bdata)
            baselines[(name, mode)] = base
            settings = resolve(FRAMEWORKS[name]).SETTINGS if name in FRAMEWORKS else resolve(name).adapter.SETTINGS
            for setting, values in settings.items():
                if mode == "batch" and setting in LOOP_ONLY:
                    continue
                for value in values[1:]:
                    label = f"{setting}={value}"
                    mdata, mdt = campaign(f"{name}[{label}]", mode, build / f"{name}-{mode}-{setting}-{value}",
                                          args.matrix_examples, args.seed, args.matrix_shrink_time, None)
                    rules = found(mdata)
                    matrix.setdefault((name, mode), []).append((label, rules))
                    added = {r["rule"]: r["kind"] for r in mdata["rules"] if r["status"] in DIVERGES
                             and r["rule"] not in base}
                    gone = sorted(base - rules, key=lambda r: int(r[1:]))
                    print(f"  {name}[{label}] {mode}: +{sorted(added)} -{gone}, {mdt:.0f} s", file=sys.stderr)
                    if added or gone:
                        matrix_rows.append(
                            f"| {name} | {mode} | `{label}` | "
                            + (", ".join(f"{r} ({k})" for r, k in sorted(added.items(), key=lambda x: int(x[0][1:])))
                               or "—") + " | " + (", ".join(gone) or "—") + f" | {mdt:.0f} |")
    probed = probes([n for n in args.names if n in PACKAGES and installed(n)], build / "probes")
    seen = {(fw, mode, r["rule"], r["kind"]) for fw, mode, data in reports for r in data["rules"]
            if r["status"] in DIVERGES}
    reports += [(fw, "loop (probe)", {"rules": [r for r in rules if (fw, "loop", r["rule"], r["kind"]) not in seen]})
                for fw, rules in probed.items()]
    risks = rank_risks(reports, matrix, baselines)
    only = {fw: sorted({r["rule"] for r in rules if (fw, "loop", r["rule"], r["kind"]) not in seen},
                       key=lambda x: int(x[1:])) for fw, rules in probed.items()}
    probe_note = ("Divergences only the probes met (in the risk view, not counted here): "
                  + "; ".join(f"{fw} {', '.join(rs)}" for fw, rs in only.items() if rs) + "."
                  if any(only.values()) else "The probes met no divergence the campaigns did not.")
    risk_lines = []
    for cid, meaning in CONSEQUENCES:
        group = [r for r in risks if r.consequence == cid]
        if not group:
            continue
        risk_lines += [f"### {meaning[0].upper() + meaning[1:]}", ""]
        for r in group:
            if r.status == "design-choice":
                verdict = ("a documented choice (" + (", ".join(f"`{p}`" for p in r.parameters)
                                                       or "a combination of its documented choices") + ")")
            elif r.observed_only is not None:
                verdict = ("**a deviation**: nothing documents it (observed choice "
                           + (", ".join(f"`{p}`" for p in r.observed_only)
                              or "needed in a combination of its choices") + ")")
            else:
                verdict = "**a deviation** from the framework's own profile"
            avoid = ("; not found with " + ", ".join(f"`{s}`" for s in r.avoided_by)) if r.avoided_by else ""
            risk_lines += [f"- **{r.framework}**, {r.mode} mode, {r.rule} `{r.kind}` — {verdict}{avoid}.", "",
                           "  ```", *("  " + ln for ln in r.explanation.splitlines()), "  ```", ""]
            if r.case:
                risk_lines += [f"  Case: `{rel(r.case)}`", ""]
    matrix_text = ("\n".join(matrix_rows) if len(matrix_rows) > 2 else "No setting changed what the campaigns found.")
    if REUSED and FRESH:
        reused_note = (f"\n\nAssembled with `--from-build`: the reports of {len(REUSED)} campaigns are those an earlier "
                       f"run of this command left in build/frameworks/ (their seconds are the campaigns' own); "
                       f"{len(FRESH)} ran on this date ({', '.join(sorted(FRESH))}), and so did the probes.")
    elif REUSED:
        reused_note = (f"\n\nAssembled with `--from-build` from the reports of the {len(REUSED)} campaigns a run of this "
                       f"command left in build/frameworks/ on {', '.join(sorted(REUSED_DATES))} (their seconds are the "
                       "campaigns' own); no campaign ran again, the probes did.")
    else:
        reused_note = ""
    ts_versions = [v for v in versions if v.split()[0] in NODE]
    ts_note = "\n\n" + _ts_paragraph(f"The TypeScript frameworks ran with {', '.join(ts_versions)}") if ts_versions else ""
    head = f"""# loopspec against real agent frameworks

Generated on {date.today().isoformat()} by `python docs/frameworks.py --examples {args.examples} --shrink-time \
{args.shrink_time:g} --matrix-examples {args.matrix_examples} --matrix-shrink-time {args.matrix_shrink_time:g} --seed \
{args.seed}` with {", ".join(versions)}: the versions CI installs
(`.ci/frameworks-constraints.txt`, also the lower bounds of the `frameworks` extra in pyproject.toml; Google ADK's in
`.ci/adk-constraints.txt`) and fuzzes in smaller campaigns (tests/test_frameworks_fuzz.py). Everything below is what
the runs showed, nothing else.{reused_note}{ts_note}

Each framework runs in process with its adapter (`src/loopspec/frameworks/`): a scripted model, the
framework's own tool-calling path, tools registered the framework's way whose bodies count every real
execution and raise exceptions whose message carries a canary when the harness's tool fails, no network.
The adapters read what the framework puts in front of the model (its tool-result messages, whatever their
content) as the answers. Three views follow:

1. **Risks**: every divergence from the **strict** spec, ranked by its consequence for a user, each with its
   shrunk case, whether the framework documents it, and the settings under which the campaign did not
   find it (the settings matrix).
2. **Settings matrix**: the framework settings that change the loop's behaviour (each adapter declares
   them), one strict campaign per other value, compared with a campaign of the same size and seed at the
   adapter's defaults; a row per setting that changed what the campaigns found.
3. **Profile conformance**: judged under its **profile** (`spec/loop.toml`, `[[profile]]`, SPEC.md section
   4), per rule: **conforms** (no campaign found a divergence; where the profile differs from the strict
   default but no campaign met a case that shows it, the row says which parameter went unwitnessed);
   **design choice** (the strict counterexample conforms to the profile, and a `documented` or `source`
   choice explains it); **deviates** (the framework does something its profile does not allow, or that
   only an `observed` choice — one nothing documents — explains).

Each profile choice carries its evidence (SPEC.md P-EVIDENCE): `documented` quotes the framework's
documentation as the pinned package ships it, `source` a line of its installed source (both checked by
tests/test_frameworks_evidence.py against the pinned versions), `observed` is what only the runs show.

What a framework cannot express is not fuzzed and is listed in each adapter's docstring: proposals its
message types cannot carry (e.g. a numeric call id), limits it has no equivalent for (`maxRequests`,
per-tool limits, retries; the execution budget for the Agents SDK and LangGraph), and the `error-result`
limit policy (every framework ends the run on a limit). The profile campaigns run the tool calls of a
response one at a time where the framework has a setting for it (pydantic-ai's `parallel_execution_mode`,
the Agents SDK's `max_function_tool_concurrency`); the frameworks' default concurrent modes are rows of the
settings matrix. LangGraph's ToolNode has no such setting and runs them concurrently, which its profile says.

Google ADK cannot share the project's environment: google-adk 2.13.0 requires `opentelemetry-api>=1.39,<=1.44`
and the project pins 1.45.2 for the oracle's telemetry recordings (pip: "ResolutionImpossible ... google-adk 2.13.0
depends on opentelemetry-api<=1.44 and >=1.39; The user requested (constraint) opentelemetry-api==1.45.2"). The
newest google-adk pip finds compatible with the project's pins is 1.14.1, which would also move mcp, starlette,
protobuf, tenacity and websockets under the other frameworks. So `.ci/dev.py` builds `.venv-adk` (loopspec without
extras and ADK at its pins) and `--impl google-adk` runs the same kind of adapter there, in process with ADK,
behind the JSON-RPC protocol the harness speaks to any implementation (`python -m loopspec.frameworks.google_adk`).
ADK's only mode runs a response's calls concurrently: the adapter announces `concurrency`, and the stdio server
gives its tool bodies the held answers (protocol v1.1, PROTOCOL.md section 6), so ADK's batch campaigns under the
strict spec run concurrent steps whose completion order the harness picks.

The campaigns run with `PYTHONHASHSEED=0` (a framework campaign depended on string hashing). The `Case:`
paths name the shrunk cases (`loopspec replay CASE.json --impl NAME` reruns one) under `build/frameworks/`;
they are not committed — regenerate to get them.

## Risks (strict view, most severe first)

""" + "\n".join(risk_lines) + """
## Settings matrix

""" + matrix_text + """

## Profile conformance: summary

The counts are the campaigns' (profile and strict). """ + probe_note + """

""" + "\n".join(summary) + "\n"
    write_atomic(args.out, with_scorecard(head + "\n" + "\n".join(sections)))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
