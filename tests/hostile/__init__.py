"""Hostile input: a corpus of files and implementations that tried to crash, hang or exhaust loopspec.

Every case runs the real command line in a child process (``runner.run_cli``) with a wall-clock
limit, and asserts the exact exit code (never 70), the one-line error, the child's peak RSS (from
``wait4``, not tracemalloc), that no process it started is left running, and that every file it
wrote parses as strict JSON.
"""
