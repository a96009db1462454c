"""The record linger: the terminal-task records of several batches written in one request.

A worker records each batch's terminal tasks (one record per POST among them: an item of the
results table, or for a push app a message on its results queue; core/adapters/results.py). At the
local demo's 20 frames/s most batches hold one to three tasks, so without a linger a record write is
nearly one request per task. :class:`RecordLinger`, shared by every worker of an instance
(workers/agent.py), holds what the batches hand it and writes it in one call to its sink
(``ResultStore.record_tasks``: one ``BatchWriteItem``, at most 25 items; ``PushSink.record_tasks``:
one ``SendMessageBatch``, at most 10 messages), with the records of one POST from several batches in
one item. A write goes out at the earliest of:

- the call is full (as many POSTs as its sink takes in one call, :attr:`RecordSink.items_per_call`);
- the oldest record held has waited ``linger_s`` (``SKINFLINT_RECORD_LINGER_S``);
- the earliest frame deadline among the records held, less ``margin_s``
  (``SKINFLINT_RECORD_MARGIN_S``) and less the slowest recent write (a decayed maximum of the
  writes' durations, :attr:`RecordLinger.slow_write_s`): a frame's completion time is its last
  record's write, so a linger never pushes a frame that would have met its deadline past it, unless
  that write takes longer than the margin plus the slowest recent one;
- :meth:`RecordLinger.close` (the agent's drain, after its workers stopped).

The thread of the first batch of a call waits for it to be due and makes it, the others wait for
it (no thread of the linger's own): a call that is due goes out even while a slow earlier one has not
returned.

So the linger adds at most ``linger_s`` to a frame's end-to-end latency (the write of its last
record), and never holds a record past its frame's deadline less the margin and the slowest recent
write.

:meth:`RecordLinger.record` blocks its caller (a batch's I/O thread) until the write has returned and
returns what it wrote, exactly as the sink's ``record_tasks`` does: the worker deletes the batch's
messages only after this returns, so the order of the guarantees is unchanged (records durable
first, then the deletes; a crash between them leaves the messages for SQS to redeliver, and the
redelivery is a duplicate readers count once). A write that fails fails every batch that shared it:
each is left in flight for redelivery, as a batch whose own write failed is.

DynamoDB bills a ``BatchWriteItem`` per item (a write unit per KB of each), not per call: the linger
cuts calls (and the server's CPU, and the client's and the table's request rate), not write units,
except where several batches' records of one POST share an item. SQS bills a ``SendMessageBatch``
as one request per 64 KB: there the linger cuts billed requests too.

``linger_s`` 0 writes at once on the caller's thread (no thread, no hold): what a worker built
without a linger (tests) does.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from core.ids import post_of
from core.settings import seconds_from_env

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from core.adapters.results import TaskRecord

__all__ = [
    "DEFAULT_RECORD_LINGER_S",
    "DEFAULT_RECORD_MARGIN_S",
    "RecordLinger",
    "RecordSink",
    "record_linger_from_env",
]

log = logging.getLogger("skinflint.worker")

#: s the oldest record held may wait for others (SKINFLINT_RECORD_LINGER_S; 0, the default: none).
#: Off by default: DynamoDB bills a pull app's records per item, so the linger saves no write unit
#: there, and at 4 frames/s it added its 0.1 s to most frames' latency (docs/dataplane.md); a push
#: app's records are billed per SQS call, where 0.1 s of linger saves requests
DEFAULT_RECORD_LINGER_S = 0.0
#: s before the earliest frame deadline among the records held by which they are written
#: (SKINFLINT_RECORD_MARGIN_S): the write's own round trip must fit in it
DEFAULT_RECORD_MARGIN_S = 0.1


def record_linger_from_env(env: Mapping[str, str] | None = None) -> tuple[float, float]:
    """(``SKINFLINT_RECORD_LINGER_S``, ``SKINFLINT_RECORD_MARGIN_S``): the linger (0-5 s, default
    :data:`DEFAULT_RECORD_LINGER_S`; 0: each batch's records at once) and the margin before a frame's
    deadline (0-5 s, default :data:`DEFAULT_RECORD_MARGIN_S`). Raises ValueError naming the setting."""
    return (
        seconds_from_env(env, "SKINFLINT_RECORD_LINGER_S", DEFAULT_RECORD_LINGER_S, 5.0),
        seconds_from_env(env, "SKINFLINT_RECORD_MARGIN_S", DEFAULT_RECORD_MARGIN_S, 5.0),
    )


class RecordSink(Protocol):
    """Where a batch's terminal tasks go (``ResultStore``, ``PushSink``)."""

    def record_tasks(self, records: list[TaskRecord]) -> tuple[list[TaskRecord], list[TaskRecord]]: ...


@dataclass
class _Held:
    """One batch's records waiting for the write: its result (or failure) once written."""

    records: list[TaskRecord]
    done: threading.Event = field(default_factory=threading.Event)
    written: tuple[list[TaskRecord], list[TaskRecord]] | None = None
    error: BaseException | None = None


@dataclass
class _Group:
    """The records held for one sink: what one call writes."""

    sink: RecordSink
    per_call: int
    first_at: float
    due_at: float
    held: list[_Held] = field(default_factory=list)
    posts: set[str] = field(default_factory=set)


def _items_per_call(sink: RecordSink) -> int:
    """Items (POSTs) one call of the sink takes: 25 for a BatchWriteItem, 10 for a SendMessageBatch."""
    return int(getattr(sink, "items_per_call", 25))


def _post(rec: TaskRecord) -> str:
    try:
        return post_of(rec.request_id)
    except ValueError:  # not a request id we know (a poison record): an item of its own
        return rec.request_id


class RecordLinger:
    """Writes the records of several batches in one call per sink (module docstring). The thread of
    the first batch of a call (its leader) waits for the call to be due and makes it; the others
    wait for it: no thread of its own, and a call never waits for another."""

    def __init__(
        self,
        linger_s: float = 0.1,
        margin_s: float = DEFAULT_RECORD_MARGIN_S,
        clock: Callable[[], float] = time.time,
    ):
        if not linger_s >= 0 or not margin_s >= 0:
            raise ValueError(f"linger_s and margin_s must be >= 0, got {linger_s!r}, {margin_s!r}")
        self.linger_s = float(linger_s)
        self.margin_s = float(margin_s)
        self.clock = clock
        self._cond = threading.Condition()
        self._groups: dict[int, _Group] = {}  # id(sink) -> the call being filled for it
        self._closed = False
        #: calls made and batches they carried (the linger's effect: batches / calls)
        self.calls = 0
        self.batches = 0
        #: s the slowest recent write took (a decayed maximum: each write keeps 0.9 of it): added to
        #: the margin, so a loaded table or server moves the deadline bound earlier
        self.slow_write_s = 0.0

    def record(
        self, sink: RecordSink, records: list[TaskRecord]
    ) -> tuple[list[TaskRecord], list[TaskRecord]]:
        """Write ``records`` (one batch's terminal tasks) through ``sink`` with whatever other batches
        are held for it; returns (written, repeats) of these records once the write returned. Raises
        what the write raised."""
        if not records:
            return [], []
        if self.linger_s <= 0:
            return self._count(sink.record_tasks(records))
        held = _Held(list(records))
        posts = {_post(rec) for rec in records}
        deadline = min((rec.deadline for rec in records if rec.deadline is not None), default=None)
        with self._cond:
            direct = self._closed  # the agent is draining: at once
            lead = None if direct else self._hold(sink, held, posts, deadline)
            if lead is not None:  # this batch leads the call: wait until it is due
                while lead.due_at > self.clock():
                    self._cond.wait(timeout=lead.due_at - self.clock())
                if self._groups.get(id(sink)) is lead:
                    del self._groups[id(sink)]
        if direct:
            return self._count(sink.record_tasks(records))
        if lead is not None:
            self._write(lead)
        held.done.wait()
        if held.error is not None:
            raise held.error
        assert held.written is not None
        return held.written

    def _hold(self, sink: RecordSink, held: _Held, posts: set[str], deadline: float | None) -> _Group | None:
        """Add one batch's records to the call being filled for ``sink`` (under the lock) and move
        when it is due: the linger, the deadline less the margin (and the slowest recent write), or
        now when full. Returns the call when this batch starts it (its thread leads it), else None."""
        now = self.clock()
        group = self._groups.get(id(sink))
        lead = None
        if group is not None and len(group.posts | posts) > group.per_call:
            group.due_at = float("-inf")  # this batch would not fit: the held ones go first
            del self._groups[id(sink)]
            group = None
        if group is None:
            group = lead = self._groups[id(sink)] = _Group(
                sink, _items_per_call(sink), now, now + self.linger_s
            )
        group.held.append(held)
        group.posts |= posts
        if deadline is not None:
            group.due_at = min(group.due_at, deadline - self.margin_s - self.slow_write_s)
        if len(group.posts) >= group.per_call:
            group.due_at = float("-inf")
        self._cond.notify_all()  # the leader waits for its call's due time, which may have moved
        return lead

    def _count(
        self, written: tuple[list[TaskRecord], list[TaskRecord]]
    ) -> tuple[list[TaskRecord], list[TaskRecord]]:
        with self._cond:
            self.calls += 1
            self.batches += 1
        return written

    def close(self) -> None:
        """Every call being filled goes out now (its leader writes it); later records are written
        at once."""
        with self._cond:
            self._closed = True
            for group in self._groups.values():
                group.due_at = float("-inf")
            self._cond.notify_all()

    def _write(self, group: _Group) -> None:
        """One call of the sink for every batch held in ``group``; each gets its own records back."""
        combined = [rec for held in group.held for rec in held.records]
        t0 = time.perf_counter()
        try:
            fresh, repeats = group.sink.record_tasks(combined)
        except BaseException as exc:  # noqa: BLE001 - every batch of the call fails with it
            for held in group.held:
                held.error = exc
                held.done.set()
            return
        took = time.perf_counter() - t0
        with self._cond:
            self.calls += 1
            self.batches += len(group.held)
            self.slow_write_s = max(took, 0.9 * self.slow_write_s)
        fresh_ids, repeat_ids = {id(rec) for rec in fresh}, {id(rec) for rec in repeats}
        for held in group.held:
            held.written = (
                [rec for rec in held.records if id(rec) in fresh_ids],
                [rec for rec in held.records if id(rec) in repeat_ids],
            )
            held.done.set()
