"""The stranded-frame sweeper and the accounting invariant (issue #28, item 1).

Every frame the front accepts is answered (``done``), dropped with a reason, or still in flight.
Each epoch the control loop sweeps the deadline minutes whose frames are all past their deadline
plus ``grace_s`` (a worker drops early any request that can no longer meet its deadline, so by
then every frame whose messages still exist is finished): it reads the minute's POST items from the
deadline index (``core.adapters.results``: the POST items are kept in their due minute's partitions,
one Query per shard) and each POST's records (one eventually consistent Query), and for each frame:

- finished (its terminal tasks' weights sum to 1): answered, or dropped with the reasons its
  tasks carry;
- not finished: the messages of its missing share were lost or stranded. The sweeper records a
  terminal task ``stranded`` (``dropped``, ``reason: "stranded"``) carrying the missing weight,
  which makes the frame read ``dropped``, and emits its share's outcome (``FramesDropped``), as a
  worker would have.

The invariant ``accepted = answered + dropped-with-reason + in flight`` is then checked for the
swept minutes, whose frames are no longer in flight: ``FramesUnaccounted`` (no dimension) counts
the swept frames that are neither answered nor dropped after the sweep (a write that failed, a
POST item missing). It must stay 0; the observability stack alarms on it. ``FramesStranded`` (App)
counts the frames the sweeper recorded dropped; ``SweepErrors`` is 1 for a sweep that stopped on a
read error (then ``FramesUnaccounted`` is emitted only if a minute was swept: a sweep that cannot
read never reports 0).

**Push apps** (``"results": "push"``, docs/dataplane.md "Results: pull or push"): their records are
on the app's results queue, not in the table, so the sweep cannot tell which of their frames
finished. It takes each of their POSTs as the index listed it (the POST item: the accept time and
deadline of every frame; no further read) and sends the app's results queue one ``due`` message per
minute (200 POSTs a message, :func:`core.adapters.results.due_bodies`): its consumer
(:class:`core.adapters.results.PushedFrames`, ``skinflint results``) reports every listed frame it
has not seen finished as dropped, ``stranded``. Those frames count as ``pushed`` (accounted by the
consumer and by counts: ``FramesFinished``, queue depths, the DLQ), neither answered nor unaccounted
here. A minute swept twice sends its due message twice; the consumer reports a frame once.

Idempotent: a minute swept twice (a state write lost, two planners) finds every frame finished
(the stranded records count once: their task id is fixed).

Cost (DynamoDB, per epoch): ``DUE_SHARDS`` Queries per swept minute (the POST items, about 0.7 KB
each for 10 frames) plus one eventually consistent Query per pull POST (0.5 read units per 4 KB of
its records): in proportion to the traffic, whatever the size of the table. Only a frame not finished
(rare) costs a write. A sweep stops after ``max_frames`` frames (the rest of the minutes the next
epoch)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.adapters.due_index import DueIndex
from core.adapters.outcomes import FrameOutcomes
from core.adapters.results import DUE_BUCKET_S, TaskRecord, due_bodies, frame_states
from core.errors import DataPlaneError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from core.adapters.due_index import DuePost
    from core.adapters.metrics import Metrics
    from core.adapters.queues import TaskQueues
    from core.adapters.results import FrameState, ResultStore

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
    settled: int = 0  # frames this sweep settled (recorded dropped: stranded)
    pushed: int = 0  # frames of push apps, listed in a due message to their results queue
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
            "pushed": self.pushed,
            "unaccounted": len(self.unaccounted),
            **({"error": self.error} if self.error else {}),
        }


def due_buckets(cursor: int | None, now: float, cfg: SweepConfig) -> range:
    """The minutes whose every deadline is at least ``grace_s`` past, from ``cursor`` on."""
    last = int((now - cfg.grace_s) // DUE_BUCKET_S) - 1  # minute b ends at (b + 1) * 60 <= now - grace
    first = cursor if cursor is not None else last - cfg.lookback_buckets + 1
    return range(first, last + 1)


def _stranded_record(frame: FrameState, now: float) -> TaskRecord:
    """The terminal record that accounts for a frame's missing share."""
    return TaskRecord(
        request_id=frame.request_id,
        task_id=STRANDED,
        module=STRANDED,
        status="dropped",
        hardware="none",
        emulated=False,
        enqueued_at=now,
        started_at=now,
        finished_at=now,
        batch_size=0,
        reason=STRANDED,
        app=frame.app,
        accepted_at=frame.accepted_at,
        deadline=frame.deadline,
        weight=str(frame.missing),
        recheck=True,  # a sweep repeated (a lost cursor) finds it recorded
    )


