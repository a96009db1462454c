"""Fleet benchmark: planning + packing epochs on generated multi-app fleets.

Prints, measured at run time (nothing is hard-coded):

- **cost**, per fleet size and seed: billed cost after packing over the occupancy lower bound (the sum of
  every app's occupancy-optimal plan, the fractional optimum no whole-instance fleet can beat), next to
  the dedicated billed plans (every app's plan from the solver, one instance per machine) and a
  latency-free packing of the occupancy plans (full machines alone, residuals bin-packed by occupancy with
  no latency condition; what packing could give if co-location cost no latency);
- **time** of one epoch (plan + pack) for the largest fleet, cold (a fresh process: nothing cached),
  *registered* (the same, but every app new since the last epoch was registered through the control
  loop, whose feasibility check solved it: the epoch takes those plans, :func:`~planner.fleet.seed_plan`,
  read back from JSON as from the registry; dispatchable solver only) and with every plan reused, for
  both solvers (``plain``: :func:`~planner.solve.solve`; ``dispatchable``:
  :func:`~planner.robust.solve_dispatchable`, what the control loop runs): CPU time of this process (one
  core) and wall time, median and spread of repeats, with the load average, the bill over the bound and
  the ``check_fleet`` / ``check_plan`` errors of the fleet timed; and the CPU of each registration's
  solve; and four changes of every app's problem at once, a **new price list** (:data:`PRICE_CHANGE`:
  every plan still valid), a **load ramp** (:data:`RAMP`: plans outgrown), a **load drop** (:data:`DROP`:
  plans over-provisioned past the hold band), **longer service times**
  (:data:`SLOWER_S`, a larger hop overhead: plans re-timed), and **no plan at all** (the same apps
  without previous plans): the epoch that solves every app at once against epochs with the control
  loop's solve budget (plans carried, grown where the rates outgrew them, quick plans where too many
  apps have none, solved again in later epochs, :func:`~planner.fleet.plan_fleet`'s
  ``solve_budget_s``), until none is carried, and whether they end with the same solver plans;
- **verification**: every shared instance replayed with its shares' window schedules (random phases and,
  per share, the phases that make it wait longest): measured worst case against planned + added wait;
- **steady load**: epochs of noisy load (rates drawn +-noise around a fixed mean, then Poisson counts over
  the epoch) per app's frame rate, forecast (:func:`~planner.scaling.forecast_rate`, as the control loop)
  + re-plan + pack + hysteresis; scale changes per hardware type per two epochs: in detail for the main
  fleet's first 40 apps, and summarised for ``steady_runs`` runs (run ``i``: the first 40 apps of the
  fleet of seed ``seed * 1000 + i``, noise seed ``seed + i``; run 0 is the detailed one).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import numpy as np

from planner.check import check_plan
from planner.errors import PlannerError
from planner.fleet import RealisationCache, plan_fleet, seed_plan
from planner.generate import generate_problems
from planner.models import Plan
from planner.packing import adversarial_phases, check_fleet, simulate_instance
from planner.robust import DEFAULT_CHILD_HEADROOM, solve_dispatchable
from planner.scaling import Hysteresis, forecast_rate
from planner.solve import solve

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from planner.models import ProblemSpec

    Solver = Callable[[ProblemSpec], Plan]

TARGET_RATIO = 1.05
TARGET_EPOCH_S = 1.0
#: The benchmark's new price list (factor per hardware type, ``*`` for the rest): every type 5 % cheaper,
#: T4 20 % (a price cut on one instance family changes which configurations are cheapest).
PRICE_CHANGE: dict[str, float] = {"*": 0.95, "t4": 0.80}
#: The benchmark's load ramp: every app's rates 10 % up at once (past most plans' capacity).
RAMP = 1.10
#: The benchmark's load drop: every app's rates 20 % down at once (past the hold band of every plan).
DROP = 0.80
#: The benchmark's service-time change: every profile entry this much longer (s), as a larger hop
#: overhead (``SKINFLINT_HOP_OVERHEAD_S``) makes every duration.
SLOWER_S = 0.002
#: The control loop's default solve budget (control.epoch.ControlConfig.solve_budget_s).
SOLVE_BUDGET_S = 0.4
EPOCH_S = 60.0  # seconds of traffic behind one observed rate
WARMUP = 5  # steady-load epochs before the forecast's trend window is full (not counted as steady)
#: ``plain``: plan_fleet's own billed solve; ``dispatchable``: the control loop's solver
#: (``control/epoch.py``: ``solve_dispatchable``, billed, default child headroom).
SOLVERS = ("dispatchable", "plain")


def solver_for(name: str) -> Solver | None:
    """The solver ``plan_fleet`` is given for ``name`` (None: its own plain solve)."""
    if name == "plain":
        return None
    if name == "dispatchable":
        return _dispatchable
    raise ValueError(f"solver must be one of {', '.join(SOLVERS)}, got {name!r}")


def _dispatchable(
    problem: ProblemSpec, *, schedules: dict[Any, Any] | None = None, first_found: bool = False
) -> Plan:
    """What the control loop runs (``control/epoch.py`` ``_solver``), sharing the fleet's
    schedule cache (and its quick mode, which a budgeted epoch asks for)."""
    return solve_dispatchable(
        problem,
        policy="skinflint",
        objective="billed",
        child_headroom=DEFAULT_CHILD_HEADROOM,
        schedules=schedules,
        first_found=first_found,
    )


class _Reuse:
    """A solver that solves each distinct problem once (the FIFO-only comparison and the dedicated
    figure use the same plans as the fleet, without solving again). Returns a copy: ``plan_fleet``
    writes its digests into the plan."""

    def __init__(self, solver: Solver | None) -> None:
        self.solver = solver
        self.plans: dict[str, Plan] = {}

    def __call__(self, problem: ProblemSpec) -> Plan:
        key = problem.model_dump_json()
        if key not in self.plans:
            self.plans[key] = (
                self.solver(problem) if self.solver is not None else solve(problem, objective="billed")
            )
        return self.plans[key].model_copy(deep=True)


# --------------------------------------------------------------------------- cost


def _ffd(sizes: list[float]) -> int:
    bins: list[float] = []
    for s in sorted(sizes, reverse=True):
        for i, b in enumerate(bins):
            if b + s <= 1 + 1e-9:
                bins[i] += s
                break
        else:
            bins.append(s)
    return len(bins)


def latency_free(plans: Mapping[str, Plan], prices: Mapping[str, float]) -> float:
    """$/h of a fleet where every module's load is whole machines plus one residual and residuals are
    bin-packed by occupancy alone (first-fit decreasing), ignoring latency."""
    items: dict[str, list[float]] = defaultdict(list)
    for plan in plans.values():
        for mp in plan.modules.values():
            for g in mp.groups:
                units = g.machines * g.rate_per_machine * g.duration_s / (g.concurrency * g.batch)
                k = math.floor(units + 1e-9)
                items[g.hardware] += [1.0] * k + ([units - k] if units - k > 1e-9 else [])
    return sum(_ffd(v) * prices[h] for h, v in items.items())


def load_occupancy(
    plans: Mapping[str, Plan], problems: Mapping[str, ProblemSpec], prices: Mapping[str, float]
) -> float:
    """$/h of the device time the apps' own requests take on their plans' machines: each module's rate
    fills its groups in throughput-cost order (as the TC dispatch sends it), each request costing
    ``price * d / (c b)`` of its group's configuration. The rest of a plan's occupancy is capacity
    held for what the plan guarantees (dummy load: whole machines, children sized for their parents'
    worst-case bursts)."""
    total = 0.0
    for app, plan in plans.items():
        for name, mp in plan.modules.items():
            left = problems[app].modules[name].rate
            for g in mp.groups:
                real = min(left, g.machines * g.rate_per_machine)
                left -= real
                total += prices[g.hardware] * real * g.duration_s / (g.concurrency * g.batch)
    return total


def _errors(problems: Mapping[str, ProblemSpec], res: Any) -> list[str]:
    apps = {a: (problems[a], res.plans[a]) for a in res.plans}
    return check_fleet(res.fleet, apps) + [e for a, (p, plan) in apps.items() for e in check_plan(p, plan)]


def one_fleet(problems: Mapping[str, ProblemSpec], solver: str = "dispatchable") -> dict[str, Any]:
    """Every figure of one generated fleet, planned with ``solver`` (:data:`SOLVERS`)."""
    occ: dict[str, Plan] = {}
    plans = _Reuse(solver_for(solver))
    billed_opt = 0.0
    for app, p in problems.items():
        try:
            lower = solve(p, objective="occupancy")
            billed = plans(p).billed_per_hour
        except PlannerError:  # counted as failed: the bound is over the apps both solves plan
            continue
        occ[app] = lower
        billed_opt += billed
    feasible = {a: problems[a] for a in occ}
    res = plan_fleet(feasible, solver=plans)
    fifo = plan_fleet(feasible, align=False, solver=plans)
    errors = _errors(feasible, res)
    lb = sum(p.cost_per_hour for p in occ.values())
    f = res.fleet
    return {
        "apps": len(problems),
        "planned": len(res.plans),
        "failed": len(res.failed) + len(problems) - len(feasible),
        "occupancy_bound": lb,
        "billed": f.billed_per_hour,
        "plans_occupancy": f.occupancy_per_hour,
        "load_occupancy": load_occupancy(res.plans, feasible, f.prices),
        "packing_ratio": f.billed_per_hour / f.occupancy_per_hour,
        "dedicated_plans": f.dedicated_per_hour,
        "dedicated_billed_optimum": billed_opt,
        "latency_free": latency_free(occ, f.prices),
        "ratio": f.billed_per_hour / lb,
        "fifo_only_ratio": fifo.fleet.billed_per_hour / lb,
        "aligned_instances": sum(1 for i in f.instances if i.aligned),
        "dedicated_ratio": billed_opt / lb,
        "latency_free_ratio": latency_free(occ, f.prices) / lb,
        "instances": len(f.instances),
        "shared_instances": f.shared_instances,
        "shares_on_shared": sum(len(i.shares) for i in f.instances if len(i.shares) > 1),
        "keep": res.keep,
        "errors": errors[:5],
        "error_count": len(errors),
        "_fleet": res,
        "_problems": feasible,
    }


# --------------------------------------------------------------------------- time


def _summary(xs: list[float]) -> dict[str, float]:
    return {"median_ms": statistics.median(xs), "min_ms": min(xs), "max_ms": max(xs)}


def registrations(problems: Mapping[str, ProblemSpec]) -> tuple[dict[str, Plan], list[float]]:
    """Every app solved as its registration solves it (control/registry.py
    ``check_plannable``: the control loop's solve, without the epoch's schedule sharing) and stored as
    its seed (JSON, as in the registry): the seeds and each solve's CPU ms."""
    seeds: dict[str, Plan] = {}
    cpu: list[float] = []
    for app, problem in problems.items():
        c = time.process_time()
        try:
            plan = _dispatchable(problem)
        except PlannerError:
            continue  # rejected at registration
        cpu.append((time.process_time() - c) * 1000)
        seeds[app] = Plan.model_validate_json(seed_plan(problem, plan, "skinflint").model_dump_json())
    return seeds, cpu


