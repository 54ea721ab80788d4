"""``loopspec serve``: the reference engine as an adapter process (spec/PROTOCOL.md).

It reads JSON-RPC requests on stdin and writes responses on stdout, asking the harness to run
every tool (``tool.execute``) and, in loop mode, the model (``model.next``). Use it as a correct
baseline (``loopspec fuzz --impl "loopspec serve"`` finds nothing) and as a model when you write
an adapter for your own implementation.
"""

from __future__ import annotations

import argparse
from typing import Any

from ._common import EXIT_OK, add_spec_option


def register(sub: Any) -> None:
    p = sub.add_parser("serve", help="run the reference engine as an adapter process on stdin/stdout",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_spec_option(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from ..protocol.executor import ReferenceExecutor, serve_stdio

    serve_stdio(ReferenceExecutor())
    return EXIT_OK
