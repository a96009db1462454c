"""Metrics: aggregated in process, flushed as CloudWatch ``StatisticValues`` (as few PutMetricData
calls as the API allows: up to 1,000 data per call and 1 MB, :data:`PUT_BATCH` and :data:`PUT_BYTES`),
so a hot path only takes a lock and adds to a sum. ``MemoryMetrics`` keeps every value
for tests. Metrics are best effort: a failed flush is reported to the caller, never raised into a
request.

Values are aggregated per ``resolution_s`` bucket of the time they were put, and each bucket is
flushed with its own start as the timestamp: a reader summing whole periods then counts every value
in the period it happened in, whatever the flush interval (stamped at flush time instead, a flush
just before or after a period boundary moved a whole flush interval's worth of counts into the
neighbouring period: +-10 % jitter of the observed rate at 5 s periods). A bucket still open when
it is flushed is flushed again later with the rest of its values; CloudWatch adds data points of
equal timestamp. A reader must therefore lag by the writers' flush interval
(``functions.adapters.rates.RateWindow``'s ``lag_s``)."""

from __future__ import annotations

import math
import os
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from functions.errors import MetricsError

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["CloudWatchMetrics", "MemoryMetrics", "Metrics"]

_Key = tuple[str, str, tuple[tuple[str, str], ...], float]  # name, unit, dimensions, bucket start

DEFAULT_RESOLUTION_S = 1.0
DEFAULT_FLUSH_S = 5.0
#: Data per PutMetricData call: the API's limit ("no more than 1000 different metrics" per request,
#: API_PutMetricData; it was 20 until 2023, which made a flush of 100 series five billed requests).
PUT_BATCH = 1000
#: Bytes per call, under the API's 1 MB for a POST, estimated per datum (:func:`_datum_bytes`).
PUT_BYTES = 900_000


def resolution_from_env() -> float:
    """``SKINFLINT_METRICS_RESOLUTION_S`` (default 1 s): the event-time bucket of every value."""
    return float(os.environ.get("SKINFLINT_METRICS_RESOLUTION_S", DEFAULT_RESOLUTION_S))


def flush_interval_from_env() -> float:
    """``SKINFLINT_METRICS_FLUSH_S`` (default 5 s): how often a long-running process flushes."""
    return float(os.environ.get("SKINFLINT_METRICS_FLUSH_S", DEFAULT_FLUSH_S))


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
    resolution_s: float = field(default_factory=resolution_from_env)
    _collectors: list[Callable[[Metrics], None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not (0 < self.resolution_s < math.inf):
            raise ValueError(
                f"metrics resolution must be a positive number of seconds, got {self.resolution_s}"
            )

    def _bucket(self, at: float | None) -> float:
        t = time.time() if at is None else at
        return math.floor(t / self.resolution_s) * self.resolution_s

    def put(self, name: str, value: float, unit: str = "Count", at: float | None = None, **dims: str) -> None:
        """Add ``value`` to the series (name, unit, dims) in the bucket of ``at`` (default: now)."""
        key = (name, unit, tuple(sorted(dims.items())), self._bucket(at))
        with self._lock:
            stat = self._stats.get(key)
            if stat is None:
                stat = self._stats[key] = _Stat()
            stat.add(float(value))

    def add_collector(self, collect: Callable[[Metrics], None]) -> None:
        """Call ``collect(self)`` at every drain, before the values are taken: a source that counts
        on its own (``functions/adapters/usage.py``) puts its counts then, into the same flush."""
        self._collectors.append(collect)

    def drain(self) -> dict[_Key, _Stat]:
        for collect in self._collectors:
            collect(self)
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

    def put(self, name: str, value: float, unit: str = "Count", at: float | None = None, **dims: str) -> None:
        super().put(name, value, unit, at, **dims)
        with self._lock:
            self.raw[name].append((float(value), dict(dims)))

    def values(self, name: str, **dims: str) -> list[float]:
        return [v for v, d in self.raw.get(name, []) if all(d.get(k) == x for k, x in dims.items())]

    def total(self, name: str, **dims: str) -> float:
        return sum(self.values(name, **dims))


class CloudWatchMetrics(Metrics):
    """Flushes to CloudWatch PutMetricData (moto's locally)."""

    def __init__(self, client: Any, namespace: str, resolution_s: float | None = None):
        super().__init__(resolution_s=resolution_s if resolution_s is not None else resolution_from_env())
        self._cw = client
        self.namespace = namespace
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def flush(self) -> None:
        from functions.adapters._aws import AWS_ERRORS

        stats = self.drain()
        data = [
            {
                "MetricName": name,
                "Dimensions": [{"Name": k, "Value": v} for k, v in dims],
                "Unit": unit,
                "Timestamp": bucket,
                "StatisticValues": {
                    "SampleCount": s.count,
                    "Sum": s.total,
                    "Minimum": s.low,
                    "Maximum": s.high,
                },
            }
            for (name, unit, dims, bucket), s in stats.items()
        ]
        for chunk in _calls(data):
            try:
                self._cw.put_metric_data(Namespace=self.namespace, MetricData=chunk)
            except AWS_ERRORS as exc:
                raise MetricsError(f"PutMetricData failed: {exc}") from exc

    def start(self, interval_s: float | None = None) -> None:
        """Flush every ``interval_s`` seconds (default ``SKINFLINT_METRICS_FLUSH_S``, 5 s) from a
        daemon thread until :meth:`stop`."""
        interval_s = flush_interval_from_env() if interval_s is None else interval_s

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


def _datum_bytes(datum: dict[str, Any]) -> int:
    """An upper estimate of one datum's size in a PutMetricData request: the query protocol, the
    largest botocore may use, repeats ``MetricData.member.N.`` before every field (a datum with three
    dimensions: 707 bytes measured with botocore's serializer, estimated 816; JSON 337, CBOR 256)."""
    dims = datum["Dimensions"]
    return 420 + len(datum["MetricName"]) + sum(110 + len(d["Name"]) + len(d["Value"]) for d in dims)


def _calls(data: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """``data`` in order, cut into calls of at most :data:`PUT_BATCH` data and :data:`PUT_BYTES`."""
    out: list[list[dict[str, Any]]] = []
    size = 0
    for datum in data:
        n = _datum_bytes(datum)
        if not out or len(out[-1]) >= PUT_BATCH or size + n > PUT_BYTES:
            out.append([])
            size = 0
        out[-1].append(datum)
        size += n
    return out
