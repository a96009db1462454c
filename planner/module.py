"""Module scheduling: one module, one latency budget -> machine groups.

- :func:`algorithm1` — Harpagon's Algorithm 1 exactly as printed (multi-tuple, greedy in
  throughput-cost order, a partial machine evaluated at w = the residual only), optionally limited
  to one or two configurations (the baselines' ``<c_opt, c_res>``).
- :func:`harpagon_dummy` / :func:`piccolo_dummy` — the two dummy generators (t - u and b/(L - d) - u).
- :func:`occupancy_optimal` — exact occupancy optimum under Theorem 1: all load on the best
  configuration feasible at w = T, with dummy up to b / (L - d).
- :func:`billed_optimal` — exact billed optimum: branch and bound over integer machine counts,
  every machine at full throughput (the excess as free dummy load), ties broken by lower latency.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from planner.latency import EPS, Config, Group, LatencyModel, billed_cost, occupancy_cost, worst_case

if TYPE_CHECKING:
    from collections.abc import Sequence

    from planner.models import Objective

__all__ = [
    "ModuleSchedule",
    "algorithm1",
    "billed_optimal",
    "fill_machines",
    "harpagon_dummy",
    "occupancy_optimal",
    "piccolo_dummy",
]


@dataclass(frozen=True, slots=True)
class ModuleSchedule:
    """Machine groups of one module (in dispatch order), its real rate and worst-case latency."""

    groups: tuple[Group, ...]
    rate: float
    wcl: float
    model: LatencyModel = "tc"

    @property
    def dummy(self) -> float:
        return max(0.0, sum(g.total for g in self.groups) - self.rate)

    @property
    def occupancy(self) -> float:
        return occupancy_cost(self.groups)

    @property
    def billed(self) -> float:
        return billed_cost(self.groups)

    def cost(self, objective: Objective) -> float:
        return self.occupancy if objective == "occupancy" else self.billed


def _schedule(groups: Sequence[Group], rate: float, model: LatencyModel) -> ModuleSchedule:
    ordered = tuple(sorted(groups, key=lambda g: (-g.config.ratio, g.rate < g.config.throughput)))
    return ModuleSchedule(ordered, rate, worst_case(ordered, model), model)


def _get_wcl(c: Config, rw: float, model: LatencyModel) -> float:
    """Algorithm 1's GetWCL(c) with the remaining workload rw."""
    if model == "tc":
        return c.tc_latency(rw)
    if model == "rr":
        return c.duration + c.batch / min(rw, c.throughput)
    return c.duration + c.batch / c.throughput


def algorithm1(
    configs: Sequence[Config],
    rate: float,
    budget: float,
    model: LatencyModel = "tc",
    max_configs: int | None = None,
) -> ModuleSchedule | None:
    """Harpagon Algorithm 1 (GenerateConfig). ``configs`` must be in descending t/p order.

    ``max_configs`` = 1 puts all load on one configuration spread evenly over ceil(T / t) machines
    (Clipper, InferLine); = 2 keeps the majority on c_opt and gives the whole residual to one
    c_res (Nexus, Scrooge). Returns None when no configuration meets the budget.
    """
    if max_configs == 1:
        return _one_config(configs, rate, budget, model)
    groups: list[Group] = []
    rw = rate
    k = 0
    used: list[Config] = []
    while rw > EPS:
        last = (
            max_configs is not None and len(used) >= max_configs - 1 and (not used or used[-1] != configs[k])
        )
        while k < len(configs) and not _fits(configs[k], rw, budget, model, must_finish=last):
            k += 1
            last = max_configs is not None and len(used) >= max_configs - 1
        if k >= len(configs):
            return None
        c = configs[k]
        if not used or used[-1] != c:
            used.append(c)
        n = rw / c.throughput
        if n >= 1:
            full = math.floor(n + 1e-12)
            groups.append(Group(c, full, c.throughput))
            rw -= full * c.throughput
        else:
            groups.append(Group(c, 1, rw))
            rw = 0.0
    return _schedule(_merge(groups), rate, model)


def _fits(c: Config, rw: float, budget: float, model: LatencyModel, must_finish: bool) -> bool:
    if _get_wcl(c, rw, model) > budget + EPS:
        return False
    if not must_finish:
        return True
    rest = rw - math.floor(rw / c.throughput + 1e-12) * c.throughput
    return rest <= EPS or _get_wcl(c, rest, model) <= budget + EPS


