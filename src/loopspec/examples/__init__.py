"""Example tool sets that exercise the whole spec (used by the demo and the tests).

Layer: implementations under test, beside ``frameworks``; they may import ``engine`` and below.
"""
