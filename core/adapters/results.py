"""The results table: one ``frame`` item per request and one ``task#<task id>`` item per module
request, all under the request id.

Completion is derived, not counted. The front writes the frame item with the ids of its root
tasks. A worker writes each finished (or dropped) task's item with a conditional ``PutItem``
(``attribute_not_exists``: the idempotency gate, so an SQS redelivery is recognised and not
recorded twice); the item lists the ids of the child tasks it forwards, and it is written AFTER
they were enqueued (so the write is not in the children's latency, and a recorded task's children
exist). The children are reachable only through their parent's item, so a frame is done exactly
when every task reachable from its roots has an item and none is missing; dropped when one of them
was dropped early. Its completion time is the latest ``recorded_at`` (when the last result write
was issued): usually a leaf's, a parent's when its write was slower than its children.

Every item carries ``expires_at``, the table's TTL attribute: epoch seconds, when it was written plus
the retention (``SKINFLINT_RESULTS_RETENTION_DAYS``, default 7 days). DynamoDB deletes a request's
items some time after that, orphans included (the frame items of a POST that failed after writing
them). A frame past its ``expires_at`` reads as unknown even before the delete.

No item is updated by two writers, so there is no shared counter to contend on (moto's server does
not make concurrent read-modify-writes of one item atomic, and on AWS a per-frame counter is a hot
key), and the workers' hot path is one conditional write per task.
"""

from __future__ import annotations

import json
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

from core.adapters._aws import AWS_ERRORS, error_code
from core.adapters._ddb import from_item, to_item
from core.errors import ResultStoreError
from core.schema import ResultOut, TaskOut
from core.settings import DEFAULT_RESULTS_RETENTION_DAYS

__all__ = [
    "DUE_BUCKET_S",
    "DUE_SHARDS",
    "EXPIRES_AT",
    "FrameRecord",
    "ResultStore",
    "TaskRecord",
    "due_bucket",
    "due_key",
    "expires_at",
    "read_items",
]

_FRAME_SK = "frame"
#: the results table's TTL attribute (cdk/constants.py RESULTS_TTL_ATTRIBUTE): epoch seconds
EXPIRES_AT = "expires_at"


#: The deadline index (read by the stranded-frame sweeper, control/sweeper.py): one small item per
#: frame, ``pk = due#<deadline minute>#<shard>``, ``sk = <request id>``, written with the frame item
#: in the same BatchWriteItem. A minute's frames are read back with one Query per shard, so finding
#: the frames whose deadline passed costs reads in proportion to those frames, never a Scan.
DUE_BUCKET_S = 60  # s of deadlines per index partition
DUE_SHARDS = 4  # partitions per minute: spreads the index writes (1,000 writes/s per partition key)
_DUE_PREFIX = "due#"


