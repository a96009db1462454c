"""Frame outcomes as metrics, counted by weight: no reads, no claims.

Completion is by weights (``core/adapters/results.py``): a root task carries weight 1 and a task
with k children gives each 1/k of its own, so the weights of a frame's terminal tasks (no children,
or dropped) sum to 1. A worker that records terminal tasks emits, for each, its weight as a share
of its frame; summed over any set of frames the shares count those frames exactly, without a
reader that knows when a frame's last task ran. What is emitted per terminal task (App dimension,
the sample weighted by the task's share):

- ``SloAttainment`` (unit None): 1 when the task finished by its frame's deadline (and was not
  dropped), else 0. SampleCount = the frames finished (in frames), Average = the share of finished
  frames' work done by the deadline: every frame within its SLO gives 1, a frame with a branch late
  loses that branch's share (the per-frame truth, all branches by the deadline, is what
  ``GET /v1/requests/{id}`` and ``skinflint demo`` report; the metric is the lower-cost stand-in).
  The dashboard and the SLO alarm read it (cdk/stacks/observability.py).
- ``EndToEndLatencyMs``: front accept -> the terminal task's finish, done tasks only.
- ``EndToEndLatencyBucket`` (App, LeMs): that latency's histogram (a count, weighted, in the first
  bucket whose upper edge is >= it; ``LeMs=inf`` for the rest): the report's latency CDF.
- ``FramesFinished``: the shares of finished frames (done or dropped), in frames: with the front's
  ``FramesAccepted`` and the sweeper's accounting, the counts behind "accepted = answered + dropped
  + in flight".
- ``FramesDropped``: the shares of dropped terminal tasks (a task past its deadline, poison, swept).

A task recorded twice (a redelivery the worker could not tell) is emitted twice; the worker checks
its redeliveries first (``TaskRecord.recheck``), so that needs a crash between the record write and
the message's delete and a second delivery that runs before the first write is visible, or a
redelivered parent's second copy of a child (checked) that runs before the first copy (written
without a check): a redelivery comes a visibility timeout later, long after the first copies ran. A
redelivered message whose task its partition already holds (a repeat) is not emitted again: its
first delivery emitted it, unless its worker died between the write and the emission, and then the
metrics it buffered (up to a flush interval of every share) died with it anyway.

Best effort: a failure here is logged by the caller and never fails a batch.
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

    from core.adapters.metrics import Metrics
    from core.adapters.results import TaskRecord

__all__ = ["LATENCY_BUCKETS_MS", "FrameOutcomes", "bucket_label"]

#: Upper edges (ms) of the end-to-end latency histogram; the last bucket is open (``inf``).
LATENCY_BUCKETS_MS: tuple[float, ...] = (
    25, 50, 75, 100, 150, 200, 250, 300, 350, 400, 450, 500, 600, 750, 1000, 1500, 2000, 3000, 5000, 10000,
)  # fmt: skip


def bucket_label(latency_ms: float) -> str:
    """The ``LeMs`` dimension value of a latency: the first edge >= it, or ``inf``."""
    for edge in LATENCY_BUCKETS_MS:
        if latency_ms <= edge:
            return f"{edge:g}"
    return "inf"


class FrameOutcomes:
    """Emits the outcome share of every terminal task recorded (see the module doc)."""

    def __init__(self, metrics: Metrics):
        self._metrics = metrics
        self.emitted = 0.0  # frames' worth of shares emitted (the worker logs it when it stops)

    def submit(self, records: Iterable[TaskRecord]) -> float:
        """After ``records`` (terminal tasks) were written: emit each one's share. Returns the
        frames' worth emitted."""
        total = 0.0
        for rec in records:
            if rec.children or rec.accepted_at is None or rec.deadline is None:
                continue  # not terminal, or not a frame's task (nothing to measure against)
            share = float(Fraction(rec.weight))
            if share <= 0:
                continue
            total += share
            app = rec.app
            done = rec.status == "done"
            within = done and rec.finished_at <= rec.deadline
            put = self._metrics.put
            put("SloAttainment", 1.0 if within else 0.0, "None", weight=share, App=app)
            put("FramesFinished", 1.0, "Count", weight=share, App=app)
            if done:
                ms = (rec.finished_at - rec.accepted_at) * 1e3
                put("EndToEndLatencyMs", ms, "Milliseconds", weight=share, App=app)
                put("EndToEndLatencyBucket", 1.0, "Count", weight=share, App=app, LeMs=bucket_label(ms))
            else:
                put("FramesDropped", 1.0, "Count", weight=share, App=app)
        self.emitted += total
        return total
