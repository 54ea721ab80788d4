"""``python -m loopspec``: the command line."""

import sys

try:
    from loopspec.cli import main
except KeyboardInterrupt:  # Ctrl-C while the package is still being imported: no traceback
    print("loopspec: interrupted", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
