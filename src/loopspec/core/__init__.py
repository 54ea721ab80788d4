"""The pure core: decision functions over plain values, no I/O, no clock, no randomness. ``rules`` decides
each call's outcome, the next state of a run and whether a state satisfies each invariant of loop.toml;
``writes`` the write-tool rules of section 6 (idempotency keys, operation states); ``ledger`` the run ledger's
event types and digests; ``profiles`` how a framework profile's documented choices change the reference
outcomes; ``contracts`` the pre/post conditions CrossHair checks symbolically.

Layer: above ``spec`` and ``support``, which are all it may import. The engine, the judge, the model checker,
the fuzzer and the oracle all drive these same functions.
"""