def _merge(groups: list[Group]) -> list[Group]:
    """Merge adjacent groups of the same config and rate."""
    out: list[Group] = []
    for g in groups:
        if out and out[-1].config == g.config and abs(out[-1].rate - g.rate) <= EPS:
            out[-1] = Group(g.config, out[-1].machines + g.machines, g.rate)
        else:
            out.append(g)
    return out


def _one_config(
    configs: Sequence[Config], rate: float, budget: float, model: LatencyModel
) -> ModuleSchedule | None:
    for c in configs:
        n = max(1, math.ceil(rate / c.throughput - 1e-9))
        sched = _schedule([Group(c, n, rate / n)], rate, model)
        if sched.wcl <= budget + EPS:
            return sched
    return None


def _leftovers(sched: ModuleSchedule) -> list[tuple[Config, float]]:
    """For each distinct config (TC order) its leftover workload u_i: the rate on lower configs."""
    distinct: list[Config] = []
    for g in sched.groups:
        if g.config not in distinct:
            distinct.append(g.config)
    out = []
    for i, c in enumerate(distinct):
        lower = distinct[i + 1 :]
        out.append((c, sum(g.total for g in sched.groups if g.config in lower)))
    return out


def _best(cands: list[ModuleSchedule], objective: Objective) -> ModuleSchedule:
    return min(cands, key=lambda s: (s.cost(objective) - EPS * 0, s.wcl))


def harpagon_dummy(
    configs: Sequence[Config],
    sched: ModuleSchedule,
    budget: float,
    objective: Objective,
    model: LatencyModel = "tc",
    max_configs: int | None = None,
) -> ModuleSchedule:
    """Harpagon's dummy generator: for each config c_i try dum_i = t_i - u_i (u_i = leftover
    workload below c_i) and keep the cheapest schedule. Dummy load is paid under occupancy."""
    cands = [sched]
    for c, u in _leftovers(sched):
        dum = c.throughput - u
        if u > EPS and dum > EPS:
            alt = algorithm1(configs, sched.rate + dum, budget, model, max_configs)
            if alt is not None:
                cands.append(ModuleSchedule(alt.groups, sched.rate, alt.wcl, model))
    return _best(cands, objective)


def piccolo_dummy(
    configs: Sequence[Config],
    sched: ModuleSchedule,
    budget: float,
    objective: Objective,
    model: LatencyModel = "tc",
    max_configs: int | None = None,
) -> ModuleSchedule:
    """Piccolo's dummy generator: dum_i = b_i / (L - d_i) - u_i, added when >= 0, so the leftover
    fits one machine of c_i that just meets the budget."""
    cands = [sched]
    for c, u in _leftovers(sched):
        need = c.min_rate(budget)
        if u > EPS and math.isfinite(need) and need - u >= 0:
            alt = algorithm1(configs, sched.rate + need - u, budget, model, max_configs)
            if alt is not None:
                cands.append(ModuleSchedule(alt.groups, sched.rate, alt.wcl, model))
    return _best(cands, objective)


def fill_machines(sched: ModuleSchedule) -> ModuleSchedule:
    """Run every machine at full throughput (the excess as dummy load). Under TC this only raises
    every w, so the worst case can only fall; billed cost is unchanged."""
    groups = _merge([Group(g.config, g.machines, g.config.throughput) for g in sched.groups])
    return _schedule(groups, sched.rate, sched.model)


def occupancy_optimal(configs: Sequence[Config], rate: float, budget: float) -> ModuleSchedule | None:
    """Exact occupancy optimum under Theorem 1.

    Any feasible mix costs at least W / r_h, where h is its highest-r config and W >= max(T, b_h /
    (L - d_h)) its total rate; putting all of W on h costs exactly that. So the optimum is
    min_k max(T, b_k / (L - d_k)) / r_k, spread over ceil(W / t_k) machines of config k.
    """
    best: tuple[float, float, Config, float] | None = None
    for c in configs:
        need = c.min_rate(budget)
        if not math.isfinite(need):
            continue
        w = max(rate, need)
        key = (w / c.ratio, c.tc_latency(w))
        if best is None or key < best[:2]:
            best = (key[0], key[1], c, w)
    if best is None:
        return None
    c, w = best[2], best[3]
    n = max(1, math.ceil(w / c.throughput - 1e-9))
    return _schedule([Group(c, n, w / n)], rate, "tc")


