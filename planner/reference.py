"""The exhaustive reference for the billed objective (policy ``optimal``).

Deliberately independent of :func:`planner.module.billed_optimal` and of the solver: each module's
complete (worst case, billed cost) Pareto frontier comes from a labelling dynamic programme over
machine mixes, evaluated with the generic Theorem 1 evaluator; frontiers are then combined
exhaustively. The solver hands it plain inputs (configurations, rates, paths, the SLO, each module's
largest budget and the cost of a feasible plan as an upper bound) and imports it; it imports nothing
of the solver. Slow by design — it is the yardstick, not the planner.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

from planner.latency import EPS, Config, Group, worst_case
from planner.module import ModuleSchedule
from planner.split import ListSource, Option, combine

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = ["billed_frontier", "exhaustive_billed"]

_State = tuple[float, float, float, tuple[tuple[Config, int], ...]]  # W, cost, wcl, counts


def _blocks(configs: Sequence[Config]) -> list[list[Config]]:
    """The configurations grouped by throughput-cost ratio, lowest ratio first."""
    out: list[list[Config]] = []
    for config in sorted(configs, key=lambda config: config.ratio):
        if out and abs(out[-1][0].ratio - config.ratio) <= 1e-12 * config.ratio:
            out[-1].append(config)
        else:
            out.append([config])
    return out


def _pareto(states: list[_State]) -> list[_State]:
    """Keep states not dominated in (more W, less cost, less worst case)."""
    kept: list[_State] = []
    for state in sorted(states, key=lambda state: (state[1], -state[0], state[2])):
        if not any(
            other[0] >= state[0] - EPS and other[1] <= state[1] + EPS and other[2] <= state[2] + EPS
            for other in kept
        ):
            kept.append(state)
    return kept


def billed_frontier(
    configs: Sequence[Config], rate: float, lmax: float, cap: float
) -> list[Option[ModuleSchedule]]:
    """Every Pareto-optimal (worst case <= lmax, billed cost <= cap) machine mix of one module."""
    usable = [config for config in configs if config.floor < lmax]
    states: list[_State] = [(0.0, 0.0, 0.0, ())]
    done: list[_State] = []
    for block in _blocks(usable):
        nxt: list[_State] = []
        for w, cost, wcl, counts in states:
            ranges = [range(int((cap - cost) / c.price + EPS) + 1) for c in block]
            for vec in itertools.product(*ranges):
                add = sum(n * c.price for n, c in zip(vec, block, strict=True))
                if cost + add > cap + EPS:
                    continue
                if not any(vec):
                    nxt.append((w, cost, wcl, counts))
                    continue
                w2 = w + sum(n * c.throughput for n, c in zip(vec, block, strict=True))
                mixed = counts + tuple((c, n) for n, c in zip(vec, block, strict=True) if n)
                groups = [Group(c, n, c.throughput) for c, n in mixed]
                wcl2 = worst_case(groups, "tc")
                if wcl2 > lmax + EPS:
                    continue
                state = (w2, cost + add, wcl2, mixed)
                (done if w2 >= rate - EPS else nxt).append(state)
        states = _pareto(nxt)
    front: list[Option[ModuleSchedule]] = []
    for _w, cost, wcl, counts in sorted(done, key=lambda s: (s[2], s[1])):
        if not front or cost < front[-1].cost - EPS:
            ordered = tuple(
                sorted((Group(c, n, c.throughput) for c, n in counts), key=lambda g: -g.config.ratio)
            )
            front.append(Option(wcl, cost, ModuleSchedule(ordered, rate, wcl, "tc")))
    return front


def _proportional_plan_cost(
    configs: Sequence[Sequence[Config]], rates: Sequence[float], paths: Sequence[Sequence[int]], slo: float
) -> float:
    """Billed cost of a simple feasible plan (an upper bound for the search): budgets proportional
    to each module's smallest latency floor d + o, scaled to fill the SLO; each module on the config with
    the smallest floor, with enough machines for b / (L - d - o)."""
    dmin = [min(config.floor for config in module_configs) for module_configs in configs]
    total = 0.0
    for i in range(len(configs)):
        factor = min(slo / sum(dmin[j] for j in path) for path in paths if i in path)
        budget = dmin[i] * factor
        fastest = min(configs[i], key=lambda config: config.floor)
        need = max(rates[i], fastest.min_rate(budget))
        if not math.isfinite(need):
            return math.inf
        total += math.ceil(need / fastest.throughput - 1e-9) * fastest.price
    return total


def exhaustive_billed(
    configs: Sequence[Sequence[Config]],
    rates: Sequence[float],
    paths: list[list[int]],
    slo: float,
    max_budgets: Callable[[int], float],
    upper_bound: float,
) -> list[ModuleSchedule] | None:
    """The billed optimum: one schedule per module (in ``configs``' order) whose worst cases fit every
    path in ``slo``, or None. ``max_budgets(i)``: module ``i``'s largest worst case (the SLO less the
    other modules' least ones on its paths); ``upper_bound``: the cost of a feasible plan (the search
    keeps only machine mixes that cost no more)."""
    cap = min(upper_bound, _proportional_plan_cost(configs, rates, paths, slo))
    fronts = [billed_frontier(configs[i], rates[i], max_budgets(i), cap) for i in range(len(configs))]
    if any(not f for f in fronts):
        return None
    size = math.prod(len(f) for f in fronts)
    if size <= 200_000:
        best: tuple[float, tuple[Option[ModuleSchedule], ...]] | None = None
        for combo in itertools.product(*fronts):
            if all(sum(combo[i].latency for i in path) <= slo + EPS for path in paths):
                cost = sum(o.cost for o in combo)
                if best is None or cost < best[0] - EPS:
                    best = (cost, combo)
        choice = list(best[1]) if best is not None else None
    else:
        choice, _ = combine([ListSource(f) for f in fronts], paths, slo)
    if choice is None:
        return None
    return [option.payload for option in choice]
