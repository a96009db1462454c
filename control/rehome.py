"""Moving the messages of a superseded queue that nothing consumes to the current version's queues.

A module whose plan changed in a version gets fresh queues; the old version's workers retire once
their queue is empty. A message can still reach an old queue after its consumer retired (a parent
finished under the old routing on an instance the new version gave no share of the app; a front
that routed just before the switch; a dead instance's in-flight messages that come back after the
visibility timeout). Nothing would ever receive it, and the garbage collector would keep the
version forever waiting for the queue to drain (issue #28: frames ``queued`` for good).

Each epoch the collector finds every queue of a version older than the current one that the
current version does not reference and that no live instance's heartbeat lists a share on
(:func:`consumed_queues`), and moves what is visible there: each task of a message (a message may
carry several, :mod:`core.wire`) is routed again with the
current version's schedule (same request, task, deadline, payload, crop, weight and lineage; its
``deployment_version``, slot and window are the current version's; ``enqueued_at`` is the move),
sent, and only then deleted from the old queue. Sending before deleting makes a move at least
once: a crash between the two sends it again, and the results table's conditional write absorbs
the duplicate, as it does for any redelivery. A message with a task whose module the current
version does not plan (its app or module was removed) is left where it is, all of it (moving its
other tasks would send them twice once it is moved or served): the stranded-frame sweeper
(:mod:`control.sweeper`) accounts for its frames once their deadline has passed.

Cost: one ReceiveMessage (short poll, up to 10) per 10 messages moved, one SendMessageBatch per
destination queue (the moved tasks packed again, :func:`core.wire.pack`) and one DeleteMessageBatch
per receive; at most ``max_moves`` messages an epoch (the rest the next epoch). The report counts
tasks. A queue with nothing stranded costs nothing beyond the depth read the
collector makes anyway."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.errors import DataPlaneError
from core.routing import Router
from core.schema import queue_key

if TYPE_CHECKING:
    from collections.abc import Iterable

    from core.adapters.plan_store import InstanceStatus, PlanStore
    from core.adapters.queues import TaskQueues
    from core.schema import Deployment, TaskMessage

__all__ = ["MoveReport", "consumed_queues", "move_stranded"]

log = logging.getLogger("skinflint.control.rehome")


@dataclass
class MoveReport:
    moved: int = 0  # tasks moved
    unmovable: int = 0  # tasks left in place (a task of their message has a module not planned now)
    queues: list[str] = field(default_factory=list)  # old queues something was moved from


def _share_queue(store: PlanStore, name: str, version: int, cache: dict[tuple[int, str], Any]) -> str | None:
    """The queue of a heartbeat's share ``app.module.gG.mM`` in ``version`` (None: unknown)."""
    head, _, machine = name.rpartition(".m")
    head, _, group = head.rpartition(".g")
    app, _, module = head.partition(".")
    if not (app and module and group.isdigit() and machine.isdigit()):
        return None
    key = (version, app)
    if key not in cache:
        cache[key] = store.deployment(version, app)
    dep: Deployment | None = cache[key]
    if dep is None:
        return None
    return dep.queues.get(module, {}).get(queue_key(int(group), int(machine)))


def consumed_queues(
    store: PlanStore, live: Iterable[InstanceStatus], all_queues: dict[int, set[str]]
) -> set[str]:
    """Queues a live instance polls: each share its heartbeat lists, on its version's queue. A
    heartbeat without share details (an older agent) counts every queue of each version it serves."""
    cache: dict[tuple[int, str], Any] = {}
    out: set[str] = set()
    for status in live:
        shares = (status.model_extra or {}).get("shares")
        if not isinstance(shares, dict):
            for version in status.served_versions():
                out |= all_queues.get(version, set())
            continue
        for name, info in shares.items():
            share_version = info.get("version") if isinstance(info, dict) else None
            url = (
                _share_queue(store, str(name), share_version, cache)
                if isinstance(share_version, int)
                else None
            )
            if url is None:  # not understood: count the whole version as consumed
                for served in status.served_versions():
                    out |= all_queues.get(served, set())
            else:
                out.add(url)
    return out


def move_stranded(
    tasks: TaskQueues,
    urls: Iterable[str],
    current: dict[str, Deployment],
    now: float,
    max_moves: int = 100,
) -> MoveReport:
    """Move up to ``max_moves`` visible messages of ``urls`` to the current version's queues
    (``current``: app -> its deployment in the current version); the report counts their tasks."""
    report = MoveReport()
    routers: dict[str, Router] = {}
    handled = 0  # messages moved or left
    for url in urls:
        while handled < max_moves:
            try:
                left = max_moves - handled
                got = tasks.receive(url, wait_s=0, max_messages=min(10, left))
            except DataPlaneError as exc:
                log.warning("cannot receive from stranded queue %s: %s", url, exc)
                break
            if not got:
                break
            handled += len(got)
            sends: dict[str, list[TaskMessage]] = {}
            done: list[str] = []
            n_moved = 0
            for received in got:
                try:
                    msgs = received.messages()
                except ValueError:
                    continue  # left for the DLQ (maxReceiveCount), as a worker leaves it
                if not all(_movable(current, msg) for msg in msgs):
                    report.unmovable += len(msgs)
                    continue
                for msg in msgs:
                    route, moved = _rerouted(msg, current[msg.app], routers, now)
                    sends.setdefault(route, []).append(moved)
                done.append(received.receipt)
                n_moved += len(msgs)
            try:
                tasks.send_many(sends)
                if done:
                    tasks.delete(url, done)  # only once sent: at least once, never lost
            except DataPlaneError as exc:
                log.warning("moving %d request(s) from %s failed (retried next epoch): %s", n_moved, url, exc)
                break
            report.moved += n_moved
            if done and url not in report.queues:
                report.queues.append(url)
            if len(got) > len(done):  # unmovable or unparseable ones stay: do not loop on them
                break
    if report.moved:
        log.warning("moved %d stranded request(s) from %s", report.moved, report.queues)
    return report


def _movable(current: dict[str, Deployment], msg: TaskMessage) -> bool:
    """Whether the current version plans ``msg``'s module (and has its queues)."""
    dep = current.get(msg.app)
    return dep is not None and msg.module in dep.plan.modules and msg.module in dep.queues


def _rerouted(
    msg: TaskMessage, dep: Deployment, routers: dict[str, Router], now: float
) -> tuple[str, TaskMessage]:
    """``msg`` routed again with the current version's schedule: its queue and its new message."""
    router = routers.get(msg.app)
    if router is None:
        router = routers[msg.app] = Router.for_deployment(dep)
    route = router.route(msg.module, now)
    moved = router.task(
        route,
        request_id=msg.request_id,
        task_id=msg.task_id,
        accepted_at=msg.accepted_at,
        enqueued_at=now,
        deadline=msg.deadline,
        payload=msg.payload,
        region=msg.region,
        weight=msg.weight,
        lineage=msg.lineage,
        recheck=msg.recheck,
    )
    return route.queue_url, moved
