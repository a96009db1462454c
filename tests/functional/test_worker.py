"""The worker against moto: batching per window, idempotent results, redelivery after a crash,
early drop, forwarding down the DAG, release on stop."""

from __future__ import annotations

import threading
import time

import pytest

from core.ids import MAX_FRAMES_PER_POST
from core.schema import TaskMessage
from front.service import FrontService
from tests.functional.conftest import jpeg_bytes
from workers.runtimes import EmulatedRuntime
from workers.worker import Worker

pytestmark = pytest.mark.functional


class SleepRecorder:
    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, s: float) -> None:
        self.calls.append(s)


def make_worker(stack, module, group=0, machine=0, **kw) -> Worker:
    a = stack.assignment(module, group, machine)
    return Worker(
        assignment=a,
        router=stack.router(),
        queues=stack.queues,
        results=kw.pop("results", stack.results),
        blobs=stack.blobs,
        metrics=kw.pop("metrics", stack.metrics),
        runtime=kw.pop("runtime", EmulatedRuntime(a.duration_s, a.hardware, sleep=SleepRecorder())),
        **kw,
    )


def front(stack) -> FrontService:
    return FrontService(
        config=stack.cfg,
        store=stack.store,
        plans=stack.plans,
        results=stack.results,
        queues=stack.queues,
        blobs=stack.blobs,
        metrics=stack.metrics,
    )


def send_frames(stack, n: int, at: float | None = None) -> list[str]:
    """``n`` frames, in POSTs of at most 10 (a POST's limit, core/ids.py)."""
    svc = front(stack)
    if at is not None:
        svc.clock = lambda: at
    ids: list[str] = []
    for first in range(0, n, MAX_FRAMES_PER_POST):
        frames = [
            (jpeg_bytes(seed=i), "image/jpeg") for i in range(first, min(n, first + MAX_FRAMES_PER_POST))
        ]
        ids += [a.request_id for a in svc.accept("traffic", frames).accepted]
    return ids


def window_start(stack) -> float:
    """One arrival time for several frames: they share a detector window, hence one batch."""
    return time.time()


def run_until(workers: list[Worker], tasks: int, until: float) -> None:
    """Poll and run ``workers`` until they ran ``tasks`` tasks between them, or ``until``."""
    while sum(w.totals["ran"] for w in workers) < tasks and time.time() < until:
        for w in workers:
            w.poll_once(wait_s=0)
            w.run_ready()
        time.sleep(0.02)


def drain(worker: Worker, until: float) -> list:
    outcomes = []
    while time.time() < until:
        worker.poll_once(wait_s=0)
        outcomes += worker.run_ready()
        if outcomes and len(worker.assembler) == 0 and worker.queues.depth(worker.assignment.queue_url) == 0:
            break
        time.sleep(0.02)
    return outcomes


def run_car_workers(stack, seconds: float = 3.0) -> list[Worker]:
    cars = [make_worker(stack, "car", 0, m) for m in range(2)]
    end = time.time() + seconds
    while time.time() < end:
        for w in cars:
            w.poll_once(wait_s=0)
            w.run_ready()
        if all(stack.queues.depth(u) == 0 for u in stack.deployment.queues["car"].values()) and not any(
            len(w.assembler) for w in cars
        ):
            break
        time.sleep(0.02)
    return cars


def test_frames_of_one_window_form_one_batch_and_flow_down_the_dag(stack):
    # GIVEN two frames accepted inside the same detector window
    t = window_start(stack)
    ids = send_frames(stack, 2, at=t)
    det = make_worker(stack, "detector")
    # WHEN the detector worker closes the window
    outcomes = drain(det, until=time.time() + 5)
    # THEN one batch of two ran, and the children (1 or 2 cars per frame) were forwarded
    assert [o.ran for o in outcomes] == [2]
    assert det.runtime._sleep.calls == [0.01]
    forwarded = outcomes[0].forwarded
    assert 2 <= forwarded <= 4
    assert stack.metrics.values("BatchFill", Module="detector") == [1.0]
    # WHEN the car workers run
    cars = run_car_workers(stack)
    assert sum(w.totals["ran"] for w in cars) == forwarded
    # THEN both frames are done and every task is reported with its hardware, emulated
    for rid in ids:
        res = front(stack).result(rid)
        assert res.status == "done", res
        assert res.latency_s is not None and res.latency_s > 0
        assert {t.module for t in res.tasks} == {"detector", "car"}
        assert all(t.emulated for t in res.tasks)
        assert res.tasks[0].output == {"emulated": True, "hardware": "t4"}
        # each task says when its worker received it: after it was sent, before its batch started
        assert all(
            t.received_at is not None and t.enqueued_at <= t.received_at <= t.started_at for t in res.tasks
        )
    assert sum(stack.all_queue_depths().values()) == 0


