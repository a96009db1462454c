"""The strategies over the day: adaptive re-planning, static peak provisioning, the oracle, and the
scenario that runs them at every headroom (:func:`run_scenario`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from bench.errors import ScenarioError
from bench.scenario.report import EpochRecord, ScenarioReport, StrategyResult, SweepPoint
from bench.scenario.serving import Served, SimCache, SolveCache, admit, serve_epoch
from planner.fleet import plan_fleet
from planner.packing import pack
from planner.scaling import Hysteresis, forecast_rate, quantise_up

if TYPE_CHECKING:
    from bench.scenario.config import AppTemplate, PolicyConfig
    from bench.scenario.load import DayLoad
    from planner.models import Plan, ProblemSpec
    from planner.packing import FleetPlan


Progress = Callable[[str], None]


@dataclass
class _State:
    """What one strategy has in force: plans per app, packed fleet, instance counts paid for."""

    plans: dict[str, Plan] = field(default_factory=dict)
    problems: dict[str, ProblemSpec] = field(default_factory=dict)
    fleet: FleetPlan | None = None
    paid: dict[str, int] = field(default_factory=dict)


@dataclass
class _Change:
    """What the start of an epoch changed."""

    before: dict[str, int]
    failed: dict[str, str]
    replanned: int
    plan_ms: float


class _Day:
    """The load, one template per app, the policy and the solve cache: what the strategies share."""

    def __init__(
        self,
        load: DayLoad,
        templates: Mapping[str, AppTemplate],
        cfg: PolicyConfig,
        cache: SolveCache | None,
        sims: SimCache | None,
    ) -> None:
        missing = sorted({kind for kind in load.kinds if kind not in templates})
        if missing:
            raise ScenarioError(f"no template for app kind(s) {', '.join(missing)}")
        self.load = load
        self.temps = [templates[kind] for kind in load.kinds]
        self.cfg = cfg
        self.cache = cache if cache is not None else SolveCache(cfg.policy, cfg.solver)
        self.sims = sims if sims is not None else SimCache()
        self.epoch_h = load.epoch_minutes / 60.0

    def forecasts(self) -> np.ndarray:
        """(epochs, apps): the rate each app is planned for at the start of each epoch, from the epoch
        means observed before it (the history before midnight included)."""
        load, cfg = self.load, self.cfg
        n_hist = load.history // load.epoch_minutes
        observed = np.stack([load.epoch_mean(epoch) for epoch in range(-n_hist, load.epochs)])
        out = np.empty((load.epochs, len(load.names)))
        for epoch in range(load.epochs):
            past = observed[max(0, n_hist + epoch - cfg.trend_epochs) : n_hist + epoch]
            for app in range(len(load.names)):
                out[epoch, app] = forecast_rate(
                    past[:, app].tolist(), headroom=cfg.headroom, trend_epochs=cfg.trend_epochs, step=cfg.step
                )
        return out

    def plan(self, state: _State, rates: np.ndarray) -> _Change:
        """Plan and pack every app at ``rates``. An app that cannot be planned keeps the plan in force (it
        is packed with the others), as the control loop does."""
        problems = {
            name: self.temps[app].problem(name, float(rates[app]))
            for app, name in enumerate(self.load.names)
            if rates[app] > 0
        }
        res = plan_fleet(
            problems,
            previous=state.fleet,
            previous_plans=state.plans,
            policy=self.cfg.policy,
            solver=self.cache,
        )
        fleet = res.fleet
        kept = {app: (state.problems[app], state.plans[app]) for app in res.failed if app in state.plans}
        state.plans = {**{app: plan for app, (_, plan) in kept.items()}, **res.plans}
        state.problems = {
            **{app: problem for app, (problem, _) in kept.items()},
            **{app: problems[app] for app in res.plans},
        }
        if kept:
            fleet = pack(
                {app: (state.problems[app], state.plans[app]) for app in state.plans}, previous=state.fleet
            )
        state.fleet = fleet
        return _Change(
            dict(state.paid), dict(res.failed), len(res.plans) - len(res.reused), res.solve_ms + res.pack_ms
        )

    def serve(self, state: _State, epoch: int) -> tuple[Served, str, float]:
        """Every app's epoch: the total, the worst app and its attainment. The epoch's simulations are
        prefetched together (the runner may run them in parallel). The simulator's seed depends on the
        day's seed, the epoch and the app only, so strategies see the same arrivals."""
        block = self.load.epoch_minutes_of(epoch)
        seeds = [
            (self.load.config.seed * 1_000_003 + epoch * 9_973 + app) % 2**32 for app in range(len(block))
        ]
        wall = self.sims.wall_s
        if self.cfg.simulate:
            tasks: list[tuple[ProblemSpec, Plan, PolicyConfig, int]] = []
            for app, name in enumerate(self.load.names):
                plan = state.plans.get(name)
                if plan is not None:
                    _, _, levels = admit(self.temps[app], plan, block[app], self.cfg)
                    tasks.extend(
                        (self.temps[app].problem(name, level), plan, self.cfg, seeds[app])
                        for level in sorted({float(level) for level in levels if level > 0})
                    )
            self.sims.prefetch(tasks)
        total = Served()
        worst, worst_att = "", 1.0
        for app, name in enumerate(self.load.names):
            served = serve_epoch(
                self.temps[app],
                name,
                state.plans.get(name),
                block[app],
                self.cfg,
                seed=seeds[app],
                sims=self.sims,
            )
            att = served.within / served.offered if served.offered > 0 else 1.0
            if att < worst_att:
                worst, worst_att = name, att
            total.add(served)
        total.sim_s = self.sims.wall_s - wall
        return total, worst, worst_att

    def record(
        self,
        epoch: int,
        state: _State,
        planned: np.ndarray,
        served: tuple[Served, str, float],
        change: _Change,
    ) -> EpochRecord:
        total, worst, worst_att = served
        fleet = state.fleet
        if fleet is None:
            raise ScenarioError(f"epoch {epoch}: no fleet planned")
        admitted = total.offered - total.shed
        hws = set(state.paid) | set(change.before)
        deltas = [state.paid.get(hw, 0) - change.before.get(hw, 0) for hw in hws]
        return EpochRecord(
            epoch=epoch,
            start_h=epoch * self.epoch_h,
            offered_rps=float(self.load.epoch_mean(epoch).sum()),
            busiest_rps=float(self.load.epoch_peak(epoch).sum()),
            planned_rps=float(planned.sum()),
            capacity_rps=total.capacity,
            billed_per_hour=sum(fleet.prices.get(hw, 0.0) * count for hw, count in state.paid.items()),
            packed_per_hour=fleet.billed_per_hour,
            occupancy_per_hour=fleet.occupancy_per_hour,
            instances={hw: count for hw, count in sorted(state.paid.items()) if count},
            scale_changes=sum(1 for delta in deltas if delta),
            launched=sum(delta for delta in deltas if delta > 0),
            terminated=-sum(delta for delta in deltas if delta < 0),
            replanned=change.replanned,
            failed=change.failed,
            offered=total.offered,
            shed=total.shed,
            within_slo=total.within,
            slo_attainment=total.within / total.offered if total.offered > 0 else 1.0,
            admitted_attainment=total.within / admitted if admitted > 0 else 1.0,
            worst_app=worst,
            worst_app_attainment=worst_att,
            p99_s=total.p99_s,
            plan_ms=change.plan_ms,
            sim_s=total.sim_s,
        )

    def summary(self, name: str, records: list[EpochRecord]) -> StrategyResult:
        offered = sum(record.offered for record in records)
        within = sum(record.within_slo for record in records)
        return StrategyResult(
            name=name,
            headroom=self.cfg.headroom,
            simulated=self.cfg.simulate,
            billed_usd=sum(record.billed_per_hour for record in records) * self.epoch_h,
            occupancy_usd=sum(record.occupancy_per_hour for record in records) * self.epoch_h,
            offered=offered,
            shed=sum(record.shed for record in records),
            within_slo=within,
            slo_attainment=within / offered if offered > 0 else 1.0,
            scale_changes=sum(record.scale_changes for record in records[1:]),
            launched=sum(record.launched for record in records[1:]),
            terminated=sum(record.terminated for record in records[1:]),
            peak_instances=max((sum(record.instances.values()) for record in records), default=0),
            plan_s=sum(record.plan_ms for record in records) / 1000,
            sim_s=sum(record.sim_s for record in records),
            epochs=records,
        )


