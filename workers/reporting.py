"""A worker's metrics and reports (workers/worker.py): each batch's metrics and its time on the device,
each first delivery's hop, and every ``report_s`` the interval's instance and device seconds, the
windows that closed empty and the heartbeat. :class:`WorkerReporting` is a base of
:class:`~workers.worker.Worker`, whose state (its assignment, router, locks and counters) it uses."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from core.errors import DataPlaneError
from workers.batch_metrics import put_hop_delays

if TYPE_CHECKING:
    import threading
    from collections.abc import Callable

    from core.adapters.metrics import Metrics
    from core.routing import Router
    from core.schema import Assignment
    from workers.batch_metrics import _Dims
    from workers.runtimes import Runtime

__all__ = ["WorkerReporting"]

log = logging.getLogger("skinflint.worker")


class WorkerReporting:
    """Metrics, occupancy and heartbeats (the worker's fields, declared here for the type checker)."""

    assignment: Assignment
    router: Router
    runtime: Runtime
    metrics: Metrics
    clock: Callable[[], float]
    grace_s: float
    totals: dict[str, int]
    _dims: _Dims
    _lock: threading.Condition
    _stopping: threading.Event
    _batches_run: set[int]
    _device_s: float
    _device_reported: float

    def _hop_metrics(self, delays: list[float]) -> None:
        """Each first delivery's hop (:func:`workers.batch_metrics.put_hop_delays`)."""
        put_hop_delays(self.metrics, self.assignment.app, self.assignment.module, delays)

    def _device_metrics(self, device_s: float, prepare_s: float, prepare_wait_s: float) -> None:
        """A batch's time on the device (``DeviceMs``: what the plan counts as occupancy; the
        reporter sums it per interval as ``DeviceSeconds``), the CPU work that prepared its inputs
        (``PrepareMs``: decode, crop, resize; on the preparer thread while the window was open) and
        what of it the batch still waited for when its window closed (``PrepareWaitMs``: the part
        not overlapped, which a batch's latency carries)."""
        put, dims = self.metrics.put, self._dims
        put("DeviceMs", device_s * 1e3, "Milliseconds", **dims)
        put("PrepareMs", prepare_s * 1e3, "Milliseconds", **dims)
        put("PrepareWaitMs", prepare_wait_s * 1e3, "Milliseconds", **dims)
        with self._lock:
            self._device_s += device_s / max(1, self.assignment.concurrency)

    def count_empty_slots(self, t_from: float, t_to: float) -> int:
        """Windows of this machine that closed in [t_from, t_to) without a request."""
        schedule = self.router.schedule(self.assignment.module)
        if schedule is None:
            return 0
        origin = self.router.origin(self.assignment.module)
        slots = schedule.slots_for_machine(
            self.assignment.group, self.assignment.machine, t_from - origin, t_to - origin
        )
        return sum(1 for slot in slots if slot.batch_id not in self._batches_run)

    def _report_loop(self, heartbeat: Callable[[dict[str, Any]], None] | None, report_s: float) -> None:
        last = self.clock()
        while not self._stopping.wait(report_s):
            now = self.clock()
            self._report(last, now - self.grace_s, heartbeat)
            last = now

    def _report(self, t_from: float, t_to: float, heartbeat: Callable[[dict[str, Any]], None] | None) -> None:
        self.metrics.put("InstanceSeconds", t_to - t_from, "Seconds", **self._dims)
        with self._lock:
            device_s, self._device_reported = self._device_s - self._device_reported, self._device_s
        # device-seconds (a concurrency-c batch holds 1/c of it) against the InstanceSeconds above:
        # the machine's measured occupancy, which the plan's rate x duration / batch predicts
        self.metrics.put("DeviceSeconds", device_s, "Seconds", **self._dims)
        try:
            self.metrics.put("EmptySlots", self.count_empty_slots(t_from, t_to), **self._dims)
        except Exception as exc:  # noqa: BLE001 - a metric must never stop serving
            log.warning("empty-slot count failed: %s", exc)
        if len(self._batches_run) > 10_000:
            self._batches_run.clear()
        if heartbeat:
            try:
                heartbeat({"ready": True, "at": t_to, "emulated": self.runtime.emulated, **self.totals})
            except DataPlaneError as exc:
                log.warning("heartbeat failed: %s", exc)
