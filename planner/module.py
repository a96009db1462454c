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

import itertools
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


def _tie_blocks(cs: Sequence[Config]) -> list[list[int]]:
    """Indices of ``cs`` (ascending r) grouped into blocks of equal r, which share w."""
    blocks: list[list[int]] = []
    for k, c in enumerate(cs):
        if blocks and abs(cs[blocks[-1][0]].ratio - c.ratio) <= 1e-12 * c.ratio:
            blocks[-1].append(k)
        else:
            blocks.append([k])
    return blocks


def _single_config_incumbent(
    cs: Sequence[Config], rate: float, need: Sequence[float]
) -> tuple[float, float, list[int]]:
    """The best plan on one configuration: enough machines for max(T, b / (L - d))."""
    best = (math.inf, math.inf, [0] * len(cs))
    for k, c in enumerate(cs):
        n = max(1, math.ceil(max(rate, need[k]) / c.throughput - 1e-9))
        cost, wcl = n * c.price, c.tc_latency(n * c.throughput)
        if cost < best[0] - EPS or (cost <= best[0] + EPS and wcl < best[1]):
            counts = [0] * len(cs)
            counts[k] = n
            best = (cost, wcl, counts)
    return best


class _BilledSearch:
    """Branch and bound state of :func:`billed_optimal`."""

    def __init__(self, cs: list[Config], rate: float, budget: float, node_limit: int):
        self.cs, self.rate, self.node_limit = cs, rate, node_limit
        self.need = [c.min_rate(budget) for c in cs]
        self.blocks = _tie_blocks(cs)
        # unit[i]: min p / t over blocks i.. (suffix minimum)
        self.unit = [min(cs[k].price / cs[k].throughput for k in b) for b in self.blocks]
        # floor[i]: min p over blocks i.. (while w < T at least one more machine is needed)
        self.floor = [min(cs[k].price for k in b) for b in self.blocks]
        for i in range(len(self.unit) - 2, -1, -1):
            self.unit[i] = min(self.unit[i], self.unit[i + 1])
            self.floor[i] = min(self.floor[i], self.floor[i + 1])
        # lines[i]: (A, u) per config of blocks i..: a completion whose cheapest-per-throughput config is
        # j (u = p / t) ends at a total rate of at least max(T, need_j) (it meets j's own condition),
        # so it costs at least (max(T, need_j) - w) u = A - w u (the needs less a rounding allowance)
        # (a line no lower than another at both ends of w in [0, T] is dropped: it never sets the min)
        lines: list[tuple[float, float]] = []
        self.lines: list[tuple[tuple[float, float], ...]] = [()] * len(self.blocks)
        for i in range(len(self.blocks) - 1, -1, -1):
            for k in self.blocks[i]:
                u = cs[k].price / cs[k].throughput
                a = max(rate, self.need[k] - 1e-6 * (cs[k].throughput + 1.0)) * u
                if any(a2 <= a and a2 - rate * u2 <= a - rate * u for a2, u2 in lines):
                    continue
                lines = [(a2, u2) for a2, u2 in lines if not (a <= a2 and a - rate * u <= a2 - rate * u2)]
                lines.append((a, u))
            self.lines[i] = tuple(lines)
        self.best_cost, self.best_wcl, self.best_counts = _single_config_incumbent(cs, rate, self.need)
        self.counts = [0] * len(cs)
        self.nodes = 0

    def _record(self, cost: float, wcl: float) -> None:
        if cost < self.best_cost - EPS or (cost <= self.best_cost + EPS and wcl < self.best_wcl - EPS):
            self.best_cost, self.best_wcl, self.best_counts = cost, wcl, self.counts.copy()

    def dfs(self, bi: int, w: float, cost: float, wcl: float) -> None:
        """Choose the counts of block ``bi`` on, given rate ``w``, cost and worst case so far.

        A block of one configuration (the common case) is expanded here: counts go up from the fewest
        that meet the configuration's own Theorem 1 condition; the bound cost + n p + (T - w - n t) *
        unit_next is non-decreasing in n (p / t >= unit_next, configs ahead have higher r), so the loop
        stops at the first n whose bound exceeds the incumbent. More machines than reach T only add
        cost. A child that reaches T is recorded in place (it is a node: counted against the limit)."""
        self.nodes += 1
        if self.nodes > self.node_limit:
            return
        rate = self.rate
        if w >= rate - EPS:
            self._record(cost, wcl)
            return
        blocks = self.blocks
        if bi == len(blocks):
            return
        short = min([a - w * u for a, u in self.lines[bi]])
        lb = cost + (short if short >= self.floor[bi] else self.floor[bi])
        if lb > self.best_cost + EPS or (lb >= self.best_cost - EPS and wcl >= self.best_wcl - EPS):
            return
        block = blocks[bi]
        if len(block) != 1:
            self._tied(bi, block, w, cost, wcl)
            return
        k = block[0]
        c = self.cs[k]
        t, price, d, b = c.throughput, c.price, c.duration, c.batch
        lo = max(1, math.ceil((self.need[k] - w) / t - 1e-9))
        reach = max(lo, math.ceil((rate - w) / t - 1e-9))
        last = bi + 1 == len(blocks)
        unit_next = self.unit[bi + 1] if not last else math.inf
        counts = self.counts
        for n in range(reach if last else lo, reach + 1):
            w2, cost2 = w + n * t, cost + n * price
            rest = rate - w2
            if cost2 + (rest * unit_next if rest > EPS else 0.0) > self.best_cost + EPS:
                break
            counts[k] = n
            x = d + b / w2
            wcl2 = wcl if wcl >= x else x
            if w2 >= rate - EPS:  # a leaf: dfs would count it and record it
                self.nodes += 1
                if self.nodes <= self.node_limit:
                    self._record(cost2, wcl2)
            else:
                self.dfs(bi + 1, w2, cost2, wcl2)
        counts[k] = 0
        if not last:
            self.dfs(bi + 1, w, cost, wcl)

    def _tied(self, bi: int, block: list[int], w: float, cost: float, wcl: float) -> None:
        """Configs of equal r share w: choose all their counts, then check their conditions."""
        ranges = []
        for k in block:
            t = self.cs[k].throughput
            hi = max(math.ceil((self.rate - w) / t - 1e-9), math.ceil((self.need[k] - w) / t - 1e-9), 1)
            ranges.append(range(hi, -1, -1))
        for vec in itertools.product(*ranges):
            used = [(k, n) for k, n in zip(block, vec, strict=True) if n]
            w2 = w + sum(n * self.cs[k].throughput for k, n in used)
            add = sum(n * self.cs[k].price for k, n in used)
            if any(w2 < self.need[k] - EPS for k, _ in used) or cost + add > self.best_cost + EPS:
                continue
            wcl2 = max([wcl] + [self.cs[k].duration + self.cs[k].batch / w2 for k, _ in used])
            for k, n in zip(block, vec, strict=True):
                self.counts[k] = n
            self.dfs(bi + 1, w2, cost + add, wcl2)
        for k in block:
            self.counts[k] = 0


