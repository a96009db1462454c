"""The backlog correction between epochs (docs/control.md, "Backlog between epochs").

The fleet is sized by the plan; the task queues are the check that the plan holds. Between two
epochs :func:`check_backlog` reads the depth of every machine's queue of the version in force
(``GetQueueAttributes``: visible + in flight, real time; CloudWatch's ``ApproximateAgeOfOldestMessage``
comes in one-minute periods, too late to correct within an epoch) and asks
:func:`planner.scaling.backlog_boost` which modules hold more than their plan allows. For those apps
it records the frame rate that gives the late modules the capacity to catch up and runs an early
epoch (at least ``min_gap_s`` after the previous one), which re-plans them at that rate and resizes
the groups through the same hysteresis. It is a correction, not a second planner: the boost applies
to that one epoch only, and the next scheduled epoch plans from observed rates again (the hysteresis
keeps the instances for its memory). Extra instances without a plan would only idle (an instance
serves the slots of the plan, nothing else), so the correction goes through a plan.

While a new version waits for its slots to be served, a check first runs its activation check
(:mod:`control.activation`): the check is what activates a served version between epochs
(the local stack's timer every few seconds, the ``skinflint.backlog`` rule every minute on AWS).
Nothing is read while a version activates (its queues are not in use yet).

:meth:`control.epoch.Controller.check_backlog` runs a check: it reads the queues
(:func:`read_backlog`), decides the corrections from the readings (:func:`late_modules`,
:func:`record_corrections`: no I/O), saves the control state, emits the metrics
(:func:`emit_backlog`) and runs the early epoch.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.schema import queue_key
from core.settings import undeleted_bound
from planner.models import topological_order
from planner.scaling import QueueBacklog, backlog_boost

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from control.config import ControlConfig
    from control.state import ControlState
    from core.adapters.metrics import Metrics
    from core.adapters.plan_store import Claim, InstanceStatus, PlanStore
    from core.schema import Deployment

__all__ = [
    "BacklogSummary",
    "emit_backlog",
    "frames_for",
    "late_modules",
    "read_backlog",
    "record_corrections",
]


@dataclass
class BacklogSummary:
    """What a backlog check did; ``as_json`` is the handler's answer."""

    status: str  # quiet | corrected | deferred | activating | superseded | no plan | failed
    version: int | None = None
    queues: int = 0  # queues read
    late: list[str] = field(default_factory=list)  # "app.module g/m: depth > allowed"
    unserved: list[str] = field(default_factory=list)  # late queues no live instance serves
    cooling: list[str] = field(default_factory=list)  # late apps corrected less than cooldown_s ago
    boosts: dict[str, float] = field(default_factory=dict)  # app -> frames/s asked of the next epoch
    epoch: dict[str, Any] = field(default_factory=dict)  # the early epoch's summary
    activation: dict[str, Any] = field(default_factory=dict)  # the new version's activation check
    error: str | None = None
    timings_ms: dict[str, float] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            key: value
            for key, value in self.__dict__.items()
            if value not in (None, {}, []) or key == "status"
        }


def _live(claim: Claim | None, beats: Mapping[str, InstanceStatus], now: float, stale_s: float) -> bool:
    """A slot is served when it is claimed and its holder heartbeats (a holder that has not sent its
    first heartbeat yet counts while its claim is fresh)."""
    if claim is None:
        return False
    beat = beats.get(claim.instance_id)
    if beat is None:
        return claim.at >= now - stale_s
    return beat.at >= now - stale_s and beat.state not in ("draining", "gone")


def _tasks_per_message(beat: InstanceStatus | None, share: str) -> float:
    """The mean tasks per message a heartbeat reports for its share ``app.module.gG.mM`` (what its
    worker decoded from its queue, ``workers.agent``), else 1."""
    shares = (beat.model_extra or {}).get("shares") if beat is not None else None
    info = shares.get(share) if isinstance(shares, dict) else None
    value = info.get("tasks_per_message") if isinstance(info, dict) else None
    if isinstance(value, int | float) and not isinstance(value, bool) and 1 <= value < math.inf:
        return float(value)
    return 1.0


