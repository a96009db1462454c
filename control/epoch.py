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
8. garbage collection of old versions, drained queues and dead instances' claims; the messages of
   a superseded queue nothing consumes any more are moved to the current version (control/rehome.py).

Every epoch first checks the activation of a version still waiting for its slots.

Any failure in steps 2-5 leaves the version in force untouched and emits ``PlanningFailures`` = 1
(0 on success, so an alarm has data to watch); scaling and GC still run against the last good
version.

The controller reads (its adapters), decides with the functions of :mod:`control.planning`,
:mod:`control.activation`, :mod:`control.backlog`, :mod:`control.calibration` and
:mod:`control.reserves` (no I/O there), and applies what they decide (publish, scale, GC, metrics).
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import planner.fleet
from control.activation import ActivationCheck, apply_activation, decide_activation, slot_readiness
from control.backlog import BacklogSummary, emit_backlog, late_modules, read_backlog, record_corrections
from control.calibration import correction_keys, forget_apps, learn_corrections
from control.capacity import GrowthLimit, growth_limits, launch_refusal, machine_caps
from control.config import ControlConfig
from control.deployments import AppChange, app_change, build_deployment, changed_apps
from control.errors import ControlError
from control.hops import learn_hops
from control.housekeeping import collect_garbage, sweep_stranded
from control.planning import (
    Planned,
    activation_times,
    bounded_desired,
    dispatch_solver,
    over_caps,
    plan_inputs,
    publish_reason,
    realised,
    repack,
    scale_target,
)
from control.problems import plan_sources, prefer_measured
from control.queues import create_module_queues, ensure_app_dlq, ensure_results_queue, visibility_timeout_for
from control.registration.checks import planner_settings
from control.reserves import effective_specs, review_reserves
from control.state import ControlState, EpochTakenError
from control.summary import EpochSummary
from core.adapters.autoscaling import AutoScalingError
from core.adapters.plan_store import VersionConflictError
from core.adapters.rates import RateWindow
from core.errors import DataPlaneError, MetricsError
from planner.fleet.keys import proven_gap
from planner.scaling import Hysteresis

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from control.registration.store import AppRecord, AppRegistry
    from control.spec import RegistrationSpec
    from control.state import StateStore
    from core.adapters.autoscaling import FleetGroups, GroupState
    from core.adapters.metrics import Metrics
    from core.adapters.plan_store import Manifest, PlanStore
    from core.adapters.queue_admin import QueueAdmin
    from core.adapters.queues import TaskQueues
    from core.adapters.rates import HopDelays, ObservedRates, ServiceOverruns
    from core.adapters.results import ResultStore
    from core.schema import Deployment
    from planner.models import HardwareSpec, Plan, ProblemSpec
    from planner.packing import FleetPlan

__all__ = ["ControlConfig", "Controller", "EpochSummary"]

log = logging.getLogger("skinflint.control")


