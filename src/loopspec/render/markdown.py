"""Markdown tables for the loop machine, the check order and the overlays (pure: IR in, text out)."""

from __future__ import annotations

from collections.abc import Sequence

from .dot import GEN_NOTE
from .model import CheckFlow, Edge, Machine
from .overlay import Overlay

__all__ = ["check_flow_markdown", "machine_markdown", "overlay_markdown"]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ") or "—"


def _code(text: str) -> str:
    return f"`{text}`" if text else "—"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows]
    return out


def _outcome(e: Edge) -> str:
    if e.code:
        return f"answers `{e.code}`"
    if e.stop_reason:
        return f"stops `{e.stop_reason}`"
    if e.escalates:
        return f"stops with the {e.escalates} code's reason"
    return "—"


def machine_markdown(machine: Machine, image: str | None = None) -> str:
    """States and transitions of the machine as Markdown tables (``image``: a picture to embed)."""
    lines = [f"# {machine.name} {machine.version} — the loop machine", "", f"<!-- {GEN_NOTE} -->", ""]
    if image:
        lines += [f"![the loop machine]({image})", ""]
    lines += [
        f"The machine starts in `{machine.initial}`. From a state, a trigger tries the transitions that "
        "leave it on that trigger top to bottom (R0): the first whose guards hold fires (`¬g`: guard `g` "
        "fails). Terminal states are absorbing.",
        "",
        "## States",
        "",
    ]
    rows = []
    for s in machine.states:
        rows.append([
            f"`{s.id}`" + (" (initial)" if s.initial else ""),
            s.phase,
            ", ".join(f"`{t}`" for t in s.triggers) or "—",
            (f"**{s.status}**: " + ", ".join(f"`{r}`" for r in s.stop_reasons)) if s.terminal else "—",
            ", ".join(s.invariants) or "—",
            s.doc,
        ])
    lines += _table(["state", "phase", "triggers", "terminal status: stop reasons", "invariants (via rules)", "meaning"], rows)
    lines += ["", "## Transitions", ""]
    rows = []
    for e in machine.edges:
        rows.append([
            f"**{e.id}**", f"`{e.name}`", ", ".join(f"`{s}`" for s in e.sources), f"`{e.trigger}`",
            f"{e.order}/{e.group_size}", _code(e.guard), f"`{e.dest}`", _code(e.effect_label), _outcome(e),
            ", ".join(e.rules) or "—",
        ])
    lines += _table(["id", "name", "from", "trigger", "order", "guard", "to", "effect", "answer / stop", "rules"], rows)
    lines += ["", "## Invariants", ""]
    lines += _table(["invariant", "property"], [[f"`{i}`", doc] for i, doc in machine.invariants])
    return "\n".join(lines) + "\n"


def check_flow_markdown(flow: CheckFlow, image: str | None = None) -> str:
    lines = [f"# {flow.name} {flow.version} — the per-call check order (R1)", "", f"<!-- {GEN_NOTE} -->", ""]
    if image:
        lines += [f"![the per-call check order]({image})", ""]
    groups = ", then ".join(f"the `{t}` transitions leaving `{s}`" for s, t in flow.groups)
    lines += [
        f"Each item at the cursor goes through {groups}, in the order of `loop.toml`; the first "
        "question whose answer fires a transition decides.",
        "",
    ]
    rows = []
    for d in flow.decisions:
        rows.append([
            str(d.step), f"**{d.transition}**", f"`{d.state}` on `{d.trigger}`",
            _code(d.question) if d.question else "(otherwise)", d.fires_on or "—", f"`{d.dest}`",
            _code(d.effect_label), ", ".join(d.rules) or "—",
        ])
    lines += _table(["step", "transition", "from", "question", "fires on", "to", "effect", "rules"], rows)
    return "\n".join(lines) + "\n"


def overlay_markdown(machine: Machine, ov: Overlay, image: str | None = None) -> str:
    """The trace steps and/or the coverage counts as tables."""
    lines = [f"# {machine.name} {machine.version} — overlay", "", f"<!-- {GEN_NOTE} -->", ""]
    if image:
        lines += [f"![overlay]({image})", ""]
    if ov.has_trace:
        fs = ov.failed_step
        lines += [f"## Trace: {ov.trace_label or 'path'}", "",
                  f"{len(ov.steps)} steps" + (f"; step {fs.number} ({fs.transition}) failed." if fs else "; no failing step."), ""]
        rows = []
        for s in ov.steps:
            e = machine.edge(s.transition)
            rows.append([str(s.number) + (" ✖" if s.failed else ""), f"**{e.id}** `{e.name}`", f"`{s.source}`",
                         f"`{e.trigger}`", _code(e.guard), f"`{s.dest}`", _code(e.effect_label)])
        lines += _table(["step", "transition", "from", "trigger", "guard", "to", "effect"], rows)
        lines.append("")
    if ov.has_coverage:
        hit = [t for t, n in ov.counts if n]
        unhit = [t for t, n in ov.counts if not n]
        lines += [f"## Coverage: {ov.coverage_label or 'counts'}", "",
                  f"{len(hit)}/{len(ov.counts)} transitions hit"
                  + (f"; never hit: {', '.join(unhit)}." if unhit else "; every transition hit."), ""]
        rows = [[f"**{e.id}**", f"`{e.name}`", ", ".join(e.sources), e.dest, str(ov.count(e.id))] for e in machine.edges]
        lines += _table(["transition", "name", "from", "to", "hits"], rows)
        lines += ["", "| state | visits |", "|---|---|"]
        lines += [f"| `{s}` | {n} |" for s, n in ov.state_counts]
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"
