"""The read stage: a file's bytes as events — a ledger's lines as event objects, documents as conversations'
items or telemetry spans. What cannot be read is said here, with its file line and JSON path.

Layer: the second stage of the oracle's pipeline (``_detect`` → ``_read`` → ``_group`` → ``_judge`` →
``_record``); it may import the shared data below the stages (``_items``, ``_records``, ``_options``,
``_json``) and the packages below the oracle, never an earlier stage.
"""
