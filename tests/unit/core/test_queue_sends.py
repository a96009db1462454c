"""``TaskQueues.send_many``: one SendMessageBatch per ten messages, several in parallel, failures
raised after every request returned."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from botocore.exceptions import ClientError

from core import wire
from core.adapters.queues import SQS_BATCH_LIMIT_BYTES, TaskQueues, batches
from core.errors import QueueError
from core.schema import Payload, TaskMessage


def message(n: int) -> TaskMessage:
    return TaskMessage(
        idempotency_key=f"r{n}/detector",
        request_id=f"r{n}",
        task_id="detector",
        app="traffic",
        module="detector",
        deployment_version=1,
        accepted_at=0.0,
        enqueued_at=0.0,
        deadline=1.0,
        module_deadline=1.0,
        group=0,
        machine=0,
        batch_id=n,
        window_end=0.1,
        payload=Payload(content_type="image/jpeg", size=1, inline_b64="AA=="),
    )


class SlowSqs:
    """Each SendMessageBatch takes ``delay_s``; records (queue, ids, thread) and refuses ``fail``."""

    def __init__(self, delay_s: float, fail: str | None = None):
        self.delay_s = delay_s
        self.fail = fail
        self.calls: list[tuple[str, list[str], str]] = []
        self._lock = threading.Lock()

    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:  # noqa: N803
        time.sleep(self.delay_s)
        with self._lock:
            self.calls.append((QueueUrl, [e["Id"] for e in Entries], threading.current_thread().name))
        if QueueUrl == self.fail:
            raise ClientError({"Error": {"Code": "InternalError", "Message": "boom"}}, "SendMessageBatch")
        return {"Successful": [{"Id": e["Id"]} for e in Entries]}


def test_two_queues_are_sent_in_parallel_and_bursts_in_tens() -> None:
    sqs = SlowSqs(0.2)
    queues = TaskQueues(sqs, max_tasks_per_message=1)  # a message per task
    t0 = time.perf_counter()
    queues.send_many({"q-car": [message(i) for i in range(12)], "q-person": [message(99)]})
    took = time.perf_counter() - t0
    # three requests (10 + 2 cars, 1 person), all at once: about one round trip, not three
    assert sorted((q, len(ids)) for q, ids, _ in sqs.calls) == [("q-car", 2), ("q-car", 10), ("q-person", 1)]
    assert took < 0.2 * 2
    assert len({thread for _, _, thread in sqs.calls}) == 3  # the caller's thread and two of the pool


def test_one_request_is_sent_on_the_callers_thread() -> None:
    sqs = SlowSqs(0.0)
    TaskQueues(sqs, max_tasks_per_message=1).send("q", [message(1), message(2)])
    assert [(q, ids, thread) for q, ids, thread in sqs.calls] == [
        ("q", ["0", "1"], threading.current_thread().name)
    ]


def test_a_failed_request_is_raised_after_the_others_were_sent() -> None:
    sqs = SlowSqs(0.05, fail="q-bad")
    with pytest.raises(QueueError, match="cannot send to q-bad"):
        TaskQueues(sqs).send_many({"q-bad": [message(1)], "q-good": [message(2)], "q-also": [message(3)]})
    assert sorted(q for q, _, _ in sqs.calls) == ["q-also", "q-bad", "q-good"]


@pytest.mark.parametrize(
    ("sizes", "limit", "groups"),
    [
        # 12 small bodies: 10 + 2 (SQS's count limit)
        ([1] * 12, 100, [list(range(10)), [10, 11]]),
        # 60 + 30 = 90 <= 100, + 30 = 120 > 100: a new batch at the third
        ([60, 30, 30, 70], 100, [[0, 1], [2, 3]]),
        # a body over the limit goes alone (SQS judges it against the queue's own limit)
        ([10, 150, 10], 100, [[0], [1], [2]]),
        # exactly at the limit fits
        ([50, 50, 1], 100, [[0, 1], [2]]),
    ],
)
def test_batches_split_by_count_and_bytes(sizes: list[int], limit: int, groups: list[list[int]]) -> None:
    assert batches(["x" * n for n in sizes], limit) == groups


def test_inline_frames_are_sent_in_batches_within_the_byte_limit() -> None:
    # seven frames carrying 200 KiB of base64 inline each: 7 x ~205 KiB = 1.4 MiB, over SQS's batch
    # limit in one request; 256 KiB per message and request -> one frame per request, seven requests
    sqs = SlowSqs(0.0)
    frames = [
        message(i).model_copy(
            update={
                "payload": Payload(
                    content_type="image/jpeg", size=150_000, inline_b64=chr(65 + i) * 200 * 1024
                )
            }
        )
        for i in range(7)
    ]
    TaskQueues(sqs).send("q", frames)
    assert [len(ids) for _, ids, _ in sqs.calls] == [1] * 7
    assert SQS_BATCH_LIMIT_BYTES == 256 * 1024


def test_children_of_one_inline_frame_share_one_message() -> None:
    # seven children of one frame (200 KiB inline): one message carries the frame once (~205 KiB)
    sqs = Capture()
    big = Payload(content_type="image/jpeg", size=150_000, inline_b64="A" * 200 * 1024)
    children = [
        message(1).model_copy(update={"payload": big, "task_id": f"detector/car.{i}"}) for i in range(7)
    ]
    TaskQueues(sqs).send("q", children)
    [(_, [body])] = sqs.sent
    assert len(body.encode()) < 210 * 1024
    assert [m.task_id for m in wire.decode(body)] == [f"detector/car.{i}" for i in range(7)]


def test_a_post_of_ten_frames_is_one_message_per_queue() -> None:
    sqs = Capture()
    queues = TaskQueues(sqs)
    queues.send_many({"q-a": [message(i) for i in range(10)], "q-b": [message(i) for i in range(10, 13)]})
    assert sorted((url, len(bodies)) for url, bodies in sqs.sent) == [("q-a", 1), ("q-b", 1)]
    assert queues.tasks_per_message("q-a") == 10 and queues.tasks_per_message("q-b") == 3


class Capture:
    """Records each SendMessageBatch's bodies; answers depth with ``messages``."""

    def __init__(self, messages: int = 0) -> None:
        self.sent: list[tuple[str, list[str]]] = []
        self.messages = messages
        self._lock = threading.Lock()

    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:  # noqa: N803
        with self._lock:
            self.sent.append((QueueUrl, [e["MessageBody"] for e in Entries]))
        return {"Successful": [{"Id": e["Id"]} for e in Entries]}

    def get_queue_attributes(self, QueueUrl: str, AttributeNames: list[str]) -> dict[str, Any]:  # noqa: N803
        visible = self.messages // 2
        return {
            "Attributes": {
                "ApproximateNumberOfMessages": str(visible),
                "ApproximateNumberOfMessagesNotVisible": str(self.messages - visible),
            }
        }


