"""Batch-slot counts shared by every front instance (DynamoDB, the results table).

The front's admission counts the frames it put in each root window (``front/admission.py``).
One process sees only its own frames, so N Lambda instances could each fill a window to its cap. With
this counter a window's count lives in one item, ``pk = slot#<app>#v<version>#<module>#<batch id>``,
``sk = n``, raised by a conditional ``UpdateItem`` (``ADD n k`` if ``n <= cap - k``): one write per
POST, root module and window (a JSON batch's frames that land in one window are counted at once; a
single frame is one write; a refused condition is billed as a write too), two when the window has
room for part of the POST only (:meth:`SlotCounter.take_upto`: the refusal says how many places are
left, the second write takes them), and the cap holds across instances.

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
        failed, _ = self._add(slot_key(app, version, module, batch_id), count, cap, window_end)
        if failed is None:
            return True
        if failed == "ConditionalCheckFailedException":
            return False
        self._unavailable(failed)
        return None

    def take_upto(
        self, app: str, version: int, module: str, batch_id: int, cap: int, window_end: float, count: int
    ) -> int | None:
        """Count as many of ``count`` frames (a POST's, for one root module) as the window has room
        for: how many were counted (0: the window is full), or None when DynamoDB could not answer.

        At most two writes, whatever ``count``: ``ADD n count`` if ``n <= cap - count``; when that is
        refused, the refusal carries the window's count ``n`` (``ReturnValuesOnConditionCheckFailure``
        ``ALL_OLD``, no read), and a second write takes the ``cap - n`` places left (``ADD n room`` if
        ``n <= cap - room``; no second write when the window is full). The caller places the rest in
        the next windows, one more :meth:`take_upto` each. When other front instances take those
        places between the two writes, the second is refused too and 0 is returned (the window counts
        as full: no third try). A refusal without the count (a DynamoDB that does not return it)
        tries one place, as :meth:`take` of one frame would."""
        key = slot_key(app, version, module, batch_id)
        want = int(count)
        failed, old = self._add(key, want, cap, window_end)
        if failed == "ConditionalCheckFailedException":
            have = _count(old)
            room = (int(cap) - have) if have is not None else min(1, want - 1)
            if room <= 0:  # full: no second write
                return 0
            want = min(want, room)
            failed, _ = self._add(key, want, cap, window_end)
            if failed == "ConditionalCheckFailedException":
                return 0
        if failed is None:
            return want
        self._unavailable(failed)
        return None

    def _add(
        self, key: dict[str, dict[str, str]], count: int, cap: int, window_end: float
    ) -> tuple[str | None, dict[str, Any] | None]:
        """``ADD n count`` if the window then holds at most ``cap``: (None, None) when applied, else
        (the error, the item as it was when the condition was refused)."""
        return self._update(
            key,
            "ADD n :count SET #exp = :exp",
            "attribute_not_exists(n) OR n <= :room",
            {
                ":count": {"N": str(int(count))},
                ":room": {"N": str(int(cap) - int(count))},
                ":exp": {"N": str(int(window_end + KEEP_S))},
            },
            names={"#exp": EXPIRES_AT},
            old_on_refusal=True,
        )

    def _unavailable(self, failed: str) -> None:
        log.warning(
            "slot counter %s unavailable (%s): admitting on this front's own count", self.table, failed
        )

    def release(self, app: str, version: int, module: str, batch_id: int, count: int = 1) -> None:
        """Give back ``count`` frames counted in the window (a JSON batch refused after part of it
        was counted); best effort: a failure leaves the window that much fuller than it is."""
        failed, _ = self._update(
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
        old_on_refusal: bool = False,
    ) -> tuple[str | None, dict[str, Any] | None]:
        """One conditional ``UpdateItem``: (None, None) when it was applied, else the service's error
        code (``ConditionalCheckFailedException``: the condition did not hold) or the error's text,
        and with ``old_on_refusal`` the item as the refused condition found it (None if none)."""
        extra: dict[str, Any] = {"ExpressionAttributeNames": names} if names else {}
        if old_on_refusal:
            extra["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
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
            old = getattr(exc, "response", {}).get("Item") if old_on_refusal else None
            return error_code(exc) or str(exc) or type(exc).__name__, old if isinstance(old, dict) else None
        return None, None


def _count(item: dict[str, Any] | None) -> int | None:
    """The window's count in ``item`` (0 for an item without one), None without the item."""
    if item is None:
        return None
    try:
        return int(item.get("n", {}).get("N", "0"))
    except (TypeError, ValueError, AttributeError):
        return None
