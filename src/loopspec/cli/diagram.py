"""``loopspec diagram``: render the spec's diagrams, optionally with a trace or coverage overlay.

Writes, into ``--out`` (default ``loopspec-out/diagram``), for each diagram one file per format:

* ``machine.*`` — the loop machine; ``check-order.*`` — the per-call check order (R1); ``writes.*`` —
  one write's operation in the operation ledger (section 6, from ``writes.toml`` beside the spec);
* with ``--trace`` / ``--coverage``: only the overlaid machine, ``machine-trace.*``,
  ``machine-coverage.*`` or ``machine-trace-coverage.*``.

Formats (``--render``, repeatable): ``dot`` (Graphviz source), ``svg`` and ``png`` (rendered by
Graphviz's ``dot``), ``mermaid`` (``.mmd``, renders on GitHub) and ``md`` (Markdown tables). Without
``--render`` every format is written. ``--format`` is the report, as on every command: ``text`` lists
the files written, ``json`` prints them as one JSON document; the older ``--format svg`` (any file
format) still means ``--render svg``.

Exit codes: 0 when every requested file was written. When Graphviz's ``dot`` is not installed the
text formats are still written and one line says how to install it; that is exit 0 when no format
was asked for (svg/png are then skipped), and **exit 2** when ``--format svg`` or ``--format png``
was asked for explicitly with ``--render`` (the command could not do what it was told). Unreadable or malformed
overlay input: a one-line error naming the file and line, exit 2.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ..support.text import printable, write_atomic
from ._common import (
    EXIT_OK,
    EXIT_USAGE,
    FORMAT_HELP,
    UsageError,
    add_out_option,
    add_progress_option,
    add_quiet_option,
    add_spec_option,
)

if TYPE_CHECKING:
    from ..spec.loader import Spec

# The spec loader, the renderers and graphviz are imported by the functions that use them: `loopspec --help`
# needs only register()

FORMATS: Final = ("svg", "png", "dot", "mermaid", "md")
#: --format's report formats (a file format given to --format means --render, the older spelling)
REPORTS: Final = ("text", "json")
EXTENSION: Final = {"svg": "svg", "png": "png", "dot": "dot", "mermaid": "mmd", "md": "md"}
RENDERED: Final = ("svg", "png")
PNG_DPI: Final = 144
INSTALL_HINT: Final = (
    "Graphviz's `dot` was not found, so no svg/png was written; install Graphviz "
    "(Debian/Ubuntu: apt-get install -y graphviz; macOS: brew install graphviz) and run again"
)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "diagram",
        help="render the spec's diagrams (SVG/PNG via Graphviz, DOT, Mermaid, Markdown); overlay a trace or coverage",
        description=__doc__.split("\n\n", 1)[0].split(": ", 1)[1] if __doc__ else None,
        epilog="Exit codes: 0 written; 2 usage error, unreadable input, or an explicitly requested svg/png "
               "that Graphviz could not produce.",
    )
    p.add_argument("--render", action="append", choices=FORMATS, metavar="{" + ",".join(FORMATS) + "}",
                   help="a file format to write (repeatable; default: all of them)")
    p.add_argument("--format", action="append", choices=(*REPORTS, *FORMATS), metavar="{text,json}",
                   help=f"how to print the report: text ({FORMAT_HELP['text']}: the files written), json (the files "
                        "written as one JSON document on stdout); default: text. A file format here (svg, png, dot, "
                        "mermaid, md) still means --render, as it used to")
    add_out_option(p, "diagram", "one file per diagram and format (machine.svg, check-order.dot, ...)")
    add_quiet_option(p, "errors, not the files written")
    add_progress_option(p)  # accepted for one vocabulary; rendering takes about a second
    add_spec_option(p)
    p.add_argument("--trace", metavar="FILE",
                   help='draw a path: {"path": [...], "failed": n} (transition-path.schema.json) or a run ledger (NDJSON)')
    p.add_argument("--coverage", metavar="FILE",
                   help='shade by hits: {"transitions": {...}} (transition-coverage.schema.json) or a run ledger')
    p.add_argument("--run", metavar="ID",
                   help="which run of a ledger to use (default: the first for --trace, all runs for --coverage)")
    p.set_defaults(handler=handle)


@dataclass(frozen=True)
class Job:
    stem: str
    dot: str
    dot_png: str
    mermaid: str
    markdown: str


def _read(path: str) -> str:
    from ..support import safejson

    try:  # the hardened loader: at most 16 MiB of UTF-8 (a leading BOM skipped); file:line: reason
        return safejson.read_text(path, what="overlay file")
    except safejson.JsonInputError as exc:
        raise UsageError(str(exc)) from None


def _rules(spec: Spec, spec_file: str | None) -> tuple[Any, ...]:
    from ..spec.loader import load_rules

    if spec_file is None:
        return load_rules(None, spec)
    md = Path(spec_file).with_name("SPEC.md")
    if md.is_file():
        return load_rules(md, spec)
    print(f"loopspec diagram: warning: no rules text ({printable(str(md))} does not exist): the diagrams name no rules",
          file=sys.stderr)
    return ()


def _write_jobs(spec: Spec) -> list[Job]:
    """``writes.*``: the operation machine of section 6, when ``writes.toml`` is beside the spec."""
    from ..render.writes import writes_dot, writes_markdown, writes_mermaid
    from ..spec.writes import load_write_spec

    path = Path(spec.path).with_name("writes.toml") if spec.path else None
    if path is None or not path.is_file():
        return []
    ws = load_write_spec(path)
    return [Job("writes", writes_dot(ws), writes_dot(ws, dpi=PNG_DPI), writes_mermaid(ws),
                writes_markdown(ws, image="writes.svg"))]


def jobs(spec: Spec, rules: tuple[Any, ...], trace_file: str | None, coverage_file: str | None,
         run: str | None) -> list[Job]:
    from ..render import (
        OverlayError,
        check_flow_dot,
        check_flow_markdown,
        check_flow_mermaid,
        extract_check_flow,
        extract_machine,
        machine_dot,
        machine_markdown,
        machine_mermaid,
        make_overlay,
        overlay_markdown,
        read_coverage,
        read_trace,
    )

    machine = extract_machine(spec, rules)
    if trace_file is None and coverage_file is None:
        flow = extract_check_flow(spec)
        return [
            Job("machine", machine_dot(machine), machine_dot(machine, dpi=PNG_DPI), machine_mermaid(machine),
                machine_markdown(machine, image="machine.svg")),
            Job("check-order", check_flow_dot(flow), check_flow_dot(flow, dpi=PNG_DPI), check_flow_mermaid(flow),
                check_flow_markdown(flow, image="check-order.svg")),
            *_write_jobs(spec),
        ]
    try:
        trace = read_trace(_read(trace_file), trace_file, machine, run) if trace_file else None
        cov = read_coverage(_read(coverage_file), coverage_file, machine, run) if coverage_file else None
    except OverlayError as exc:
        raise UsageError(str(exc)) from None
    ov = make_overlay(machine, trace, cov)
    stem = "machine" + ("-trace" if trace else "") + ("-coverage" if cov else "")
    return [Job(stem, machine_dot(machine, ov), machine_dot(machine, ov, dpi=PNG_DPI), machine_mermaid(machine, ov),
                overlay_markdown(machine, ov, image=f"{stem}.svg"))]


def handle(args: argparse.Namespace) -> int:
    import graphviz

    from ..spec.loader import load_spec

    given = args.format or []
    reports = [f for f in given if f in REPORTS]
    if len(set(reports)) > 1:
        raise UsageError("--format: give text or json, not both")
    report = reports[0] if reports else "text"
    wanted = [*(args.render or []), *(f for f in given if f in FORMATS)]
    formats = tuple(dict.fromkeys(wanted)) if wanted else FORMATS
    explicit = bool(wanted)
    if args.run is not None and not (args.trace or args.coverage):
        raise UsageError("--run picks a run of a ledger given with --trace or --coverage")
    spec = load_spec(args.spec)
    todo = jobs(spec, _rules(spec, args.spec), args.trace, args.coverage, args.run)
    out = Path(args.out)
    no_dot = False
    failed: list[str] = []
    written: list[str] = []
    for job in todo:
        for fmt in formats:
            path = out / f"{job.stem}.{EXTENSION[fmt]}"
            if fmt == "dot":
                write_atomic(path, job.dot)
            elif fmt == "mermaid":
                write_atomic(path, job.mermaid)
            elif fmt == "md":
                write_atomic(path, job.markdown)
            else:
                if no_dot:
                    continue
                src = job.dot if fmt == "svg" else job.dot_png
                try:
                    data = graphviz.pipe("dot", fmt, src.encode("utf-8"), quiet=True)
                except graphviz.ExecutableNotFound:
                    no_dot = True
                    continue
                except graphviz.CalledProcessError as exc:
                    err = (exc.stderr or b"").decode("utf-8", "replace").strip().splitlines()
                    failed.append(f"{path}: Graphviz failed: {err[0] if err else exc.returncode}")
                    continue
                write_atomic(path, data)
            written.append(str(path))
            if report == "text" and not args.quiet:
                print(path)
    if no_dot:
        print(f"loopspec diagram: {INSTALL_HINT}", file=sys.stderr)
    for f in failed:
        print(f"loopspec diagram: error: {f}", file=sys.stderr)
    code = EXIT_USAGE if failed or (no_dot and explicit and any(f in RENDERED for f in formats)) else EXIT_OK
    if report == "json":
        import json

        print(json.dumps({"format": "loopspec-diagram/1", "ok": code == EXIT_OK, "out": str(out), "files": written,
                          "skipped": [f for f in RENDERED if f in formats] if no_dot else [], "errors": failed},
                         indent=2, ensure_ascii=False))
    return code
