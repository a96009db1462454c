"""Benchmark of the dispatch schedule + simulator: prints figures (a rich table, or JSON with ``--json``).

    .venv/bin/python bench/simulator.py                 # large synthetic plan, 10 simulated minutes
    .venv/bin/python bench/simulator.py --duration 60   # shorter while iterating
    .venv/bin/python bench/simulator.py --check         # the papers' examples (docs/design.md §7)
    .venv/bin/python bench/simulator.py --generated 100 # dispatch-aware solves of generated problems

The large plan is built directly (no solver): a three-module DAG (detector -> car, detector -> person)
serving 100,000 req/s in total on ~1,000 machines, every detector machine at full throughput. Every plan
(large and papers') is made dispatch-realisable the way :mod:`planner.robust` does it: a child gets the
machines its bursts need (``required_rate``) and every module's ``worst_case_latency_s`` is the realised
figure (schedule bound + burst), so "measured <= planned" checks the dispatch against what the plan
claims; Theorem 1's figure is printed beside it. ``--generated`` runs
:func:`planner.robust.solve_dispatchable` on generated problems and simulates each plan (uniform
arrivals): within plan, overflows, price of realisability against the plain (Theorem-1) optimum; joins
(modules with several parents) are counted apart as well. Exit status 1 when a TC plan is not within
its figures or a window overflows. ``--arrival-study N`` plans N generated apps with the control loop's
10 % headroom and simulates each under uniform, Poisson and bursty frames, with no admission, windows
capped at their batch, the front's admission (windows capped at what the plan sized the children
for), and that admission in three fronts that count apart (a Lambda front without the shared counts):
frames shed, admitted frames within the SLO (exit status 1 unless all of them, with the front's
admission, and no window overflows).

    .venv/bin/python bench/simulator.py --arrival-study 100   # about 10 s
    .venv/bin/python bench/simulator.py --arrival-study 100 --headroom 0.1 --reserve 0.2
    .venv/bin/python bench/simulator.py --reserve-study 30    # a shed_target as the rate moves

``--reserve-study N`` chooses each generated app's admission reserve for a 1 % shed target at its
rates, as a registration does, then compares at half and twice those rates the reserve kept with the
reserve chosen again (the control loop's review, control/reserves.py).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.dispatch import DispatchSchedule, build_schedules, theorem1_latencies
from planner.errors import InfeasibleError
from planner.generate import generate_problem
from planner.models import MachineGroup, ModulePlan, Plan, ProblemSpec
from planner.robust import annotate, realise, solve_dispatchable
from planner.simulator import SimulationReport, simulate

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _module_plan(groups: list[MachineGroup], rate: float) -> ModulePlan:
    mp = ModulePlan(latency_budget_s=0.0, worst_case_latency_s=0.0, groups=groups)
    wcl = max(theorem1_latencies(mp))
    planned = sum(g.machines * g.rate_per_machine for g in groups)
    return ModulePlan(
        latency_budget_s=wcl, worst_case_latency_s=wcl, dummy_rate=planned - rate, groups=groups
    )


def dispatchable(problem: ProblemSpec, plan: Plan) -> Plan:
    """A hand-made plan made dispatch-realisable: each child whose bursts could overlap gets whole
    machines of its (single, full-throughput) configuration until its capacity covers the spread rate
    its bursts need; then every module's worst case is the realised figure
    (:func:`planner.robust.annotate`)."""
    for _ in range(8):
        real = realise(problem, plan)
        short = {m: r for m, r in real.items() if r.guaranteed and not r.collision_free}
        if not short:
            return annotate(problem, plan, real)
        modules = dict(plan.modules)
        for m, r in short.items():
            (g,) = plan.modules[m].groups  # hand plans: one configuration per child
            t = g.concurrency * g.batch / g.duration_s
            need = max(r.required_rate, problem.modules[m].rate) * (1 + 1e-6)
            groups = [g.model_copy(update={"machines": max(g.machines, math.ceil(need / t - 1e-9))})]
            modules[m] = _module_plan(groups, problem.modules[m].rate)
        plan = plan.model_copy(update={"modules": modules})
    raise SystemExit("could not size the hand-made plan's children")


def large_problem() -> tuple[ProblemSpec, Plan]:
    """100,000 req/s in total: detector 50k, car 30k, person 20k. The detector runs 500 full batch-8
    machines; the children's machine counts come from their bursts (:func:`dispatchable`)."""
    gpu = {"hardware": "gpu"}
    groups = {
        # t = c*b/d = 100 req/s; 500 * 100 = 50,000 (windows 8/50,000 s: 0.16 ms)
        "detector": [MachineGroup(**gpu, batch=8, machines=500, rate_per_machine=100.0, duration_s=0.08)],
        # t = 2*4/0.05 = 160: a detector batch sends ceil(0.6 * 8) = 5 cars per 0.16 ms = 31,250 req/s
        "car": [
            MachineGroup(**gpu, batch=4, concurrency=2, machines=188, rate_per_machine=160.0, duration_s=0.05)
        ],
        # t = 2/0.025 = 80: ceil(0.4 * 8) = 4 persons per 0.16 ms = 25,000 req/s
        "person": [MachineGroup(**gpu, batch=2, machines=250, rate_per_machine=80.0, duration_s=0.025)],
    }
    rates = {"detector": 50_000.0, "car": 30_000.0, "person": 20_000.0}
    problem = ProblemSpec(
        name="synthetic-100k",
        slo_s=0.5,
        hardware={"gpu": {"price_per_hour": 1.0}},
        modules={
            m: {
                "rate": rates[m],
                "profile": [
                    {
                        "hardware": "gpu",
                        "batch": g.batch,
                        "concurrency": g.concurrency,
                        "duration_s": g.duration_s,
                    }
                    for g in gs
                ],
            }
            for m, gs in groups.items()
        },
        edges=[("detector", "car"), ("detector", "person")],
    )
    modules = {m: _module_plan(gs, rates[m]) for m, gs in groups.items()}
    plan = Plan(objective="billed", cost_per_hour=0.0, billed_per_hour=0.0, solve_ms=0.0, modules=modules)
    return problem, _costed(dispatchable(problem, plan))


