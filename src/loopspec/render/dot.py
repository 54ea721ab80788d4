"""Graphviz DOT for the loop machine and the per-call check flow (pure: IR in, DOT text out).

The DOT is built with the ``graphviz`` package; only the command line runs ``dot`` on it. Node
names are state ids and every transition id appears in an edge label (bold) and in the edge's
``id``, so a rendered SVG can be checked for completeness.
"""

from __future__ import annotations

from html import escape
from typing import Any

import graphviz

from . import style as st
from .model import CheckFlow, Decision, Edge, Machine, StateNode, merged_edges
from .overlay import Overlay

__all__ = ["check_flow_dot", "machine_dot", "machine_svg_ids"]

WRAP = 40
GEN_NOTE = "generated from spec/loop.toml by `loopspec diagram`; do not edit"


def _e(text: str) -> str:
    return escape(text, quote=True)


def short_effect(e: Edge) -> str:
    """Compact effect text for a drawn edge: the error code, ``stop REASON``, or the effect name."""
    if e.code:
        return e.code
    if e.stop_reason:
        return f"stop {e.stop_reason}"
    if e.escalates:
        return f"stop ‹{e.escalates}›"
    return e.effect or ""


def _steps_text(nums: list[int], limit: int = 6) -> str:
    shown = " ".join(f"#{n}" for n in nums[:limit])
    return shown + (f" …+{len(nums) - limit}" if len(nums) > limit else "")


def _needs_wrap(members: tuple[Edge, ...]) -> bool:
    return max(len(m.id) + len(m.guard) + len(short_effect(m)) for m in members) > WRAP


def _row(e: Edge, ov: Overlay | None, *, lead: str = "", wrap: bool = False) -> str:
    text = f"<b>{_e(e.id)}</b> {lead}"
    if e.guard:
        text += _e(e.guard) + " "
    eff = short_effect(e)
    if eff:
        if wrap:
            text = text.rstrip() + '<br align="left"/>      '
        text += "/ " + _e(eff)
    extra = ""
    if ov is not None and ov.has_trace:
        steps = ov.steps_of(e.id)
        failed = [s.number for s in steps if s.failed]
        ok = [s.number for s in steps if not s.failed]
        if ok:
            extra += f' <font color="{st.PATH_COLOR}"><b>{_steps_text(ok)}</b></font>'
        if failed:
            extra += f' <font color="{st.FAIL_COLOR}"><b>✖ #{failed[0]}</b></font>'
    if ov is not None and ov.has_coverage:
        n = ov.count(e.id)
        colour = st.UNHIT_COLOR if n == 0 else st.INK
        extra += f' <font color="{colour}"><b>×{n}</b></font>'
    if ov is not None and ov.has_trace and not ov.steps_of(e.id):
        text = f'<font color="{st.MUTED}">{text.rstrip()}</font>'
    return f'<tr><td align="left">{text.rstrip()}{extra}</td></tr>'


def _label(rows: list[str]) -> str:
    return '<<table border="0" cellborder="0" cellspacing="0" cellpadding="1">' + "".join(rows) + "</table>>"


def _edge_attrs(members: tuple[Edge, ...], ov: Overlay | None) -> dict[str, str]:
    colour, style_, pen = st.EDGE_STYLE[members[0].kind]
    attrs = {"color": colour, "fontcolor": colour if members[0].kind != "normal" else st.INK,
             "style": style_, "penwidth": str(pen)}
    if ov is not None:
        attrs["fontcolor"] = st.INK
    if ov is not None and ov.has_coverage:
        n = sum(ov.count(m.id) for m in members)
        if n == 0:
            attrs.update(color=st.UNHIT_COLOR, style="dotted", penwidth="1.2")
        else:
            attrs.update(color=st.coverage_color(n, ov.top), penwidth=str(st.coverage_penwidth(n, ov.top)),
                         style="solid")
    if ov is not None and ov.has_trace:
        steps = [s for m in members for s in ov.steps_of(m.id)]
        if any(s.failed for s in steps):
            attrs.update(color=st.FAIL_COLOR, penwidth="3.2", style="solid", fontcolor=st.FAIL_COLOR)
        elif steps:
            attrs.update(color=st.PATH_COLOR, penwidth="2.8", style="solid", fontcolor=st.INK)
        elif not ov.has_coverage:
            attrs.update(color=st.FAINT, fontcolor=st.MUTED, penwidth="1.0")
    return attrs