def _sweep_post(
    results: ResultStore, outcomes: FrameOutcomes, post: DuePost, now: float
) -> tuple[dict[str, str], int]:
    """Each frame's status after the sweep ("done", "dropped", "stranded": recorded dropped here,
    "unknown") and how many frames the POST item counts."""
    frames = results.post_frames(post.post_id, head=post.head or None)
    if frames is None:
        return {}, post.frames
    stranded = [frame for frame in frames.values() if frame.status == "queued"]
    out = {rid: frame.status for rid, frame in frames.items()}
    if stranded:
        fresh, _ = results.record_tasks([_stranded_record(frame, now) for frame in stranded])
        outcomes.submit(fresh)
        for rec in fresh:
            out[rec.request_id] = STRANDED
        log.warning(
            "POST %s (%s): %d frame(s) never finished, recorded dropped (%s): %s",
            post.post_id,
            post.app,
            len(fresh),
            STRANDED,
            ", ".join(rec.request_id for rec in fresh),
        )
    return out, max(post.frames, len(frames))


def _push_due(
    results: ResultStore, queues: TaskQueues, push: Mapping[str, str], posts: list[DuePost]
) -> tuple[int, list[DuePost]]:
    """Send the due messages of a minute's POSTs of push apps (their POST items as the index listed
    them); returns the frames they list and the POSTs whose item is gone (their frames unaccounted)."""
    by_app: dict[str, dict[str, dict[str, FrameState]]] = {}
    gone: list[DuePost] = []
    for post in posts:
        frames = frame_states(post.post_id, post.head) if post.head else results.post_frames(post.post_id)
        if frames:
            by_app.setdefault(post.app, {})[post.post_id] = frames
        else:
            gone.append(post)
    listed = 0
    for app, of_app in sorted(by_app.items()):
        queues.send_bodies(push[app], due_bodies(app, of_app))
        listed += sum(len(frames) for frames in of_app.values())
    return listed, gone


def sweep(
    results: ResultStore,
    metrics: Metrics,
    cursor: int | None,
    now: float | None = None,
    cfg: SweepConfig | None = None,
    index: Any = None,
    push: Mapping[str, str] | None = None,
    queues: TaskQueues | None = None,
) -> SweepReport:
    """Sweep the due minutes from ``cursor`` (the first not swept yet; None: ``lookback_buckets``
    back). ``report.next_bucket`` is the cursor to keep. Emits the accounting metrics. ``index``: what
    lists a minute's frames (default the results table's deadline index, :class:`DueIndex`). ``push``:
    the push apps' results queues (app -> URL), sent their due messages through ``queues``."""
    cfg = cfg or SweepConfig()
    now = time.time() if now is None else now
    report = SweepReport(next_bucket=cursor)
    client, table = getattr(results, "_ddb", None), getattr(results, "_table", None)
    outcomes = FrameOutcomes(metrics)
    index = index or DueIndex(client, str(table))  # the same table's deadline index
    stranded_by_app: dict[str, int] = {}
    for bucket in due_buckets(cursor, now, cfg):
        if report.accepted >= cfg.max_frames:
            break
        try:
            posts = index.due_posts(bucket)
        except DataPlaneError as exc:  # this minute again next epoch
            log.warning("sweep of minute %d stopped: %s", bucket, exc)
            report.error = f"minute {bucket}: {exc}"
            break
        counted = 0
        pushed = [post for post in posts if push and queues is not None and post.app in push]
        if pushed:
            assert push is not None and queues is not None
            try:
                listed, gone = _push_due(results, queues, push, pushed)
            except DataPlaneError as exc:  # this minute again next epoch (a due message twice is harmless)
                log.warning("due messages of minute %d not sent: %s", bucket, exc)
                report.error = f"minute {bucket}: {exc}"
                break
            report.pushed += listed
            counted += listed + sum(post.frames for post in gone)
            report.unaccounted += [f"{post.post_id}:{i}" for post in gone for i in range(post.frames)]
            posts = [post for post in posts if post not in pushed]
        for post in posts:
            try:
                statuses, n_frames = _sweep_post(results, outcomes, post, now)
            except DataPlaneError as exc:
                log.warning("POST %s not swept: %s", post.post_id, exc)
                statuses, n_frames = {}, post.frames
            counted += max(n_frames, len(statuses))
            for rid, found in statuses.items():
                if found == STRANDED:
                    report.stranded += 1
                    report.settled += 1
                    stranded_by_app[post.app] = stranded_by_app.get(post.app, 0) + 1
                if found == "done":
                    report.answered += 1
                elif found in ("dropped", STRANDED):
                    report.dropped += 1
                else:
                    report.unaccounted.append(rid)
            report.unaccounted += [f"{post.post_id}:{i}" for i in range(len(statuses), n_frames)]
        report.accepted += counted
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
