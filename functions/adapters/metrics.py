"""Metrics: aggregated in process, flushed as CloudWatch ``StatisticValues`` (one PutMetricData per
20 series), so a hot path only takes a lock and adds to a sum. ``MemoryMetrics`` keeps every value
for tests. Metrics are best effort: a failed flush is reported to the caller, never raised into a
request."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from functions.errors import MetricsError

__all__ = ["CloudWatchMetrics", "MemoryMetrics", "Metrics"]

_Key = tuple[str, str, tuple[tuple[str, str], ...]]


@dataclass
class _Stat:
    count: int = 0
    total: float = 0.0
    low: float = float("inf")
    high: float = float("-inf")

    def add(self, value: float) -> None:
        self.count += 1
        self.total += value
        self.low = min(self.low, value)
        self.high = max(self.high, value)


@dataclass
class Metrics:
    """In-process aggregation; subclasses decide where a flush goes."""

    _stats: dict[_Key, _Stat] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def put(self, name: str, value: float, unit: str = "Count", **dims: str) -> None:
        key = (name, unit, tuple(sorted(dims.items())))
        with self._lock:
            stat = self._stats.get(key)
            if stat is None:
                stat = self._stats[key] = _Stat()
            stat.add(float(value))

    def drain(self) -> dict[_Key, _Stat]:
        with self._lock:
            stats, self._stats = self._stats, {}
        return stats

    def flush(self) -> None:
        self.drain()


class MemoryMetrics(Metrics):
    """Keeps every value (tests read :meth:`values` and :meth:`total`)."""

    def __init__(self) -> None:
        super().__init__()
        self.raw: dict[str, list[tuple[float, dict[str, str]]]] = defaultdict(list)

    def put(self, name: str, value: float, unit: str = "Count", **dims: str) -> None:
        super().put(name, value, unit, **dims)
        with self._lock:
            self.raw[name].append((float(value), dict(dims)))

    def values(self, name: str, **dims: str) -> list[float]:
        return [v for v, d in self.raw.get(name, []) if all(d.get(k) == x for k, x in dims.items())]

    def total(self, name: str, **dims: str) -> float:
        return sum(self.values(name, **dims))


class CloudWatchMetrics(Metrics):
    """Flushes to CloudWatch PutMetricData (moto's locally)."""

    def __init__(self, client: Any, namespace: str):
        super().__init__()
        self._cw = client
        self.namespace = namespace
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def flush(self) -> None:
        from botocore.exceptions import ClientError

        stats = self.drain()
        data = [
            {
                "MetricName": name,
                "Dimensions": [{"Name": k, "Value": v} for k, v in dims],
                "Unit": unit,
                "Timestamp": time.time(),
                "StatisticValues": {
                    "SampleCount": s.count,
                    "Sum": s.total,
                    "Minimum": s.low,
                    "Maximum": s.high,
                },
            }
            for (name, unit, dims), s in stats.items()
        ]
        for i in range(0, len(data), 20):
            try:
                self._cw.put_metric_data(Namespace=self.namespace, MetricData=data[i : i + 20])
            except ClientError as exc:
                raise MetricsError(f"PutMetricData failed: {exc}") from exc

    def start(self, interval_s: float = 5.0) -> None:
        """Flush every ``interval_s`` seconds from a daemon thread until :meth:`stop`."""

        def loop() -> None:
            while not self._stop.wait(interval_s):
                try:
                    self.flush()
                except MetricsError:
                    continue

        self._thread = threading.Thread(target=loop, name="metrics-flush", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=2)
        self.flush()