def billed_optimal(
    configs: Sequence[Config], rate: float, budget: float, node_limit: int = 200_000
) -> tuple[ModuleSchedule | None, bool]:
    """Exact billed optimum for one module: integer machine counts per config, every machine at
    full throughput. Minimises (billed cost, worst-case latency) lexicographically.

    Branch and bound over tie blocks of configs in ascending t/p order, so a block's Theorem 1
    condition w = (throughput of configs with r <= its r) >= b / (L - d) is checked as soon as its
    counts are chosen. The bound of a node is cost + max(min_j (max(T, need_j) - W) p_j / t_j, min p)
    over the configs j still to choose: a completion whose cheapest-per-throughput config is j ends
    at a rate of at least j's own Theorem-1 rate, and while W < T at least one more machine is
    needed. (The fractional (T - W) min p/t alone left searches of wide profiles at high rates to
    the node limit: 629,000 nodes where this bound needs 700.)
    Returns (schedule, proven): proven is False when ``node_limit`` stopped the search early.
    """
    cs = sorted((c for c in configs if c.duration < budget - EPS), key=lambda c: (c.ratio, -c.duration))
    if not cs:
        return None, True
    search = _BilledSearch(cs, rate, budget, node_limit)
    search.dfs(0, 0.0, 0.0, 0.0)
    proven = search.nodes <= node_limit
    if not math.isfinite(search.best_cost):
        return None, proven
    groups = [Group(c, n, c.throughput) for c, n in zip(cs, search.best_counts, strict=True) if n > 0]
    return _schedule(groups, rate, "tc"), proven
