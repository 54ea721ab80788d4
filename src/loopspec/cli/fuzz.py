"""``loopspec fuzz``: stateful fuzzing of another implementation over the adapter protocol.

Exit 0 when no divergence was found, 1 when one was (each shrunk case is in ``--out``), 2 on a
usage error or when the implementation cannot be started, 130 when interrupted (Ctrl-C) before any
divergence was found, 143 when terminated (SIGTERM) and 129 when hung up (SIGHUP) before any was found
(campaign.json is written either way, and says ``interrupted``). When a file in ``--out`` cannot be written
(a full disk, a file size limit), the campaign stops there, keeps the files already written, writes
campaign.json if there is still room, names the file and the reason on stderr and exits 1 when something was
found, else 2 (as ``check`` does when its report cannot be written).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any

from ..support.progress import Status
from ..support.text import paint, printable, use_color
from ._common import (
    EXIT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
    NextStep,
    UsageError,
    add_format_option,
    add_jobs_option,
    add_out_option,
    add_progress_option,
    add_quiet_option,
    add_spec_option,
    default_out,
    next_json,
    progress_line,
    resolve_jobs,
)
from ._reports import add_report_options, check_report_paths, fuzz_report, write_reports

if TYPE_CHECKING:
    from ..fuzz._adapter import ImplFactory

# The fuzzer (loopspec.fuzz) is imported by the handlers, not here: `loopspec --help` needs only register()

EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT) before the campaign finished, nothing found so far


def positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {v}")
    return v


def seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return v


def impl_help() -> str:
    """``--impl``'s help, naming every framework of the registry (:data:`loopspec.frameworks.FRAMEWORKS`)."""
    from ..frameworks import FRAMEWORKS

    return ("the command that starts the implementation (it speaks spec/PROTOCOL.md on stdin/stdout; the shipped "
            "example: 'python -m loopspec.examples.executor'), or a framework run in process: "
            f"{', '.join(FRAMEWORKS)} (NAME[setting=value] for another setting), or module:attr (an Executor "
            "subclass or factory)")


def add_impl_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--impl", required=True, metavar="CMD", help=impl_help())
    p.add_argument("--timeout", type=seconds, default=10.0, metavar="S",
                   help="seconds to wait for each message from the implementation (default 10)")
    p.add_argument("--cwd", help="working directory for the implementation")


