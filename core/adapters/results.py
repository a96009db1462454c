"""The results table: a POST's item in its due minute's partition, and its result records.

Every frame of a POST shares the POST's id as the prefix of its request id, and the post id carries
the minute its frames fall due (``core/ids.py``). The table keeps:

- the **POST item**, ``pk = due#<due minute>#<shard>``, ``sk = <POST id>`` (the shard a hash of the
  id, :data:`DUE_SHARDS` of them a minute): written by the front, once per POST: the app, the
  latest deadline, the number of frames and per frame its index, accept time, deadline and root
  modules. It is also the **deadline index**: the control loop's sweeper reads a minute's POSTs with
  one Query per shard (core/adapters/due_index.py), and a reader finds a POST's item from its id
  alone (one ``GetItem``);
- the **record items**, ``pk = <POST id>``, ``sk = "part#<unique>"``: written by a worker, once per
  batch and POST: the batch's *terminal* tasks of that POST's frames (a task that forwarded no
  children, or was dropped) with their outputs, each with the **lineage** its message carried (what
  its ancestors produced, as they would have been recorded), compressed. Nothing is written per
  task, and a task that forwards children is never written itself: its result travels with its
  children.

Completion is by weights, not by reads of a task tree. A root task carries weight 1; a task with k
children gives each 1/k of its own (exact fractions, ``TaskMessage.weight``). A frame is finished
when the weights of its distinct terminal tasks sum to 1; it is ``dropped`` when one of them was
dropped (a task past its deadline, poison, or swept as stranded by control/sweeper.py), else
``done``; its completion time is the latest write of a terminal task. A redelivered task may be
written twice: readers count each task id once.

Cost per POST of N frames: one ``BatchWriteItem`` of its item (about 0.7 KB for N = 10: one write
unit). Per batch: one
``BatchWriteItem`` with an item per POST among its terminal tasks (a write unit per KB of compressed
record). Readers: ``GET /v1/requests/{id}`` is one eventually consistent ``GetItem`` of the POST item
and one eventually consistent Query of its records (0.5 read units each per 4 KB). Partitions: the
POST items of a minute spread over :data:`DUE_SHARDS` partition keys (at 50,000 frames/s in POSTs of
10, about 310 writes/s each, under DynamoDB's 1,000 per key); the records spread by POST.

Every item carries ``expires_at``, the table's TTL attribute: epoch seconds, when it was written plus
the retention (``SKINFLINT_RESULTS_RETENTION_DAYS``, default 7 days). A POST past its ``expires_at``
reads as unknown even before DynamoDB deletes it.

**Push** (an app whose spec says ``"results": "push"``; docs/dataplane.md, "Results: pull or push"):
the workers send the same records to the app's results queue instead (:class:`PushSink`: one message
per batch and POST, :func:`push_bodies`), nothing is written per batch, and the control loop's
sweeper sends a ``due`` message per minute of POSTs past their deadline (:func:`due_bodies`). A
consumer decodes a message with :func:`decode_pushed` and assembles frames with
:class:`PushedFrames` (``skinflint results APP`` does both). The message, JSON:

- ``{"v": 1, "kind": "records", "app", "post", "recorded_at", "frames": {"<index>": [accepted_at,
  deadline]}, "tasks": "<base64 of the record item's compressed tasks>"}``: the request id of a
  frame is the post id and its index (core/ids.py); the tasks are what a record item holds (each
  terminal task with its weight ``w``, each ancestor its lineage carried, ``r`` the request id);
- ``{"v": 1, "kind": "due", "app", "posts": {"<post id>": {"<index>": [accepted_at, deadline]}}}``:
  every frame of these POSTs is past its deadline and the sweep's grace; one that the consumer has
  not seen finished (its terminal weights summing to 1) is lost: :class:`PushedFrames` reports it
  dropped, reason ``stranded``, as the sweeper records it for a pull app.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Literal

from core.adapters._aws import AWS_ERRORS
from core.adapters._ddb import from_item, to_item
from core.errors import ResultStoreError
from core.ids import DUE_BUCKET_S, due_bucket, due_minute, post_of
from core.record_codec import pack_docs, unpack_docs
from core.schema import ResultOut, TaskOut
from core.settings import DEFAULT_RESULTS_RETENTION_DAYS

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from core.adapters.queues import TaskQueues

__all__ = [
    "DUE_BUCKET_S",
    "DUE_SHARDS",
    "EXPIRES_AT",
    "PUSH_VERSION",
    "STRANDED",
    "FrameRecord",
    "FrameState",
    "PushSink",
    "PushedFrames",
    "PushedMessage",
    "PushedTask",
    "ResultStore",
    "TaskRecord",
    "decode_pushed",
    "due_bodies",
    "due_bucket",
    "due_key",
    "expires_at",
    "frame_states",
    "post_key",
    "push_bodies",
    "split_weight",
]

_PART_PREFIX = "part#"
#: the results table's TTL attribute (cdk/constants.py RESULTS_TTL_ATTRIBUTE): epoch seconds
EXPIRES_AT = "expires_at"
_BATCH_WRITE = 25  # items per BatchWriteItem


#: The deadline index (read by the stranded-frame sweeper, control/sweeper.py) is the POST items
#: themselves: ``pk = due#<due minute>#<shard>``, ``sk = <POST id>``. A minute's POSTs are read back
#: with one Query per shard, so finding the frames whose deadline passed costs reads in proportion to
#: those POSTs, never a Scan.
DUE_SHARDS = 16  # partition keys per minute: spreads the POST writes (1,000 writes/s per partition key)
_DUE_PREFIX = "due#"


def due_key(bucket: int, shard: int) -> str:
    return f"{_DUE_PREFIX}{bucket}#{shard}"


def _shard(key: str) -> int:
    return zlib.crc32(key.encode()) % DUE_SHARDS


def post_key(post_id: str) -> dict[str, Any]:
    """The key of a POST's item: its due minute's partition (from the id) and the id."""
    return {"pk": {"S": due_key(due_minute(post_id), _shard(post_id))}, "sk": {"S": post_id}}


def expires_at(written_at: float, retention_s: float) -> int:
    """The ``expires_at`` of an item written at ``written_at`` (whole seconds, rounded up)."""
    return int(-(-(written_at + retention_s) // 1))


def split_weight(weight: str, parts: int) -> str:
    """The weight each of ``parts`` children of a task of ``weight`` carries (exact)."""
    if parts < 1:
        raise ValueError(f"a weight splits into 1 or more parts, not {parts}")
    return str(Fraction(weight) / parts)


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
    app: str = ""
    accepted_at: float | None = None  # the frame's (the outcome metrics' latency counts from it)
    deadline: float | None = None  # the frame's
    weight: str = "1"  # the share of its frame the task carries (TaskMessage.weight)
    lineage: tuple[TaskOut, ...] = ()  # what its ancestors produced (TaskMessage.lineage)
    recheck: bool = False  # possibly recorded before (a redelivery): the store checks first

    @property
    def key(self) -> str:
        return f"{self.request_id}/{self.task_id}"

    def task_out(self, recorded_at: float | None = None) -> TaskOut:
        """The task as a reader sees it (and as its children's lineage carries it)."""
        return TaskOut(
            task_id=self.task_id,
            module=self.module,
            status=self.status,
            hardware=self.hardware,
            emulated=self.emulated,
            enqueued_at=self.enqueued_at,
            started_at=self.started_at,
            finished_at=self.finished_at,
            recorded_at=recorded_at,
            received_at=self.received_at,
            device_at=self.device_at,
            batch_size=self.batch_size,
            output=json.loads(self.output_json) if self.output_json else None,
            output_s3_key=self.output_s3_key,
            reason=self.reason,
        )


@dataclass
class FrameState:
    """One frame as its POST's partition records it."""

    request_id: str
    app: str
    accepted_at: float
    deadline: float
    roots: tuple[str, ...]
    tasks: dict[str, TaskOut] = field(default_factory=dict)  # every task recorded or carried, by id
    weights: dict[str, Fraction] = field(default_factory=dict)  # terminal task id -> its weight
    finished_at: float | None = None  # the latest write of a terminal task

    @property
    def weight(self) -> Fraction:
        """The share of the frame its terminal tasks account for (1: finished)."""
        return sum(self.weights.values(), Fraction(0))

    @property
    def missing(self) -> Fraction:
        return max(Fraction(0), 1 - self.weight)

    @property
    def status(self) -> str:
        if self.weight < 1:
            return "queued"
        dropped = any(self.tasks[tid].status == "dropped" for tid in self.weights if tid in self.tasks)
        return "dropped" if dropped else "done"

    def result(self) -> ResultOut:
        status = self.status
        finished = self.finished_at if status != "queued" else None
        return ResultOut(
            request_id=self.request_id,
            app=self.app,
            status=status,
            accepted_at=self.accepted_at,
            deadline=self.deadline,
            finished_at=finished,
            latency_s=(finished - self.accepted_at) if finished is not None else None,
            tasks=sorted(self.tasks.values(), key=lambda task: (task.started_at, task.task_id)),
        )


class ResultStore:
    """``retention_s``: how long after it is written an item stays (its ``expires_at``); every writer of
    one table should use the same figure (``DataPlaneConfig.results_retention_s``)."""

    #: record items (POSTs) one ``record_tasks`` call writes in one request (``BatchWriteItem``'s
    #: limit); the workers' record linger fills a call up to it (workers/recording.py)
    items_per_call = _BATCH_WRITE

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
        """One item per POST (its frames: index, accept time, deadline, roots) in its due minute's
        partition, in as few ``BatchWriteItem`` calls as fit (one for a POST: one item). Raises
        ValueError when a post id's due minute is earlier than its frames' latest deadline (the
        sweeper would sweep them before they are due) or a POST's frames name several apps."""
        expiry = expires_at(time.time(), self.retention_s)
        posts: dict[str, list[FrameRecord]] = {}
        for frame in frames:
            posts.setdefault(post_of(frame.request_id), []).append(frame)
        items: list[dict[str, Any]] = []
        for post, of_post in posts.items():
            deadline = max(frame.deadline for frame in of_post)
            apps = {frame.app for frame in of_post}
            if len(apps) != 1:
                raise ValueError(f"the frames of POST {post} name {len(apps)} apps")
            if due_minute(post) < due_bucket(deadline):
                raise ValueError(f"POST {post} is due in minute {due_minute(post)}, its frames later")
            frames_doc = {
                frame.request_id[len(post) :]: [frame.accepted_at, frame.deadline, list(frame.roots)]
                for frame in of_post
            }
            doc = {
                "app": of_post[0].app,
                "deadline": deadline,
                "n": len(of_post),
                "frames": json.dumps(frames_doc, separators=(",", ":")),
                EXPIRES_AT: expiry,
            }
            items.append(post_key(post) | to_item(doc))
        self._write(items, f"{len(frames)} frame record(s)")

    # -- workers -----------------------------------------------------------------------------------
    def record_tasks(self, records: list[TaskRecord]) -> tuple[list[TaskRecord], list[TaskRecord]]:
        """Write terminal tasks: one record item per POST among ``records`` (a batch's). Returns
        (written, repeated): a record marked ``recheck`` (a redelivery, or a child of one) whose task
        its POST's partition already holds is a repeat, not written again. The others are written
        without a read: a redelivery the worker could not tell (a crash after the write, before the
        delete) is written twice, and readers count each task once."""
        fresh: list[TaskRecord] = []
        repeats: list[TaskRecord] = []
        known: dict[str, set[tuple[str, str]]] = {}
        for rec in records:
            if rec.recheck:
                post = post_of(rec.request_id)
                if post not in known:
                    known[post] = self.recorded(post)
                if (rec.request_id, rec.task_id) in known[post]:
                    repeats.append(rec)
                    continue
            fresh.append(rec)
        if not fresh:
            return fresh, repeats
        now = time.time()
        expiry = expires_at(now, self.retention_s)
        by_post: dict[str, list[TaskRecord]] = {}
        for rec in fresh:
            by_post.setdefault(post_of(rec.request_id), []).append(rec)
        items = [
            to_item(
                {
                    "pk": post,
                    "sk": f"{_PART_PREFIX}{uuid.uuid4().hex}",
                    "recorded_at": now,
                    EXPIRES_AT: expiry,
                }
            )
            | {"tasks": {"B": _pack(of_post)}}
            for post, of_post in by_post.items()
        ]
        self._write(items, f"{len(fresh)} task record(s)")
        return fresh, repeats

    def recorded(self, post_id: str) -> set[tuple[str, str]]:
        """(request id, task id) of every terminal task the POST's partition holds (a consistent
        Query: what a redelivery checks before it counts)."""
        parts = self._parts(post_id, consistent=True)
        out: set[tuple[str, str]] = set()
        for part in parts:
            for doc in _unpack(part):
                if "w" in doc:
                    out.add((str(doc["r"]), str(doc["task"]["task_id"])))
        return out

    # -- readers -----------------------------------------------------------------------------------
    def warm(self) -> None:
        """Open the client's connection to the table (a Query of a partition that never exists)."""
        self._parts("0" * 30, consistent=False)

    def get_request(self, request_id: str) -> ResultOut | None:
        """The frame and every task recorded for it or carried in a record's lineage; None when its
        POST is not recorded (or has expired) or the POST has no such frame. One eventually
        consistent Query of the POST's partition."""
        try:
            post = post_of(request_id)
        except ValueError:
            return None
        frames = self.post_frames(post)
        state = frames.get(request_id) if frames else None
        return state.result() if state is not None else None

    def get_post_requests(self, request_id: str) -> dict[str, ResultOut] | None:
        """Every frame of ``request_id``'s POST, as :meth:`get_request` reads it (the same one
        eventually consistent Query of the POST's partition); None when the POST is not recorded
        (or has expired) or has no such frame."""
        try:
            post = post_of(request_id)
        except ValueError:
            return None
        frames = self.post_frames(post)
        if not frames or request_id not in frames:
            return None
        return {rid: state.result() for rid, state in frames.items()}

    def post_frames(
        self, post_id: str, consistent: bool = False, head: Mapping[str, Any] | None = None
    ) -> dict[str, FrameState] | None:
        """Every frame of a POST, as its item and its records say; None when the POST item does not
        exist or has expired. Two reads: the POST item (``GetItem``; none when ``head``, the item as
        the deadline index listed it, is given) and its records (a Query)."""
        if head is None:
            head = self.post_head(post_id, consistent)
        states = frame_states(post_id, head) if head is not None else None
        if states is None:
            return None
        for part in self._parts(post_id, consistent):
            recorded_at = part.get("recorded_at")
            for doc in _unpack(part):
                state = states.get(str(doc.get("r")))
                if state is not None:
                    _add_doc(state, doc, recorded_at)
        return states

    def post_head(self, post_id: str, consistent: bool = False) -> dict[str, Any] | None:
        """The POST item (as a document), or None when there is none (or the id is malformed)."""
        try:
            key = post_key(post_id)
        except ValueError:
            return None
        try:
            out = self._ddb.get_item(TableName=self._table, Key=key, ConsistentRead=consistent)
        except AWS_ERRORS as exc:
            raise ResultStoreError(f"cannot read POST {post_id}: {exc}") from exc
        item = out.get("Item")
        return from_item(item) if item else None

    def _parts(self, post_id: str, consistent: bool) -> list[dict[str, Any]]:
        """The POST's record items (every page)."""
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": post_id}},
            "ConsistentRead": consistent,
        }
        parts: list[dict[str, Any]] = []
        while True:
            try:
                page = self._ddb.query(**kwargs)
            except AWS_ERRORS as exc:
                raise ResultStoreError(f"cannot read POST {post_id}: {exc}") from exc
            for raw in page.get("Items", []):
                blob = raw.get("tasks", {}).get("B")
                doc = from_item({k: v for k, v in raw.items() if k != "tasks"})
                if str(doc.get("sk", "")).startswith(_PART_PREFIX):
                    doc["tasks"] = blob
                    parts.append(doc)
            if not page.get("LastEvaluatedKey"):
                return parts
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _write(self, items: list[dict[str, Any]], what: str) -> None:
        """``BatchWriteItem`` of ``items`` (25 a call), unprocessed items retried with backoff."""
        try:
            for i in range(0, len(items), _BATCH_WRITE):
                left: dict[str, Any] = {
                    self._table: [{"PutRequest": {"Item": it}} for it in items[i : i + _BATCH_WRITE]]
                }
                for attempt in range(6):
                    out = self._ddb.batch_write_item(RequestItems=left)
                    left = out.get("UnprocessedItems") or {}
                    if not left:
                        break
                    time.sleep(0.02 * 2**attempt)
                if left:
                    raise ResultStoreError(f"DynamoDB left {what} unprocessed after 6 tries")
        except AWS_ERRORS as exc:
            raise ResultStoreError(f"cannot write {what}: {exc}") from exc


