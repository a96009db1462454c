"""A day of diurnal load over many apps, re-planned every epoch, run through the simulator (pure, seeded).

docs/scale.md has the method and the measured figures. In short:

- **Load** (:func:`make_load`): ``apps`` apps, each one of the demo application DAGs, with Zipf rate shares,
  a smooth diurnal curve per app (night trough, morning ramp, midday plateau, evening peak; each app shifted
  by up to +-1.5 h), AR(1) log-normal noise per minute and a flash crowd on a few apps (``burst_factor`` x
  for ``burst_minutes``). Rates are per minute; the total's busiest minute of the day is ``peak_rps``
  frames/s exactly. The minutes before midnight are generated too, as the history of the first epochs.
- **Adaptive** (:func:`run_adaptive`): at the start of every epoch each app's rate to plan for is
  :func:`~planner.scaling.forecast_rate` of the epoch means observed so far (trend + headroom, quantised);
  :func:`~planner.fleet.plan_fleet` plans and packs every app (previous plans and fleet passed in, so an
  unchanged app keeps its plan and its slots); :class:`~planner.scaling.Hysteresis` turns the packed
  instance counts into the counts that are paid for.
- **Static** (:func:`run_static`): one fleet planned at every app's largest forecast of the day (the same
  forecaster and headroom: the day's peak forecast), held all day.
- **Oracle** (:func:`run_oracle`, cost only): every epoch planned at each app's true busiest minute (on the
  forecast's rate grid), no headroom, no hysteresis: what re-planning would cost with perfect foresight.
- **Serving an epoch** (:func:`serve_epoch`): admission control sheds the frames above the plan's capacity
  (the smallest over modules of planned rate / requests per frame), minute by minute (fluid accounting).
  The admitted minutes are simulated at two load levels, the epoch's median and busiest minute rounded up on
  a grid of the capacity (:func:`load_levels`), ``sample_s`` seconds each; a minute's admitted frames are
  within the SLO in the proportion the simulator measured at its level (fraction of root-to-leaf path
  instances within the SLO). Simulations are memoised (:class:`SimCache`), solves too (:class:`SolveCache`).

What is not simulated: instance boot and model load times at a plan change, the transition between two
epochs' plans, co-location waits on shared instances (the packer's bound covers them; the simulator runs
each app on its own machines), queue state carried across epochs, network hops.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from planner.errors import PlannerError
from planner.fleet import plan_fleet
from planner.packing import pack
from planner.robust import solve_dispatchable
from planner.scaling import Hysteresis, forecast_rate, quantise_up
from planner.simulator import simulate
from planner.solve import solve

if TYPE_CHECKING:
    from planner.models import AppSpec, HardwareSpec, Plan, ProblemSpec, ProfileEntry
    from planner.packing import FleetPlan

__all__ = [
    "AppTemplate",
    "DayLoad",
    "EpochRecord",
    "LoadConfig",
    "PolicyConfig",
    "Runner",
    "ScenarioError",
    "ScenarioReport",
    "SimCache",
    "SimOutcome",
    "SimTask",
    "SolveCache",
    "StrategyResult",
    "SweepPoint",
    "diurnal_shape",
    "load_levels",
    "make_load",
    "plan_capacity",
    "run_adaptive",
    "run_oracle",
    "run_scenario",
    "run_static",
    "serve_epoch",
    "simulate_task",
    "total_steps",
]

MINUTES_PER_DAY = 1440
#: Diurnal knots (hour, fraction of the daily peak) before the trough is applied: night low at 04:00,
#: morning ramp 06:00-09:00, midday plateau, evening peak at 20:00. Smoothstep between knots.
_KNOTS: tuple[tuple[float, float], ...] = (
    (0.0, 0.42),
    (4.0, 0.0),  # replaced by the trough
    (6.0, 0.08),
    (9.0, 0.72),
    (12.0, 0.84),
    (14.5, 0.78),
    (17.0, 0.86),
    (20.0, 1.0),
    (22.0, 0.74),
    (24.0, 0.42),
)
_NOISE_PHI = 0.95  # AR(1) coefficient per minute of the log-rate noise (about 20 min memory)
_MAX_SHIFT_H = 1.5  # apps' diurnal curves are shifted by up to this many hours (time zones, habits)

Progress = Callable[[str], None]


class ScenarioError(PlannerError):
    """Bad scenario settings (epochs that do not divide the day, no app templates, bad numbers)."""


# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class AppTemplate:
    """An application kind (DAG, per-model profiles, hardware catalog) that apps are instances of."""

    kind: str
    spec: AppSpec
    profiles: Mapping[str, list[ProfileEntry]]
    hardware: Mapping[str, HardwareSpec]

    def problem(self, name: str, frame_rate: float) -> ProblemSpec:
        """The planning problem of an app of this kind at ``frame_rate`` frames/s (hardware limited to the
        classes some module has a profile on, as :func:`profiles.store.load_problem` does)."""
        used = {e.hardware for es in self.profiles.values() for e in es if e.hardware in self.hardware}
        hw = {h: s for h, s in self.hardware.items() if h in used}
        return self.spec.to_problem(frame_rate, dict(self.profiles), hw).model_copy(update={"name": name})

    def per_frame(self) -> dict[str, float]:
        """Requests each module receives per frame (the roots get one)."""
        return self.spec.module_rates(1.0)


class LoadConfig(BaseModel):
    """The day's load. ``peak_rps`` is frames/s at the front, summed over apps, in the busiest minute."""

    model_config = ConfigDict(frozen=True)

    apps: int = Field(default=24, ge=1, le=10_000)
    peak_rps: float = Field(default=100_000.0, gt=0)
    epochs: int = Field(default=96, ge=1, le=MINUTES_PER_DAY)
    seed: int = 0
    trough: float = Field(default=0.15, gt=0, lt=1, description="night low / evening peak of one app")
    noise: float = Field(default=0.06, ge=0, lt=1, description="sd of the per-minute log-rate noise")
    zipf: float = Field(default=1.0, ge=0, description="rate share of the k-th app ~ 1 / k ** zipf")
    burst_factor: float = Field(default=2.0, ge=1)
    burst_minutes: int = Field(default=30, ge=0, le=MINUTES_PER_DAY)
    burst_apps: int = Field(default=3, ge=0)
    history_epochs: int = Field(default=8, ge=1, description="epochs before midnight given as history")

    @model_validator(mode="after")
    def _check(self) -> LoadConfig:
        if MINUTES_PER_DAY % self.epochs:
            raise ValueError(f"epochs must divide the day's {MINUTES_PER_DAY} minutes, got {self.epochs}")
        return self

    @property
    def epoch_minutes(self) -> int:
        return MINUTES_PER_DAY // self.epochs


