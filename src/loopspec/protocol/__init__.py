"""The adapter protocol of spec/PROTOCOL.md, from both ends: ``wire`` reads and writes its
newline-delimited JSON within the protocol's limits, ``rpc`` is JSON-RPC 2.0 over a pair of pipes (channels,
error codes, the hold marker of concurrent steps), ``server`` serves requests on stdin/stdout, and
``executor`` is the in-process interface an implementation in Python subclasses
(:class:`~loopspec.protocol.executor.Executor`, :class:`~loopspec.protocol.executor.HeldAnswers`), with loopspec's
own engine behind it (:class:`~loopspec.protocol.executor.ReferenceExecutor`, ``loopspec serve``).

Layer: above ``judge`` (a loop result has the judge's fields); it may import ``judge``, ``engine``, ``core``,
``spec`` and ``support``. The fuzzer drives implementations through it; framework adapters implement it.
"""
