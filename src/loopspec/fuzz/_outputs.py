"""Stage 5 of a campaign, the report on disk: the files a campaign writes in its ``--out`` directory.

Per finding (``<rule>`` is the rule id, e.g. ``R6``):

* ``<rule>.json`` — the case (``loopspec-fuzz-case/1``): the steps to replay, the traces, the
  verdict; ``loopspec replay <rule>.json --impl CMD`` reruns it exactly;
* ``<rule>.txt`` — the readable explanation (:func:`loopspec.fuzz._report.render_finding`);
* ``<rule>.path.json`` — the expected path with the failed transition (``loopspec diagram --trace``);

and for the campaign ``campaign.json`` (parameters, findings, statistics, coverage) and ``coverage.json``
(the spec transitions the campaign's runs took: ``loopspec diagram --coverage``). Every file is written
atomically; a finding's files are written as soon as it is found (provisional while it is being reduced).

This stage imports no other stage of the campaign: the driver (:mod:`._campaign`) hands it the findings.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..spec.loader import load_spec
from ..support.safejson import load_json
from ..support.text import printable_lines, write_atomic
from ._coverage import Coverage
from ._model import CAMPAIGN_FORMAT, RULE_FILE, CampaignResult, Finding, is_case_file, json_text
from ._paths import diagram_trace
from ._report import render_finding

__all__ = ["CaseFiles", "coverage_doc", "finding_summary"]

Json = Any


def finding_summary(f: Finding, out: Path | None) -> dict[str, Json]:
    """One finding as ``campaign.json`` and ``loopspec fuzz --format json`` list it."""
    v = f.verdict.violation
    return {
        "rule": f.rule, "kind": f.kind,
        "invariant": v.invariant if v else None,
        "index": v.index if v else None,
        "calls": f.calls, "steps": len(f.steps), "shrunk": f.shrunk, "reproduced": f.reproduced,
        "explanation": v.explanation if v else None,
        "case": str(out / f"{f.rule}.json") if out is not None else None,
    }


def coverage_doc(coverage: Coverage, *, mode: str, seed: int, impl: str, steps: int) -> dict[str, Json]:
    """``coverage.json``: how often the expected runs took each spec transition."""
    spec_ids = [t.id for t in load_spec().transitions]
    return {"transitions": {t: coverage.transitions.get(t, 0) for t in spec_ids},
            "runs": coverage.runs,
            "label": f"loopspec fuzz, {mode} mode, seed {seed}",
            "source": f"loopspec fuzz --impl {impl} --mode {mode} --seed {seed}: "
                      f"the spec transitions of the expected runs of {steps} steps"}


class CaseFiles:
    """The campaign's ``out`` directory. ``impl``: the implementation as the explanations name it;
    ``replay_impl``: what ``loopspec replay --impl`` needs to rerun a case; ``meta``: the campaign's
    description every case and ``campaign.json`` carry (asked again each time: an implementation's
    ``initialize`` result can arrive from a shard later)."""

    def __init__(self, out: Path, *, impl: str, replay_impl: str, meta: Callable[[], dict[str, Json]]) -> None:
        self.out = out
        self.impl = impl
        self.replay_impl = replay_impl
        self.meta = meta
        self.written: set[str] = set()

    def clear_previous(self) -> None:
        """Remove the finding files of an earlier campaign in ``out`` — those its ``campaign.json``
        listed and provisional ones it never listed (interrupted) — so that the directory never mixes
        two campaigns' findings. Only files that are ours: named after a rule, and a case file's
        JSON says it is a fuzz case."""
        if not self.out.is_dir():
            return
        rules: set[str] = set()
        with contextlib.suppress(Exception):
            doc = load_json(self.out / "campaign.json")
            rules = {f["rule"] for f in doc.get("findings", []) if isinstance(f, dict) and isinstance(f.get("rule"), str)}
        doomed = []
        for entry in self.out.iterdir():
            m = RULE_FILE.match(entry.name)
            if m is None or entry.is_symlink() or not entry.is_file():
                continue
            rule = m.group(1)
            if rule in rules or is_case_file(self.out / f"{rule}.json"):
                doomed.append(entry)
        for entry in doomed:
            entry.unlink(missing_ok=True)

    def write(self, f: Finding) -> list[str]:
        """A finding's case, explanation and path (provisional until it is shrunk)."""
        base = self.out / f.rule
        case = f.case_json(self.meta())
        case["provisional"] = not f.shrunk
        write_atomic(base.with_suffix(".json"), json_text(case))
        # the explanation quotes what the implementation sent: no control character reaches a reader's
        # terminal through `cat R7.txt` either
        write_atomic(base.with_suffix(".txt"), printable_lines(render_finding(
            f, self.impl, f"{base}.json", not f.shrunk, replay_impl=self.replay_impl)))
        paths = [str(base.with_suffix(".json")), str(base.with_suffix(".txt"))]
        dt = diagram_trace(f)
        if dt is not None:
            write_atomic(f"{base}.path.json", json_text(dt, indent=None))
            paths.append(f"{base}.path.json")
        self.written.update(Path(p).name for p in paths)
        return paths

    def finish(self, findings: Iterable[Finding]) -> list[str]:
        """The files of the campaign's final findings: those not written yet are written (found while
        interrupted, or by shards), those of findings superseded are removed."""
        keep = set()
        for f in findings:
            if f.rule + ".json" not in self.written:  # found but not yet written (interrupted, shards)
                self.write(f)
            keep |= {f"{f.rule}.json", f"{f.rule}.txt", f"{f.rule}.path.json"}
        for name in self.written - keep:
            (self.out / name).unlink(missing_ok=True)
        return sorted(str(self.out / n) for n in self.written & keep)

    def write_summary(self, result: CampaignResult, fields: dict[str, Json], coverage: dict[str, Json]) -> list[str]:
        """``coverage.json`` (``coverage``, see :func:`coverage_doc`) and ``campaign.json``: the campaign's
        description, ``fields`` (its parameters), the result, its statistics, coverage and findings."""
        doc = {
            "format": CAMPAIGN_FORMAT,
            **self.meta(),
            **fields,
            "parameters": result.params,
            "ok": result.ok,
            "interrupted": result.interrupted,
            "stats": result.stats,
            "coverage": result.coverage,
            "findings": [finding_summary(f, self.out) for f in result.findings],
        }
        cov = self.out / "coverage.json"
        write_atomic(cov, json_text(coverage))
        path = self.out / "campaign.json"
        write_atomic(path, json_text(doc))
        return [str(cov), str(path)]
