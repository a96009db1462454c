"""One planning epoch (docs/control.md has the steps and the failure modes).

:class:`Controller` holds the injected adapters and runs :meth:`Controller.run_epoch`:

1. refuse to run less than ``min_gap_s`` after the previous epoch (Nexus's 10 s), and claim the
   epoch with a conditional write on the control state;
2. hardware: every worker group minus those whose launches failed recently (insufficient capacity);
3. registered apps and their observed frame rates over the last epoch (CloudWatch); the rate to plan
   for is ``forecast_rate`` (level: trend when significant, else mean; + headroom, quantised) of the
   history, never below the app's
   floor, and the registered rate until the app has been observed for a whole window;
4. ``plan_fleet`` with the dispatch-aware solve (``planner.robust.solve_dispatchable``: the plan's
   worst cases are what the dispatch realises; an app whose problem is unchanged keeps its plan; a
   new app whose problem is the one its registration solved takes that plan (its *seed*) instead of
   solving again; an app that cannot be planned keeps the plan in force); packing onto whole instances;
5. when something changed: fresh queues for changed modules, a new version published with a
   conditional flip of the pointer; it activates once every slot is served by an instance that
   loaded it, at the earliest ``activate_lead_s`` and at the latest ``activate_max_lead_s`` after
   publishing (:mod:`control.activation`); otherwise a no-op epoch;
6. desired capacity per group from the version in force (never below what the version still being
   served needs), through hysteresis;
7. the admission reserve of every app with a ``shed_target`` whose rate moved past the review band
   chosen again for the next epoch (:mod:`control.reserves`), within its own time budget;
8. garbage collection of old versions, drained queues and dead instances' claims.

Every epoch first checks the activation of a version still waiting for its slots.

Any failure in steps 2-5 leaves the version in force untouched and emits ``PlanningFailures`` = 1
(0 on success, so an alarm has data to watch); scaling and GC still run against the last good
version.
"""

from __future__ import annotations

import json
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from control.deployments import AppChange, app_change, build_deployment, changed_apps
from control.errors import ControlError
from control.state import ControlState, EpochTaken
from core.errors import MetricsError
from core.settings import DEFAULT_DELETE_LINGER_S, delete_linger_from_env

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from control.activation import ActivationCheck
    from control.backlog import BacklogSummary
    from control.registry import AppRecord, AppRegistry, RegistrationSpec
    from control.state import StateStore
    from core.adapters.autoscaling import FleetGroups, GroupState
    from core.adapters.metrics import Metrics
    from core.adapters.plan_store import Manifest, PlanStore
    from core.adapters.rates import ObservedRates, RateWindow, ServiceOverruns
    from core.schema import Deployment
    from planner.dispatch import DispatchSchedule
    from planner.models import HardwareSpec, Plan, ProblemSpec
    from planner.packing import FleetPlan

__all__ = ["ControlConfig", "Controller", "EpochSummary"]

log = logging.getLogger("skinflint.control")