def frame_states(post_id: str, head: Mapping[str, Any]) -> dict[str, FrameState] | None:
    """The frames a POST item lists, none finished yet; None when the item has expired."""
    if _expired(head, time.time()):
        return None
    app = str(head.get("app", ""))
    states: dict[str, FrameState] = {}
    for suffix, (accepted_at, deadline, roots) in json.loads(head.get("frames") or "{}").items():
        rid = post_id + suffix
        states[rid] = FrameState(rid, app, float(accepted_at), float(deadline), tuple(roots))
    return states


def _pack(records: list[TaskRecord]) -> bytes:
    """A record item's tasks: each terminal task (with its weight ``w``) and each distinct ancestor
    its lineage carries, as JSON compressed against the records' dictionary (``r``: request id;
    core/record_codec.py)."""
    docs: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    for rec in records:
        for ancestor in rec.lineage:
            if (rec.request_id, ancestor.task_id) not in seen:
                seen.add((rec.request_id, ancestor.task_id))
                docs.append({"r": rec.request_id, "task": ancestor.model_dump(exclude_none=True)})
        seen.add((rec.request_id, rec.task_id))
        docs.append(
            {"r": rec.request_id, "w": rec.weight, "task": rec.task_out().model_dump(exclude_none=True)}
        )
    return pack_docs(docs)


