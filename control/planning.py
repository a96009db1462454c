"""The epoch's decisions, as functions of what it read (no AWS call here): the rate to plan each app
for, its problem, the dispatch-aware solver, the plans of apps that keep the version in force, when a
new version activates, the fleet size the version asks for, and the published reason. The
:class:`~control.epoch.Controller` reads the snapshot, calls these and applies the outcome."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import planner.robust
from control.objective import AllInPricing, plan_all_in
from control.problems import app_problem, machine_count, solve_within_caps
from control.registration.checks import floor_plan_rate
from planner.models import ModuleSpec, ProblemSpec, ProfileEntry
from planner.packing import pack
from planner.scaling import forecast_rate

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from control.config import ControlConfig
    from control.registration.store import AppRecord
    from control.spec import RegistrationSpec
    from control.state import ControlState
    from core.adapters.autoscaling import GroupState
    from core.adapters.plan_store import Manifest
    from core.adapters.rates import RateWindow
    from core.schema import Deployment
    from planner.dispatch import DispatchSchedule
    from planner.models import HardwareSpec, Plan
    from planner.packing import FleetPlan

__all__ = [
    "PlanInputs",
    "Planned",
    "activation_times",
    "bounded_desired",
    "dispatch_solver",
    "over_caps",
    "plan_inputs",
    "planned_rate",
    "publish_reason",
    "realised",
    "repack",
    "scale_target",
    "standin_problem",
]


@dataclass
class Planned:
    """The outcome of planning (before anything is written)."""

    plans: dict[str, Plan]
    rates: dict[str, float]
    fleet: FleetPlan
    failed: dict[str, str]
    solve_ms: float
    pack_ms: float
    kept: set[str] = field(default_factory=set)  # apps that failed and keep the deployment in force


@dataclass
class PlanInputs:
    """Each app's rate to plan for and its problem (apps whose problem cannot be built: ``failed``);
    ``rates`` holds what the epoch reports per app (observed, planned, backlog)."""

    rates: dict[str, float] = field(default_factory=dict)
    problems: dict[str, ProblemSpec] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    report: dict[str, dict[str, float]] = field(default_factory=dict)


def realised(plan: Plan) -> bool:
    """A plan the dispatch-aware solve made (plans published before it are solved again)."""
    return bool((plan.model_extra or {}).get("dispatch_realised"))


def planned_rate(
    spec: RegistrationSpec,
    record: AppRecord,
    history: list[float],
    observed_since: float,
    *,
    headroom: float,
    trend_epochs: int,
) -> float:
    """The rate to plan an app for: the forecast of its observed history (the registered rate until
    it has been observed for a whole window), never below its floor with the same headroom."""
    if not history or record.registered_at > observed_since:
        history = [spec.rate]  # not observed for a whole window yet: the registered rate
    floor = floor_plan_rate(spec, headroom)  # the floor with the same headroom as any rate
    return max(forecast_rate(history, headroom=headroom, trend_epochs=trend_epochs), floor)


def plan_inputs(
    apps: Mapping[str, tuple[AppRecord, RegistrationSpec]],
    seen: Mapping[str, tuple[float, float | None]],
    window: RateWindow,
    state: ControlState,
    config: ControlConfig,
    catalog: Mapping[str, HardwareSpec],
    available: list[str] | None,
) -> PlanInputs:
    """Every app's rate and problem from its observed rate in ``window`` (``seen``: app -> (frames/s,
    time of its first frames or None)). Updates the state's rate history (once per window), takes the
    backlog corrections (they apply to this epoch only) and records the window observed."""
    observed = {app: rate for app, (rate, _) in seen.items()}
    out = PlanInputs()
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
            del hist[: -config.history_len]
        rate = planned_rate(
            spec, record, hist, window.start, headroom=config.headroom, trend_epochs=config.trend_epochs
        )
        out.rates[name] = rate
        out.report[name] = {"observed": round(observed.get(name, 0.0), 4), "planned": round(rate, 4)}
        if starting and first is not None:  # the seconds of the window before the first frames
            out.report[name]["first_frames_after_s"] = round(first - window.start, 3)
        if boosts.get(name, 0.0) > rate:
            out.rates[name] = boosts[name]
            out.report[name].update(planned=round(boosts[name], 4), backlog=round(boosts[name], 4))
        try:
            out.problems[name] = app_problem(
                spec,
                out.rates[name],
                catalog,
                available,
                config.hop_overhead_s + config.batch_overhead_s,
                state.corrections.get(name),
                hops={
                    module: hop + config.batch_overhead_s for module, hop in state.hops.get(name, {}).items()
                },
                derived_margin=config.derived_margin,
            )
        except ValueError as exc:
            out.failed[name] = str(exc).splitlines()[0]
    state.observed_until = max(window.end, state.observed_until or window.end)
    return out


def over_caps(plans: Mapping[str, Plan], caps: Mapping[str, int]) -> set[str]:
    """Apps whose plan uses more machines of a capped hardware class than ``caps`` allows."""
    return {
        app
        for app, plan in plans.items()
        for hw, cap in caps.items()
        if sum(machine_count(plan, hw).values()) > cap
    }


def dispatch_solver(config: ControlConfig, pushed: frozenset[str] = frozenset()) -> Callable[..., Plan]:
    """The epoch's solve for ``plan_fleet``: the dispatch-aware solve (docs/dispatch.md), each module's
    worst case being what the time-window dispatch realises (schedule bound, bursts of at most
    ``max_children_per_request`` children per parent request), children given the spread capacity
    their bursts need, and the plan recording ``dispatch.spread_rate`` for the data plane. Its
    ``schedules``: plan_fleet's dict for the app (the schedules the solve builds are reused when its
    shapes are realised); ``first_found``: the solve's quick mode, which plan_fleet asks for when a
    budgeted epoch has more apps without a plan than it can solve in full (they are solved in full in
    later epochs). With ``machine_caps``, within them (:func:`control.problems.solve_within_caps`). With
    ``objective = "all-in"``, the plan of least fleet + data plane among the batch floors
    (:func:`control.objective.plan_all_in`), the data plane of an app in ``pushed`` (its spec's
    ``"results": "push"``; ``problem.name`` is the app) priced with its records on its results queue.

    Each solve runs within the epoch's ``solve_budget_s`` of CPU (this thread; none when it is None or
    0): past it the solver's anytime mode keeps the best plan found, with the gap its search proved
    (the plan's ``lower_bound_per_hour`` and ``proven_gap``, shown by ``skinflint status``)."""

    def solver(
        problem: ProblemSpec,
        *,
        schedules: dict[tuple[object, ...], DispatchSchedule] | None = None,
        first_found: bool = False,
    ) -> Plan:
        budget = config.solve_budget_s
        deadline = time.thread_time() + budget if budget else None

        def out_of_budget() -> bool:
            return deadline is not None and time.thread_time() >= deadline

        def solve(problem: ProblemSpec) -> Plan:
            return planner.robust.solve_dispatchable(
                problem,
                policy=config.policy,
                objective="billed",
                child_headroom=config.child_headroom,
                schedules=schedules,
                first_found=first_found,
                should_stop=out_of_budget if deadline is not None else None,
            )

        def solve_capped(problem: ProblemSpec) -> Plan:
            if not config.machine_caps:
                return solve(problem)
            return solve_within_caps(problem, solve, config.machine_caps)[0]  # the plan

        if pricing is None or first_found:  # the quick mode stays quick: floors in the full solve
            return solve_capped(problem)
        return plan_all_in(solve_capped, problem, pricing[problem.name in pushed])

    pricing = (
        {
            push: AllInPricing(
                config.data_plane_policy,
                config.frame_kb,
                config.frames_per_post,
                results="push" if push else "pull",
            )
            for push in (False, True)
        }
        if config.objective == "all-in"
        else None
    )
    return solver


def standin_problem(dep: Deployment, catalog: Mapping[str, HardwareSpec]) -> ProblemSpec:
    """A problem that prices the hardware of a kept plan (packing reads prices only)."""
    modules = {
        module: ModuleSpec(
            rate=max(sum(group.machines * group.rate_per_machine for group in mp.groups), 1e-9),
            profile=[
                ProfileEntry(
                    hardware=group.hardware,
                    batch=group.batch,
                    concurrency=group.concurrency,
                    duration_s=group.duration_s,
                )
                for group in mp.groups
            ],
        )
        for module, mp in dep.plan.modules.items()
    }
    used = {entry.hardware for ms in modules.values() for entry in ms.profile}
    return ProblemSpec(
        name=dep.app,
        slo_s=dep.planning_slo_s or dep.slo_s,
        hardware={hw: catalog[hw] for hw in used},
        modules=modules,
        edges=[(source, target) for source, target, _ in dep.edges],
    )


def repack(
    problems: Mapping[str, ProblemSpec],
    plans: Mapping[str, Plan],
    kept: Mapping[str, Deployment],
    previous: FleetPlan | None,
    catalog: Mapping[str, HardwareSpec],
) -> FleetPlan:
    """The packing of the new plans with the kept apps' plans in force."""
    apps: dict[str, tuple[ProblemSpec, Plan]] = {app: (problems[app], plans[app]) for app in plans}
    for app, dep in kept.items():
        apps[app] = (standin_problem(dep, catalog), dep.plan)
    return pack(apps, previous=previous)


def activation_times(
    now: float, current: Manifest | None, config: ControlConfig
) -> tuple[float, float | None]:
    """(activate_at, activate_by) of a version published at ``now``. The first version is served
    at once (nothing else is). A later one is gated: published at its deadline, ``now +
    activate_max_lead_s``, moved earlier when its slots are served; one that supersedes a version
    still waiting keeps that version's deadline (at least ``activate_lead_s`` away), so a run of
    epochs publishing while the fleet grows cannot hold the front on an old plan indefinitely."""
    if current is None or config.activate_max_lead_s <= config.activate_lead_s:
        return now + config.activate_lead_s, None
    by = now + config.activate_max_lead_s
    if current.activate_by is not None and now < current.activate_at:
        by = min(by, max(current.activate_by, now + config.activate_lead_s))
    return by, by


def publish_reason(
    reason: str, requested: set[str], changed: Mapping[str, list[str]], removed: list[str]
) -> str:
    parts = [reason]
    if requested:
        parts.append("registered: " + ", ".join(sorted(requested)))
    if changed:
        parts.append("changed: " + ", ".join(sorted(changed)))
    if removed:
        parts.append("removed: " + ", ".join(removed))
    return "; ".join(parts)


def scale_target(
    current: Manifest, before: Manifest | None, groups: Mapping[str, GroupState], served: int
) -> dict[str, int]:
    """Instances per group the version in force asks for; while it is not active yet (``served`` is
    another version: ``before``), never below what the version served needs."""
    target = {hw: count for hw, count in current.counts.items() if hw in groups}
    if served != current.version:  # not active yet: the instances of the version served stay
        for hw, count in (before.counts if before is not None else {}).items():
            if hw in groups:
                target[hw] = max(target.get(hw, 0), count)
    return target


def bounded_desired(
    hw: str, want: int, group: GroupState, state: ControlState, now: float, warnings: list[str]
) -> int:
    """``want`` within the group's size bounds, and no more than it has in service while its
    hardware cannot be had (stop asking for capacity EC2 cannot give)."""
    desired = max(group.min_size, want)
    if desired > group.max_size:
        warnings.append(f"{hw}: the plan wants {desired} instances, the group allows {group.max_size}")
        desired = group.max_size
    if state.unavailable.get(hw, 0.0) > now:
        desired = min(desired, group.in_service)  # stop asking for capacity EC2 cannot give
    return desired