class PolicyConfig(BaseModel):
    """How the fleet is planned and how an epoch is served (see the module doc)."""

    model_config = ConfigDict(frozen=True)

    headroom: float = Field(default=0.1, ge=0, le=5)
    trend_epochs: int = Field(default=5, ge=1)
    step: float = Field(default=0.05, ge=0, description="relative grid of planned rates (forecast_rate)")
    down_epochs: int = Field(default=2, ge=1)
    min_gap_epochs: int = Field(default=2, ge=1)
    sample_s: float = Field(default=4.0, gt=0, le=3600, description="simulated seconds per app per epoch")
    sim_grid: float = Field(
        default=0.025,
        ge=0,
        lt=1,
        description="simulated rates are rounded up to this grid of the plan's capacity (0: every minute "
        "simulated at its own rate)",
    )
    arrivals: Literal["uniform", "poisson", "bursty"] = "uniform"
    policy: str = "skinflint"
    solver: Literal["plain", "dispatchable"] = Field(
        default="plain", description="planner.solve.solve, or planner.robust.solve_dispatchable"
    )
    simulate: bool = True


class SolveCache:
    """The solver ``plan_fleet`` calls, memoised on the problem (its name left out): apps of one kind
    planned at one rate level (forecasts are quantised) share one solve, across epochs, strategies and
    headrooms. Returns a deep copy (``plan_fleet`` annotates the plan it receives)."""

    def __init__(self, policy: str = "skinflint", solver: str = "plain") -> None:
        self.policy = policy
        self.solver = solver
        self.hits = 0
        self.misses = 0
        self._plans: dict[str, Plan | PlannerError] = {}

    def __call__(self, problem: ProblemSpec) -> Plan:
        key = problem.model_dump_json(exclude={"name"})
        found = self._plans.get(key)
        if found is None:
            self.misses += 1
            try:
                found = self._solve(problem)
            except PlannerError as exc:
                found = exc
            self._plans[key] = found
        else:
            self.hits += 1
        if isinstance(found, PlannerError):
            raise found
        return found.model_copy(deep=True)

    def _solve(self, problem: ProblemSpec) -> Plan:
        if self.solver == "dispatchable":
            return solve_dispatchable(problem, policy=self.policy, objective="billed")
        return solve(problem, policy=self.policy, objective="billed")