def due_bucket(deadline: float) -> int:
    """The index bucket (minute number since the epoch) of a deadline."""
    return int(deadline // DUE_BUCKET_S)


def due_key(bucket: int, shard: int) -> str:
    return f"{_DUE_PREFIX}{bucket}#{shard}"


def _shard(request_id: str) -> int:
    return zlib.crc32(request_id.encode()) % DUE_SHARDS


def expires_at(written_at: float, retention_s: float) -> int:
    """The ``expires_at`` of an item written at ``written_at`` (whole seconds, rounded up)."""
    return int(-(-(written_at + retention_s) // 1))


@dataclass(frozen=True)
class FrameRecord:
    request_id: str
    app: str
    accepted_at: float
    deadline: float
    roots: tuple[str, ...]  # task ids of the root module requests


@dataclass(frozen=True)
class TaskRecord:
    request_id: str
    task_id: str
    module: str
    status: str  # "done" | "dropped"
    hardware: str
    emulated: bool
    enqueued_at: float
    started_at: float
    finished_at: float
    batch_size: int
    children: tuple[str, ...] = field(default=())  # task ids forwarded downstream
    output_json: str | None = None
    output_s3_key: str | None = None
    reason: str | None = None
    received_at: float | None = None  # when the worker received the task's message
    device_at: float | None = None  # when its batch got the device (finished_at - device_at: device time)

    @property
    def key(self) -> str:
        return f"{self.request_id}/{self.task_id}"


class ResultStore:
    """``retention_s``: how long after it is written an item stays (its ``expires_at``); every writer of
    one table should use the same figure (``DataPlaneConfig.results_retention_s``)."""

    def __init__(
        self, client: Any, table: str, retention_s: float = DEFAULT_RESULTS_RETENTION_DAYS * 86_400.0
    ):
        if not retention_s > 0:
            raise ValueError(f"retention_s must be > 0, got {retention_s!r}")
        self._ddb = client
        self._table = table
        self.retention_s = float(retention_s)

    # -- front -------------------------------------------------------------------------------------
    def create_frames(self, frames: list[FrameRecord]) -> None:
        expiry = expires_at(time.time(), self.retention_s)
        items = [
            to_item(
                {
                    "pk": frame.request_id,
                    "sk": _FRAME_SK,
                    "app": frame.app,
                    "accepted_at": frame.accepted_at,
                    "deadline": frame.deadline,
                    "roots": ",".join(frame.roots),
                    EXPIRES_AT: expiry,
                }
            )
            for frame in frames
        ]
        items += [
            to_item(
                {
                    "pk": due_key(due_bucket(frame.deadline), _shard(frame.request_id)),
                    "sk": frame.request_id,
                    "app": frame.app,
                    "deadline": frame.deadline,
                    EXPIRES_AT: expiry,
                }
            )
            for frame in frames
        ]
        try:
            for i in range(0, len(items), 25):
                left: dict[str, Any] = {
                    self._table: [{"PutRequest": {"Item": it}} for it in items[i : i + 25]]
                }
                for attempt in range(6):
                    out = self._ddb.batch_write_item(RequestItems=left)
                    left = out.get("UnprocessedItems") or {}
                    if not left:
                        break
                    time.sleep(0.02 * 2**attempt)
                if left:
                    raise ResultStoreError("DynamoDB left frame records unprocessed after 6 tries")
        except AWS_ERRORS as exc:
            raise ResultStoreError(f"cannot create {len(items)} frame record(s): {exc}") from exc

    # -- the stranded-frame sweeper (the deadline index itself: core/adapters/due_index.py) ----------
    def frame_tree(
        self, request_id: str
    ) -> tuple[dict[str, Any] | None, dict[str, dict[str, Any]], list[str]]:
        """The frame item, its recorded reachable tasks and the ids of the reachable tasks not
        recorded (what keeps it ``queued``), read by key level by level as :meth:`get_request`."""
        frame = self._read_items([(request_id, _FRAME_SK)]).get((request_id, _FRAME_SK))
        if frame is None:
            return None, {}, []
        tasks: dict[str, dict[str, Any]] = {}
        missing: list[str] = []
        level = _split(frame.get("roots"))
        while level:
            got = self._read_items([(request_id, f"task#{task}") for task in level])
            found = {sk.removeprefix("task#"): item for (_, sk), item in got.items()}
            missing += [task for task in level if task not in found]
            tasks.update(found)
            level = [
                child
                for item in found.values()
                for child in _split(item.get("children"))
                if child not in tasks
            ]
        return frame, tasks, missing

    def outcome_status(self, request_ids: list[str]) -> dict[str, str]:
        """request id -> the status its claimed ``outcome`` item records, for those that have one."""
        got = self._read_items([(rid, "outcome") for rid in request_ids])
        return {pk: str(item.get("status", "")) for (pk, _), item in got.items()}

    # -- workers -----------------------------------------------------------------------------------
    def record_tasks(self, records: list[TaskRecord]) -> tuple[list[TaskRecord], list[TaskRecord]]:
        """Write each task's item unless it exists; returns (new, repeated). A repeated task is an
        SQS redelivery of one already recorded: nothing is overwritten."""
        fresh: list[TaskRecord] = []
        repeats: list[TaskRecord] = []
        now = time.time()
        for rec in records:
            try:
                self._ddb.put_item(
                    TableName=self._table,
                    Item=self._task_item(rec, now, self.retention_s),
                    ConditionExpression="attribute_not_exists(pk)",
                )
                fresh.append(rec)
            except AWS_ERRORS as exc:
                if error_code(exc) != "ConditionalCheckFailedException":
                    raise ResultStoreError(f"cannot record task {rec.key}: {exc}") from exc
                repeats.append(rec)
        return fresh, repeats

    @staticmethod
    def _task_item(rec: TaskRecord, now: float, retention_s: float) -> dict[str, Any]:
        return to_item(
            {
                "pk": rec.request_id,
                "sk": f"task#{rec.task_id}",
                "module": rec.module,
                "status": rec.status,
                "hardware": rec.hardware,
                "emulated": rec.emulated,
                "enqueued_at": rec.enqueued_at,
                "started_at": rec.started_at,
                "finished_at": rec.finished_at,
                "recorded_at": now,
                "batch_size": rec.batch_size,
                "children": ",".join(rec.children),
                "output": rec.output_json,
                "output_s3_key": rec.output_s3_key,
                "reason": rec.reason,
                "received_at": rec.received_at,
                "device_at": rec.device_at,
                EXPIRES_AT: expires_at(now, retention_s),
            }
        )

    # -- readers -----------------------------------------------------------------------------------
    def get_request(self, request_id: str) -> ResultOut | None:
        """The request's frame and every recorded task reachable from its roots; None when the
        frame item does not exist or has expired (its ``expires_at`` is past).

        Read by key, level by level (frame item -> root tasks -> their children ..., one
        consistent ``BatchGetItem`` per level): the task ids of a level are listed in the items of
        the level above. Not one ``Query`` of the partition: moto answers a Query by scanning the
        whole table, so GET /v1/requests/{id} slowed as the local results table grew (see
        ``FrameOutcomes._read``, which reads the same way). A task that is not recorded yet ends
        its branch (the frame reads ``queued``); its siblings are still read. Only reachable tasks
        are listed: a worker records a task (listing its children's ids) after forwarding them; until then
        the branch ends there."""
        frame = self._read_items([(request_id, _FRAME_SK)]).get((request_id, _FRAME_SK))
        if frame is None or _expired(frame, time.time()):
            return None
        tasks: dict[str, dict[str, Any]] = {}
        level = _split(frame.get("roots"))
        while level:
            got = self._read_items([(request_id, f"task#{task}") for task in level])
            found = {sk.removeprefix("task#"): item for (_, sk), item in got.items()}
            tasks.update(found)
            level = [
                child
                for item in found.values()
                for child in _split(item.get("children"))
                if child not in tasks
            ]
        status, finished = _completion(frame, tasks)
        return ResultOut(
            request_id=request_id,
            app=frame["app"],
            status=status,
            accepted_at=frame["accepted_at"],
            deadline=frame["deadline"],
            finished_at=finished,
            latency_s=(finished - frame["accepted_at"]) if finished is not None else None,
            tasks=sorted(
                (_task_out(i) for i in tasks.values()), key=lambda task: (task.started_at, task.task_id)
            ),
        )

    def _read_items(self, keys: list[tuple[str, str]]) -> dict[tuple[str, str], dict[str, Any]]:
        return read_items(self._ddb, self._table, keys)


def read_items(ddb: Any, table: str, keys: list[tuple[str, str]]) -> dict[tuple[str, str], dict[str, Any]]:
    """The items of ``keys`` ((pk, sk) pairs) of the results table that exist, by key: consistent
    ``BatchGetItem`` calls of at most 100 keys, unprocessed keys retried with backoff."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    unique = list(dict.fromkeys(keys))  # BatchGetItem refuses duplicate keys
    for i in range(0, len(unique), 100):
        want: dict[str, Any] = {
            table: {
                "Keys": [{"pk": {"S": pk}, "sk": {"S": sk}} for pk, sk in unique[i : i + 100]],
                "ConsistentRead": True,
            }
        }
        for attempt in range(6):
            try:
                page = ddb.batch_get_item(RequestItems=want)
            except AWS_ERRORS as exc:
                raise ResultStoreError(f"cannot read request {unique[i][0]}: {exc}") from exc
            for item in page.get("Responses", {}).get(table, []):
                doc = from_item(item)
                out[(doc["pk"], doc["sk"])] = doc
            want = page.get("UnprocessedKeys") or {}
            if not want:
                break
            time.sleep(0.02 * 2**attempt)
        if want:
            raise ResultStoreError("DynamoDB left result items unread after 6 tries")
    return out


def _expired(item: dict[str, Any], now: float) -> bool:
    """Past its ``expires_at`` (DynamoDB's TTL deletes such items within days, reads still see them)."""
    at = item.get(EXPIRES_AT)
    return isinstance(at, int | float) and at <= now


def _split(csv: str | None) -> list[str]:
    return [part for part in (csv or "").split(",") if part]


def _completion(frame: dict[str, Any], tasks: dict[str, dict[str, Any]]) -> tuple[str, float | None]:
    """("done" | "dropped", finished) when every task reachable from the roots is recorded."""
    todo = _split(frame.get("roots"))
    if not todo:
        return "queued", None
    dropped = False
    latest = 0.0
    while todo:
        tid = todo.pop()
        item = tasks.get(tid)
        if item is None:
            return "queued", None
        dropped = dropped or item["status"] == "dropped"
        latest = max(latest, float(item.get("recorded_at") or item["finished_at"]))
        todo.extend(_split(item.get("children")))
    return ("dropped" if dropped else "done"), latest


def _task_out(item: dict[str, Any]) -> TaskOut:
    out = item.get("output")
    return TaskOut(
        task_id=item["sk"].removeprefix("task#"),
        module=item["module"],
        status=item["status"],
        hardware=item["hardware"],
        emulated=bool(item.get("emulated", False)),
        enqueued_at=item["enqueued_at"],
        started_at=item["started_at"],
        finished_at=item["finished_at"],
        recorded_at=item.get("recorded_at"),
        received_at=item.get("received_at"),
        device_at=item.get("device_at"),
        batch_size=int(item["batch_size"]),
        output=json.loads(out) if out else None,
        output_s3_key=item.get("output_s3_key"),
        reason=item.get("reason"),
    )
