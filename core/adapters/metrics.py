"""Metrics: aggregated in process, flushed as CloudWatch ``StatisticValues`` (as few PutMetricData
calls as the API allows: up to 1,000 data per call and 1 MB, :data:`PUT_BATCH` and :data:`PUT_BYTES`),
so a hot path only takes a lock and adds to a sum; or, in AWS Lambda, written as CloudWatch Embedded
Metric Format log lines (:class:`EmfMetrics`: no API call at all). ``MemoryMetrics`` keeps every value
for tests. Metrics are best effort: a failed flush is reported to the caller, never raised into a
request.

Values are aggregated per ``resolution_s`` bucket of the time they were put, and each bucket is
flushed with its own start as the timestamp: a reader summing whole periods then counts every value
in the period it happened in, whatever the flush interval (stamped at flush time instead, a flush
just before or after a period boundary moved a whole flush interval's worth of counts into the
neighbouring period: +-10 % jitter of the observed rate at 5 s periods). A bucket still open when
it is flushed is flushed again later with the rest of its values; CloudWatch adds data points of
equal timestamp. A reader must therefore lag by the writers' flush interval
(``core.adapters.rates.RateWindow``'s ``lag_s``)."""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.adapters._aws import AWS_ERRORS
from core.errors import MetricsError

if TYPE_CHECKING:
    from collections.abc import Callable

log = logging.getLogger("skinflint.metrics")

__all__ = [
    "CloudWatchMetrics",
    "EmfMetrics",
    "MemoryMetrics",
    "Metrics",
    "emf_documents",
    "emf_file_writer",
    "put_calls",
]

_Key = tuple[str, str, tuple[tuple[str, str], ...], float]  # name, unit, dimensions, bucket start

DEFAULT_RESOLUTION_S = 1.0
DEFAULT_FLUSH_S = 5.0
#: Data per PutMetricData call: the API's limit ("no more than 1000 different metrics" per request,
#: API_PutMetricData; it was 20 until 2023, which made a flush of 100 series five billed requests).
PUT_BATCH = 1000
#: Bytes per call, under the API's 1 MB for a POST, estimated per datum (:func:`_datum_bytes`).
PUT_BYTES = 900_000
#: Metrics per EMF document: one MetricDirective's ``Metrics`` (CloudWatch Logs' limit, 100).
EMF_MAX_METRICS = 100
#: Dimension keys per EMF dimension set (the same 30 as PutMetricData).
EMF_MAX_DIMENSIONS = 30
#: Characters of a metric name, dimension name or value in an EMF line (AWS's EMF libraries check 1024).
EMF_MAX_NAME = 1024
#: What CloudWatch Logs adds to each event's message bytes when it sizes a batch (PutLogEvents); the
#: ingestion counted for an EMF line is its bytes plus this (an estimate: docs/report.md).
LOG_EVENT_OVERHEAD_BYTES = 26


def resolution_from_env() -> float:
    """``SKINFLINT_METRICS_RESOLUTION_S`` (default 1 s): the event-time bucket of every value."""
    return float(os.environ.get("SKINFLINT_METRICS_RESOLUTION_S", DEFAULT_RESOLUTION_S))


def flush_interval_from_env() -> float:
    """``SKINFLINT_METRICS_FLUSH_S`` (default 5 s): how often a long-running process flushes."""
    return float(os.environ.get("SKINFLINT_METRICS_FLUSH_S", DEFAULT_FLUSH_S))


@dataclass
class _Stat:
    count: float = (
        0  # the samples' weights (1 each unless weighted: a frame's share, core/adapters/outcomes.py)
    )
    total: float = 0.0
    low: float = float("inf")
    high: float = float("-inf")

    def add(self, value: float, weight: float = 1.0) -> None:
        self.count += weight
        self.total += value * weight
        self.low = min(self.low, value)
        self.high = max(self.high, value)


