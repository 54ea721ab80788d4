"""The operation machine of SPEC.md section 6 (``spec/writes.toml``) as DOT, Mermaid and Markdown.

Pure: the loaded :class:`~loopspec.spec.writes.WriteSpec` in, text out. One node per operation
state, one edge per transition (``Wnn name``, with the rules it follows); the crash points are listed
beside the machine. ``unknown`` (OUTCOME_UNKNOWN) is drawn in amber, ``confirmed`` (final) in green,
``failed`` in red; reconciliation edges are dashed.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from ..spec.writes import OpTransition, WriteSpec
from . import style as st

__all__ = ["writes_dot", "writes_markdown", "writes_mermaid"]

GEN_NOTE = "generated from spec/writes.toml by `loopspec diagram`; do not edit"
_FILL = {"confirmed": ("#dcfce7", "#15803d"), "failed": ("#fee2e2", "#b91c1c"), "unknown": ("#fef3c7", "#b45309")}
_PLAIN = ("#eef2f7", "#334155")


def _edges(ws: WriteSpec) -> list[tuple[str, str, list[OpTransition]]]:
    """Transitions merged per (source, destination), in file order."""
    out: dict[tuple[str, str], list[OpTransition]] = {}
    for t in ws.transitions:
        for s in t.sources:
            out.setdefault((s, t.dest), []).append(t)
    return [(s, d, ts) for (s, d), ts in out.items()]


def _reconciling(t: OpTransition) -> bool:
    return t.name.startswith("reconcile_")


def writes_dot(ws: WriteSpec, *, dpi: int | None = None) -> str:
    esc = html.escape
    title = f"loopspec writes {ws.version} — one operation in the operation ledger (SPEC.md section 6)"
    crash = "".join(f'<tr><td align="left"><b>{esc(c.id)}</b></td><td align="left">{esc(c.doc)}</td></tr>'
                    for c in ws.crash_points)
    lines = [
        "digraph writes {",
        f'\tgraph [bgcolor=white fontname="{st.FONT}" fontsize=11 labeljust=l labelloc=t pad=0.3 rankdir=LR '
        f'nodesep=0.5 ranksep=0.6{f" dpi={dpi}" if dpi else ""} label=<<table border="0" cellspacing="0" cellpadding="1">'
        f'<tr><td align="left" colspan="2"><font point-size="15"><b>{esc(title)}</b></font></td></tr>'
        f'<tr><td align="left" colspan="2"><font point-size="9" color="#6b7280">{esc(GEN_NOTE)}</font></td></tr>'
        f'<tr><td align="left" colspan="2"><b>crash points</b> (a process may die at each; recovery, R46)</td></tr>{crash}</table>>]',
        f'\tnode [fontname="{st.FONT}" fontsize=11 shape=box style="rounded,filled"]',
        f'\tedge [arrowsize=0.7 fontname="{st.FONT}" fontsize=10]',
        '\t__start [label="" shape=circle style=filled fillcolor="#1f2937" color="#1f2937" fixedsize=true width=0.18]',
    ]
    for s in ws.states:
        fill, line = _FILL.get(s.id, _PLAIN)
        extra = " peripheries=2" if s.final else ""
        label = s.id + (" (OUTCOME_UNKNOWN)" if s.id == "unknown" else "")
        lines.append(f'\t{s.id} [label="{esc(label)}" fillcolor="{fill}" color="{line}" id="op-{s.id}"'
                     f' tooltip="{esc(s.doc)}"{extra}]')
    initial = next(s.id for s in ws.states if s.initial)
    lines.append(f'\t__start -> {initial} [color="#1f2937"]')
    for src, dst, ts in _edges(ws):
        label = "\\n".join(f"{t.id} {t.name} ({', '.join(t.rules)})" for t in ts)
        dashed = all(_reconciling(t) for t in ts)
        color = _FILL.get(dst, _PLAIN)[1] if src != dst else "#374151"
        tip = " ".join(f"{t.id}: {t.doc}" for t in ts)
        lines.append(f'\t{src} -> {dst} [label="{esc(label)}" color="{color}" fontcolor="{color}"'
                     f' style={"dashed" if dashed else "solid"} id="{"_".join(t.id for t in ts)}" tooltip="{esc(tip)}"]')
    lines.append("}")
    return "\n".join(lines) + "\n"


def writes_mermaid(ws: WriteSpec) -> str:
    lines = ["---", f"title: loopspec writes {ws.version} — one operation in the operation ledger", "---",
             f"%% {GEN_NOTE}", "stateDiagram-v2", "    direction LR"]
    initial = next(s.id for s in ws.states if s.initial)
    lines.append(f"    [*] --> {initial}")
    for src, dst, ts in _edges(ws):
        label = ", ".join(f"{t.id} {t.name}" for t in ts)
        lines.append(f"    {src} --> {dst} : {label}")
    for s in ws.states:
        if s.id in _FILL:
            fill, line = _FILL[s.id]
            lines.append(f"    classDef {s.id}_style fill:{fill},stroke:{line}")
            lines.append(f"    class {s.id} {s.id}_style")
    return "\n".join(lines) + "\n"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    def cell(x: str) -> str:
        return x.replace("|", "\\|").replace("\n", " ") or "—"

    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    return out + ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]


def writes_markdown(ws: WriteSpec, image: str | None = None) -> str:
    lines = [f"# loopspec writes {ws.version} — one operation in the operation ledger", "", f"<!-- {GEN_NOTE} -->", ""]
    if image:
        lines += [f"![the operation machine]({image})", ""]
    lines += ["Each transition is one durable transaction (R40). SPEC.md section 6 gives the rules.", "", "## States", ""]
    lines += _table(["state", "meaning"], [[f"`{s.id}`" + (" (initial)" if s.initial else "") + (" (final)" if s.final else ""),
                                           s.doc] for s in ws.states])
    lines += ["", "## Transitions", ""]
    lines += _table(["id", "name", "from", "to", "rules", "meaning"],
                    [[t.id, f"`{t.name}`", ", ".join(f"`{s}`" for s in t.sources), f"`{t.dest}`", ", ".join(t.rules), t.doc]
                     for t in ws.transitions])
    lines += ["", "## Crash points", ""]
    lines += _table(["crash point", "after", "state of the world"], [[f"`{c.id}`", f"`{c.fields['after']}`", c.doc]
                                                                     for c in ws.crash_points])
    lines += ["", "## Invariants", ""]
    lines += _table(["invariant", "property"], [[f"`{i.id}`", i.doc] for i in ws.invariants])
    return "\n".join(lines) + "\n"