def _costed(plan: Plan) -> Plan:
    gs = [g for mp in plan.modules.values() for g in mp.groups]
    cost = sum(g.machines * g.rate_per_machine / (g.concurrency * g.batch / g.duration_s) for g in gs)
    return plan.model_copy(
        update={"cost_per_hour": cost, "billed_per_hour": float(sum(g.machines for g in gs))}
    )


def example_plans() -> list[tuple[ProblemSpec, Plan]]:
    """Hand-made plans for the papers' examples (what the papers' tables give; no solver involved)."""
    out = []
    gpu = {"hardware": "gpu"}
    specs = {
        # Harpagon M3, 198 req/s, SLO 1.0: 6 x batch-32 (t=40) + 1 x batch-8 at 38 (t=32 -> full w/ dummy)
        "harpagon_m1.json": {
            "m1": [MachineGroup(**gpu, batch=8, machines=4, rate_per_machine=25.0, duration_s=0.32)]
        },
        "harpagon_m3.json": {
            "m3": [
                MachineGroup(**gpu, batch=32, machines=4, rate_per_machine=40.0, duration_s=0.8),
                MachineGroup(**gpu, batch=8, machines=1, rate_per_machine=32.0, duration_s=0.25),
                MachineGroup(**gpu, batch=2, machines=1, rate_per_machine=6.0, duration_s=0.1),
            ]
        },
        # Piccolo M1: 285 req/s all on batch-100 machines (docs/design.md §2: 1 + 100/285 = 1.35 s)
        "piccolo_m1.json": {
            "m1": [MachineGroup(**gpu, batch=100, machines=3, rate_per_machine=95.0, duration_s=1.0)]
        },
        "piccolo_m2m3_chain.json": {
            "a": [MachineGroup(**gpu, batch=4, machines=2, rate_per_machine=25.0, duration_s=0.16)],
            "b": [MachineGroup(**gpu, batch=4, machines=2, rate_per_machine=20.0, duration_s=0.2)],
        },
    }
    for fname, groups in specs.items():
        problem = ProblemSpec.model_validate_json((EXAMPLES / fname).read_text())
        modules = {m: _module_plan(gs, problem.modules[m].rate) for m, gs in groups.items()}
        plan = Plan(objective="billed", cost_per_hour=0.0, billed_per_hour=0.0, solve_ms=0.0, modules=modules)
        out.append((problem, _costed(dispatchable(problem, plan))))
    return out


