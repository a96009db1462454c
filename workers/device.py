"""The device an instance's workers share: :class:`Device`, one accelerator (or the CPU cores a model
runs on) granted to batches in the order their windows close, each taking ``1/concurrency`` of it.

Re-exported by :mod:`workers.worker`, whose workers run their batches inside :meth:`Device.slot`.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["Device"]


class Device:
    """One accelerator (or the CPU cores a model runs on) shared by every worker of an instance.

    A batch of a share planned with concurrency ``c`` takes ``1/c`` of the device while it runs
    (``c`` copies of the model run at once, as profiled); a ``c = 1`` batch has the device to
    itself. Batches are granted strictly in the order their windows closed, earliest first: a
    later window never overtakes an earlier one, which is what the packing's added wait (one
    duty cycle of the other shares) assumes. One worker alone with its own device behaves as
    ``c`` model slots."""

    _EPS = 1e-9

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._used = 0.0
        self._waiting: list[tuple[float, int]] = []
        self._seq = itertools.count()
        self.busy_s = 0.0  # total device-seconds granted (weighted), for occupancy figures

    @contextmanager
    def slot(self, close_at: float, concurrency: int = 1) -> Iterator[None]:
        """Hold ``1/concurrency`` of the device for the ``with`` body, in window-close order."""
        weight = 1.0 / max(1, concurrency)
        me = (close_at, next(self._seq))
        with self._cv:
            heapq.heappush(self._waiting, me)
            while self._waiting[0] != me or self._used + weight > 1.0 + self._EPS:
                self._cv.wait()
            heapq.heappop(self._waiting)
            self._used += weight
            self._cv.notify_all()  # the next in line may fit beside this one
        start = time.perf_counter()
        try:
            yield
        finally:
            with self._cv:
                self._used -= weight
                self.busy_s += weight * (time.perf_counter() - start)
                self._cv.notify_all()
