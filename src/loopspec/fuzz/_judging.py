"""Stage 3 of a campaign, judging: is each step's trace what the spec allows?

A trace that is exactly the generator's prediction (:func:`loopspec.fuzz._prediction.matches`, the strict
spec's run of the step fed the same tool outcomes) conforms without running the judge: the fast path, which
settles nearly every step of a correct implementation. Anything else — or every trace under a profile — goes
to the judge (:func:`loopspec.judge.trace.judge`). On the way, the stage counts what the traces exercised:
executions and model requests, each rule's preconditions (:mod:`._exercised`), and the spec transitions the
expected runs took (:mod:`._coverage`).

This stage imports no other stage of the campaign: the driver (:mod:`._campaign`) hands each trace here and
each divergence on to reduction.
"""

from __future__ import annotations

from typing import Any

from ..core.profiles import Params
from ..judge.trace import judge
from ..judge.verdict import Verdict
from ..spec.loader import load_spec
from ._coverage import Coverage, writes_path
from ._exercised import exercised
from ._model import Stats
from ._prediction import Prediction, matches

__all__ = ["Judging"]

Json = Any


class Judging:
    """Judges the traces of one campaign (or shard) under ``profile`` (None: the strict spec), counting into
    ``stats`` and ``coverage``."""

    def __init__(self, profile: Any, stats: Stats, coverage: Coverage) -> None:
        self.profile = profile
        self.stats = stats
        self.coverage = coverage
        #: the prediction settles a step when the reference is the strict one: a profile that changes only what
        #: the judge accepts (batch_rejection, R47) accepts every trace the strict spec does
        self.fast = profile is None or (isinstance(profile, Params) and profile.reference_strict(load_spec()))

    def __call__(self, trace: dict[str, Json]) -> Verdict:
        """The judge's verdict on ``trace`` (no fast path)."""
        self.stats.judged += 1
        return judge(trace, profile=self.profile)

    def step(self, trace: dict[str, Json], prediction: Prediction | None) -> Verdict | None:
        """The verdict on a step the campaign ran, when it diverges; None when it conforms."""
        st = self.stats
        for e in trace["events"]:
            t = e.get("type")
            if t == "execute":
                st.executions += 1
            elif t == "model":
                st.models += 1
        st.exercised.update(exercised(trace))
        if prediction is not None:
            self.coverage.add_run(prediction.transitions, prediction.codes, prediction.stop)
        elif trace.get("kind") == "writes":  # section 6's operation machine, as the external system saw it
            self.coverage.add_run(writes_path(trace), (), None)
        if self.fast and prediction is not None and matches(trace, prediction):
            return None
        verdict = self(trace)
        return None if verdict.ok else verdict

