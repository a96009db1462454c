"""Independent validity check of a plan against its problem (Theorem 1, rates, SLO on every path)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from planner.models import ModulePlan, Plan, ProblemSpec, ProfileEntry

__all__ = ["check_plan"]

TOL = 1e-6


def _module_latency(machines: list[tuple[float, ProfileEntry, int, float]], model: str) -> float:
    worst = 0.0
    for r, e, _, f in machines:
        if model == "tc":
            w = sum(m2 * f2 for r2, _, m2, f2 in machines if r2 <= r * (1 + 1e-12))
            lat = e.duration_s + e.overhead_s + e.batch / w
        elif model == "rr":
            lat = e.duration_s + e.overhead_s + e.batch / f if f > 0 else 0.0
        else:
            lat = e.duration_s + e.overhead_s + e.batch / e.throughput
        worst = max(worst, lat)
    return worst


def _check_module(
    problem: ProblemSpec, name: str, mp: ModulePlan, model: str, errors: list[str]
) -> tuple[float, float, float]:
    """Check one module; returns (worst case, billed, occupancy)."""
    spec = problem.modules[name]
    profile = {(e.hardware, e.batch, e.concurrency): e for e in spec.profile}
    machines = []
    billed = occupancy = 0.0
    for g in mp.groups:
        e = profile.get((g.hardware, g.batch, g.concurrency))
        if e is None:
            errors.append(f"{name}: group {g.hardware}/b{g.batch}/c{g.concurrency} not in profile")
            continue
        price = problem.hardware[g.hardware].price_per_hour
        if g.rate_per_machine > e.throughput * (1 + TOL):
            errors.append(f"{name}: rate {g.rate_per_machine:.4f} above throughput {e.throughput:.4f}")
        machines.append((e.throughput / price, e, g.machines, g.rate_per_machine))
        billed += g.machines * price
        occupancy += g.machines * price * g.rate_per_machine / e.throughput
    total = sum(m * f for _, _, m, f in machines)
    carried = spec.rate + mp.dummy_rate
    if abs(total - carried) > TOL * max(1.0, total):
        errors.append(f"{name}: groups carry {total:.4f} req/s, rate + dummy is {carried:.4f}")
    if total < spec.rate * (1 - TOL):
        errors.append(f"{name}: groups carry {total:.4f} req/s below the rate {spec.rate:.4f}")
    worst = _module_latency(machines, model)
    if worst > mp.worst_case_latency_s + TOL:
        errors.append(f"{name}: worst case {worst:.6f} s above the plan's {mp.worst_case_latency_s:.6f} s")
    if worst > mp.latency_budget_s + TOL:
        errors.append(f"{name}: worst case {worst:.6f} s above its budget {mp.latency_budget_s:.6f} s")
    return worst, billed, occupancy


def check_plan(problem: ProblemSpec, plan: Plan, model: str = "tc") -> list[str]:
    """Every way ``plan`` breaks the rules, as readable strings (empty list: valid).

    Checks: each group's config exists in the module's profile; 0 <= rate_per_machine <= t;
    machines * rate summed equals rate + dummy and covers the rate; worst-case latency under the
    latency model within the module budget; every root-to-leaf path within the SLO; billed and
    occupancy costs add up.
    """
    errors: list[str] = []
    wcl: dict[str, float] = {}
    billed = occupancy = 0.0
    for name in problem.modules:
        mp = plan.modules.get(name)
        if mp is None:
            errors.append(f"{name}: missing from plan")
            continue
        wcl[name], b, o = _check_module(problem, name, mp, model, errors)
        billed += b
        occupancy += o
    for path in problem.paths():
        lat = sum(wcl.get(m, 0.0) for m in path)
        if lat > problem.slo_s + TOL:
            errors.append(f"path {' -> '.join(path)}: {lat:.6f} s above the SLO {problem.slo_s} s")
    if abs(billed - plan.billed_per_hour) > TOL * max(1.0, billed):
        errors.append(f"billed_per_hour {plan.billed_per_hour} but machines cost {billed}")
    if abs(occupancy - plan.cost_per_hour) > TOL * max(1.0, occupancy):
        errors.append(f"cost_per_hour {plan.cost_per_hour} but occupancy is {occupancy}")
    return errors
