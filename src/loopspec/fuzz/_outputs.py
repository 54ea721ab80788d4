"""Stage 5 of a campaign, the report on disk: the files a campaign writes in its ``--out`` directory.

Per distinct cause (``<cause>`` is the rule and the kind of divergence, e.g. ``R6-replay-reexecuted``):

* ``<cause>.json`` — the case (``loopspec-fuzz-case/1``): the steps to replay, the traces, the
  verdict; ``loopspec replay <cause>.json --impl CMD`` reruns it exactly;
* ``<cause>.txt`` — the readable explanation (:func:`loopspec.fuzz._report.render_finding`);
* ``<cause>.path.json`` — the expected path with the failed transition (``loopspec diagram --trace``);

and for the campaign ``campaign.json`` (parameters, findings, statistics, coverage) and ``coverage.json``
(the spec transitions the campaign's runs took: ``loopspec diagram --coverage``). Every file is written
atomically; a finding's files are written as soon as it is found (provisional while it is being reduced).

The directory is a corpus: the cases an earlier campaign left there are replayed first, kept while they fail,
and moved into ``fixed/`` (and reported) when they pass; nothing is deleted but this campaign's own superseded
provisional files.

This stage imports no other stage of the campaign: the driver (:mod:`._campaign`) hands it the findings.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..support.text import printable_lines
from ..support.text import write_atomic as _write_atomic
from ._coverage import Coverage, spec_transition_ids
from ._model import (
    CAMPAIGN_FORMAT,
    FINDING_SUFFIXES,
    RULE_FILE,
    CampaignResult,
    Finding,
    is_case_file,
    json_text,
)
from ._paths import diagram_trace
from ._report import render_finding

__all__ = ["CaseFiles", "OutputError", "corpus_files", "coverage_doc", "finding_summary"]


class OutputError(Exception):
    """A file in ``out`` cannot be written (a full disk, a file size limit, a read-only directory): the campaign
    stops, keeps what it wrote, and says which file and why."""

    def __init__(self, path: str | os.PathLike[str], why: str) -> None:
        super().__init__(f"cannot write {os.fspath(path)}: {why}")
        self.path = os.fspath(path)
        self.why = why


def write_atomic(path: str | os.PathLike[str], text: str | bytes) -> None:
    """:func:`~loopspec.support.text.write_atomic`, its failure an :class:`OutputError` naming the file (a write
    that fails for lack of room has no file name of its own)."""
    try:
        _write_atomic(path, text)
    except OSError as exc:
        raise OutputError(path, exc.strerror or str(exc)) from None

Json = Any


def finding_summary(f: Finding, out: Path | None) -> dict[str, Json]:
    """One finding as ``campaign.json`` and ``loopspec fuzz --format json`` list it."""
    v = f.verdict.violation
    return {
        "rule": f.rule, "kind": f.kind, "cause": f.cause,
        "invariant": v.invariant if v else None,
        "index": v.index if v else None,
        "calls": f.calls, "steps": len(f.steps), "shrunk": f.shrunk, "reproduced": f.reproduced,
        "explanation": v.explanation if v else None,
        "case": str(out / f"{f.cause}.json") if out is not None else None,
        "from": "corpus" if f.origin is not None else "campaign",
    }


def corpus_files(out: Path) -> list[Path]:
    """The fuzz cases in ``out`` (named after a cause or a rule, and saying they are fuzz cases), sorted."""
    if not out.is_dir():
        return []
    return sorted(p for p in out.iterdir() if p.suffix == ".json" and not p.name.endswith(".path.json")
                  and RULE_FILE.match(p.name) is not None and is_case_file(p))


def coverage_doc(coverage: Coverage, *, mode: str, seed: int, impl: str, steps: int) -> dict[str, Json]:
    """``coverage.json``: how often the expected runs took each spec transition."""
    spec_ids = spec_transition_ids(mode)
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

    def retire(self, case: Path) -> str:
        """Move an earlier campaign's case (its ``.json``, ``.txt`` and ``.path.json``) into ``fixed/``: it
        passes now. Returns where the case went."""
        dest = self.out / "fixed"
        dest.mkdir(exist_ok=True)
        stem = case.name.removesuffix(".json")
        for suffix in FINDING_SUFFIXES:
            src = case.with_name(stem + suffix)
            if src.is_file() and not src.is_symlink():
                os.replace(src, dest / src.name)
        return str(dest / case.name)

    def write(self, f: Finding) -> list[str]:
        """A finding's case, explanation and path (provisional until it is shrunk)."""
        base = self.out / f.cause
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
            if f.cause + ".json" not in self.written:  # found but not yet written (interrupted, shards)
                self.write(f)
            keep |= {f.cause + suffix for suffix in FINDING_SUFFIXES}
        for name in self.written - keep:  # only this campaign's own files: a case it superseded
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
            "corpus": result.corpus,
        }
        cov = self.out / "coverage.json"
        write_atomic(cov, json_text(coverage))
        path = self.out / "campaign.json"
        write_atomic(path, json_text(doc))
        return [str(cov), str(path)]
