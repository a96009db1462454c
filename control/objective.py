"""The whole bill in the epoch's objective (``ControlConfig.objective = "all-in"``, docs/cost.md).

The data plane's per-batch requests (receive, delete, child sends, result records) scale with
rate / batch, so a larger batch makes fewer requests and may need more machines. The planner's search
prices machines only (a price per batch cannot be folded into a configuration's machine price
exactly: a machine's requests scale with the rate it carries, not with its throughput), so the
choice is made around it: the app is solved once per **batch floor** (every module's configurations
limited to batches of at least 1, 2, 4 ... of those profiled; a module profiled only below a floor
keeps its largest batches; a floor that changes no profile is not solved again) and the plan of least
fleet + data plane $/h is kept, the data plane priced by :mod:`profiles.allin` at the plan's rates
with the deployment's design (``data_plane_policy``), frame size and frames per POST. Floor 1 is the
fleet-only plan, so the choice never costs more than it; a floor that cannot meet the SLO is skipped.
``skinflint plan --objective all-in`` (control/preview.py) makes the same choice with the packing."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from planner.errors import PlannerError
from profiles.allin import DataPlanePolicy, data_plane_bill, policy_named, with_results, workload_from_plan
from profiles.aws_prices import AwsPrices, load_aws_prices

if TYPE_CHECKING:
    from collections.abc import Callable

    from planner.models import Plan, ProblemSpec

__all__ = ["AllInPricing", "all_in_cost", "batch_floors", "plan_all_in", "profile_key", "with_batch_floor"]


class AllInPricing:
    """What prices a plan's data plane: the design, frame size, frames per POST, where the app's results
    go (``results``: "pull" or "push", its spec's) and the price table."""

    def __init__(
        self,
        policy: str,
        frame_kb: float,
        frames_per_post: int,
        prices: AwsPrices | None = None,
        results: str = "pull",
    ):
        self.policy: DataPlanePolicy = with_results(policy_named(policy), results)
        self.frame_kb = float(frame_kb)
        self.frames_per_post = int(frames_per_post)
        self.prices = prices or _packaged_prices()


@cache
def _packaged_prices() -> AwsPrices:
    return load_aws_prices()


def profile_key(problem: ProblemSpec) -> tuple[tuple[str, int], ...]:
    """Which batches each module may use: two floors with the same key plan the same."""
    return tuple((name, len(module.profile)) for name, module in problem.modules.items())


def with_batch_floor(problem: ProblemSpec, floor: int) -> ProblemSpec:
    """``problem`` with each module's profile limited to batches >= ``floor`` (or its largest batch)."""
    modules = {}
    for name, module in problem.modules.items():
        keep = min(floor, max(entry.batch for entry in module.profile))
        profile = [entry for entry in module.profile if entry.batch >= keep]
        modules[name] = (
            module if len(profile) == len(module.profile) else module.model_copy(update={"profile": profile})
        )
    return problem.model_copy(update={"modules": modules})


def batch_floors(problem: ProblemSpec) -> list[tuple[int, ProblemSpec]]:
    """The distinct floor problems past floor 1, smallest floor first."""
    seen = {profile_key(problem)}
    out = []
    for floor in sorted({entry.batch for module in problem.modules.values() for entry in module.profile}):
        limited = with_batch_floor(problem, floor)
        key = profile_key(limited)
        if key not in seen:
            seen.add(key)
            out.append((floor, limited))
    return out


def all_in_cost(problem: ProblemSpec, plan: Plan, pricing: AllInPricing) -> tuple[float, float]:
    """(fleet $/h, data plane $/h) of ``plan`` at the problem's planned rates (unpacked machines)."""
    rates = {name: module.rate for name, module in problem.modules.items()}
    modules = {
        name: (rates.get(name, 0.0), [(g.batch, g.machines * g.rate_per_machine) for g in mp.groups])
        for name, mp in plan.modules.items()
    }
    edges = [(src, dst, rates[dst] / rates[src] if rates.get(src) else 1.0) for src, dst in problem.edges]
    targets = {dst for _, dst in problem.edges}
    frame_rate = max((rate for name, rate in rates.items() if name not in targets), default=0.0)
    workload = workload_from_plan(
        modules,
        edges,
        frame_rate=max(frame_rate, 1e-9),
        frame_kb=pricing.frame_kb,
        frames_per_post=pricing.frames_per_post,
        instances=sum(g.machines for mp in plan.modules.values() for g in mp.groups),
    )
    bill = data_plane_bill(pricing.policy, workload, pricing.prices)
    return plan.billed_per_hour, bill.total_per_hour


def plan_all_in(solve: Callable[[ProblemSpec], Plan], problem: ProblemSpec, pricing: AllInPricing) -> Plan:
    """The plan of least fleet + data plane among the batch floors (floor 1 raises as ``solve`` does)."""
    best = solve(problem)
    best_total = sum(all_in_cost(problem, best, pricing))
    for _, limited in batch_floors(problem):
        try:
            plan = solve(limited)
        except PlannerError:
            continue  # batches this large cannot meet the SLO (or the floor leaves no feasible config)
        total = sum(all_in_cost(limited, plan, pricing))
        if total < best_total - 1e-9:  # ties: the smaller floor
            best, best_total = plan, total
    return best
