"""SQS: send tasks packed several to a message (:mod:`core.wire`), in batches of at most 10 messages
and :data:`SQS_BATCH_LIMIT_BYTES` bytes (several queues' batches in parallel), long-poll, delete,
release (visibility 0), and a queue's depth in tasks.

A message holds as many of one queue's tasks (of one :meth:`TaskQueues.send_many`) as fit SQS's
256 KiB (:func:`core.wire.pack`): receives, deletes and sends are priced per message, so they
scale with the POSTs and parent batches, not with the tasks. SQS counts messages, not tasks:
:meth:`TaskQueues.depth` converts with the tasks per message this process observed on the queue
(what it sent there, what its receivers decoded there), see :meth:`TaskQueues.tasks_per_message`.

SQS refuses a ``SendMessageBatch`` whose messages together exceed the queue's maximum message size
(``BatchRequestTooLong``): 256 KiB until August 2025, up to 1 MiB since, and 256 KiB on a queue whose
``MaximumMessageSize`` says so. A frame's task carries up to ``SKINFLINT_INLINE_LIMIT_BYTES``
(200 KiB) of base64 inline (a message carries one frame's bytes once, however many of its children
it holds), so the frames of one POST may not fit one message: messages are cut at 256 KiB and
batches are split by bytes as well as by count, at the lowest limit any queue may have (256 KiB).
SQS bills each 64 KiB of a request as one request, so a split costs about nothing; the requests go
in parallel. Larger frames never ride inline (the front stores them in S3
and the message carries the key)."""

from __future__ import annotations

import math
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from core import wire
from core.adapters._aws import AWS_ERRORS, error_code
from core.errors import QueueError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from core.schema import TaskMessage

__all__ = [
    "GONE_CODES",
    "SQS_BATCH_LIMIT_BYTES",
    "SQS_BATCH_MESSAGES",
    "Received",
    "TaskQueues",
    "batches",
    "queue_gone",
]

#: SQS's error codes for a queue that does not exist (the query protocol's and moto's legacy code,
#: the JSON protocol's exception name)
GONE_CODES = frozenset({"AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"})


def queue_gone(exc: BaseException) -> bool:
    """Whether an SQS failure (a :class:`QueueError` wrapping botocore's ``ClientError``, or the
    ``ClientError`` itself) says the queue does not exist (the control loop's garbage collector
    deleted it). A network failure (``BotoCoreError``) never does."""
    cause = exc.__cause__ if isinstance(exc, QueueError) else exc
    return cause is not None and error_code(cause) in GONE_CODES


@dataclass(frozen=True)
class Received:
    body: str
    receipt: str
    receive_count: int
    sent_at: float  # epoch s, SQS's SentTimestamp

    def messages(self) -> list[TaskMessage]:
        """The tasks the message carries (:func:`core.wire.decode`: one, or several in a v2 body).
        Raises ``ValueError`` on a malformed body (a poison message)."""
        return wire.decode(self.body)


#: threads a :class:`TaskQueues` sends on in parallel (its own pool, started on first use)
SEND_THREADS = 4
#: bytes of message bodies in one SendMessageBatch: SQS's limit on a queue created before August 2025
#: or with MaximumMessageSize 262,144 (newer queues allow 1 MiB; the lowest limit is the safe one)
SQS_BATCH_LIMIT_BYTES = 256 * 1024
SQS_BATCH_MESSAGES = 10  # messages in one SendMessageBatch (SQS's limit)


def batches(bodies: list[str], limit_bytes: int = SQS_BATCH_LIMIT_BYTES) -> list[list[int]]:
    """Indices of ``bodies`` in consecutive groups of at most :data:`SQS_BATCH_MESSAGES` whose UTF-8
    sizes add up to at most ``limit_bytes``, in order; a body larger than the limit goes alone (SQS
    judges it against the queue's own limit)."""
    out: list[list[int]] = []
    size = 0
    for index, body in enumerate(bodies):
        n = len(body.encode())
        if not out or len(out[-1]) >= SQS_BATCH_MESSAGES or size + n > limit_bytes:
            out.append([])
            size = 0
        out[-1].append(index)
        size += n
    return out


