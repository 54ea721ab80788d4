"""``loopspec frameworks install js``: install what the TypeScript frameworks need ahead of their first use.

``--impl ai-sdk`` (and the other TypeScript frameworks) run their adapters with Node.js (>= 20 on PATH): the
first use copies the adapters shipped with loopspec into a cache directory, installs the packages their
committed package-lock.json pins with ``npm ci`` and compiles them with the pinned TypeScript compiler. This
command does that now (a CI job, a machine without network later) and prints the directory. Exit 2 when Node.js
or npm is missing or the install fails (the message says what to do).
"""

from __future__ import annotations

import argparse
from typing import Any

from ._common import EXIT_OK, UsageError, add_format_option, add_progress_option, add_quiet_option


def register(sub: Any) -> None:
    p = sub.add_parser("frameworks", help="install what the TypeScript frameworks need (Node.js packages)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    fsub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    inst = fsub.add_parser("install", help="install a framework runtime ahead of its first use",
                           description="install a framework runtime ahead of its first use")
    inst.add_argument("runtime", choices=["js"],
                      help="js: the npm packages of ai-sdk, openai-agents-js, langgraph-js, mastra (npm ci)")
    add_format_option(inst, what="where the runtime was installed",
                      meanings={"json": "one JSON document on stdout: the runtime and its directory"})
    add_quiet_option(inst, "errors, not the directory")
    add_progress_option(inst)  # accepted for one vocabulary; npm prints its own progress
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from ..frameworks._node import NodeMissing, ensure_installed

    try:
        where = ensure_installed()
    except NodeMissing as exc:
        raise UsageError(str(exc)) from None
    if getattr(args, "format", "text") == "json":
        import json

        print(json.dumps({"runtime": args.runtime, "directory": str(where)}))
    elif not getattr(args, "quiet", False):
        print(where)
    return EXIT_OK