# --------------------------------------------------------------------------- load


def diurnal_shape(hours: np.ndarray, trough: float = 0.15) -> np.ndarray:
    """Fraction of the daily peak at each hour of day (periodic, smoothstep between :data:`_KNOTS`)."""
    xs = np.array([k[0] for k in _KNOTS])
    ys = np.array([trough if k[1] == 0.0 else trough + (1 - trough) * k[1] for k in _KNOTS])
    h = np.mod(hours, 24.0)
    i = np.clip(np.searchsorted(xs, h, side="right") - 1, 0, len(xs) - 2)
    s = (h - xs[i]) / (xs[i + 1] - xs[i])
    s = s * s * (3 - 2 * s)
    out: np.ndarray = ys[i] + (ys[i + 1] - ys[i]) * s
    return out


@dataclass
class DayLoad:
    """Per-app frame rates (frames/s) per minute; column ``history`` is midnight."""

    names: list[str]
    kinds: list[str]
    shares: np.ndarray  # mean share of each app
    rates: np.ndarray  # (apps, history + 1440) frames/s
    history: int  # minutes before midnight
    epoch_minutes: int
    config: LoadConfig
    burst: dict[str, object] = field(default_factory=dict)

    @property
    def epochs(self) -> int:
        return MINUTES_PER_DAY // self.epoch_minutes

    def _cols(self, epoch: int) -> slice:
        start = self.history + epoch * self.epoch_minutes
        return slice(start, start + self.epoch_minutes)

    def epoch_mean(self, epoch: int) -> np.ndarray:
        """Each app's mean rate in ``epoch`` (negative epochs: the history before midnight)."""
        mean: np.ndarray = self.rates[:, self._cols(epoch)].mean(axis=1)
        return mean

    def epoch_peak(self, epoch: int) -> np.ndarray:
        peak: np.ndarray = self.rates[:, self._cols(epoch)].max(axis=1)
        return peak

    def epoch_minutes_of(self, epoch: int) -> np.ndarray:
        """(apps, minutes) rates of the epoch's minutes."""
        block: np.ndarray = self.rates[:, self._cols(epoch)]
        return block

    def total(self) -> np.ndarray:
        """Total frames/s per minute of the day (history excluded)."""
        tot: np.ndarray = self.rates[:, self.history :].sum(axis=0)
        return tot


def make_load(cfg: LoadConfig, kinds: Sequence[str]) -> DayLoad:
    """The day's load for ``cfg.apps`` apps whose kinds cycle through ``kinds`` (seeded shuffle)."""
    if not kinds:
        raise ScenarioError("no application kinds to build apps from")
    rng = np.random.default_rng(cfg.seed)
    n = cfg.apps
    order = [kinds[int(i)] for i in rng.permutation(len(kinds))]
    app_kinds = [order[i % len(order)] for i in range(n)]
    names = [f"{k}-{i:02d}" for i, k in enumerate(app_kinds)]
    weights = 1.0 / np.arange(1, n + 1) ** cfg.zipf
    shares = weights / weights.sum()
    history = cfg.history_epochs * cfg.epoch_minutes
    minutes = np.arange(-history, MINUTES_PER_DAY)
    hours = minutes / 60.0
    shift = rng.uniform(-_MAX_SHIFT_H, _MAX_SHIFT_H, n)
    trough = np.clip(cfg.trough * rng.uniform(0.7, 1.3, n), 0.01, 0.95)
    base = np.stack([diurnal_shape(hours - shift[i], float(trough[i])) for i in range(n)])
    noise = np.zeros((n, len(minutes)))
    eps = rng.standard_normal((n, len(minutes))) * cfg.noise * math.sqrt(1 - _NOISE_PHI**2)
    noise[:, 0] = rng.standard_normal(n) * cfg.noise
    for t in range(1, len(minutes)):
        noise[:, t] = _NOISE_PHI * noise[:, t - 1] + eps[:, t]
    rates = shares[:, None] * base * np.exp(noise - cfg.noise**2 / 2)
    burst = _add_burst(rates, rng, cfg, history, names)
    day = rates[:, history:].sum(axis=0)
    rates *= cfg.peak_rps / float(day.max())
    return DayLoad(names, app_kinds, shares, rates, history, cfg.epoch_minutes, cfg, burst)


