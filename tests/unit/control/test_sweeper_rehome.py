"""Pure parts of the stranded-frame sweeper and of moving stranded messages (no AWS)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from control.rehome import _share_queue
from control.sweeper import SweepConfig, _stranded_record, due_buckets, sweep
from core.adapters.results import FrameState


@pytest.mark.parametrize(
    ("cursor", "now", "expected"),
    [
        # grace 120 s: at now = 600 s every deadline before 480 s is due; minute 7 ends at 480 -> 0..7
        (0, 600.0, range(0, 8)),
        # minute 7 ends at 480 = 599 - 120 + 1 > 479: not due yet at 599 s -> 0..6
        (0, 599.0, range(0, 7)),
        # no cursor: the last lookback (3) minutes that are due -> 5, 6, 7
        (None, 600.0, range(5, 8)),
        # a cursor past what is due: nothing
        (9, 600.0, range(9, 8)),
    ],
)
def test_due_buckets(cursor, now, expected):
    assert due_buckets(cursor, now, SweepConfig(grace_s=120.0, lookback_buckets=3)) == expected


@pytest.mark.parametrize(("weights", "missing"), [({}, "1"), ({"det/car.0": "1/3"}, "2/3")])
def test_a_stranded_frame_is_a_dropped_record_of_its_missing_share(weights, missing):
    frame = FrameState(
        "0" * 32, "traffic", 1.0, 2.0, ("det",), weights={t: Fraction(w) for t, w in weights.items()}
    )
    record = _stranded_record(frame, 100.0)
    assert (record.status, record.reason, record.task_id, record.weight, record.recheck) == (
        "dropped",
        "stranded",
        "stranded",
        missing,
        True,
    )
    assert (record.app, record.accepted_at, record.deadline) == ("traffic", 1.0, 2.0)


class _Dep:
    queues = {"car": {"0/1": "q-car-0-1"}}


class _Store:
    def __init__(self):
        self.reads = 0

    def deployment(self, version, app):
        self.reads += 1
        return _Dep() if (version, app) == (3, "traffic") else None


@pytest.mark.parametrize(
    ("name", "version", "url"),
    [
        ("traffic.car.g0.m1", 3, "q-car-0-1"),
        ("traffic.car.g0.m2", 3, None),  # no such machine
        ("traffic.car.g0.m1", 4, None),  # no such version
        ("traffic", 3, None),  # not a share name
    ],
)
def test_a_heartbeat_share_names_its_queue(name, version, url):
    store = _Store()
    cache: dict = {}
    assert _share_queue(store, name, version, cache) == url
    _share_queue(store, name, version, cache)
    assert store.reads <= 1  # one read per (version, app)


class _Unreadable:
    retention_s = 86_400.0

    def due_posts(self, bucket):
        from core.errors import ResultStoreError

        raise ResultStoreError("AccessDenied")


def test_a_sweep_that_cannot_read_reports_an_error_never_zero_unaccounted():
    from core.adapters.metrics import MemoryMetrics

    metrics = MemoryMetrics()
    report = sweep(_Unreadable(), metrics, 5, 600.0, SweepConfig(grace_s=120.0), index=_Unreadable())
    assert report.error and report.buckets == [] and report.next_bucket == 5  # the cursor stays
    assert metrics.total("SweepErrors") == 1 and metrics.values("FramesUnaccounted") == []
