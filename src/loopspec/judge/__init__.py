"""One judge for every trace: ``trace.judge`` takes a ``loopspec-trace/1`` document and hands it to the
batch judge (``batch``), the loop judge (``loop``) or the writes judge (``writes``), each replaying the trace
against the pure core and reporting the first divergence. ``verdict`` holds what they share: the
:class:`~loopspec.judge.verdict.Verdict` and :class:`~loopspec.judge.verdict.Violation` types, trace errors,
the canary of tool exceptions.

Layer: above ``engine``; it may import ``engine``, ``core``, ``spec`` and ``support``. The drivers (fuzzer,
oracle, framework adapters) import it; it imports none of them.
"""
