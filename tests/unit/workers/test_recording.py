"""The record linger (workers/recording.py): several batches' records in one call, written at the
linger, at a frame's deadline less the margin, or at once when the call is full; a failed write fails
every batch that shared it; nothing returns before its write did."""

from __future__ import annotations

import threading
import time

import pytest

from core.adapters.results import TaskRecord
from core.errors import ResultStoreError
from workers.recording import RecordLinger, record_linger_from_env


class FakeSink:
    """Records what each call wrote and when; ``fail`` makes the next call raise."""

    items_per_call = 25

    def __init__(self, fail: Exception | None = None, per_call: int = 25):
        self.calls: list[tuple[float, list[TaskRecord]]] = []
        self.fail = fail
        self.items_per_call = per_call

    def record_tasks(self, records: list[TaskRecord]) -> tuple[list[TaskRecord], list[TaskRecord]]:
        if self.fail is not None:
            raise self.fail
        self.calls.append((time.time(), list(records)))
        return [rec for rec in records if not rec.recheck], [rec for rec in records if rec.recheck]


def rec(post: int, task: str = "vehicle", deadline: float | None = None, recheck: bool = False) -> TaskRecord:
    now = time.time()
    return TaskRecord(
        request_id=f"{post:030x}00",
        task_id=task,
        module="vehicle",
        status="done",
        hardware="t4",
        emulated=True,
        enqueued_at=now,
        started_at=now,
        finished_at=now,
        batch_size=1,
        deadline=now + 10 if deadline is None else deadline,
        recheck=recheck,
    )


def in_threads(linger: RecordLinger, sink: FakeSink, batches: list[list[TaskRecord]]) -> list[object]:
    """Each batch recorded on its own thread (as a worker's I/O threads do); what each got back."""
    out: list[object] = [None] * len(batches)

    def one(i: int) -> None:
        try:
            out[i] = linger.record(sink, batches[i])
        except Exception as exc:  # noqa: BLE001 - the test reads it
            out[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(batches))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    return out


def test_batches_within_the_linger_share_one_call_and_each_gets_its_own_records_back() -> None:
    sink, linger = FakeSink(), RecordLinger(linger_s=0.2, margin_s=0.05)
    batches = [[rec(1, "a"), rec(2, "b")], [rec(1, "c", recheck=True)], [rec(3, "d")]]
    t0 = time.time()
    out = in_threads(linger, sink, batches)
    assert len(sink.calls) == 1  # 4 records of 3 POSTs: one call
    assert sorted(r.task_id for r in sink.calls[0][1]) == ["a", "b", "c", "d"]
    assert sink.calls[0][0] - t0 >= 0.15  # it waited for the linger (the first batch's)
    assert out[0] == (batches[0], [])
    assert out[1] == ([], batches[1])  # the repeat is its own batch's
    assert out[2] == (batches[2], [])
    assert (linger.calls, linger.batches) == (1, 3)


def test_a_frame_deadline_less_the_margin_comes_before_the_linger() -> None:
    sink, linger = FakeSink(), RecordLinger(linger_s=2.0, margin_s=0.1)
    t0 = time.time()
    linger.record(sink, [rec(1, deadline=t0 + 0.3)])  # due at t0 + 0.2, not t0 + 2
    took = time.time() - t0
    assert 0.15 <= took < 1.0
    past = [rec(2, deadline=t0 - 1)]  # already past its deadline: at once
    t1 = time.time()
    linger.record(sink, past)
    assert time.time() - t1 < 0.1
    assert len(sink.calls) == 2