def _add_burst(
    rates: np.ndarray, rng: np.random.Generator, cfg: LoadConfig, history: int, names: list[str]
) -> dict[str, object]:
    """A flash crowd on ``burst_apps`` apps (not the largest): 5-minute ramp up, hold, 10-minute ramp down,
    starting at a seeded minute between 10:00 and 18:00. In place; returns its description."""
    k = min(cfg.burst_apps, max(0, len(names) - 1))
    if k == 0 or cfg.burst_minutes == 0 or cfg.burst_factor == 1:
        return {}
    hit = sorted(int(i) for i in rng.choice(np.arange(1, len(names)), size=k, replace=False))
    start = int(rng.integers(600, 1080))
    t = np.arange(rates.shape[1]) - history - start
    up, down = 5.0, 10.0
    ramp = np.clip(np.minimum((t + 1) / up, (cfg.burst_minutes + down - t) / down), 0.0, 1.0)
    rates[hit] *= 1 + (cfg.burst_factor - 1) * ramp
    return {
        "apps": [names[i] for i in hit],
        "start_minute": start,
        "minutes": cfg.burst_minutes,
        "factor": cfg.burst_factor,
    }


# --------------------------------------------------------------------------- serving one epoch


def plan_capacity(plan: Plan, per_frame: Mapping[str, float]) -> float:
    """Frames/s the plan carries: the smallest over modules of planned rate (dummy included) divided by
    the module's requests per frame."""
    cap = math.inf
    for m, mp in plan.modules.items():
        k = per_frame.get(m, 0.0)
        if k > 0:
            cap = min(cap, sum(g.machines * g.rate_per_machine for g in mp.groups) / k)
    return cap


@dataclass
class Served:
    """Frames of one app in one epoch: offered, shed by admission, admitted and within the SLO."""

    offered: float = 0.0
    shed: float = 0.0
    within: float = 0.0
    capacity: float = 0.0  # frames/s the plan carries
    simulated: int = 0  # path instances the simulator measured
    attainment: float = 1.0  # of the admitted frames (simulated)
    p99_s: float = 0.0
    sim_s: float = 0.0

    def add(self, other: Served) -> None:
        self.offered += other.offered
        self.shed += other.shed
        self.within += other.within
        self.capacity += other.capacity
        self.simulated += other.simulated
        self.sim_s += other.sim_s
        self.p99_s = max(self.p99_s, other.p99_s)


@dataclass(frozen=True)
class SimOutcome:
    """What one simulation measured: end-to-end path instances, their SLO attainment (of the frames the
    front's window admission took), p99 (s), the wall time it took (s), and the fraction of frames the
    window admission shed (0 under uniform arrivals, simulated without it)."""

    paths: int
    attainment: float
    p99_s: float
    wall_s: float
    shed: float = 0.0


#: One simulation: (problem at the simulated rate, plan, seconds, arrivals, seed).
SimTask = tuple["ProblemSpec", "Plan", float, str, int]
#: Runs simulations (in order); the CLI passes a process pool's map.
Runner = Callable[[list[SimTask]], list[SimOutcome]]


def simulate_task(task: SimTask) -> SimOutcome:
    """Run one :data:`SimTask` (a module-level function, so a process pool can run it)."""
    problem, plan, sample_s, arrivals, seed = task
    started = time.perf_counter()
    # random arrivals go through the front's window admission (docs/dispatch.md, "Admission and the
    # arrival process"); uniform ones never fill a window past its cap, so they are simulated without
    admission = "none" if arrivals == "uniform" else "planned"
    report = simulate(problem, plan, sample_s, arrivals=arrivals, seed=seed, admission=admission)  # type: ignore[arg-type]
    e2e = report.end_to_end
    shed = report.frames_shed / report.frames_offered if report.frames_offered else 0.0
    return SimOutcome(e2e.paths, e2e.slo_attainment, e2e.latency.p99_s, time.perf_counter() - started, shed)