def _rows(report: SimulationReport, plan: Plan) -> list[dict[str, object]]:
    return [
        {
            "module": m,
            "requests": s.requests,
            "p99_s": round(s.latency.p99_s, 4),
            "measured_max_s": round(s.measured_worst_case_s, 4),
            "schedule_bound_s": round(s.schedule_worst_case_s, 4),
            "theorem1_s": round(s.theorem1_s, 4),
            "planned_s": round(s.planned_worst_case_s, 4),
            "machines": sum(g.machines for g in plan.modules[m].groups),
            "headroom": round(float((plan.modules[m].model_extra or {}).get("headroom_used", 0.0)), 3),
            "within_plan": s.within_plan,
            "overflow": s.overflow_batches,
            "mean_fill": round(s.mean_fill, 3),
        }
        for m, s in report.modules.items()
    ]


def _slot_at_p99_us(schedule: DispatchSchedule, horizon: float, calls: int = 10_000) -> float:
    """p99 of one in-process ``slot_at`` call over random times (microseconds)."""
    rng = random.Random(0)
    times = []
    for _ in range(calls):
        t = rng.uniform(0.0, horizon)
        t0 = time.perf_counter_ns()
        schedule.slot_at(t)
        times.append(time.perf_counter_ns() - t0)
    times.sort()
    return round(times[int(0.99 * calls)] / 1000, 1)


def run(problem: ProblemSpec, plan: Plan, duration: float, arrivals: str, dispatch: str) -> dict[str, object]:
    t0 = time.perf_counter()
    schedules = build_schedules(plan, {h: hw.price_per_hour for h, hw in problem.hardware.items()})
    t_sched = time.perf_counter() - t0
    slot_at_p99_us = {m: _slot_at_p99_us(s, duration) for m, s in schedules.items()}
    t0 = time.perf_counter()
    report = simulate(problem, plan, duration, arrivals=arrivals, dispatch=dispatch)  # type: ignore[arg-type]
    wall = time.perf_counter() - t0
    return {
        "problem": problem.name,
        "dispatch": dispatch,
        "arrivals": arrivals,
        "simulated_s": duration,
        "machines": sum(g.machines for mp in plan.modules.values() for g in mp.groups),
        "windows_per_period": {m: len(s.windows) for m, s in schedules.items()},
        "schedule_build_s": round(t_sched, 3),
        "slot_at_p99_us": slot_at_p99_us,
        "wall_s": round(wall, 2),
        "requests": report.requests,
        "requests_per_wall_s": round(report.requests / wall),
        "slo_s": problem.slo_s,
        "slo_attainment": report.end_to_end.slo_attainment,
        "e2e_max_s": round(report.end_to_end.latency.max_s, 4),
        "e2e_planned_s": round(report.end_to_end.planned_worst_case_s, 4),
        "all_within_plan": report.all_within_plan,
        "modules": _rows(report, plan),
    }


def _print(results: list[dict[str, object]]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if Console().is_terminal else 160)
    for r in results:
        console.print(
            f"[bold]{r['problem']}[/] dispatch={r['dispatch']} arrivals={r['arrivals']} "
            f"simulated={r['simulated_s']}s machines={r['machines']} wall={r['wall_s']}s "
            f"requests={r['requests']:,} ({r['requests_per_wall_s']:,}/s wall) "
            f"SLO {r['slo_s']}s attained {r['slo_attainment']:.4%} e2e max {r['e2e_max_s']}s "
            f"(planned {r['e2e_planned_s']}s) schedule build {r['schedule_build_s']}s "
            f"slot_at p99 {r['slot_at_p99_us']} us"
        )
        rows = r["modules"]
        assert isinstance(rows, list)
        table = Table(*rows[0].keys())
        for row in rows:
            table.add_row(*(str(v) for v in row.values()))
        console.print(table)