@dataclass(frozen=True)
class ControlConfig:
    """Settings of the control loop (``from_env``: the planner Lambda's environment)."""

    asg_names: dict[str, str] = field(default_factory=dict)  # hardware -> Auto Scaling group name
    epoch_s: float = 60.0  # s between scheduled epochs
    min_gap_s: float = 10.0  # s: never re-plan sooner than this after the previous epoch (Nexus)
    headroom: float = 0.1  # planned rate = forecast * (1 + headroom)
    trend_epochs: int = 5  # observations the trend line is fitted to
    history_len: int = 20  # observations kept per app
    activate_lead_s: float = 15.0  # s: the earliest a version activates after publishing (preload)
    activate_max_lead_s: float = 180.0  # s: the latest, served or not (<= activate_lead_s: no gating)
    activate_notice_s: float = 3.0  # s between moving an activation earlier and the new time
    activate_wait_s: float = 0.0  # s an epoch that published waits for the slots to be served
    activate_poll_s: float = 2.0  # s between readiness reads while it waits
    heartbeat_fresh_s: float = 30.0  # s: a heartbeat older than this does not show a slot served
    hop_overhead_s: float = 0.05  # s added to every profile duration (SQS send and receive, grace)
    calibrate: bool = False  # opt-in: learn service-time corrections from ServiceOverrunMs (calibration.py)
    rate_period_s: int = 60  # s: CloudWatch period the observed rate is summed over
    # s: the rate window ends this long before now, so every writer (front, workers) has flushed the
    # values of its last period (they are stamped with the time they happened: adapters/metrics.py)
    rate_lag_s: float = 5.0
    unavailable_s: float = 600.0  # s a hardware type is left out after a failed launch
    stale_s: float = 180.0  # s: an instance whose heartbeat is older is gone
    emulated_hardware: tuple[str, ...] = ()  # local stack: GPU classes emulated from profiles
    dlq_arn: str | None = None  # shared DLQ of the task queues (None: one DLQ per app)
    queue_prefix: str = "skinflint-"
    visibility_timeout_s: int = 30
    queue_workers: int = 1  # apps whose queues are created in parallel (moto's SQS is not thread-safe)
    policy: str = "skinflint"
    child_headroom: float = 0.0  # extra planned rate of child modules (planner.robust, docs/dispatch.md)
    # hardware -> the most machines of it one app's plan may use (the local stack: this host's real
    # CPU runs at most one); a module over it is planned without that class (problems.solve_within_caps)
    machine_caps: dict[str, int] = field(default_factory=dict)
    backlog_cooldown_s: float = 60.0  # s: an app's backlog is corrected at most once this often
    backlog_min_boost: float = 0.1  # a correction plans a late module for at least 1.1 x its capacity
    backlog_max_boost: float = 1.0  # ... and at most 2 x
    # the workers' delete linger (core.settings; the same SKINFLINT_DELETE_LINGER_S): the backlog
    # check allows for the processed messages it keeps in flight
    delete_linger_s: float = DEFAULT_DELETE_LINGER_S
    # CPU s an epoch's solving may take before apps whose plan still serves a changed problem (new
    # prices, a looser SLO) keep it and are solved in a later epoch (planner.fleet.plan_fleet's
    # solve_budget_s; None: all solved at once); apps without a serving plan are solved now, in full
    # while the budget allows, the rest with the solve's quick plan (carried, solved in full later)
    solve_budget_s: float | None = 0.4
    # wall s an epoch may spend, after publishing, choosing again the admission reserve of apps with a
    # shed_target whose rate moved past the review band (control/reserves.py; 0: never)
    reserve_review_s: float = 0.5

    def __post_init__(self) -> None:
        if not 0 <= self.child_headroom < float("inf"):
            raise ValueError(f"child_headroom must be a finite fraction >= 0, got {self.child_headroom}")
        if not 0 <= self.rate_lag_s < float("inf"):
            raise ValueError(f"rate_lag_s must be a finite number of seconds >= 0, got {self.rate_lag_s}")
        if self.activate_lead_s < 0 or self.activate_max_lead_s < 0:
            raise ValueError("activation leads must be >= 0")
        if self.activate_notice_s < 0 or self.activate_wait_s < 0 or self.activate_poll_s <= 0:
            raise ValueError("activate_notice_s and activate_wait_s must be >= 0, activate_poll_s > 0")
        if not 0 <= self.backlog_min_boost <= self.backlog_max_boost < float("inf"):
            raise ValueError(
                f"backlog boosts must satisfy 0 <= min <= max < inf, got {self.backlog_min_boost}, "
                f"{self.backlog_max_boost}"
            )
        if self.solve_budget_s is not None and not 0 <= self.solve_budget_s < float("inf"):
            raise ValueError(f"solve_budget_s must be finite seconds >= 0 or None, got {self.solve_budget_s}")
        if not 0 <= self.reserve_review_s < float("inf"):
            raise ValueError(f"reserve_review_s must be finite seconds >= 0, got {self.reserve_review_s}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ControlConfig:
        e = os.environ if env is None else env
        d = cls()
        try:
            return cls(
                asg_names=dict(json.loads(e.get("SKINFLINT_ASG_NAMES") or "{}")),
                epoch_s=float(e.get("SKINFLINT_PLANNER_EPOCH_S", d.epoch_s)),
                min_gap_s=float(e.get("SKINFLINT_PLANNER_MIN_GAP_S", d.min_gap_s)),
                headroom=float(e.get("SKINFLINT_PLANNER_HEADROOM", d.headroom)),
                activate_lead_s=float(e.get("SKINFLINT_ACTIVATE_LEAD_S", d.activate_lead_s)),
                activate_max_lead_s=float(e.get("SKINFLINT_ACTIVATE_MAX_LEAD_S", d.activate_max_lead_s)),
                activate_notice_s=float(e.get("SKINFLINT_ACTIVATE_NOTICE_S", d.activate_notice_s)),
                activate_wait_s=float(e.get("SKINFLINT_ACTIVATE_WAIT_S", d.activate_wait_s)),
                heartbeat_fresh_s=float(e.get("SKINFLINT_HEARTBEAT_FRESH_S", d.heartbeat_fresh_s)),
                hop_overhead_s=float(e.get("SKINFLINT_HOP_OVERHEAD_S", d.hop_overhead_s)),
                calibrate=(e.get("SKINFLINT_CALIBRATE", "0").strip().lower() in ("1", "true", "yes")),
                rate_period_s=int(e.get("SKINFLINT_RATE_PERIOD_S", d.rate_period_s)),
                rate_lag_s=float(e.get("SKINFLINT_RATE_LAG_S", d.rate_lag_s)),
                unavailable_s=float(e.get("SKINFLINT_UNAVAILABLE_S", d.unavailable_s)),
                stale_s=float(e.get("SKINFLINT_INSTANCE_STALE_S", d.stale_s)),
                emulated_hardware=tuple(
                    h for h in (e.get("SKINFLINT_EMULATED_HARDWARE") or "").split(",") if h
                ),
                dlq_arn=e.get("SKINFLINT_TASKS_DLQ_ARN") or None,
                queue_prefix=e.get("SKINFLINT_QUEUE_PREFIX", d.queue_prefix),
                queue_workers=max(1, int(e.get("SKINFLINT_QUEUE_WORKERS", d.queue_workers))),
                child_headroom=float(e.get("SKINFLINT_CHILD_HEADROOM", d.child_headroom)),
                machine_caps={
                    k: int(v) for k, v in json.loads(e.get("SKINFLINT_MACHINE_CAPS") or "{}").items()
                },
                backlog_cooldown_s=float(e.get("SKINFLINT_BACKLOG_COOLDOWN_S", d.backlog_cooldown_s)),
                backlog_max_boost=float(e.get("SKINFLINT_BACKLOG_MAX_BOOST", d.backlog_max_boost)),
                delete_linger_s=delete_linger_from_env(e),
                solve_budget_s=_budget_from_env(e.get("SKINFLINT_SOLVE_BUDGET_S"), d.solve_budget_s),
                reserve_review_s=float(e.get("SKINFLINT_RESERVE_REVIEW_S", d.reserve_review_s)),
            )
        except (ValueError, TypeError) as exc:
            raise ControlError(f"bad planner setting in the environment: {exc}") from exc


def _budget_from_env(value: str | None, default: float | None) -> float | None:
    """``SKINFLINT_SOLVE_BUDGET_S``: seconds, or ``none`` (no budget: every changed app solved at once)."""
    if value is None or not value.strip():
        return default
    if value.strip().lower() in ("none", "off", "unlimited"):
        return None
    return float(value)


@dataclass
class EpochSummary:
    """What an epoch did; ``as_json`` is the handler's return value."""

    status: str  # "published" | "unchanged" | "failed" | "skipped"
    epoch: int = 0
    reason: str = ""
    version: int | None = None
    previous: int | None = None
    activate_at: float | None = None
    changed: dict[str, list[str]] = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)
    failed_apps: dict[str, str] = field(default_factory=dict)
    rates: dict[str, dict[str, float]] = field(default_factory=dict)
    rate_window: list[float] = field(default_factory=list)  # [start, end) the observed rates cover
    counts: dict[str, int] = field(default_factory=dict)
    desired: dict[str, int] = field(default_factory=dict)
    scaled: dict[str, list[int]] = field(default_factory=dict)  # hardware -> [from, to]
    excluded_hardware: dict[str, str] = field(default_factory=dict)
    billed_per_hour: float = 0.0
    occupancy_per_hour: float = 0.0
    timings_ms: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    gc: dict[str, Any] = field(default_factory=dict)
    activation: dict[str, Any] = field(default_factory=dict)  # control.activation.ActivationCheck
    corrections: dict[str, dict[str, float]] = field(default_factory=dict)  # app -> "module@hw" -> s
    seeded: list[str] = field(default_factory=list)  # apps planned with their registration's plan
    # apps on a plan to solve again: made for an earlier problem, or the solve's quick plan
    carried: list[str] = field(default_factory=list)
    resolved: list[str] = field(default_factory=list)  # apps whose carried plan was replaced
    quick: list[str] = field(default_factory=list)  # apps given the solve's quick plan (also carried)
    # app -> the admission reserve chosen again for its shed_target at the rate planned (reserves.py)
    reserves: dict[str, dict[str, Any]] = field(default_factory=dict)
    # apps whose shed_target no reserve meets at the rate of their last review (until it is met again)
    unmet_shed_targets: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v not in (None, {}, []) or k == "status"}