def _serial(tasks: list[SimTask]) -> list[SimOutcome]:
    return [simulate_task(t) for t in tasks]


class SimCache:
    """Simulation results memoised on (problem, plan, sampled seconds, arrivals): the same plan at the same
    level (see :func:`load_levels`) is simulated once, across epochs, apps and strategies. ``runner`` runs
    the simulations a :meth:`prefetch` needs (default: one after the other in this process)."""

    def __init__(self, runner: Runner | None = None) -> None:
        self.runner = runner or _serial
        self.hits = 0
        self.misses = 0
        self.wall_s = 0.0  # summed over the simulations run (in whichever process ran them)
        self._runs: dict[tuple[str, str, float, str], SimOutcome] = {}

    @staticmethod
    def key(problem: ProblemSpec, plan: Plan, cfg: PolicyConfig) -> tuple[str, str, float, str]:
        return (problem.model_dump_json(exclude={"name"}), _sim_key(plan), cfg.sample_s, cfg.arrivals)

    def prefetch(self, tasks: list[tuple[ProblemSpec, Plan, PolicyConfig, int]]) -> None:
        """Simulate, through the runner, every task not memoised yet (duplicates once)."""
        todo: dict[tuple[str, str, float, str], SimTask] = {}
        for problem, plan, cfg, seed in tasks:
            k = self.key(problem, plan, cfg)
            if k not in self._runs and k not in todo:
                todo[k] = (problem, plan, cfg.sample_s, cfg.arrivals, seed)
        if not todo:
            return
        for k, out in zip(todo, self.runner(list(todo.values())), strict=True):
            self._store(k, out)

    def run(self, problem: ProblemSpec, plan: Plan, cfg: PolicyConfig, seed: int) -> SimOutcome:
        k = self.key(problem, plan, cfg)
        found = self._runs.get(k)
        if found is not None:
            self.hits += 1
            return found
        out = simulate_task((problem, plan, cfg.sample_s, cfg.arrivals, seed))
        self._store(k, out)
        return out

    def _store(self, k: tuple[str, str, float, str], out: SimOutcome) -> None:
        self.misses += 1
        self.wall_s += out.wall_s
        self._runs[k] = out


def _sim_key(plan: Plan) -> str:
    """What the simulator reads of a plan: every module's machine groups and its dispatch record (a held
    plan serving a new rate differs only in its dummy load, which the simulator does not read)."""
    doc = {
        m: [[g.model_dump() for g in mp.groups], (mp.model_extra or {}).get("dispatch")]
        for m, mp in sorted(plan.modules.items())
    }
    return json.dumps(doc, sort_keys=True, default=str)


def load_levels(admitted: np.ndarray, capacity: float, grid: float) -> np.ndarray:
    """The rate each minute is simulated at: the epoch's median and busiest admitted minutes, as fractions
    of the capacity rounded up to ``grid`` (at most 1), are the two levels; a minute takes the smaller
    level that covers it. Never below the minute's own rate, so the sample errs towards more load."""
    if grid <= 0:
        return np.asarray(admitted, dtype=np.float64)
    fractions = np.asarray(admitted, dtype=np.float64) / capacity
    up = np.minimum(1.0, np.ceil(fractions / grid - 1e-9) * grid)
    low, high = float(np.quantile(up, 0.5, method="higher")), float(up.max())
    out: np.ndarray = np.where(up <= low, low, high) * capacity
    return out


def _admit(
    template: AppTemplate, plan: Plan, minute_rates: np.ndarray, cfg: PolicyConfig
) -> tuple[float, np.ndarray, np.ndarray]:
    """(capacity, admitted rate per minute, simulated level per minute) of one app-epoch."""
    cap = plan_capacity(plan, template.per_frame())
    admitted = np.minimum(minute_rates, cap)
    return cap, admitted, load_levels(admitted, cap, cfg.sim_grid)


