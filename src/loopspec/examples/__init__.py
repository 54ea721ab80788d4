"""Example tool sets that exercise the whole spec (used by the demo and the tests)."""