def deliver(worker: Worker, raw: dict, receive_count: int) -> list:
    """``raw`` (a message received from SQS) handed to ``worker`` as its ``receive_count``-th
    receive, and its batch run at once."""
    from core.adapters.queues import Received

    worker.accept([Received(raw["Body"], raw["ReceiptHandle"], receive_count, time.time())])
    return worker.run_ready(now=float("inf"))


def test_redelivered_result_is_recorded_once(stack):
    # GIVEN a frame whose detector task ran and whose cars ran and were recorded
    (rid,) = send_frames(stack, 1)
    url = stack.deployment.queues["detector"]["0/0"]
    (raw,) = stack.messages(url)
    det = make_worker(stack, "detector")
    (first,) = deliver(det, raw, 1)
    assert (first.ran, first.duplicates) == (1, 0) and first.forwarded >= 1
    cars = run_car_workers(stack)
    assert sum(w.totals["ran"] for w in cars) == first.forwarded
    assert sum(w.totals["duplicates"] for w in cars) == 0
    assert stack.metrics.weights("FramesFinished", App="traffic") == pytest.approx(1.0)
    # WHEN the detector's message is delivered again (an SQS redelivery: its delete was lost)
    (second,) = deliver(det, raw, 2)
    # THEN the same children are forwarded again (at least once), marked to be checked: each is
    # found recorded and counted as a duplicate, not written or counted again
    assert second.forwarded == first.forwarded
    again = run_car_workers(stack)
    assert sum(w.totals["duplicates"] for w in again) == second.forwarded
    res = front(stack).result(rid)
    assert res.status == "done"
    assert len([t for t in res.tasks if t.module == "detector"]) == 1
    names = [t.task_id for t in res.tasks if t.module == "car"]
    assert len(names) == len(set(names)) == first.forwarded
    # the frame's outcome is counted once: its cars' shares sum to exactly one frame
    assert stack.metrics.weights("FramesFinished", App="traffic") == pytest.approx(1.0)
    assert stack.metrics.weights("SloAttainment", App="traffic") == pytest.approx(1.0)


def test_crash_between_record_and_delete_is_redelivered_and_counted_once(stack):
    # GIVEN a detector worker that dies after forwarding and recording, before deleting its messages
    ids = send_frames(stack, 2, at=window_start(stack))
    crashing = make_worker(stack, "detector", crash_after_record=True)
    with pytest.raises(SystemExit):
        drain(crashing, until=time.time() + 5)
    # WHEN a fresh worker receives the redelivered messages (queue visibility timeout: 1 s)
    time.sleep(1.1)
    fresh = make_worker(stack, "detector")
    outcomes = drain(fresh, until=time.time() + 5)
    # (it runs them again and forwards the same children again, marked to be checked; the
    # detector's tasks are not terminal, so it records nothing itself)
    assert sum(o.ran for o in outcomes) == 2 and sum(o.duplicates for o in outcomes) == 0
    forwarded = sum(o.forwarded for o in outcomes)
    # THEN the cars forwarded twice are deduplicated (in the buffer, or found recorded when the
    # second copy is checked) and every frame finishes exactly once
    cars = run_car_workers(stack)
    car_tasks = 0
    for rid in ids:
        res = front(stack).result(rid)
        assert res.status == "done"
        assert len([t for t in res.tasks if t.module == "detector"]) == 1
        names = [t.task_id for t in res.tasks if t.module == "car"]
        assert len(names) == len(set(names)) >= 1
        car_tasks += len(names)
    assert forwarded == car_tasks
    assert sum(w.totals["ran"] + w.totals["dropped"] - w.totals["duplicates"] for w in cars) == car_tasks
    # the outcome metrics count each frame once: the shares sum to exactly the two frames
    assert stack.metrics.weights("FramesFinished", App="traffic") == pytest.approx(2.0)
    assert stack.metrics.weights("SloAttainment", App="traffic") == pytest.approx(2.0)
    assert sum(stack.all_queue_depths().values()) == 0


