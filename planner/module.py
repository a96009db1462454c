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

import bisect
import itertools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from planner.latency import EPS, Config, Group, LatencyModel, billed_cost, occupancy_cost, worst_case

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from planner.models import Objective

__all__ = [
    "BilledConfigs",
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
        return c.floor + c.batch / min(rw, c.throughput)
    return c.floor + c.batch / c.throughput


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


#: One configuration as the billed search reads it: (latency floor d + o, batch, throughput, price, r, p / t,
#: 1e-6 (t + 1), the rounding allowance of its Theorem-1 rate in the bound's lines).
_Row = tuple[float, int, float, float, float, float, float]


class BilledConfigs:
    """A module's configurations prepared for :func:`billed_optimal`: in its search order (ascending r,
    then descending floor d + o, which is d without overhead) with the per-configuration constants every
    search reads. Wherever this search reads "d" it means the latency floor d + o (a worst case is
    d + o + b / w); throughput is c b / d.

    The order does not depend on the budget: the search sorts the configurations with ``d < L`` and a
    stable sort of a subset is the subset of the stable sort, so each search filters this order. The
    constants are the same expressions of the same floats the search computed per call, so a search
    over a prepared list is the search over the list (same nodes, same answer). Whoever searches one
    module many times (the staircase and reassignment of :mod:`planner.solve`, the rounds sharing a
    :class:`~planner.solve.BilledCache`) prepares it once."""

    __slots__ = ("configs", "floors", "rows", "subsets")

    def __init__(self, configs: Iterable[Config]):
        self.configs: tuple[Config, ...] = tuple(sorted(configs, key=lambda c: (c.ratio, -c.floor)))
        self.rows: tuple[_Row, ...] = tuple(
            (
                c.floor,
                c.batch,
                c.throughput,
                c.price,
                c.ratio,
                c.price / c.throughput,
                1e-6 * (c.throughput + 1.0),
            )
            for c in self.configs
        )
        self.floors = sorted(c.floor for c in self.configs)
        # subsets[j]: the configurations of the j lowest floors
        self.subsets: list[_Usable | None] = [None] * (len(self.configs) + 1)

    def usable(self, budget: float) -> _Usable:
        """The configurations with ``d + o < budget - EPS`` (the ones a search at ``budget`` reads), in
        search order. They are the j lowest, j the number of floors below the limit (equal floors are
        all below it or none is), so they are kept per j."""
        limit = budget - EPS
        j = bisect.bisect_left(self.floors, limit)
        found = self.subsets[j]
        if found is None:
            keep = [k for k, row in enumerate(self.rows) if row[0] < limit]
            found = self.subsets[j] = _Usable([self.rows[k] for k in keep], [self.configs[k] for k in keep])
        return found

    def optimal(
        self,
        rate: float,
        budget: float,
        node_limit: int = 200_000,
        cap: float = math.inf,
        hint: Sequence[Group] = (),
        price_classes: bool = False,
    ) -> tuple[ModuleSchedule | None, bool]:
        """:func:`billed_optimal` of these configurations. ``cap``: only plans billing at most this
        are wanted; the search starts from it as its incumbent, so it proves "none within ``cap``"
        (None, proven) faster, and a plan it returns is the module's optimum all the same.
        ``hint``: a plan (e.g. the optimum at a slightly larger budget); it and it with one more
        machine of each configuration are tried as incumbents first (valid plans only), which
        changes the time taken, not the optimum's cost and worst case.
        ``price_classes``: cut also by the price classes' bound (:func:`_price_classes`): the same
        optimum (a node it cuts holds nothing the incumbent would take), found in fewer nodes, so
        searches the node limit stopped may finish (the 5-10-module solves use it; without it the
        search is node for node the search as first written)."""
        usable = self.usable(budget)
        if not usable.rows:
            return None, True
        search = _BilledSearch(usable, rate, budget, node_limit, price_classes)
        if cap < search.best_cost:
            search.best_cost, search.best_wcl = cap, math.inf
            search.best_counts = [0] * len(usable.rows)
        if hint:
            search.hinted(usable, hint, budget)
        search.dfs(0, 0.0, 0.0, 0.0)
        if not any(search.best_counts):
            return None, search.nodes <= node_limit
        proven = search.nodes <= node_limit
        if not math.isfinite(search.best_cost):
            return None, proven
        groups = [
            Group(c, n, c.throughput)
            for c, n in zip(usable.configs, search.best_counts, strict=True)
            if n > 0
        ]
        return _schedule(groups, rate, "tc"), proven


class _Usable:
    """The configurations one search reads (ascending r) and what of them depends on nothing else: the
    tie blocks (equal r share w), per block i the suffix minima over blocks i.. of p / t (``unit``) and
    of p (``floor``: while w < T at least one more machine is needed), and what dfs reads of a
    one-configuration block (``single``: index, t, p, d, b, whether it is the last block, the unit of
    the blocks after it (inf: none); None for a tie block). Minima are taken as ``min`` takes them (the
    first of equal values)."""

    __slots__ = ("blocks", "classes", "configs", "floor", "rows", "single", "unit")

    def __init__(self, rows: list[_Row], configs: list[Config]):
        self.rows, self.configs = rows, configs
        blocks: list[list[int]] = []
        head = 0.0  # r of the last block's first configuration
        for k, row in enumerate(rows):
            r = row[4]
            if blocks and abs(head - r) <= 1e-12 * r:
                blocks[-1].append(k)
            else:
                blocks.append([k])
                head = r
        self.blocks = blocks
        nb = len(blocks)
        unit, floor = [0.0] * nb, [0.0] * nb
        single: list[tuple[int, float, float, float, int, bool, float] | None] = [None] * nb
        for i in range(nb - 1, -1, -1):  # (conditionals, not min: one pass per new subset)
            block = blocks[i]
            k = block[0]
            d, b, t, price, _, own_u, _ = rows[k]
            own_p = price
            if len(block) == 1:  # unit of the blocks after it (none: inf) and whether it is the last
                single[i] = (k, t, price, d, b, i + 1 == nb, unit[i + 1] if i + 1 < nb else math.inf)
            else:
                for k in block[1:]:
                    u, p = rows[k][5], rows[k][3]
                    own_u = u if u < own_u else own_u
                    own_p = p if p < own_p else own_p
            if i + 1 < nb:
                own_u = unit[i + 1] if unit[i + 1] < own_u else own_u
                own_p = floor[i + 1] if floor[i + 1] < own_p else own_p
            unit[i], floor[i] = own_u, own_p
        self.unit, self.floor, self.single = unit, floor, single
        self.classes: list[tuple[tuple[float, float, float, bool], ...]] | None = None  # on first use

    def price_classes(self) -> list[tuple[tuple[float, float, float, bool], ...]]:
        """:func:`_price_classes` of these configurations (computed once)."""
        if self.classes is None:
            self.classes = _price_classes(self.rows, self.blocks)
        return self.classes


def _price_classes(
    rows: list[_Row], blocks: list[list[int]]
) -> list[tuple[tuple[float, float, float, bool], ...]]:
    """Per block i, per price p among the configurations of blocks i..: (p, the largest throughput
    t_max at that price, the least p / t u_below among those priced below p; inf if none). A completion
    from block i whose priciest machines cost p has N >= 1 of them, serving at most N t_max, and pays at
    least u_below per req/s of the rest: at least min over N >= 1 of N p + max(0, R - N t_max) u_below
    for a remaining rate R (:func:`_class_bound`). Its minimum over the prices bounds the completion: the
    integer machines that the lines' bound, a fractional one, does not see (e.g. a GPU of low p / t but
    a high price, against CPUs of small price but higher p / t)."""
    out: list[tuple[tuple[float, float, float, bool], ...]] = [()] * len(blocks)
    t_max: dict[float, float] = {}  # per price, over blocks i..: the largest t and the least p / t
    u_min: dict[float, float] = {}
    for i in range(len(blocks) - 1, -1, -1):
        for k in blocks[i]:
            _, _, t, price, _, u, _ = rows[k]
            if price not in t_max or t > t_max[price]:
                t_max[price] = t
            if price not in u_min or u < u_min[price]:
                u_min[price] = u
        classes = []
        below = math.inf  # the least p / t of the prices below
        for price in sorted(t_max):
            # (the last: whether N = 1 is the minimum, machines at this price dearer per req/s)
            classes.append((price, t_max[price], below, below < math.inf and price >= t_max[price] * below))
            below = u_min[price] if u_min[price] < below else below
        out[i] = tuple(classes)
    return out


def _class_bound(rest: float, p: float, t_max: float, u_below: float) -> float:
    """min over integers N >= 1 of N p + max(0, rest - N t_max) u_below (convex in N: its minimum is at
    N = 1 or next to rest / t_max; the neighbours of floor(rest / t_max) are all tried, so rounding
    cannot skip it)."""
    if rest <= t_max:
        return p
    if u_below == math.inf:  # no cheaper machine: N t_max >= rest
        return math.ceil(rest / t_max - 1e-9) * p if rest / t_max > 1.0 else p
    best = p + (rest - t_max) * u_below
    if p < t_max * u_below:  # more machines at this price beat cheaper ones: N near rest / t_max
        n0 = int(rest / t_max)
        for n in (n0 - 1, n0, n0 + 1):
            if n > 1:
                x = rest - n * t_max
                v = n * p + (x * u_below if x > 0 else 0.0)
                best = v if v < best else best
    return best


class _BilledSearch:
    """Branch and bound state of :func:`billed_optimal` over the configurations ``usable``."""

    __slots__ = (
        "best_cost",
        "best_counts",
        "best_wcl",
        "blocks",
        "classes",
        "counts",
        "floor",
        "full",
        "lines",
        "need",
        "node_limit",
        "nodes",
        "rate",
        "rows",
        "single",
        "unit",
    )

    def __init__(
        self, usable: _Usable, rate: float, budget: float, node_limit: int, price_classes: bool = False
    ):
        rows = usable.rows
        self.rows, self.rate, self.node_limit = rows, rate, node_limit
        self.blocks, self.unit, self.floor, self.single = (
            usable.blocks,
            usable.unit,
            usable.floor,
            usable.single,
        )
        self.classes = usable.price_classes() if price_classes else None
        self.full = rate - EPS  # a rate w >= full serves the module
        self.counts = [0] * len(rows)
        self.nodes = 0
        self._incumbent(rows, rate, budget)
        self._lines(rows, rate)

    def _incumbent(self, rows: list[_Row], rate: float, budget: float) -> None:
        """need (each config's Theorem-1 rate, :meth:`Config.min_rate`) and the incumbent: the best plan
        on one configuration, enough machines for max(T, b / (L - d)) (the first best in order)."""
        need: list[float] = []
        best_cost = best_wcl = math.inf
        pick: tuple[int, int] | None = None
        for k, (d, b, t, price, _, _, _) in enumerate(rows):
            gap = budget - d
            nk = b / gap if gap > EPS else math.inf
            need.append(nk)
            n = math.ceil((nk if nk > rate else rate) / t - 1e-9)  # max(rate, need), then at least 1
            n = n if n > 1 else 1
            cost, w = n * price, n * t
            wcl = d + b / w if w > 0 else math.inf  # Config.tc_latency(n t)
            if cost < best_cost - EPS or (cost <= best_cost + EPS and wcl < best_wcl):
                best_cost, best_wcl, pick = cost, wcl, (k, n)
        counts = [0] * len(rows)
        if pick is not None:
            counts[pick[0]] = pick[1]
        self.need = need
        self.best_cost, self.best_wcl, self.best_counts = best_cost, best_wcl, counts

    def _lines(self, rows: list[_Row], rate: float) -> None:
        """lines[i]: (A, u, A - T u) per config of blocks i.. (one backward pass): a completion whose
        cheapest-per-throughput config is j (u = p / t) ends at a total rate of at least max(T, need_j)
        (it meets j's own condition), so it costs at least (max(T, need_j) - w) u = A - w u (the needs
        less a rounding allowance). A line no lower than another at both ends of w in [0, T] is
        dropped: it never sets the min. Each line keeps its value at T, A - T u, computed once (the same
        float each comparison would compute)."""
        need, blocks = self.need, self.blocks
        lines: list[tuple[tuple[float, float, float], ...]] = [()] * len(blocks)
        kept: list[tuple[float, float, float]] = []  # (A, u, A - T u)
        current: tuple[tuple[float, float, float], ...] = ()
        for i in range(len(blocks) - 1, -1, -1):
            for k in blocks[i]:
                row = rows[k]
                u = row[5]
                lowered = need[k] - row[6]
                a = (lowered if lowered > rate else rate) * u  # max(rate, need - allowance) * u
                at_t = a - rate * u
                dominated = dominates = False
                for a2, _, e2 in kept:
                    if a2 <= a and e2 <= at_t:
                        dominated = True
                        break
                    if a <= a2 and at_t <= e2:
                        dominates = True
                if not dominated:
                    if dominates:
                        kept = [line for line in kept if not (a <= line[0] and at_t <= line[2])]
                    kept.append((a, u, at_t))
                    current = tuple(kept)
            lines[i] = current
        self.lines = lines

    def hinted(self, usable: _Usable, hint: Sequence[Group], budget: float) -> None:
        """Try ``hint``'s machine counts, and them plus one machine of each configuration, as
        incumbents: each is kept when it serves the rate with every used configuration's worst case
        (Theorem 1: d + b / w, w the rate on blocks up to its own) within ``budget`` and beats the
        incumbent as :meth:`_record` compares."""
        index = {c: k for k, c in enumerate(usable.configs)}
        base = [0] * len(self.rows)
        for g in hint:
            k = index.get(g.config)
            if k is None:
                return
            base[k] += g.machines
        block_of = [0] * len(self.rows)
        for bi, block in enumerate(self.blocks):
            for k in block:
                block_of[k] = bi
        rows, need = self.rows, self.need
        totals = [0.0] * len(self.blocks)
        cost = 0.0
        used = [k for k, n in enumerate(base) if n]
        for k in used:
            totals[block_of[k]] += base[k] * rows[k][2]
            cost += base[k] * rows[k][3]
        cumulative, w = [], 0.0
        for t in totals:
            w += t
            cumulative.append(w)
        # the hint itself, then it with one more machine of configuration k: only the rates of blocks
        # from k's on grow (by t_k), so each try reads the used configurations' rates, not every row
        for extra in range(-1, len(rows)):
            if extra < 0:
                add_block, add_t, add_cost, check = len(self.blocks), 0.0, cost, used
            else:
                add_block, add_t = block_of[extra], rows[extra][2]
                add_cost = cost + rows[extra][3]
                check = used if base[extra] else [*used, extra]
            if w + add_t < self.full:
                continue
            wcl, ok = 0.0, True
            for k in check:
                wk = cumulative[block_of[k]] + (add_t if block_of[k] >= add_block else 0.0)
                if wk < need[k]:
                    ok = False
                    break
                x = rows[k][0] + rows[k][1] / wk
                wcl = x if x > wcl else wcl
            if (
                ok
                and wcl <= budget
                and (
                    add_cost < self.best_cost - EPS
                    or (add_cost <= self.best_cost + EPS and wcl < self.best_wcl - EPS)
                )
            ):
                counts = base.copy()
                if extra >= 0:
                    counts[extra] += 1
                self.best_cost, self.best_wcl, self.best_counts = add_cost, wcl, counts

    def _record(self, cost: float, wcl: float) -> None:
        if cost < self.best_cost - EPS or (cost <= self.best_cost + EPS and wcl < self.best_wcl - EPS):
            self.best_cost, self.best_wcl, self.best_counts = cost, wcl, self.counts.copy()

    def dfs(self, bi: int, w: float, cost: float, wcl: float) -> None:
        """Choose the counts of block ``bi`` on, given rate ``w``, cost and worst case so far.

        A block of one configuration (the common case) is expanded here: counts go up from the fewest
        that meet the configuration's own Theorem 1 condition; the bound cost + n p + (T - w - n t) *
        unit_next is non-decreasing in n (p / t >= unit_next, configs ahead have higher r), so the loop
        stops at the first n whose bound exceeds the incumbent. More machines than reach T only add
        cost. A child that reaches T is recorded in place (it is a node: counted against the limit).
        The last child, none of this block's configuration, is the node ``(bi + 1, w, cost, wcl)``: it
        is visited by the next pass of the loop (the tail call, without a new frame)."""
        rate, full = self.rate, self.full
        lines, floor, classes, single, needs = self.lines, self.floor, self.classes, self.single, self.need
        nblocks = len(self.blocks)
        counts = self.counts
        while True:
            self.nodes += 1
            if self.nodes > self.node_limit:
                return
            if w >= full:
                self._record(cost, wcl)
                return
            if bi == nblocks:
                return
            short = math.inf  # min over the lines (the first of equal values, as min): 1-4 lines
            for a, u, _ in lines[bi]:
                x = a - w * u
                short = x if x < short else short
            least = floor[bi]
            lb = cost + (short if short >= least else least)
            if classes is not None and (
                lb <= self.best_cost + EPS and (lb < self.best_cost - EPS or wcl < self.best_wcl - EPS)
            ):
                # not cut by the lines: the price classes' bound (no smaller than the cheapest machine)
                rest = full - w  # the rate the completion must still add
                least = math.inf
                for p, t_max, u_below, one in classes[bi]:
                    x = rest - t_max  # N = 1 is the minimum where ``one`` (the common case, inline)
                    x = p if x <= 0 else (p + x * u_below if one else _class_bound(rest, p, t_max, u_below))
                    least = x if x < least else least
                x = cost + least
                lb = x if x > lb else lb
            if lb > self.best_cost + EPS or (lb >= self.best_cost - EPS and wcl >= self.best_wcl - EPS):
                return
            block = single[bi]
            if block is None:
                self._tied(bi, self.blocks[bi], w, cost, wcl)
                return
            k, t, price, d, b, last, unit_next = block
            lo = math.ceil((needs[k] - w) / t - 1e-9)
            lo = lo if lo > 1 else 1  # (conditionals, not max: the hot loop of every search)
            reach = math.ceil((rate - w) / t - 1e-9)
            reach = reach if reach > lo else lo
            cap = self.best_cost + EPS  # read again after every child (which may record)
            for n in range(reach if last else lo, reach + 1):
                w2, cost2 = w + n * t, cost + n * price
                rest = rate - w2
                if cost2 + (rest * unit_next if rest > EPS else 0.0) > cap:
                    break
                counts[k] = n
                x = d + b / w2
                wcl2 = wcl if wcl >= x else x
                if w2 >= full:  # a leaf: dfs would count it and record it
                    self.nodes += 1
                    if self.nodes <= self.node_limit:
                        self._record(cost2, wcl2)
                else:
                    self.dfs(bi + 1, w2, cost2, wcl2)
                cap = self.best_cost + EPS
            counts[k] = 0
            if last:
                return
            bi += 1

    def _tied(self, bi: int, block: list[int], w: float, cost: float, wcl: float) -> None:
        """Configs of equal r share w: choose all their counts, then check their conditions."""
        rows = self.rows
        ranges = []
        for k in block:
            t = rows[k][2]
            hi = max(math.ceil((self.rate - w) / t - 1e-9), math.ceil((self.need[k] - w) / t - 1e-9), 1)
            ranges.append(range(hi, -1, -1))
        for vec in itertools.product(*ranges):
            used = [(k, n) for k, n in zip(block, vec, strict=True) if n]
            w2 = w + sum(n * rows[k][2] for k, n in used)
            add = sum(n * rows[k][3] for k, n in used)
            if any(w2 < self.need[k] - EPS for k, _ in used) or cost + add > self.best_cost + EPS:
                continue
            wcl2 = max([wcl] + [rows[k][0] + rows[k][1] / w2 for k, _ in used])
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
    A caller searching one configuration list at many budgets prepares it once
    (:meth:`BilledConfigs.optimal`).
    """
    return BilledConfigs(configs).optimal(rate, budget, node_limit)
