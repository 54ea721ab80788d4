"""A report as one self-contained HTML page: ``loopspec fuzz|check|verify --html FILE``.

One file, nothing fetched: the styles, the script, the data and the SVG of the spec machine are inside it,
and its Content-Security-Policy forbids any request (``default-src 'none'``), so it opens the same from a CI
artifact, a mail attachment or a disk with no network. What it shows:

* the verdict and the facts of the run (examples, steps, runs, states…), the command line that made it;
* per rule (fuzz, verify) the result CI would show, from the report's JUnit cases;
* every finding or run as a row of a table — filtered by verdict, by rule and by text, paginated (a page
  of 50 rows is in the document at a time, so a report of twenty thousand rows stays fast); a row opens to
  its "Let … Then …" explanation, its reduced case as step tables, its path on the machine as a table, the
  command that replays it and its files;
* the spec machine, drawn by Graphviz from the spec (:func:`.dot.machine_dot`): the open row's path is
  highlighted on it (each step numbered, the failing one in red) and the coverage can be shaded on it.
  Without Graphviz the page says so and the path tables still show every step.

Everything taken from an input (ids, names, explanations: what an implementation or a recording said) is
put in the page as text by the script (``textContent``), never as markup, and the embedded JSON escapes
``<``, ``>`` and ``&``, so no input can end the script or inject an element.

:func:`report_html` is pure: the command line renders the SVG (:func:`.dot.machine_dot` through Graphviz)
and writes the file.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Mapping
from typing import Any, Final

from .dot import machine_svg_ids
from .model import Machine
from .report import Report, rule_sort_key

__all__ = ["PAGE_SIZE", "report_html"]

Json = Any

#: Rows of the findings table in the document at a time.
PAGE_SIZE: Final = 50

_OUTCOME_TEXT: Final = {"passed": "PASSED", "failed": "FAILED", "incomplete": "INCOMPLETE", "interrupted": "INTERRUPTED"}


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _script_json(doc: Json) -> str:
    """JSON that is safe inside ``<script type="application/json">``: no ``</script>``, no ``<!--``."""
    text = json.dumps(doc, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e") \
        .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


_SVG_PROLOGUE: Final = re.compile(r"\A.*?(?=<svg\b)", re.S)


def inline_svg(svg: str) -> str:
    """Graphviz's SVG document made an element of the page: without the XML prologue, the doctype and the
    comments before it, scaled to the width of its box."""
    body = _SVG_PROLOGUE.sub("", svg, count=1)
    body = re.sub(r'<svg width="[^"]*" height="[^"]*"', '<svg id="ls-svg" role="img" aria-label="the spec machine"',
                  body, count=1)
    return body


def _machine_json(machine: Machine) -> dict[str, Json]:
    return {
        "initial": machine.initial,
        "transitions": {e.id: {"name": e.name, "label": e.label, "sources": list(e.sources), "dest": e.dest,
                               "rules": list(e.rules), "kind": e.kind} for e in machine.edges},
        "svgIds": machine_svg_ids(machine),
    }


def _summary_html(report: Report) -> str:
    rows = "".join(f"<div><dt>{_e(k)}</dt><dd>{_e(v)}</dd></div>" for k, v in report.summary)
    return f'<dl class="facts">{rows}</dl>' if rows else ""


def _rules_html(report: Report) -> str:
    if not report.cases:
        return ""
    c = report.counts()
    head = (f"{c['tests']} checks: {c['tests'] - c['failures'] - c['errors'] - c['skipped']} passed, "
            f"{c['failures']} failed, {c['errors']} in error, {c['skipped']} skipped")
    if len(report.cases) > 500:  # a per-run list (check): the table below has the runs
        return f'<section id="ls-rules"><h2>Checks</h2><p>{_e(head)} (the same as the JUnit file).</p></section>'
    rows = []
    for case in report.cases:
        label = {"passed": "passed", "failed": "FAILED", "error": "ERROR", "skipped": "skipped"}[case.status]
        msg = case.message or (case.text.splitlines()[0] if case.text else "")
        rows.append(f'<tr class="st-{case.status}"><td><span class="badge b-{case.status}">{label}</span></td>'
                    f"<td>{_e(case.name)}</td><td>{_e(msg)}</td></tr>")
    return (f'<section id="ls-rules"><h2>Checks</h2><p>{_e(head)} — what a CI system shows from the JUnit file.</p>'
            f'<table class="grid rules"><thead><tr><th>result</th><th>check</th><th>detail</th></tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table></section>")


def _coverage_html(report: Report, machine: Machine) -> str:
    if report.coverage is None:
        return ""
    cov = report.coverage
    hit = sum(1 for e in machine.edges if cov.get(e.id, 0))
    rows = []
    for e in machine.edges:
        n = cov.get(e.id, 0)
        rows.append(f'<tr class="{"cov-miss" if not n else ""}"><td><code>{_e(e.id)}</code></td><td>{_e(e.name)}</td>'
                    f"<td>{_e(', '.join(e.sources))} → {_e(e.dest)}</td><td class=\"num\">{n:,}</td></tr>")
    label = f" ({_e(report.coverage_label)})" if report.coverage_label else ""
    return (f'<section id="ls-coverage"><h2>Spec coverage</h2><p>{hit} of the {len(machine.edges)} transitions of the '
            f"machine were taken{label}; the ones never taken are marked. <button type=\"button\" "
            f'id="ls-cov-toggle">shade the diagram by coverage</button></p>'
            f'<table class="grid cov"><thead><tr><th>transition</th><th>name</th><th>from → to</th><th>times taken</th>'
            f"</tr></thead><tbody>{''.join(rows)}</tbody></table></section>")


def report_html(report: Report, machine: Machine, svg: str | None, *, diagram_note: str = "") -> str:
    """The page for ``report``. ``svg`` is the machine as Graphviz draws :func:`.dot.machine_dot` (None when
    Graphviz is not installed: ``diagram_note`` then says how to get it)."""
    items = [it.to_json() for it in report.items]
    rules_seen = sorted({it.rule for it in report.items if it.rule}, key=rule_sort_key)
    data = {
        "format": "loopspec-html-report/1",
        "command": report.command,
        "noun": report.item_noun,
        "items": items,
        "notListed": dict(report.items.not_listed),
        "byVerdict": dict(report.items.by_verdict),
        "rules": {r: report.rules.get(r, "") for r in rules_seen},
        "pageSize": PAGE_SIZE,
        "machine": _machine_json(machine),
        "coverage": report.coverage,
    }
    outcome = _OUTCOME_TEXT[report.outcome]
    notes = "".join(f"<p class=\"note\">{_e(n)}</p>" for n in report.notes)
    next_step = (f'<p class="next">Next: <code>{_e(report.next_step)}</code></p>' if report.next_step else "")
    diagram = (f'<div id="ls-diagram" class="diagram">{inline_svg(svg)}</div>' if svg else
               f'<div id="ls-diagram" class="diagram missing"><p>{_e(diagram_note or "No diagram: Graphviz is not installed.")}'
               "</p></div>")
    meta = " · ".join(x for x in (report.timestamp, f"loopspec {report.version}" if report.version else "",
                                  f"{report.seconds:.1f} s" if report.seconds is not None else "") if x)
    return _PAGE.format(
        title=_e(report.title), outcome_class=report.outcome, outcome=outcome, command_line=_e(report.command_line),
        meta=_e(meta), exit_code=report.exit_code, summary=_summary_html(report), notes=notes, next_step=next_step,
        rules=_rules_html(report), coverage=_coverage_html(report, machine), diagram=diagram,
        noun=_e(report.item_noun), data=_script_json(data), css=_CSS, js=_JS,
    )


def verdict_counts(data: Mapping[str, Json]) -> dict[str, int]:
    """The rows per verdict a page's data lists (for tests)."""
    out: dict[str, int] = {}
    for it in data["items"]:
        out[it["verdict"]] = out.get(it["verdict"], 0) + 1
    return out


