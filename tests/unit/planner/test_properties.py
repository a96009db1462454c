"""Property tests: every plan valid under an independent checker; exact <= heuristics;
billed >= occupancy; the exact single-module schedulers match brute force on small cases."""

import itertools
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.errors import InfeasibleError
from planner.generate import generate_problem
from planner.latency import Config
from planner.module import billed_optimal, occupancy_optimal
from planner.solve import solve

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def independent_check(problem, plan, model="tc"):
    """Written apart from planner.check: re-derive every machine's worst case from scratch."""
    wcl = {}
    billed = 0.0
    for name, spec in problem.modules.items():
        mp = plan.modules[name]
        entries = {(e.hardware, e.batch, e.concurrency): e for e in spec.profile}
        machines = []  # (r, duration, batch, rate) per machine
        for g in mp.groups:
            e = entries[(g.hardware, g.batch, g.concurrency)]
            t = e.concurrency * e.batch / e.duration_s
            assert 0 <= g.rate_per_machine <= t * (1 + 1e-9), (name, g)
            price = problem.hardware[g.hardware].price_per_hour
            billed += price * g.machines
            machines += [(t / price, e.duration_s, e.batch, g.rate_per_machine, t)] * g.machines
        assert sum(m[3] for m in machines) >= spec.rate * (1 - 1e-9), name
        worst = 0.0
        for r, d, b, f, t in machines:
            if model == "tc":
                w = sum(m[3] for m in machines if m[0] <= r * (1 + 1e-12))
                worst = max(worst, d + b / w)
            elif model == "rr":
                worst = max(worst, d + b / f)
            else:
                worst = max(worst, d + b / t)
        wcl[name] = worst
    for path in problem.paths():
        assert sum(wcl[m] for m in path) <= problem.slo_s * (1 + 1e-9), path
    assert math.isclose(billed, plan.billed_per_hour, rel_tol=1e-9)


def solve_or_none(problem, policy, objective):
    try:
        return solve(problem, policy, objective)
    except InfeasibleError:
        return None


@SETTINGS
@given(seed=st.integers(0, 10**6), objective=st.sampled_from(["occupancy", "billed"]))
def test_plans_are_valid_and_exact_is_cheapest(seed, objective):
    problem = generate_problem(seed)
    exact = solve(problem, "skinflint", objective)
    independent_check(problem, exact)
    cost = (lambda p: p.cost_per_hour) if objective == "occupancy" else (lambda p: p.billed_per_hour)
    # TC and RR heuristics (an RR-feasible plan is TC-feasible: w >= f); Scrooge's d + b/t is
    # optimistic for partial machines, so it is not comparable.
    for policy in ["harpagon", "piccolo", "nexus", "inferline", "clipper", "harp-2c", "harp-nd"]:
        plan = solve_or_none(problem, policy, objective)
        if plan is None:
            continue
        independent_check(problem, plan, plan.model_extra["latency_model"])
        assert cost(exact) <= cost(plan) * (1 + 1e-9), policy
    assert exact.billed_per_hour >= exact.cost_per_hour * (1 - 1e-12)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10**6))
def test_billed_optimum_is_at_least_the_occupancy_optimum(seed):
    problem = generate_problem(seed)
    assert solve(problem, "skinflint", "billed").billed_per_hour >= solve(
        problem, "skinflint", "occupancy"
    ).cost_per_hour * (1 - 1e-9)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10**6), objective=st.sampled_from(["occupancy", "billed"]))
def test_skinflint_matches_the_exhaustive_reference(seed, objective):
    problem = generate_problem(seed)
    a, b = solve(problem, "skinflint", objective), solve(problem, "optimal", objective)
    key = "cost_per_hour" if objective == "occupancy" else "billed_per_hour"
    assert math.isclose(getattr(a, key), getattr(b, key), rel_tol=1e-7)


configs_st = st.lists(
    st.tuples(st.sampled_from([1, 2, 4, 8]), st.floats(0.01, 0.3), st.sampled_from([0.5, 1.0, 3.0])),
    min_size=1,
    max_size=3,
)


@settings(max_examples=60, deadline=None)
@given(specs=configs_st, rate=st.floats(1, 80), budget=st.floats(0.05, 0.8))
def test_billed_optimal_matches_brute_force(specs, rate, budget):
    cs = [Config(f"h{i}", b, 1, d, p) for i, (b, d, p) in enumerate(specs)]
    got, proven = billed_optimal(cs, rate, budget)
    assert proven
    best = math.inf
    # every machine mix with up to 12 machines per config, machines at full throughput
    for counts in itertools.product(range(13), repeat=len(cs)):
        used = [(c, n) for c, n in zip(cs, counts, strict=True) if n]
        if not used or sum(c.throughput * n for c, n in used) < rate - 1e-9:
            continue
        ok = all(
            c.duration
            + c.batch / sum(c2.throughput * n2 for c2, n2 in used if c2.ratio <= c.ratio * (1 + 1e-12))
            <= budget + 1e-9
            for c, _ in used
        )
        if ok:
            best = min(best, sum(c.price * n for c, n in used))
    if got is None:
        assert best == math.inf
    elif best < math.inf:  # brute force caps machine counts; the exact search does not
        assert got.billed <= best + 1e-9
        assert got.wcl <= budget + 1e-9


@settings(max_examples=60, deadline=None)
@given(specs=configs_st, rate=st.floats(1, 80), budget=st.floats(0.05, 0.8))
def test_occupancy_optimal_beats_every_single_config_with_dummy(specs, rate, budget):
    cs = [Config(f"h{i}", b, 1, d, p) for i, (b, d, p) in enumerate(specs)]
    got = occupancy_optimal(cs, rate, budget)
    feasible = [c for c in cs if c.duration < budget]
    if got is None:
        assert not feasible
        return
    for c in feasible:
        w = max(rate, c.batch / (budget - c.duration))
        assert got.occupancy <= w / c.ratio * (1 + 1e-9)
    assert got.wcl <= budget + 1e-9
