"""1080p frames through the front and ``TaskQueues`` (moto): no SendMessageBatch exceeds SQS's limits.

A parent's children carry its payload, so ten children of a frame that rides inline (up to
``SKINFLINT_INLINE_LIMIT_BYTES``, 200 KiB of base64) are about 2 MB: more than SQS takes in one
batch (moto enforces 1 MiB, the limit since August 2025; older queues 256 KiB). Frames larger than
the inline limit go to S3 and every message carries the key.
"""

from __future__ import annotations

import io
import time
from typing import TYPE_CHECKING, Any

import pytest

from core import wire
from core.adapters.queues import SQS_BATCH_LIMIT_BYTES, SQS_BATCH_MESSAGES, TaskQueues
from front.service import FrontService

if TYPE_CHECKING:
    from core.schema import TaskMessage

pytestmark = pytest.mark.functional

WIDTH, HEIGHT = 1920, 1080


def hd_jpeg(noise_rows: int = HEIGHT, seed: int = 0) -> bytes:
    """A 1920x1080 JPEG (quality 90): uniform noise in the first ``noise_rows`` rows (high entropy:
    JPEG cannot compress it), mid grey below."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    arr = np.full((HEIGHT, WIDTH, 3), 128, dtype=np.uint8)
    arr[:noise_rows] = rng.integers(0, 256, size=(noise_rows, WIDTH, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def inline_hd_jpeg(inline_limit: int) -> bytes:
    """The 1080p JPEG with the most noise rows (in steps of 8) whose base64 still rides inline."""
    best = hd_jpeg(8)
    for rows in range(16, HEIGHT, 8):
        data = hd_jpeg(rows)
        if (len(data) + 2) // 3 * 4 > inline_limit:
            break
        best = data
    return best


class RecordingSqs:
    """The moto SQS client, recording each SendMessageBatch's entries and body bytes."""

    def __init__(self, sqs: Any) -> None:
        self._sqs = sqs
        self.batches: list[tuple[int, int]] = []  # (entries, bytes of their bodies)

    def send_message_batch(self, **kwargs: Any) -> Any:
        entries = kwargs["Entries"]
        self.batches.append((len(entries), sum(len(e["MessageBody"].encode()) for e in entries)))
        return self._sqs.send_message_batch(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sqs, name)


def _front(stack: Any, queues: TaskQueues, max_body: int = 6 * 1024 * 1024) -> FrontService:
    stack.cfg.__dict__["max_body_bytes"] = max_body  # frozen dataclass: tests poke the field directly
    return FrontService(
        config=stack.cfg,
        store=stack.store,
        plans=stack.plans,
        results=stack.results,
        queues=queues,
        blobs=stack.blobs,
        metrics=stack.metrics,
    )


def _receive_all(stack: Any, url: str) -> list[TaskMessage]:
    out: list[TaskMessage] = []
    while True:
        got = stack.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=30)
        if not got.get("Messages"):
            return out
        out += [task for m in got["Messages"] for task in wire.decode(m["Body"])]


def test_a_large_1080p_frame_goes_to_s3_and_its_message_is_small(stack: Any) -> None:
    sqs = RecordingSqs(stack.sqs)
    frame = hd_jpeg()  # all noise: well over a megabyte
    assert len(frame) > 1024 * 1024
    out = _front(stack, TaskQueues(sqs)).accept("traffic", [(frame, "image/jpeg")])
    assert len(out.accepted) == 1
    (msg,) = _receive_all(stack, stack.deployment.queues["detector"]["0/0"])
    assert msg.payload.inline_b64 is None and msg.payload.s3_key
    assert stack.blobs.get(msg.payload.s3_key) == frame
    assert len(sqs.batches) == 1 and sqs.batches[0][1] < 2048  # a pointer, not the frame


def test_ten_children_of_an_inline_1080p_frame_are_sent_in_batches_sqs_accepts(stack: Any) -> None:
    # GIVEN a 1080p frame just small enough to ride inline, accepted by the front
    limit = stack.cfg.inline_limit_bytes
    frame = inline_hd_jpeg(limit)
    assert (len(frame) + 2) // 3 * 4 > 0.9 * limit  # within 10 % of the inline limit: the worst case
    sqs = RecordingSqs(stack.sqs)
    queues = TaskQueues(sqs)
    _front(stack, queues).accept("traffic", [(frame, "image/jpeg")])
    (parent,) = _receive_all(stack, stack.deployment.queues["detector"]["0/0"])
    assert parent.payload.inline_b64 is not None
    # WHEN its worker forwards ten children to one car machine (as workers.worker._forward does)
    router = stack.router()
    car_url = stack.deployment.queues["car"]["0/0"]
    route = router.route("car", time.time())
    children = [
        router.task(
            route,
            request_id=parent.request_id,
            task_id=f"detector/car.{i}",
            accepted_at=parent.accepted_at,
            enqueued_at=time.time(),
            deadline=parent.deadline,
            payload=parent.payload,
        )
        for i in range(10)
    ]
    bodies = [child.model_dump_json(exclude_none=True) for child in children]
    # (one batch of them all is what SQS refuses: BatchRequestTooLong)
    assert sum(len(b.encode()) for b in bodies) > 1024 * 1024
    with pytest.raises(stack.sqs.exceptions.ClientError, match="BatchRequestTooLong"):
        stack.sqs.send_message_batch(
            QueueUrl=route.queue_url, Entries=[{"Id": str(i), "MessageBody": b} for i, b in enumerate(bodies)]
        )
    sqs.batches.clear()
    queues.send_many({route.queue_url: children})
    # THEN every request stays within SQS's count and byte limits, and every child arrives whole: in
    # one message, which carries the frame once (core/wire.py)
    assert sum(n for n, _ in sqs.batches) == 1
    assert all(n <= SQS_BATCH_MESSAGES and size <= SQS_BATCH_LIMIT_BYTES for n, size in sqs.batches)
    received = _receive_all(stack, route.queue_url)
    if route.queue_url != car_url:
        received += _receive_all(stack, car_url)
    assert sorted(m.task_id for m in received) == sorted(c.task_id for c in children)
    assert all(m.payload == parent.payload for m in received)
