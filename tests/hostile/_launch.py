"""Start a command as the child of this small process and report the child's own rusage.

A process forked from a large one (pytest, with the whole suite loaded) starts with the parent's
resident size as its high-water mark and keeps it across ``exec``, so ``wait4`` on it reports the
parent's size, not the command's. Forked from this small process instead, the command's peak RSS
(``ru_maxrss``: it and the descendants it waited for) is its own.

    python -S _launch.py REPORT.json COMMAND ARGS...

writes ``{"maxrss_kb": …, "status": …}`` to REPORT.json and exits with the command's exit code.
"""

import json
import os
import sys


def main() -> None:
    report, cmd = sys.argv[1], sys.argv[2:]
    pid = os.fork()
    if pid == 0:
        try:
            os.execvp(cmd[0], cmd)
        finally:
            os._exit(127)
    _, status, ru = os.wait4(pid, 0)
    with open(report, "w") as fh:
        json.dump({"maxrss_kb": ru.ru_maxrss, "status": status}, fh)
    code = os.waitstatus_to_exitcode(status)
    os._exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main()