def repriced(problems: Mapping[str, ProblemSpec], change: Mapping[str, float]) -> dict[str, ProblemSpec]:
    """``problems`` at a new price list (``change``: factor per hardware type, ``*`` for the others)."""
    out: dict[str, ProblemSpec] = {}
    for app, p in problems.items():
        hw = {
            h: x.model_copy(update={"price_per_hour": x.price_per_hour * change.get(h, change.get("*", 1.0))})
            for h, x in p.hardware.items()
        }
        out[app] = p.model_copy(update={"hardware": hw})
    return out


def without_timings(value: Any) -> Any:
    """A plan's JSON without its timings (they differ from one solve of the same problem to the next)."""
    if isinstance(value, dict):
        return {
            k: without_timings(v) for k, v in value.items() if k not in ("solve_ms", "cpu_ms", "solve_cpu_ms")
        }
    if isinstance(value, list):
        return [without_timings(v) for v in value]
    return value


def ramped(problems: Mapping[str, ProblemSpec], factor: float) -> dict[str, ProblemSpec]:
    """``problems`` with every module's rate ``factor`` times (a load ramp seen by every app at once)."""
    return {
        app: p.model_copy(
            update={
                "modules": {m: s.model_copy(update={"rate": s.rate * factor}) for m, s in p.modules.items()}
            }
        )
        for app, p in problems.items()
    }


