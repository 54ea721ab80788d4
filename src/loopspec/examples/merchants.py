"""A small read-only merchant directory with two tenants: the example tool set of loopspec.

It exercises every rule a real read-only integration meets:

* the principal comes from the run (``ToolContext.principal``), never from arguments (R16);
* an authorization hook admits a lookup only for the principal's own merchant (R24), and a
  cross-tenant lookup gets the same outward answer as a missing merchant;
* results pass a field allow-list, so the internal fields of a record never leave (R25);
* a temporarily unavailable dependency is a DEPENDENCY_TEMPORARY failure, retried within budget
  (R23), never disguised as "not found";
* a crashing query becomes INTERNAL_ERROR; its exception text (with a query in it) never leaks.

Tenant ``tenant-a`` may read merchant ``1001``; tenant ``tenant-b`` may read ``1002`` (whose
optional fields are unknown and stay null); ``9999`` does not exist; ``5000`` makes the backing
store crash.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from ..engine.base import ToolFailure
from ..engine.reference import Tool, ToolContext

#: Planted in records and exceptions: it must never appear in an answer, a ledger or an outcome.
CANARY = "INTERNAL_CANARY_7f3a"

RECORDS: dict[str, dict[str, Any]] = {
    "1001": {"merchantId": "1001", "tenant": "tenant-a", "name": "Harbour Tea House", "city": "Lisbon",
             "hours": "09:00-18:00", "internalNote": CANARY, "payoutAccount": f"PT50-{CANARY}"},
    "1002": {"merchantId": "1002", "tenant": "tenant-b", "name": None, "city": None, "hours": None,
             "internalNote": CANARY, "payoutAccount": None},
}

#: The fields of a merchant that may leave the server (R25).
PUBLIC_FIELDS = ("merchantId", "name", "city", "hours")

MERCHANT_ID_SCHEMA = {
    "type": "object",
    "properties": {"merchantId": {"type": "string", "description": "the merchant's id, e.g. 1001"}},
    "required": ["merchantId"],
    "additionalProperties": False,
}


@dataclass
class MerchantDirectory:
    """The backing store, with controllable outages and counters of real downstream attempts."""

    records: dict[str, dict[str, Any]] = field(default_factory=lambda: {k: dict(v) for k, v in RECORDS.items()})
    unavailable: int = 0  # the next `unavailable` queries fail temporarily
    attempts: int = 0  # downstream queries actually made
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def _touch(self, what: str) -> None:
        """One real downstream attempt; fails temporarily while an outage is scheduled."""
        with self._lock:
            self.attempts += 1
            if self.unavailable > 0:
                self.unavailable -= 1
                raise ToolFailure("DEPENDENCY_TEMPORARY", f"connection reset while reading {what}")

    def query(self, merchant_id: str) -> dict[str, Any] | None:
        self._touch(merchant_id)
        if merchant_id == "5000":
            raise RuntimeError(f"syntax error near SELECT * FROM merchants WHERE note = '{CANARY}'")
        return self.records.get(merchant_id)

    # -- the application's side: authorization and tools ---------------------------------
    def authorize(self, principal: str, tool: str, arguments: dict[str, Any]) -> bool:
        """Admit a lookup only for the principal's own merchants. Unknown ids are admitted: the
        tool then answers not found, which is the same outward answer as a denial (R24)."""
        if tool != "get_merchant":
            return True
        rec = self.records.get(str(arguments.get("merchantId")))
        return rec is None or rec["tenant"] == principal

    def get_merchant(self, arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        rec = self.query(arguments["merchantId"])
        if rec is None or rec["tenant"] != ctx.principal:  # defence in depth behind the hook
            raise ToolFailure("NOT_FOUND_OR_NOT_ACCESSIBLE")
        return dict(rec)  # the full record: the engine projects it to PUBLIC_FIELDS

    def list_merchants(self, arguments: dict[str, Any], ctx: ToolContext) -> list[dict[str, Any]]:
        self._touch("the merchant list")
        return [dict(r) for r in self.records.values() if r["tenant"] == ctx.principal]

    def tools(self) -> list[Tool]:
        return [
            Tool.define("get_merchant", self.get_merchant, MERCHANT_ID_SCHEMA, fields=PUBLIC_FIELDS,
                        description="Look up one merchant of the current tenant by id."),
            Tool.define("list_merchants", self.list_merchants,
                        {"type": "object", "properties": {}, "additionalProperties": False},
                        fields=PUBLIC_FIELDS, description="List the current tenant's merchants."),
        ]