def _add_doc(state: FrameState, doc: dict[str, Any], recorded_at: Any) -> None:
    """One task of a record (terminal, with its weight ``w``, or an ancestor) into its frame."""
    task = TaskOut.model_validate(doc["task"])
    if "w" in doc:
        if task.task_id in state.weights:
            return  # a redelivery's second record: counted once
        state.weights[task.task_id] = Fraction(str(doc["w"]))
        task = task.model_copy(update={"recorded_at": recorded_at})
        at = float(recorded_at) if isinstance(recorded_at, int | float) else task.finished_at
        state.finished_at = max(state.finished_at or at, at)
        state.tasks[task.task_id] = task
    else:
        state.tasks.setdefault(task.task_id, task)


def _unpack(part: dict[str, Any]) -> list[dict[str, Any]]:
    blob = part.get("tasks")
    if not blob:
        return []
    try:
        docs = unpack_docs(blob if isinstance(blob, bytes) else bytes(blob))
    except (zlib.error, ValueError) as exc:
        raise ResultStoreError(f"unreadable record {part.get('sk')}: {exc}") from exc
    return docs if isinstance(docs, list) else []


def _expired(item: Mapping[str, Any], now: float) -> bool:
    """Past its ``expires_at`` (DynamoDB's TTL deletes such items within days, reads still see them)."""
    at = item.get(EXPIRES_AT)
    return isinstance(at, int | float) and at <= now