def test_frame_that_cannot_meet_its_deadline_is_dropped_early_and_reported(stack):
    # GIVEN a frame whose deadline (accepted + 2 s SLO) passes before its window closes
    (rid,) = send_frames(stack, 1, at=time.time() - 2.5)
    det = make_worker(stack, "detector")
    outcomes = drain(det, until=time.time() + 3)
    # THEN it is dropped without running, reported as dropped, and counted
    assert [(o.ran, o.dropped, o.forwarded) for o in outcomes] == [(0, 1, 0)]
    assert det.runtime._sleep.calls == []
    res = front(stack).result(rid)
    assert res.status == "dropped"
    assert [(t.status, t.reason) for t in res.tasks] == [("dropped", "deadline")]
    assert stack.metrics.total("Drops", Module="detector") == 1


def test_stop_releases_buffered_messages_at_once(stack):
    # GIVEN a worker holding a message whose window is still open
    svc = front(stack)
    svc.accept("traffic", [(jpeg_bytes(), "image/jpeg")])
    det = make_worker(stack, "detector", grace_s=30.0)
    det.poll_once(wait_s=0)
    assert len(det.assembler) == 1
    url = det.assignment.queue_url
    assert stack.messages(url) == []  # in flight: invisible
    # WHEN it stops (SIGTERM in the process)
    det.stop()
    assert det.release_buffered() == 1
    # THEN the message is visible again without waiting for the visibility timeout
    assert len(stack.messages(url)) == 1
    assert stack.metrics.total("Released", Module="detector") == 1


def test_large_output_goes_to_s3(stack):
    class BigRuntime(EmulatedRuntime):
        def run(self, inputs):
            return [{"blob": "x" * 5000} for _ in inputs]

    # GIVEN a detector and cars whose outputs are over the inline limit
    (rid,) = send_frames(stack, 1)
    det = make_worker(stack, "detector", runtime=BigRuntime(0.0, "t4"), output_inline_limit_bytes=1000)
    (ran,) = drain(det, until=time.time() + 3)
    cars = [
        make_worker(stack, "car", 0, m, runtime=BigRuntime(0.0, "cpu"), output_inline_limit_bytes=1000)
        for m in range(2)
    ]
    run_until(cars, ran.forwarded, until=time.time() + 3)
    # THEN every output went to S3 and only its key travels and is recorded: the detector's (which
    # forwarded children and is not written itself) in its cars' lineage, each car's (terminal)
    # in its record
    res = front(stack).result(rid)
    assert res.status == "done"
    assert sorted(t.module for t in res.tasks) == ["car"] * ran.forwarded + ["detector"]
    for task in res.tasks:
        assert task.output is None and task.output_s3_key, task
        assert stack.blobs.get(task.output_s3_key).startswith(b'{"blob":"xxx')
    assert len({t.output_s3_key for t in res.tasks}) == len(res.tasks)


def test_a_parents_output_travels_inline_only_up_to_the_lineage_limit(stack):
    from workers.worker import LINEAGE_OUTPUT_INLINE_BYTES

    class MidRuntime(EmulatedRuntime):  # outputs over the lineage limit, under the worker's own
        def run(self, inputs):
            return [{"blob": "x" * (LINEAGE_OUTPUT_INLINE_BYTES + 100)} for _ in inputs]

    # GIVEN a detector and cars whose outputs are 4 KB + 100 B (the workers keep 64 KB inline)
    (rid,) = send_frames(stack, 1)
    (ran,) = drain(make_worker(stack, "detector", runtime=MidRuntime(0.0, "t4")), until=time.time() + 3)
    cars = [make_worker(stack, "car", 0, m, runtime=MidRuntime(0.0, "cpu")) for m in range(2)]
    run_until(cars, ran.forwarded, until=time.time() + 3)
    # THEN the detector's output, which every child message carries, went to S3 (its key travels);
    # the cars' outputs, written once in their records, stayed inline
    res = front(stack).result(rid)
    (det,) = [t for t in res.tasks if t.module == "detector"]
    assert det.output is None and stack.blobs.get(det.output_s3_key).startswith(b'{"blob":"xxx')
    cars_out = [t for t in res.tasks if t.module == "car"]
    assert len(cars_out) == ran.forwarded and all(t.output and not t.output_s3_key for t in cars_out)