def slowed(problems: Mapping[str, ProblemSpec], add_s: float) -> dict[str, ProblemSpec]:
    """``problems`` with every profile entry ``add_s`` seconds longer."""
    out: dict[str, ProblemSpec] = {}
    for app, p in problems.items():
        modules = {
            m: s.model_copy(
                update={
                    "profile": [e.model_copy(update={"duration_s": e.duration_s + add_s}) for e in s.profile]
                }
            )
            for m, s in p.modules.items()
        }
        out[app] = p.model_copy(update={"modules": modules})
    return out


def solved_plans(plans: Mapping[str, Plan]) -> dict[str, Any]:
    """Each app's solver plan (before shaping and packing), timings aside."""
    from planner.fleet import SOLVED_KEY

    out: dict[str, Any] = {}
    for app, plan in plans.items():
        solved = (plan.model_extra or {}).get(SOLVED_KEY)
        modules = (
            solved if isinstance(solved, dict) else {m: mp.model_dump() for m, mp in plan.modules.items()}
        )
        out[app] = without_timings(json.loads(json.dumps(modules)))
    return out


def changed_problems(
    problems: Mapping[str, ProblemSpec],
    first: Any,
    solver: str,
    change: str,
    budget_s: float = SOLVE_BUDGET_S,
    max_epochs: int = 20,
) -> dict[str, Any]:
    """The epochs after every app's problem changed at once, from ``first`` (a ``FleetResult`` of
    ``problems``): ``change`` ``"prices"`` (a new price list, :data:`PRICE_CHANGE`: every plan still
    valid), ``"ramp"`` (every rate :data:`RAMP` times: plans outgrown), ``"drop"`` (every rate
    :data:`DROP` times: plans over-provisioned past the hold band), ``"slower"`` (every service
    time :data:`SLOWER_S` longer: plans re-timed, most of them grown) or ``"cold"`` (the same problems
    with no plan at all, ``first`` unused: a lost plan store, apps stored without a registration
    plan; the budgeted epochs give quick plans). Solved at once (no budget), and
    epoch by epoch with ``budget_s`` until no plan is carried (each epoch from the previous one's plans,
    one realisation cache, as one control-loop process); CPU ms and bill of each, and whether the
    budgeted epochs end with every app's solver plan (timings aside) of the unbudgeted one (their shaped
    and packed forms can differ with the previous fleet) and at what bill."""
    new = {
        "prices": lambda: repriced(problems, PRICE_CHANGE),
        "ramp": lambda: ramped(problems, RAMP),
        "drop": lambda: ramped(problems, DROP),
        "slower": lambda: slowed(problems, SLOWER_S),
        "cold": lambda: dict(problems),
    }[change]()
    fleet, plans = (None, {}) if change == "cold" else (first.fleet, first.plans)
    c = time.process_time()
    fresh = RealisationCache()
    how = solver_for(solver)
    ref = plan_fleet(new, previous=fleet, previous_plans=plans, solver=how, cache=fresh)
    ref_cpu = (time.process_time() - c) * 1000
    cache = RealisationCache()
    carried = [""]
    epochs: list[dict[str, Any]] = []
    while carried and len(epochs) < max_epochs:
        c = time.process_time()
        res = plan_fleet(
            new, previous=fleet, previous_plans=plans, solver=how, cache=cache, solve_budget_s=budget_s
        )
        epochs.append(
            {
                "cpu_ms": (time.process_time() - c) * 1000,
                "carried": len(res.carried),
                "resolved": len(res.resolved),
                "quick": len(res.quick),
                "billed_per_hour": res.fleet.billed_per_hour,
            }
        )
        fleet, plans, carried = res.fleet, res.plans, res.carried
    return {
        "change": change,
        "changed_apps": len(new) - len(ref.reused),
        "unbudgeted_cpu_ms": ref_cpu,
        "unbudgeted_billed_per_hour": ref.fleet.billed_per_hour,
        "budget_s": budget_s,
        "epochs": epochs,
        "converged": not carried,
        "same_solved_plans": solved_plans(plans) == solved_plans(ref.plans),
        "first_billed_over_unbudgeted": epochs[0]["billed_per_hour"] / ref.fleet.billed_per_hour,
        "last_billed_over_unbudgeted": epochs[-1]["billed_per_hour"] / ref.fleet.billed_per_hour,
    }


