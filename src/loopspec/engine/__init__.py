"""The reference engine: ``reference`` is the ``transitions`` machine built from loop.toml that runs real
tools (``run_batch``, ``run_loop``, their async twins) and writes the run ledger; ``writeloop`` wraps write
tools in operation-ledger requests (section 6) and ``resume`` continues a crashed run; ``oplog`` keeps the
operation ledger in memory or SQLite, ``oplog_pg`` on PostgreSQL, ``oplog_open`` picks one from what a caller
gave; ``vectors`` runs the spec's conformance vectors through the engine; ``base`` holds the exceptions and
markers a tool body shares with the engine.

Layer: above ``core``; it may import ``core``, ``spec`` and ``support``, never a judge or a driver.
"""