def test_unparseable_message_is_counted_and_left_for_the_dlq(stack):
    url = stack.deployment.queues["detector"]["0/0"]
    stack.sqs.send_message(QueueUrl=url, MessageBody='{"v": 99}')
    det = make_worker(stack, "detector")
    assert det.poll_once(wait_s=0) == 0
    assert det.totals["poison"] == 1
    assert stack.metrics.total("PoisonMessages") == 1
    redrive = stack.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["RedrivePolicy"])["Attributes"]
    assert "maxReceiveCount" in redrive["RedrivePolicy"]


def test_empty_slots_are_counted_from_the_schedule(stack):
    det = make_worker(stack, "detector")
    now = time.time()
    # the detector machine closes a window every 0.5 s: 4 windows in 2 s, none ran
    assert det.count_empty_slots(now - 2.0, now) in (4, 5)


class CountingQueues:
    """The stack's queues, counting DeleteMessageBatch requests (one per ten receipts)."""

    def __init__(self, queues) -> None:
        self._queues = queues
        self.delete_requests: list[int] = []

    def __getattr__(self, name):
        return getattr(self._queues, name)

    def delete(self, queue_url: str, receipts: list[str]) -> None:
        self.delete_requests += [len(receipts[i : i + 10]) for i in range(0, len(receipts), 10)]
        self._queues.delete(queue_url, receipts)


def received_one_by_one(stack, n: int) -> list:
    """``n`` frames sent and received by hand (30 s visibility), each as its own batch."""
    from workers.batching import Pending

    stack.queues.max_tasks_per_message = 1  # a message per task: a receipt per request
    send_frames(stack, n)
    url = stack.deployment.queues["detector"]["0/0"]
    raw: list[dict] = []
    while len(raw) < n:
        got = stack.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=30)
        raw += got.get("Messages", [])
    return [
        (m.batch_id, [Pending(m, [r["ReceiptHandle"]], time.time())])
        for r in raw
        for m in [TaskMessage.parse(r["Body"])]
    ]


def test_processed_messages_share_delete_requests_after_the_linger(stack):
    # GIVEN a worker whose deletes may linger 5 s, and 12 requests run as 12 batches of one
    now = [time.time()]
    det = make_worker(stack, "detector", delete_linger_s=5.0, clock=lambda: now[0])
    det.queues = queues = CountingQueues(stack.queues)
    url = det.assignment.queue_url
    for batch_id, items in received_one_by_one(stack, 12):
        det.process(batch_id, items)
    # THEN the tenth filled one request at once; the other two wait for the linger
    assert queues.delete_requests == [10]
    assert det.pending_deletes == 2
    assert det.flush_deletes(force=False) == 0  # not due yet
    now[0] += 5.0
    assert det.flush_deletes(force=False) == 2
    assert queues.delete_requests == [10, 2]  # 2 requests for 12 messages, not 12
    assert det.pending_deletes == 0 and stack.queues.depth(url) == 0
    assert det.totals["ran"] == 12 and det.totals["duplicates"] == 0


def test_a_stopping_worker_sends_its_pending_deletes(stack):
    # GIVEN a serving worker whose deletes may linger longer than it runs
    det = make_worker(stack, "detector", delete_linger_s=10.0)
    det.queues = queues = CountingQueues(stack.queues)
    server = threading.Thread(target=det.serve, kwargs={"report_s": 60.0}, daemon=True)
    server.start()
    send_frames(stack, 2)
    deadline = time.time() + 5
    while det.totals["ran"] + det.totals["dropped"] < 2 and time.time() < deadline:
        time.sleep(0.02)
    assert det.totals["ran"] + det.totals["dropped"] == 2
    assert queues.delete_requests == []  # lingering
    # WHEN it stops (SIGTERM)
    det.stop()
    server.join(timeout=10)
    # THEN the processed messages were deleted on the way out: nothing comes back
    assert not server.is_alive()
    # (the POST's two frames travelled in one message: one receipt, deleted once both ran)
    assert det.pending_deletes == 0 and sum(queues.delete_requests) == 1
    assert stack.queues.depth(det.assignment.queue_url) == 0