def epoch_times(problems: Mapping[str, ProblemSpec], repeats: int, solver: str) -> dict[str, Any]:
    """One epoch of ``problems`` planned with ``solver``, ``repeats`` times: cold (no previous plans, an
    empty realisation cache: a fresh control-loop process), registered (the same with every app's
    registration plan as its seed; ``dispatchable`` only) and then with every plan reused (the next
    epoch of the same process); CPU (this process) and wall time, the bill over the occupancy bound and
    the errors ``check_fleet`` / ``check_plan`` find in the fleet; then, each time, a new price list
    and a load ramp (:func:`changed_problems`)."""
    cold_cpu, cold_wall, warm_cpu, warm_wall = [], [], [], []
    changes: dict[str, list[dict[str, Any]]] = {
        "prices": [],
        "ramp": [],
        "drop": [],
        "slower": [],
        "cold": [],
    }
    cold_solve, cold_pack, warm_pack = [], [], []
    reg_cpu: list[float] = []
    reg_wall: list[float] = []
    first = again = seeded = None
    seeds, solve_cpu = registrations(problems) if solver == "dispatchable" else ({}, [])
    load = [os.getloadavg()]
    for _ in range(repeats):
        cache = RealisationCache()
        c, w = time.process_time(), time.perf_counter()
        first = plan_fleet(problems, solver=solver_for(solver), cache=cache)
        cold_cpu.append((time.process_time() - c) * 1000)
        cold_wall.append((time.perf_counter() - w) * 1000)
        cold_solve.append(first.solve_ms)
        cold_pack.append(first.pack_ms)
        if seeds:
            c, w = time.process_time(), time.perf_counter()
            seeded = plan_fleet(problems, seeds=seeds, solver=solver_for(solver), cache=RealisationCache())
            reg_cpu.append((time.process_time() - c) * 1000)
            reg_wall.append((time.perf_counter() - w) * 1000)
        c, w = time.process_time(), time.perf_counter()
        again = plan_fleet(
            problems, previous=first.fleet, previous_plans=first.plans, solver=solver_for(solver), cache=cache
        )
        warm_cpu.append((time.process_time() - c) * 1000)
        warm_wall.append((time.perf_counter() - w) * 1000)
        warm_pack.append(again.pack_ms)
        for change, runs in changes.items():
            runs.append(changed_problems(problems, first, solver, change))
        load.append(os.getloadavg())
    assert first is not None and again is not None
    occ = 0.0
    for p in problems.values():
        try:
            occ += solve(p, objective="occupancy").cost_per_hour
        except PlannerError:
            continue
    return {
        "solver": solver,
        "apps": len(problems),
        "planned": len(first.plans),
        "repeats": repeats,
        "cold_cpu": _summary(cold_cpu),
        "cold_wall": _summary(cold_wall),
        "cold_solve_wall": _summary(cold_solve),
        "cold_shape_pack_wall": _summary(cold_pack),
        "registered_cpu": _summary(reg_cpu) if reg_cpu else None,
        "registered_wall": _summary(reg_wall) if reg_wall else None,
        "registration_solve_cpu": _summary(solve_cpu) if solve_cpu else None,
        "seeded_apps": len(seeded.seeded) if seeded is not None else 0,
        "same_fleet_seeded": None if seeded is None else seeded.fleet == first.fleet,
        "reused_cpu": _summary(warm_cpu),
        "reused_wall": _summary(warm_wall),
        "reused_shape_pack_wall": _summary(warm_pack),
        "reused_apps": len(again.reused),
        "ratio": first.fleet.billed_per_hour / occ if occ > 0 else math.nan,
        "errors": len(_errors(problems, first)),
        "reused_errors": len(_errors(problems, again)),
        "same_fleet_reused": first.fleet.instances == again.fleet.instances,
        "changed": {change: _change_summary(runs) for change, runs in changes.items()},
        "load_avg": [min(x[0] for x in load), max(x[0] for x in load)],
    }


_CHANGE_NAMES = {
    "prices": "new price list",
    "ramp": "load ramp",
    "drop": "load drop",
    "slower": "longer service times",
    "cold": "no plan at all",
}


def _change_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """:func:`changed_problems` over the repeats: the unbudgeted epoch's CPU, the budgeted epochs' (every
    epoch of every run), how many epochs it took, and whether every run ended with the same plans."""
    budgeted = [e["cpu_ms"] for r in runs for e in r["epochs"]]
    return {
        "change": {
            "prices": dict(PRICE_CHANGE),
            "ramp": {"rates": RAMP},
            "drop": {"rates": DROP},
            "slower": {"duration_s +": SLOWER_S},
            "cold": {"previous plans": 0},  # (printed as "no previous plan")
        }[runs[0]["change"]],
        "budget_s": runs[0]["budget_s"],
        "changed_apps": runs[0]["changed_apps"],
        "unbudgeted_cpu": _summary([r["unbudgeted_cpu_ms"] for r in runs]),
        "budgeted_epoch_cpu": _summary(budgeted),
        "first_epoch_cpu": _summary([r["epochs"][0]["cpu_ms"] for r in runs]),
        "epochs_to_converge": [len(r["epochs"]) for r in runs],
        "converged": all(r["converged"] for r in runs),
        "same_solved_plans": all(r["same_solved_plans"] for r in runs),
        "first_billed_over_unbudgeted": max(r["first_billed_over_unbudgeted"] for r in runs),
        "last_billed_over_unbudgeted": [r["last_billed_over_unbudgeted"] for r in runs],
        "runs": runs,
    }


# --------------------------------------------------------------------------- verification


