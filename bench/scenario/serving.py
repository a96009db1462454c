"""Serving one epoch: admission against the plan's capacity, the admitted minutes simulated at two load
levels, and the caches of solves (:class:`SolveCache`) and simulations (:class:`SimCache`)."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from planner.errors import PlannerError
from planner.robust import solve_dispatchable
from planner.simulator import simulate
from planner.solve import solve

if TYPE_CHECKING:
    from bench.scenario.config import AppTemplate, PolicyConfig
    from planner.models import Plan, ProblemSpec


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


def plan_capacity(plan: Plan, per_frame: Mapping[str, float]) -> float:
    """Frames/s the plan carries: the smallest over modules of planned rate (dummy included) divided by
    the module's requests per frame."""
    cap = math.inf
    for module, mp in plan.modules.items():
        requests = per_frame.get(module, 0.0)
        if requests > 0:
            cap = min(cap, sum(group.machines * group.rate_per_machine for group in mp.groups) / requests)
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
    return [simulate_task(task) for task in tasks]


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
            key = self.key(problem, plan, cfg)
            if key not in self._runs and key not in todo:
                todo[key] = (problem, plan, cfg.sample_s, cfg.arrivals, seed)
        if not todo:
            return
        for key, out in zip(todo, self.runner(list(todo.values())), strict=True):
            self._store(key, out)

    def run(self, problem: ProblemSpec, plan: Plan, cfg: PolicyConfig, seed: int) -> SimOutcome:
        key = self.key(problem, plan, cfg)
        found = self._runs.get(key)
        if found is not None:
            self.hits += 1
            return found
        out = simulate_task((problem, plan, cfg.sample_s, cfg.arrivals, seed))
        self._store(key, out)
        return out

    def _store(self, key: tuple[str, str, float, str], out: SimOutcome) -> None:
        self.misses += 1
        self.wall_s += out.wall_s
        self._runs[key] = out


def _sim_key(plan: Plan) -> str:
    """What the simulator reads of a plan: every module's machine groups and its dispatch record (a held
    plan serving a new rate differs only in its dummy load, which the simulator does not read)."""
    doc = {
        module: [[group.model_dump() for group in mp.groups], (mp.model_extra or {}).get("dispatch")]
        for module, mp in sorted(plan.modules.items())
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


def admit(
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
    cap, admitted_rate, levels = admit(template, plan, minute_rates, cfg)
    shed = float((minute_rates - admitted_rate).sum()) * 60.0
    admitted = offered - shed
    out = Served(offered=offered, shed=shed, within=admitted, capacity=cap)
    if not cfg.simulate or admitted <= 0:
        return out
    memo = sims if sims is not None else SimCache()
    measured: dict[float, SimOutcome] = {}
    for level in sorted({float(level) for level in levels if level > 0}):
        sim = memo.run(template.problem(name, level), plan, cfg, seed)
        measured[level] = sim
        out.simulated += sim.paths
        out.p99_s = max(out.p99_s, sim.p99_s)
    window_shed = 60.0 * sum(
        float(rate) * measured[float(lv)].shed
        for rate, lv in zip(admitted_rate, levels, strict=True)
        if lv > 0
    )
    out.within = 60.0 * sum(
        float(rate) * (1.0 - measured[float(lv)].shed) * measured[float(lv)].attainment
        for rate, lv in zip(admitted_rate, levels, strict=True)
        if lv > 0
    )
    out.shed += window_shed
    admitted -= window_shed
    out.attainment = out.within / admitted if admitted > 0 else 0.0
    return out