# -- push: the results queue ------------------------------------------------------------------------
#: the results-queue messages' schema version
PUSH_VERSION = 1
#: the reason (and task id) of the share of a frame that never finished (control/sweeper.py's STRANDED)
STRANDED = "stranded"
_DUE_POSTS_PER_MESSAGE = 200  # about 70 KB of a due message at 10 frames per POST


def _frames_doc(frames: Iterable[tuple[str, float | None, float | None]], post: str) -> dict[str, list[Any]]:
    return {rid[len(post) :]: [accepted, deadline] for rid, accepted, deadline in frames}


def push_bodies(records: list[TaskRecord], now: float) -> list[str]:
    """The results-queue messages of a batch's terminal tasks: one per POST among ``records``, its
    tasks in the record item's compressed format (:func:`_pack`)."""
    by_post: dict[str, list[TaskRecord]] = {}
    for rec in records:
        by_post.setdefault(post_of(rec.request_id), []).append(rec)
    out = []
    for post, of_post in by_post.items():
        frames = {
            rec.request_id: (rec.request_id, rec.accepted_at or 0.0, rec.deadline or 0.0) for rec in of_post
        }
        doc = {
            "v": PUSH_VERSION,
            "kind": "records",
            "app": of_post[0].app,
            "post": post,
            "recorded_at": now,
            "frames": _frames_doc(frames.values(), post),
            "tasks": base64.b64encode(_pack(of_post)).decode(),
        }
        out.append(json.dumps(doc, separators=(",", ":")))
    return out