def serve_epoch(
    template: AppTemplate,
    name: str,
    plan: Plan | None,
    minute_rates: np.ndarray,
    cfg: PolicyConfig,
    *,
    seed: int = 0,
    sims: SimCache | None = None,
) -> Served:
    """One app's epoch against ``plan`` (None: the app has no plan, every frame is shed).

    Admission sheds, minute by minute, what exceeds the plan's capacity. The admitted minutes are simulated
    at two levels (:func:`load_levels`: the median and the busiest minute, rounded up on a grid of
    ``cfg.sim_grid`` of the capacity), ``cfg.sample_s`` seconds each, memoised in ``sims`` (a plan meets
    few levels over the day); a minute's admitted frames are within the SLO in the proportion its level's
    simulation measured. Under random arrivals the simulation also plays the front's window admission:
    the frames it sheds at a level are shed frames of the minute (``shed``), and the attainment is of
    the rest."""
    offered = float(minute_rates.sum()) * 60.0
    if plan is None:
        return Served(offered=offered, shed=offered, attainment=0.0)
    cap, admitted_rate, levels = _admit(template, plan, minute_rates, cfg)
    shed = float((minute_rates - admitted_rate).sum()) * 60.0
    admitted = offered - shed
    out = Served(offered=offered, shed=shed, within=admitted, capacity=cap)
    if not cfg.simulate or admitted <= 0:
        return out
    memo = sims if sims is not None else SimCache()
    measured: dict[float, SimOutcome] = {}
    for level in sorted({float(x) for x in levels if x > 0}):
        sim = memo.run(template.problem(name, level), plan, cfg, seed)
        measured[level] = sim
        out.simulated += sim.paths
        out.p99_s = max(out.p99_s, sim.p99_s)
    window_shed = 60.0 * sum(
        float(r) * measured[float(lv)].shed for r, lv in zip(admitted_rate, levels, strict=True) if lv > 0
    )
    out.within = 60.0 * sum(
        float(r) * (1.0 - measured[float(lv)].shed) * measured[float(lv)].attainment
        for r, lv in zip(admitted_rate, levels, strict=True)
        if lv > 0
    )
    out.shed += window_shed
    admitted -= window_shed
    out.attainment = out.within / admitted if admitted > 0 else 0.0
    return out


# --------------------------------------------------------------------------- results


class EpochRecord(BaseModel):
    """One epoch of one strategy. Rates in frames/s, costs in USD per hour, frames summed over the epoch."""

    epoch: int
    start_h: float
    offered_rps: float  # mean over the epoch, all apps
    busiest_rps: float  # sum over apps of each app's busiest minute
    planned_rps: float  # sum of the rates planned for
    capacity_rps: float  # sum of the plans' capacities
    billed_per_hour: float  # instances paid for (after hysteresis) x price
    packed_per_hour: float  # the packed fleet's instances x price (before hysteresis)
    occupancy_per_hour: float  # the plans' occupancy cost (the papers' lower bound)
    instances: dict[str, int]
    scale_changes: int  # hardware types whose paid count changed at the start of this epoch
    launched: int
    terminated: int
    replanned: int  # apps solved afresh (the others kept their plan)
    failed: dict[str, str] = Field(default_factory=dict)
    offered: float
    shed: float
    within_slo: float
    slo_attainment: float  # within / offered
    admitted_attainment: float  # within / admitted (the simulator's figure, weighted by frames)
    worst_app: str = ""
    worst_app_attainment: float = 1.0
    p99_s: float = 0.0  # largest simulated end-to-end p99 over apps
    plan_ms: float = 0.0
    sim_s: float = 0.0


class StrategyResult(BaseModel):
    """A strategy over the day: cost in USD, frames summed over the day."""

    name: str
    headroom: float
    simulated: bool
    billed_usd: float
    occupancy_usd: float
    offered: float
    shed: float
    within_slo: float
    slo_attainment: float
    scale_changes: int  # over the day, the first epoch's launch excluded
    launched: int
    terminated: int
    peak_instances: int
    plan_s: float
    sim_s: float
    epochs: list[EpochRecord]


class SweepPoint(BaseModel):
    headroom: float
    adaptive_usd: float
    static_usd: float
    saving: float  # 1 - adaptive / static
    slo_attainment: float
    shed_fraction: float
    scale_changes: int


class ScenarioReport(BaseModel):
    load: LoadConfig
    policy: PolicyConfig  # the chosen headroom's
    apps: list[dict[str, object]]
    burst: dict[str, object]
    minute_total_rps: list[float]
    adaptive: StrategyResult
    static: StrategyResult
    oracle: StrategyResult | None
    sweep: list[SweepPoint]
    target_attainment: float
    target_met: bool
    saving: float  # 1 - adaptive / static at the chosen headroom
    solves: int  # distinct problems solved (SolveCache misses)
    solve_cache_hits: int
    simulations: int  # distinct simulations run (SimCache misses)
    simulation_cache_hits: int