def verify(fleet: Any, problems: Mapping[str, ProblemSpec], seeds: int = 3) -> dict[str, Any]:
    """Replay every shared instance. FIFO instances: random phases and, per share, the adversarial
    phases, against planned + added wait. Aligned instances: the packer's phases (wait must be 0), then
    random and adversarial phases against the FIFO bound (what holds if the phases are not honoured)."""
    apps = {a: (problems[a], fleet.plans[a]) for a in fleet.plans}
    checked = within = 0
    worst_excess = -math.inf
    tight = 0.0
    aligned_runs = aligned_max_wait = 0.0
    for inst in fleet.fleet.instances:
        if len(inst.shares) < 2:
            continue
        runs = [simulate_instance(inst, apps, seed=s, periods=100, honour_phases=False) for s in range(seeds)]
        if inst.aligned:
            own = simulate_instance(inst, apps, periods=100)
            runs.append(own)
            aligned_runs += len(own)
            aligned_max_wait = max(aligned_max_wait, *(r.max_wait_s for r in own))
        for v in range(len(inst.shares)):
            adv = simulate_instance(inst, apps, phases=adversarial_phases(inst, apps, v), periods=20)[v]
            runs.append([adv])
            if adv.added_wait_s > 0:
                tight = max(tight, adv.max_wait_s / adv.added_wait_s)
        for run in runs:
            for r in run:
                checked += 1
                within += r.within
                worst_excess = max(worst_excess, r.measured_worst_s - r.bound_s)
    return {
        "shared_instances": fleet.fleet.shared_instances,
        "aligned_instances": sum(1 for i in fleet.fleet.instances if i.aligned),
        "share_runs": checked,
        "within": within,
        "max_excess_s": worst_excess if checked else 0.0,
        "max_adversarial_wait_over_added_wait": tight,
        "aligned_share_runs": int(aligned_runs),
        "aligned_max_wait_s": aligned_max_wait,
    }


# --------------------------------------------------------------------------- steady load


def steady(
    problems: Mapping[str, ProblemSpec], epochs: int, noise: float, seed: int, solver: str = "dispatchable"
) -> dict[str, Any]:
    """Noisy steady load as the control loop sees it (control/epoch.py): every epoch each app's
    frame rate is drawn +-``noise`` around its mean and observed as a Poisson count over the epoch; the
    rate planned is :func:`~planner.scaling.forecast_rate` of the app's observed history (the module rates
    follow the frame rate, as through the edges' fan-outs); then re-plan (with ``solver``; a plan still
    covering the rates is kept by ``plan_fleet``), pack and scale. Counts scale changes and times every
    epoch (CPU)."""
    rng = np.random.default_rng(seed)
    history: dict[str, list[float]] = defaultdict(list)
    hyst, spare = Hysteresis(), Hysteresis(spare=1)
    current: dict[str, int] = {}
    with_spare: dict[str, int] = {}
    prev = None
    rows = []
    for epoch in range(epochs):
        planned: dict[str, ProblemSpec] = {}
        for app, p in problems.items():
            frames = p.modules[p.order()[0]].rate  # the root's rate: the app's frame rate
            true = frames * (1 + rng.uniform(-noise, noise))
            history[app].append(float(rng.poisson(true * EPOCH_S)) / EPOCH_S)
            scale = max(1e-3, forecast_rate(history[app])) / frames
            modules = {
                m: spec.model_copy(update={"rate": spec.rate * scale}) for m, spec in p.modules.items()
            }
            planned[app] = p.model_copy(update={"modules": modules})
        cpu = time.process_time()
        res = plan_fleet(
            planned,
            previous=prev.fleet if prev else None,
            previous_plans=prev.plans if prev else None,
            solver=solver_for(solver),
            solve_budget_s=SOLVE_BUDGET_S if solver == "dispatchable" else None,  # as the control loop
        )
        cpu_ms = (time.process_time() - cpu) * 1000
        target = res.fleet.counts()
        desired = hyst.desired(target, current, epoch)
        desired_spare = spare.desired(target, with_spare, epoch)
        moved = _moved(prev.fleet if prev else None, res.fleet)
        rows.append(
            {
                "epoch": epoch,
                "target": target,
                "desired": desired,
                "changed": sorted(h for h in desired if desired[h] != current.get(h, 0)),
                "desired_spare": desired_spare,
                "changed_spare": sorted(h for h in desired_spare if desired_spare[h] != with_spare.get(h, 0)),
                "target_changed": sorted(
                    h for h in target if prev is not None and target[h] != prev.fleet.counts().get(h, 0)
                ),
                "replanned": len(res.plans) - len(res.reused),
                "cpu_ms": cpu_ms,
                "moved_shares": moved,
                "billed": res.fleet.billed_per_hour,
                "prices": res.fleet.prices,
            }
        )
        current, with_spare, prev = desired, desired_spare, res
    return _steady_summary(rows, epochs, noise)


def _moved(before: Any, after: Any) -> int:
    """Shares whose (app, module, config) key sits on a slot that did not hold it before."""
    if before is None:
        return 0
    old = {(i.slot, s.key) for i in before.instances for s in i.shares}
    return sum(1 for i in after.instances for s in i.shares if (i.slot, s.key) not in old)


def _hw_stats(rows: list[dict[str, Any]], h: str, suffix: str, epochs: int) -> dict[str, Any]:
    after = rows[WARMUP:]
    changes = [r["epoch"] for r in after if h in r["changed" + suffix]]
    per_2 = max((sum(1 for e in changes if e in (k, k + 1)) for k in range(WARMUP, epochs)), default=0)
    gaps = [b - a for a, b in zip(changes, changes[1:], strict=False)]
    return {
        "warmup_changes": sum(1 for r in rows[1:WARMUP] if h in r["changed" + suffix]),
        "changes": len(changes),
        "max_changes_per_2_epochs": per_2,
        "min_gap_epochs": min(gaps) if gaps else None,
    }