#: the weight of what was already observed of a queue when new messages are (per message): an
#: exponentially decayed mean over about the last thousand messages
_DECAY = 0.999


class TaskQueues:
    def __init__(
        self,
        client: Any,
        batch_limit_bytes: int = SQS_BATCH_LIMIT_BYTES,
        default_tasks_per_message: float = 1.0,
        max_tasks_per_message: int = 0,
    ):
        self._sqs = client
        self.batch_limit_bytes = batch_limit_bytes
        #: the tasks per message a queue this process never sent to nor received from is assumed to
        #: hold (1: its depth in messages, a lower bound of its depth in tasks)
        self.default_tasks_per_message = default_tasks_per_message
        #: the most tasks one message carries (0: as many as fit; 1: a message per task, as before
        #: the v2 wire format)
        self.max_tasks_per_message = max_tasks_per_message
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._seen: dict[str, tuple[float, float]] = {}  # queue -> decayed (tasks, messages)
        self._seen_lock = threading.Lock()

    def observe(self, queue_url: str, tasks: int, messages: int) -> None:
        """Count ``messages`` holding ``tasks`` in all as sent to or received from ``queue_url``
        (:meth:`send_many` counts its own sends; a receiver counts what it decoded)."""
        if messages <= 0:
            return
        with self._seen_lock:
            old_tasks, old_messages = self._seen.get(queue_url, (0.0, 0.0))
            keep = _DECAY**messages
            self._seen[queue_url] = (old_tasks * keep + tasks, old_messages * keep + messages)

    def tasks_per_message(self, queue_url: str) -> float:
        """The mean tasks per message observed on ``queue_url`` (decayed, :meth:`observe`); a queue
        never observed: the mean over every queue observed, else ``default_tasks_per_message``."""
        with self._seen_lock:
            seen = self._seen.get(queue_url)
            if seen is None and self._seen:
                seen = (sum(t for t, _ in self._seen.values()), sum(m for _, m in self._seen.values()))
        if seen is None or seen[1] <= 0:
            return self.default_tasks_per_message
        return max(1.0, seen[0] / seen[1])

    def send(self, queue_url: str, messages: list[TaskMessage]) -> None:
        self.send_many({queue_url: messages})

    def send_many(self, by_queue: Mapping[str, list[TaskMessage]]) -> None:
        """Send every queue's tasks, packed into as few messages as fit SQS's message size and
        :attr:`batch_limit_bytes` (:func:`core.wire.pack`), one ``SendMessageBatch`` per 10 messages
        or :attr:`batch_limit_bytes` bytes, whichever comes first (:func:`batches`). With more than one
        request they go in parallel: a message's delivery does not wait for the round trips of
        the requests before it (a parent's children on two queues, a burst of more than ten).
        Raises the first failure (:class:`QueueError`) once every request has returned; the
        messages of the requests that succeeded were sent (a retry sends them again: at least
        once, as a redelivered parent does)."""
        calls: list[tuple[str, list[str]]] = []
        for url, msgs in by_queue.items():
            if not msgs:
                continue
            limit = min(wire.SQS_MESSAGE_LIMIT_BYTES, self.batch_limit_bytes)
            packed = wire.pack(msgs, limit, self.max_tasks_per_message)
            self.observe(url, len(msgs), len(packed))
            bodies = [body for body, _ in packed]
            groups = batches(bodies, self.batch_limit_bytes)
            calls.extend((url, [bodies[i] for i in group]) for group in groups)
        if len(calls) <= 1:
            for url, chunk in calls:
                self._send_batch(url, chunk)
            return
        pool = self._send_pool()
        futures = [pool.submit(self._send_batch, url, chunk) for url, chunk in calls[1:]]
        failure: QueueError | None = None
        try:
            self._send_batch(*calls[0])
        except QueueError as exc:
            failure = exc
        for future in futures:
            try:
                future.result()
            except QueueError as exc:
                failure = failure or exc
        if failure is not None:
            raise failure

    def send_bodies(self, queue_url: str, bodies: list[str]) -> None:
        """Send raw message bodies (a push app's results, core/adapters/results.py), one
        ``SendMessageBatch`` per 10 messages or :attr:`batch_limit_bytes` bytes."""
        for group in batches(bodies, self.batch_limit_bytes):
            self._send_batch(queue_url, [bodies[i] for i in group])

    def _send_pool(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=SEND_THREADS, thread_name_prefix="sqs-send")
            return self._pool

    def _send_batch(self, queue_url: str, bodies: list[str]) -> None:
        entries = [{"Id": str(index), "MessageBody": body} for index, body in enumerate(bodies)]
        try:
            out = self._sqs.send_message_batch(QueueUrl=queue_url, Entries=entries)
        except AWS_ERRORS as exc:
            raise QueueError(f"cannot send to {queue_url}: {exc}", queue_url=queue_url) from exc
        if out.get("Failed"):
            why = "; ".join(failure.get("Message", failure.get("Code", "?")) for failure in out["Failed"])
            raise QueueError(f"SQS refused {len(out['Failed'])} message(s): {why}", queue_url=queue_url)

    def receive(self, queue_url: str, wait_s: int = 20, max_messages: int = 10) -> list[Received]:
        try:
            out = self._sqs.receive_message(
                QueueUrl=queue_url,
                MaxNumberOfMessages=max_messages,
                WaitTimeSeconds=wait_s,
                MessageSystemAttributeNames=["ApproximateReceiveCount", "SentTimestamp"],
            )
        except AWS_ERRORS as exc:
            raise QueueError(f"cannot receive from {queue_url}: {exc}", queue_url=queue_url) from exc
        return [
            Received(
                body=message["Body"],
                receipt=message["ReceiptHandle"],
                receive_count=int(message.get("Attributes", {}).get("ApproximateReceiveCount", 1)),
                sent_at=int(message.get("Attributes", {}).get("SentTimestamp", 0)) / 1000.0,
            )
            for message in out.get("Messages", [])
        ]

    def delete(self, queue_url: str, receipts: list[str]) -> None:
        self._batch("delete_message_batch", queue_url, [{"ReceiptHandle": receipt} for receipt in receipts])

    def release(self, queue_url: str, receipts: list[str]) -> None:
        """Make messages visible again at once (ChangeMessageVisibility 0): another worker, or this
        one after a restart, picks them up without waiting for the visibility timeout."""
        self._batch(
            "change_message_visibility_batch",
            queue_url,
            [{"ReceiptHandle": receipt, "VisibilityTimeout": 0} for receipt in receipts],
        )

    def _batch(self, op: str, queue_url: str, entries: list[dict[str, Any]]) -> None:
        for i in range(0, len(entries), 10):
            chunk = [{"Id": str(index), **entry} for index, entry in enumerate(entries[i : i + 10])]
            try:
                getattr(self._sqs, op)(QueueUrl=queue_url, Entries=chunk)
            except AWS_ERRORS as exc:
                raise QueueError(f"{op} on {queue_url} failed: {exc}", queue_url=queue_url) from exc

    def depth(self, queue_url: str) -> int:
        """Visible plus in-flight *tasks*: SQS's message count (:meth:`depth_messages`) times the
        mean tasks per message observed on the queue (:meth:`tasks_per_message`), to the nearest
        task; at least the messages (0 only when the queue holds no message)."""
        messages = self.depth_messages(queue_url)
        return max(messages, math.floor(messages * self.tasks_per_message(queue_url) + 0.5))

    def depth_messages(self, queue_url: str) -> int:
        """Visible plus in-flight messages (approximate, as SQS reports them)."""
        try:
            attrs = self._sqs.get_queue_attributes(
                QueueUrl=queue_url,
                AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
            )["Attributes"]
        except AWS_ERRORS as exc:
            raise QueueError(f"cannot read depth of {queue_url}: {exc}", queue_url=queue_url) from exc
        return int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"])