@dataclass
class Metrics:
    """In-process aggregation; subclasses decide where a flush goes."""

    _stats: dict[_Key, _Stat] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    resolution_s: float = field(default_factory=resolution_from_env)
    _collectors: list[Callable[[Metrics], None]] = field(default_factory=list)
    #: s between the collectors' runs (:meth:`drain`); 0: at every drain
    collect_every_s: float = 0.0
    _collected_at: float = -math.inf
    _stopping: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        if not (0 < self.resolution_s < math.inf):
            raise ValueError(
                f"metrics resolution must be a positive number of seconds, got {self.resolution_s}"
            )

    def _bucket(self, at: float | None) -> float:
        now = time.time() if at is None else at
        return math.floor(now / self.resolution_s) * self.resolution_s

    def put(
        self,
        name: str,
        value: float,
        unit: str = "Count",
        at: float | None = None,
        weight: float = 1.0,
        **dims: str,
    ) -> None:
        """Add ``value`` to the series (name, unit, dims) in the bucket of ``at`` (default: now), as
        ``weight`` samples (a statistic set's SampleCount and Sum grow by ``weight`` and ``value x
        weight``: a weighted average over fractional samples, such as a frame's share)."""
        if not weight > 0:
            raise ValueError(f"a metric sample's weight must be > 0, got {weight!r}")
        key = (name, unit, tuple(sorted(dims.items())), self._bucket(at))
        with self._lock:
            stat = self._stats.get(key)
            if stat is None:
                stat = self._stats[key] = _Stat()
            stat.add(float(value), float(weight))

    def add_collector(self, collect: Callable[[Metrics], None]) -> None:
        """Call ``collect(self)`` at every drain, before the values are taken: a source that counts
        on its own (``core/adapters/usage.py``) puts its counts then, into the same flush."""
        self._collectors.append(collect)

    def drain(self, collect: bool | None = None) -> dict[_Key, _Stat]:
        """Take every value put so far. The collectors run first when ``collect`` is True, or, when
        it is None, if ``collect_every_s`` has passed since they last ran (0: every drain)."""
        now = time.monotonic()
        if collect is None:
            collect = now - self._collected_at >= self.collect_every_s
        if collect:
            self._collected_at = now
            for collector in self._collectors:
                collector(self)
        with self._lock:
            stats, self._stats = self._stats, {}
        return stats

    def flush(self) -> None:
        self.drain()

    def close(self) -> None:
        """The last flush of a process: the collectors run whatever ``collect_every_s`` says."""
        self._collected_at = -math.inf
        self.flush()

    def start(self, interval_s: float | None = None) -> None:
        """Flush every ``interval_s`` seconds (default ``SKINFLINT_METRICS_FLUSH_S``, 5 s) from a
        daemon thread until :meth:`stop` (a failed flush is logged and skipped, whatever it raised:
        metrics are best effort, and a dead thread would lose every later value)."""
        interval_s = flush_interval_from_env() if interval_s is None else interval_s

        def loop() -> None:
            while not self._stopping.wait(interval_s):
                try:
                    self.flush()
                except Exception as exc:  # noqa: BLE001 - the thread must outlive any failed flush
                    log.warning("metrics flush failed: %s", exc)

        self._thread = threading.Thread(target=loop, name="metrics-flush", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the flush thread and :meth:`close`."""
        self._stopping.set()
        if self._thread:
            self._thread.join(timeout=2)
        self.close()


class MemoryMetrics(Metrics):
    """Keeps every value (tests read :meth:`values` and :meth:`total`)."""

    def __init__(self) -> None:
        super().__init__()
        self.raw: dict[str, list[tuple[float, dict[str, str]]]] = defaultdict(list)
        self.raw_weights: dict[str, list[float]] = defaultdict(list)

    def put(
        self,
        name: str,
        value: float,
        unit: str = "Count",
        at: float | None = None,
        weight: float = 1.0,
        **dims: str,
    ) -> None:
        super().put(name, value, unit, at, weight, **dims)
        with self._lock:
            self.raw[name].append((float(value), dict(dims)))
            self.raw_weights[name].append(float(weight))

    def _matching(self, name: str, dims: dict[str, str]) -> list[tuple[float, float]]:
        return [
            (value, weight)
            for (value, datum_dims), weight in zip(
                self.raw.get(name, []), self.raw_weights.get(name, []), strict=True
            )
            if all(datum_dims.get(key) == wanted for key, wanted in dims.items())
        ]

    def values(self, name: str, **dims: str) -> list[float]:
        return [value for value, _ in self._matching(name, dims)]

    def total(self, name: str, **dims: str) -> float:
        """The series' sum: each value times its weight."""
        return sum(value * weight for value, weight in self._matching(name, dims))

    def weights(self, name: str, **dims: str) -> float:
        """The series' sample count: the sum of its weights."""
        return sum(weight for _, weight in self._matching(name, dims))


class CloudWatchMetrics(Metrics):
    """Flushes to CloudWatch PutMetricData (moto's locally)."""

    def __init__(self, client: Any, namespace: str, resolution_s: float | None = None):
        super().__init__(resolution_s=resolution_s if resolution_s is not None else resolution_from_env())
        self._cw = client
        self.namespace = namespace

    def flush(self) -> None:
        stats = self.drain()
        data = [
            {
                "MetricName": name,
                "Dimensions": [{"Name": key, "Value": value} for key, value in dims],
                "Unit": unit,
                "Timestamp": bucket,
                "StatisticValues": {
                    "SampleCount": stat.count,
                    "Sum": stat.total,
                    "Minimum": stat.low,
                    "Maximum": stat.high,
                },
            }
            for (name, unit, dims, bucket), stat in stats.items()
        ]
        for chunk in put_calls(data):
            try:
                self._cw.put_metric_data(Namespace=self.namespace, MetricData=chunk)
            except AWS_ERRORS as exc:
                raise MetricsError(f"PutMetricData failed: {exc}") from exc


def _datum_bytes(datum: dict[str, Any]) -> int:
    """An upper estimate of one datum's size in a PutMetricData request: the query protocol, the
    largest botocore may use, repeats ``MetricData.member.N.`` before every field (a datum with three
    dimensions: 707 bytes measured with botocore's serializer, estimated 816; JSON 337, CBOR 256)."""
    dims = datum["Dimensions"]
    return 420 + len(datum["MetricName"]) + sum(110 + len(dim["Name"]) + len(dim["Value"]) for dim in dims)


def put_calls(data: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """``data`` in order, cut into calls of at most :data:`PUT_BATCH` data and :data:`PUT_BYTES`."""
    out: list[list[dict[str, Any]]] = []
    size = 0
    for datum in data:
        datum_size = _datum_bytes(datum)
        if not out or len(out[-1]) >= PUT_BATCH or size + datum_size > PUT_BYTES:
            out.append([])
            size = 0
        out[-1].append(datum)
        size += datum_size
    return out


# Not Powertools Metrics (its layer ships with the Lambda functions, which use it for the ColdStart
# metric: functions/telemetry.py): it writes every value of a series on the line instead of a statistic
# set per time bucket, gives every metric of a flush one set of dimensions and one timestamp, writes to
# stdout only (the local stack appends to a file its extractor tails) and cannot tell the bytes it wrote
# (on_written: the usage meter counts them as CloudWatch Logs ingestion).
class EmfMetrics(Metrics):
    """Flushes as CloudWatch Embedded Metric Format documents, one JSON line each, to ``write``
    (default: stdout). In AWS Lambda, stdout goes to the function's log group and CloudWatch Logs
    extracts the metrics from it: a flush is a few lines of log, not a PutMetricData call (no
    per-call price, no API rate quota to be throttled by, nothing to wait for in the request).

    The series are the same as :class:`CloudWatchMetrics` publishes (namespace, name, unit,
    dimensions, timestamp = the bucket's start), with the same statistics: :func:`emf_documents`.
    ``on_written(n)`` is told the bytes of every flush (the usage meter counts them as CloudWatch
    Logs ingestion). ``collect_every_s``: the collectors (the usage meter's counts) go out at most
    that often, not at every flush: a front flushing after every request would otherwise write a
    line per counted operation each time (the counts wait in the meter; :meth:`close` sends them)."""

    def __init__(
        self,
        namespace: str,
        write: Callable[[str], object] | None = None,
        resolution_s: float | None = None,
        on_written: Callable[[int], object] | None = None,
        collect_every_s: float = 0.0,
    ):
        super().__init__(
            resolution_s=resolution_s if resolution_s is not None else resolution_from_env(),
            collect_every_s=collect_every_s,
        )
        self.namespace = namespace
        self._write = write if write is not None else _stdout_line
        self._on_written = on_written

    def flush(self) -> None:
        """Write every document of the values put so far. Raises :class:`MetricsError` (never
        anything else: a flush thread must survive it) when a line could not be written (a full
        disk, a closed stream; the other lines still are) or a series was left out."""
        docs, skipped = emf_documents(self.namespace, self.drain())
        written, failed = 0, ""
        for doc in docs:
            line = json.dumps(doc, separators=(",", ":"), allow_nan=False)
            try:
                self._write(line)
            except (OSError, ValueError) as exc:  # ValueError: I/O on a closed file
                failed = failed or f"EMF: a line could not be written ({exc})"
                continue
            written += len(line.encode()) + LOG_EVENT_OVERHEAD_BYTES
        if written and self._on_written is not None:
            self._on_written(written)
        if failed:
            raise MetricsError(failed)
        if skipped:
            raise MetricsError(f"EMF: series CloudWatch would refuse were left out: {', '.join(skipped)}")


def _stdout_line(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def emf_file_writer(path: str) -> Callable[[str], None]:
    """A writer for :class:`EmfMetrics` that appends each line to ``path`` (created if missing) and
    flushes it, so a reader tailing the file (the local stack's extractor) sees whole lines only."""
    lock = threading.Lock()
    stream = open(path, "a", encoding="utf-8")  # noqa: SIM115 - held for the process's life

    def write(line: str) -> None:
        with lock:
            stream.write(line + "\n")
            stream.flush()

    return write


def _emf_value(stat: _Stat) -> float | dict[str, Any]:
    """One series' aggregate as an EMF value: a plain number for one value, else a value set whose
    ``Values`` x ``Counts`` reproduce the count, sum, minimum and maximum (the minimum and maximum
    once each, the rest at their mean; for weighted samples whose mean of the rest falls outside
    them, the two extremes alone, weighted to match), with those four also stated (``Count``,
    ``Sum``, ``Min``, ``Max``: the form AWS's EMF libraries write for an aggregate)."""
    if stat.count == 1:
        return stat.total
    values: list[float]
    counts: list[float]
    if stat.low == stat.high:
        values, counts = [stat.low], [stat.count]
    elif (
        stat.count > 2
        and stat.low <= (mid := (stat.total - stat.low - stat.high) / (stat.count - 2)) <= stat.high
    ):
        values, counts = [stat.low, stat.high, mid], [1, 1, stat.count - 2]
    else:
        # weighted samples (a frame's share, core/adapters/outcomes.py): the extremes need not weigh
        # 1 each, so the two of them, weighted so that the count and the sum come out exactly
        at_high = min(max((stat.total - stat.count * stat.low) / (stat.high - stat.low), 0.0), stat.count)
        values, counts = [stat.low, stat.high], [stat.count - at_high, at_high]
    return {
        "Values": values,
        "Counts": counts,
        "Count": stat.count,
        "Sum": stat.total,
        "Min": stat.low,
        "Max": stat.high,
    }


@dataclass
class _EmfDoc:
    """One EMF document being filled: its root members' dimension values, its metric names, and a
    directive per set of dimension keys."""

    dims: dict[str, str] = field(default_factory=dict)
    values: dict[str, float | dict[str, Any]] = field(default_factory=dict)
    directives: dict[tuple[str, ...], list[dict[str, str]]] = field(default_factory=dict)

    def takes(self, name: str, dims: tuple[tuple[str, str], ...]) -> bool:
        return (
            len(self.values) < EMF_MAX_METRICS
            and name not in self.values
            and name not in self.dims
            and all(self.dims.get(key, value) == value and key not in self.values for key, value in dims)
        )

    def add(self, name: str, unit: str, dims: tuple[tuple[str, str], ...], stat: _Stat) -> None:
        self.dims.update(dims)
        self.values[name] = _emf_value(stat)
        self.directives.setdefault(tuple(key for key, _ in dims), []).append({"Name": name, "Unit": unit})

    def document(self, namespace: str, bucket: float) -> dict[str, Any]:
        directives = [
            {"Namespace": namespace, "Dimensions": [list(keys)], "Metrics": metrics}
            for keys, metrics in self.directives.items()
        ]
        meta = {"Timestamp": round(bucket * 1000), "CloudWatchMetrics": directives}
        return {"_aws": meta, **self.dims, **self.values}


def _emf_names_ok(name: str, dims: tuple[tuple[str, str], ...]) -> bool:
    """A metric name and dimension values CloudWatch accepts: 1 to :data:`EMF_MAX_NAME` characters."""
    return all(
        0 < len(text) <= EMF_MAX_NAME
        for text in (name, *(value for _, value in dims), *(key for key, _ in dims))
    )


def emf_documents(namespace: str, stats: dict[_Key, _Stat]) -> tuple[list[dict[str, Any]], list[str]]:
    """The EMF documents of drained ``stats`` and the series left out (a value that is not a finite
    number, which JSON cannot carry, or an empty or overlong name or dimension value, for which
    CloudWatch would reject the whole line). A document holds one bucket (its timestamp) and as many series as
    agree on it: each metric name once, each dimension key with one value (the root members), no
    name both a metric and a dimension, at most :data:`EMF_MAX_METRICS` metrics; one directive per
    set of dimension keys. Series are placed in order into the first document that takes them (so a
    Lambda invocation's dozen series make a few lines, not a dozen)."""
    buckets: dict[float, list[tuple[str, str, tuple[tuple[str, str], ...], _Stat]]] = defaultdict(list)
    skipped: list[str] = []
    for (name, unit, dims, bucket), stat in stats.items():
        if not all(math.isfinite(value) for value in (stat.total, stat.low, stat.high)) or not _emf_names_ok(
            name, dims
        ):
            skipped.append(name)  # CloudWatch would reject the whole line, and the series beside it
            continue
        if len(dims) > EMF_MAX_DIMENSIONS:
            raise MetricsError(f"EMF: {name} has {len(dims)} dimensions, at most {EMF_MAX_DIMENSIONS}")
        if name == "_aws" or any(key in (name, "_aws") for key, _ in dims):
            raise MetricsError(f"EMF: the metric name {name!r} is also a dimension or reserved")
        buckets[bucket].append((name, unit, dims, stat))
    docs: list[dict[str, Any]] = []
    for bucket in sorted(buckets):
        filling: list[_EmfDoc] = []
        for name, unit, dims, stat in sorted(
            buckets[bucket], key=lambda entry: (entry[2], entry[0], entry[1])
        ):
            home = next((doc for doc in filling if doc.takes(name, dims)), None)
            if home is None:
                home = _EmfDoc()
                filling.append(home)
            home.add(name, unit, dims, stat)
        docs += [doc.document(namespace, bucket) for doc in filling]
    return docs, skipped