def _overhead(rows: list[dict[str, Any]], key: str) -> float:
    """Capacity cost over the packed target's cost, after the warm-up."""
    cap = sum(r["prices"][h] * n for r in rows[WARMUP:] for h, n in r[key].items())
    want = sum(r["prices"][h] * n for r in rows[WARMUP:] for h, n in r["target"].items())
    return cap / want if want else 1.0


def _steady_summary(rows: list[dict[str, Any]], epochs: int, noise: float) -> dict[str, Any]:
    """Figures over the epochs after the warm-up (the forecast's trend window filling up: WARMUP epochs),
    plus the scale changes during the warm-up; for the default hysteresis and with one spare instance."""
    hws = sorted({h for r in rows for h in r["desired"]})
    after = rows[WARMUP:]
    per_hw = {
        h: {
            **_hw_stats(rows, h, "", epochs),
            "raw_target_changes": sum(1 for r in after if h in r["target_changed"]),
            "spare": _hw_stats(rows, h, "_spare", epochs),
        }
        for h in hws
    }
    return {
        "epochs": epochs,
        "warmup": WARMUP,
        "noise": noise,
        "per_hardware": per_hw,
        "max_changes_per_2_epochs": max((v["max_changes_per_2_epochs"] for v in per_hw.values()), default=0),
        "max_changes_per_2_epochs_spare": max(
            (v["spare"]["max_changes_per_2_epochs"] for v in per_hw.values()), default=0
        ),
        "capacity_over_target": _overhead(rows, "desired"),
        "capacity_over_target_spare": _overhead(rows, "desired_spare"),
        "mean_replanned_apps": statistics.fmean(r["replanned"] for r in after) if after else 0.0,
        "mean_moved_shares": statistics.fmean(r["moved_shares"] for r in after) if after else 0.0,
        "epoch_cpu": _summary([r["cpu_ms"] for r in after]) if after else None,
        "_rows": rows,
    }


# --------------------------------------------------------------------------- driver


def _steady_run(i: int, summary: dict[str, Any], apps: int, seed: int) -> dict[str, Any]:
    """One steady-load run's summary: the target's figures, no per-epoch rows."""
    return {
        "run": i,
        "fleet_seed": seed * 1000 + i,
        "noise_seed": seed + i,
        "apps": min(apps, 40),
        "max_changes_per_2_epochs": summary["max_changes_per_2_epochs"],
        "changes": sum(v["changes"] for v in summary["per_hardware"].values()),
        "types_over": sorted(
            h for h, v in summary["per_hardware"].items() if v["max_changes_per_2_epochs"] > 1
        ),
        "capacity_over_target": summary["capacity_over_target"],
        "mean_replanned_apps": summary["mean_replanned_apps"],
    }


def run(
    apps: int,
    seed: int,
    seeds: int,
    sizes: list[int],
    epochs: int,
    noise: float,
    progress: bool = True,
    solver: str = "dispatchable",
    steady_runs: int = 4,
) -> dict[str, Any]:
    if steady_runs < 1:
        raise ValueError(f"steady_runs must be >= 1, got {steady_runs}")
    from rich.progress import Progress

    started = time.perf_counter()
    sizes = sorted(set(sizes) | {apps})
    fleets: list[dict[str, Any]] = []
    with Progress(disable=not progress, transient=True) as bar:
        task = bar.add_task("fleets", total=len(sizes) * seeds + 1 + steady_runs + len(SOLVERS))
        for size in sizes:
            for s in range(seeds):
                problems = {f"app{i}": p for i, p in enumerate(generate_problems(size, seed * 1000 + s))}
                row = one_fleet(problems, solver)
                row.update(size=size, seed=seed * 1000 + s)
                fleets.append(row)
                bar.advance(task)
        main = next(f for f in fleets if f["size"] == apps)
        timing = []
        for name in SOLVERS:
            timing.append(epoch_times(main["_problems"], 3, name))
            bar.advance(task)
        check = verify(main["_fleet"], main["_problems"])
        bar.advance(task)
        steady_apps = {a: main["_problems"][a] for a in sorted(main["_problems"])[: min(apps, 40)]}
        load = steady(steady_apps, epochs, noise, seed, solver)
        runs = [_steady_run(0, load, apps, seed)]
        bar.advance(task)
        for i in range(1, steady_runs):
            fleet = {f"app{k}": p for k, p in enumerate(generate_problems(apps, seed * 1000 + i))}
            first = {a: fleet[a] for a in sorted(fleet)[: min(apps, 40)]}
            runs.append(_steady_run(i, steady(first, epochs, noise, seed + i, solver), apps, seed))
            bar.advance(task)
    for f in fleets:
        f.pop("_fleet")
        f.pop("_problems")
    return {
        "apps": apps,
        "solver": solver,
        "seed": seed,
        "seeds": seeds,
        "fleets": fleets,
        "by_size": _by_size(fleets),
        "timing": timing,
        "verification": check,
        "steady": load,
        "steady_runs": runs,
        "targets": {"ratio": TARGET_RATIO, "epoch_s": TARGET_EPOCH_S, "changes_per_2_epochs": 1},
        "wall_s": time.perf_counter() - started,
        "host": {"cpus": os.cpu_count(), "load_avg": os.getloadavg()},
    }