def run_adaptive(
    load: DayLoad,
    templates: Mapping[str, AppTemplate],
    cfg: PolicyConfig,
    *,
    cache: SolveCache | None = None,
    sims: SimCache | None = None,
    progress: Progress | None = None,
) -> StrategyResult:
    """Re-plan every epoch from the forecast of past epochs; hysteresis on the paid instance counts."""
    day = _Day(load, templates, cfg, cache, sims)
    forecasts = day.forecasts()
    state = _State()
    hysteresis = Hysteresis(down_epochs=cfg.down_epochs, min_gap_epochs=cfg.min_gap_epochs)
    records: list[EpochRecord] = []
    for epoch in range(load.epochs):
        change = day.plan(state, forecasts[epoch])
        assert state.fleet is not None
        state.paid = hysteresis.desired(state.fleet.counts(), change.before, epoch)
        records.append(day.record(epoch, state, forecasts[epoch], day.serve(state, epoch), change))
        if progress is not None:
            progress(f"adaptive, headroom {cfg.headroom:g}")
    return day.summary("adaptive", records)


def run_static(
    load: DayLoad,
    templates: Mapping[str, AppTemplate],
    cfg: PolicyConfig,
    *,
    cache: SolveCache | None = None,
    sims: SimCache | None = None,
    progress: Progress | None = None,
) -> StrategyResult:
    """One fleet at every app's largest forecast of the day (same forecaster and headroom), held all day."""
    day = _Day(load, templates, cfg, cache, sims)
    peak = day.forecasts().max(axis=0)
    state = _State()
    change = day.plan(state, peak)
    assert state.fleet is not None
    state.paid = state.fleet.counts()
    records: list[EpochRecord] = []
    for epoch in range(load.epochs):
        first = change if epoch == 0 else _Change(dict(state.paid), {}, 0, 0.0)
        records.append(day.record(epoch, state, peak, day.serve(state, epoch), first))
        if progress is not None:
            progress(f"static, headroom {cfg.headroom:g}")
    return day.summary("static", records)


