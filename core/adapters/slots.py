"""Batch-slot counts shared by every front instance (DynamoDB, the results table).

The front's admission counts the frames it put in each root window (``front/admission.py``).
One process sees only its own frames, so N Lambda instances could each fill a window to its cap. With
this counter a window's count lives in one item, ``pk = slot#<app>#v<version>#<module>#<batch id>``,
``sk = n``, raised by a conditional ``UpdateItem`` (``ADD n k`` if ``n <= cap - k``): one write per
request and window (a JSON batch's frames that land in one window are counted at once; a single
frame is one write; a refused condition is billed as a write too), and the cap holds across instances.

**No hot key.** Each window is its own partition key, so DynamoDB hashes consecutive windows to
different partitions: a key takes the writes of one window only, at most its cap (the plan's batch,
or fewer) plus one refused condition per front instance that tried it when full, over the window's
life. (Until this change every window of a root module shared one partition key with the batch id as
the sort key: at 50,000 frames/s that was 50,000 writes per second on one key, 50 times a
partition's 1,000 write units; a monotonically increasing sort key defeats DynamoDB's split for
heat.) Sharding a window's count in N items would not keep the cap exact without reading all N.

Items expire with the table's TTL (``expires_at``: the window's end plus :data:`KEEP_S`). The counter
fails open: when DynamoDB cannot be reached the front admits on its own count, as it does without
the counter, and says so (:meth:`SlotCounter.take` returns None) so the failure is counted.
"""

from __future__ import annotations

import logging
from typing import Any

from core.adapters._aws import AWS_ERRORS, error_code
from core.adapters.results import EXPIRES_AT

__all__ = ["COUNT_SK", "KEEP_S", "SlotCounter", "slot_key"]

log = logging.getLogger("skinflint.slots")

#: s a window's count is kept after the window ends (no one reads it then; TTL deletes it later)
KEEP_S = 600.0


#: the sort key of every window's item (the partition key names the window)
COUNT_SK = "n"


def slot_key(app: str, version: int, module: str, batch_id: int) -> dict[str, dict[str, str]]:
    """The item of one window of one root module of one deployment version: a partition key of its
    own (see the module doc: consecutive windows land on different partitions)."""
    return {"pk": {"S": f"slot#{app}#v{version}#{module}#{batch_id}"}, "sk": {"S": COUNT_SK}}


class SlotCounter:
    """Shared per-window counts (see the module doc). ``ddb``: a DynamoDB client; ``table``: the
    results table (hash ``pk``, range ``sk``, TTL on ``expires_at``)."""

    def __init__(self, ddb: Any, table: str) -> None:
        self.ddb = ddb
        self.table = table

    def take(
        self, app: str, version: int, module: str, batch_id: int, cap: int, window_end: float, count: int = 1
    ) -> bool | None:
        """Count ``count`` more frames in the window if it then holds at most ``cap`` (one write for
        the frames of one request): True when counted, False when they do not fit, None when
        DynamoDB could not answer (the caller decides alone)."""
        failed = self._update(
            slot_key(app, version, module, batch_id),
            "ADD n :count SET #exp = :exp",
            "attribute_not_exists(n) OR n <= :room",
            {
                ":count": {"N": str(int(count))},
                ":room": {"N": str(int(cap) - int(count))},
                ":exp": {"N": str(int(window_end + KEEP_S))},
            },
            names={"#exp": EXPIRES_AT},
        )
        if failed is None:
            return True
        if failed == "ConditionalCheckFailedException":
            return False
        log.warning(
            "slot counter %s unavailable (%s): admitting on this front's own count", self.table, failed
        )
        return None

    def release(self, app: str, version: int, module: str, batch_id: int, count: int = 1) -> None:
        """Give back ``count`` frames counted in the window (a JSON batch refused after part of it
        was counted); best effort: a failure leaves the window that much fuller than it is."""
        failed = self._update(
            slot_key(app, version, module, batch_id),
            "ADD n :minus",
            "attribute_exists(n) AND n >= :count",
            {":minus": {"N": str(-int(count))}, ":count": {"N": str(int(count))}},
        )
        if failed not in (None, "ConditionalCheckFailedException"):
            log.warning("slot counter %s: could not give back %d frame(s) (%s)", self.table, count, failed)

    def _update(
        self,
        key: dict[str, dict[str, str]],
        update: str,
        condition: str,
        values: dict[str, dict[str, str]],
        names: dict[str, str] | None = None,
    ) -> str | None:
        """One conditional ``UpdateItem``: None when it was applied, else the service's error code
        (``ConditionalCheckFailedException``: the condition did not hold) or the error's text."""
        extra = {"ExpressionAttributeNames": names} if names else {}
        try:
            self.ddb.update_item(
                TableName=self.table,
                Key=key,
                UpdateExpression=update,
                ConditionExpression=condition,
                ExpressionAttributeValues=values,
                **extra,
            )
        except AWS_ERRORS as exc:
            return error_code(exc) or str(exc) or type(exc).__name__
        return None
