"""The judge stage: each run against the spec — a ledger run replayed through the reference core, event by event;
a conversation (transcript, history or telemetry run) walked item by item; a ``loopspec-trace/1`` by the
fuzzer's own judge. Its output is each run's verdict as data (:class:`~loopspec.oracle._records.Judged`).

Layer: the fourth stage of the oracle's pipeline (``_detect`` → ``_read`` → ``_group`` → ``_judge`` →
``_record``); it may import the shared data below the stages and the packages below the oracle (``judge``,
``engine``, ``core``, ``spec``, ``support``), never an earlier stage.
"""