def run_oracle(
    load: DayLoad,
    templates: Mapping[str, AppTemplate],
    cfg: PolicyConfig,
    *,
    cache: SolveCache | None = None,
    sims: SimCache | None = None,
    progress: Progress | None = None,
) -> StrategyResult:
    """Every epoch planned at each app's true busiest minute of that epoch, rounded up to the forecast's
    rate grid (no forecast error, no headroom, no hysteresis): what re-planning costs with perfect
    foresight. Latency is simulated only when ``cfg.simulate``."""
    day = _Day(load, templates, cfg.model_copy(update={"headroom": 0.0}), cache, sims)
    state = _State()
    records: list[EpochRecord] = []
    for epoch in range(load.epochs):
        rates = np.array([quantise_up(float(rate), cfg.step) for rate in load.epoch_peak(epoch)])
        change = day.plan(state, rates)
        assert state.fleet is not None
        state.paid = state.fleet.counts()
        records.append(day.record(epoch, state, rates, day.serve(state, epoch), change))
        if progress is not None:
            progress("oracle")
    return day.summary("oracle", records)


def total_steps(load: DayLoad, headrooms: Sequence[float], oracle: bool) -> int:
    """Progress steps :func:`run_scenario` reports (one per epoch of each strategy run)."""
    return load.epochs * (2 * max(1, len(set(headrooms))) + 1 + int(oracle))