def generated(count: int, duration: float, seed: int = 0) -> dict[str, object]:
    """Dispatch-aware solves of ``count`` generated problems per objective, each plan simulated under
    uniform arrivals: how many modules stay within their realised figure, overflows, the same for the
    joins (modules with several parents, and the plans that have one), the price of realisability
    (cost against the plain Theorem-1 optimum) and the solve time."""
    out: dict[str, object] = {"problems": count, "simulated_s": duration}
    for objective in ("billed", "occupancy"):
        price: list[float] = []
        join_price: list[float] = []
        solve_ms: list[float] = []
        keys = ("plans", "infeasible", "modules", "within", "overflow", "join_plans", "joins", "joins_within")
        tally = dict.fromkeys(keys, 0)
        tally["joins_overflow"] = 0
        e2e_ok = 0
        for i in range(count):
            problem = generate_problem(seed + i)
            try:
                plan = solve_dispatchable(problem, objective=objective)
            except InfeasibleError:
                tally["infeasible"] += 1
                continue
            report = simulate(problem, plan, duration)
            joins = {m for m, ps in problem.parents().items() if len(ps) > 1}
            tally["plans"] += 1
            tally["join_plans"] += bool(joins)
            realisability = (plan.model_extra or {}).get("price_of_realisability")
            if realisability is not None:  # None: no plain plan to compare with
                price.append(float(realisability))
                if joins:
                    join_price.append(float(realisability))
            solve_ms.append(plan.solve_ms)
            for name, m in report.modules.items():
                within = m.measured_worst_case_s <= plan.modules[name].worst_case_latency_s + 1e-9
                tally["modules"] += 1
                tally["within"] += within
                tally["overflow"] += m.overflow_batches > 0
                if name in joins:
                    tally["joins"] += 1
                    tally["joins_within"] += within
                    tally["joins_overflow"] += m.overflow_batches > 0
            e2e_ok += report.end_to_end.latency.max_s <= problem.slo_s + 1e-9
        out[objective] = {
            **tally,
            "e2e_within_slo": e2e_ok,
            "price_mean": round(statistics.fmean(price), 4) if price else 0.0,
            "price_max": round(max(price), 4) if price else 0.0,
            "price_nonzero": sum(1 for x in price if x > 1e-9),
            "join_price_mean": round(statistics.fmean(join_price), 4) if join_price else 0.0,
            "join_price_max": round(max(join_price), 4) if join_price else 0.0,
            "solve_ms_median": round(statistics.median(solve_ms), 1) if solve_ms else 0.0,
            "solve_ms_p95": round(sorted(solve_ms)[int(0.95 * (len(solve_ms) - 1))], 1) if solve_ms else 0.0,
        }
    return out


ADMISSIONS = ("none", "batch", "planned")
#: front instances that each count only their own frames, in the study's last admission row
UNSHARED_FRONTS = 3


def arrival_study(
    count: int, duration: float, headroom: float = 0.1, reserve: float = 0.0, seed: int = 0
) -> dict[str, object]:
    """What the arrival process does to dispatch-aware plans, with and without the front's admission.

    ``count`` generated problems, each solved (billed) for its rates times ``1 + headroom`` (the control
    loop plans the forecast with 10 % headroom) and for its SLO times ``1 - reserve`` (latency left for
    frames the admission spills into a later window), and simulated at its rates and SLO under uniform,
    Poisson and
    bursty root arrivals, with each root admission of :data:`planner.simulator.Admission`: ``none``
    (every arrival enters its window), ``batch`` (windows capped at their batch, spill, shed) and
    ``planned`` (capped at what the plan sized the children for, the front's). Per (arrivals,
    admission): apps whose admitted frames fall below 99 % within the SLO, the admitted attainment (mean,
    min), the frames shed (mean, max over apps), the apps with a window overflow, and the frames
    answered within the SLO out of all offered ("good"). The last admission row is ``planned`` in
    :data:`UNSHARED_FRONTS` fronts that each count only their own frames."""
    from rich.console import Console
    from rich.progress import track

    rows: dict[tuple[str, str], list[tuple[float, float, bool]]] = {}
    billed = 0.0
    for i in track(range(count), description="simulating", console=Console(stderr=True), transient=True):
        problem = generate_problem(seed + i)
        planned_for = problem.model_copy(
            update={
                "slo_s": problem.slo_s * (1 - reserve),
                "modules": {
                    m: spec.model_copy(update={"rate": spec.rate * (1 + headroom)})
                    for m, spec in problem.modules.items()
                },
            }
        )
        plan = solve_dispatchable(planned_for)
        billed += plan.billed_per_hour
        for k, arrivals in enumerate(("uniform", "poisson", "bursty")):
            for admission, fronts in (*((a, 1) for a in ADMISSIONS), ("planned", UNSHARED_FRONTS)):
                r = simulate(
                    problem,
                    plan,
                    duration,
                    arrivals,  # type: ignore[arg-type]
                    seed=seed + i + k,
                    admission=admission,  # type: ignore[arg-type]
                    front_instances=fronts,
                )
                label = admission if fronts == 1 else f"{admission} x{fronts} fronts, unshared"
                shed = r.frames_shed / r.frames_offered if r.frames_offered else 0.0
                overflow = any(m.overflow_batches for m in r.modules.values())
                row = (r.end_to_end.slo_attainment, shed, overflow)
                rows.setdefault((arrivals, label), []).append(row)
    out: dict[str, object] = {
        "problems": count,
        "simulated_s": duration,
        "headroom": headroom,
        "reserve": reserve,
        "billed_per_hour": round(billed, 2),
    }
    for (arrivals, admission), vals in rows.items():
        att = [v[0] for v in vals]
        shed_frac = [v[1] for v in vals]
        out[f"{arrivals}/{admission}"] = {
            "apps_below_99": sum(1 for a in att if a < 0.99),
            "attainment_mean": round(statistics.fmean(att), 4),
            "attainment_min": round(min(att), 4),
            "shed_mean": round(statistics.fmean(shed_frac), 4),
            "shed_max": round(max(shed_frac), 4),
            "apps_overflowing": sum(1 for v in vals if v[2]),
            "good": round(statistics.fmean((1 - s) * a for a, s in zip(att, shed_frac, strict=True)), 4),
        }
    return out


