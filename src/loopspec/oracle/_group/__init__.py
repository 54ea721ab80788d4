"""The group stage: events into runs — a ledger's interleaved events by run id, telemetry spans by trace and agent
invocation (with each run's conversation read from its spans). A transcript's conversation is one run already.

Layer: the third stage of the oracle's pipeline (``_detect`` → ``_read`` → ``_group`` → ``_judge`` →
``_record``); it may import the shared data below the stages (``_items``, ``_records``, ``_divergence``,
``_tables``, ``_json``) and the packages below the oracle, never an earlier stage.
"""
