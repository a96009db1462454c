"""The stranded-frame sweeper and the accounting invariant (issue #28, item 1).

Every frame the front accepts is answered (``done``), dropped with a reason, or still in flight.
Each epoch the control loop sweeps the deadline minutes whose frames are all past their deadline
plus ``grace_s`` (a worker drops early any request that can no longer meet its deadline, so by
then every frame whose messages still exist has an outcome): it reads the minute's frames from the
deadline index (``core.adapters.results``, one Query per shard), the ``outcome`` item of each (the
claim a worker writes when it emits the frame's outcome), and for a frame without one it walks the
frame's task tree:

- finished (every reachable task recorded): its outcome had not been emitted (a worker's check
  was lost); the sweeper claims and emits it, as the worker would have;
- not finished: its missing tasks' messages were lost or stranded. Each missing task is recorded
  ``dropped`` with ``reason: "stranded"`` by the same conditional write a worker uses (a worker
  that processes the message later finds it recorded: a duplicate, nothing overwritten), which
  makes the frame read ``dropped``; then its outcome is claimed and emitted (``FramesDropped``).

The invariant ``accepted = answered + dropped-with-reason + in flight`` is then checked for the
swept minutes, whose frames are no longer in flight: ``FramesUnaccounted`` (no dimension) counts
the swept frames that are neither answered nor dropped after the sweep (a write that failed, a
frame item missing). It must stay 0; the observability stack alarms on it. ``FramesStranded``
(App) counts the frames the sweeper recorded dropped; ``SweepErrors`` is 1 for a sweep that stopped
on a read error (then ``FramesUnaccounted`` is emitted only if a minute was swept: a sweep that
cannot read never reports 0).

Idempotent: a minute swept twice (a state write lost, two planners) finds every frame's outcome
claimed; the drop records and the claim are conditional writes.

Cost (DynamoDB, per epoch): ``DUE_SHARDS`` Queries per swept minute (about 100 bytes an index
item: 0.5 RCU per 4 KB read, eventually consistent, about 0.013 RCU a frame) plus one consistent
``BatchGetItem`` key per frame for its outcome item (1 RCU a frame, 100 keys a request): about one
read unit per accepted frame, in proportion to the traffic, whatever the size of the table. Only
a frame without an outcome (rare) costs its tree walk (one read per DAG level) and the writes.
Writes: one index item per accepted frame (the front's BatchWriteItem, 1 WCU). A sweep stops after
``max_frames`` frames (the rest of the minutes the next epoch)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.adapters.due_index import DueIndex
from core.adapters.outcomes import FrameOutcomes
from core.adapters.results import DUE_BUCKET_S, TaskRecord
from core.errors import DataPlaneError

if TYPE_CHECKING:
    from core.adapters.due_index import DueFrame
    from core.adapters.metrics import Metrics
    from core.adapters.results import ResultStore

__all__ = ["STRANDED", "SweepConfig", "SweepReport", "sweep"]

log = logging.getLogger("skinflint.control.sweeper")

STRANDED = "stranded"  # the reason a swept task is recorded dropped with


@dataclass(frozen=True)
class SweepConfig:
    grace_s: float = 120.0  # s past a frame's deadline before it is swept (visibility timeouts, moves)
    max_frames: int = 20_000  # frames read per sweep (whole minutes; the rest the next epoch)
    lookback_buckets: int = 10  # minutes swept back from now the first time (no cursor yet)


@dataclass
class SweepReport:
    buckets: list[int] = field(default_factory=list)  # minutes swept
    accepted: int = 0  # frames whose deadline fell in them
    answered: int = 0
    dropped: int = 0  # dropped with a reason (by a worker, or by this sweep)
    stranded: int = 0  # of them, recorded dropped by this sweep
    settled: int = 0  # frames without an outcome item this sweep settled (a lost check, or stranded)
    unaccounted: list[str] = field(default_factory=list)  # request ids neither answered nor dropped
    next_bucket: int | None = None  # the first minute the next sweep reads
    error: str | None = None  # why the sweep stopped early (the rest: the next epoch)

    def as_json(self) -> dict[str, Any]:
        return {
            "buckets": [self.buckets[0], self.buckets[-1]] if self.buckets else [],
            "accepted": self.accepted,
            "answered": self.answered,
            "dropped": self.dropped,
            "stranded": self.stranded,
            "settled": self.settled,
            "unaccounted": len(self.unaccounted),
            **({"error": self.error} if self.error else {}),
        }


def due_buckets(cursor: int | None, now: float, cfg: SweepConfig) -> range:
    """The minutes whose every deadline is at least ``grace_s`` past, from ``cursor`` on."""
    last = int((now - cfg.grace_s) // DUE_BUCKET_S) - 1  # minute b ends at (b + 1) * 60 <= now - grace
    first = cursor if cursor is not None else last - cfg.lookback_buckets + 1
    return range(first, last + 1)


def _stranded_record(request_id: str, task_id: str, now: float) -> TaskRecord:
    module = task_id.rsplit("/", 1)[-1].split(".", 1)[0]  # "detector/car.2" -> "car"
    return TaskRecord(
        request_id=request_id,
        task_id=task_id,
        module=module,
        status="dropped",
        hardware="none",
        emulated=False,
        enqueued_at=now,
        started_at=now,
        finished_at=now,
        batch_size=0,
        reason=STRANDED,
    )


def _settle(results: ResultStore, outcomes: FrameOutcomes, frame: DueFrame, now: float) -> str:
    """Account for a frame without an outcome item: "done", "dropped" (``stranded``: recorded
    dropped here) or "unknown" (no frame item)."""
    item, tasks, missing = results.frame_tree(frame.request_id)
    if item is None:
        return "unknown"
    stranded = False
    if missing:
        fresh, _ = results.record_tasks([_stranded_record(frame.request_id, task, now) for task in missing])
        stranded = bool(fresh)
        if fresh:
            log.warning(
                "frame %s (%s): %d task(s) never answered, recorded dropped (%s): %s",
                frame.request_id,
                frame.app,
                len(fresh),
                STRANDED,
                ", ".join(record.task_id for record in fresh),
            )
        item, tasks, missing = results.frame_tree(frame.request_id)
        if missing:  # a task recorded meanwhile listed children not recorded yet: the next sweep
            return "unknown"
    outcomes.observe([], also=[frame.request_id])  # claims and emits, unless a worker did
    status = "dropped" if any(task.get("status") == "dropped" for task in tasks.values()) else "done"
    return "stranded" if stranded and status == "dropped" else status


def sweep(
    results: ResultStore,
    metrics: Metrics,
    cursor: int | None,
    now: float | None = None,
    cfg: SweepConfig | None = None,
    index: Any = None,
) -> SweepReport:
    """Sweep the due minutes from ``cursor`` (the first not swept yet; None: ``lookback_buckets``
    back). ``report.next_bucket`` is the cursor to keep. Emits the accounting metrics. ``index``: what
    lists a minute's frames (default the results table's deadline index, :class:`DueIndex`)."""
    cfg = cfg or SweepConfig()
    now = time.time() if now is None else now
    report = SweepReport(next_bucket=cursor)
    client, table = getattr(results, "_ddb", None), getattr(results, "_table", None)
    outcomes = FrameOutcomes(client, str(table), metrics, retention_s=results.retention_s)
    index = index or DueIndex(client, str(table))  # the same table's deadline index
    stranded_by_app: dict[str, int] = {}
    for bucket in due_buckets(cursor, now, cfg):
        if report.accepted >= cfg.max_frames:
            break
        try:
            frames = index.due_frames(bucket)
            claimed: dict[str, str] = {}
            for i in range(0, len(frames), 100):
                claimed.update(results.outcome_status([frame.request_id for frame in frames[i : i + 100]]))
        except DataPlaneError as exc:  # this minute again next epoch
            log.warning("sweep of minute %d stopped: %s", bucket, exc)
            report.error = f"minute {bucket}: {exc}"
            break
        for frame in frames:
            status = claimed.get(frame.request_id)
            if status is None:
                try:
                    status = _settle(results, outcomes, frame, now)
                except DataPlaneError as exc:
                    log.warning("frame %s not settled: %s", frame.request_id, exc)
                    status = "unknown"
                if status in ("done", "dropped", "stranded"):
                    report.settled += 1
            if status == "stranded":
                report.stranded += 1
                stranded_by_app[frame.app] = stranded_by_app.get(frame.app, 0) + 1
                status = "dropped"
            if status == "done":
                report.answered += 1
            elif status == "dropped":
                report.dropped += 1
            else:
                report.unaccounted.append(frame.request_id)
        report.accepted += len(frames)
        report.buckets.append(bucket)
        report.next_bucket = bucket + 1
    if report.unaccounted:
        log.error(
            "%d swept frame(s) neither answered nor dropped: %s",
            len(report.unaccounted),
            ", ".join(report.unaccounted[:10]),
        )
    # a sweep that could not read says so (SweepErrors) rather than report nothing unaccounted
    metrics.put("SweepErrors", 1 if report.error else 0)
    if report.buckets:
        metrics.put("FramesUnaccounted", len(report.unaccounted))
    metrics.put("FramesSwept", report.accepted)
    for app, count in sorted(stranded_by_app.items()):
        metrics.put("FramesStranded", count, App=app)
    return report