def _scaled(problem: ProblemSpec, factor: float, slo_factor: float = 1.0) -> ProblemSpec:
    """``problem`` with every rate times ``factor`` and its SLO times ``slo_factor``."""
    return problem.model_copy(
        update={
            "slo_s": problem.slo_s * slo_factor,
            "modules": {
                m: spec.model_copy(update={"rate": spec.rate * factor}) for m, spec in problem.modules.items()
            },
        }
    )


def _reserve_at(
    problem: ProblemSpec, reserve: float, headroom: float, seed: int
) -> tuple[float, float] | None:
    """(Poisson frames shed, $/h) of ``problem`` planned as the control loop plans an app with that
    admission reserve (rates x (1 + headroom), SLO x (1 - reserve)) and simulated at its own rates
    against its whole SLO with the front's admission, for at least as many frames as a registration's
    simulation (``control.registry``); None when it cannot be planned."""
    from control.registry import SHED_SIM_FRAMES, SHED_SIM_MAX_S, SHED_SIM_MIN_S

    try:
        plan = solve_dispatchable(_scaled(problem, 1 + headroom, 1 - reserve))
    except InfeasibleError:
        return None
    roots = sum(problem.modules[m].rate for m in problem.modules if not problem.parents().get(m))
    duration = min(max(SHED_SIM_FRAMES / roots, SHED_SIM_MIN_S), SHED_SIM_MAX_S)
    r = simulate(problem, plan, duration, "poisson", seed=seed, admission="planned")
    return (r.frames_shed / r.frames_offered if r.frames_offered else 0.0), plan.billed_per_hour


def _choose(
    problem: ProblemSpec, target: float, headroom: float, seed: int
) -> tuple[float, float, float, bool]:
    """(reserve, shed, $/h, met) at ``problem``'s rates, by the registration's and the control loop's
    rule (``control.registry.pick_reserve``)."""
    from control.registry import pick_reserve

    best = pick_reserve(lambda reserve: _reserve_at(problem, reserve, headroom, seed), target)
    if best is None:
        raise InfeasibleError(f"{problem.name}: not plannable within its SLO")
    return best