def register(sub: Any) -> None:
    p = sub.add_parser("fuzz", help="fuzz an implementation over the adapter protocol and shrink every divergence",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_impl_options(p)
    add_spec_option(p)
    p.add_argument("--mode", choices=("batch", "loop", "writes"), default="batch",
                   help="what to fuzz (default batch); writes: write tools, lost answers and restarts (protocol "
                        "v1.2, needs the 'writes' capability)")
    p.add_argument("--tools", metavar="FILE|mcp:CMD",
                   help="the implementation's own tool registry: a JSON file holding MCP's tools/list result "
                        "({\"tools\": [{name, description, inputSchema, annotations}]}, and optionally \"unsupported\": "
                        "[\"continue\", \"error-results\"]), or mcp:CMD to ask a running MCP server over stdio. Every "
                        "batch then offers exactly those tools; names that are not declared are still proposed")
    p.add_argument("--max-examples", type=positive, default=200, metavar="N",
                   help="examples to run (each several steps on the implementation; default 200)")
    p.add_argument("--steps", type=positive, default=8, metavar="N", help="steps (runs) per example (default 8)")
    p.add_argument("--max-calls", type=positive, default=6, metavar="N", help="calls per batch or round (default 6)")
    p.add_argument("--seed", type=int, help="random seed (printed, and recorded in every case, when not given); "
                   "the same seed gives the same campaign")
    add_out_option(p, "fuzz", "cases, explanations, campaign.json and coverage.json")
    p.add_argument("--isolation", choices=("campaign", "example"), default="campaign",
                   help="campaign (default): one implementation process for all examples (a new one only after "
                        "a protocol failure); example: a fresh process for every example (slower). Reported cases "
                        "are always re-checked in a fresh process")
    p.add_argument("--shrink-time", type=seconds, default=120.0, metavar="S",
                   help="stop exploring S seconds after the first divergence (a loop campaign's opening focused "
                        "examples, one per loop feature, run anyway); reducing one finding also takes at most S "
                        "seconds (default 120)")
    p.add_argument("-x", "--exitfirst", action="store_true",
                   help="stop at the first reduced case (as pytest -x): its case is on disk as soon as it is reduced")
    p.add_argument("--time-budget", type=seconds, metavar="S",
                   help="start no new example after S seconds (for CI); what was found is still reduced")
    add_jobs_option(p, "the examples run on N implementation processes in N worker processes")
    p.add_argument("--dask", metavar="ADDRESS",
                   help="shard the campaign over the workers of the Dask scheduler at ADDRESS (each worker starts "
                        "its own implementation; --jobs sets the number of shards); needs loopspec[dask]")
    p.add_argument("--profile", metavar="NAME",
                   help="judge under a profile of spec/loop.toml (e.g. pydantic-ai; default strict). A divergence "
                        "is then a deviation from the framework's own documented choices; a second campaign under "
                        "the strict spec shows which rules the profile's choices differ in (for --report)")
    p.add_argument("--report", metavar="FILE", help="write a conformance report (Markdown): per rule, conforms or "
                   "deviates, with the shrunk counterexample of each deviation; data in FILE.json")
    add_format_option(p, what="the campaign's summary",
                      meanings={"json": "one JSON document on stdout: the parameters, every finding with its "
                                        "explanation, the statistics and the spec coverage"})
    add_progress_option(p)
    add_quiet_option(p)
    add_report_options(p)
    p.set_defaults(handler=handle)


def impl_target(impl: str) -> Any:
    """``--impl`` as a target: a framework name or ``module:attr`` (in process), else a command."""
    from ..frameworks import ResolveError, resolve

    try:
        target = resolve(impl)
    except ResolveError as exc:
        raise UsageError(f"--impl {impl}: {exc}") from None
    return impl if target is None else target


def open_factory(args: argparse.Namespace, mode: str, **kw: Any) -> ImplFactory:
    """A factory for ``--impl``, checked by one initialize handshake (exit 2 when that fails)."""
    from ..fuzz._adapter import ImplFactory, StartError
    from ..protocol.rpc import ProtocolFailure

    try:
        target = impl_target(args.impl)
        label = None if isinstance(target, str) and not hasattr(target, "adapter") else args.impl
        factory = ImplFactory(target, timeout=args.timeout, cwd=args.cwd, label=label, **kw)
        probe = factory.open(mode)
        factory.release(probe)
    except StartError as exc:
        raise UsageError(f"the implementation cannot start: {exc}") from None
    except ProtocolFailure as f:
        raise UsageError(f"the implementation cannot start: {f.code} {f.kind}: {f.detail}") from None
    return factory


def load_tools(args: argparse.Namespace) -> Any:
    """``--tools``: the declared registry (None when not given); a usage error when it cannot be used."""
    if getattr(args, "tools", None) is None:
        return None
    from ..fuzz._declared import DeclarationError, load_declaration

    try:
        return load_declaration(args.tools, timeout=args.timeout if args.timeout > 30 else 30.0)
    except DeclarationError as exc:
        raise UsageError(f"--tools: {exc}") from None


def check_profile(name: str | None) -> str | None:
    """``--profile``: None for the strict spec; a usage error for an unknown name."""
    if name is None or name == "strict":
        return None
    from ..spec.loader import load_spec

    spec = load_spec()
    known = [p.id for p in spec.profiles]
    if name not in known:
        raise UsageError(f"--profile {name}: unknown profile; known: strict, {', '.join(known)}")
    return name


def handle(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..fuzz._adapter import StderrLog
    from ..fuzz._campaign import Campaign

    started = time.perf_counter()
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {args.out}: exists and is not a directory")
    check_report_paths(args)
    if args.dask is not None:
        import importlib.util

        if importlib.util.find_spec("distributed") is None:
            raise UsageError("--dask needs Dask's distributed scheduler: pip install 'loopspec[dask]'")
    try:
        out.mkdir(parents=True, exist_ok=True)
        log = StderrLog(out / "impl-stderr.log")  # bounded: head and tail; never through a symlink
    except OSError as exc:
        raise UsageError(f"--out {args.out}: {exc.strerror}") from None
    color = use_color(sys.stdout)
    line = progress_line(args)
    quiet = args.quiet or args.format == "json"

    hang_told = []

    def say(msg: str) -> None:
        if not quiet:
            line.echo(f"loopspec fuzz: {msg}")
        if "P2" in msg and msg.startswith(("found P2", "[")) and not hang_told and args.format != "json":
            # a hang is only known after --timeout, and reducing one re-runs it: say so, even with --quiet, so a
            # campaign against a hanging implementation never sits silent (issue 30)
            hang_told.append(True)
            line.echo(f"loopspec fuzz: the implementation stopped answering (P2): a hang is known only after "
                      f"--timeout {args.timeout:g} s, and each run that reduces it waits that long again "
                      f"(--timeout 2 reduces faster; --shrink-time {args.shrink_time:g} s bounds the reduction)")

    profile = check_profile(args.profile)
    declared = load_tools(args)
    if declared is not None and declared.tools and args.mode == "writes":
        from ..fuzz._writes_gen import declared_writes

        if not declared_writes(declared.tools):
            raise UsageError("--tools: --mode writes needs a declared tool that is a write (annotations without "
                             "readOnlyHint true, and a property to key it by)")
    strict_result = None
    jobs = resolve_jobs(args.jobs) if args.dask is None else max(resolve_jobs(args.jobs), 2)
    try:
        factory = open_factory(args, args.mode, stderr_log=log)
        try:
            def run(label: str, **kw: Any) -> Any:
                prefix = "" if label == "fuzz" else f"[{label}] "
                campaign = Campaign(factory, mode=args.mode, max_examples=args.max_examples, seed=kw.pop("seed"),
                                    steps=args.steps, max_calls=args.max_calls,
                                    progress=lambda m: say(prefix + m), isolation=args.isolation,
                                    shrink_seconds=args.shrink_time, time_budget=args.time_budget, jobs=jobs,
                                    dask=args.dask, declared=declared, exitfirst=args.exitfirst, **kw)
                say(prefix + f"{factory.describe()}: {args.mode} mode, {args.max_examples} examples, seed "
                    f"{campaign.seed}" + (f", profile {kw['profile']}" if kw.get("profile") else "")
                    + (f", {jobs} jobs" if jobs > 1 else "") + (f", Dask at {args.dask}" if args.dask else ""))
                with line.ticking(lambda: campaign_status(campaign, label, args.timeout)):
                    return campaign.run()

            result = run("fuzz" if profile is None else f"profile {profile}", seed=args.seed, out=out,
                         profile=profile)
            if profile is not None and args.report:
                say("a second campaign under the strict spec, for the report (what the profile's choices change); "
                    "its lines say [strict comparison]")
                strict_result = run("strict comparison", seed=result.seed, out=out / "strict", profile=None)
        finally:
            factory.close()
    finally:
        log.close()
    if result.out_error is not None:
        where = out / "campaign.json"
        print(f"loopspec fuzz: error: --out: {printable(result.out_error)}; the files written before are kept in "
              f"{printable(str(out))}" + ("" if str(where) in result.files else f"; {printable(str(where))} "
                                          "could not be written either"), file=sys.stderr)
    if args.report:
        from ..fuzz._report import write_report

        paths = write_report(args.report, impl=args.impl, info=factory.info or {}, mode=args.mode, profile=profile,
                             result=result, strict=strict_result, out=out)
        say(f"report: {', '.join(paths)}")
    if args.html or args.junit:
        code = EXIT_FOUND if not result.ok else interrupted_exit(result) if result.interrupted else EXIT_OK
        rep = fuzz_report(args, result, out, impl_info=factory.info, profile=profile, strict=strict_result,
                          argv=getattr(args, "argv", None), seconds=time.perf_counter() - started, exit_code=code,
                          next_step=next_json(suggestion(result, out, args)))
        for path in write_reports(args, rep):
            say(f"wrote {path}")
    if args.format == "json":
        from ..fuzz._model import json_text
        from ..fuzz._outputs import finding_summary

        def doc(r: Any, where: Path) -> dict[str, Any]:
            return {"ok": r.ok, "interrupted": r.interrupted, "seed": r.seed, "parameters": r.params,
                    "findings": [finding_summary(f, where) for f in r.findings], "stats": r.stats,
                    "coverage": r.coverage, "files": r.files, "corpus": r.corpus}

        body = {"format": "loopspec-fuzz-summary/1", "impl": args.impl, "implInfo": factory.info,
                "profile": profile or "strict", **doc(result, out), "next": next_json(suggestion(result, out, args))}
        if strict_result is not None:
            body["strictComparison"] = doc(strict_result, out / "strict")
        sys.stdout.write(json_text(body))
        if result.ok and result.out_error is not None:
            return EXIT_USAGE
        return EXIT_FOUND if not result.ok else interrupted_exit(result) if result.interrupted else EXIT_OK
    print_summary(result, out, args, color)
    if result.ok:
        if result.out_error is not None:
            return EXIT_USAGE
        return interrupted_exit(result) if result.interrupted else EXIT_OK
    return EXIT_FOUND


def corpus_lines(result: Any) -> None:
    """What became of the cases an earlier campaign left in --out (replayed first)."""
    corpus = getattr(result, "corpus", None) or []
    if not corpus:
        return
    by: dict[str, int] = {}
    for e in corpus:
        by[e["status"]] = by.get(e["status"], 0) + 1
    print(f"corpus: {len(corpus)} earlier case(s) in --out replayed first: "
          + ", ".join(f"{n} {s}" for s, n in sorted(by.items())))
    for e in corpus:
        if e["status"] == "fixed":
            print(f"  fixed: {e['case']} passes now → {e['now']}")
        elif e["status"] in ("unreadable", "not-replayed"):
            print(f"  {e['status']}: {e['case']} (kept as it is: {e.get('why', '')})")
        elif e["status"] == "renamed":
            print(f"  still failing, renamed for its cause: {e['case']} → {e['now']}")


def interrupted_exit(result: Any) -> int:
    """130 for a Ctrl-C; 128 + the signal's number for SIGTERM (143) and SIGHUP (129)."""
    return 128 + result.signum if result.signum is not None else EXIT_INTERRUPTED


def campaign_status(c: Any, label: str, timeout: float | None = None) -> Status:
    st = c.stats
    ex = c.explorer
    phase = ex.phase if ex is not None and ex.phase != "exploring" else ""
    if timeout is not None and "P2" in phase:
        phase += f": each run waits up to --timeout {timeout:g} s"
    return Status(label=f"loopspec {label}", seconds=time.perf_counter() - c.started if c.started else 0.0,
                  done=st.examples, total=c.max_examples, unit="examples", count=st.steps, count_unit="steps",
                  findings=len(c.findings), finding="finding", phase=phase)


def print_summary(result: Any, out: Any, args: argparse.Namespace, color: bool) -> None:
    st = result.stats
    head = (f"{st['examples']} examples, {st['steps']} steps, {st['executionsObserved']} executions in "
            f"{st['seconds']} s ({st['stepsPerSecond']} steps/s), seed {result.seed}")
    if st.get("stoppedBy") == "time-budget":
        head += f"; --time-budget reached after {st['examples']} of {args.max_examples} examples"
    if st.get("stoppedBy") == "exitfirst":
        head += f"; stopped at the first reduced case (-x) after {st['examples']} of {args.max_examples} examples"
    if result.interrupted:
        head += "; INTERRUPTED (the findings so far are on disk; campaign.json says interrupted)"
    if result.out_error is not None:
        head += f"; STOPPED: {result.out_error} (see the error below)"
    if result.ok:
        print(f"{paint('no divergence', '32', color)}: {head}")
    else:
        causes = len(result.findings)
        rules = len({f.rule for f in result.findings})
        print(f"{paint(f'{causes} distinct cause(s)', '31;1', color)} of divergence, under {rules} rule(s): {head}")
        for f in result.findings:
            v = f.verdict.violation
            assert v is not None
            rep = "" if f.reproduced is not False else " [did not reproduce in a fresh process: P7]"
            old = " [an earlier campaign's case, still failing]" if f.origin is not None else ""
            print(f"  {f.cause}" + (f" ({v.invariant})" if v.invariant else "")
                  + f": {f.calls} call(s) in {len(f.steps)} step(s){rep}{old} → {out / (f.cause + '.txt')}")
            if not args.quiet:
                print("    " + v.explanation.splitlines()[-1])
    corpus_lines(result)
    if not args.quiet:
        cov = result.coverage
        reach = cov.get("reachable", [])
        missing = cov.get("missing", [])
        machine = ("transitions of writes.toml (section 6's operation machine)" if args.mode == "writes"
                   else "spec transitions")
        print(f"coverage: {len(reach) - len(missing)} of the {len(reach)} {machine} reachable in "
              f"{args.mode} mode were taken" + (f"; never: {', '.join(missing)}" if missing else " (all)")
              + f"; not reachable through the protocol: {', '.join(cov.get('unreachable', {}))} "
              f"→ {out / 'coverage.json'}" + ("" if args.mode == "writes" else " (loopspec diagram --coverage)"))
        declared = (result.params or {}).get("declared")
        if declared and declared.get("unsupported"):
            from ..fuzz._declared import UNSUPPORTED

            for u in declared["unsupported"]:
                print(f"not exercised (declared unsupported): {UNSUPPORTED.get(u, u)}")
        shares = cov.get("shares") or {}
        if shares:
            print("loop examples with: " + ", ".join(f"{k} {v:.0%}" for k, v in shares.items()))
    if result.out_error is not None:  # what could not be written is not offered as a next step
        return
    if not result.ok or not args.quiet:
        print(f"campaign: {out / 'campaign.json'}")
    step = suggestion(result, out, args)
    if step is not None:
        step.print()


def suggestion(result: Any, out: Any, args: argparse.Namespace) -> NextStep | None:
    """What to run after a campaign that found something (the text's last lines, the JSON's ``"next"``): the
    command that replays the first case (to run after a fix), its explanation and its path on the diagram.
    None when nothing was found, or when --out could not be written (no case to offer)."""
    from shlex import quote

    if result.ok or not result.findings or result.out_error is not None:
        return None
    f = result.findings[0]
    case = out / f"{f.cause}.json"
    path = out / f"{f.cause}.path.json"
    also = [(f"cat {quote(str(out / (f.cause + '.txt')))}", "the reduced case, step by step, explained")]
    if path.is_file():
        also.append((f"loopspec diagram --trace {quote(str(path))} --render svg --out {default_out('diagram')}",
                     "its path on the spec machine, the failing step in red"))
    return NextStep(f"loopspec replay {quote(str(case))} --impl {quote(args.impl)}",
                    "reruns the case exactly: it exits 0 once the implementation is fixed", tuple(also),
                    f"spec/SPEC.md, rule {f.rule}; docs/cli.md#what-to-run-next")


