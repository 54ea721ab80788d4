"""A small asyncio batch executor with held answers, served over stdin/stdout by ``serve_stdio``
(``python -m tests.stdio_held`` from the checkout): the stdio side of protocol v1.1 (spec/PROTOCOL.md
sections 6 and 7) without a framework.

Every call of a concurrent step starts at once (one task each, in request order: C2), the answers are
awaited from ``execute.held`` (C3), and in abort mode the executions after the lowest failing request
are cancelled (R34, R35; ``$/cancelRequest``, C5). A sequential step answers each execute at once.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from loopspec.fuzz import Executor
from loopspec.protocol.executor import serve_stdio

Json = Any


def _error(call: Json, exc: BaseException) -> Json:
    return {"id": call["id"], "status": "error", "code": getattr(exc, "category", "INTERNAL_ERROR")}


class StdioHeldExecutor(Executor):
    name = "stdio-held"
    holds_answers = True

    def capabilities(self) -> dict[str, bool]:
        return {"batch": True, "loop": False, "concurrency": True}

    def batch_run(self, params: dict[str, Json], execute: Any) -> dict[str, Json]:
        calls, who, abort = params["calls"], params.get("principal", "anonymous"), params.get("mode") == "abort"
        held = getattr(execute, "held", None)
        if held is None:  # a sequential step: one execution at a time, answered at once
            results = []
            for i, c in enumerate(calls):
                try:
                    results.append({"id": c["id"], "status": "ok",
                                    "output": execute(c["id"], c["name"], c.get("arguments", {}), who)})
                except Exception as exc:
                    if abort:
                        return {"results": results, "executed": i + 1,
                                "aborted": {"index": i, "code": _error(c, exc)["code"]}}
                    results.append(_error(c, exc))
            return {"results": results, "executed": len(calls), "aborted": None}

        async def run() -> dict[str, Json]:
            tasks = [asyncio.ensure_future(held.execute(c["id"], c["name"], c.get("arguments", {}), who))
                     for c in calls]
            cut: int | None = None
            waiting = set(tasks)
            while waiting:
                _done, waiting = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                if not abort:
                    continue
                for i, t in enumerate(tasks):
                    if t.done() and not t.cancelled() and t.exception() is not None and (cut is None or i < cut):
                        cut = i
                if cut is not None:
                    for t in tasks[cut + 1:]:
                        t.cancel()  # after the abort point: abandoned, and told so (R35, C5)
                    waiting = {t for t in tasks[:cut] if not t.done()}  # the earlier ones are owed (R34)
            await asyncio.gather(*tasks, return_exceptions=True)
            upto = len(calls) if cut is None else cut
            results = [_error(c, t.exception()) if t.exception() is not None  # type: ignore[arg-type]
                       else {"id": c["id"], "status": "ok", "output": t.result()}
                       for c, t in zip(calls[:upto], tasks[:upto], strict=True)]
            aborted = None if cut is None else {"index": cut, "code": _error(calls[cut], tasks[cut].exception())["code"]}  # type: ignore[arg-type]
            return {"results": results, "executed": len(calls), "aborted": aborted}

        return asyncio.run(held.drive(run()))  # type: ignore[no-any-return]


if __name__ == "__main__":
    serve_stdio(StdioHeldExecutor())
    sys.exit(0)
