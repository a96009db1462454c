"""Latency splitting: turn one end-to-end SLO into per-module budgets.

Heuristics (single configuration per module, as in the papers):
- ``lc``: Harpagon/Piccolo Algorithm 2 — repeatedly take the move with the highest latency-cost
  efficiency (cost saved per second of latency spent), optional node merger and cost-direct;
- ``tb``: throughput-based (Scrooge, Harp-tb) — take the move to the highest-throughput config;
- ``greedy``: take the move that saves the most cost (InferLine; also cost-direct's rule);
- ``even``: SLO / path length (Clipper).
Exact methods over per-module option lists (latency, cost):
- :func:`combine` — branch and bound choosing one option per module so every root-to-leaf path fits,
  exact for any DAG (chains, trees, joins) given complete option lists.
"""

from __future__ import annotations

import bisect
import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Literal, Protocol, TypeVar

from planner.latency import EPS
from planner.models import topological_order

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from planner.latency import Config
    from planner.models import ProblemSpec

__all__ = [
    "ListSource",
    "Option",
    "OptionSource",
    "Topology",
    "combine",
    "even_split",
    "iterative_split",
    "path_latency",
    "topology",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Option(Generic[T]):
    latency: float
    cost: float
    payload: T


@dataclass(frozen=True, slots=True)
class Topology:
    """A problem's DAG as :class:`~planner.models.ProblemSpec` computes it (``order()``, ``parents()``,
    ``children()``, ``paths()``: the same values, in the same order), computed once per DAG. Shared:
    read it, never change it (the mappings' values are tuples)."""

    order: tuple[str, ...]
    parents: Mapping[str, tuple[str, ...]]
    children: Mapping[str, tuple[str, ...]]
    paths: tuple[tuple[str, ...], ...]


def topology(problem: ProblemSpec) -> Topology:
    """The DAG of ``problem`` (:class:`Topology`). An epoch asks for it thousands of times (every solve,
    realisation and shape of an app) on a few distinct DAGs: it is kept per module list and edge list
    (problems are frozen, so those are all it depends on)."""
    return _topology(tuple(problem.modules), tuple(problem.edges))


@functools.lru_cache(maxsize=1024)
def _topology(modules: tuple[str, ...], edges: tuple[tuple[str, str], ...]) -> Topology:
    parents: dict[str, list[str]] = {m: [] for m in modules}
    children: dict[str, list[str]] = {m: [] for m in modules}
    for src, dst in edges:
        children[src].append(dst)
        parents[dst].append(src)
    order = tuple(topological_order(list(modules), list(edges)))
    paths: list[tuple[str, ...]] = []

    def walk(node: str, prefix: tuple[str, ...]) -> None:
        path = (*prefix, node)
        if not children[node]:
            paths.append(path)
        for c in children[node]:
            walk(c, path)

    for root in (m for m in order if not parents[m]):
        walk(root, ())
    return Topology(
        order=order,
        parents={m: tuple(ps) for m, ps in parents.items()},
        children={m: tuple(cs) for m, cs in children.items()},
        paths=tuple(paths),
    )


def path_latency(lat: Sequence[float], paths: Sequence[Sequence[int]]) -> float:
    return max(sum(lat[i] for i in p) for p in paths)


def even_split(n: int, paths: Sequence[Sequence[int]], slo: float) -> list[float]:
    """Clipper: each module gets SLO / (length of the longest path through it)."""
    out = [slo] * n
    for p in paths:
        for i in p:
            out[i] = min(out[i], slo / len(p))
    return out


def _units(
    n: int, parents: Sequence[frozenset[int]], children: Sequence[frozenset[int]], merge: bool
) -> list[list[int]]:
    """Node merger: modules with the same parents and the same children form one super-module."""
    if not merge:
        return [[i] for i in range(n)]
    groups: dict[tuple[frozenset[int], frozenset[int]], list[int]] = {}
    for i in range(n):
        groups.setdefault((parents[i], children[i]), []).append(i)
    return list(groups.values())


Rule = Literal["lc", "tb", "greedy"]


class _Splitter:
    """Algorithm 2's state: per-module single-config (latency, cost), units (node merger), moves."""

    def __init__(
        self,
        configs: Sequence[Sequence[Config]],
        single: Callable[[int, Config], tuple[float, float]],
        paths: Sequence[Sequence[int]],
        slo: float,
        units: list[list[int]],
    ):
        self.configs, self.single, self.paths, self.slo, self.units = configs, single, paths, slo, units
        self.cache: dict[tuple[int, Config], tuple[float, float]] = {}

    def lc(self, i: int, c: Config) -> tuple[float, float]:
        key = (i, c)
        if key not in self.cache:
            self.cache[key] = self.single(i, c)
        return self.cache[key]

    def moves(self, assign: list[Config], unit: list[int]) -> list[dict[int, Config]]:
        if len(unit) == 1:
            i = unit[0]
            return [{i: c} for c in self.configs[i] if c != assign[i]]
        # a super-module moves to a latency level; each member takes its cheapest config within it
        table = {}
        for i in unit:
            rows = sorted((*self.lc(i, c), c) for c in self.configs[i])
            lats, picks, cheapest = [], [], None
            for lat, cost, c in rows:
                if cheapest is None or cost < cheapest[0] - EPS:
                    cheapest = (cost, c)
                lats.append(lat)
                picks.append(cheapest[1])
            table[i] = (lats, picks)
        out = []
        for level in sorted({lat for i in unit for lat in table[i][0]}):
            ks = {i: bisect.bisect_right(table[i][0], level + EPS) - 1 for i in unit}
            if min(ks.values()) < 0:
                continue
            pick = {i: table[i][1][k] for i, k in ks.items()}
            if any(pick[i] != assign[i] for i in unit):
                out.append(pick)
        return out

    def score(
        self, rule: Rule, assign: list[Config], lat: list[float], unit: list[int], mv: dict[int, Config]
    ) -> tuple[float, float] | None:
        saved = sum(self.lc(i, assign[i])[1] - self.lc(i, c)[1] for i, c in mv.items())
        if saved <= EPS:
            return None
        new_lat = list(lat)
        for i, c in mv.items():
            new_lat[i] = self.lc(i, c)[0]
        if path_latency(new_lat, self.paths) > self.slo + EPS:
            return None
        if rule == "lc":  # latency-cost efficiency: cost saved per second of latency spent
            spent = max(new_lat[i] for i in unit) - max(lat[i] for i in unit)
            return (saved / spent if spent > EPS else math.inf), saved
        if rule == "tb":
            return max(c.throughput for c in mv.values()), saved
        return saved, saved

    def run(self, assign: list[Config], rule: Rule, history: list[list[Config]] | None) -> list[Config]:
        assign = list(assign)
        while True:
            lat = [self.lc(i, assign[i])[0] for i in range(len(assign))]
            best: tuple[float, float, dict[int, Config]] | None = None
            for unit in self.units:
                for mv in self.moves(assign, unit):
                    sc = self.score(rule, assign, lat, unit, mv)
                    if sc is not None and (best is None or sc > best[:2]):
                        best = (*sc, mv)
            if best is None:
                return assign
            for i, c in best[2].items():
                assign[i] = c
            if history is not None:
                history.append(list(assign))


def iterative_split(
    configs: Sequence[Sequence[Config]],
    single: Callable[[int, Config], tuple[float, float]],
    start: Sequence[Config],
    paths: Sequence[Sequence[int]],
    slo: float,
    select: Rule,
    parents: Sequence[frozenset[int]],
    children: Sequence[frozenset[int]],
    merge: bool = False,
    cost_direct: int = 0,
) -> list[list[Config]]:
    """Algorithm 2 and its variants. ``single(i, c)`` gives (latency, cost) of module i run
    entirely on config c. Returns candidate assignments: the main result, then one per cost-direct
    rollback depth R (undo the last R iterations, redo them greedily by cost)."""
    splitter = _Splitter(configs, single, paths, slo, _units(len(configs), parents, children, merge))
    history: list[list[Config]] = [list(start)]
    out = [splitter.run(list(start), select, history)]
    for r in range(1, cost_direct + 1):
        if len(history) - 1 - r < 0:
            break
        out.append(splitter.run(history[len(history) - 1 - r], "greedy", None))
    return out


class OptionSource(Protocol[T]):
    """Options of one module in ascending cost, possibly generated on demand."""

    def get(self, k: int, cap: float) -> Option[T] | None:
        """The k-th cheapest option if it exists and costs at most ``cap``."""
        ...

    def min_latency(self) -> float:
        """A lower bound on every option's latency."""
        ...


class ListSource(Generic[T]):
    """An :class:`OptionSource` over a list that is already complete."""

    def __init__(self, options: Sequence[Option[T]]):
        self.options = sorted(options, key=lambda x: (x.cost, x.latency))

    def get(self, k: int, cap: float) -> Option[T] | None:
        if k < len(self.options) and self.options[k].cost <= cap + EPS:
            return self.options[k]
        return None

    def min_latency(self) -> float:
        return min((x.latency for x in self.options), default=math.inf)


def combine(
    sources: Sequence[OptionSource[T]],
    paths: Sequence[Sequence[int]],
    slo: float,
    bound: float = math.inf,
    node_limit: int = 2_000_000,
) -> tuple[list[Option[T]] | None, bool]:
    """Choose one option per module minimising total cost with every path's latency <= slo.

    Branch and bound in module order: options are tried cheapest first (lazily for an
    :class:`OptionSource`); the bound is the cost so far plus every remaining module's cheapest
    option; a partial choice is cut when some path cannot fit even with every remaining module at
    its fastest latency (a lower bound from each source). Exact for any DAG. Returns (choice, proven).
    """
    n = len(sources)
    min_cost = []
    for src in sources:
        first = src.get(0, math.inf)
        if first is None:
            return None, True
        min_cost.append(first.cost)
    min_latency = [src.min_latency() for src in sources]
    rest_cost = [0.0] * (n + 1)
    for i in range(n - 1, -1, -1):
        rest_cost[i] = rest_cost[i + 1] + min_cost[i]
    on = [[p for p, path in enumerate(paths) if i in path] for i in range(n)]
    # rest_lat[i][p]: sum of the fastest latencies of modules >= i on path p
    rest_lat = [[0.0] * len(paths) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for p in range(len(paths)):
            rest_lat[i][p] = rest_lat[i + 1][p] + (min_latency[i] if p in on[i] else 0.0)
    best_cost = bound
    best: list[Option[T]] | None = None
    chosen: list[Option[T]] = []
    used = [0.0] * len(paths)
    nodes = 0
    proven = True

    limit = slo + EPS

    def dfs(i: int, cost: float) -> None:
        nonlocal best_cost, best, nodes, proven
        nodes += 1
        if nodes > node_limit:
            proven = False
            return
        if i == n:
            if cost < best_cost - EPS or best is None and cost <= best_cost + EPS:
                best_cost, best = cost, list(chosen)
            return
        k = 0
        source, rest, ahead, mine = sources[i], rest_cost[i + 1], rest_lat[i + 1], on[i]
        while (opt := source.get(k, best_cost - cost - rest)) is not None:
            k += 1
            if best is not None and cost + opt.cost + rest > best_cost - EPS:
                break
            latency = opt.latency
            if any(used[p] + latency + ahead[p] > limit for p in mine):
                continue  # some path cannot fit even with the modules ahead at their fastest
            for p in mine:
                used[p] += latency
            chosen.append(opt)
            dfs(i + 1, cost + opt.cost)
            chosen.pop()
            for p in mine:
                used[p] -= latency

    dfs(0, 0.0)
    return best, proven