def run_scenario(
    load: DayLoad,
    templates: Mapping[str, AppTemplate],
    cfg: PolicyConfig,
    *,
    headrooms: Sequence[float] = (),
    target: float = 0.99,
    oracle: bool = True,
    cache: SolveCache | None = None,
    sims: SimCache | None = None,
    progress: Progress | None = None,
) -> ScenarioReport:
    """The adaptive day at every headroom of ``headrooms`` (default: ``cfg.headroom`` alone), each with the
    cost of static peak provisioning at the same headroom; the chosen headroom is the smallest whose
    adaptive day keeps ``target`` of the frames within the SLO (else the one with the best attainment). At
    the chosen headroom the static day is simulated too; the oracle is costed only."""
    if not 0 < target <= 1:
        raise ScenarioError(f"target attainment must be in (0, 1], got {target}")
    cache = cache if cache is not None else SolveCache(cfg.policy, cfg.solver)
    sims = sims if sims is not None else SimCache()
    values = sorted(set(headrooms)) or [cfg.headroom]
    runs: dict[float, tuple[StrategyResult, StrategyResult]] = {}
    for headroom in values:
        settings = cfg.model_copy(update={"headroom": headroom})
        adaptive = run_adaptive(load, templates, settings, cache=cache, sims=sims, progress=progress)
        cost_only = settings.model_copy(update={"simulate": False})
        runs[headroom] = (
            adaptive,
            run_static(load, templates, cost_only, cache=cache, sims=sims, progress=progress),
        )
    sweep = [_point(headroom, *runs[headroom]) for headroom in values]
    good = [point for point in sweep if point.slo_attainment >= target]
    chosen = good[0] if good else max(sweep, key=lambda point: (point.slo_attainment, -point.headroom))
    settings = cfg.model_copy(update={"headroom": chosen.headroom})
    adaptive, static = runs[chosen.headroom]
    if cfg.simulate:
        static = run_static(load, templates, settings, cache=cache, sims=sims, progress=progress)
    orc = None
    if oracle:
        cost_only = cfg.model_copy(update={"simulate": False})
        orc = run_oracle(load, templates, cost_only, cache=cache, sims=sims, progress=progress)
    total = load.total()
    return ScenarioReport(
        load=load.config,
        policy=settings,
        apps=[
            {
                "name": name,
                "kind": kind,
                "share": float(load.shares[i]),
                "peak_rps": float(load.rates[i, load.history :].max()),
            }
            for i, (name, kind) in enumerate(zip(load.names, load.kinds, strict=True))
        ],
        burst=dict(load.burst),
        minute_total_rps=[float(rps) for rps in total],
        adaptive=adaptive,
        static=static,
        oracle=orc,
        sweep=sweep,
        target_attainment=target,
        target_met=bool(good),
        saving=1 - adaptive.billed_usd / static.billed_usd if static.billed_usd > 0 else 0.0,
        solves=cache.misses,
        solve_cache_hits=cache.hits,
        simulations=sims.misses,
        simulation_cache_hits=sims.hits,
    )


def _point(headroom: float, adaptive: StrategyResult, static: StrategyResult) -> SweepPoint:
    return SweepPoint(
        headroom=headroom,
        adaptive_usd=adaptive.billed_usd,
        static_usd=static.billed_usd,
        saving=1 - adaptive.billed_usd / static.billed_usd if static.billed_usd > 0 else 0.0,
        slo_attainment=adaptive.slo_attainment,
        shed_fraction=adaptive.shed / adaptive.offered if adaptive.offered > 0 else 0.0,
        scale_changes=adaptive.scale_changes,
    )