# --------------------------------------------------------------------------- strategies


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
        missing = sorted({k for k in load.kinds if k not in templates})
        if missing:
            raise ScenarioError(f"no template for app kind(s) {', '.join(missing)}")
        self.load = load
        self.temps = [templates[k] for k in load.kinds]
        self.cfg = cfg
        self.cache = cache if cache is not None else SolveCache(cfg.policy, cfg.solver)
        self.sims = sims if sims is not None else SimCache()
        self.epoch_h = load.epoch_minutes / 60.0

    def forecasts(self) -> np.ndarray:
        """(epochs, apps): the rate each app is planned for at the start of each epoch, from the epoch
        means observed before it (the history before midnight included)."""
        load, cfg = self.load, self.cfg
        n_hist = load.history // load.epoch_minutes
        observed = np.stack([load.epoch_mean(e) for e in range(-n_hist, load.epochs)])
        out = np.empty((load.epochs, len(load.names)))
        for e in range(load.epochs):
            past = observed[max(0, n_hist + e - cfg.trend_epochs) : n_hist + e]
            for a in range(len(load.names)):
                out[e, a] = forecast_rate(
                    past[:, a].tolist(), headroom=cfg.headroom, trend_epochs=cfg.trend_epochs, step=cfg.step
                )
        return out

    def plan(self, state: _State, rates: np.ndarray) -> _Change:
        """Plan and pack every app at ``rates``. An app that cannot be planned keeps the plan in force (it
        is packed with the others), as the control loop does."""
        problems = {
            name: self.temps[a].problem(name, float(rates[a]))
            for a, name in enumerate(self.load.names)
            if rates[a] > 0
        }
        res = plan_fleet(
            problems,
            previous=state.fleet,
            previous_plans=state.plans,
            policy=self.cfg.policy,
            solver=self.cache,
        )
        fleet = res.fleet
        kept = {a: (state.problems[a], state.plans[a]) for a in res.failed if a in state.plans}
        state.plans = {**{a: p for a, (_, p) in kept.items()}, **res.plans}
        state.problems = {**{a: q for a, (q, _) in kept.items()}, **{a: problems[a] for a in res.plans}}
        if kept:
            fleet = pack({a: (state.problems[a], state.plans[a]) for a in state.plans}, previous=state.fleet)
        state.fleet = fleet
        return _Change(
            dict(state.paid), dict(res.failed), len(res.plans) - len(res.reused), res.solve_ms + res.pack_ms
        )

    def serve(self, state: _State, epoch: int) -> tuple[Served, str, float]:
        """Every app's epoch: the total, the worst app and its attainment. The epoch's simulations are
        prefetched together (the runner may run them in parallel). The simulator's seed depends on the
        day's seed, the epoch and the app only, so strategies see the same arrivals."""
        block = self.load.epoch_minutes_of(epoch)
        seeds = [(self.load.config.seed * 1_000_003 + epoch * 9_973 + a) % 2**32 for a in range(len(block))]
        wall = self.sims.wall_s
        if self.cfg.simulate:
            tasks: list[tuple[ProblemSpec, Plan, PolicyConfig, int]] = []
            for a, name in enumerate(self.load.names):
                plan = state.plans.get(name)
                if plan is not None:
                    _, _, levels = _admit(self.temps[a], plan, block[a], self.cfg)
                    tasks.extend(
                        (self.temps[a].problem(name, level), plan, self.cfg, seeds[a])
                        for level in sorted({float(x) for x in levels if x > 0})
                    )
            self.sims.prefetch(tasks)
        total = Served()
        worst, worst_att = "", 1.0
        for a, name in enumerate(self.load.names):
            s = serve_epoch(
                self.temps[a], name, state.plans.get(name), block[a], self.cfg, seed=seeds[a], sims=self.sims
            )
            att = s.within / s.offered if s.offered > 0 else 1.0
            if att < worst_att:
                worst, worst_att = name, att
            total.add(s)
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
        deltas = [state.paid.get(h, 0) - change.before.get(h, 0) for h in hws]
        return EpochRecord(
            epoch=epoch,
            start_h=epoch * self.epoch_h,
            offered_rps=float(self.load.epoch_mean(epoch).sum()),
            busiest_rps=float(self.load.epoch_peak(epoch).sum()),
            planned_rps=float(planned.sum()),
            capacity_rps=total.capacity,
            billed_per_hour=sum(fleet.prices.get(h, 0.0) * c for h, c in state.paid.items()),
            packed_per_hour=fleet.billed_per_hour,
            occupancy_per_hour=fleet.occupancy_per_hour,
            instances={h: c for h, c in sorted(state.paid.items()) if c},
            scale_changes=sum(1 for d in deltas if d),
            launched=sum(d for d in deltas if d > 0),
            terminated=-sum(d for d in deltas if d < 0),
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
        offered = sum(r.offered for r in records)
        within = sum(r.within_slo for r in records)
        return StrategyResult(
            name=name,
            headroom=self.cfg.headroom,
            simulated=self.cfg.simulate,
            billed_usd=sum(r.billed_per_hour for r in records) * self.epoch_h,
            occupancy_usd=sum(r.occupancy_per_hour for r in records) * self.epoch_h,
            offered=offered,
            shed=sum(r.shed for r in records),
            within_slo=within,
            slo_attainment=within / offered if offered > 0 else 1.0,
            scale_changes=sum(r.scale_changes for r in records[1:]),
            launched=sum(r.launched for r in records[1:]),
            terminated=sum(r.terminated for r in records[1:]),
            peak_instances=max((sum(r.instances.values()) for r in records), default=0),
            plan_s=sum(r.plan_ms for r in records) / 1000,
            sim_s=sum(r.sim_s for r in records),
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
    for e in range(load.epochs):
        change = day.plan(state, forecasts[e])
        assert state.fleet is not None
        state.paid = hysteresis.desired(state.fleet.counts(), change.before, e)
        records.append(day.record(e, state, forecasts[e], day.serve(state, e), change))
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
    for e in range(load.epochs):
        first = change if e == 0 else _Change(dict(state.paid), {}, 0, 0.0)
        records.append(day.record(e, state, peak, day.serve(state, e), first))
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
    for e in range(load.epochs):
        rates = np.array([quantise_up(float(r), cfg.step) for r in load.epoch_peak(e)])
        change = day.plan(state, rates)
        assert state.fleet is not None
        state.paid = state.fleet.counts()
        records.append(day.record(e, state, rates, day.serve(state, e), change))
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
    for h in values:
        c = cfg.model_copy(update={"headroom": h})
        adaptive = run_adaptive(load, templates, c, cache=cache, sims=sims, progress=progress)
        cost_only = c.model_copy(update={"simulate": False})
        runs[h] = (
            adaptive,
            run_static(load, templates, cost_only, cache=cache, sims=sims, progress=progress),
        )
    sweep = [_point(h, *runs[h]) for h in values]
    good = [p for p in sweep if p.slo_attainment >= target]
    chosen = good[0] if good else max(sweep, key=lambda p: (p.slo_attainment, -p.headroom))
    c = cfg.model_copy(update={"headroom": chosen.headroom})
    adaptive, static = runs[chosen.headroom]
    if cfg.simulate:
        static = run_static(load, templates, c, cache=cache, sims=sims, progress=progress)
    orc = None
    if oracle:
        cost_only = cfg.model_copy(update={"simulate": False})
        orc = run_oracle(load, templates, cost_only, cache=cache, sims=sims, progress=progress)
    total = load.total()
    return ScenarioReport(
        load=load.config,
        policy=c,
        apps=[
            {
                "name": n,
                "kind": k,
                "share": float(load.shares[i]),
                "peak_rps": float(load.rates[i, load.history :].max()),
            }
            for i, (n, k) in enumerate(zip(load.names, load.kinds, strict=True))
        ],
        burst=dict(load.burst),
        minute_total_rps=[float(x) for x in total],
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


def _point(h: float, adaptive: StrategyResult, static: StrategyResult) -> SweepPoint:
    return SweepPoint(
        headroom=h,
        adaptive_usd=adaptive.billed_usd,
        static_usd=static.billed_usd,
        saving=1 - adaptive.billed_usd / static.billed_usd if static.billed_usd > 0 else 0.0,
        slo_attainment=adaptive.slo_attainment,
        shed_fraction=adaptive.shed / adaptive.offered if adaptive.offered > 0 else 0.0,
        scale_changes=adaptive.scale_changes,
    )
