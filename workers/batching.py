"""Batch assembly for time-window TC dispatch (mechanism, no I/O).

The front already decided which batch a request belongs to (``batch_id``) and when that batch
closes (``window_end``). The assembler keeps received messages per batch id and hands a batch out
once ``window_end + grace`` has passed (grace covers the SQS hop of a request sent just before the
window closed), or as soon as it is full: a full batch gains nothing by waiting. A message arriving
after its batch was handed out forms a late batch that is ready at once. A batch larger than the
configured size (bursts) is split into chunks of that size. With ``hold_full`` (a module on an instance
whose shares take turns in an aligned duty cycle, docs/packing.md) a full batch waits for its window
end too: starting early would take the device during another share's turn. SQS redeliveries of a
message already buffered are folded into it (their receipts are kept so they are deleted too).
Batches are keyed by (deployment version, batch id): across a plan change one queue may carry both
versions' windows, whose batch ids count from different schedule origins.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from core.schema import TaskMessage

__all__ = ["BatchAssembler", "Pending"]


@dataclass
class Pending:
    message: TaskMessage
    receipts: list[str]
    received_at: float


@dataclass
class _Open:
    close_at: float
    items: dict[str, Pending] = field(default_factory=dict)


class BatchAssembler:
    def __init__(self, batch: int, grace_s: float, *, hold_full: bool = False):
        self.batch = batch
        self.grace_s = grace_s
        self.hold_full = hold_full
        self._open: dict[tuple[int, int], _Open] = {}
        self._keys: dict[str, tuple[int, int]] = {}  # idempotency key -> batch key, for buffered messages

    def __len__(self) -> int:
        return sum(len(open_slot.items) for open_slot in self._open.values())

    def add(self, message: TaskMessage, receipt: str, now: float) -> None:
        key = message.idempotency_key
        if key in self._keys:
            self._open[self._keys[key]].items[key].receipts.append(receipt)
            return
        bkey = (message.deployment_version, message.batch_id)
        slot = self._open.get(bkey)
        if slot is None:
            slot = self._open[bkey] = _Open(close_at=message.window_end + self.grace_s)
        slot.items[key] = Pending(message, [receipt], now)
        self._keys[key] = bkey

    def next_close(self) -> float | None:
        """When the next batch is ready (``-inf`` when one is full already and full batches go at once)."""
        return min(
            (
                open_slot.close_at if self.hold_full or len(open_slot.items) < self.batch else float("-inf")
                for open_slot in self._open.values()
            ),
            default=None,
        )

    def take_ready(self, now: float) -> list[tuple[int, list[Pending]]]:
        """Batches whose window has closed, earliest first, as (batch id, requests) chunks of at
        most ``batch`` requests each (earliest deadline first inside a batch)."""
        ready = sorted(
            (open_slot.close_at, bkey)
            for bkey, open_slot in self._open.items()
            if open_slot.close_at <= now or (not self.hold_full and len(open_slot.items) >= self.batch)
        )
        out: list[tuple[int, list[Pending]]] = []
        for _, bkey in ready:
            slot = self._open.pop(bkey)
            bid = bkey[1]
            items = sorted(
                slot.items.values(),
                key=lambda pending: (pending.message.deadline, pending.message.idempotency_key),
            )
            for pending in items:
                self._keys.pop(pending.message.idempotency_key, None)
            out.extend((bid, items[i : i + self.batch]) for i in range(0, len(items), self.batch))
        return out

    def drain(self) -> list[Pending]:
        """Everything still buffered (on shutdown: to release back to the queue)."""
        items = [pending for open_slot in self._open.values() for pending in open_slot.items.values()]
        self._open.clear()
        self._keys.clear()
        return items
