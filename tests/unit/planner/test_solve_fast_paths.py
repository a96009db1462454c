"""The solve path's fast paths give what the plain code gave, bit for bit: the billed branch and bound over
configurations prepared once (:class:`planner.module.BilledConfigs`) against the search as it was written
before (kept here as the reference: same nodes, same optimum, same proof), and the module records of a
:class:`planner.solve.BilledCache` against :func:`planner.latency.configs_for`."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from planner.generate import generate_problem, generate_problems
from planner.latency import EPS, Config, Group, configs_for
from planner.models import ProfileEntry
from planner.module import BilledConfigs, ModuleSchedule, _BilledSearch, _schedule, billed_optimal
from planner.robust import solve_dispatchable
from planner.solve import BilledCache, solve

# --------------------------------------------------------------------------- the reference search


def _ref_tie_blocks(cs: list[Config]) -> list[list[int]]:
    blocks: list[list[int]] = []
    for k, c in enumerate(cs):
        if blocks and abs(cs[blocks[-1][0]].ratio - c.ratio) <= 1e-12 * c.ratio:
            blocks[-1].append(k)
        else:
            blocks.append([k])
    return blocks


def _ref_incumbent(cs: list[Config], rate: float, need: list[float]) -> tuple[float, float, list[int]]:
    best = (math.inf, math.inf, [0] * len(cs))
    for k, c in enumerate(cs):
        n = max(1, math.ceil(max(rate, need[k]) / c.throughput - 1e-9))
        cost, wcl = n * c.price, c.tc_latency(n * c.throughput)
        if cost < best[0] - EPS or (cost <= best[0] + EPS and wcl < best[1]):
            counts = [0] * len(cs)
            counts[k] = n
            best = (cost, wcl, counts)
    return best


class _RefSearch:
    """planner.module._BilledSearch as it was before the configurations were prepared (verbatim logic)."""

    def __init__(self, cs: list[Config], rate: float, budget: float, node_limit: int):
        self.cs, self.rate, self.node_limit = cs, rate, node_limit
        self.need = [c.min_rate(budget) for c in cs]
        self.blocks = _ref_tie_blocks(cs)
        self.unit = [min(cs[k].price / cs[k].throughput for k in b) for b in self.blocks]
        self.floor = [min(cs[k].price for k in b) for b in self.blocks]
        for i in range(len(self.unit) - 2, -1, -1):
            self.unit[i] = min(self.unit[i], self.unit[i + 1])
            self.floor[i] = min(self.floor[i], self.floor[i + 1])
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
        self.best_cost, self.best_wcl, self.best_counts = _ref_incumbent(cs, rate, self.need)
        self.counts = [0] * len(cs)
        self.nodes = 0

    def _record(self, cost: float, wcl: float) -> None:
        if cost < self.best_cost - EPS or (cost <= self.best_cost + EPS and wcl < self.best_wcl - EPS):
            self.best_cost, self.best_wcl, self.best_counts = cost, wcl, self.counts.copy()

    def dfs(self, bi: int, w: float, cost: float, wcl: float) -> None:  # noqa: PLR0912
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
        for n in range(reach if last else lo, reach + 1):
            w2, cost2 = w + n * t, cost + n * price
            rest = rate - w2
            if cost2 + (rest * unit_next if rest > EPS else 0.0) > self.best_cost + EPS:
                break
            self.counts[k] = n
            x = d + b / w2
            wcl2 = wcl if wcl >= x else x
            if w2 >= rate - EPS:
                self.nodes += 1
                if self.nodes <= self.node_limit:
                    self._record(cost2, wcl2)
            else:
                self.dfs(bi + 1, w2, cost2, wcl2)
        self.counts[k] = 0
        if not last:
            self.dfs(bi + 1, w, cost, wcl)

    def _tied(self, bi: int, block: list[int], w: float, cost: float, wcl: float) -> None:
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


def _reference(
    configs: list[Config], rate: float, budget: float, node_limit: int
) -> tuple[ModuleSchedule | None, bool, int]:
    cs = sorted((c for c in configs if c.duration < budget - EPS), key=lambda c: (c.ratio, -c.duration))
    if not cs:
        return None, True, 0
    search = _RefSearch(cs, rate, budget, node_limit)
    search.dfs(0, 0.0, 0.0, 0.0)
    proven = search.nodes <= node_limit
    if not math.isfinite(search.best_cost):
        return None, proven, search.nodes
    groups = [Group(c, n, c.throughput) for c, n in zip(cs, search.best_counts, strict=True) if n > 0]
    return _schedule(groups, rate, "tc"), proven, search.nodes


def _fast(
    prepared: BilledConfigs, rate: float, budget: float, node_limit: int
) -> tuple[ModuleSchedule | None, bool, int]:
    got, proven = prepared.optimal(rate, budget, node_limit)
    usable = prepared.usable(budget)
    assert usable.configs == [c for c in prepared.configs if c.duration < budget - EPS]
    assert usable.rows == [prepared.rows[prepared.configs.index(c)] for c in usable.configs]
    nodes = 0
    if usable.rows:
        search = _BilledSearch(usable, rate, budget, node_limit)
        search.dfs(0, 0.0, 0.0, 0.0)
        nodes = search.nodes
    return got, proven, nodes


# --------------------------------------------------------------------------- random modules


def _random_configs(rng: random.Random) -> list[Config]:
    """A random profile; some configurations share a throughput-cost ratio (tie blocks) and some have
    the same key (ratio, duration) in the search order (the stable sort keeps the given order)."""
    prices = {"gpu": rng.choice([3.06, 1.46, 0.526]), "cpu": rng.choice([0.17, 0.34])}
    out: list[Config] = []
    for _ in range(rng.randint(1, 14)):
        hw = rng.choice(list(prices))
        b, c = rng.choice([1, 2, 4, 8, 16]), rng.choice([1, 2])
        out.append(Config(hw, b, c, round(rng.uniform(0.005, 0.3), 4), prices[hw]))
        if rng.random() < 0.2:  # twice the throughput at twice the price: the same ratio
            out.append(Config(hw + "x2", b, 2 * c, out[-1].duration, 2 * prices[hw]))
        if rng.random() < 0.1:
            out.append(out[-1])
    return out


@pytest.mark.parametrize("chunk", range(4))
def test_prepared_search_is_the_reference_search(chunk: int) -> None:
    """Same schedule (groups, worst case), same proof and the same number of nodes as the search before,
    on random profiles, rates and budgets, with node limits that stop some searches early."""
    rng = random.Random(chunk)
    stopped = tied = 0
    for _ in range(100):
        configs = _random_configs(rng)
        prepared = BilledConfigs(configs)
        rate = rng.uniform(1.0, 300.0)
        for budget in (rng.uniform(0.01, 0.6), rng.uniform(0.05, 0.3)):
            limit = rng.choice([30, 400, 3_000])
            want = _reference(configs, rate, budget, limit)
            got = _fast(prepared, rate, budget, limit)
            assert got == want, (configs, rate, budget, limit)
            assert billed_optimal(configs, rate, budget, limit) == want[:2]
            stopped += not want[1]
        tied += len({round(c.ratio, 9) for c in configs}) < len(configs)
    assert stopped > 0 and tied > 0  # both the node limit and tie blocks were exercised


@pytest.mark.parametrize("chunk", range(4))
def test_the_price_classes_cut_nodes_never_the_optimum(chunk: int) -> None:
    """The 5-10-module solves' stronger bound (``price_classes``): where the search as first written
    finishes, the same schedule, the same proof and never more nodes, fewer on some (each node it cuts
    holds nothing the incumbent would take, so the incumbents it meets are the same)."""
    rng = random.Random(chunk)
    fewer = proven = 0
    for _ in range(100):
        configs = _random_configs(rng)
        prepared = BilledConfigs(configs)
        rate = rng.uniform(1.0, 300.0)
        for budget in (rng.uniform(0.01, 0.6), rng.uniform(0.05, 0.3)):
            limit = rng.choice([30, 400, 3_000])  # (the cases of the test above)
            want = _reference(configs, rate, budget, limit)
            if not want[1]:
                continue
            proven += 1
            assert prepared.optimal(rate, budget, limit, price_classes=True) == want[:2]
            usable = prepared.usable(budget)
            if usable.rows:
                search = _BilledSearch(usable, rate, budget, limit, price_classes=True)
                search.dfs(0, 0.0, 0.0, 0.0)
                assert search.nodes <= want[2]
                fewer += search.nodes < want[2]
    assert proven > 150 and fewer > 0


def test_prepared_search_on_generated_modules() -> None:
    """The modules of generated problems (wide profiles at fleet rates), budgets down their staircases."""
    for problem in generate_problems(12, seed=5):
        for name, spec in problem.modules.items():
            configs = configs_for(spec.profile, problem.hardware)
            prepared = BilledConfigs(configs)
            budget = problem.slo_s
            for _ in range(6):
                want = _reference(configs, spec.rate, budget, 200_000)
                assert _fast(prepared, spec.rate, budget, 200_000) == want, (problem.name, name, budget)
                if want[0] is None:
                    break
                budget = want[0].wcl - 1e-7


# --------------------------------------------------------------------------- module records


def test_module_records_are_configs_for() -> None:
    problem = generate_problem(2)
    cache = BilledCache()
    for spec in problem.modules.values():
        first = cache.module(spec.profile, problem.hardware)
        assert list(first.configs) == configs_for(spec.profile, problem.hardware)
        assert cache.module(spec.profile, problem.hardware) is first  # same list, same entries: kept


def test_module_records_follow_a_changed_profile_or_price() -> None:
    """A record answers only for the list and entries it was read from: a list changed in place, a
    replaced hardware spec or another list with the same entries gets configs_for of what it holds."""
    problem = generate_problem(2)
    name = problem.order()[0]
    profile = list(problem.modules[name].profile)
    hardware = dict(problem.hardware)
    cache = BilledCache()
    first = cache.module(profile, hardware)
    profile.append(ProfileEntry(hardware=profile[0].hardware, batch=64, concurrency=1, duration_s=0.5))
    grown = cache.module(profile, hardware)
    assert grown is not first and list(grown.configs) == configs_for(profile, hardware)
    profile[0] = profile[0].model_copy(update={"duration_s": profile[0].duration_s * 0.5})
    assert list(cache.module(profile, hardware).configs) == configs_for(profile, hardware)
    hw = profile[0].hardware
    hardware[hw] = hardware[hw].model_copy(update={"price_per_hour": hardware[hw].price_per_hour * 2})
    repriced = cache.module(profile, hardware)
    assert list(repriced.configs) == configs_for(profile, hardware)
    assert {c.price for c in repriced.configs if c.hardware == hw} == {hardware[hw].price_per_hour}
    other = list(profile)
    assert list(cache.module(other, hardware).configs) == configs_for(other, hardware)


def test_module_records_stay_within_the_bound() -> None:
    problem = generate_problem(1)
    cache = BilledCache(max_entries=2)
    for _ in range(5):
        for spec in problem.modules.values():
            cache.module(list(spec.profile), problem.hardware)  # a new list every time
            assert len(cache._modules) <= 2


def _dump(plan: object) -> dict[str, object]:
    out = plan.model_dump(mode="json")  # type: ignore[attr-defined]
    out.pop("solve_ms", None)
    out.pop("solve_cpu_ms", None)
    return out  # type: ignore[no-any-return]


@pytest.mark.parametrize("seed", [11, 12])
def test_solves_sharing_records_are_solves_without(seed: int) -> None:
    """Rounds of a dispatch-aware solve share module records and billed tables through one cache; a
    solve of each variant alone (no cache) gives the same plan, and so does the whole dispatch solve."""
    problem = generate_problem(seed)
    cache = BilledCache()
    for factor in (1.0, 0.95, 1.0, 0.9):
        variant = problem.model_copy(update={"slo_s": problem.slo_s * factor})
        assert _dump(solve(variant, cache=cache)) == _dump(solve(variant))
    for policy in ("harpagon", "nexus"):  # filtered configurations: their tables are by content
        assert _dump(solve(problem, policy, cache=cache)) == _dump(solve(problem, policy))
    plan = solve_dispatchable(problem)
    assert plan.modules.keys() == problem.modules.keys()