def billed_optimal(
    configs: Sequence[Config], rate: float, budget: float, node_limit: int = 200_000
) -> tuple[ModuleSchedule | None, bool]:
    """Exact billed optimum for one module: integer machine counts per config, every machine at
    full throughput. Minimises (billed cost, worst-case latency) lexicographically.

    Branch and bound over configs in ascending t/p order, so each config's Theorem 1 condition
    w_k = (throughput of configs with r <= r_k) >= b_k / (L - d_k) is checked as soon as its count
    is chosen; the bound is cost + (T - W) * min p/t of the configs still to choose. Ties in r share
    w, so their conditions are checked when the whole tie block is chosen. Returns (schedule,
    proven): proven is False when ``node_limit`` stopped the search early.
    """
    feas = [c for c in configs if c.duration < budget - EPS]
    if not feas:
        return None, True
    cs = sorted(feas, key=lambda c: (c.ratio, -c.duration))  # ascending r
    n_cfg = len(cs)
    need = [c.min_rate(budget) for c in cs]
    # block_end[i]: index one past the tie block of cs[i] (equal r share w)
    block_end = [0] * n_cfg
    i = 0
    while i < n_cfg:
        j = i
        while j < n_cfg and abs(cs[j].ratio - cs[i].ratio) <= 1e-12 * cs[i].ratio:
            j += 1
        for k in range(i, j):
            block_end[k] = j
        i = j
    unit = [0.0] * (n_cfg + 1)  # unit[i] = min p/t over cs[i:]
    unit[n_cfg] = float("inf")
    for k in range(n_cfg - 1, -1, -1):
        unit[k] = min(unit[k + 1], cs[k].price / cs[k].throughput)

    # incumbent: the best single config, enough machines for max(T, b/(L-d))
    best_cost, best_wcl, best_counts = float("inf"), float("inf"), [0] * n_cfg
    for k, c in enumerate(cs):
        n = max(1, math.ceil(max(rate, need[k]) / c.throughput - 1e-9))
        cost, wcl = n * c.price, c.tc_latency(n * c.throughput)
        if (cost, wcl) < (best_cost - EPS, best_wcl) or (abs(cost - best_cost) <= EPS and wcl < best_wcl):
            best_cost, best_wcl = cost, wcl
            best_counts = [0] * n_cfg
            best_counts[k] = n
    counts = [0] * n_cfg
    nodes = 0
    proven = True

    def dfs(k: int, w: float, cost: float, wcl: float, block_need: float, block_wcl: list[int]) -> None:
        nonlocal best_cost, best_wcl, best_counts, nodes, proven
        nodes += 1
        if nodes > node_limit:
            proven = False
            return
        if k == n_cfg or w >= rate - EPS:
            # close the current tie block
            if w + EPS < block_need:
                return
            cur = max([wcl] + [cs[i].tc_latency(w) for i in block_wcl])
            if w >= rate - EPS and (
                cost < best_cost - EPS or (cost <= best_cost + EPS and cur < best_wcl - EPS)
            ):
                best_cost, best_wcl, best_counts = cost, cur, counts.copy()
            return
        lb = cost + (rate - w) * unit[k]
        if lb > best_cost + EPS or (lb >= best_cost - EPS and wcl >= best_wcl - EPS):
            return
        new_block = k > 0 and block_end[k - 1] == k
        if new_block:
            if w + EPS < block_need:
                return
            wcl = max([wcl] + [cs[i].tc_latency(w) for i in block_wcl])
            block_need, block_wcl = 0.0, []
        c = cs[k]
        n_reach = max(0, math.ceil((rate - w) / c.throughput - 1e-9))
        n_lat = math.ceil((need[k] - w) / c.throughput - 1e-9) if need[k] > w else 1
        lo = max(1, n_lat)
        hi = max(n_reach, lo)
        for n in range(hi, lo - 1, -1):
            counts[k] = n
            dfs(
                k + 1,
                w + n * c.throughput,
                cost + n * c.price,
                wcl,
                max(block_need, need[k]),
                [*block_wcl, k],
            )
        counts[k] = 0
        dfs(k + 1, w, cost, wcl, block_need, block_wcl)

    dfs(0, 0.0, 0.0, 0.0, 0.0, [])
    if not math.isfinite(best_cost):
        return None, proven
    groups = [Group(c, n, c.throughput) for c, n in zip(cs, best_counts, strict=True) if n > 0]
    return _schedule(groups, rate, "tc"), proven