def _state_label(s: StateNode, drive: tuple[str, ...], ov: Overlay | None, fontcolor: str) -> str:
    sub = st.MUTED if fontcolor == st.INK and not (ov is not None and ov.has_coverage) else fontcolor
    lines = [f'<font point-size="13"><b>{_e(s.id)}</b></font>']
    if s.terminal:
        if (s.status or "").lower() != s.id.lower():
            lines.append(f'<font point-size="9">{_e(s.status or "")}</font>')
        reasons = list(s.stop_reasons)
        for i in range(0, len(reasons), 2):
            lines.append(f'<font point-size="8" color="{sub}">{_e(" · ".join(reasons[i:i + 2]))}</font>')
    elif drive:
        lines.append(f'<font point-size="9" color="{sub}">on {_e(", ".join(drive))}</font>')
    if ov is not None and ov.has_coverage:
        lines.append(f'<font point-size="9"><b>×{ov.state_count(s.id)}</b></font>')
    return "<" + "<br/>".join(lines) + ">"


def _state_attrs(s: StateNode, ov: Overlay | None) -> dict[str, str]:
    if s.terminal:
        fill, line = st.STATUS_STYLE.get(s.status or "", (st.STATE_FILL, st.STATE_LINE))
    else:
        fill, line = st.STATE_FILL, st.STATE_LINE
    attrs = {"fillcolor": fill, "color": line, "fontcolor": st.INK, "penwidth": "1.4"}
    if s.terminal:
        attrs.update(peripheries="2", margin="0.2,0.1")
    if ov is not None and ov.has_coverage:
        n = ov.state_count(s.id)
        fill = st.coverage_color(n, ov.top)
        attrs.update(fillcolor=fill, fontcolor=st.text_on(fill))
        if n == 0:
            attrs.update(color=st.UNHIT_COLOR, style="rounded,filled,dashed")
    if ov is not None and ov.has_trace:
        failed = ov.failed_step
        if failed is not None and s.id == failed.dest:
            attrs.update(color=st.FAIL_COLOR, penwidth="3")
            if not ov.has_coverage:
                attrs.update(fillcolor=st.FAIL_FILL)
        elif s.id in ov.visited:
            attrs.update(color=st.PATH_COLOR, penwidth="2.6")
            if not ov.has_coverage:
                attrs.update(fillcolor=st.PATH_FILL)
        elif not ov.has_coverage:
            attrs.update(fillcolor="#ffffff", color=st.FAINT, fontcolor=st.MUTED)
    return attrs


def _legend_row(sample: str, colour: str, text: str) -> str:
    return (f'<tr><td align="left"><font color="{colour}"><b>{sample}</b></font></td>'
            f'<td align="left">{text}</td></tr>')