_PAGE: Final = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="loopspec">
<link rel="icon" href="data:,">
<title>{title}</title>
<style>{css}</style>
</head>
<body>
<header>
<h1>{title} <span id="ls-outcome" class="outcome o-{outcome_class}">{outcome}</span></h1>
<p class="cmd"><code>{command_line}</code> <span class="muted">exit {exit_code} · {meta}</span></p>
{summary}{notes}{next_step}
</header>
<main>
<div class="cols">
<div class="left">
<section id="ls-items"><h2 id="ls-items-title">{noun}s</h2>
<div class="filters">
<label>verdict <select id="ls-f-verdict"></select></label>
<label>rule <select id="ls-f-rule"></select></label>
<label>search <input id="ls-f-text" type="search" placeholder="id, rule, text"></label>
<span id="ls-count" class="muted"></span>
</div>
<table class="grid items"><thead><tr><th>verdict</th><th>rule</th><th>{noun}</th><th>what happened</th><th>where</th></tr></thead>
<tbody id="ls-rows"></tbody></table>
<div class="pager"><button type="button" id="ls-prev">previous</button> <span id="ls-page"></span>
<button type="button" id="ls-next">next</button></div>
<p id="ls-empty" class="muted" hidden>No row matches.</p>
</section>
{rules}
{coverage}
</div>
<div class="right">
<section id="ls-machine"><h2>The spec machine</h2>
<p id="ls-caption" class="muted">Open a row to see its path on the machine.</p>
<div class="dtools"><button type="button" id="ls-fit">actual size</button> <button type="button" id="ls-clear">clear the path</button></div>
{diagram}
</section>
</div>
</div>
</main>
<footer class="muted">A self-contained report written by loopspec: no network, no external files.</footer>
<script id="loopspec-data" type="application/json">{data}</script>
<script>{js}</script>
</body>
</html>
"""

_CSS: Final = """
:root{--ink:#0f172a;--muted:#64748b;--line:#e2e8f0;--bg:#f8fafc;--red:#dc2626;--green:#15803d;--amber:#b45309;--blue:#1d4ed8}
*{box-sizing:border-box}body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--ink);background:#fff}
header{padding:16px 24px;border-bottom:1px solid var(--line);background:var(--bg)}
h1{font-size:20px;margin:0 0 6px}h2{font-size:16px;margin:18px 0 8px}
code,pre{font:12.5px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
pre{white-space:pre-wrap;word-break:break-word;background:var(--bg);border:1px solid var(--line);padding:8px;margin:6px 0}
.muted{color:var(--muted)}.note{color:var(--amber)}.next code{background:#eef2ff;padding:2px 6px;border-radius:4px}
.outcome{font-size:13px;padding:2px 10px;border-radius:12px;color:#fff;vertical-align:middle}
.o-passed{background:var(--green)}.o-failed{background:var(--red)}.o-incomplete,.o-interrupted{background:var(--amber)}
.facts{display:flex;flex-wrap:wrap;gap:4px 18px;margin:8px 0}.facts div{display:flex;gap:6px}.facts dt{color:var(--muted)}.facts dd{margin:0;font-weight:600}
main{padding:0 24px 24px}.cols{display:flex;gap:24px;align-items:flex-start}.left{flex:1 1 55%;min-width:0}.right{flex:1 1 45%;min-width:0;position:sticky;top:0;max-height:100vh;overflow:auto}
@media (max-width:1100px){.cols{display:block}.right{position:static;max-height:none}}
table.grid{border-collapse:collapse;width:100%}table.grid th,table.grid td{border-bottom:1px solid var(--line);padding:4px 6px;text-align:left;vertical-align:top}
table.grid th{background:var(--bg);font-weight:600}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.item{cursor:pointer}tr.item:hover,tr.item:focus{background:#f1f5f9;outline:none}tr.item.open{background:#eef2ff}
tr.cov-miss td{color:var(--red)}
.badge{display:inline-block;font-size:11.5px;padding:1px 7px;border-radius:9px;border:1px solid currentColor;white-space:nowrap}
.b-fails,.b-failed,.b-error{color:var(--red)}.b-passes,.b-passed{color:var(--green)}.b-unreadable,.b-skipped{color:var(--amber)}
.filters{display:flex;flex-wrap:wrap;gap:10px;align-items:center;margin:6px 0}select,input,button{font:inherit}
.pager{margin:8px 0}.details td{background:#fff;padding:8px 10px 14px}
.details h3{font-size:13.5px;margin:10px 0 4px}.steps{border-collapse:collapse;margin:4px 0 8px;width:100%}
.steps th,.steps td{border:1px solid var(--line);padding:3px 6px;text-align:left;vertical-align:top;font-size:12.5px}
.steps th{background:var(--bg)}.steps tr.failing td{background:#fee2e2}
.replay{display:flex;gap:6px;align-items:center}.replay code{background:var(--bg);padding:3px 6px;border:1px solid var(--line);word-break:break-all}
.diagram{border:1px solid var(--line);overflow:auto;background:#fff}.diagram svg{width:100%;height:auto;display:block}
.diagram.actual svg{width:auto}.diagram.missing{padding:12px}.dtools{margin:4px 0}
#ls-svg g.ls-path path{stroke:var(--blue)!important;stroke-width:3.5px!important}
#ls-svg g.ls-path polygon{stroke:var(--blue)!important;fill:var(--blue)!important}
#ls-svg g.ls-fail path{stroke:var(--red)!important;stroke-width:4px!important}
#ls-svg g.ls-fail polygon{stroke:var(--red)!important;fill:var(--red)!important}
#ls-svg g.ls-visited>polygon,#ls-svg g.ls-visited>ellipse,#ls-svg g.ls-visited path{stroke:var(--blue)!important;stroke-width:2.5px!important}
#ls-svg text.ls-stepno{font:bold 15px system-ui,sans-serif;fill:#fff;paint-order:stroke;stroke:var(--blue);stroke-width:5px}
#ls-svg text.ls-stepno.fail{stroke:var(--red)}
#ls-svg.ls-cov g.edge.cov-0 path{stroke:var(--red)!important;stroke-dasharray:5 4}
#ls-svg.ls-cov g.edge.cov-1 path{stroke:#93c5fd!important;stroke-width:2px!important}
#ls-svg.ls-cov g.edge.cov-2 path{stroke:#3b82f6!important;stroke-width:3px!important}
#ls-svg.ls-cov g.edge.cov-3 path{stroke:#1e3a8a!important;stroke-width:4.5px!important}
footer{padding:12px 24px;border-top:1px solid var(--line)}
"""

_JS: Final = r"""
"use strict";
(function () {
  const D = JSON.parse(document.getElementById("loopspec-data").textContent);
  const M = D.machine;
  const S = {verdict: "all", rule: "all", text: "", page: 0, open: null};
  const $ = (id) => document.getElementById(id);
  const svg = document.getElementById("ls-svg");
  const VERDICT = {fails: "fails", passes: "conforms", unreadable: "unreadable"};

  function el(tag, attrs, children) {
    const n = document.createElement(tag);
    if (attrs) for (const [k, v] of Object.entries(attrs)) {
      if (k === "text") n.textContent = v; else if (k === "cls") n.className = v; else n.setAttribute(k, v);
    }
    for (const c of children || []) if (c !== null && c !== undefined) n.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    return n;
  }

  function option(sel, value, label) { sel.appendChild(el("option", {value: value, text: label})); }

  function setupFilters() {
    const v = $("ls-f-verdict");
    option(v, "all", "all (" + D.items.length + ")");
    for (const [k, n] of Object.entries(D.byVerdict)) if (n > 0) option(v, k, VERDICT[k] + " (" + n + ")");
    const r = $("ls-f-rule");
    option(r, "all", "all");
    for (const [id, title] of Object.entries(D.rules)) option(r, id, title ? id + " — " + title.slice(0, 60) : id);
    v.addEventListener("change", () => { S.verdict = v.value; S.page = 0; draw(); });
    r.addEventListener("change", () => { S.rule = r.value; S.page = 0; draw(); });
    const t = $("ls-f-text");
    t.addEventListener("input", () => { S.text = t.value.trim().toLowerCase(); S.page = 0; draw(); });
    $("ls-prev").addEventListener("click", () => { if (S.page > 0) { S.page--; draw(); } });
    $("ls-next").addEventListener("click", () => { S.page++; draw(); });
  }

  function matches(it) {
    if (S.verdict !== "all" && it.verdict !== S.verdict) return false;
    if (S.rule !== "all" && it.rule !== S.rule) return false;
    if (S.text) {
      const hay = (it.key + " " + (it.rule || "") + " " + it.title + " " + it.where).toLowerCase();
      if (!hay.includes(S.text)) return false;
    }
    return true;
  }

  function table(t) {
    const head = el("tr", null, t.columns.map((c) => el("th", {text: c})));
    const body = t.rows.map((r, i) => el("tr", {cls: i === t.failing ? "failing" : ""}, r.map((c) => el("td", {text: c}))));
    return el("div", null, [el("h3", {text: t.title}), el("table", {cls: "steps"}, [el("thead", null, [head]), el("tbody", null, body)])]);
  }

  function pathSteps(p) {
    const out = [];
    let cur = p.start || M.initial;
    p.path.forEach((tid, i) => {
      const t = M.transitions[tid];
      const src = t && t.sources.includes(cur) ? cur : (t ? t.sources[0] : cur);
      out.push({n: i + 1, tid: tid, t: t, src: src, dest: t ? t.dest : "?", failed: p.failed === i});
      cur = t ? t.dest : cur;
    });
    return out;
  }

  function pathTable(p) {
    const rows = pathSteps(p).map((s) => [String(s.n), s.tid, s.t ? s.t.name : "(unknown transition)", s.src + " → " + s.dest,
      s.t ? s.t.label : "", s.t ? s.t.rules.join(", ") : ""]);
    const failing = p.failed === null || p.failed === undefined ? null : p.failed;
    return table({title: "Its path on the spec machine" + (p.label ? " (" + p.label + ")" : ""),
                  columns: ["step", "transition", "name", "from → to", "trigger [guard] / effect", "rules"], rows: rows, failing: failing});
  }

  function details(it) {
    const parts = [];
    if (it.explanation) parts.push(el("h3", {text: "Why it breaks the spec"}), el("pre", {cls: "explanation", text: it.explanation}));
    if (it.facts.length) parts.push(el("table", {cls: "steps facts-table"}, [el("tbody", null,
      it.facts.map(([k, v]) => el("tr", null, [el("th", {text: k}), el("td", {text: v})])))]));
    for (const t of it.tables) parts.push(table(t));
    if (it.path) parts.push(pathTable(it.path));
    if (it.replay) {
      const code = el("code", {cls: "replay-cmd", text: it.replay});
      const btn = el("button", {type: "button", text: "copy"});
      btn.addEventListener("click", (ev) => {
        ev.stopPropagation();
        if (navigator.clipboard) navigator.clipboard.writeText(it.replay).then(() => { btn.textContent = "copied"; }, () => {});
      });
      parts.push(el("h3", {text: "Run it again"}), el("div", {cls: "replay"}, [code, btn]));
    }
    if (it.files.length) parts.push(el("h3", {text: "Files"}), el("ul", null, it.files.map((f) => el("li", null, [el("code", {text: f})]))));
    return el("tr", {cls: "details"}, [el("td", {colspan: "5"}, parts)]);
  }

  function draw() {
    const rows = $("ls-rows");
    rows.textContent = "";
    const shown = D.items.filter(matches);
    const pages = Math.max(1, Math.ceil(shown.length / D.pageSize));
    if (S.page >= pages) S.page = pages - 1;
    const first = S.page * D.pageSize;
    for (const it of shown.slice(first, first + D.pageSize)) {
      const open = S.open === it.key;
      const tr = el("tr", {cls: "item" + (open ? " open" : ""), tabindex: "0", "aria-expanded": String(open), "data-key": it.key}, [
        el("td", null, [el("span", {cls: "badge b-" + it.verdict, text: VERDICT[it.verdict]})]),
        el("td", {text: it.rule || ""}), el("td", null, [el("code", {text: it.key})]), el("td", {text: it.title}), el("td", {text: it.where})]);
      const toggle = () => { S.open = S.open === it.key ? null : it.key; highlight(S.open === null ? null : it); draw(); };
      tr.addEventListener("click", toggle);
      tr.addEventListener("keydown", (ev) => { if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); toggle(); } });
      rows.appendChild(tr);
      if (open) rows.appendChild(details(it));
    }
    const hidden = Object.values(D.notListed).reduce((a, b) => a + b, 0);
    $("ls-count").textContent = shown.length ? "rows " + (first + 1) + "–" + Math.min(first + D.pageSize, shown.length) + " of " + shown.length +
      (hidden ? " (" + hidden + " more not listed in this page: see the JSON or JUnit output)" : "") : "";
    $("ls-page").textContent = "page " + (S.page + 1) + " of " + pages;
    $("ls-prev").disabled = S.page === 0;
    $("ls-next").disabled = S.page >= pages - 1;
    $("ls-empty").hidden = shown.length > 0;
  }

  function clearPath() {
    if (!svg) return;
    for (const n of svg.querySelectorAll(".ls-path,.ls-fail,.ls-visited")) n.classList.remove("ls-path", "ls-fail", "ls-visited");
    for (const n of svg.querySelectorAll("text.ls-stepno")) n.remove();
  }

  function highlight(it) {
    clearPath();
    const cap = $("ls-caption");
    if (!it || !it.path) {
      cap.textContent = it ? "This " + D.noun + " has no path on the machine." : "Open a row to see its path on the machine.";
      return;
    }
    const steps = pathSteps(it.path);
    const failed = steps.find((s) => s.failed);
    cap.textContent = "Path of " + it.key + ": " + steps.length + " step(s)" +
      (failed ? ", the failing one #" + failed.n + " (" + failed.tid + (failed.t ? " " + failed.t.name : "") + ") in red" : ", none failing") + ".";
    if (!svg) return;
    const numbers = new Map();
    for (const s of steps) {
      const ids = M.svgIds[s.tid] || {};
      const gid = ids[s.src] || Object.values(ids)[0];
      const g = gid ? document.getElementById(gid) : null;
      const st = document.getElementById("state-" + s.src);
      if (st) st.classList.add("ls-visited");
      const dst = document.getElementById("state-" + s.dest);
      if (dst) dst.classList.add("ls-visited");
      if (!g) continue;
      g.classList.add(s.failed ? "ls-fail" : "ls-path");
      if (!numbers.has(g)) numbers.set(g, []);
      numbers.get(g).push(s);
    }
    for (const [g, ss] of numbers) {
      const p = g.querySelector("path");
      if (!p || !p.getTotalLength) continue;
      const len = p.getTotalLength();
      const pt = p.getPointAtLength(len / 2);
      const t = document.createElementNS("http://www.w3.org/2000/svg", "text");
      t.setAttribute("x", String(pt.x)); t.setAttribute("y", String(pt.y));
      t.setAttribute("text-anchor", "middle");
      t.setAttribute("class", "ls-stepno" + (ss.some((s) => s.failed) ? " fail" : ""));
      t.textContent = ss.map((s) => s.n).join(",");
      g.appendChild(t);
    }
  }

  function coverage() {
    const btn = $("ls-cov-toggle");
    if (!btn || !svg || !D.coverage) { if (btn && !svg) btn.disabled = true; return; }
    const counts = Object.values(D.coverage).filter((n) => n > 0).sort((a, b) => a - b);
    const q = (f) => counts.length ? counts[Math.min(counts.length - 1, Math.floor(f * counts.length))] : 0;
    const lo = q(0.33), hi = q(0.66);
    const best = new Map();
    for (const [tid, bySrc] of Object.entries(M.svgIds)) {
      const n = D.coverage[tid] || 0;
      const level = n === 0 ? 0 : n <= lo ? 1 : n <= hi ? 2 : 3;
      for (const gid of Object.values(bySrc)) best.set(gid, Math.max(best.has(gid) ? best.get(gid) : 0, level));
    }
    for (const [gid, level] of best) { const g = document.getElementById(gid); if (g) g.classList.add("cov-" + level); }
    btn.addEventListener("click", () => {
      const on = svg.classList.toggle("ls-cov");
      btn.textContent = on ? "stop shading the diagram" : "shade the diagram by coverage";
    });
  }

  $("ls-fit").addEventListener("click", () => {
    const d = $("ls-diagram");
    const actual = d.classList.toggle("actual");
    $("ls-fit").textContent = actual ? "fit to width" : "actual size";
  });
  $("ls-clear").addEventListener("click", () => { S.open = null; highlight(null); draw(); });
  setupFilters();
  coverage();
  draw();
  document.body.setAttribute("data-ready", "1");
})();
"""