def _by_size(fleets: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for size in sorted({f["size"] for f in fleets}):
        rs = [f for f in fleets if f["size"] == size]
        ratio = [f["ratio"] for f in rs]
        out[size] = {
            "fleets": len(rs),
            "ratio_median": statistics.median(ratio),
            "ratio_min": min(ratio),
            "ratio_max": max(ratio),
            "dedicated_ratio_median": statistics.median(f["dedicated_ratio"] for f in rs),
            "fifo_only_ratio_median": statistics.median(f["fifo_only_ratio"] for f in rs),
            "aligned_instances_median": statistics.median(f["aligned_instances"] for f in rs),
            "latency_free_ratio_median": statistics.median(f["latency_free_ratio"] for f in rs),
            "packing_ratio_median": statistics.median(f["packing_ratio"] for f in rs),
            "load_ratio_median": statistics.median(f["load_occupancy"] / f["occupancy_bound"] for f in rs),
            "plans_ratio_median": statistics.median(f["plans_occupancy"] / f["occupancy_bound"] for f in rs),
            "shared_instances_median": statistics.median(f["shared_instances"] for f in rs),
            "errors": sum(f["error_count"] for f in rs),
        }
    return out


def plot(result: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.4))
    sizes = sorted(result["by_size"])
    for key, label, marker in [
        ("dedicated_ratio", "dedicated (solver's plans)", "s"),
        ("ratio", "packed fleet (this work)", "o"),
        ("latency_free_ratio", "latency-free packing (no SLO check)", "^"),
    ]:
        xs = [f["size"] for f in result["fleets"]]
        ys = [f[key] for f in result["fleets"]]
        ax.scatter(xs, ys, marker=marker, alpha=0.5, label=label)
        ax.plot(sizes, [statistics.median(f[key] for f in result["fleets"] if f["size"] == s) for s in sizes])
    ax.axhline(TARGET_RATIO, color="k", ls="--", lw=1, label=f"target {TARGET_RATIO}")
    ax.set_xscale("log")
    ax.set_xlabel("apps in the fleet")
    ax.set_ylabel("billed $/h / occupancy lower bound")
    ax.set_title(f"cost per fleet size ({result['seeds']} seeds each)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    rows = result["steady"]["_rows"]
    for h in sorted({h for r in rows for h in r["desired"]}):
        line = ax2.plot(
            [r["epoch"] for r in rows], [r["desired"].get(h, 0) for r in rows], label=f"{h} desired"
        )
        ax2.plot(
            [r["epoch"] for r in rows],
            [r["target"].get(h, 0) for r in rows],
            ls=":",
            color=line[0].get_color(),
        )
    ax2.set_xlabel("epoch")
    ax2.set_ylabel("instances (dotted: packed target)")
    ax2.set_title(f"steady load +-{result['steady']['noise']:.0%}: desired capacity")
    ax2.grid(alpha=0.3)
    ax2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _ms(x: dict[str, float]) -> str:
    return f"{x['median_ms']:.0f} ({x['min_ms']:.0f}-{x['max_ms']:.0f})"


def render(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 120))
    table = Table(
        title=f"billed cost after packing / occupancy lower bound (median, min-max over seeds; "
        f"{result['solver']} solver)"
    )
    cols = ["apps", "fleets", "packed", "min-max", "FIFO only", "dedicated", "latency-free", "shared inst."]
    for col in [*cols, "aligned inst.", "errors"]:
        table.add_column(col, justify="right")
    for size, s in result["by_size"].items():
        table.add_row(
            str(size),
            str(s["fleets"]),
            f"{s['ratio_median']:.3f}",
            f"{s['ratio_min']:.3f}-{s['ratio_max']:.3f}",
            f"{s['fifo_only_ratio_median']:.3f}",
            f"{s['dedicated_ratio_median']:.3f}",
            f"{s['latency_free_ratio_median']:.3f}",
            f"{s['shared_instances_median']:g}",
            f"{s['aligned_instances_median']:g}",
            str(s["errors"]),
        )
    console.print(table)
    table = Table(
        title="where the bill goes, per $/h of the occupancy lower bound (median over seeds): the apps' "
        "requests on the plans' machines, the plans' occupancy (requests + capacity held for the "
        "guarantees), the bill after packing"
    )
    for col in ["apps", "requests", "plans' occupancy", "billed", "billed / plans' occupancy"]:
        table.add_column(col, justify="right")
    for size, s in result["by_size"].items():
        table.add_row(
            str(size),
            f"{s['load_ratio_median']:.3f}",
            f"{s['plans_ratio_median']:.3f}",
            f"{s['ratio_median']:.3f}",
            f"{s['packing_ratio_median']:.4f}",
        )
    console.print(table)
    first = result["timing"][0]
    table = Table(
        title=f"one epoch of {first['apps']} apps (plan + pack), {first['repeats']} runs: median (min-max) "
        f"ms; target <= {TARGET_EPOCH_S * 1000:.0f} ms on one core; dispatchable: the control loop's solver"
    )
    cols = ["solver", "cold CPU", "cold wall", "solve wall", "registered CPU", "reused CPU", "reused wall"]
    for col in [*cols, "bill/bound", "errors", "load avg"]:
        table.add_column(col, justify="right")
    for t in result["timing"]:
        table.add_row(
            t["solver"],
            _ms(t["cold_cpu"]),
            _ms(t["cold_wall"]),
            _ms(t["cold_solve_wall"]),
            _ms(t["registered_cpu"]) if t.get("registered_cpu") else "-",
            _ms(t["reused_cpu"]),
            _ms(t["reused_wall"]),
            f"{t['ratio']:.3f}",
            f"{t['errors']} / {t['reused_errors']}",
            f"{t['load_avg'][0]:.2f}-{t['load_avg'][1]:.2f}",
        )
    console.print(table)
    for t in result["timing"]:
        for name, pc in (t.get("changed") or {}).items():
            cold = name == "cold"
            change = "no previous plan" if cold else ", ".join(f"{h} x{f:g}" for h, f in pc["change"].items())
            last = ", ".join(f"{x:.4f}" for x in pc["last_billed_over_unbudgeted"])
            quick = "/".join(str(r["epochs"][0]["quick"]) for r in pc["runs"])
            console.print(
                f"{_CHANGE_NAMES[name]} ({t['solver']}; {change}): "
                f"{pc['changed_apps']} apps {'to plan' if cold else 'whose problems changed'}; "
                f"solved at once {_ms(pc['unbudgeted_cpu'])} ms "
                f"CPU; with a {pc['budget_s']:g} s solve budget every epoch "
                f"{_ms(pc['budgeted_epoch_cpu'])} ms "
                f"(the first {_ms(pc['first_epoch_cpu'])}, {quick} quick plans, its bill at most "
                f"{pc['first_billed_over_unbudgeted']:.4f} x the solved one), none carried after "
                f"{'/'.join(map(str, pc['epochs_to_converge']))} epochs, billing {last} x; the same solver "
                f"plans as solving at once: {pc['same_solved_plans']}"
            )
    for t in result["timing"]:
        if t.get("registration_solve_cpu"):
            r = t["registration_solve_cpu"]
            console.print(
                f"registered ({t['solver']}): every app's registration solved it "
                f"({r['median_ms']:.1f} ms CPU median, {r['max_ms']:.1f} max per app); the epoch took "
                f"{t['seeded_apps']} of those plans; "
                f"same fleet as the cold epoch: {t['same_fleet_seeded']}"
            )
    v = result["verification"]
    console.print(
        f"replay of {v['shared_instances']} shared instances: {v['within']}/{v['share_runs']} share runs "
        f"within planned + added wait (max excess {v['max_excess_s'] * 1000:.4f} ms; the adversarial phases "
        f"reach {v['max_adversarial_wait_over_added_wait']:.3f} of the added wait); {v['aligned_instances']} "
        f"aligned: {v['aligned_share_runs']} share runs at the packer's phases, largest wait "
        f"{v['aligned_max_wait_s'] * 1e6:.3f} us (random/adversarial phases: within the FIFO bound above)"
    )
    st = result["steady"]
    table = Table(
        title=f"steady load +-{st['noise']:.0%} with Poisson counts: epochs {st['warmup']}-"
        f"{st['epochs'] - 1} (after {st['warmup']} warm-up epochs)"
    )
    cols = ["hardware", "warm-up changes", "changes", "packed-target changes", "max per 2 epochs", "min gap"]
    for col in [*cols, "spare=1: changes", "max per 2", "min gap"]:
        table.add_column(col, justify="right")
    for h, x in st["per_hardware"].items():
        sp = x["spare"]
        table.add_row(
            h,
            str(x["warmup_changes"]),
            str(x["changes"]),
            str(x["raw_target_changes"]),
            str(x["max_changes_per_2_epochs"]),
            "-" if x["min_gap_epochs"] is None else str(x["min_gap_epochs"]),
            str(sp["changes"]),
            str(sp["max_changes_per_2_epochs"]),
            "-" if sp["min_gap_epochs"] is None else str(sp["min_gap_epochs"]),
        )
    console.print(table)
    console.print(
        f"capacity cost / packed target cost: {st['capacity_over_target']:.4f} (spare=1: "
        f"{st['capacity_over_target_spare']:.4f})"
    )
    cpu = st["epoch_cpu"]
    console.print(
        f"apps re-planned per epoch: {st['mean_replanned_apps']:.1f}; shares moved to another slot per "
        f"epoch: {st['mean_moved_shares']:.1f}"
        + (f"; epoch CPU {_ms(cpu)} ms ({result['solver']} solver)" if cpu else "")
    )
    runs = result["steady_runs"]
    table = Table(
        title=f"steady load, {len(runs)} runs (40 apps each, epochs {st['warmup']}-{st['epochs'] - 1}): "
        "target <= 1 scale change per hardware type per two epochs"
    )
    for col in [
        "run",
        "fleet seed",
        "noise seed",
        "max per 2 epochs",
        "types over",
        "changes",
        "capacity/target",
    ]:
        table.add_column(col, justify="right")
    table.add_column("re-planned apps/epoch", justify="right")
    for r in runs:
        table.add_row(
            str(r["run"]),
            str(r["fleet_seed"]),
            str(r["noise_seed"]),
            str(r["max_changes_per_2_epochs"]),
            ", ".join(r["types_over"]) or "-",
            str(r["changes"]),
            f"{r['capacity_over_target']:.4f}",
            f"{r['mean_replanned_apps']:.2f}",
        )
    console.print(table)
    met = sum(1 for r in runs if r["max_changes_per_2_epochs"] <= 1)
    console.print(f"steady-load target met in {met} of {len(runs)} runs")
    hl = result["host"]["load_avg"]
    console.print(f"{result['wall_s']:.0f} s wall, load avg {hl[0]:.2f}, {hl[1]:.2f}, {hl[2]:.2f}")


def main(
    apps: int,
    seed: int,
    as_json: bool,
    plot_path: str | None,
    *,
    seeds: int = 5,
    sizes: list[int] | None = None,
    epochs: int = 24,
    noise: float = 0.05,
    solver: str = "dispatchable",
    steady_runs: int = 4,
) -> int:
    solver_for(solver)  # ValueError on an unknown name, before any work
    result = run(
        apps,
        seed,
        seeds,
        sizes or [10, 30],
        epochs,
        noise,
        progress=not as_json,
        solver=solver,
        steady_runs=steady_runs,
    )
    if plot_path:
        plot(result, plot_path)
        result["plot"] = plot_path
    rows = result["steady"].pop("_rows")
    if as_json:
        print(
            json.dumps(
                {**result, "steady": {**result["steady"], "epochs_detail": rows}}, indent=2, default=str
            )
        )
    else:
        render({**result, "steady": {**result["steady"], "_rows": rows}})
        if plot_path:
            print(f"plot: {plot_path}")
    return 0
