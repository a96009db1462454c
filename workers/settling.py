"""Settling a worker's messages (workers/worker.py): a message is deleted once every task of it has
finished, in shared ``DeleteMessageBatch`` requests (the delete linger), given back
(``ChangeMessageVisibility 0``) when the worker stops with a task of it unfinished, and kept in flight
for SQS to redeliver when a task of it failed. Every receipt settled leaves the worker's receipt
journal (workers/receipts.py). :class:`MessageSettling` is a base of :class:`~workers.worker.Worker`,
whose state (locks, queues, the journal) it uses."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from core.errors import DataPlaneError
from core.settings import DELETE_BATCH

if TYPE_CHECKING:
    import threading
    from collections.abc import Callable

    from core.adapters.metrics import Metrics
    from core.adapters.queues import TaskQueues
    from core.schema import Assignment, TaskMessage
    from workers.batching import BatchAssembler, Pending
    from workers.receipts import ReceiptJournal

__all__ = ["MessageSettling"]

log = logging.getLogger("skinflint.worker")


class MessageSettling:
    """Deletes, releases and the receipts of unfinished messages (the worker's fields, declared here
    for the type checker)."""

    assignment: Assignment
    queues: TaskQueues
    metrics: Metrics
    clock: Callable[[], float]
    delete_linger_s: float
    journal: ReceiptJournal | None
    assembler: BatchAssembler
    totals: dict[str, int]
    _dims: Any
    _lock: threading.Condition
    _stopping: threading.Event
    _gone: threading.Event
    _unfinished: dict[str, set[str]]
    _failed: set[str]
    _released: set[str]
    _to_delete: list[str]
    _to_delete_since: float
    _delete_lock: threading.Lock

    if TYPE_CHECKING:

        def _check_gone(self, exc: DataPlaneError, op: str) -> bool: ...

        def _forget_prepared(self, messages: list[TaskMessage]) -> None: ...

    def _finish(self, items: list[Pending], *, failed: bool = False) -> list[str]:
        """Mark ``items`` finished (``failed``: their batch failed, SQS must redeliver them) and
        return the receipts of the messages none of whose tasks is left, less those with a failed
        task: the ones to delete."""
        out: list[str] = []
        with self._lock:
            for pending in items:
                key = pending.message.idempotency_key
                for receipt in pending.receipts:
                    left = self._unfinished.get(receipt)
                    if left is None:
                        # released meanwhile: its message is visible again and a delete would drop
                        # its other tasks; else a request handed to process() directly, one task
                        if not failed and receipt not in self._released:
                            out.append(receipt)
                        continue
                    if failed:
                        self._failed.add(receipt)
                    left.discard(key)
                    if left:
                        continue
                    del self._unfinished[receipt]
                    if receipt in self._failed:
                        self._failed.discard(receipt)
                    else:
                        out.append(receipt)
        return list(dict.fromkeys(out))

    def _delete(self, receipts: list[str]) -> None:
        """Delete processed messages, at once or (``delete_linger_s`` > 0) with the next full
        ``DeleteMessageBatch`` or flush."""
        if self.delete_linger_s <= 0:
            self._delete_now(receipts)
            return
        with self._delete_lock:
            if not self._to_delete:
                self._to_delete_since = self.clock()
            self._to_delete.extend(receipts)
            full = len(self._to_delete) // DELETE_BATCH * DELETE_BATCH
            take, self._to_delete = self._to_delete[:full], self._to_delete[full:]
        if take:
            self._delete_now(take)

    @property
    def pending_deletes(self) -> int:
        """Processed messages whose delete has not been sent yet."""
        with self._delete_lock:
            return len(self._to_delete)

    def flush_deletes(self, force: bool = True) -> int:
        """Send the pending deletes (``force=False``: only once the oldest has waited
        ``delete_linger_s``). Returns how many were sent. A failure (other than the queue being gone)
        is logged: the messages come back after the visibility timeout and their redelivery is a
        duplicate, checked against the records before it counts (``TaskRecord.recheck``)."""
        with self._delete_lock:
            due = force or self.clock() - self._to_delete_since >= self.delete_linger_s
            if not self._to_delete or not due:
                return 0
            take, self._to_delete = self._to_delete, []
        try:
            self._delete_now(take)
        except DataPlaneError as exc:
            log.warning("delete of %d processed message(s) failed (redelivered later): %s", len(take), exc)
            return 0
        return len(take)

    def _flush_loop(self) -> None:
        period = max(0.02, self.delete_linger_s / 4)
        while not self._stopping.wait(period):
            self.flush_deletes(force=False)

    def _delete_now(self, receipts: list[str]) -> None:
        """Delete processed messages; a queue deleted meanwhile took them with it (their results are
        recorded: the batch succeeded)."""
        if self._gone.is_set():
            self._journal_done(receipts)
            return
        try:
            self.queues.delete(self.assignment.queue_url, receipts)
        except DataPlaneError as exc:
            if not self._check_gone(exc, "delete"):
                raise
        self._journal_done(receipts)

    def _journal_done(self, receipts: list[str]) -> None:
        if self.journal is not None:
            self.journal.done(receipts)

    def release_buffered(self) -> int:
        """Give every message with a buffered (not yet run) task back to the queue at once; returns
        how many requests (tasks) were buffered and given back. A message's tasks that had finished
        come back with it: their redelivery is a duplicate (receive count above 1: checked before
        anything is recorded or counted again)."""
        with self._lock:
            left = self.assembler.drain()
            receipts = [receipt for pending in left for receipt in pending.receipts]
            receipts += [receipt for receipt in self._unfinished if receipt not in self._failed]
            if len(self._released) > 20_000:
                self._released.clear()
            self._released.update(self._unfinished)
            self._unfinished.clear()
            self._failed.clear()
        self._forget_prepared([pending.message for pending in left])
        return self._release(list(dict.fromkeys(receipts)), len(left))

    def release_held(self) -> int:
        """After the serving thread died (its batches have returned): send the pending deletes,
        give back what is buffered and whatever else the journal says this worker still holds,
        and close the journal. Returns how many messages were released."""
        self.flush_deletes()
        released = self.release_buffered()
        if self.journal is not None:
            released += self._release(self.journal.receipts())
            self.journal.close()
        return released

    def _release(self, receipts: list[str], requests: int | None = None) -> int:
        """Release ``receipts``; ``requests``: the requests they give back (default one a message),
        what ``Released`` and the returned count say (0 when the release failed)."""
        requests = len(receipts) if requests is None else requests
        if receipts and self._gone.is_set():
            self._journal_done(receipts)
            return 0  # the queue and its messages are gone: nothing to give back
        if receipts:
            try:
                self.queues.release(self.assignment.queue_url, receipts)
            except DataPlaneError as exc:  # they come back after the visibility timeout instead
                if self._check_gone(exc, "release"):
                    self._journal_done(receipts)
                    return 0
                log.warning("release of %d message(s) failed: %s", len(receipts), exc)
                return 0
            self._journal_done(receipts)
            self.metrics.put("Released", requests, **self._dims)
            with self._lock:
                self.totals["released"] += requests
            return requests
        return 0
