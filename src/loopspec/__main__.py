"""``python -m loopspec``: the command line."""

import os
import sys

try:
    from loopspec.cli import main
except KeyboardInterrupt:  # Ctrl-C while the package is still being imported: no traceback
    print("loopspec: interrupted", file=sys.stderr)
    sys.exit(130)

code = main()
if code == 130:
    # Interrupted, and main() has already reported it and cleaned up. Under ``python -m`` (CPython 3.11-3.13,
    # observed), a Ctrl-C that once passed through an ``exec`` of source text — as dataclasses and namedtuples do
    # while a module is imported — counts as unhandled even though main() caught it, and the interpreter then
    # kills itself with SIGINT at exit instead of exiting 130. Leave with the code main() chose.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
sys.exit(code)
