"""``loopspec check``: the conformance oracle — check recorded run ledgers and transcripts against the spec.

Each run (a ledger run, a trace, a conversation) gets a verdict: it conforms, or it violates a rule —
with where (event index, file line), the rule and the invariant, expected vs observed, the longest
conforming prefix and a "Let … Then …" explanation — or it could not be read. Every verdict says
which rules were verified from what the input records and which were taken as reported.

Exit codes: 0 every run conforms; 1 a run violates the spec; 2 some input could not be read (a
missing file, a malformed line, an unreadable run) — even when the other runs conform or violate,
since the check is then incomplete. The summary line always counts all three.

The exit code never depends on what reads the report: when stdout is closed by its reader
(``check FILE | head -1``), the check still runs to the end and exits with its verdict; when the report
cannot be written at all (a full disk, a closed stdout: ``> /dev/full``, ``>&-``), it runs to the end, says
so on stderr, and exits 1 if it found a violation, else 2 (a passing check whose report was lost is not a
pass).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import io
import os
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import IO, Any

from ..oracle._check import (
    HISTORY_FORMATS,
    INPUT_FORMATS,
    TELEMETRY_FORMATS,
    FileResult,
    assumption_notes,
    check_file,
    iter_check_file,
)
from ..oracle._options import DEFAULT_MAX_LINE, Options
from ..oracle._records import LEDGER_NOT_WITNESSED, MAX_ERRORS_SHOWN, InputError, RunRecord, Summary
from ..oracle._split import check_split, is_ledger
from ..spec.base import default_spec_path
from ..support import safejson
from ..support.progress import Status
from ..support.text import paint, printable, use_color
from ._common import (
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
from ._reports import CheckReports, add_report_options, check_report_paths

Json = Any

#: Inputs whose conforming runs list the rules verified (what they record varies).
VERIFIED_SHOWN = frozenset((*TELEMETRY_FORMATS, *HISTORY_FORMATS))


def register(sub: Any) -> None:
    p = sub.add_parser(
        "check",
        help="check recorded run ledgers (NDJSON), OpenTelemetry GenAI traces, framework histories and "
             "OpenAI/Anthropic transcripts against the spec, run by run",
        description=__doc__.split("\n\n", 1)[0].split(": ", 1)[1] if __doc__ else None,
        epilog="Exit codes: 0 all runs conform; 1 a violation; 2 input could not be read (takes precedence), or the "
               "report could not be written and no violation was found. A reader that closes stdout early "
               "(| head) does not change the code.",
    )
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="ledgers, traces, OpenTelemetry exports, histories or transcripts ('-' reads stdin); a "
                        "directory is read recursively (its files in name order, hidden ones left out)")
    add_spec_option(p)
    add_format_option(p, meanings={"json": "every run's verdict, the input errors and the summary as one JSON "
                                            "document on stdout"})
    p.add_argument("--input-format", choices=INPUT_FORMATS, default="auto",
                   help="what the files hold (default: auto, decided per file)")
    add_jobs_option(p, "files in parallel, or one ledger file split by run")
    add_out_option(p, "check", "for each violating run, its path drawn on the spec machine in DIR/<run>/ "
                   "(--diagram DIR is the older spelling)", default=False, aliases=("--diagram",))
    add_quiet_option(p, "the violating and unreadable runs and the summary line, not the conforming runs")
    p.add_argument("--allow-incomplete", action="store_true",
                   help="a run without a terminal event at the end of its file (or a conversation ending with "
                        "unanswered calls) is not a violation")
    p.add_argument("--validate", action="store_true",
                   help="validate every ledger event against spec/schema/ledger-event.schema.json (slower)")
    p.add_argument("--max-line-bytes", type=int, default=DEFAULT_MAX_LINE, metavar="N",
                   help=f"skip (and report) lines longer than N bytes; a transcript or trace file that is one "
                        f"JSON document may not be longer either (default {DEFAULT_MAX_LINE}, 16 MiB)")
    add_progress_option(p)
    add_report_options(p)
    p.set_defaults(handler=handle)


# --------------------------------------------------------------------------------------------
# Text and JSON rendering
# --------------------------------------------------------------------------------------------


def _loc(rec: RunRecord) -> str:
    a, b = rec.lines
    return f"{printable(rec.file)}:{a}" + (f"-{b}" if b != a else "")


def record_text(rec: RunRecord, color: bool = False) -> str:
    """A run's verdict for people. Every string that comes from the input (run ids, file names, the
    explanation's quotes) is shown with its control characters escaped."""
    n = f"{rec.events} event{'s' if rec.events != 1 else ''}"
    run = printable(rec.run)
    if rec.verdict == "conforms":
        s = rec.summary
        what = f"{s.get('status')}/{s.get('stopReason')}" if "status" in s and s.get("status") else (
            f"{s.get('calls', 0)} call(s), {s.get('results', 0)} result(s)" if "calls" in s else "")
        if s.get("incomplete"):
            what = "incomplete (no terminal event)"
        assumed = rec.checks.get("assumed", ())
        tail = f"; assumed {', '.join(assumed)}" if assumed else ""
        if rec.input in VERIFIED_SHOWN:  # what the recording let the oracle verify differs from run to run
            tail = f"; verified {' '.join(rec.checks.get('verified', ())) or 'nothing'}" + tail
            if s.get("executions") is not None:
                what += f", {s['executions']} execution(s)"
        head = f"{paint('ok', '32', color)}   {run} ({rec.input}, {_loc(rec)}, {n}): {printable(what)}{tail}"
        return "\n".join([head, *_coverage_lines(rec)])
    if rec.verdict == "unreadable":
        return (f"{paint('UNREADABLE', '33;1', color)} {run} ({rec.input}, {printable(rec.file)}:{rec.error_line}): "
                f"{printable(rec.error or '')}")
    v = rec.violation
    if v is None:  # pragma: no cover - a violating record always carries its violation
        return f"{paint('FAIL', '31;1', color)} {run} ({rec.input}, {_loc(rec)}, {n})"
    head = f"{paint('FAIL', '31;1', color)} {run} ({rec.input}, {_loc(rec)}, {n}): {v.rule} {v.kind}"
    if v.invariant:
        head += f", invariant {v.invariant}"
    at = rec.at or {}
    where = []
    if at.get("event") is not None:
        where.append(f"event {at['event']}")
    if at.get("seq") is not None:
        where.append(f"seq {printable(str(at['seq']))}")
    if at.get("path"):
        where.append(printable(str(at["path"])))
    if at.get("line") is not None:
        where.append(f"line {at['line']}")
    if rec.amends:
        where.append("after the run was reported as conforming")
    lines = [head + (f" — at {', '.join(where)}" if where else "")]
    lines += ["  " + printable(x) for x in v.explanation.splitlines()]
    if v.invariants:
        lines.append(f"  Invariants the observed behaviour breaks: {', '.join(v.invariants)}")
    if rec.prefix is not None and "events" in rec.prefix:
        lines.append(f"  Longest conforming prefix: {rec.prefix['events']} event(s)"
                     + (f", {rec.prefix['steps']} step(s)" if rec.prefix.get("steps") is not None else "")
                     + (f", up to line {rec.prefix['lastLine']}" if rec.prefix.get("lastLine") else ""))
    if rec.checks:
        c = rec.checks
        lines.append(f"  Checks: verified {' '.join(c.get('verified', ())) or 'none'}; assumed "
                     f"{' '.join(c.get('assumed', ())) or 'none'}; not witnessed "
                     f"{' '.join(c.get('notWitnessed', ())) or 'none'}")
    lines += _coverage_lines(rec)
    return "\n".join(lines)


