"""Messages of several tasks (core/wire.py) at the worker, against moto: a message's tasks may run
in different batches and a batch may hold tasks of several messages; a message is deleted only when
all its tasks have finished; a redelivered half-done message counts nothing twice; a stop releases
what is unfinished; a failed task keeps its message for redelivery; a bad body is poison."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

import pytest

from core import wire
from core.adapters.queues import Received
from tests.functional.conftest import jpeg_bytes
from tests.functional.test_worker import CountingQueues, front, make_worker, run_car_workers
from workers.runtimes import EmulatedRuntime

if TYPE_CHECKING:
    from workers.worker import Worker

pytestmark = pytest.mark.functional


def post(stack, n: int, at: float) -> list[str]:
    """One POST of ``n`` frames accepted at ``at``: one message on the detector queue."""
    svc = front(stack)
    svc.clock = lambda: at
    frames = [(jpeg_bytes(seed=i), "image/jpeg") for i in range(n)]
    return [a.request_id for a in svc.accept("traffic", frames).accepted]


def receive(stack, count: int = 1, receive_count: int = 1) -> list[Received]:
    """``count`` messages of the detector queue, received by hand (30 s visibility)."""
    url = stack.deployment.queues["detector"]["0/0"]
    raw: list[dict] = []
    end = time.time() + 5
    while len(raw) < count and time.time() < end:
        raw += stack.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=30).get(
            "Messages", []
        )
    assert len(raw) == count
    return [Received(m["Body"], m["ReceiptHandle"], receive_count, time.time()) for m in raw]


def detector(stack, **kw) -> tuple[Worker, CountingQueues]:
    det = make_worker(stack, "detector", **kw)
    det.queues = queues = CountingQueues(stack.queues)
    return det, queues


def test_a_post_is_one_message_whose_delete_waits_for_its_last_task(stack):
    # GIVEN two POSTs in one window, of 3 frames and 1 frame: two messages of the detector queue
    t = time.time()
    ids = post(stack, 3, t) + post(stack, 1, t)
    got = receive(stack, 2)
    assert sorted(len(r.messages()) for r in got) == [1, 3]
    det, queues = detector(stack)
    assert det.accept(got) == 4
    # WHEN their four tasks run in the detector's batches of 2 (each batch mixes or splits messages)
    chunks = det.assembler.take_ready(float("inf"))
    assert all(len(items) <= 2 for _, items in chunks) and len(chunks) >= 2
    tasks_of = {r.receipt: {m.idempotency_key for m in r.messages()} for r in got}
    done: set[str] = set()
    deleted = 0
    for bid, items in chunks:
        det.process(bid, items)
        done |= {p.message.idempotency_key for p in items}
        # THEN after each batch exactly the messages all of whose tasks ran are deleted, and only once
        finished = [receipt for receipt, keys in tasks_of.items() if keys <= done]
        deleted = sum(queues.delete_requests)
        assert deleted == len(finished), (len(finished), queues.delete_requests)
    assert deleted == 2 and det.totals["ran"] == 4
    assert stack.queues.depth_messages(det.assignment.queue_url) == 0
    run_car_workers(stack)
    assert all(front(stack).result(rid).status == "done" for rid in ids)


def test_a_redelivered_half_done_message_counts_nothing_twice(stack):
    # GIVEN a POST of 3 frames whose message's first batch ran (its children forwarded) ...
    ids = post(stack, 3, time.time())
    (first,) = receive(stack)
    det, queues = detector(stack)
    det.accept([first])
    chunks = det.assembler.take_ready(float("inf"))
    head = next(items for _, items in chunks if len(items) == 2)
    rest = [items for _, items in chunks if items is not head]
    det.process(head[0].message.batch_id, head)
    assert queues.delete_requests == []  # a task of it has not run: the message stays
    # ... WHEN the message comes back (its visibility ran out) while the third task is still buffered
    url = det.assignment.queue_url
    stack.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=first.receipt, VisibilityTimeout=0)
    (again,) = receive(stack, receive_count=2)
    assert det.accept([again]) == 3
    for items in rest:
        det.process(items[0].message.batch_id, items)
    for bid, items in det.assembler.take_ready(float("inf")):
        det.process(bid, items)
    # THEN both receipts are deleted once every task of each has finished, the two tasks that ran
    # twice forwarded their children again marked to be checked, and the cars count each child once
    assert sum(queues.delete_requests) == 2 and stack.queues.depth_messages(url) == 0
    cars = run_car_workers(stack)
    car_tasks = 0
    for rid in ids:
        res = front(stack).result(rid)
        assert res.status == "done"
        names = [t.task_id for t in res.tasks if t.module == "car"]
        assert len(names) == len(set(names)) >= 1
        car_tasks += len(names)
    assert sum(w.totals["ran"] + w.totals["dropped"] - w.totals["duplicates"] for w in cars) == car_tasks
    assert stack.metrics.weights("FramesFinished", App="traffic") == pytest.approx(3.0)
    assert stack.metrics.weights("SloAttainment", App="traffic") == pytest.approx(3.0)


def test_a_stop_releases_a_message_with_a_task_unfinished_and_a_fresh_worker_finishes_it(stack):
    # GIVEN a POST of 3 frames of which one batch of 2 ran; the third is buffered
    ids = post(stack, 3, time.time())
    (got,) = receive(stack)
    det, queues = detector(stack)
    det.accept([got])
    chunks = det.assembler.take_ready(float("inf"))
    head = next(items for _, items in chunks if len(items) == 2)
    tail = [p for _, items in chunks if items is not head for p in items]
    det.process(head[0].message.batch_id, head)
    for pending in tail:  # back into the buffer, as if its window were still open
        det.assembler.add(pending.message, got.receipt, time.time())
    # WHEN the worker stops (SIGTERM)
    det.stop()
    # THEN the message is released (visible at once), not deleted
    assert det.release_buffered() == 1
    assert queues.delete_requests == []
    url = det.assignment.queue_url
    assert len(stack.messages(url)) == 1
    # AND a fresh worker reruns it: the two tasks that ran are duplicates, every frame finishes once
    time.sleep(0.05)
    fresh = make_worker(stack, "detector")
    end = time.time() + 5
    while fresh.totals["ran"] < 3 and time.time() < end:
        # a release is visibility 0, but its redelivery's receive count is 2 (every task is checked)
        fresh.poll_once(wait_s=0)
        fresh.run_ready(now=float("inf"))
    assert fresh.totals["ran"] == 3 and stack.queues.depth_messages(url) == 0
    run_car_workers(stack)
    assert all(front(stack).result(rid).status == "done" for rid in ids)
    assert stack.metrics.weights("FramesFinished", App="traffic") == pytest.approx(3.0)


class FailsFor(EmulatedRuntime):
    """Fails every batch that holds the frame of ``bad`` bytes."""

    def __init__(self, bad: int, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self.bad = bad

    def prepare(self, data: bytes, region):
        if len(data) == self.bad:
            raise ValueError("cannot decode this frame")
        return super().prepare(data, region)


def test_a_failed_task_keeps_its_message_for_redelivery_and_its_mates_run(stack):
    # GIVEN a POST of 2 frames, one of which the detector cannot decode
    ok, bad = jpeg_bytes(seed=1), jpeg_bytes(width=80, seed=2)
    svc = front(stack)
    ids = [a.request_id for a in svc.accept("traffic", [(ok, "image/jpeg"), (bad, "image/jpeg")]).accepted]
    (got,) = receive(stack)
    a = stack.assignment("detector")
    det, queues = detector(stack, runtime=FailsFor(len(bad), a.duration_s, a.hardware), prepare_ahead=False)
    det.accept([got])
    # WHEN its batch runs (and fails, then each request is tried alone)
    for bid, items in det.assembler.take_ready(float("inf")):
        det._process_logged(bid, items)
    # THEN the good frame ran and the message is not deleted: SQS redelivers it for the bad one
    assert det.totals["ran"] == 1
    assert queues.delete_requests == []
    assert det._unfinished == {} and det._failed == set()  # nothing held for it any more
    # AND on its last receive the bad frame is recorded as dropped with the reason
    det.max_receive_count = 2
    url = det.assignment.queue_url
    stack.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=got.receipt, VisibilityTimeout=0)
    (again,) = receive(stack, receive_count=2)
    det.accept([again])
    for bid, items in det.assembler.take_ready(float("inf")):
        det._process_logged(bid, items)
    res = front(stack).result(ids[1])
    assert res.status == "dropped" and "cannot decode" in (res.tasks[0].reason or "")


def test_a_malformed_multi_task_body_is_poison_with_a_record_per_task(stack):
    # GIVEN a v2 body of two tasks, one of them invalid
    ids = post(stack, 2, time.time())
    (got,) = receive(stack)
    doc = json.loads(got.body)
    doc["tasks"][1]["deadline"] = "soon"
    url = stack.deployment.queues["detector"]["0/0"]
    stack.sqs.delete_message(QueueUrl=url, ReceiptHandle=got.receipt)
    stack.sqs.send_message(QueueUrl=url, MessageBody=json.dumps(doc))
    det, queues = detector(stack)
    # WHEN the worker receives it
    assert det.poll_once(wait_s=0) == 0
    # THEN it is counted as poison, left for the DLQ, and both tasks are recorded as dropped
    assert det.totals["poison"] == 1 and queues.delete_requests == []
    for rid in ids:
        res = front(stack).result(rid)
        assert res.status == "dropped" and (res.tasks[0].reason or "").startswith("poison: ")
    assert len(wire.raw_tasks(json.dumps(doc))) == 2
