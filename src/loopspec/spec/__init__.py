"""Loading and validating the spec data: ``spec/loop.toml`` (states, transitions, guards, codes,
invariants, profiles, concurrency) into frozen dataclasses (``loader``), ``spec/writes.toml`` (section 6, the
operation states of a write tool: ``writes``), and the rules of ``SPEC.md``. Definition errors are
:class:`~loopspec.spec.base.SpecError`, naming the file, table and field. ``base`` says where the shipped spec
is (the source tree's ``spec/`` or, in an installed wheel, this package's directory, where the build puts it).

Layer: above ``support``, which is all it may import. Everything that reads the spec imports it.
"""