def due_bodies(app: str, posts: Mapping[str, Mapping[str, FrameState]]) -> list[str]:
    """The sweeper's ``due`` messages for a push app: the frames of ``posts`` (post id -> its frames)
    are past their deadline and the sweep's grace, up to 200 POSTs a message."""
    ids = sorted(posts)
    out = []
    for first in range(0, len(ids), _DUE_POSTS_PER_MESSAGE):
        chunk = {
            post: _frames_doc(
                ((rid, state.accepted_at, state.deadline) for rid, state in sorted(posts[post].items())), post
            )
            for post in ids[first : first + _DUE_POSTS_PER_MESSAGE]
        }
        doc = {"v": PUSH_VERSION, "kind": "due", "app": app, "posts": chunk}
        out.append(json.dumps(doc, separators=(",", ":")))
    return out


@dataclass(frozen=True)
class PushedTask:
    """A task a results-queue message carries: terminal (``weight``: its share of the frame) or an
    ancestor its lineage carried (``weight`` None)."""

    request_id: str
    task: TaskOut
    weight: Fraction | None


@dataclass(frozen=True)
class PushedMessage:
    """A decoded results-queue message (:func:`decode_pushed`)."""

    kind: Literal["records", "due"]
    app: str
    frames: dict[str, tuple[float, float]]  # request id -> (accepted_at, deadline)
    tasks: list[PushedTask] = field(default_factory=list)  # "records" only
    recorded_at: float | None = None  # "records": when the worker sent it


