"""What a worker reports of a batch: :class:`BatchOutcome` (re-exported by :mod:`workers.worker`),
the dimensions of every metric a worker puts, and the per-batch and per-hop metrics it puts
(``ModuleLatencyMs``, ``QueueWaitMs``, ``BatchFill``, ``BatchMs``, ``ServiceOverrunMs``, ``Drops``,
``Duplicates``; the hop delay and its bucket, core/hops.py).

:class:`workers.worker.Worker` calls these functions with its metrics adapter and assignment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

from core.hops import BUCKET_METRIC, DELAY_METRIC, bucket_label

if TYPE_CHECKING:
    from core.adapters.metrics import Metrics
    from core.adapters.results import TaskRecord
    from core.schema import Assignment
    from workers.batching import Pending

__all__ = ["BatchOutcome", "put_batch_metrics", "put_hop_delays"]


class _Dims(TypedDict):
    """The dimensions of every metric a worker puts."""

    App: str
    Module: str
    Hardware: str


@dataclass
class BatchOutcome:
    batch_id: int
    ran: int = 0
    dropped: int = 0
    duplicates: int = 0
    forwarded: int = 0


def put_hop_delays(metrics: Metrics, app: str, module: str, delays: list[float]) -> None:
    """Each first delivery's hop (core/hops.py): the time from the sender's ``enqueued_at`` (a
    parent's finish, the front's admission) until the receive that returned it, the SQS send,
    delivery and receive. The long poll waiting for a message before it was sent is not in it (it
    counts from the send); a message that waited in the queue while the receiver was busy is (a
    request waits that long). A redelivery is left out: it waited for a visibility timeout, not
    for a hop. Clocks of two hosts may differ by a little: a negative delay counts as 0."""
    if not delays:
        return
    put = metrics.put
    for delay in delays:
        delay_ms = max(0.0, delay) * 1e3
        put(DELAY_METRIC, delay_ms, "Milliseconds", App=app, Module=module)
        put(BUCKET_METRIC, 1, "Count", App=app, Module=module, UpToMs=bucket_label(delay_ms))


def put_batch_metrics(
    metrics: Metrics,
    dims: _Dims,
    assignment: Assignment,
    items: list[Pending],
    run: list[Pending],
    records: list[TaskRecord],
    out: BatchOutcome,
    start: float,
    done: float,
) -> None:
    """One batch's metrics: ``items`` the batch assembled, ``run`` those it ran, ``records`` their
    results, ``start`` and ``done`` its run's start and end."""
    put = metrics.put
    for record in records:
        if record.status == "done":
            put("ModuleLatencyMs", (record.finished_at - record.enqueued_at) * 1e3, "Milliseconds", **dims)
    for pending in items:
        put("QueueWaitMs", (start - pending.message.enqueued_at) * 1e3, "Milliseconds", **dims)
    if run:
        put("BatchFill", len(run) / assignment.batch, "None", **dims)
        put("BatchMs", (done - start) * 1e3, "Milliseconds", **dims)
        # how much later than planned the batch finished, from its window end: the planned batch
        # duration (device time) and the group's latency-only hop (SQS delivery) cover the run and
        # what delivers it, the packing's added wait the co-located shares; the control loop adds
        # a module's positive maximum to its profile (control/calibration.py)
        close_at = min(pending.message.window_end for pending in run)
        planned = assignment.duration_s + assignment.overhead_s + assignment.added_wait_s
        overrun = (done - close_at - planned) * 1e3
        put("ServiceOverrunMs", overrun, "Milliseconds", **dims)
    put("Drops", out.dropped, **dims)
    put("Duplicates", out.duplicates, **dims)