def read_backlog(
    store: PlanStore,
    depth: Callable[[str], int],
    version: int,
    now: float,
    *,
    stale_s: float,
    skip: set[str] | None = None,
    workers: int = 1,
    delete_linger_s: float = 0.0,
) -> tuple[list[QueueBacklog], list[str]]:
    """Every planned machine's queue of ``version`` (apps in ``skip`` left out), with the machine's
    planned rate, batch and its module's budget, and whether a live instance holds its slot. Returns
    the readings and the queues that could not be read (gone, or an SQS error). ``delete_linger_s``:
    the workers' delete linger; the processed messages it keeps in flight are allowed for
    (:func:`core.settings.undeleted_bound`). ``depth`` reads a queue in SQS messages as this
    process knows them (``TaskQueues.depth`` of a TaskQueues that sent and received nothing: 1 task
    a message); a message may carry several tasks (core/wire.py), so each reading is converted to
    tasks with the mean tasks per message the worker of that queue reports in its heartbeat
    (:func:`_tasks_per_message`; 1 when none does)."""
    deps = store.deployments(version)
    fleet = store.fleet(version)
    # eventually consistent (as the heartbeats' scan): a reading a moment old changes a check of
    # minutes-old backlog by nothing
    claims = store.claims(version, fleet, consistent=False) if fleet is not None else {}
    beats = store.instances()
    slot_of = (
        {
            (share.app, share.module, share.group, share.machine): str(instance.slot)
            for instance in fleet.instances
            for share in instance.shares
        }
        if fleet is not None
        else {}
    )
    todo: list[tuple[str, str, int, int, float, int, float, str]] = []
    for app, dep in sorted(deps.items()):
        if skip and app in skip:
            continue
        for module, mp in dep.plan.modules.items():
            for group_index, group in enumerate(mp.groups):
                for machine in range(group.machines):
                    url = dep.queues.get(module, {}).get(queue_key(group_index, machine))
                    if url is not None:
                        todo.append(
                            (
                                app,
                                module,
                                group_index,
                                machine,
                                group.rate_per_machine,
                                group.batch,
                                mp.latency_budget_s,
                                url,
                            )
                        )

    def read(url: str) -> int | None:
        try:
            return int(depth(url))
        except Exception:  # noqa: BLE001 - one unreadable queue must not stop the check of the others
            return None

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        depths = list(pool.map(read, [entry[-1] for entry in todo]))
    out: list[QueueBacklog] = []
    failed: list[str] = []
    for (app, module, group_index, machine, rate, batch, budget, url), queue_depth in zip(
        todo, depths, strict=True
    ):
        if queue_depth is None:
            failed.append(url)
            continue
        slot = slot_of.get((app, module, group_index, machine))
        claim = claims.get(slot) if slot is not None else None
        served = _live(claim, beats, now, stale_s)
        beat = beats.get(claim.instance_id) if claim is not None else None
        per_message = _tasks_per_message(beat, f"{app}.{module}.g{group_index}.m{machine}")
        tasks = max(queue_depth, math.floor(queue_depth * per_message + 0.5))
        label = queue_key(group_index, machine)
        pending = undeleted_bound(rate, delete_linger_s, per_message)
        out.append(
            QueueBacklog(app, module, tasks, rate, batch, budget, served, queue=label, undeleted=pending)
        )
    return out, failed


def frames_for(dep: Deployment, module_rates: Mapping[str, float]) -> float:
    """The app's frame rate at which every module of ``module_rates`` gets at least that rate
    (module rate = frame rate x the product of the fan-outs on the way from the roots)."""
    per_frame = {module: (1.0 if module in dep.roots else 0.0) for module in dep.plan.modules}
    for module in topological_order(list(per_frame), [(source, target) for source, target, _ in dep.edges]):
        for src, dst, fan in dep.edges:
            if src == module:
                per_frame[dst] += per_frame[module] * fan
    return max(
        (rate / per_frame[module] for module, rate in module_rates.items() if per_frame.get(module, 0) > 0),
        default=0.0,
    )


def late_modules(
    out: BacklogSummary, readings: list[QueueBacklog], cooling: set[str], config: ControlConfig
) -> dict[str, dict[str, float]]:
    """Record the late queues in ``out`` (served or not, and the late apps cooling down) and return
    the module rates the apps not cooling down need to catch up (:func:`planner.scaling.backlog_boost`)."""
    out.queues = len(readings)
    for reading in readings:
        if reading.late:
            line = f"{reading.app}.{reading.module} {reading.queue}: {reading.depth} > {reading.allowed:.0f}"
            (out.late if reading.served else out.unserved).append(line)
    out.cooling = sorted(
        {reading.app for reading in readings if reading.late and reading.served and reading.app in cooling}
    )
    return backlog_boost(
        [reading for reading in readings if reading.app not in cooling],
        horizon_s=config.epoch_s,
        min_boost=config.backlog_min_boost,
        max_boost=config.backlog_max_boost,
    )


def record_corrections(
    out: BacklogSummary,
    state: ControlState,
    need: Mapping[str, Mapping[str, float]],
    deployments: Mapping[str, Deployment],
    unreadable: list[str],
    now: float,
    min_gap_s: float,
) -> None:
    """The corrections of ``need`` into ``state`` (each app's frame rate for the next epoch) and the
    check's status into ``out``: ``corrected`` when the early epoch may run now (``min_gap_s`` after
    the previous one), ``deferred`` when it waits for the next check or epoch."""
    for app, modules in need.items():
        frames = frames_for(deployments[app], modules)
        state.boosts[app] = max(state.boosts.get(app, 0.0), frames)
        state.corrected_at[app] = now
        out.boosts[app] = round(frames, 4)
    if unreadable:
        out.error = f"{len(unreadable)} queue(s) not read, e.g. {unreadable[0]}"
    if state.boosts:
        gap = now - state.last_epoch_at if state.last_epoch_at is not None else None
        out.status = "corrected" if gap is None or gap >= min_gap_s else "deferred"
    state.last_check = {"at": now, "status": out.status, "late": len(out.late), "boosts": out.boosts}


def emit_backlog(metrics: Metrics, out: BacklogSummary) -> None:
    metrics.put("LateQueues", len(out.late))
    metrics.put("UnservedLateQueues", len(out.unserved))
    metrics.put("BacklogCorrections", len(out.boosts))
    for app in out.boosts:
        metrics.put("BacklogCorrections", 1, App=app)