@dataclass
class _Planned:
    """The outcome of planning (before anything is written)."""

    plans: dict[str, Plan]
    rates: dict[str, float]
    fleet: FleetPlan
    failed: dict[str, str]
    solve_ms: float
    pack_ms: float
    kept: set[str] = field(default_factory=set)  # apps that failed and keep the deployment in force


@dataclass
class Controller:
    config: ControlConfig
    plans: PlanStore
    registry: AppRegistry
    states: StateStore
    rates: ObservedRates
    groups: FleetGroups
    sqs: Any
    depth: Callable[[str], int]
    metrics: Metrics
    catalog: Mapping[str, HardwareSpec]
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    overruns: ServiceOverruns | None = None  # the workers' ServiceOverrunMs (None: no calibration)
    # what the epoch's reserve review reads: the registered apps and the hardware planned on
    _review: tuple[Mapping[str, tuple[AppRecord, RegistrationSpec]], list[str] | None] | None = field(
        default=None, init=False, repr=False
    )

    # -- the epoch ---------------------------------------------------------------------------------
    def run_epoch(self, reason: str = "schedule") -> EpochSummary:
        t0 = time.perf_counter()
        now = self.clock()
        state = self.states.load()
        if state.last_epoch_at is not None and now - state.last_epoch_at < self.config.min_gap_s:
            return EpochSummary(
                status="skipped",
                epoch=state.epoch,
                reason=f"{reason}: {now - state.last_epoch_at:.1f} s after the previous epoch "
                f"(minimum {self.config.min_gap_s:g} s)",
            )
        expected = state.epoch if state.epoch > 0 else None
        previous_at = state.last_epoch_at
        state.epoch += 1
        state.last_epoch_at = now
        state.asg_names = dict(self.config.asg_names)
        try:
            self.states.save(state, expected)
        except EpochTaken as exc:
            return EpochSummary(status="skipped", epoch=state.epoch, reason=f"{reason}: {exc}")
        summary = EpochSummary(status="unchanged", epoch=state.epoch, reason=reason)
        self._review = None
        current = self._plan(now, state, previous_at, summary)
        self._scale(state, current, summary)
        self._review_reserves(state, summary, now)
        if summary.status == "published" and self.config.activate_wait_s > 0:
            self._await_activation(summary)
        self._collect(now, summary)
        summary.timings_ms["total"] = round((time.perf_counter() - t0) * 1e3, 2)
        state.last = summary.as_json() | {"at": now}
        try:
            self.states.save(state, state.epoch)
        except ControlError as exc:
            summary.warnings.append(f"state not saved: {exc}")
        self._emit(summary)
        return summary

    def check_backlog(self, reason: str = "backlog check") -> BacklogSummary:
        """Between epochs: correct the apps whose task queues hold more than their plan allows with
        an early epoch at a higher rate (:mod:`control.backlog`)."""
        from control.backlog import BacklogSummary, check_backlog

        try:
            return check_backlog(self, reason)
        except Exception as exc:  # noqa: BLE001 - a failed check changes nothing; the epoch still runs
            log.exception("backlog check failed")
            return BacklogSummary(status="failed", error=f"{type(exc).__name__}: {exc}")

    def check_activation(self) -> ActivationCheck:
        """Move the current version's activation earlier once its slots are served, or record at
        its deadline which were not (:mod:`control.activation`)."""
        from control.activation import check_activation

        return check_activation(self)

    def _activation(self, current: Manifest | None, summary: EpochSummary) -> Manifest | None:
        """The activation check of a version still waiting; returns the pointer's manifest after it."""
        from control.activation import check_activation
        from core.errors import DataPlaneError

        if current is None or not current.gated:
            return current
        try:
            check = check_activation(self, current)
        except DataPlaneError as exc:  # reading claims or heartbeats failed: the next check retries
            summary.warnings.append(f"activation check: {exc}")
            return current
        summary.activation = check.as_json()
        return self.plans.current() if check.status in ("ready", "deadline", "conflict") else current

    def _await_activation(self, summary: EpochSummary) -> None:
        """After publishing: check the new version's slots every ``activate_poll_s`` for at most
        ``activate_wait_s`` (the Lambda, whose next check is a minute away), so a version the running
        instances serve activates ``activate_lead_s`` after publishing, as it would ungated."""
        from control.activation import check_activation
        from core.errors import DataPlaneError

        end = time.monotonic() + self.config.activate_wait_s
        while True:
            try:
                check = check_activation(self)
            except DataPlaneError as exc:
                summary.warnings.append(f"activation check: {exc}")
                return
            summary.activation = check.as_json()
            if check.version != summary.version:
                return  # another planner published meanwhile
            if check.status != "waiting" or time.monotonic() + self.config.activate_poll_s > end:
                break
            self.sleep(self.config.activate_poll_s)
        if check.activate_at is not None:
            summary.activate_at = check.activate_at

    def _plan(
        self, now: float, state: ControlState, previous_at: float | None, summary: EpochSummary
    ) -> Manifest | None:
        """Steps 2-5. Returns the manifest in force afterwards."""
        current = None
        try:
            current = self._activation(self.plans.current(), summary)
            summary.version = current.version if current else None
            return self._plan_and_publish(now, state, previous_at, current, summary)
        except Exception as exc:  # noqa: BLE001 - any failure must keep the last good version and alarm
            log.exception("planning failed; version %s stays in force", summary.version)
            summary.status = "failed"
            summary.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            if current is not None:
                summary.counts = dict(current.counts)
                summary.billed_per_hour = current.billed_per_hour
                summary.occupancy_per_hour = current.occupancy_per_hour
            return current

    def _plan_and_publish(
        self,
        now: float,
        state: ControlState,
        previous_at: float | None,
        current: Manifest | None,
        summary: EpochSummary,
    ) -> Manifest | None:
        from core.adapters.plan_store import VersionConflict

        cur_deps = self.plans.deployments(current.version) if current else {}
        cur_fleet = self.plans.fleet(current.version) if current else None
        from control.reserves import effective_specs

        registered = self.registry.load_all()
        apps = effective_specs(registered, state)  # with the reserves chosen again (reserves.py)
        requested = self.registry.replan_requested()
        available = self._available(now, state, previous_at, summary)
        self._review = (registered, available)
        planned = self._solve(
            now, state, previous_at, apps, available, cur_deps, cur_fleet, summary, requested=requested
        )
        summary.timings_ms.update(solve=round(planned.solve_ms, 2), pack=round(planned.pack_ms, 2))
        summary.failed_apps = planned.failed
        emulated = {a: self._emulated(p) for a, p in planned.plans.items()}
        changes = {
            a: AppChange(a)
            if a in planned.kept
            else app_change(
                apps[a][1],
                p,
                planned.rates[a],
                cur_deps.get(a),
                emulated=emulated[a],
                overhead_s=self.config.hop_overhead_s,
            )
            for a, p in planned.plans.items()
        }
        summary.changed = changed_apps(changes)
        summary.removed = sorted(set(cur_deps) - set(planned.plans))
        if current is None and not planned.plans:
            return None  # nothing registered (or nothing plannable) and nothing in force
        fleet_same = cur_fleet is not None and cur_fleet == planned.fleet
        if current is not None and not summary.changed and not summary.removed and fleet_same:
            self.registry.clear_replan(requested)
            summary.counts = dict(current.counts)
            summary.billed_per_hour, summary.occupancy_per_hour = (
                current.billed_per_hour,
                current.occupancy_per_hour,
            )
            return current
        t1 = time.perf_counter()
        version = self.plans.reserve_version()

        def deploy(a: str) -> Deployment:
            if a in planned.kept:
                return cur_deps[a]
            return build_deployment(
                apps[a][1],
                planned.plans[a],
                planned.rates[a],
                cur_deps.get(a),
                changes[a],
                version=version,
                now=now,
                make_queues=self._queue_factory(a, version),
                emulated=emulated[a],
                overhead_s=self.config.hop_overhead_s,
                corrections=state.corrections.get(a),
            )

        with ThreadPoolExecutor(max_workers=self.config.queue_workers) as pool:  # CreateQueue dominates
            deployments = list(pool.map(deploy, sorted(planned.plans)))
        meta = {
            a: {"revision": apps[a][0].revision, "changed": changes[a].changed_modules} for a in planned.plans
        }
        why = self._reason(summary, requested)
        activate_at, activate_by = self._activation_times(now, current)
        try:
            manifest = self.plans.publish(
                deployments,
                planned.fleet,
                expected=current.version if current else None,
                activate_at=activate_at,
                reason=why,
                version=version,
                created_at=now,
                app_meta=meta,
                extra={
                    "epoch": state.epoch,
                    "failed": planned.failed,
                    "excluded_hardware": summary.excluded_hardware,
                    "activate_by": activate_by,
                },
            )
        except VersionConflict as exc:
            summary.warnings.append(str(exc))
            raise
        self.registry.clear_replan(requested)
        summary.timings_ms["publish"] = round((time.perf_counter() - t1) * 1e3, 2)
        summary.status = "published"
        summary.version, summary.previous, summary.activate_at = (
            manifest.version,
            manifest.previous,
            manifest.activate_at,
        )
        summary.counts = dict(manifest.counts)
        summary.billed_per_hour, summary.occupancy_per_hour = (
            manifest.billed_per_hour,
            manifest.occupancy_per_hour,
        )
        return manifest

    def _activation_times(self, now: float, current: Manifest | None) -> tuple[float, float | None]:
        """(activate_at, activate_by) of a version published at ``now``. The first version is served
        at once (nothing else is). A later one is gated: published at its deadline, ``now +
        activate_max_lead_s``, moved earlier when its slots are served; one that supersedes a version
        still waiting keeps that version's deadline (at least ``activate_lead_s`` away), so a run of
        epochs publishing while the fleet grows cannot hold the front on an old plan indefinitely."""
        c = self.config
        if current is None or c.activate_max_lead_s <= c.activate_lead_s:
            return now + c.activate_lead_s, None
        by = now + c.activate_max_lead_s
        if current.activate_by is not None and now < current.activate_at:
            by = min(by, max(current.activate_by, now + c.activate_lead_s))
        return by, by

    @staticmethod
    def _reason(summary: EpochSummary, requested: set[str]) -> str:
        parts = [summary.reason]
        if requested:
            parts.append("registered: " + ", ".join(sorted(requested)))
        if summary.changed:
            parts.append("changed: " + ", ".join(sorted(summary.changed)))
        if summary.removed:
            parts.append("removed: " + ", ".join(summary.removed))
        return "; ".join(parts)

    # -- inputs ----------------------------------------------------------------------------------
    def _available(
        self, now: float, state: ControlState, previous_at: float | None, summary: EpochSummary
    ) -> list[str] | None:
        """Hardware with a worker group whose launches have not failed recently (None: no groups
        are configured, every deployable class may be planned and nothing is scaled)."""
        from core.adapters.autoscaling import AutoScalingError

        if not self.config.asg_names:
            return None
        since = previous_at if previous_at is not None else now - self.config.epoch_s
        states = self.groups.states()
        out: list[str] = []
        for hw in sorted(self.config.asg_names):
            if hw not in states:
                summary.excluded_hardware[hw] = f"no Auto Scaling group {self.config.asg_names[hw]!r}"
                continue
            if state.unavailable.get(hw, 0.0) <= now:
                try:
                    failures = self.groups.capacity_failures(hw, since)
                except AutoScalingError as exc:
                    failures = []
                    summary.warnings.append(str(exc))
                if failures:
                    state.unavailable[hw] = now + self.config.unavailable_s
                    state.unavailable_why[hw] = failures[0]
            if state.unavailable.get(hw, 0.0) > now:
                summary.excluded_hardware[hw] = (
                    f"launch failed ({state.unavailable_why.get(hw, '?')}); "
                    f"left out until {state.unavailable[hw] - now:.0f} s from now"
                )
                continue
            state.unavailable.pop(hw, None)
            state.unavailable_why.pop(hw, None)
            out.append(hw)
        return out

    def _planning_rate(
        self, spec: RegistrationSpec, record: AppRecord, history: list[float], observed_since: float
    ) -> float:
        from control.registry import floor_plan_rate
        from planner.scaling import forecast_rate

        c = self.config
        if not history or record.registered_at > observed_since:
            history = [spec.rate]  # not observed for a whole window yet: the registered rate
        floor = floor_plan_rate(spec, c.headroom)  # the floor with the same headroom as any rate
        return max(forecast_rate(history, headroom=c.headroom, trend_epochs=c.trend_epochs), floor)

    def _solve(
        self,
        now: float,
        state: ControlState,
        previous_at: float | None,
        apps: Mapping[str, tuple[AppRecord, RegistrationSpec]],
        available: list[str] | None,
        cur_deps: Mapping[str, Deployment],
        cur_fleet: FleetPlan | None,
        summary: EpochSummary,
        requested: set[str] | frozenset[str] = frozenset(),
    ) -> _Planned:
        from control.problems import app_problem
        from core.adapters.rates import RateWindow
        from planner.fleet import plan_fleet

        span = now - previous_at if previous_at is not None else self.config.epoch_s
        window = RateWindow(
            now, max(span, self.config.epoch_s), self.config.rate_period_s, self.config.rate_lag_s
        )
        summary.rate_window = [float(window.start), float(window.end)]
        seen = self.rates.observe(apps, window) if apps else {}
        observed = {a: rate for a, (rate, _) in seen.items()}
        for gone in set(state.history) - set(apps):
            del state.history[gone]
        self._calibrate(state, apps, cur_deps, window, summary)
        rates: dict[str, float] = {}
        problems: dict[str, ProblemSpec] = {}
        failed: dict[str, str] = {}
        fresh = state.observed_until is None or window.end > state.observed_until
        boosts, state.boosts = dict(state.boosts), {}  # a backlog correction applies to this epoch only
        for name, (record, spec) in apps.items():
            hist = state.history.setdefault(name, [])
            first = seen[name][1]
            # the app's first frames are in this window (none in the period before it): its first
            # period with frames is likely partial, so the window is not a rate (the registered rate
            # holds until a whole window has been observed)
            starting = not hist and first is not None and first >= window.start
            if record.registered_at <= window.start and (fresh or not hist) and not starting:
                hist.append(round(observed[name], 6))  # once per window: an early epoch adds nothing
                del hist[: -self.config.history_len]
            rates[name] = self._planning_rate(spec, record, hist, window.start)
            summary.rates[name] = {
                "observed": round(observed.get(name, 0.0), 4),
                "planned": round(rates[name], 4),
            }
            if starting and first is not None:  # the seconds of the window before the first frames
                summary.rates[name]["first_frames_after_s"] = round(first - window.start, 3)
            if boosts.get(name, 0.0) > rates[name]:
                rates[name] = boosts[name]
                summary.rates[name].update(planned=round(rates[name], 4), backlog=round(boosts[name], 4))
            try:
                problems[name] = app_problem(
                    spec,
                    rates[name],
                    self.catalog,
                    available,
                    self.config.hop_overhead_s,
                    state.corrections.get(name),
                )
            except ValueError as exc:
                failed[name] = str(exc).splitlines()[0]
        state.observed_until = max(window.end, state.observed_until or window.end)
        # the registration plans of new apps and of re-registered ones (a new revision asks for planning)
        seeds = self._seeds({a: apps[a][0] for a in problems if a not in cur_deps or a in requested}, summary)
        result = plan_fleet(
            problems,
            previous=cur_fleet,
            previous_plans={a: d.plan for a, d in cur_deps.items() if _realised(d.plan)},
            seeds=seeds,
            policy=self.config.policy,
            solver=self._solver,
            solve_budget_s=self.config.solve_budget_s,
        )
        over = self._over_caps(result.plans)
        if over:  # a held or grown plan (not solved this epoch) uses more than a cap allows
            result = plan_fleet(
                problems,
                previous=cur_fleet,
                previous_plans={
                    a: d.plan for a, d in cur_deps.items() if _realised(d.plan) and a not in over
                },
                seeds={a: p for a, p in seeds.items() if a not in over},
                policy=self.config.policy,
                solver=self._solver,
                solve_budget_s=self.config.solve_budget_s,
            )
        summary.seeded = sorted(result.seeded)
        summary.carried, summary.resolved = sorted(result.carried), sorted(result.resolved)
        summary.quick = sorted(result.quick)
        failed.update(result.failed)
        plans = dict(result.plans)
        fleet = result.fleet
        kept = {a: cur_deps[a] for a in failed if a in cur_deps}
        if kept:  # an app that cannot be planned now keeps the plan in force
            fleet = self._repack(problems, plans, kept, cur_fleet)
            for a, dep in kept.items():
                plans[a], rates[a] = dep.plan, dep.frame_rate
        rates = {a: rates[a] for a in plans}
        return _Planned(plans, rates, fleet, failed, result.solve_ms, result.pack_ms, set(kept))

    def _seeds(self, records: Mapping[str, AppRecord], summary: EpochSummary) -> dict[str, Plan]:
        """The plans the registrations of ``records`` solved (the epoch takes one when it plans the same
        problem). One that cannot be read is left out with a warning: the app is
        solved."""
        t0 = time.perf_counter()
        out: dict[str, Plan] = {}
        for a, record in sorted(records.items()):
            try:
                seed = self.registry.seed(record)
            except ControlError as exc:
                summary.warnings.append(f"{a}: registration plan not used: {exc}")
                continue
            if seed is not None:
                out[a] = seed
        if records:
            summary.timings_ms["seeds"] = round((time.perf_counter() - t0) * 1e3, 2)
        return out

    def _calibrate(
        self,
        state: ControlState,
        apps: Mapping[str, Any],
        cur_deps: Mapping[str, Deployment],
        window: RateWindow,
        summary: EpochSummary,
    ) -> None:
        """Update each app's service-time corrections from the largest ``ServiceOverrunMs`` of its
        modules in the window (control/calibration.py). A failed read keeps them."""
        from control.calibration import correction_keys, in_force, update_corrections

        for gone in set(state.corrections) - set(apps):
            del state.corrections[gone]
        for gone in set(state.corrections_low) - set(apps):
            del state.corrections_low[gone]
        if self.overruns is None or not self.config.calibrate:
            return
        deps = [d for a, d in cur_deps.items() if a in apps]
        try:
            maxima = self.overruns.maxima(correction_keys(deps), window) if deps else {}
        except MetricsError as exc:
            summary.warnings.append(f"service overruns not read, corrections kept: {exc}")
            return
        for dep in deps:
            app = dep.app
            seen = {(m, hw): v for (a, m, hw), v in maxima.items() if a == app}
            low = state.corrections_low.setdefault(app, {})
            new = update_corrections(state.corrections.get(app, {}), seen, in_force(dep), low=low)
            if not low:
                state.corrections_low.pop(app, None)
            if new:
                state.corrections[app] = new
            else:
                state.corrections.pop(app, None)
        summary.corrections = {a: dict(c) for a, c in state.corrections.items()}

    def _over_caps(self, plans: Mapping[str, Plan]) -> set[str]:
        from control.problems import machine_count

        caps = self.config.machine_caps
        return {
            a
            for a, p in plans.items()
            for hw, cap in caps.items()
            if sum(machine_count(p, hw).values()) > cap
        }

    def _solver(
        self,
        problem: ProblemSpec,
        *,
        schedules: dict[tuple[object, ...], DispatchSchedule] | None = None,
        first_found: bool = False,
    ) -> Plan:
        """The dispatch-aware solve (docs/dispatch.md): each module's worst case is what the
        time-window dispatch realises (schedule bound, bursts of at most ``max_children_per_request``
        children per parent request), children get the spread capacity their bursts need, and the
        plan records ``dispatch.spread_rate`` for the data plane. ``schedules``: plan_fleet's dict for
        this app (the schedules the solve builds are reused when its shapes are realised);
        ``first_found``: the solve's quick mode, which plan_fleet asks for when a budgeted epoch has
        more apps without a plan than it can solve in full (they are solved in full in later epochs)."""
        from planner.robust import solve_dispatchable

        def solve(p: ProblemSpec) -> Plan:
            return solve_dispatchable(
                p,
                policy=self.config.policy,
                objective="billed",
                child_headroom=self.config.child_headroom,
                schedules=schedules,
                first_found=first_found,
            )

        if not self.config.machine_caps:
            return solve(problem)
        from control.problems import solve_within_caps

        return solve_within_caps(problem, solve, self.config.machine_caps)[0]  # the plan

    def _repack(
        self,
        problems: Mapping[str, ProblemSpec],
        plans: Mapping[str, Plan],
        kept: Mapping[str, Deployment],
        previous: FleetPlan | None,
    ) -> FleetPlan:
        from planner.packing import pack

        apps: dict[str, tuple[ProblemSpec, Plan]] = {a: (problems[a], plans[a]) for a in plans}
        for a, dep in kept.items():
            apps[a] = (_standin_problem(dep, self.catalog), dep.plan)
        return pack(apps, previous=previous)

    def _emulated(self, plan: Plan) -> list[str]:
        used = {g.hardware for mp in plan.modules.values() for g in mp.groups}
        return sorted(used & set(self.config.emulated_hardware))

    def _queue_factory(self, app: str, version: int) -> Callable[[str, Any], dict[str, str]]:
        from control.queues import create_module_queues, ensure_app_dlq

        dlq_arn: list[str] = [self.config.dlq_arn] if self.config.dlq_arn else []

        def make(module: str, module_plan: Any) -> dict[str, str]:
            if not dlq_arn:
                dlq_arn.append(ensure_app_dlq(self.sqs, app, self.config.queue_prefix)[1])
            return create_module_queues(
                self.sqs,
                app,
                module,
                module_plan,
                dlq_arn=dlq_arn[0],
                version=version,
                prefix=self.config.queue_prefix,
                visibility_timeout_s=self.config.visibility_timeout_s,
            )

        return make

    # -- fleet size --------------------------------------------------------------------------------
    def _scale(self, state: ControlState, current: Manifest | None, summary: EpochSummary) -> None:
        """Desired capacity per group from the version in force, through hysteresis."""
        from core.adapters.autoscaling import AutoScalingError
        from planner.scaling import Hysteresis

        if current is None or not self.config.asg_names:
            return
        try:
            groups = self.groups.states()
        except AutoScalingError as exc:
            summary.warnings.append(str(exc))
            return
        hyst = Hysteresis.from_dict(state.hysteresis) if state.hysteresis else Hysteresis()
        target = {hw: n for hw, n in current.counts.items() if hw in groups}
        served = current.serving(self.clock())
        if served != current.version:  # not active yet: the instances of the version served stay
            before = self.plans.manifest(served)
            for hw, n in (before.counts if before is not None else {}).items():
                if hw in groups:
                    target[hw] = max(target.get(hw, 0), n)
        for hw, n in current.counts.items():
            if n and hw not in groups:
                summary.warnings.append(f"the plan needs {n} {hw} instance(s) but there is no group for {hw}")
        have = {hw: g.desired for hw, g in groups.items()}
        desired = hyst.desired(target, have, state.epoch)
        state.hysteresis = hyst.to_dict()
        for hw, want in desired.items():
            g = groups[hw]
            n = self._bounded(hw, want, g, state, summary)
            summary.desired[hw] = n
            if n == g.desired:
                continue
            try:
                self.groups.set_desired(hw, n)
                summary.scaled[hw] = [g.desired, n]
            except AutoScalingError as exc:
                summary.warnings.append(str(exc))

    def _bounded(self, hw: str, want: int, g: GroupState, state: ControlState, summary: EpochSummary) -> int:
        n = max(g.min_size, want)
        if n > g.max_size:
            summary.warnings.append(f"{hw}: the plan wants {n} instances, the group allows {g.max_size}")
            n = g.max_size
        if state.unavailable.get(hw, 0.0) > self.clock():
            n = min(n, g.in_service)  # stop asking for capacity EC2 cannot give
        return n

    def _review_reserves(self, state: ControlState, summary: EpochSummary, now: float) -> None:
        """Choose the admission reserve again for the apps whose rate moved past the review band
        (:mod:`control.reserves`); the next epoch plans with it. Best effort: a failure
        is a warning, and the plan in force is not touched."""
        from control.registry import planner_settings
        from control.reserves import review_reserves

        # a level for the alarm, every epoch (a failed one included) while a choice stands unmet
        summary.unmet_shed_targets = sorted(a for a, c in state.reserves.items() if not c.met)
        if self._review is None or summary.status not in ("published", "unchanged"):
            return
        registered, available = self._review
        self._review = None
        h = self.config.headroom
        rates = {  # before headroom; not a backlog correction's rate (one epoch only)
            a: r["planned"] / (1 + h)
            for a, r in summary.rates.items()
            if a not in summary.failed_apps and "backlog" not in r
        }
        try:
            out = review_reserves(
                registered,
                rates,
                state,
                catalog=self.catalog,
                available=available,
                settings=planner_settings(self.config),
                now=now,
                budget_s=self.config.reserve_review_s,
            )
        except Exception as exc:  # noqa: BLE001 - a review changes no plan; the next epoch tries again
            log.exception("reserve review failed")
            summary.warnings.append(f"reserve review: {type(exc).__name__}: {exc}")
            return
        summary.reserves = out.reviewed
        summary.unmet_shed_targets = sorted(a for a, c in state.reserves.items() if not c.met)
        summary.warnings.extend(out.warnings)
        if out.reviewed or out.due:
            summary.timings_ms["reserve_review"] = round(out.spent_s * 1e3, 2)

    # -- housekeeping ------------------------------------------------------------------------------
    def _collect(self, now: float, summary: EpochSummary) -> None:
        from control.gc import GcConfig, collect

        try:
            report = collect(
                self.plans,
                self.sqs,
                self.depth,
                now,
                GcConfig(
                    stale_s=self.config.stale_s,
                    queue_prefix=self.config.queue_prefix,
                    keep_previous_s=max(self.config.epoch_s, self.config.activate_lead_s),
                ),
            )
        except Exception as exc:  # noqa: BLE001 - GC is best effort; the next epoch retries
            summary.warnings.append(f"gc: {type(exc).__name__}: {exc}")
            return
        summary.gc = report.as_json()

    def _emit(self, summary: EpochSummary) -> None:
        m = self.metrics
        m.put("PlanningFailures", 1 if summary.status == "failed" else 0)
        m.put("PlanningAppFailures", len(summary.failed_apps))
        m.put("PlanVersionPublished", 1 if summary.status == "published" else 0)
        m.put("CarriedApps", len(summary.carried))  # on a plan to solve again (solve budget)
        m.put("EpochMs", summary.timings_ms.get("total", 0.0), "Milliseconds")
        m.put("BilledCostPerHour", summary.billed_per_hour, "None")
        m.put("OccupancyCostPerHour", summary.occupancy_per_hour, "None")
        for hw, n in summary.counts.items():
            m.put("PlannedInstances", n, Hardware=hw)
        for app in summary.failed_apps:
            m.put("PlanningFailures", 1, App=app)
        m.put("ShedTargetUnmet", len(summary.unmet_shed_targets))  # no reserve meets it at their rate
        for app in summary.unmet_shed_targets:
            m.put("ShedTargetUnmet", 1, App=app)


def _realised(plan: Plan) -> bool:
    """A plan the dispatch-aware solve made (plans published before it are solved again)."""
    return bool((plan.model_extra or {}).get("dispatch_realised"))


def _standin_problem(dep: Deployment, catalog: Mapping[str, HardwareSpec]) -> ProblemSpec:
    """A problem that prices the hardware of a kept plan (packing reads prices only)."""
    from planner.models import ModuleSpec, ProblemSpec, ProfileEntry

    modules = {
        m: ModuleSpec(
            rate=max(sum(g.machines * g.rate_per_machine for g in mp.groups), 1e-9),
            profile=[
                ProfileEntry(
                    hardware=g.hardware, batch=g.batch, concurrency=g.concurrency, duration_s=g.duration_s
                )
                for g in mp.groups
            ],
        )
        for m, mp in dep.plan.modules.items()
    }
    used = {e.hardware for ms in modules.values() for e in ms.profile}
    return ProblemSpec(
        name=dep.app,
        slo_s=dep.planning_slo_s or dep.slo_s,
        hardware={h: catalog[h] for h in used},
        modules=modules,
        edges=[(s, d) for s, d, _ in dep.edges],
    )