def test_a_full_call_goes_at_once_and_a_batch_that_would_overfill_it_starts_the_next() -> None:
    sink, linger = FakeSink(per_call=3), RecordLinger(linger_s=5.0, margin_s=0.0)
    t0 = time.time()
    out = in_threads(linger, sink, [[rec(1), rec(2), rec(3)]])  # 3 POSTs: full
    assert time.time() - t0 < 1.0 and out[0] is not None and len(sink.calls) == 1
    # two POSTs held, then two more: the two held go first, the next two wait for the close
    first = threading.Thread(target=linger.record, args=(sink, [rec(4), rec(5)]))
    first.start()
    time.sleep(0.05)
    second = threading.Thread(target=linger.record, args=(sink, [rec(6), rec(7)]))
    second.start()
    first.join(timeout=2)
    assert not first.is_alive() and len(sink.calls) == 2
    assert [r.request_id[:30] for r in sink.calls[1][1]] == [f"{4:030x}", f"{5:030x}"]
    linger.close()  # what is held goes now
    second.join(timeout=2)
    assert not second.is_alive() and len(sink.calls) == 3


def test_a_failed_write_fails_every_batch_that_shared_it() -> None:
    sink = FakeSink(fail=ResultStoreError("throttled"))
    linger = RecordLinger(linger_s=0.1, margin_s=0.0)
    out = in_threads(linger, sink, [[rec(1)], [rec(2)]])
    assert all(isinstance(got, ResultStoreError) for got in out)
    sink.fail = None
    assert linger.record(sink, [rec(3)]) == ([sink.calls[0][1][0]], [])  # the linger still serves


def test_no_linger_writes_at_once_on_the_callers_thread_and_after_close_too() -> None:
    sink = FakeSink()
    assert RecordLinger(linger_s=0.0).record(sink, [rec(1)])[0][0].request_id.startswith(f"{1:030x}")
    linger = RecordLinger(linger_s=5.0)
    linger.close()
    t0 = time.time()
    linger.record(sink, [rec(2)])
    assert time.time() - t0 < 0.5 and len(sink.calls) == 2
    assert linger.record(sink, []) == ([], [])


def test_the_settings_are_read_from_the_environment_and_checked() -> None:
    assert record_linger_from_env({}) == (0.0, 0.1)  # off unless set
    assert record_linger_from_env({"SKINFLINT_RECORD_LINGER_S": "0", "SKINFLINT_RECORD_MARGIN_S": "0.2"}) == (
        0.0,
        0.2,
    )
    with pytest.raises(ValueError, match="SKINFLINT_RECORD_LINGER_S"):
        record_linger_from_env({"SKINFLINT_RECORD_LINGER_S": "soon"})
    with pytest.raises(ValueError, match="SKINFLINT_RECORD_MARGIN_S"):
        record_linger_from_env({"SKINFLINT_RECORD_MARGIN_S": "-1"})


def test_a_slow_write_moves_the_deadline_bound_earlier() -> None:
    class SlowSink(FakeSink):
        def record_tasks(self, records: list[TaskRecord]) -> tuple[list[TaskRecord], list[TaskRecord]]:
            time.sleep(0.2)
            return super().record_tasks(records)

    sink, linger = SlowSink(), RecordLinger(linger_s=5.0, margin_s=0.05)
    linger.record(sink, [rec(1, deadline=time.time())])  # past its deadline: at once, and slow
    assert linger.slow_write_s >= 0.2
    t0 = time.time()
    linger.record(sink, [rec(2, deadline=t0 + 0.5)])  # due at 0.5 - 0.05 - 0.2: about 0.25 s
    assert time.time() - t0 < 0.5 + 0.05  # written (0.2 s) by its deadline less the margin


def test_a_call_that_is_due_goes_out_while_a_slow_one_is_in_flight() -> None:
    started: list[float] = []

    class SlowSink(FakeSink):
        def record_tasks(self, records: list[TaskRecord]) -> tuple[list[TaskRecord], list[TaskRecord]]:
            started.append(time.time())
            time.sleep(0.5)
            return super().record_tasks(records)

    sink, linger = SlowSink(), RecordLinger(linger_s=0.05, margin_s=0.0)
    first = threading.Thread(target=linger.record, args=(sink, [rec(1)]))
    first.start()
    time.sleep(0.15)  # the first call is in flight
    t1 = time.time()
    linger.record(sink, [rec(2)])
    first.join(timeout=2)
    assert len(started) == 2 and started[1] - t1 < 0.3  # not after the first call's 0.5 s