@dataclass
class Controller:
    config: ControlConfig
    plans: PlanStore
    registry: AppRegistry
    states: StateStore
    rates: ObservedRates
    groups: FleetGroups
    queues: QueueAdmin
    depth: Callable[[str], int]
    metrics: Metrics
    catalog: Mapping[str, HardwareSpec]
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    overruns: ServiceOverruns | None = None  # the workers' ServiceOverrunMs (None: no calibration)
    hop_delays: HopDelays | None = None  # the workers' HopDelayBucket (None: every hop the default)
    # model -> its entries in the shared profile store, where instances write what they measured
    # (workers/onsite.py); None: the registrations' profiles alone
    stored_profile: Callable[[str], list[dict[str, Any]]] | None = None
    tasks: TaskQueues | None = None  # the data plane's queues: GC moves stranded messages (None: not)
    results: ResultStore | None = None  # the results table: stranded frames are swept (None: not)
    # what the epoch's reserve review reads: the registered apps and the hardware planned on
    _review: tuple[Mapping[str, tuple[AppRecord, RegistrationSpec]], list[str] | None] | None = field(
        default=None, init=False, repr=False
    )
    # hardware -> its growth limit this epoch (control/capacity.py), from the groups' states
    _growth: dict[str, GrowthLimit] = field(default_factory=dict, init=False, repr=False)
    # the push apps' results queues (app -> URL) of the versions read this epoch: the sweep sends due messages
    _push_queues: dict[str, str] = field(default_factory=dict, init=False, repr=False)

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
        except EpochTakenError as exc:
            return EpochSummary(status="skipped", epoch=state.epoch, reason=f"{reason}: {exc}")
        summary = EpochSummary(status="unchanged", epoch=state.epoch, reason=reason)
        self._review = None
        current = self._plan(now, state, previous_at, summary)
        self._scale(state, current, summary)
        self._review_reserves(state, summary, now)
        if summary.status == "published" and self.config.activate_wait_s > 0:
            self._await_activation(summary)
        self._collect(now, summary)
        self._sweep(now, state, summary)
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
        an early epoch at a higher rate (:mod:`control.backlog`). Runs the early epoch itself when the
        last epoch is at least ``min_gap_s`` old; otherwise the boost waits in the control state for
        the next check or epoch."""
        try:
            return self._check_backlog(reason)
        except Exception as exc:  # noqa: BLE001 - a failed check changes nothing; the epoch still runs
            log.exception("backlog check failed")
            return BacklogSummary(status="failed", error=f"{type(exc).__name__}: {exc}")

    def _check_backlog(self, reason: str) -> BacklogSummary:
        t0 = time.perf_counter()
        config = self.config
        now = self.clock()
        state = self.states.load()  # consistent: the save below is conditional on its epoch
        # the pointer through its hint, eventually consistently (PlanStore.current_hinted): a
        # pointer a moment old makes the activation's conditional rewrite report a conflict, and
        # the next check (2 s locally, a minute on AWS) sees the new one
        cur = self.plans.current_hinted()
        if cur is None:
            return BacklogSummary(status="no plan")
        out = BacklogSummary(status="quiet", version=cur.version)
        if cur.gated:  # a new version waits for its slots: activate it when they are served
            check = self.check_activation(cur)
            out.activation = check.as_json()
            if check.activate_at is not None:
                cur = cur.model_copy(update={"activate_at": check.activate_at})
        if now < cur.activate_at:  # instances are preloading the new version: its queues are not in use yet
            out.status = "activating"
            out.timings_ms["total"] = round((time.perf_counter() - t0) * 1e3, 2)
            return out
        cooling = {app for app, at in state.corrected_at.items() if now - at < config.backlog_cooldown_s}
        readings, unreadable = read_backlog(
            self.plans,
            self.depth,
            cur.version,
            now,
            stale_s=config.stale_s,
            workers=config.queue_workers,
            delete_linger_s=config.delete_linger_s,
        )
        need = late_modules(out, readings, cooling, config)
        deps = self.plans.deployments(cur.version, need) if need else {}
        record_corrections(out, state, need, deps, unreadable, now, config.min_gap_s)
        out.timings_ms["read"] = round((time.perf_counter() - t0) * 1e3, 2)
        try:
            self.states.save(state, state.epoch if state.epoch > 0 else None)
        except EpochTakenError:  # an epoch started meanwhile: it plans from fresh data, which supersedes this
            out.status, out.boosts = "superseded", {}
            return out
        emit_backlog(self.metrics, out)
        if out.status == "corrected":
            why = ", ".join(sorted(state.boosts))
            out.epoch = self.run_epoch(reason=f"{reason}: backlog of {why}").as_json()
        out.timings_ms["total"] = round((time.perf_counter() - t0) * 1e3, 2)
        return out

    def check_activation(self, current: Manifest | None = None) -> ActivationCheck:
        """Move the current version's activation earlier once its slots are served, or record at
        its deadline which were not (:mod:`control.activation`). Never raises a
        :class:`~core.adapters.plan_store.VersionConflictError`: a concurrent publish or check wins."""
        config = self.config
        cur = current if current is not None else self.plans.current()
        if cur is None:
            return ActivationCheck(status="active")
        if not cur.gated:
            return ActivationCheck(status="active", version=cur.version, activate_at=cur.activate_at)
        now = self.clock()
        slots, missing = slot_readiness(self.plans, cur.version, now, config.heartbeat_fresh_s)
        decision = decide_activation(
            cur, now, slots, missing, lead_s=config.activate_lead_s, notice_s=config.activate_notice_s
        )
        return apply_activation(self.plans, self.metrics, cur, decision, now)

    def _activation(self, current: Manifest | None, summary: EpochSummary) -> Manifest | None:
        """The activation check of a version still waiting; returns the pointer's manifest after it."""
        if current is None or not current.gated:
            return current
        try:
            check = self.check_activation(current)
        except DataPlaneError as exc:  # reading claims or heartbeats failed: the next check retries
            summary.warnings.append(f"activation check: {exc}")
            return current
        summary.activation = check.as_json()
        return self.plans.current() if check.status in ("ready", "deadline", "conflict") else current

    def _await_activation(self, summary: EpochSummary) -> None:
        """After publishing: check the new version's slots every ``activate_poll_s`` for at most
        ``activate_wait_s`` (the Lambda, whose next check is a minute away), so a version the running
        instances serve activates ``activate_lead_s`` after publishing, as it would ungated."""
        end = time.monotonic() + self.config.activate_wait_s
        while True:
            try:
                check = self.check_activation()
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
        cur_deps = self.plans.deployments(current.version) if current else {}
        self._push_queues = _push_queues(cur_deps.values())
        cur_fleet = self.plans.fleet(current.version) if current else None
        registered = self.registry.load_all()
        apps = effective_specs(registered, state)  # with the reserves chosen again (reserves.py)
        apps = self._prefer_measured(apps, summary)
        requested = self.registry.replan_requested()
        available = self._available(now, state, previous_at, summary)
        self._review = (registered, available)
        planned = self._solve(
            now, state, previous_at, apps, available, cur_deps, cur_fleet, summary, requested=requested
        )
        summary.timings_ms.update(solve=round(planned.solve_ms, 2), pack=round(planned.pack_ms, 2))
        summary.failed_apps = planned.failed
        emulated = {app: self._emulated(plan) for app, plan in planned.plans.items()}
        changes = {
            app: AppChange(app)
            if app in planned.kept
            else app_change(
                apps[app][1],
                plan,
                planned.rates[app],
                cur_deps.get(app),
                emulated=emulated[app],
                overhead_s=self.config.hop_overhead_s,
            )
            for app, plan in planned.plans.items()
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

        def deploy(app: str) -> Deployment:
            if app in planned.kept:
                return cur_deps[app]
            return build_deployment(
                apps[app][1],
                planned.plans[app],
                planned.rates[app],
                cur_deps.get(app),
                changes[app],
                version=version,
                now=now,
                make_queues=self._queue_factory(app, version, apps[app][1].slo_s),
                emulated=emulated[app],
                overhead_s=self.config.hop_overhead_s,
                corrections=state.corrections.get(app),
                make_results_queue=self._results_queue_factory(app),
            )

        with ThreadPoolExecutor(max_workers=self.config.queue_workers) as pool:  # CreateQueue dominates
            deployments = list(pool.map(deploy, sorted(planned.plans)))
        self._push_queues.update(_push_queues(deployments))
        meta = {
            app: {
                "revision": apps[app][0].revision,
                "changed": changes[app].changed_modules,
                "profile_sources": plan_sources(apps[app][1], planned.plans[app]),
                "proven_gap": proven_gap(planned.plans[app]),  # None: unknown (planner/fleet/keys.py)
            }
            for app in planned.plans
        }
        why = publish_reason(summary.reason, requested, summary.changed, summary.removed)
        activate_at, activate_by = activation_times(now, current, self.config)
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
                    "derived_margin": self.config.derived_margin,
                },
            )
        except VersionConflictError as exc:
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

    # -- inputs ----------------------------------------------------------------------------------
    def _prefer_measured(
        self, apps: Mapping[str, tuple[AppRecord, RegistrationSpec]], summary: EpochSummary
    ) -> dict[str, tuple[AppRecord, RegistrationSpec]]:
        """Each app's profiles with the entries instances measured on their class in place of the
        registered ones for that class (:func:`control.problems.prefer_measured`). A store that
        cannot be read is a warning: the registered profiles are planned."""
        out = dict(apps)
        if self.stored_profile is None:
            return out
        stored: dict[str, list[dict[str, Any]]] = {}
        for model in sorted({model for _, spec in apps.values() for model in spec.profiles}):
            try:
                stored[model] = self.stored_profile(model)
            except Exception as exc:  # noqa: BLE001 - a profile not read keeps the registered one
                summary.warnings.append(f"profile store: {model} not read ({type(exc).__name__}: {exc})")
        for app, (record, spec) in apps.items():
            profiles, replaced = prefer_measured(spec.profiles, stored)
            if replaced:
                out[app] = (record, spec.model_copy(update={"profiles": profiles}))
                summary.measured_on_instance[app] = replaced
        return out

    def _available(
        self, now: float, state: ControlState, previous_at: float | None, summary: EpochSummary
    ) -> list[str] | None:
        """Hardware with a worker group whose launches have not failed recently (None: no groups
        are configured, every deployable class may be planned and nothing is scaled)."""
        if not self.config.asg_names:
            return None
        since = previous_at if previous_at is not None else now - self.config.epoch_s
        states = self.groups.states()
        limits = self._growth_limits(states, summary)
        out: list[str] = []
        for hw in sorted(self.config.asg_names):
            if hw not in states:
                summary.excluded_hardware[hw] = f"no Auto Scaling group {self.config.asg_names[hw]!r}"
                continue
            if hw in limits and limits[hw].most == 0:
                summary.excluded_hardware[hw] = limits[hw].why
                continue
            if state.unavailable.get(hw, 0.0) <= now:
                try:
                    failures = self.groups.capacity_failures(hw, since)
                except AutoScalingError as exc:
                    failures = []
                    summary.warnings.append(str(exc))
                if failures:
                    state.unavailable[hw] = now + self.config.unavailable_s
                    state.unavailable_why[hw] = launch_refusal(failures[0])
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
    ) -> Planned:
        span = now - previous_at if previous_at is not None else self.config.epoch_s
        window = RateWindow(
            now, max(span, self.config.epoch_s), self.config.rate_period_s, self.config.rate_lag_s
        )
        summary.rate_window = [float(window.start), float(window.end)]
        seen = self.rates.observe(apps, window) if apps else {}
        for gone in set(state.history) - set(apps):
            del state.history[gone]
        self._calibrate(state, apps, cur_deps, window, summary)
        self._measure_hops(state, apps, cur_deps, window, summary)
        inputs = plan_inputs(apps, seen, window, state, self.config, self.catalog, available)
        summary.rates.update(inputs.report)
        problems, failed, rates = inputs.problems, inputs.failed, inputs.rates
        # the registration plans of new apps and of re-registered ones (a new revision asks for planning)
        seeds = self._seeds(
            {app: apps[app][0] for app in problems if app not in cur_deps or app in requested}, summary
        )
        pushed = frozenset(app for app, (_, spec) in apps.items() if spec.results == "push")
        result = self._plan_fleet(problems, cur_fleet, cur_deps, seeds, exclude=set(), pushed=pushed)
        over = over_caps(result.plans, machine_caps(self.config.machine_caps, self._growth))
        if over:  # a held or grown plan (not solved this epoch) uses more than a cap allows
            result = self._plan_fleet(problems, cur_fleet, cur_deps, seeds, exclude=over, pushed=pushed)
        summary.seeded = sorted(result.seeded)
        summary.carried, summary.resolved = sorted(result.carried), sorted(result.resolved)
        summary.quick = sorted(result.quick)
        failed.update(result.failed)
        plans = dict(result.plans)
        fleet = result.fleet
        kept = {app: cur_deps[app] for app in failed if app in cur_deps}
        if kept:  # an app that cannot be planned now keeps the plan in force
            fleet = repack(problems, plans, kept, cur_fleet, self.catalog)
            for app, dep in kept.items():
                plans[app], rates[app] = dep.plan, dep.frame_rate
        rates = {app: rates[app] for app in plans}
        summary.proven_gaps = {app: proven_gap(plan) for app, plan in sorted(plans.items())}
        return Planned(plans, rates, fleet, failed, result.solve_ms, result.pack_ms, set(kept))

    def _growth_limits(
        self, states: Mapping[str, GroupState], summary: EpochSummary
    ) -> dict[str, GrowthLimit]:
        """The classes that cannot grow (control/capacity.py), kept for this epoch's solve and said in
        the summary."""
        self._growth = growth_limits(states)
        summary.limited_hardware = {hw: limit.why for hw, limit in self._growth.items() if limit.most > 0}
        return self._growth

    def _solve_config(self) -> ControlConfig:
        """The configuration the epoch solves with: the machine caps lowered for the classes that
        cannot grow."""
        if not self._growth:
            return self.config
        return replace(self.config, machine_caps=machine_caps(self.config.machine_caps, self._growth))

    def _plan_fleet(
        self,
        problems: Mapping[str, ProblemSpec],
        cur_fleet: FleetPlan | None,
        cur_deps: Mapping[str, Deployment],
        seeds: Mapping[str, Plan],
        exclude: set[str],
        pushed: frozenset[str] = frozenset(),
    ) -> planner.fleet.FleetResult:
        """``plan_fleet`` with the epoch's solve; apps in ``exclude`` are solved again (neither their
        plan in force nor their seed is held); apps in ``pushed`` push their results (their data
        plane is priced so)."""
        return planner.fleet.plan_fleet(
            problems,
            previous=cur_fleet,
            previous_plans={
                app: dep.plan for app, dep in cur_deps.items() if realised(dep.plan) and app not in exclude
            },
            seeds={app: seed for app, seed in seeds.items() if app not in exclude},
            policy=self.config.policy,
            solver=dispatch_solver(self._solve_config(), pushed),
            solve_budget_s=self.config.solve_budget_s,
        )

    def _seeds(self, records: Mapping[str, AppRecord], summary: EpochSummary) -> dict[str, Plan]:
        """The plans the registrations of ``records`` solved (the epoch takes one when it plans the same
        problem). One that cannot be read is left out with a warning: the app is
        solved."""
        t0 = time.perf_counter()
        out: dict[str, Plan] = {}
        for app, record in sorted(records.items()):
            try:
                seed = self.registry.seed(record)
            except ControlError as exc:
                summary.warnings.append(f"{app}: registration plan not used: {exc}")
                continue
            if seed is not None:
                out[app] = seed
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
        forget_apps(state, apps)
        if self.overruns is None or not self.config.calibrate:
            return
        deps = [dep for app, dep in cur_deps.items() if app in apps]
        try:
            maxima = self.overruns.maxima(correction_keys(deps), window) if deps else {}
        except MetricsError as exc:
            summary.warnings.append(f"service overruns not read, corrections kept: {exc}")
            return
        learn_corrections(state, deps, maxima)
        summary.corrections = {app: dict(correction) for app, correction in state.corrections.items()}

    def _measure_hops(
        self,
        state: ControlState,
        apps: Mapping[str, tuple[AppRecord, RegistrationSpec]],
        cur_deps: Mapping[str, Deployment],
        window: RateWindow,
        summary: EpochSummary,
    ) -> None:
        """Decide each module's hop from the p99 of its first deliveries in the window (control/hops.py;
        the modules of the plan in force are read). A failed read keeps the hops in force."""
        settings = self.config.hop_settings()
        modules = {app: list(spec.modules) for app, (_, spec) in apps.items()}
        counts: dict[tuple[str, str], dict[str, float]] = {}
        if self.hop_delays is not None and self.config.measure_hops:
            keys = [
                (app, module) for app, dep in cur_deps.items() if app in apps for module in dep.plan.modules
            ]
            try:
                counts = self.hop_delays.counts(keys, window) if keys else {}
            except MetricsError as exc:
                summary.warnings.append(f"hop delays not read, hops kept: {exc}")
        elif not self.config.measure_hops:
            state.hops.clear()  # measuring turned off: every module on the default
        summary.hops = learn_hops(state, modules, counts, settings)

    def _emulated(self, plan: Plan) -> list[str]:
        used = {group.hardware for mp in plan.modules.values() for group in mp.groups}
        return sorted(used & set(self.config.emulated_hardware))

    def _queue_factory(self, app: str, version: int, slo_s: float) -> Callable[[str, Any], dict[str, str]]:
        dlq_arn: list[str] = [self.config.dlq_arn] if self.config.dlq_arn else []

        def make(module: str, module_plan: Any) -> dict[str, str]:
            if not dlq_arn:
                dlq_arn.append(ensure_app_dlq(self.queues, app, self.config.queue_prefix)[1])
            return create_module_queues(
                self.queues,
                app,
                module,
                module_plan,
                dlq_arn=dlq_arn[0],
                version=version,
                prefix=self.config.queue_prefix,
                visibility_timeout_s=visibility_timeout_for(
                    slo_s,
                    module_plan,
                    self.config.delete_linger_s,
                    self.config.min_visibility_s,
                    self.config.visibility_timeout_s,
                ),
            )

        return make

    def _results_queue_factory(self, app: str) -> Callable[[], str]:
        """A push app's results queue (control/queues.py), redriven to the app's DLQ."""

        def make() -> str:
            dlq_arn = self.config.dlq_arn or ensure_app_dlq(self.queues, app, self.config.queue_prefix)[1]
            return ensure_results_queue(self.queues, app, dlq_arn=dlq_arn, prefix=self.config.queue_prefix)

        return make

    # -- fleet size --------------------------------------------------------------------------------
    def _scale(self, state: ControlState, current: Manifest | None, summary: EpochSummary) -> None:
        """Desired capacity per group from the version in force, through hysteresis."""
        if current is None or not self.config.asg_names:
            return
        try:
            groups = self.groups.states()
        except AutoScalingError as exc:
            summary.warnings.append(str(exc))
            return
        hyst = Hysteresis.from_dict(state.hysteresis) if state.hysteresis else Hysteresis()
        served = current.serving(self.clock())
        before = self.plans.manifest(served) if served != current.version else None
        target = scale_target(current, before, groups, served)
        for hw, count in current.counts.items():
            if count and hw not in groups:
                summary.warnings.append(
                    f"the plan needs {count} {hw} instance(s) but there is no group for {hw}"
                )
        have = {hw: asg.desired for hw, asg in groups.items()}
        desired = hyst.desired(target, have, state.epoch)
        state.hysteresis = hyst.to_dict()
        for hw, want in desired.items():
            group = groups[hw]
            bounded = bounded_desired(hw, want, group, state, self.clock(), summary.warnings)
            summary.desired[hw] = bounded
            if bounded == group.desired:
                continue
            try:
                self.groups.set_desired(hw, bounded)
                summary.scaled[hw] = [group.desired, bounded]
            except AutoScalingError as exc:
                summary.warnings.append(str(exc))

    def _review_reserves(self, state: ControlState, summary: EpochSummary, now: float) -> None:
        """Choose the admission reserve again for the apps whose rate moved past the review band
        (:mod:`control.reserves`); the next epoch plans with it. Best effort: a failure
        is a warning, and the plan in force is not touched."""
        # a level for the alarm, every epoch (a failed one included) while a choice stands unmet
        summary.unmet_shed_targets = sorted(app for app, choice in state.reserves.items() if not choice.met)
        if self._review is None or summary.status not in ("published", "unchanged"):
            return
        registered, available = self._review
        self._review = None
        headroom = self.config.headroom
        rates = {  # before headroom; not a backlog correction's rate (one epoch only)
            app: rate["planned"] / (1 + headroom)
            for app, rate in summary.rates.items()
            if app not in summary.failed_apps and "backlog" not in rate
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
        summary.unmet_shed_targets = sorted(app for app, choice in state.reserves.items() if not choice.met)
        summary.warnings.extend(out.warnings)
        if out.reviewed or out.due:
            summary.timings_ms["reserve_review"] = round(out.spent_s * 1e3, 2)

    # -- housekeeping (control/housekeeping.py) ----------------------------------------------------
    def _collect(self, now: float, summary: EpochSummary) -> None:
        collect_garbage(self.config, self.plans, self.queues, self.depth, self.tasks, now, summary)

    def _sweep(self, now: float, state: ControlState, summary: EpochSummary) -> None:
        """Account for the frames past their deadline (control/sweeper.py); the cursor is saved
        with the state."""
        sweep_stranded(
            self.config, self.results, self.metrics, now, state, summary, self._push_queues, self.tasks
        )

    def _emit(self, summary: EpochSummary) -> None:
        metrics = self.metrics
        metrics.put("PlanningFailures", 1 if summary.status == "failed" else 0)
        metrics.put("PlanningAppFailures", len(summary.failed_apps))
        metrics.put("PlanVersionPublished", 1 if summary.status == "published" else 0)
        metrics.put("CarriedApps", len(summary.carried))  # on a plan to solve again (solve budget)
        metrics.put("EpochMs", summary.timings_ms.get("total", 0.0), "Milliseconds")
        # messages found in a superseded queue nothing consumed, moved to the current version (gc)
        metrics.put("StrandedMessagesMoved", int(summary.gc.get("moved", 0)))
        metrics.put("BilledCostPerHour", summary.billed_per_hour, "None")
        metrics.put("OccupancyCostPerHour", summary.occupancy_per_hour, "None")
        for hw, count in summary.counts.items():
            metrics.put("PlannedInstances", count, Hardware=hw)
        for app in summary.failed_apps:
            metrics.put("PlanningFailures", 1, App=app)
        metrics.put("ShedTargetUnmet", len(summary.unmet_shed_targets))  # no reserve meets it at their rate
        for app in summary.unmet_shed_targets:
            metrics.put("ShedTargetUnmet", 1, App=app)


def _push_queues(deployments: Iterable[Deployment]) -> dict[str, str]:
    """app -> results queue URL of the apps whose results are pushed."""
    return {dep.app: dep.results_queue for dep in deployments if dep.results == "push" and dep.results_queue}