def _frames_of(post: str, doc: Any) -> dict[str, tuple[float, float]]:
    if not isinstance(doc, dict):
        raise ValueError("frames must be an object")
    return {post + str(index): (float(times[0]), float(times[1])) for index, times in doc.items()}


def decode_pushed(body: str) -> PushedMessage:
    """A results-queue message body -> :class:`PushedMessage`. Raises :class:`ResultStoreError` (one
    line) for a body that is not a results message of a version this code reads."""
    try:
        doc = json.loads(body)
        if not isinstance(doc, dict) or doc.get("v") != PUSH_VERSION:
            raise ValueError(f"not a results message of version {PUSH_VERSION}")
        app = str(doc["app"])
        if doc.get("kind") == "due":
            frames: dict[str, tuple[float, float]] = {}
            for post, of_post in dict(doc["posts"]).items():
                frames.update(_frames_of(str(post), of_post))
            return PushedMessage("due", app, frames)
        if doc.get("kind") != "records":
            raise ValueError(f"unknown kind {doc.get('kind')!r}")
        post = str(doc["post"])
        docs = _unpack({"tasks": base64.b64decode(doc["tasks"], validate=True), "sk": post})
        tasks = [
            PushedTask(
                str(task["r"]),
                TaskOut.model_validate(task["task"]),
                Fraction(str(task["w"])) if "w" in task else None,
            )
            for task in docs
        ]
        recorded_at = float(doc["recorded_at"])
        return PushedMessage("records", app, _frames_of(post, doc["frames"]), tasks, recorded_at)
    except ResultStoreError:
        raise
    except (ValueError, KeyError, TypeError, IndexError, zlib.error) as exc:
        why = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise ResultStoreError(f"not a results message: {why}") from exc


