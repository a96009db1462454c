"""The SQS body codec: several tasks in one message (docs/dataplane.md, "Wire format").

SQS bills a send, a receive and a delete per call (each 64 KiB of a send's or a receive's
payload as one call), so the data plane sends one message per POST and queue at the front and one
per parent batch and child queue at the worker, not one per task. Two forms of body:

- **v1**, one task: the :class:`~core.schema.TaskMessage` JSON itself (what a body holding a single
  task still is, so a reader of v1 sees no change);
- **v2**, several tasks::

      {"v": 2, "common": {...}, "payloads": [...], "lineage": [...], "tasks": [{...}, ...]}

  Each task is its TaskMessage's fields less those in ``common`` (the fields whose value every
  task of the body shares: app, module, version, deadline, ...); its ``payload`` is an index into
  ``payloads`` and its ``lineage`` a list of indices into ``lineage``, so the frame and the
  ancestors' results that the children of one parent share ride once per body.

:func:`pack` splits a queue's tasks into as few bodies as fit ``limit_bytes`` (SQS's 256 KiB);
:func:`decode` accepts both forms and raises ``ValueError`` on anything else (a poison body);
:func:`raw_tasks` reads a body's task dicts best-effort, for the poison path's records.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Final

from pydantic_core import to_json

from core.schema import TaskMessage

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["SQS_MESSAGE_LIMIT_BYTES", "WIRE_VERSION", "decode", "encode", "pack", "raw_tasks"]

WIRE_VERSION: Final = 2
#: bytes of one SQS message body: the lowest limit a queue may have (256 KiB; newer queues allow 1 MiB)
SQS_MESSAGE_LIMIT_BYTES: Final = 256 * 1024
#: bytes a v2 body adds around its tasks (keys, brackets) and each task adds to it (indices, commas):
#: generous upper bounds, so a body packed by :func:`pack`'s estimate is never over its limit
_BODY_OVERHEAD = 96
_TASK_OVERHEAD = 16


def _dumps(doc: Any) -> str:
    """Compact JSON, UTF-8 as is (pydantic's serializer: several times faster than ``json.dumps``
    on a body of base64 frames)."""
    return to_json(doc).decode()


def _size(text: str) -> int:
    return len(text.encode())


def encode(messages: Sequence[TaskMessage]) -> str:
    """One body holding ``messages`` (v1 for a single one, else v2)."""
    if not messages:
        raise ValueError("a body holds at least one task")
    if len(messages) == 1:
        return messages[0].model_dump_json(exclude_none=True)
    payloads: list[Any] = []
    lineage: list[Any] = []
    payload_index: dict[str, int] = {}
    lineage_index: dict[str, int] = {}
    tasks: list[dict[str, Any]] = []
    for message in messages:
        doc = message.model_dump(mode="json", exclude_none=True)
        doc["payload"] = _index(doc["payload"], payloads, payload_index)
        doc["lineage"] = [_index(entry, lineage, lineage_index) for entry in doc.get("lineage", [])]
        tasks.append(doc)
    common: dict[str, Any] = {}
    for key, value in tasks[0].items():
        if key != "v" and all(key in task and task[key] == value for task in tasks[1:]):
            common[key] = value
    for task in tasks:
        for key in common:
            del task[key]
        task.pop("v", None)
    return _dumps(
        {"v": WIRE_VERSION, "common": common, "payloads": payloads, "lineage": lineage, "tasks": tasks}
    )


def _index(value: Any, table: list[Any], index: dict[str, int]) -> int:
    key = _dumps(value)
    at = index.get(key)
    if at is None:
        at = index[key] = len(table)
        table.append(value)
    return at


def pack(
    messages: Sequence[TaskMessage], limit_bytes: int = SQS_MESSAGE_LIMIT_BYTES, max_tasks: int = 0
) -> list[tuple[str, int]]:
    """``messages`` (one queue's) as (body, tasks in it) in order, in as few bodies as fit
    ``limit_bytes`` each and hold at most ``max_tasks`` tasks (0: no cap): greedy, in order, on an
    upper bound of each task's share of a body (its own fields, plus its payload and lineage
    entries the body does not hold yet). A single task larger than the limit goes alone (SQS
    judges it against the queue's own limit)."""
    out: list[tuple[str, int]] = []
    group: list[TaskMessage] = []
    seen: set[str] = set()
    size = _BODY_OVERHEAD
    for message in messages:
        cost, keys = _cost(message, seen)
        if group and (size + cost > limit_bytes or 0 < max_tasks <= len(group)):
            out.extend(_bodies(group, limit_bytes))
            group, seen, size = [], set(), _BODY_OVERHEAD
            cost, keys = _cost(message, seen)
        group.append(message)
        seen |= keys
        size += cost
    if group:
        out.extend(_bodies(group, limit_bytes))
    return out


def _cost(message: TaskMessage, seen: set[str]) -> tuple[int, set[str]]:
    """Upper bound of the bytes ``message`` adds to a body already holding the payloads and lineage
    entries ``seen`` (their JSON), and the JSON of those it brings."""
    own = message.model_dump(mode="json", exclude_none=True, exclude={"payload", "lineage"})
    cost = _size(_dumps(own)) + _TASK_OVERHEAD + 8 * (len(message.lineage) + 1)
    keys: set[str] = set()
    for part in [message.payload.model_dump(mode="json", exclude_none=True)] + [
        entry.model_dump(mode="json", exclude_none=True) for entry in message.lineage
    ]:
        key = _dumps(part)
        if key not in seen and key not in keys:
            keys.add(key)
            cost += _size(key) + 1
    return cost, keys


def _bodies(group: list[TaskMessage], limit_bytes: int) -> list[tuple[str, int]]:
    """``group`` encoded; halved until each half fits (a safety net under :func:`pack`'s bound)."""
    body = encode(group)
    if len(group) == 1 or _size(body) <= limit_bytes:
        return [(body, len(group))]
    half = len(group) // 2
    return _bodies(group[:half], limit_bytes) + _bodies(group[half:], limit_bytes)


def decode(body: str) -> list[TaskMessage]:
    """The tasks of a body (v1 or v2). Raises ``ValueError`` (pydantic's ``ValidationError`` is
    one) on a body that is not one of the two forms, or any task of it that is not valid."""
    try:
        doc = json.loads(body)
    except (TypeError, RecursionError) as exc:
        raise ValueError(f"not JSON: {exc}") from exc
    if isinstance(doc, dict) and doc.get("v") == WIRE_VERSION:
        return [TaskMessage.model_validate(task) for task in _expand(doc)]
    return [TaskMessage.model_validate_json(body)]


def _expand(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """A v2 body's tasks as TaskMessage dicts (``v`` 1, payload and lineage resolved)."""
    common, payloads, lineage, tasks = (doc.get(k) for k in ("common", "payloads", "lineage", "tasks"))
    if not isinstance(common, dict) or not isinstance(payloads, list) or not isinstance(lineage, list):
        raise ValueError("a v2 body needs an object 'common' and lists 'payloads' and 'lineage'")
    if not isinstance(tasks, list) or not tasks:
        raise ValueError("a v2 body needs a non-empty list 'tasks'")
    out: list[dict[str, Any]] = []
    for task in tasks:
        if not isinstance(task, dict):
            raise ValueError("a v2 task is an object")
        full = {**common, **task, "v": 1}
        full["payload"] = _at(payloads, full.get("payload"), "payload")
        refs = full.get("lineage", [])
        if not isinstance(refs, list):
            raise ValueError("a v2 task's lineage is a list of indices")
        full["lineage"] = [_at(lineage, ref, "lineage") for ref in refs]
        out.append(full)
    return out


def _at(table: list[Any], ref: Any, what: str) -> Any:
    if not isinstance(ref, int) or isinstance(ref, bool) or not 0 <= ref < len(table):
        raise ValueError(f"a v2 task's {what} index {ref!r} is not in its table of {len(table)}")
    return table[ref]


def raw_tasks(body: str) -> list[dict[str, Any]]:
    """Best effort, for the poison path: a body's task dicts as far as they can be read (a v2
    body's expanded tasks, or the v1 object), else ``[]``."""
    try:
        doc = json.loads(body)
    except (ValueError, TypeError, RecursionError):
        return []
    if not isinstance(doc, dict):
        return []
    if doc.get("v") != WIRE_VERSION:
        return [doc]
    common, tasks = doc.get("common"), doc.get("tasks")
    if not isinstance(common, dict):
        common = {}
    if not isinstance(tasks, list):
        return []
    return [{**common, **task} for task in tasks if isinstance(task, dict)]
