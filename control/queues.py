"""Task queues: one standard SQS queue per planned machine, each with a redrive policy to a DLQ.
Every queue created here (task queues and the local DLQ) is encrypted at rest with SQS-managed
keys (SSE-SQS), like the stack's own queues; it is asked for explicitly rather than left to the
account's default.

Per machine (not per config group) because a time-window batch belongs to one machine
(docs/dataplane.md). A module whose plan changed in a version gets fresh queues whose names carry
the version, so messages dispatched on the old schedule (old batch ids, old windows) and on the new
one never share a queue; an unchanged module keeps its queues. Old queues are deleted by the
garbage collector once they are empty (:mod:`control.gc`)."""

from __future__ import annotations

import hashlib
import json
import math
from typing import TYPE_CHECKING, Any

from core.adapters.queue_admin import QueueAdmin
from core.errors import ConfigError, QueueError
from core.schema import queue_key

if TYPE_CHECKING:
    from planner.models import ModulePlan

__all__ = [
    "DEFAULT_PREFIX",
    "create_module_queues",
    "delete_queue",
    "SSE_ATTRIBUTES",
    "as_queue_admin",
    "ensure_app_dlq",
    "ensure_results_queue",
    "results_queue_name",
    "queue_name",
    "visibility_timeout_for",
]

DEFAULT_PREFIX = "skinflint-"  # cdk/constants.py QUEUE_NAME_PREFIX (the IAM policies' scope)
_MAX_NAME = 80  # SQS queue name limit (characters)
# Server-side encryption with SQS-managed keys (no KMS key to grant the writers and readers).
SSE_ATTRIBUTES = {"SqsManagedSseEnabled": "true"}


def queue_name(
    app: str, module: str, group: int, machine: int, version: int | None = None, prefix: str = DEFAULT_PREFIX
) -> str:
    """``skinflint-<app>-<module>[-v<version>]-g<group>-m<machine>``; names over SQS's 80 characters
    keep their tail and replace the middle by a digest (still unique, still under the prefix)."""
    tail = (f"-v{version}" if version is not None else "") + f"-g{group}-m{machine}"
    name = f"{prefix}{app}-{module}{tail}"
    if len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(f"{app}/{module}".encode()).hexdigest()[:12]
    room = _MAX_NAME - len(prefix) - len(tail) - len(digest) - 1
    return f"{prefix}{f'{app}-{module}'[:room]}-{digest}{tail}"


def as_queue_admin(queues: QueueAdmin | Any) -> QueueAdmin:
    """``queues`` itself, or the adapter on it when it is an SQS client (the tests and the local
    stack's helpers pass their client)."""
    return queues if isinstance(queues, QueueAdmin) else QueueAdmin(queues)


def ensure_app_dlq(queues: QueueAdmin | Any, app: str, prefix: str = DEFAULT_PREFIX) -> tuple[str, str]:
    """The app's dead-letter queue (created if missing): (url, arn). The deployed stack passes its
    shared DLQ's ARN instead (``SKINFLINT_TASKS_DLQ_ARN``)."""
    admin = as_queue_admin(queues)
    try:
        url = admin.create(f"{prefix}{app}-dlq", SSE_ATTRIBUTES)
        arn = admin.arn(url)
    except QueueError as exc:
        raise ConfigError(f"cannot create the dead-letter queue of {app}: {exc}") from exc
    return url, arn


#: s a push app's results stay in its results queue unread: the results table's retention (7 days,
#: cdk/constants.py RESULTS_RETENTION_DAYS)
RESULTS_RETENTION_S = 7 * 86_400
RESULTS_VISIBILITY_S = 30  # s a consumer holds a received results message before another may take it


def results_queue_name(app: str, prefix: str = DEFAULT_PREFIX) -> str:
    """``skinflint-<app>-results``: a push app's results queue (the garbage collector's version
    pattern never matches it; app names are at most 24 characters)."""
    return f"{prefix}{app}-results"


def ensure_results_queue(
    queues: QueueAdmin | Any,
    app: str,
    *,
    dlq_arn: str,
    prefix: str = DEFAULT_PREFIX,
    max_receive_count: int = 5,
) -> str:
    """A push app's results queue (created if missing; CreateQueue is idempotent for equal
    attributes): SSE-SQS, a redrive policy to the app's DLQ (a message a consumer fails to handle
    ``max_receive_count`` times), kept 7 days. Returns its URL."""
    redrive = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(max_receive_count)})
    try:
        return as_queue_admin(queues).create(
            results_queue_name(app, prefix),
            {
                "VisibilityTimeout": str(RESULTS_VISIBILITY_S),
                "RedrivePolicy": redrive,
                "MessageRetentionPeriod": str(RESULTS_RETENTION_S),
                **SSE_ATTRIBUTES,
            },
            tags={"skinflint:app": app, "skinflint:results": "push"},
        )
    except QueueError as exc:
        raise ConfigError(f"cannot create the results queue of {app}: {exc}") from exc


def visibility_timeout_for(
    slo_s: float, module_plan: ModulePlan, linger_s: float, floor_s: int, cap_s: int
) -> int:
    """A module's queues' visibility timeout (s): how long a received message stays invisible.

    A worker holds a message at most until its frame's deadline (``slo_s`` after acceptance: a
    request that can no longer meet it is dropped early, and a batch starts only if it can finish
    by then), plus the delete linger; twice the longest planned batch and 5 s of margin cover a
    batch that overruns its profile. Longer is waste: when a worker dies, what it held is invisible
    until the timeout ends, and the front's admission counts those messages as backlog meanwhile
    (issue #28: 30 s of ``queue_backlog`` refusals after a CPU agent crash whose replacement
    answered within 6 s). A failed batch is also retried after it. Between ``floor_s`` and
    ``cap_s`` (``ControlConfig.min_visibility_s`` and ``visibility_timeout_s``)."""
    longest = max((group.duration_s for group in module_plan.groups), default=0.0)
    hold = slo_s + 2.0 * longest + linger_s + 5.0
    return int(min(cap_s, max(floor_s, math.ceil(hold))))


def create_module_queues(
    queues: QueueAdmin | Any,
    app: str,
    module: str,
    module_plan: ModulePlan,
    *,
    dlq_arn: str,
    version: int | None = None,
    prefix: str = DEFAULT_PREFIX,
    visibility_timeout_s: int = 30,
    max_receive_count: int = 5,
    retention_s: int = 3600,
) -> dict[str, str]:
    """One queue per machine of the module's groups; returns ``queue_key(group, machine) -> url``.
    CreateQueue is idempotent for equal attributes, so a retried epoch reuses what it created."""
    redrive = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(max_receive_count)})
    admin = as_queue_admin(queues)
    out: dict[str, str] = {}
    try:
        for group_index, group in enumerate(module_plan.groups):
            for machine in range(group.machines):
                out[queue_key(group_index, machine)] = admin.create(
                    queue_name(app, module, group_index, machine, version, prefix),
                    {
                        "VisibilityTimeout": str(visibility_timeout_s),
                        "RedrivePolicy": redrive,
                        "MessageRetentionPeriod": str(retention_s),
                        **SSE_ATTRIBUTES,
                    },
                    tags={"skinflint:app": app, "skinflint:module": module},
                )
    except QueueError as exc:
        raise ConfigError(f"cannot create the queues of {app}/{module}: {exc}") from exc
    return out


def delete_queue(queues: QueueAdmin | Any, url: str) -> bool:
    """Delete a queue; False when it was already gone (:meth:`QueueAdmin.delete`)."""
    return as_queue_admin(queues).delete(url)
