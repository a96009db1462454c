"""The simulator benchmark's studies: the arrival process against dispatch-aware plans with and without the
front's admission (:func:`arrival_study`), and a ``shed_target``'s reserve as an app's rate moves
(:func:`reserve_study`, what control/reserves.py reviews)."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import track
from rich.table import Table

from bench.problems import scaled
from control.registration.reserve import SHED_SIM_FRAMES, SHED_SIM_MAX_S, SHED_SIM_MIN_S, pick_reserve
from planner.errors import InfeasibleError
from planner.generate import generate_problem
from planner.robust import solve_dispatchable
from planner.simulator import simulate

if TYPE_CHECKING:
    from planner.models import ProblemSpec

__all__ = [
    "ADMISSIONS",
    "UNSHARED_FRONTS",
    "arrival_study",
    "print_arrival_study",
    "print_reserve_study",
    "reserve_study",
]


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
    rows: dict[tuple[str, str], list[tuple[float, float, bool]]] = {}
    billed = 0.0
    for i in track(range(count), description="simulating", console=Console(stderr=True), transient=True):
        problem = generate_problem(seed + i)
        planned_for = problem.model_copy(
            update={
                "slo_s": problem.slo_s * (1 - reserve),
                "modules": {
                    module: spec.model_copy(update={"rate": spec.rate * (1 + headroom)})
                    for module, spec in problem.modules.items()
                },
            }
        )
        plan = solve_dispatchable(planned_for)
        billed += plan.billed_per_hour
        for shape_index, arrivals in enumerate(("uniform", "poisson", "bursty")):
            for admission, fronts in (*((mode, 1) for mode in ADMISSIONS), ("planned", UNSHARED_FRONTS)):
                result = simulate(
                    problem,
                    plan,
                    duration,
                    arrivals,  # type: ignore[arg-type]
                    seed=seed + i + shape_index,
                    admission=admission,  # type: ignore[arg-type]
                    front_instances=fronts,
                )
                label = admission if fronts == 1 else f"{admission} x{fronts} fronts, unshared"
                shed = result.frames_shed / result.frames_offered if result.frames_offered else 0.0
                overflow = any(module.overflow_batches for module in result.modules.values())
                row = (result.end_to_end.slo_attainment, shed, overflow)
                rows.setdefault((arrivals, label), []).append(row)
    out: dict[str, object] = {
        "problems": count,
        "simulated_s": duration,
        "headroom": headroom,
        "reserve": reserve,
        "billed_per_hour": round(billed, 2),
    }
    for (arrivals, admission), vals in rows.items():
        att = [run[0] for run in vals]
        shed_frac = [run[1] for run in vals]
        out[f"{arrivals}/{admission}"] = {
            "apps_below_99": sum(1 for attainment in att if attainment < 0.99),
            "attainment_mean": round(statistics.fmean(att), 4),
            "attainment_min": round(min(att), 4),
            "shed_mean": round(statistics.fmean(shed_frac), 4),
            "shed_max": round(max(shed_frac), 4),
            "apps_overflowing": sum(1 for run in vals if run[2]),
            "good": round(
                statistics.fmean(
                    (1 - shed) * attainment for attainment, shed in zip(att, shed_frac, strict=True)
                ),
                4,
            ),
        }
    return out


def _reserve_at(
    problem: ProblemSpec, reserve: float, headroom: float, seed: int
) -> tuple[float, float] | None:
    """(Poisson frames shed, $/h) of ``problem`` planned as the control loop plans an app with that
    admission reserve (rates x (1 + headroom), SLO x (1 - reserve)) and simulated at its own rates
    against its whole SLO with the front's admission, for at least as many frames as a registration's
    simulation (``control.registration.reserve``); None when it cannot be planned."""
    try:
        plan = solve_dispatchable(scaled(problem, 1 + headroom, 1 - reserve))
    except InfeasibleError:
        return None
    roots = sum(
        problem.modules[module].rate for module in problem.modules if not problem.parents().get(module)
    )
    duration = min(max(SHED_SIM_FRAMES / roots, SHED_SIM_MIN_S), SHED_SIM_MAX_S)
    result = simulate(problem, plan, duration, "poisson", seed=seed, admission="planned")
    return (
        result.frames_shed / result.frames_offered if result.frames_offered else 0.0
    ), plan.billed_per_hour


def _choose(
    problem: ProblemSpec, target: float, headroom: float, seed: int
) -> tuple[float, float, float, bool]:
    """(reserve, shed, $/h, met) at ``problem``'s rates, by the registration's and the control loop's
    rule (``control.registration.reserve.pick_reserve``)."""
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
    per: dict[float, dict[str, list[float]]] = {factor: {} for factor in factors}
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
        for factor in factors:
            at = scaled(problem, factor)
            stale = _reserve_at(at, r0, headroom, seed + i)
            try:
                rf, shed_f, cost_f, _met_f = _choose(at, target, headroom, seed + i)
            except InfeasibleError:
                continue
            figures = per[factor]
            if stale is not None:
                figures.setdefault("stale_shed", []).append(stale[0])
                figures.setdefault("stale_cost", []).append(stale[1])
                figures.setdefault("both_cost_stale", []).append(stale[1])
                figures.setdefault("both_cost_reviewed", []).append(cost_f)
            else:
                figures.setdefault("stale_unplannable", []).append(1.0)
            figures.setdefault("reviewed_shed", []).append(shed_f)
            figures.setdefault("reviewed_cost", []).append(cost_f)
            figures.setdefault("raised", []).append(float(rf > r0))
            figures.setdefault("lowered", []).append(float(rf < r0))
    out: dict[str, object] = {
        "apps": planned,
        "target": target,
        "headroom": headroom,
        "met_at_registered_rate": base_met,
    }
    for factor, figures in per.items():
        kept_shed, reviewed = figures.get("stale_shed", []), figures.get("reviewed_shed", [])
        out[f"x{factor:g}"] = {
            "apps": len(reviewed),
            "stale_unplannable": int(sum(figures.get("stale_unplannable", []))),
            "stale_met": sum(1 for shed in kept_shed if shed <= target),
            "stale_shed_mean": round(statistics.fmean(kept_shed), 4) if kept_shed else None,
            "stale_shed_max": round(max(kept_shed), 4) if kept_shed else None,
            "reviewed_met": sum(1 for shed in reviewed if shed <= target),
            "reviewed_shed_mean": round(statistics.fmean(reviewed), 4) if reviewed else None,
            "reviewed_shed_max": round(max(reviewed), 4) if reviewed else None,
            "raised": int(sum(figures.get("raised", []))),
            "lowered": int(sum(figures.get("lowered", []))),
            # the bills of the apps planned both ways
            "stale_billed_per_hour": round(sum(figures.get("both_cost_stale", [])), 2),
            "reviewed_billed_per_hour": round(sum(figures.get("both_cost_reviewed", [])), 2),
        }
    return out


def print_reserve_study(study: dict[str, object]) -> None:
    table = Table(
        title=(
            f"shed_target {study['target']} on {study['apps']} generated apps (met at the registered rate by "
            f"{study['met_at_registered_rate']}); Poisson frames, the front's admission; the registration's "
            "reserve kept against chosen again at the new rate"
        )
    )
    cols = ["rate", "apps", "kept: meet target", "shed mean", "max", "$/h"]
    cols += ["chosen again: meet target", "shed mean", "max", "$/h", "raised", "lowered"]
    for column in cols:
        table.add_column(column, justify="right")
    for key, row in study.items():
        if not isinstance(row, dict):
            continue
        kept = f"{row['stale_met']}" + (
            f" (+{row['stale_unplannable']} unplannable)" if row["stale_unplannable"] else ""
        )
        table.add_row(
            key,
            str(row["apps"]),
            kept,
            f"{100 * row['stale_shed_mean']:.2f} %" if row["stale_shed_mean"] is not None else "-",
            f"{100 * row['stale_shed_max']:.1f} %" if row["stale_shed_max"] is not None else "-",
            f"{row['stale_billed_per_hour']:.1f}",
            str(row["reviewed_met"]),
            f"{100 * row['reviewed_shed_mean']:.2f} %" if row["reviewed_shed_mean"] is not None else "-",
            f"{100 * row['reviewed_shed_max']:.1f} %" if row["reviewed_shed_max"] is not None else "-",
            f"{row['reviewed_billed_per_hour']:.1f}",
            str(row["raised"]),
            str(row["lowered"]),
        )
    Console(width=None if Console().is_terminal else 170).print(table)


def print_arrival_study(study: dict[str, object]) -> None:
    table = Table(
        title=(
            f"{study['problems']} generated apps planned at +{100 * float(study['headroom']):g} % "  # type: ignore[arg-type]
            f"for {100 * (1 - float(study['reserve'])):g} % of the SLO "  # type: ignore[arg-type]
            f"({study['billed_per_hour']} $/h), {study['simulated_s']} s each; "
            "attainment is of admitted frames"
        )
    )
    cols = ["arrivals/admission", "apps < 99 %", "attainment mean", "min", "shed mean", "max"]
    cols += ["overflowing", "good"]
    for column in cols:
        table.add_column(column, justify="left" if column == cols[0] else "right")
    for key, row in study.items():
        if not isinstance(row, dict):
            continue
        table.add_row(
            key,
            str(row["apps_below_99"]),
            f"{100 * row['attainment_mean']:.2f} %",
            f"{100 * row['attainment_min']:.2f} %",
            f"{100 * row['shed_mean']:.2f} %",
            f"{100 * row['shed_max']:.1f} %",
            str(row["apps_overflowing"]),
            f"{100 * row['good']:.2f} %",
        )
    Console(width=None if Console().is_terminal else 160).print(table)