class PushedFrames:
    """Frames assembled from results-queue messages, as a consumer receives them (in any order, a
    message possibly twice). :meth:`add` returns the frames a message finished: each once, when the
    weights of its distinct terminal tasks reach 1, as ``GET /v1/requests/{id}`` would have answered
    it; for a ``due`` message, every frame it lists that is not finished, reported ``dropped`` with a
    terminal task ``stranded`` carrying the missing share. ``remember`` bounds the finished frames
    kept to ignore repeats (a repeat of a frame forgotten since is not reported again unless it
    finishes a frame anew). :meth:`pending` lists the frames partly received."""

    def __init__(self, remember: int = 200_000):
        self._open: dict[str, FrameState] = {}
        self._done: OrderedDict[str, None] = OrderedDict()
        self._remember = remember

    def add(self, message: PushedMessage) -> list[ResultOut]:
        if message.kind == "due":
            return [
                self._settle(rid, times, message.app)
                for rid, times in sorted(message.frames.items())
                if rid not in self._done
            ]
        touched: dict[str, FrameState] = {}
        for pushed in message.tasks:
            if pushed.request_id in self._done:
                continue
            state = self._state(pushed.request_id, message.app, message.frames.get(pushed.request_id))
            doc: dict[str, Any] = {"task": pushed.task.model_dump()}
            if pushed.weight is not None:
                doc["w"] = str(pushed.weight)
            _add_doc(state, doc, message.recorded_at)
            touched[pushed.request_id] = state
        return [self._finish(rid) for rid, state in touched.items() if state.weight >= 1]

    def pending(self) -> list[ResultOut]:
        return [state.result() for state in self._open.values()]

    def _state(self, rid: str, app: str, times: tuple[float, float] | None) -> FrameState:
        state = self._open.get(rid)
        if state is None:
            accepted, deadline = times if times is not None else (0.0, 0.0)
            state = self._open[rid] = FrameState(rid, app, accepted, deadline, ())
        return state

    def _finish(self, rid: str) -> ResultOut:
        state = self._open.pop(rid)
        self._done[rid] = None
        while len(self._done) > self._remember:
            self._done.popitem(last=False)
        return state.result()

    def _settle(self, rid: str, times: tuple[float, float], app: str) -> ResultOut:
        state = self._state(rid, app, times)
        if state.accepted_at == 0.0:  # its records carried no times: the due message's
            state.accepted_at, state.deadline = times
        missing = state.missing
        if missing > 0:
            now = time.time()
            state.tasks[STRANDED] = TaskOut(
                task_id=STRANDED, module=STRANDED, status="dropped", hardware="none", emulated=False,
                enqueued_at=now, started_at=now, finished_at=now, batch_size=0, reason=STRANDED,
            )  # fmt: skip
            state.weights[STRANDED] = missing
            state.finished_at = now
        return self._finish(rid)


class PushSink:
    """A push app's results: :meth:`record_tasks` sends a batch's terminal-task records to the app's
    results queue, one message per POST among them (:func:`push_bodies`; ``SendMessageBatch``, ten
    a call), and writes nothing to the results table. A record marked ``recheck`` (a redelivery,
    or a child of one) cannot be checked against the table: it is sent again (the consumer counts a
    task id once, :class:`PushedFrames`) and returned as a repeat, so its outcome is not counted
    twice."""

    #: messages (POSTs) one ``record_tasks`` call sends in one request (``SendMessageBatch``'s limit)
    items_per_call = 10

    def __init__(self, queues: TaskQueues, queue_url: str, clock: Any = time.time):
        self.queues = queues
        self.queue_url = queue_url
        self._clock = clock

    def record_tasks(self, records: list[TaskRecord]) -> tuple[list[TaskRecord], list[TaskRecord]]:
        if not records:
            return [], []
        self.queues.send_bodies(self.queue_url, push_bodies(records, self._clock()))
        return [rec for rec in records if not rec.recheck], [rec for rec in records if rec.recheck]
