"""Poison messages: what a worker records when a message cannot be served, so the frame's owner
reads the reason (``GET /v1/requests/{id}``: status ``dropped``, the task's ``reason``) while the
message itself goes on to the DLQ after ``maxReceiveCount`` receives, for an operator.

Two kinds (mechanism only; the worker decides when):
- a body that does not decode (:func:`core.wire.decode`: a v1 :class:`~core.schema.TaskMessage`,
  or a v2 body of several): its tasks' ids are read best-effort from the JSON
  (:func:`core.wire.raw_tasks`), and each task that names a request and a task is recorded as
  dropped with ``reason = "poison: <what is wrong>"`` (a v2 body is decoded whole or not at all:
  every task of it that names its ids is recorded); a body without ids is only logged and counted
  (there is no frame to answer);
- a request whose batch failed on every one of its receives (a frame the model cannot run, a
  payload that is gone): on its last receive it is recorded as dropped with
  ``reason = "failed N times: <error>"``.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from core.adapters.results import TaskRecord
from core.ids import REQUEST_ID
from core.wire import raw_tasks

__all__ = ["describe_error", "poison_record", "poison_records"]

_MAX_REASON = 300  # characters kept of an error message


def describe_error(exc: BaseException) -> str:
    """One line: the exception's type and the first line of its message."""
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    out = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return out[:_MAX_REASON]


def poison_records(
    body: str, why: str, module: str, hardware: str, emulated: bool, now: float
) -> list[TaskRecord]:
    """The ``dropped`` task records of an undecodable message: one per task of it that still names
    its request and task (and this worker's module)."""
    out = [_record(doc, why, module, hardware, emulated, now) for doc in raw_tasks(body)]
    return [rec for rec in out if rec is not None]


def poison_record(
    body: str, why: str, module: str, hardware: str, emulated: bool, now: float
) -> TaskRecord | None:
    """The ``dropped`` record of the first task of an undecodable message that names its ids, else
    None (:func:`poison_records` gives all of them)."""
    out = poison_records(body, why, module, hardware, emulated, now)
    return out[0] if out else None


def _record(
    doc: dict[str, Any], why: str, module: str, hardware: str, emulated: bool, now: float
) -> TaskRecord | None:
    request_id, task_id = doc.get("request_id"), doc.get("task_id")
    if not (isinstance(request_id, str) and isinstance(task_id, str) and REQUEST_ID.fullmatch(request_id)):
        return None
    if not task_id or doc.get("module", module) != module:
        return None
    enqueued = doc.get("enqueued_at")
    accepted, deadline = doc.get("accepted_at"), doc.get("deadline")
    return TaskRecord(
        request_id=request_id[:64],
        task_id=task_id[:512],
        module=module,
        status="dropped",
        hardware=hardware,
        emulated=emulated,
        enqueued_at=float(enqueued) if isinstance(enqueued, int | float) else now,
        started_at=now,
        finished_at=now,
        batch_size=0,
        reason=f"poison: {why}"[:_MAX_REASON],
        app=str(doc.get("app", ""))[:64],
        accepted_at=float(accepted) if isinstance(accepted, int | float) else None,
        deadline=float(deadline) if isinstance(deadline, int | float) else None,
        weight=_weight(doc.get("weight")),
        recheck=True,  # its receives are many by the time it is recorded
    )


def _weight(raw: Any) -> str:
    """The share the message names, else all of the frame (a dropped task drops its frame anyway)."""
    try:
        weight = Fraction(str(raw)) if raw is not None else Fraction(1)
    except (ValueError, ZeroDivisionError):
        return "1"
    return str(weight) if 0 < weight <= 1 else "1"
