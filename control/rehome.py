"""Moving the messages of a superseded queue that nothing consumes to the current version's queues.

A module whose plan changed in a version gets fresh queues; the old version's workers retire once
their queue is empty. A message can still reach an old queue after its consumer retired (a parent
finished under the old routing on an instance the new version gave no share of the app; a front
that routed just before the switch; a dead instance's in-flight messages that come back after the
visibility timeout). Nothing would ever receive it, and the garbage collector would keep the
version forever waiting for the queue to drain (issue #28: frames ``queued`` for good).

Each epoch the collector finds every queue of a version older than the current one that the
current version does not reference and that no live instance's heartbeat lists a share on
(:func:`consumed_queues`), and moves what is visible there: each request is routed again with the
current version's schedule (same request, task, deadline, payload, crop, weight and lineage; its
``deployment_version``, slot and window are the current version's; ``enqueued_at`` is the move),
sent, and only then deleted from the old queue. Sending before deleting makes a move at least
once: a crash between the two sends it again, and the results table's conditional write absorbs
the duplicate, as it does for any redelivery. A request whose module the current version does not
plan (its app or module was removed) is left where it is: the stranded-frame sweeper
(:mod:`control.sweeper`) accounts for its frame once its deadline has passed.

Cost: one ReceiveMessage (short poll, up to 10) per 10 messages moved, one SendMessageBatch per
destination queue and one DeleteMessageBatch per receive; at most ``max_moves`` messages an epoch
(the rest the next epoch). A queue with nothing stranded costs nothing beyond the depth read the
collector makes anyway."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.errors import DataPlaneError
from core.routing import Router
from core.schema import TaskMessage, queue_key

if TYPE_CHECKING:
    from collections.abc import Iterable

    from core.adapters.plan_store import InstanceStatus, PlanStore
    from core.adapters.queues import TaskQueues
    from core.schema import Deployment

__all__ = ["MoveReport", "consumed_queues", "move_stranded"]

log = logging.getLogger("skinflint.control.rehome")


@dataclass
class MoveReport:
    moved: int = 0
    unmovable: int = 0  # requests of a module the current version does not plan (left in place)
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
    (``current``: app -> its deployment in the current version)."""
    report = MoveReport()
    routers: dict[str, Router] = {}
    for url in urls:
        while report.moved + report.unmovable < max_moves:
            try:
                left = max_moves - report.moved - report.unmovable
                got = tasks.receive(url, wait_s=0, max_messages=min(10, left))
            except DataPlaneError as exc:
                log.warning("cannot receive from stranded queue %s: %s", url, exc)
                break
            if not got:
                break
            sends: dict[str, list[TaskMessage]] = {}
            done: list[str] = []
            for received in got:
                try:
                    msg = TaskMessage.parse(received.body)
                except ValueError:
                    continue  # left for the DLQ (maxReceiveCount), as a worker leaves it
                dep = current.get(msg.app)
                if dep is None or msg.module not in dep.plan.modules or msg.module not in dep.queues:
                    report.unmovable += 1
                    continue
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
                sends.setdefault(route.queue_url, []).append(moved)
                done.append(received.receipt)
            try:
                tasks.send_many(sends)
                if done:
                    tasks.delete(url, done)  # only once sent: at least once, never lost
            except DataPlaneError as exc:
                log.warning(
                    "moving %d request(s) from %s failed (retried next epoch): %s", len(done), url, exc
                )
                break
            report.moved += len(done)
            if done and url not in report.queues:
                report.queues.append(url)
            if len(got) > len(done):  # unmovable or unparseable ones stay: do not loop on them
                break
    if report.moved:
        log.warning("moved %d stranded request(s) from %s", report.moved, report.queues)
    return report