@pytest.mark.parametrize(
    ("sent", "messages", "depth"),
    [
        # nothing observed: the default, 1 task a message (depth in messages)
        ([], 7, 7),
        # one POST of 10 frames = 1 message of 10: 3 messages in the queue -> 30 tasks
        ([10], 3, 30),
        # POSTs of 10 and 4 frames (the older weighs 0.999): 13.99 / 1.999 = 6.9985 a message;
        # 3 messages -> 20.996 -> 21 tasks
        ([10, 4], 3, 21),
        # an empty queue is 0 whatever the mean
        ([10], 0, 0),
    ],
)
def test_depth_is_in_tasks_by_the_observed_mean(sent: list[int], messages: int, depth: int) -> None:
    sqs = Capture(messages)
    queues = TaskQueues(sqs)
    for n in sent:
        queues.send("q", [message(i) for i in range(n)])
    assert queues.depth_messages("q") == messages
    assert queues.depth("q") == depth


def test_a_queue_never_observed_takes_the_mean_of_those_observed() -> None:
    queues = TaskQueues(Capture(2))
    queues.send("q-seen", [message(i) for i in range(4)])
    assert queues.depth("q-other") == 8  # 2 messages x 4 tasks a message
    queues.observe("q-other", 2, 2)  # a receiver decoded 2 messages of 1 task
    assert queues.depth("q-other") == 2