def test_the_delete_linger_setting_is_checked() -> None:
    from core.settings import DEFAULT_DELETE_LINGER_S, delete_linger_from_env

    assert delete_linger_from_env({}) == DEFAULT_DELETE_LINGER_S == 1.0
    assert delete_linger_from_env({"SKINFLINT_DELETE_LINGER_S": "0"}) == 0.0
    assert delete_linger_from_env({"SKINFLINT_DELETE_LINGER_S": "0.25"}) == 0.25
    for bad in ("soon", "-1", "nan", "60"):
        with pytest.raises(ValueError, match="SKINFLINT_DELETE_LINGER_S"):
            delete_linger_from_env({"SKINFLINT_DELETE_LINGER_S": bad})


def test_each_first_delivery_reports_its_hop(stack):
    """A worker reports the hop of every task it receives for the first time (received - enqueued:
    the SQS send, delivery and receive) as HopDelayMs and one count of HopDelayBucket (core/hops.py),
    per app and module; a redelivery (it waited out a visibility timeout, not a hop) is left out."""
    from core.adapters.queues import Received

    t0 = time.time() - 5.0
    stack.queues.max_tasks_per_message = 1  # two messages: one received first, one redelivered
    send_frames(stack, 2, at=t0)  # the front stamps enqueued_at = t0
    url = stack.deployment.queues["detector"]["0/0"]
    raw: list[dict] = []
    while len(raw) < 2:
        raw += stack.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
    assert all(TaskMessage.parse(m["Body"]).enqueued_at == t0 for m in raw)
    det = make_worker(stack, "detector")
    det.clock = lambda: t0 + 0.037  # received 37 ms after it was enqueued
    first = Received(raw[0]["Body"], raw[0]["ReceiptHandle"], receive_count=1, sent_at=t0)
    again = Received(raw[1]["Body"], raw[1]["ReceiptHandle"], receive_count=2, sent_at=t0)
    assert det.accept([first, again]) == 2
    # (t0 + 0.037 - t0) * 1e3 = 37 ms, once: the redelivery is not a hop
    assert stack.metrics.values("HopDelayMs", App="traffic", Module="detector") == [
        pytest.approx(37.0, abs=1e-3)
    ]
    # 37 ms lies in the bucket up to 40 ms (35 < 37 <= 40)
    assert stack.metrics.values("HopDelayBucket", App="traffic", Module="detector", UpToMs="40") == [1.0]
    assert stack.metrics.total("HopDelayBucket", App="traffic") == 1.0
    # the hop's series are per app and module, not per hardware (one histogram per queue's module)
    assert stack.metrics.raw["HopDelayMs"][-1][1] == {"App": "traffic", "Module": "detector"}


def test_an_idle_worker_long_polls_twenty_seconds_and_a_busy_one_one(stack):
    det = make_worker(stack, "detector")
    assert (det.busy_wait_s, det.idle_wait_s, det.idle_after_s) == (1, 20, 30.0)
    assert det.receive_wait_s() == 1  # just started: as if a message had just come
    det._last_received = time.monotonic() - 31.0  # nothing for 31 s
    assert det.receive_wait_s() == 20  # SQS's longest poll: three receives a minute
    det._last_received = time.monotonic()  # a message came
    assert det.receive_wait_s() == 1


def test_a_stop_during_an_idle_long_poll_waits_for_it_and_releases_what_it_returns(stack):
    # GIVEN a serving worker idle long enough to long-poll its idle wait (5 s here)
    det = make_worker(stack, "detector", idle_after_s=0.0, idle_wait_s=5, grace_s=30.0)
    before = set(threading.enumerate())
    server = threading.Thread(target=det.serve, kwargs={"report_s": 60.0}, daemon=True)
    server.start()
    time.sleep(0.5)  # in its poll
    (receiver,) = [t for t in threading.enumerate() if t.name == "receiver" and t not in before]
    # WHEN it stops (SIGTERM)
    det.stop()
    server.join(timeout=15)
    # THEN the stop returned only once the poll had: a process that exits then leaves no poll in
    # flight (a message SQS handed to it would wait out the visibility timeout)
    assert not server.is_alive() and not receiver.is_alive()