def reserve_study(
    count: int,
    factors: tuple[float, ...] = (0.5, 2.0),
    target: float = 0.01,
    headroom: float = 0.1,
    seed: int = 0,
) -> dict[str, object]:
    """What keeping a ``shed_target`` needs when an app's rate moves (control/reserves.py).

    For ``count`` generated apps, the reserve is chosen at the generated rates as a registration chooses
    it (:func:`_choose`, target ``target``). Then at every rate ``factor`` x those rates, the app is
    planned (i) with that reserve, as before the control loop reviewed reserves, and (ii) with the reserve
    chosen again at the new rate, as the review does; each simulated under Poisson frames with the
    front's admission. Per factor: apps whose shed meets the target, mean and largest shed, the bill, and
    how many reserves the review raised or lowered."""
    from rich.console import Console
    from rich.progress import track

    per: dict[float, dict[str, list[float]]] = {f: {} for f in factors}
    base_met = 0
    planned = 0
    for i in track(range(count), description="reserves", console=Console(stderr=True), transient=True):
        problem = generate_problem(seed + i)
        try:
            r0, _shed0, _cost0, met0 = _choose(problem, target, headroom, seed + i)
        except InfeasibleError:
            continue
        planned += 1
        base_met += met0
        for f in factors:
            at = _scaled(problem, f)
            stale = _reserve_at(at, r0, headroom, seed + i)
            try:
                rf, shed_f, cost_f, _met_f = _choose(at, target, headroom, seed + i)
            except InfeasibleError:
                continue
            d = per[f]
            if stale is not None:
                d.setdefault("stale_shed", []).append(stale[0])
                d.setdefault("stale_cost", []).append(stale[1])
                d.setdefault("both_cost_stale", []).append(stale[1])
                d.setdefault("both_cost_reviewed", []).append(cost_f)
            else:
                d.setdefault("stale_unplannable", []).append(1.0)
            d.setdefault("reviewed_shed", []).append(shed_f)
            d.setdefault("reviewed_cost", []).append(cost_f)
            d.setdefault("raised", []).append(float(rf > r0))
            d.setdefault("lowered", []).append(float(rf < r0))
    out: dict[str, object] = {
        "apps": planned,
        "target": target,
        "headroom": headroom,
        "met_at_registered_rate": base_met,
    }
    for f, d in per.items():
        kept_shed, reviewed = d.get("stale_shed", []), d.get("reviewed_shed", [])
        out[f"x{f:g}"] = {
            "apps": len(reviewed),
            "stale_unplannable": int(sum(d.get("stale_unplannable", []))),
            "stale_met": sum(1 for x in kept_shed if x <= target),
            "stale_shed_mean": round(statistics.fmean(kept_shed), 4) if kept_shed else None,
            "stale_shed_max": round(max(kept_shed), 4) if kept_shed else None,
            "reviewed_met": sum(1 for x in reviewed if x <= target),
            "reviewed_shed_mean": round(statistics.fmean(reviewed), 4) if reviewed else None,
            "reviewed_shed_max": round(max(reviewed), 4) if reviewed else None,
            "raised": int(sum(d.get("raised", []))),
            "lowered": int(sum(d.get("lowered", []))),
            # the bills of the apps planned both ways
            "stale_billed_per_hour": round(sum(d.get("both_cost_stale", [])), 2),
            "reviewed_billed_per_hour": round(sum(d.get("both_cost_reviewed", [])), 2),
        }
    return out


def _print_reserve_study(g: dict[str, object]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=(
            f"shed_target {g['target']} on {g['apps']} generated apps (met at the registered rate by "
            f"{g['met_at_registered_rate']}); Poisson frames, the front's admission; the registration's "
            "reserve kept against chosen again at the new rate"
        )
    )
    cols = ["rate", "apps", "kept: meet target", "shed mean", "max", "$/h"]
    cols += ["chosen again: meet target", "shed mean", "max", "$/h", "raised", "lowered"]
    for c in cols:
        table.add_column(c, justify="right")
    for key, v in g.items():
        if not isinstance(v, dict):
            continue
        kept = f"{v['stale_met']}" + (
            f" (+{v['stale_unplannable']} unplannable)" if v["stale_unplannable"] else ""
        )
        table.add_row(
            key,
            str(v["apps"]),
            kept,
            f"{100 * v['stale_shed_mean']:.2f} %" if v["stale_shed_mean"] is not None else "-",
            f"{100 * v['stale_shed_max']:.1f} %" if v["stale_shed_max"] is not None else "-",
            f"{v['stale_billed_per_hour']:.1f}",
            str(v["reviewed_met"]),
            f"{100 * v['reviewed_shed_mean']:.2f} %" if v["reviewed_shed_mean"] is not None else "-",
            f"{100 * v['reviewed_shed_max']:.1f} %" if v["reviewed_shed_max"] is not None else "-",
            f"{v['reviewed_billed_per_hour']:.1f}",
            str(v["raised"]),
            str(v["lowered"]),
        )
    Console(width=None if Console().is_terminal else 170).print(table)