def _coverage_lines(rec: RunRecord) -> list[str]:
    """A telemetry run's notes (how its spans were read) and why each rule is verified, assumed or not witnessed,
    one line per reason (the rules no GenAI trace records share the last line)."""
    out = [f"  note: {printable(str(x))}" for x in (rec.summary or {}).get("notes", ())]
    why = rec.checks.get("why") if rec.checks else None
    if not isinstance(why, dict) or rec.input not in TELEMETRY_FORMATS:
        return out
    for key, label in (("verified", "verified"), ("assumed", "assumed"), ("notWitnessed", "not witnessed")):
        groups: dict[str, list[str]] = {}
        for r in rec.checks.get(key, ()):
            if r in why:
                groups.setdefault(why[r], []).append(r)
        out += [f"  {label} {' '.join(rs)}: {printable(reason)}" for reason, rs in groups.items()]
    if "others" in why:
        out.append(f"  not witnessed, the others: {printable(why['others'])}")
    return out


def _safe_json(value: Json) -> str:
    try:
        return safejson.dumps(value, indent=2)
    except (RecursionError, ValueError, TypeError):
        return safejson.dumps(_truncate(value, 32), indent=2)


def _truncate(value: Json, depth: int) -> Json:
    """A copy of ``value`` that JSON can always hold: nesting cut at ``depth``, anything else that is
    not JSON (a non-finite number, an object) shown as text."""
    if depth <= 0:
        return "<nested too deeply to show>"
    if isinstance(value, dict):
        return {str(k): _truncate(v, depth - 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_truncate(v, depth - 1) for v in value]
    if isinstance(value, float) and value - value != 0.0:
        return repr(value)
    if value is None or isinstance(value, (str, int, float)):
        return value
    return repr(value)


class JsonWriter:
    """Streams ``{"runs": [...], "inputErrors": [...], "summary": {...}, "assumptions": {...}, "next": ...}``
    (``next``: the command the text report's ``next:`` line names, or null).
    The input errors listed are the first :data:`~loopspec.oracle._records.MAX_ERRORS_SHOWN` of each
    file (the summary counts them all, and ``inputErrorsNotListed`` says how many are not listed)."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self.n = 0
        self.errors: list[InputError] = []
        self.not_listed = 0
        self.inputs: set[str] = set()
        out.write('{\n"runs": [')

    def record(self, rec: RunRecord) -> None:
        self.out.write(("," if self.n else "") + "\n" + _indent(_safe_json(rec.to_json())))
        self.n += 1
        self.inputs.add(rec.input)

    def error(self, e: InputError, listed: bool = True) -> None:
        if listed:
            self.errors.append(e)
        else:
            self.not_listed += 1

    def close(self, summary: Summary, next_command: str | None = None) -> None:
        notes: dict[str, Json] = {}
        for kind in sorted(self.inputs):
            a = assumption_notes(kind)
            if a:
                notes[kind] = a
        if "ledger" in self.inputs:
            notes.setdefault("ledger", {})
            notes["ledger"] = {"assumed": notes["ledger"], "notWitnessed": dict(LEDGER_NOT_WITNESSED)}
        summ = summary.to_json()
        if self.not_listed:
            summ["inputErrorsNotListed"] = self.not_listed
        self.out.write("\n],\n" + '"inputErrors": ' + safejson.dumps([e.to_json() for e in self.errors], compact=False)
                       + ',\n"summary": ' + safejson.dumps(summ, compact=False)
                       + ',\n"assumptions": ' + safejson.dumps(notes, compact=False)
                       + ',\n"next": ' + safejson.dumps(next_command, compact=False) + "\n}\n")


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


# --------------------------------------------------------------------------------------------
# Diagrams
# --------------------------------------------------------------------------------------------


def _safe_name(run: str) -> str:
    import hashlib

    s = re.sub(r"[^A-Za-z0-9._-]+", "_", run)[:60].strip("._") or "run"
    return f"{s}-{hashlib.sha256(run.encode()).hexdigest()[:8]}"


def write_diagram(out_dir: Path, rec: RunRecord, spec_file: str | None = None) -> list[Path]:
    """Draw ``rec``'s path on the spec machine: path.json plus the overlaid machine (dot, mmd, md, svg)."""
    import graphviz

    from ..judge.verdict import default_spec
    from ..render import extract_machine, machine_dot, machine_mermaid, make_overlay, overlay_markdown
    from ..render.overlay import Trace
    from ..spec.loader import load_rules
    from ..support.text import write_atomic

    assert rec.trace is not None
    d = out_dir / _safe_name(rec.run)
    spec = default_spec()
    machine = extract_machine(spec, load_rules(None, spec))
    tr = rec.trace
    trace = Trace(tuple(tr["path"]), tr.get("failed"), tr.get("start"), str(tr.get("label", "")))
    ov = make_overlay(machine, trace)
    written: list[Path] = []
    files = {"path.json": safejson.dumps(dict(tr), indent=2) + "\n", "machine-trace.dot": machine_dot(machine, ov),
             "machine-trace.mmd": machine_mermaid(machine, ov),
             "machine-trace.md": overlay_markdown(machine, ov, image="machine-trace.svg")}
    for fname, text in files.items():
        write_atomic(d / fname, text)
        written.append(d / fname)
    try:
        data = graphviz.pipe("dot", "svg", machine_dot(machine, ov).encode("utf-8"), quiet=True)
    except (graphviz.ExecutableNotFound, graphviz.CalledProcessError):
        return written
    write_atomic(d / "machine-trace.svg", data)
    written.append(d / "machine-trace.svg")
    return written


# --------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------


def _file_job(args: tuple[str, str, Options]) -> FileResult:
    path, fmt, opts = args
    return check_file(path, input_format=fmt, options=opts)


def results(files: Sequence[str], fmt: str, opts: Options, jobs: int,
            on_open: Callable[[IO[bytes]], None] | None = None,
            on_read: Callable[[Callable[[], int]], None] | None = None) -> Iterator[tuple[RunRecord | InputError,
                                                                                          Summary | None]]:
    """Records and errors in file order; a file's summary follows its last item (as the second element).
    ``on_open`` sees each file as it is opened (one process only); ``on_read`` is given how to tell the
    bytes read of a file split across processes.

    With one ledger file and ``jobs`` other than 1, the file itself is split across processes by run
    (``oracle._split``): the same records in the same order."""
    workers = (os.cpu_count() or 1) if jobs == 0 else jobs
    if len(files) == 1 and workers > 1 and files[0] != "-" and fmt in ("auto", "ledger") \
            and os.path.isfile(files[0]) and (fmt == "ledger" or is_ledger(files[0], opts)):
        s = Summary()
        for item in check_split(files[0], workers, options=opts, summary=s, on_read=on_read):
            yield item, None
        yield _END, s
        return
    if jobs == 1 or len(files) == 1:
        for f in files:
            s = Summary()
            for item in iter_check_file(f, input_format=fmt, options=opts, summary=s, on_open=on_open):
                yield item, None
            yield _END, s
        return
    with ProcessPoolExecutor(max_workers=min(workers, len(files))) as pool:
        for res in pool.map(_file_job, [(f, fmt, opts) for f in files]):
            for rec in res.records:
                yield rec, None
            for e in res.errors:
                yield e, None
            yield _END, res.summary


_END: Any = object()


class _Reading:
    """How far the check has read, for the progress line: bytes of the files (read position of the open
    one, sampled from a thread without touching the reader), or files done with --jobs > 1."""

    def __init__(self, files: Sequence[str], parallel: bool) -> None:
        self.parallel = parallel
        self.files = len(files)
        sizes = []
        for f in files:
            try:
                sizes.append(os.stat(f).st_size if f != "-" and os.path.isfile(f) else None)
            except OSError:
                sizes.append(0)
        self.total = None if any(x is None for x in sizes) else sum(x or 0 for x in sizes)
        self.sizes = sizes
        self.done_files = 0
        self.done_bytes = 0
        self.fd: int | None = None
        self.read: Callable[[], int] | None = None  # the bytes read of a file split across processes
        self.runs = 0
        self.violations = 0

    def reading(self, read: Callable[[], int]) -> None:
        """The open file is read by other processes: ``read()`` tells how far they are."""
        self.read = read

    def opened(self, fh: IO[bytes]) -> None:
        try:
            self.fd = fh.fileno()
        except (OSError, ValueError, io.UnsupportedOperation):
            self.fd = None

    def file_done(self) -> None:
        size = self.sizes[self.done_files] if self.done_files < len(self.sizes) else None
        self.done_bytes += size or 0
        self.done_files += 1
        self.fd = None
        self.read = None

    def status(self, seconds: float) -> Status:
        phase = f"{self.runs:,} runs checked"
        if self.parallel or self.total is None:
            return Status("check", seconds, self.done_files, self.files, "files", findings=self.violations,
                          finding="violation", phase=phase)
        pos = 0
        fd = self.fd
        if self.read is not None and self.done_files < len(self.sizes):
            pos = min(self.read(), self.sizes[self.done_files] or 0)
        elif fd is not None and self.done_files < len(self.sizes):
            try:
                pos = min(os.lseek(fd, 0, os.SEEK_CUR), self.sizes[self.done_files] or 0)
            except OSError:
                pos = 0
        return Status("check", seconds, self.done_bytes + pos, self.total, "bytes", findings=self.violations,
                      finding="violation", phase=phase)


def suggestion(args: argparse.Namespace, rec: RunRecord | None, diagram_dir: Path | None) -> NextStep | None:
    """What to run after a check that found a violation (``rec``, the first violating run): the text's last
    lines and the JSON's ``"next"``. None when no run violates the spec."""
    import shlex

    if rec is None:
        return None
    doc = "docs/oracle.md; docs/cli.md#what-to-run-next"
    rule = rec.violation.rule if rec.violation is not None else ""
    if diagram_dir is not None and rec.trace is not None:
        d = diagram_dir / _safe_name(rec.run)
        return NextStep(f"loopspec diagram --trace {shlex.quote(str(d / 'path.json'))} --render svg --out "
                        f"{default_out('diagram')}", f"run {printable(repr(rec.run))}'s path on the spec machine, "
                        f"the failing step ({rule}) in red (also drawn in {printable(str(d))}/)", doc=doc)
    files = " ".join(shlex.quote(f) for f in args.files)
    if rec.trace is not None:
        return NextStep(f"loopspec check {files} --quiet --out {default_out('check')}",
                        f"the same check, drawing each violating run's path on the spec machine (first: "
                        f"{printable(repr(rec.run))}, {rule})", doc=doc)
    return NextStep(f"loopspec check {files} --format json", f"every verdict with its events, for run "
                    f"{printable(repr(rec.run))} ({rule})", doc=doc)


def _diagram_dir(arg: str | None, flag: str = "--out") -> Path | None:
    """``--out DIR`` (or its older spelling ``--diagram DIR``, named as the user typed it), checked before any
    work: a directory (or one that can be made) we can write."""
    if not arg:
        return None
    d = Path(arg)
    probe = d
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        what = "is" if probe == d else f"is under {printable(str(probe))}, which is"
        raise UsageError(f"{flag} {printable(arg)}: {what} not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {printable(arg)}: cannot write in {printable(str(probe))}")
    return d


class ReportOut:
    """Where the report goes (stdout), guarded: the first write that fails (its reader went away, the disk is
    full, the stream is closed) is remembered, later writes are dropped, and the check goes on to the end —
    its exit code must not depend on what reads its output."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.error: str | None = None  # why the report could not be written (None: it was)
        self.closed_by_reader = False  # the reader closed the pipe (EPIPE): the usual end of `| head`
        if getattr(stream, "_stream", stream) is None:  # the process was started with stdout closed (>&-)
            self.error = "stdout is closed"

    def write(self, text: str) -> int:
        if self.error is None:
            try:
                self.stream.write(text)
            except (OSError, ValueError) as exc:
                self._failed(exc)
        return len(text)

    def line(self, text: str) -> None:
        self.write(text + "\n")

    def flush(self) -> None:
        if self.error is None:
            try:
                self.stream.flush()
            except (OSError, ValueError) as exc:
                self._failed(exc)

    def _failed(self, exc: BaseException) -> None:
        self.closed_by_reader = isinstance(exc, BrokenPipeError) or getattr(exc, "errno", None) == errno.EPIPE
        self.error = (exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)) or type(exc).__name__
        # what is still buffered goes nowhere: else the interpreter's last flush fails again at exit
        with contextlib.suppress(OSError, ValueError, AttributeError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())
            os.close(devnull)

    def exit_code(self, code: int) -> int:
        """The check's exit code given what happened to its report (see the module's docstring)."""
        if self.error is None or self.closed_by_reader:
            return code
        return code if code else 2


def expand_directories(files: list[str]) -> list[str]:
    """Each directory among ``files`` as the files under it, recursively, in name order; files and directories
    whose name starts with a dot are left out. A directory that holds no file is a usage error."""
    out: list[str] = []
    for f in files:
        p = Path(f)
        if f == "-" or not p.is_dir():
            out.append(f)
            continue
        found = sorted(str(x) for x in p.rglob("*") if x.is_file()
                       and not any(part.startswith(".") for part in x.relative_to(p).parts))
        if not found:
            raise UsageError(f"{printable(f)}: a directory that holds no file to check")
        out += found
    return out


def handle(args: argparse.Namespace) -> int:
    if args.max_line_bytes < 1024:
        raise UsageError("--max-line-bytes must be at least 1024")
    if args.files.count("-") > 1:
        raise UsageError("stdin ('-') can be given once")
    args.files = expand_directories(args.files)
    typed = getattr(args, "argv", None)
    typed = sys.argv[1:] if typed is None else typed
    flag = "--diagram" if any(a == "--diagram" or a.startswith("--diagram=") for a in typed) else "--out"
    diagram_dir = _diagram_dir(args.out, flag)
    first_violation: RunRecord | None = None
    check_report_paths(args)
    if args.validate:
        schema = default_spec_path().parent / "schema" / "ledger-event.schema.json"
        if not schema.is_file():
            raise UsageError(f"--validate checks events against {schema}, which does not exist")
    opts = Options(max_line=args.max_line_bytes, allow_incomplete=args.allow_incomplete, validate=args.validate)
    out = ReportOut(sys.stdout)
    color = out.error is None and use_color(sys.stdout) and args.format == "text"
    total = Summary()
    writer = JsonWriter(out) if args.format == "json" else None  # type: ignore[arg-type]
    drawn = undrawn = 0
    shown: Counter[str] = Counter()  # input errors shown per file (the first MAX_ERRORS_SHOWN)
    line = progress_line(args)
    jobs = resolve_jobs(args.jobs)
    reading = _Reading(args.files, parallel=jobs != 1 and len(args.files) > 1)
    reports = CheckReports(args, getattr(args, "argv", None)) if args.html or args.junit else None
    with line.ticking(lambda: reading.status(line.elapsed())):
        for item, file_summary in results(args.files, args.input_format, opts, jobs, on_open=reading.opened,
                                             on_read=reading.reading):
            if item is _END:
                assert file_summary is not None
                total.merge(file_summary)
                reading.file_done()
                continue
            with line.suspended():
                if isinstance(item, InputError):
                    listed = shown[item.file] < MAX_ERRORS_SHOWN
                    if listed:
                        shown[item.file] += 1
                        print(f"loopspec check: error: {printable(item.text())}", file=sys.stderr)
                        if shown[item.file] == MAX_ERRORS_SHOWN:
                            print(f"loopspec check: error: {printable(item.file)}: more than {MAX_ERRORS_SHOWN} input errors: "
                                  "the rest are counted, not shown", file=sys.stderr)
                    if writer is not None:
                        writer.error(item, listed)
                    if reports is not None:
                        reports.error(item)
                    continue
                rec = item
                reading.runs += 1
                reading.violations += rec.violation is not None
                if first_violation is None and rec.violation is not None:
                    first_violation = rec
                if rec.verdict == "unreadable":
                    who = "" if repr(rec.run) in (rec.error or "") else f"run {rec.run!r}: "
                    print(f"loopspec check: error: {printable(rec.file)}:{rec.error_line}: {printable(who + (rec.error or ''))}",
                          file=sys.stderr)
                if diagram_dir is not None and rec.trace is not None and rec.violation is not None:
                    try:
                        write_diagram(diagram_dir, rec)
                        drawn += 1
                    except Exception as exc:  # a drawing problem never hides the verdict
                        undrawn += 1
                        print(f"loopspec check: warning: no diagram for run {printable(repr(rec.run))}: "
                              f"{printable(str(exc))}", file=sys.stderr)
                if reports is not None:
                    reports.record(rec)
                if writer is not None:
                    writer.record(rec)
                elif rec.verdict != "conforms" or not args.quiet:
                    out.line(record_text(rec, color))
    step = suggestion(args, first_violation, diagram_dir)
    if writer is not None:
        writer.close(total, next_json(step))
    else:
        out.line(total.line())
        if diagram_dir is not None and drawn:
            out.line(f"diagrams of {drawn} violating run(s): {printable(str(diagram_dir))}/"
                     + (f" ({undrawn} could not be drawn)" if undrawn else ""))
        if step is not None and out.error is None:
            step.print()
    out.flush()
    code = total.exit_code
    if out.error is not None and not out.closed_by_reader:
        print(f"loopspec check: error: the report could not be written to stdout ({printable(out.error)}); the "
              f"check ran to the end: {total.line()}", file=sys.stderr)
    if reports is not None:
        for path in reports.finish(total, code, next_json(step)):
            print(f"loopspec check: wrote {path}", file=sys.stderr)
    code = out.exit_code(code)
    return EXIT_USAGE if code == 2 else code