def _legend(ov: Overlay | None) -> str:
    rows = ['<tr><td colspan="2" align="left"><b>Legend</b></td></tr>']
    base = [
        ("━━━", "normal", "transition <b>Tnn</b> [guard] / effect; from one state, tried in Tnn order"),
        ("╍╍╍", "error", "answers the request with that error code; the run goes on"),
        ("━━━", "abort", "ends the run, not COMPLETED (‹kind›: stop reason of the escalated code)"),
        ("━━━", "complete", "ends the run COMPLETED"),
    ]
    if ov is not None and (ov.has_trace or ov.has_coverage):
        base = [("━━━", "normal", "transition <b>Tnn</b> [guard] / effect (dashed: answers an error code)")]
    for sample, kind, text in base:
        rows.append(_legend_row(sample, st.EDGE_STYLE[kind][0], text))
    rows.append(_legend_row("¬ ∧", st.INK, "¬g: guard g fails · a ∧ b: both hold"))
    if ov is not None and ov.has_trace:
        rows.append(_legend_row("━━━", st.PATH_COLOR, "the traced path; <b>#n</b>: step n"))
        rows.append(_legend_row("━━━", st.FAIL_COLOR, "<b>✖ #n</b>: the failing step"))
    if ov is not None and ov.has_coverage:
        top = max(ov.top, 1)
        swatches = "".join(
            f'<font color="{st.coverage_color(n, top)}">█</font>'
            for n in sorted({1, max(1, top // 8), max(1, top // 3), max(1, top // 2), top})
        )
        rows.append(_legend_row(swatches, st.INK, f"hits: light = few, dark = many (max {top}); <b>×n</b>: count"))
        rows.append(_legend_row("┈┈┈", st.UNHIT_COLOR, "never hit (×0)"))
    return '<table border="1" color="#d1d5db" cellborder="0" cellspacing="0" cellpadding="2">' + "".join(rows) + "</table>"


def _graph(name: str, title: str, dpi: int | None, **extra: str) -> graphviz.Digraph:
    gattr = {
        "fontname": st.FONT, "fontsize": "11", "labelloc": "t", "labeljust": "l", "label": title,
        "bgcolor": "white", "pad": "0.3", "nodesep": "0.45", "ranksep": "0.55", "newrank": "true",
        **extra,
    }
    if dpi:
        gattr["dpi"] = str(dpi)
    return graphviz.Digraph(
        name,
        graph_attr=gattr,
        node_attr={"fontname": st.FONT, "fontsize": "11", "shape": "box", "style": "rounded,filled"},
        edge_attr={"fontname": st.FONT, "fontsize": "10", "arrowsize": "0.7"},
    )


def merged_edge_id(members: tuple[Edge, ...]) -> str:
    """The SVG element id of a drawn edge bundling ``members`` (one transition, or several of one group)."""
    return "_".join(m.id for m in members)


def wide_edge_id(e: Edge, source: str | None) -> str:
    """The SVG element id of a transition leaving several states: drawn once from the "running" cluster
    (``source`` None) or once per source state."""
    return e.id if source is None else f"{e.id}_{source}"


def machine_svg_ids(machine: Machine) -> dict[str, dict[str, str]]:
    """Where each transition is drawn in the SVG that :func:`machine_dot` renders: transition id -> {source
    state -> the id of the edge's ``<g>`` element}, and each state's element is ``state-<id>``. What a page
    uses to highlight a path on the drawn machine."""
    out: dict[str, dict[str, str]] = {}
    for src, _dst, members in merged_edges(machine):
        for m in members:
            out.setdefault(m.id, {})[src] = merged_edge_id(members)
    all_active = {s.id for s in machine.active_states}
    for e in machine.edges:
        if len(e.sources) > 1:
            whole = set(e.sources) == all_active
            out[e.id] = {s: wide_edge_id(e, None if whole else s) for s in e.sources}
    return out


def machine_dot(machine: Machine, overlay: Overlay | None = None, *, dpi: int | None = None) -> str:
    """The loop machine as DOT. ``overlay`` draws a trace and/or coverage on it."""
    ov = overlay if overlay is not None and (overlay.has_trace or overlay.has_coverage) else None
    lines = [f'<font point-size="15"><b>{_e(machine.name)} {_e(machine.version)} — the tool-calling loop machine</b></font>']
    if ov is not None and ov.has_trace:
        fs = ov.failed_step
        tail = f", failing step #{fs.number} ({_e(fs.transition)})" if fs else ", no failing step"
        lines.append(f"trace: {_e(ov.trace_label or 'path')} — {len(ov.steps)} steps{tail}")
    if ov is not None and ov.has_coverage:
        hit = sum(1 for _, n in ov.counts if n)
        lines.append(f"coverage: {_e(ov.coverage_label or 'counts')} — {hit}/{len(ov.counts)} transitions hit")
    lines.append(f'<font point-size="9" color="{st.MUTED}">{_e(GEN_NOTE)}</font>')
    title = ('<<table border="0" cellspacing="0" cellpadding="0"><tr>'
             f'<td align="left" valign="top">{"<br/>".join(lines)}</td><td width="40"></td>'
             f'<td align="left" valign="top">{_legend(ov)}</td></tr></table>>')
    g = _graph("loop_machine", title, dpi, compound="true", rankdir="LR", ranksep="0.4")

    all_active = {s.id for s in machine.active_states}
    terminal_ids = {s.id for s in machine.terminal_states}
    wide = [e for e in machine.edges if len(e.sources) > 1]
    drive = {
        s.id: tuple(t for t in s.triggers if not any(w.trigger == t and set(w.sources) == all_active for w in wide))
        for s in machine.states
    }

    def node(c: Any, s: StateNode) -> None:
        attrs = _state_attrs(s, ov)
        tip = s.doc + (" Invariants: " + ", ".join(s.invariants) + "." if s.invariants else "")
        c.node(s.id, _state_label(s, drive[s.id], ov, attrs["fontcolor"]), id=f"state-{s.id}", tooltip=tip, **attrs)

    g.node("__start", "", shape="circle", style="filled", fillcolor=st.INK, color=st.INK, width="0.18",
           fixedsize="true", tooltip="initial state")
    with g.subgraph(name="cluster_active") as c:
        c.attr(label="running", fontcolor=st.MUTED, color="#cbd5e1", style="rounded,dashed", margin="14")
        for s in machine.active_states:
            node(c, s)
    with g.subgraph(name="cluster_terminal") as c:
        c.attr(label="terminal (absorbing): one per status", fontcolor=st.MUTED, color="#cbd5e1",
               style="rounded,dashed", margin="14", rank="same")
        for s in machine.terminal_states:
            node(c, s)
    g.edge("__start", machine.initial, color=st.INK, arrowsize="0.7")

    # A state with a self-loop draws it on top; its incoming edges enter from the west so that
    # they do not cross the loop's label.
    looped = {src for src, dst, _ in merged_edges(machine) if src == dst}
    for src, dst, members in merged_edges(machine):
        wrap = _needs_wrap(members)
        rows = [_row(m, ov, wrap=wrap) for m in members]
        tip = "; ".join(f"{m.id} {m.name}: {m.label} ({', '.join(m.rules)})" for m in members)
        # minlen 2 into the terminal column leaves a rank of room for the labels there.
        g.edge(src, dst, _label(rows), id=merged_edge_id(members), tooltip=tip,
               minlen="2" if dst in terminal_ids else "1", **({"headport": "w"} if dst in looped and src != dst else {}),
               **_edge_attrs(members, ov))
    for e in wide:
        tip = f"{e.id} {e.name}: {e.label} ({', '.join(e.rules)})"
        if set(e.sources) == all_active:
            lead = f"<i>{_e(e.trigger)}, from any running state</i> "
            # Drawn from the border of the "running" cluster (ltail), marked with a dot at its tail.
            g.edge(machine.active_states[-1].id, e.dest, _label([_row(e, ov, lead=lead)]), id=wide_edge_id(e, None),
                   tooltip=tip,
                   ltail="cluster_active", dir="both", arrowtail="dot", minlen="2", **_edge_attrs((e,), ov))
        else:
            for s in e.sources:
                g.edge(s, e.dest, _label([_row(e, ov, lead=f"<i>{_e(e.trigger)}</i> ")]),
                       id=wide_edge_id(e, s), tooltip=tip, **_edge_attrs((e,), ov))

    return g.source


# --------------------------------------------------------------------------------------------
# The per-call check flow
# --------------------------------------------------------------------------------------------


def _outcome_label(d: Decision) -> str:
    colour = st.EDGE_STYLE[d.kind][0] if d.kind != "normal" else st.INK
    head = d.code or (d.effect_label.split("(", 1)[1].rstrip(")") if d.kind in ("abort", "complete") else d.effect or "")
    return (f'<<font color="{colour}"><b>{_e(head)}</b></font><br/>'
            f'<font point-size="9" color="{st.MUTED}">{_e(d.transition)} → {_e(d.dest)}</font>>')


_OUT_FILL = {"error": "#fff7ed", "abort": "#fee2e2", "complete": "#dcfce7", "normal": st.STATE_FILL}


def check_flow_dot(flow: CheckFlow, *, dpi: int | None = None) -> str:
    """The per-call decision flow (R1): one question per transition, top to bottom in check order.

    A transition into the next group's state (``validated``) joins that group's entry node, so the
    flow reads as one path from the item at the cursor to the execution.
    """
    legend = "".join([
        _legend_row("╍╍╍", st.EDGE_STYLE["error"][0], "answered with that error code (the mode decides whether the run goes on)"),
        _legend_row("━━━", st.EDGE_STYLE["abort"][0], "ends the run, not COMPLETED"),
        _legend_row("━━━", st.EDGE_STYLE["complete"][0], "ends the run COMPLETED"),
    ])
    title = ('<<table border="0" cellspacing="0" cellpadding="2"><tr><td>'
             f'<font point-size="14"><b>{_e(flow.name)} {_e(flow.version)} — the per-call check order (R1)</b></font><br/>'
             f"questions are asked top to bottom; the first answer that fires a transition decides<br/>"
             f'<font point-size="9" color="{st.MUTED}">{_e(GEN_NOTE)}</font></td></tr><tr><td>'
             f'<table border="1" color="#d1d5db" cellborder="0" cellspacing="0" cellpadding="2">{legend}</table>'
             "</td></tr></table>>")
    g = _graph("check_flow", title, dpi, rankdir="TB", ranksep="0.3", nodesep="0.6")
    groups = flow.by_group()
    entries = [f"entry_{gi}" for gi in range(len(groups))]
    for gi, ((state, trigger), _) in enumerate(groups):
        g.node(entries[gi], f'<<font point-size="13"><b>{_e(state)}</b></font><br/>'
               f'<font point-size="9" color="{st.MUTED}">on {_e(trigger)}</font>>',
               id=f"state-{state}", fillcolor=st.STATE_FILL, color=st.STATE_LINE, penwidth="1.4")
    for gi, ((_state, _trigger), decisions) in enumerate(groups):
        nxt = groups[gi + 1][0][0] if gi + 1 < len(groups) else None
        cur: str | None = entries[gi]
        cur_label = ""
        for d in decisions:
            joins = nxt is not None and d.dest == nxt
            target = entries[gi + 1] if joins else f"out_{d.transition}"
            colour, style_, pen = st.EDGE_STYLE[d.kind]
            if not joins:
                g.node(target, _outcome_label(d), fillcolor=_OUT_FILL[d.kind], color=colour, fontsize="10",
                       penwidth="1.2")
            fire = d.fires_on + (f" / {d.effect}" if joins and d.effect else "")
            tip = f"{d.transition}: rules {', '.join(d.rules)}"
            if d.question:
                q = f"q_{d.transition}"
                g.node(q, f'<<font point-size="8" color="{st.MUTED}">{_e(d.transition)}</font><br/>'
                       f"<b>{_e(d.question)}</b>>", shape="diamond", style="filled", fillcolor="#ffffff",
                       color=st.STATE_LINE, margin="0.03,0.02", id=f"q-{d.transition}", tooltip=tip)
                if cur is not None:
                    g.edge(cur, q, cur_label, color=st.INK, fontcolor=st.MUTED, weight="20")
                if not joins:
                    with g.subgraph() as r:
                        r.attr(rank="same")
                        r.node(q)
                        r.node(target)
                g.edge(q, target, f"<<b>{_e(fire)}</b>>", color=colour, style=style_, penwidth=str(pen),
                       fontcolor=colour if d.kind != "normal" else st.INK, id=d.transition, tooltip=tip,
                       weight="20" if joins else "1")
                cur, cur_label = q, ("no" if d.fires_on == "yes" else "yes")
            else:
                if cur is not None:
                    g.edge(cur, target, cur_label, color=colour, style=style_, penwidth=str(pen),
                           fontcolor=st.MUTED, id=d.transition, tooltip=tip, weight="20")
                cur, cur_label = None, ""
    return g.source
