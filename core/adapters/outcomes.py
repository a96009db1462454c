"""Frame outcomes as metrics: end-to-end latency and SLO attainment, once per frame.

Completion is derived, not counted (``core/adapters/results.py``): a frame is finished when
every task reachable from its roots has an item. After recording tasks without children (leaves,
or tasks dropped early) the worker reads the frame back (its items by key, consistently) and, when
it is finished, claims the frame's ``outcome`` item with a conditional ``PutItem``. Exactly one
writer wins the claim -- two leaves finishing at once may both see the frame finished -- and only
the winner emits. A parent records its task after forwarding its children, so the frame's last
write can be a parent's: a leaf's check that finds one of its own task's ancestors unrecorded checks
again later (up to ``AWAIT_CHECKS`` times), so the last leaf's reader always sees the frame finished
unless that parent's write is lost; a parent whose message was redelivered (it crashed between
forwarding and recording, and its children may have finished long ago) checks its frames itself.
What is emitted:

- ``SloAttainment`` (App; unit None): 1 when the frame is done by its deadline, else 0 (a frame
  dropped early counts 0). Average = attainment, SampleCount = finished frames. The dashboard and
  the SLO alarm read it (cdk/stacks/observability.py).
- ``EndToEndLatencyMs`` (App): front accept -> last result write, done frames only.
- ``EndToEndLatencyBucket`` (App, LeMs): a histogram (one count in the first bucket whose upper
  edge is >= the latency; ``LeMs=inf`` for the rest). CloudWatch keeps no distribution for
  aggregated values, and moto computes no percentiles, so the report's latency CDF comes from these.
- ``FramesDropped`` (App): frames with a task dropped early.

Best effort: a failure here is logged by the caller and never fails a batch.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from typing import TYPE_CHECKING, Any, Literal

from core.adapters._aws import AWS_ERRORS, error_code
from core.adapters.results import (  # the same rules as GET
    EXPIRES_AT,
    _completion,
    _split,
    expires_at,
    read_items,
)
from core.errors import DataPlaneError, ResultStoreError
from core.settings import DEFAULT_RESULTS_RETENTION_DAYS

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from core.adapters.metrics import Metrics
    from core.adapters.results import TaskRecord

__all__ = ["LATENCY_BUCKETS_MS", "FrameOutcomes", "bucket_label", "leaf_rank"]

log = logging.getLogger("skinflint.outcomes")

#: Upper edges (ms) of the end-to-end latency histogram; the last bucket is open (``inf``).
LATENCY_BUCKETS_MS: tuple[float, ...] = (
    25, 50, 75, 100, 150, 200, 250, 300, 350, 400, 450, 500, 600, 750, 1000, 1500, 2000, 3000, 5000, 10000,
)  # fmt: skip
_OUTCOME_SK = "outcome"
DEFAULT_DELAY_S = 0.3  # s a background check waits after the leaf's write (SKINFLINT_OUTCOME_DELAY_S)
_FRAME_SK = "frame"
Finished = tuple[str, str, float, float, float]  # app, status, deadline, accepted_at, finished_at
Check = Literal["emitted", "await", "no"]  # what one check of a frame found (FrameOutcomes._check)
#: checks of one frame by a leaf whose ancestor was not recorded yet (then the check is given up)
AWAIT_CHECKS = 10


def leaf_rank(modules: Iterable[str], children: Callable[[str], Sequence[object]], module: str) -> int:
    """``module``'s place among the DAG's leaf modules (those without children), in name order;
    a module with children (it checks only for its tasks dropped early) comes after every leaf."""
    leaves = sorted(name for name in modules if not children(name))
    return leaves.index(module) if module in leaves else len(leaves)


def bucket_label(latency_ms: float) -> str:
    """The ``LeMs`` dimension value of a latency: the first edge >= it, or ``inf``."""
    for edge in LATENCY_BUCKETS_MS:
        if latency_ms <= edge:
            return f"{edge:g}"
    return "inf"


class FrameOutcomes:
    """Emits each finished frame's outcome once (see the module doc).

    :meth:`observe` checks at once (tests); :meth:`submit` hands the check to a background thread
    when ``background`` is set, as the worker does: the read-back then costs the batch path
    nothing, and by the time it runs more of the frame is recorded. Checks still queued when the
    process exits are lost (best effort, like every metric); at most ``max_pending`` wait."""

    def __init__(
        self,
        client: Any,
        table: str,
        metrics: Metrics,
        background: bool = False,
        max_pending: int = 10_000,
        delay_s: float | None = None,
        roots: tuple[str, ...] = (),
        retention_s: float = DEFAULT_RESULTS_RETENTION_DAYS * 86_400.0,
    ):
        self._ddb = client
        self._table = table
        self.retention_s = retention_s  # the outcome item's expires_at: claim time + this
        self._metrics = metrics
        self._background = background
        self._max_pending = max_pending
        # a background check waits this long after the leaf's write: the frame's other leaves (on
        # other workers) are recorded by then, so the first check finds it finished and claims it,
        # and the later ones stop at the claim (one read instead of the whole task tree)
        self.delay_s = (
            float(os.environ.get("SKINFLINT_OUTCOME_DELAY_S", DEFAULT_DELAY_S))
            if delay_s is None
            else delay_s
        )
        # the root task ids of the app's frames (its root modules): read with the frame's first read,
        # so a walk costs one read per level of the DAG (a frame whose roots differ reads them after)
        self.roots = tuple(roots)
        # (due, request id, the task ids this writer recorded without children, checks made)
        self._pending: queue.Queue[tuple[float, str, tuple[str, ...], int]] = queue.Queue()
        self._queued: set[str] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.skipped = 0  # checks not queued because max_pending were waiting
        # what the checks cost and found (the worker logs them when it stops): checks run, reads
        # (BatchGetItem requests), frames found unfinished, found already claimed, claims won / lost
        # awaited: checks that found an ancestor of their own task unrecorded (checked again later);
        # gave_up: frames still awaiting a parent's write after AWAIT_CHECKS checks
        self.stats: dict[str, int] = dict.fromkeys(
            ("checks", "reads", "unfinished", "claimed_before", "won", "lost", "awaited", "gave_up"), 0
        )

    @classmethod
    def for_results(
        cls,
        results: Any,
        metrics: Metrics,
        background: bool = True,
        roots: tuple[str, ...] = (),
        rank: int = 0,
    ) -> FrameOutcomes | None:
        """Outcomes written next to ``results``' items (its table and client), or None when
        ``results`` is not a DynamoDB-backed :class:`ResultStore` (an in-memory fake).

        ``rank``: the writer's place among the app's leaf modules (:func:`leaf_rank`). Its checks
        wait ``(1 + rank)`` delays, so the leaves of one frame, which finish at about the same
        time, check one after the other: the first claims the frame, the later ones stop at their
        first read, instead of all walking the tree at once and racing for the claim."""
        client, table = getattr(results, "_ddb", None), getattr(results, "_table", None)
        if client is None or not isinstance(table, str):
            return None
        if os.environ.get("SKINFLINT_FRAME_OUTCOMES", "on").lower() in ("0", "off", "false", "no"):
            return None
        retention = getattr(results, "retention_s", DEFAULT_RESULTS_RETENTION_DAYS * 86_400.0)
        out = cls(client, table, metrics, background=background, roots=roots, retention_s=retention)
        out.delay_s *= 1 + max(0, rank)
        return out

    @staticmethod
    def _leaves(records: Iterable[TaskRecord], also: Iterable[str] = ()) -> dict[str, tuple[str, ...]]:
        """request id -> the ids of its tasks among ``records`` without children, by request id;
        the frames of ``also`` with none."""
        out: dict[str, list[str]] = {rid: [] for rid in also}
        for record in records:
            if not record.children:
                out.setdefault(record.request_id, []).append(record.task_id)
        return {rid: tuple(out[rid]) for rid in sorted(out)}

    def submit(self, records: Iterable[TaskRecord], also: Iterable[str] = ()) -> None:
        """After ``records`` were written: check their frames now, or in the background. ``also``:
        frames to check though the records written for them have children (a parent's write that
        may be its frame's last: a redelivered parent, whose children ran long ago)."""
        if not self._background:
            self.observe(records, also)
            return
        with self._lock:
            for rid, mine in self._leaves(records, also).items():
                self._enqueue(rid, mine, 0)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="frame-outcomes", daemon=True)
                self._thread.start()

    def _enqueue(self, rid: str, mine: tuple[str, ...], checks: int) -> None:
        """Queue a check of ``rid`` (the caller holds the lock); one per frame at a time."""
        if rid in self._queued:
            return
        if len(self._queued) >= self._max_pending:
            self.skipped += 1
            return
        self._queued.add(rid)
        self._pending.put((time.monotonic() + self.delay_s, rid, mine, checks))

    def _loop(self) -> None:
        while True:
            # in submission order, so in order of due time (a re-check is due a delay after now,
            # no earlier than anything queued before it)
            due, rid, mine, checks = self._pending.get()
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            with self._lock:
                self._queued.discard(rid)
            try:
                if self._check(rid, mine) == "await":
                    if checks + 1 < AWAIT_CHECKS:
                        with self._lock:
                            self._enqueue(rid, mine, checks + 1)
                    else:
                        self.stats["gave_up"] += 1
                        log.warning("frame %s: a parent of %s is still unrecorded", rid, ", ".join(mine))
            except DataPlaneError as exc:
                log.warning("frame outcome of %s not emitted: %s", rid, exc)

    def observe(self, records: Iterable[TaskRecord], also: Iterable[str] = ()) -> int:
        """After ``records`` were written: emit the outcome of every frame they finished (and of
        ``also``'s). Returns how many frames this call emitted (checked once each: no waiting for a
        parent's write)."""
        leaves = self._leaves(records, also)
        return sum(self._check(rid, mine) == "emitted" for rid, mine in leaves.items())

    def _check(self, request_id: str, mine: tuple[str, ...] = ()) -> Check:
        """``emitted`` when this caller emitted ``request_id``'s outcome (finished, claim won);
        ``await`` when an ancestor of one of ``mine`` (this writer's tasks) is not recorded yet (its
        write may be the frame's last: check again); else ``no``."""
        self.stats["checks"] += 1
        got = self._read(request_id, mine)
        if not isinstance(got, tuple):
            return got
        app, status, deadline, accepted_at, finished = got
        latency_s = finished - accepted_at
        if not self._claim(request_id, status, latency_s):
            self.stats["lost"] += 1
            return "no"
        self.stats["won"] += 1
        within = status == "done" and finished <= deadline
        self._metrics.put("SloAttainment", 1.0 if within else 0.0, "None", App=app)
        if status == "done":
            ms = latency_s * 1e3
            self._metrics.put("EndToEndLatencyMs", ms, "Milliseconds", App=app)
            self._metrics.put("EndToEndLatencyBucket", 1, App=app, LeMs=bucket_label(ms))
        else:
            self._metrics.put("FramesDropped", 1, App=app)
        return "emitted"

    def _read(self, request_id: str, mine: tuple[str, ...] = ()) -> Finished | Check:
        """(app, status, deadline, accepted_at, finished_at) of a finished frame; else ``await``
        when a task not recorded yet is an ancestor of one of ``mine``, ``no`` otherwise.

        Walks the frame's task tree by key (frame item -> roots -> children, one consistent
        ``BatchGetItem`` per level) rather than one ``Query`` of the partition: the same reads on
        DynamoDB, but moto answers a Query by scanning the whole table, which made each check cost
        more as the results table grew (the local stack slowed down within a minute)."""
        head = self._get(
            [
                (request_id, _FRAME_SK),
                (request_id, _OUTCOME_SK),
                *((request_id, f"task#{root}") for root in self.roots),
            ]
        )
        frame = head.get((request_id, _FRAME_SK))
        if frame is None or (request_id, _OUTCOME_SK) in head:
            self.stats["claimed_before" if frame is not None else "unfinished"] += 1
            return "no"  # not created yet, or its outcome is already claimed: nothing to emit
        tasks: dict[str, dict[str, Any]] = {}
        # the roots the head read already fetched (when the hint matches this frame's roots)
        known = {sk.removeprefix("task#"): item for (_, sk), item in head.items() if sk.startswith("task#")}
        todo = _split(frame.get("roots"))
        while todo:
            got = {task: known[task] for task in todo if task in known}
            want = [task for task in todo if task not in got]
            if want:
                read = self._get([(request_id, f"task#{task}") for task in want])
                got.update({sk.removeprefix("task#"): item for (_, sk), item in read.items()})
            known = {}
            if len(got) < len(todo):  # a task is not recorded yet: not finished
                missing = [task + "/" for task in todo if task not in got]
                if any(own.startswith(prefix) for own in mine for prefix in missing):
                    self.stats["awaited"] += 1
                    return "await"  # the write of this task's ancestor is still to come
                self.stats["unfinished"] += 1
                return "no"
            tasks.update(got)
            todo = [child for item in got.values() for child in _split(item.get("children"))]
        status, finished = _completion(frame, tasks)
        if status == "queued" or finished is None:
            self.stats["unfinished"] += 1
            return "no"
        return frame["app"], status, float(frame["deadline"]), float(frame["accepted_at"]), finished

    def _get(self, keys: list[tuple[str, str]]) -> dict[tuple[str, str], dict[str, Any]]:
        self.stats["reads"] += (len(set(keys)) + 99) // 100
        return read_items(self._ddb, self._table, keys)

    def _claim(self, request_id: str, status: str, latency_s: float | None) -> bool:
        now = time.time()
        item: dict[str, Any] = {
            "pk": {"S": request_id},
            "sk": {"S": _OUTCOME_SK},
            "status": {"S": status},
            "claimed_at": {"N": repr(now)},
            EXPIRES_AT: {"N": str(expires_at(now, self.retention_s))},
        }
        if latency_s is not None:
            item["latency_s"] = {"N": repr(float(latency_s))}
        try:
            self._ddb.put_item(
                TableName=self._table, Item=item, ConditionExpression="attribute_not_exists(pk)"
            )
        except AWS_ERRORS as exc:
            if error_code(exc) == "ConditionalCheckFailedException":
                return False
            raise ResultStoreError(f"cannot claim the outcome of {request_id}: {exc}") from exc
        return True
