"""Garbage collection of plan versions, their queues and dead instances' claims.

A version is kept while it is current, while it is the previous one and the current one has not
activated yet (plus ``keep_previous_s``), while a live instance reports serving it (any of the
versions its heartbeat lists: during a version change an instance still drains the shares of the
superseded version after it adopted the new one), and while it is
newer than the current one (a writer may be publishing it; older than ``orphan_s`` it is an
orphan). Any other version is deleted once the queues only it references are empty (deleted
first); a queue still holding messages keeps its version for the next epoch. A queue of an older
version that the current one does not reference and that no live instance consumes (no heartbeat
lists a share on it) has its messages moved to the current version's queues
(:mod:`control.rehome`): nothing is left waiting for a consumer that will never come. A claim of an
instance whose heartbeat is older than ``stale_s`` (or that never sent one) is released so a
replacement can take the slot.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from control.queues import as_queue_admin
from control.rehome import consumed_queues, move_stranded
from core.adapters.queues import queue_gone
from core.errors import QueueError

if TYPE_CHECKING:
    from collections.abc import Callable

    from core.adapters.plan_store import InstanceStatus, Manifest, PlanStore
    from core.adapters.queue_admin import QueueAdmin
    from core.adapters.queues import TaskQueues

__all__ = ["GcConfig", "GcReport", "collect", "release_dead_claims", "sweep_orphan_queues"]


@dataclass(frozen=True)
class GcConfig:
    stale_s: float = 180.0  # s: an instance silent this long is gone
    keep_previous_s: float = 60.0  # s after activation the previous version is kept at least
    orphan_s: float = 600.0  # s: a version newer than current and older than this is an orphan
    queue_prefix: str = "skinflint-"
    max_moves: int = 100  # stranded messages moved to the current version per pass (the rest: next)


@dataclass
class GcReport:
    deleted_versions: list[int] = field(default_factory=list)
    deleted_queues: list[str] = field(default_factory=list)
    waiting_queues: list[str] = field(default_factory=list)  # not empty yet: version kept
    released: list[str] = field(default_factory=list)  # "slot:instance" claims released
    kept: list[int] = field(default_factory=list)
    moved: int = 0  # stranded messages moved to the current version's queues
    unmovable: int = 0  # stranded messages of a module the current version does not plan
    stranded_queues: list[str] = field(default_factory=list)  # queues something was moved from

    def as_json(self) -> dict[str, Any]:
        return {
            "moved": self.moved,
            "unmovable": self.unmovable,
            "stranded_queues": len(self.stranded_queues),
            "deleted_versions": self.deleted_versions,
            "deleted_queues": len(self.deleted_queues),
            "waiting_queues": len(self.waiting_queues),
            "released_claims": self.released,
            "kept_versions": self.kept,
        }


def _live(store: PlanStore, now: float, cfg: GcConfig) -> list[InstanceStatus]:
    return [
        status
        for status in store.instances().values()
        if status.at >= now - cfg.stale_s and status.state != "gone"
    ]


def _kept(
    store: PlanStore,
    cur: Manifest,
    versions: list[int],
    now: float,
    cfg: GcConfig,
    live: list[InstanceStatus],
) -> set[int]:
    keep = {cur.version}
    if cur.previous is not None and now < cur.activate_at + cfg.keep_previous_s:
        keep.add(cur.previous)
    keep |= {version for status in live for version in status.served_versions()}
    for version in versions:
        if version > cur.version:
            manifest = store.manifest(version)
            if manifest is None or manifest.created_at >= now - cfg.orphan_s:
                keep.add(version)
    return keep


def _depth(depth: Callable[[str], int], url: str) -> int | None:
    """Messages in the queue; None when the queue no longer exists."""
    try:
        return depth(url)
    except QueueError as exc:
        if queue_gone(exc):
            return None
        raise


def _queues(store: PlanStore, version: int) -> set[str]:
    return {
        url
        for dep in store.deployments(version).values()
        for qs in dep.queues.values()
        for url in qs.values()
    }


def _move_stranded(
    store: PlanStore,
    tasks: TaskQueues,
    depth: Callable[[str], int],
    cur: Manifest,
    versions: list[int],
    live: list[InstanceStatus],
    now: float,
    cfg: GcConfig,
    report: GcReport,
) -> None:
    """Move what waits in the queues of older versions that nothing consumes (:mod:`control.rehome`)."""
    by_version = {version: _queues(store, version) for version in versions}
    current = set().union(*(urls for version, urls in by_version.items() if version >= cur.version))
    consumed = consumed_queues(store, live, by_version)
    stranded = sorted(
        {url for version, urls in by_version.items() if version < cur.version for url in urls}
        - current
        - consumed
    )
    stranded = [url for url in stranded if (_depth(depth, url) or 0) > 0]
    if not stranded:
        return
    moved = move_stranded(tasks, stranded, store.deployments(cur.version), now, cfg.max_moves)
    report.moved, report.unmovable, report.stranded_queues = moved.moved, moved.unmovable, moved.queues


def release_dead_claims(store: PlanStore, version: int, now: float, cfg: GcConfig) -> list[str]:
    beats = store.instances()
    out: list[str] = []
    for slot, claim in store.claims(version).items():
        beat = beats.get(claim.instance_id)
        last = beat.at if beat is not None else claim.at
        if last < now - cfg.stale_s or (beat is not None and beat.state == "gone"):
            if slot in store.release(version, claim.instance_id):
                out.append(f"{slot}:{claim.instance_id}")
    return out


def collect(
    store: PlanStore,
    queues: QueueAdmin | Any,
    depth: Callable[[str], int],
    now: float,
    cfg: GcConfig | None = None,
    tasks: TaskQueues | None = None,
) -> GcReport:
    """One GC pass (the planner runs it at the end of every epoch). ``queues``: the adapter (or an
    SQS client, :func:`control.queues.as_queue_admin`); ``tasks``: the data plane's queues, to
    move stranded messages with (None: nothing is moved)."""
    queues = as_queue_admin(queues)
    cfg = cfg or GcConfig()
    report = GcReport()
    cur = store.current()
    if cur is None:
        return report
    report.released = release_dead_claims(store, cur.version, now, cfg)
    versions = store.versions()
    live = _live(store, now, cfg)
    keep = _kept(store, cur, versions, now, cfg, live)
    report.kept = sorted(keep)
    if tasks is not None and now >= cur.activate_at:
        _move_stranded(store, tasks, depth, cur, versions, live, now, cfg, report)
    live_queues: set[str] = set()
    for version in keep:
        live_queues |= _queues(store, version)
    for version in sorted(set(versions) - keep):
        waiting = False
        for url in sorted(_queues(store, version) - live_queues):
            queue_depth = _depth(depth, url)
            if queue_depth is None:
                continue  # deleted by an earlier pass
            if queue_depth > 0:
                report.waiting_queues.append(url)
                waiting = True
            elif queues.delete(url):
                report.deleted_queues.append(url)
        if not waiting:
            store.delete_version(version)
            report.deleted_versions.append(version)
        else:
            live_queues |= _queues(store, version)  # a later version's deletion must not take them
    report.deleted_queues += sweep_orphan_queues(
        queues, depth, set(versions) - set(report.deleted_versions), cur.version, cfg, keep=live_queues
    )
    return report


def sweep_orphan_queues(
    queues: QueueAdmin | Any,
    depth: Callable[[str], int],
    stored: set[int],
    current: int,
    cfg: GcConfig,
    keep: set[str] | None = None,
) -> list[str]:
    """Queues named for a version at most ``current`` that is no longer stored (a writer that lost
    a version conflict, or crashed, after creating them). Empty ones are deleted, except those in
    ``keep`` (queues a stored version still references: an unchanged module keeps the queues of
    the version that created them, whose name they carry)."""
    kept_names = {kept_url.rsplit("/", 1)[-1] for kept_url in keep or ()}
    queues = as_queue_admin(queues)
    pattern = re.compile(rf"^{re.escape(cfg.queue_prefix)}.*-v(\d+)-g\d+-m\d+$")
    out: list[str] = []
    try:
        urls = queues.list(cfg.queue_prefix)
    except QueueError:
        return out  # best effort (ListQueues may not be granted, SQS unreachable); the next epoch tries again
    for url in urls:
        name = url.rsplit("/", 1)[-1]
        match = pattern.match(name)
        if match is None or name in kept_names:
            continue
        version = int(match.group(1))
        if version <= current and version not in stored and _depth(depth, url) == 0 and queues.delete(url):
            out.append(url)
    return out