def test_what_a_poll_returns_while_stopping_is_given_back_at_once(stack):
    # GIVEN a serving worker in an idle long poll
    det = make_worker(stack, "detector", idle_after_s=0.0, idle_wait_s=5, grace_s=30.0)
    url = det.assignment.queue_url
    server = threading.Thread(target=det.serve, kwargs={"report_s": 60.0}, daemon=True)
    server.start()
    time.sleep(0.5)
    # WHEN it stops and a frame arrives while that poll is still in flight
    det.stop()
    send_frames(stack, 1)
    server.join(timeout=15)
    # THEN what the poll returned was released (visible again), not buffered nor run
    assert not server.is_alive()
    assert len(stack.messages(url)) == 1
    assert len(det.assembler) == 0 and det.totals["ran"] == 0


def test_a_retired_share_does_not_wait_for_its_idle_poll_and_what_it_returns_is_given_back(stack):
    # GIVEN a serving worker in an idle long poll (5 s here)
    det = make_worker(stack, "detector", idle_after_s=0.0, idle_wait_s=5, grace_s=30.0)
    url = det.assignment.queue_url
    before = set(threading.enumerate())
    server = threading.Thread(target=det.serve, kwargs={"report_s": 60.0}, daemon=True)
    server.start()
    time.sleep(0.5)
    (receiver,) = [t for t in threading.enumerate() if t.name == "receiver" and t not in before]
    # WHEN its share retires on an instance that keeps running (the agent does not wait for the poll)
    t0 = time.monotonic()
    det.stop(wait_for_poll=False)
    server.join(timeout=15)
    assert not server.is_alive() and time.monotonic() - t0 < 4.0  # not the rest of the 5 s poll
    assert receiver.is_alive()
    # THEN a frame the poll still returns is given back at once, not held to the visibility timeout
    send_frames(stack, 1)
    receiver.join(timeout=10)
    assert not receiver.is_alive()
    assert len(stack.messages(url)) == 1 and len(det.assembler) == 0


def test_workers_sharing_a_record_linger_answer_every_frame_once(stack):
    # GIVEN serving detector and car workers that share a record linger
    from workers.recording import RecordLinger

    linger = RecordLinger(linger_s=0.3, margin_s=0.05)
    # (the fixture's 1 s visibility timeout, meant for the crash tests, could redeliver a message held
    # by both lingers on a loaded host; 30 s, as deployed, leaves no redelivery to count as duplicates)
    for shares in stack.deployment.queues.values():
        for url in shares.values():
            stack.sqs.set_queue_attributes(QueueUrl=url, Attributes={"VisibilityTimeout": "30"})
    det = make_worker(stack, "detector", record_linger=linger, delete_linger_s=0.2)
    cars = [make_worker(stack, "car", 0, m, record_linger=linger, delete_linger_s=0.2) for m in range(2)]
    servers = [threading.Thread(target=w.serve, kwargs={"report_s": 60.0}, daemon=True) for w in [det, *cars]]
    for server in servers:
        server.start()
    # WHEN frames arrive in three POSTs
    ids = [rid for _ in range(3) for rid in send_frames(stack, 3)]
    deadline = time.time() + 15
    while time.time() < deadline:
        if all(front(stack).result(rid).status == "done" for rid in ids):
            break
        time.sleep(0.2)
    for w in [det, *cars]:
        w.stop()
    for server in servers:
        server.join(timeout=10)
    # THEN every frame is done once, every message was deleted (after its records were written),
    # and the records went out in fewer calls than batches
    for rid in ids:
        res = front(stack).result(rid)
        assert res.status == "done", res
        names = [t.task_id for t in res.tasks if t.module == "car"]
        assert len(names) == len(set(names)) >= 1
    assert sum(stack.all_queue_depths().values()) == 0
    assert sum(w.totals["duplicates"] for w in cars) == 0
    assert linger.batches >= linger.calls >= 1
