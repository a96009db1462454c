"""The worker keeps the device fed and says how busy it was: each request is prepared (payload,
decode, crop) on the preparer thread as it arrives, so a batch's inputs are ready when its window
closes; each batch reports its device time, its preparation and what of it the batch waited for;
the reporter sums device-seconds next to instance-seconds (measured occupancy)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.functional.test_worker import (
    drain,
    front,
    make_worker,
    run_car_workers,
    send_frames,
    window_start,
)

pytestmark = pytest.mark.functional


class PreparingRuntime:
    """An emulated model whose preparation takes ``prepare_s`` and says on which thread it ran."""

    emulated = True

    def __init__(self, duration_s: float, prepare_s: float = 0.0, fail_on: int | None = None):
        self.duration_s = duration_s
        self.prepare_s = prepare_s
        self.fail_on = fail_on
        self.prepared_on: list[str] = []
        self.prepared_at: list[float] = []
        self.ran_at: list[float] = []
        self._lock = threading.Lock()

    def prepare(self, data: bytes, region: list[float] | None) -> Any:
        time.sleep(self.prepare_s)
        with self._lock:
            self.prepared_on.append(threading.current_thread().name)
            self.prepared_at.append(time.time())
            if self.fail_on is not None and len(self.prepared_on) == self.fail_on:
                self.poison = data  # this request never prepares (an undecodable image)
            if data == getattr(self, "poison", None):
                raise ValueError("cannot identify image file")
        return len(data)

    def run(self, inputs: list[Any]) -> list[dict[str, Any]]:
        self.ran_at.append(time.time())
        time.sleep(self.duration_s)
        return [{"emulated": True} for _ in inputs]


def _preparing(worker) -> ThreadPoolExecutor:
    """What :meth:`Worker.serve` starts: the preparer thread."""
    worker._preparer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prepare")
    return worker._preparer


def test_requests_are_prepared_as_they_arrive_and_the_batch_reports_its_device_time(stack):
    # GIVEN two frames in one detector window and a worker whose preparation takes 30 ms a request
    ids = send_frames(stack, 2, at=window_start(stack))
    runtime = PreparingRuntime(duration_s=0.05, prepare_s=0.03)
    det = make_worker(stack, "detector", runtime=runtime)
    preparer = _preparing(det)
    # WHEN it receives them, the preparer starts on both before the window closes
    det.poll_once(wait_s=0)
    preparer.shutdown(wait=True)  # (let both finish: the test then reads what the batch took)
    assert runtime.prepared_on == ["prepare_0", "prepare_0"]
    outcomes = drain(det, until=time.time() + 5)
    # THEN the batch ran on the prepared inputs (each prepared once, before the model ran)
    assert [o.ran for o in outcomes] == [2]
    assert len(runtime.prepared_on) == 2
    assert max(runtime.prepared_at) <= runtime.ran_at[0]
    # and reported its device time (>= the 50 ms model), its preparation (2 x 30 ms = 60 ms of CPU
    # work, done ahead) and what the batch still waited for (nothing: it was ready)
    (device_ms,) = stack.metrics.values("DeviceMs", Module="detector")
    (prepare_ms,) = stack.metrics.values("PrepareMs", Module="detector")
    (wait_ms,) = stack.metrics.values("PrepareWaitMs", Module="detector")
    assert 50.0 <= device_ms < 500.0
    assert prepare_ms >= 60.0
    assert wait_ms < 20.0
    # each task says when its batch got the device: its device time is finished_at - device_at
    # (the detector forwards children, so its task is recorded in its cars' lineage: run them)
    run_car_workers(stack)
    for rid in ids:
        (task,) = [t for t in front(stack).result(rid).tasks if t.module == "detector"]
        assert task.device_at is not None
        assert task.started_at <= task.device_at <= task.finished_at
        assert task.finished_at - task.device_at == pytest.approx(device_ms / 1e3, abs=0.005)


def test_the_reporter_sums_device_seconds_next_to_instance_seconds(stack):
    send_frames(stack, 2, at=window_start(stack))
    det = make_worker(stack, "detector", runtime=PreparingRuntime(duration_s=0.04))
    drain(det, until=time.time() + 5)
    (device_ms,) = stack.metrics.values("DeviceMs", Module="detector")
    det._report(0.0, 10.0, None)
    det._report(10.0, 20.0, None)  # nothing ran since: 0, not the total again
    assert stack.metrics.values("InstanceSeconds", Module="detector") == [10.0, 10.0]
    assert stack.metrics.values("DeviceSeconds", Module="detector") == [
        pytest.approx(device_ms / 1e3),
        0.0,
    ]


def test_without_the_preparer_a_batch_prepares_its_own_inputs(stack):
    send_frames(stack, 1, at=window_start(stack))
    runtime = PreparingRuntime(duration_s=0.01, prepare_s=0.02)
    det = make_worker(stack, "detector", runtime=runtime)
    drain(det, until=time.time() + 5)
    assert runtime.prepared_on == [threading.current_thread().name]
    # the batch waited for the whole preparation (>= 20 ms)
    (wait_ms,) = stack.metrics.values("PrepareWaitMs", Module="detector")
    assert wait_ms >= 20.0


def test_a_request_that_fails_to_prepare_ahead_fails_its_batch_as_before(stack):
    # GIVEN two frames in one window; the first request's preparation raises (an undecodable image)
    send_frames(stack, 2, at=window_start(stack))
    runtime = PreparingRuntime(duration_s=0.01, fail_on=1)
    det = make_worker(stack, "detector", runtime=runtime)
    preparer = _preparing(det)
    det.poll_once(wait_s=0)
    preparer.shutdown(wait=True)
    # WHEN the batch runs (as serve runs it), it fails; retried one request at a time, the good one runs
    ready: list = []
    end = time.time() + 3
    while not ready and time.time() < end:
        time.sleep(0.02)
        with det._lock:
            ready = det.assembler.take_ready(time.time())
            det._in_hand += len(ready)
    assert [len(items) for _, items in ready] == [2]
    for batch_id, items in ready:
        det._process_logged(batch_id, items)
    assert det.totals["ran"] == 1
    # THEN nothing prepared ahead is left behind for requests no longer buffered
    assert det._prepared == {}