def _print_study(g: dict[str, object]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=(
            f"{g['problems']} generated apps planned at +{100 * float(g['headroom']):g} % "  # type: ignore[arg-type]
            f"for {100 * (1 - float(g['reserve'])):g} % of the SLO "  # type: ignore[arg-type]
            f"({g['billed_per_hour']} $/h), {g['simulated_s']} s each; attainment is of admitted frames"
        )
    )
    cols = ["arrivals/admission", "apps < 99 %", "attainment mean", "min", "shed mean", "max"]
    cols += ["overflowing", "good"]
    for c in cols:
        table.add_column(c, justify="left" if c == cols[0] else "right")
    for key, v in g.items():
        if not isinstance(v, dict):
            continue
        table.add_row(
            key,
            str(v["apps_below_99"]),
            f"{100 * v['attainment_mean']:.2f} %",
            f"{100 * v['attainment_min']:.2f} %",
            f"{100 * v['shed_mean']:.2f} %",
            f"{100 * v['shed_max']:.1f} %",
            str(v["apps_overflowing"]),
            f"{100 * v['good']:.2f} %",
        )
    Console(width=None if Console().is_terminal else 160).print(table)


def _print_generated(g: dict[str, object]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"dispatch-aware solves of {g['problems']} generated problems, {g['simulated_s']} s each"
    )
    keys = [k for k, v in g.items() if isinstance(v, dict)]
    table.add_column("figure")
    for k in keys:
        table.add_column(k)
    first = g[keys[0]]
    assert isinstance(first, dict)
    for field in first:
        table.add_row(field, *(str(g[k][field]) for k in keys))  # type: ignore[index]
    Console(width=None if Console().is_terminal else 160).print(table)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=600.0, help="simulated seconds (default 600)")
    ap.add_argument("--arrivals", choices=["uniform", "poisson", "bursty"], default="uniform")
    ap.add_argument("--dispatch", choices=["tc", "rr"], default="tc")
    ap.add_argument("--check", action="store_true", help="the papers' examples, TC and RR, uniform arrivals")
    ap.add_argument(
        "--generated", type=int, default=0, metavar="N", help="dispatch-aware solves of N generated problems"
    )
    ap.add_argument(
        "--arrival-study",
        type=int,
        default=0,
        metavar="N",
        help="N generated apps under uniform, Poisson and bursty arrivals, with and without admission",
    )
    ap.add_argument(
        "--headroom", type=float, default=0.1, help="--arrival-study: plan for the rates x (1 + this) (0.1)"
    )
    ap.add_argument(
        "--reserve",
        type=float,
        default=0.0,
        help="--arrival-study: plan for the SLO x (1 - this), the rest for spilled frames (0)",
    )
    ap.add_argument(
        "--reserve-study",
        type=int,
        default=0,
        metavar="N",
        help="N generated apps: a shed_target's reserve kept from the registered rate against chosen again "
        "at 0.5x and 2x that rate (the control loop's review)",
    )
    ap.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = ap.parse_args(argv)
    if args.reserve_study:
        rs = reserve_study(args.reserve_study)
        if args.json:
            print(json.dumps(rs, indent=2))
        else:
            _print_reserve_study(rs)
        return 0
    if args.arrival_study:
        study = arrival_study(
            args.arrival_study,
            args.duration if args.duration != 600.0 else 20.0,
            headroom=args.headroom,
            reserve=args.reserve,
        )
        if args.json:
            print(json.dumps(study, indent=2))
        else:
            _print_study(study)
        planned = [v for k, v in study.items() if k.endswith("/planned") and isinstance(v, dict)]
        return 0 if all(v["apps_overflowing"] == 0 and v["attainment_min"] == 1.0 for v in planned) else 1
    if args.generated:
        g = generated(args.generated, args.duration if args.duration != 600.0 else 10.0)
        if args.json:
            print(json.dumps(g, indent=2))
        else:
            _print_generated(g)
        tallies = [v for v in g.values() if isinstance(v, dict)]
        return 0 if all(v["within"] == v["modules"] and v["overflow"] == 0 for v in tallies) else 1
    if args.check:
        results = [
            run(p, plan, args.duration if args.duration != 600.0 else 120.0, "uniform", d)
            for p, plan in example_plans()
            for d in ("tc", "rr")
        ]
    else:
        problem, plan = large_problem()
        results = [run(problem, plan, args.duration, args.arrivals, args.dispatch)]
    ok = all(r["all_within_plan"] for r in results if r["dispatch"] == "tc" and r["arrivals"] == "uniform")
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        _print(results)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
