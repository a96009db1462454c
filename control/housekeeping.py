"""The epoch's housekeeping steps, best effort (a failure is a warning in the epoch's summary):

- :func:`collect_garbage`: garbage collection of old versions, drained queues and dead instances'
  claims; the messages of a superseded queue nothing consumes any more are moved to the current
  version (:mod:`control.gc`, control/rehome.py);
- :func:`sweep_stranded`: the frames past their deadline accounted for (:mod:`control.sweeper`).

:class:`control.epoch.Controller` runs both at the end of every epoch.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from control.gc import GcConfig, collect
from control.sweeper import SweepConfig, sweep

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from control.config import ControlConfig
    from control.state import ControlState
    from control.summary import EpochSummary
    from core.adapters.metrics import Metrics
    from core.adapters.plan_store import PlanStore
    from core.adapters.queue_admin import QueueAdmin
    from core.adapters.queues import TaskQueues
    from core.adapters.results import ResultStore

__all__ = ["collect_garbage", "sweep_stranded"]


def collect_garbage(
    config: ControlConfig,
    plans: PlanStore,
    queues: QueueAdmin,
    depth: Callable[[str], int],
    tasks: TaskQueues | None,
    now: float,
    summary: EpochSummary,
) -> None:
    """Collect old versions, drained queues and dead instances' claims (:func:`control.gc.collect`);
    the report goes to ``summary.gc``, a failure to its warnings."""
    try:
        report = collect(
            plans,
            queues,
            depth,
            now,
            GcConfig(
                stale_s=config.stale_s,
                queue_prefix=config.queue_prefix,
                keep_previous_s=max(config.epoch_s, config.activate_lead_s),
            ),
            tasks=tasks,
        )
    except Exception as exc:  # noqa: BLE001 - GC is best effort; the next epoch retries
        summary.warnings.append(f"gc: {type(exc).__name__}: {exc}")
        return
    summary.gc = report.as_json()


def sweep_stranded(
    config: ControlConfig,
    results: ResultStore | None,
    metrics: Metrics,
    now: float,
    state: ControlState,
    summary: EpochSummary,
    push: Mapping[str, str] | None = None,
    tasks: TaskQueues | None = None,
) -> None:
    """Account for the frames past their deadline (control/sweeper.py); the cursor is saved
    with the state. ``push``: the push apps' results queues (app -> URL), sent their due messages
    through ``tasks``."""
    if results is None or config.sweep_grace_s <= 0:
        return
    t0 = time.perf_counter()
    try:
        report = sweep(
            results,
            metrics,
            state.sweep_bucket,
            now,
            SweepConfig(grace_s=config.sweep_grace_s),
            push=push,
            queues=tasks,
        )
    except Exception as exc:  # noqa: BLE001 - best effort like GC; the next epoch sweeps again
        summary.warnings.append(f"sweep: {type(exc).__name__}: {exc}")
        return
    state.sweep_bucket = report.next_bucket
    summary.sweep = report.as_json()
    if report.error:
        summary.warnings.append(f"sweep: {report.error}")
    summary.timings_ms["sweep"] = round((time.perf_counter() - t0) * 1e3, 2)
