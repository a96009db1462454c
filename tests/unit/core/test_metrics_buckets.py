"""Metric values are stamped with the time they happened (their bucket), not the flush time."""

from __future__ import annotations

from typing import Any

import pytest

from core.adapters.metrics import CloudWatchMetrics, MemoryMetrics
from core.adapters.rates import RateWindow


class _Recorder:
    def __init__(self) -> None:
        self.data: list[dict[str, Any]] = []

    def put_metric_data(self, Namespace: str, MetricData: list[dict[str, Any]]) -> None:  # noqa: N803
        self.data += MetricData


def _by_time(data: list[dict[str, Any]]) -> dict[float, float]:
    out: dict[float, float] = {}
    for d in data:
        out[d["Timestamp"]] = out.get(d["Timestamp"], 0.0) + d["StatisticValues"]["Sum"]
    return out


def test_values_are_flushed_with_the_start_of_their_bucket() -> None:
    cw = _Recorder()
    m = CloudWatchMetrics(cw, "ns", resolution_s=1.0)
    for at in (100.2, 100.9, 101.0, 104.99):
        m.put("FramesAccepted", 1, at=at, App="a")
    m.flush()
    assert _by_time(cw.data) == {100.0: 2.0, 101.0: 1.0, 104.0: 1.0}
    stats = {d["Timestamp"]: d["StatisticValues"] for d in cw.data}
    assert stats[100.0] == {"SampleCount": 2, "Sum": 2.0, "Minimum": 1.0, "Maximum": 1.0}


def test_a_late_flush_still_counts_every_value_in_its_own_period() -> None:
    """Two flushes straddle a period boundary: summed per 5 s period the counts are exact, which a
    flush-time stamp would not give (the old +-10 % jitter of the observed rate)."""
    cw = _Recorder()
    m = CloudWatchMetrics(cw, "ns", resolution_s=1.0)
    for k in range(40):  # 4 frames/s over [990, 1000)
        m.put("FramesAccepted", 1, at=990.0 + k / 4, App="a")
        if k == 37:
            m.flush()  # a flush in the middle of the last bucket; the rest of it comes later
    m.flush()
    w = RateWindow(1003.0, 10, 5, lag_s=2.5)
    total = sum(v for t, v in _by_time(cw.data).items() if w.start <= t < w.end)
    assert total / w.seconds == pytest.approx(4.0)


def test_memory_metrics_keep_values_and_resolution_is_checked() -> None:
    m = MemoryMetrics()
    m.put("X", 2.0, at=5.5, Module="m")
    assert m.total("X", Module="m") == 2.0
    with pytest.raises(ValueError, match="resolution"):
        CloudWatchMetrics(_Recorder(), "ns", resolution_s=0.0)


class _Calls(_Recorder):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[int] = []

    def put_metric_data(self, Namespace: str, MetricData: list[dict[str, Any]]) -> None:  # noqa: N803
        self.calls.append(len(MetricData))
        super().put_metric_data(Namespace, MetricData)


def test_a_flush_makes_as_few_calls_as_the_api_allows() -> None:
    """1,000 data per PutMetricData (the API's limit; each call is billed), and no call above its
    byte budget: 2,500 series of one bucket take three calls; long dimension values take more."""
    from core.adapters.metrics import PUT_BATCH, PUT_BYTES, _datum_bytes

    cw = _Calls()
    m = CloudWatchMetrics(cw, "ns", resolution_s=1.0)
    for i in range(2500):
        m.put("BatchMs", 1.0, at=100.0, App=f"app{i}", Module="det", Hardware="t4")
    m.flush()
    assert cw.calls == [PUT_BATCH, PUT_BATCH, 500] and len(cw.data) == 2500
    cw = _Calls()
    m = CloudWatchMetrics(cw, "ns", resolution_s=1.0)
    for i in range(600):  # dimension values near their 1,024-character limit
        m.put("BatchMs", 1.0, at=100.0, App=f"app{i}" + "x" * 1000, Module="det", Hardware="t4")
    m.flush()
    assert len(cw.calls) > 1 and sum(cw.calls) == 600
    start = 0
    for n in cw.calls:
        assert sum(_datum_bytes(d) for d in cw.data[start : start + n]) <= PUT_BYTES
        start += n


def test_the_flush_thread_outlives_a_flush_that_raises() -> None:
    """A flush thread that died on one unexpected error would lose every later value, silently."""
    import threading

    from core.adapters.metrics import Metrics

    class Flaky(Metrics):
        calls = 0
        done = threading.Event()

        def flush(self) -> None:
            Flaky.calls += 1
            if Flaky.calls == 1:
                raise RuntimeError("a collector failed")
            Flaky.done.set()

    m = Flaky()
    m.start(interval_s=0.01)
    assert Flaky.done.wait(5.0)  # flushed again after the failure
    m.stop()
