"""Application-sized problems (issue #29): the generator, the Lagrangian searches against brute force and
the exhaustive reference, the anytime mode and the warm start."""

import itertools
import json
import math
import random
from pathlib import Path

import numpy as np
import pytest

from planner.check import check_plan
from planner.convex import split_convex
from planner.generate_large import CATALOG, generate_large_problem, generate_large_problems
from planner.lagrange import dual_split, solve_choice, solve_occupancy
from planner.latency import Config
from planner.solve import solve

HARDWARE_JSON = Path(__file__).resolve().parents[3] / "profiles" / "hardware.json"


# --------------------------------------------------------------------------- generator


def test_the_generator_is_seeded_and_draws_the_issues_shape():
    assert generate_large_problem(7) == generate_large_problem(7)
    problems = generate_large_problems(36, seed=3)
    assert [len(p.modules) for p in problems[:6]] == [5, 6, 7, 8, 9, 10]
    joins = 0
    for p in problems:
        assert 5 <= len(p.modules) <= 10
        assert 3 <= len(p.hardware) <= 6 and set(p.hardware) <= set(CATALOG)
        assert any(h.startswith("c6i") for h in p.hardware) and any(
            not h.startswith("c6i") for h in p.hardware
        )
        assert 0.1 <= p.slo_s <= 2.0
        parents = p.parents()
        assert sum(not ps for ps in parents.values()) == 1  # one root: the camera stream
        joins += any(len(ps) > 1 for ps in parents.values())
        for m in p.modules.values():
            assert 5 <= m.rate <= 2000
            assert all(1 <= e.batch <= 64 and 1 <= e.concurrency <= 3 for e in m.profile)
        # feasible with room: the SLO is at least 1.3x the fastest path
        fastest = max(
            sum(min(e.duration_s for e in p.modules[m].profile) for m in path) for path in p.paths()
        )
        assert fastest * 1.3 <= p.slo_s * (1 + 1e-3)
        if "-dag-" in p.name:
            assert any(len(ps) > 1 for ps in parents.values())
        if "-chain-" in p.name:
            assert len(p.paths()) == 1
    assert joins >= 12  # dags are half of the shapes
    assert any(e.concurrency > 1 for p in problems for m in p.modules.values() for e in m.profile)


def test_the_generators_prices_are_the_catalogs():
    catalog = json.loads(HARDWARE_JSON.read_text())["hardware"]
    for name, (price, *_) in CATALOG.items():
        assert catalog[name]["price_per_hour"] == price


# --------------------------------------------------------------------------- search pieces


def _random_dag(rng: random.Random, n: int) -> list[list[int]]:
    """Root-to-leaf paths of a random DAG on modules 0..n-1 (parents before children)."""
    children: dict[int, list[int]] = {i: [] for i in range(n)}
    for j in range(1, n):
        for i in rng.sample(range(j), k=min(j, rng.choice([1, 1, 2]))):
            children[i].append(j)
    paths: list[list[int]] = []

    def walk(node: int, prefix: list[int]) -> None:
        path = [*prefix, node]
        if not children[node]:
            paths.append(path)
        for c in children[node]:
            walk(c, path)

    walk(0, [])
    return paths


@pytest.mark.parametrize("seed", range(40))
def test_solve_choice_matches_brute_force(seed):
    rng = random.Random(seed)
    n = rng.randint(3, 5)
    paths = _random_dag(rng, n)
    options = []
    for _ in range(n):
        k = rng.randint(1, 4)
        lats = sorted(rng.uniform(0.01, 0.2) for _ in range(k))
        costs = sorted((round(rng.uniform(0.1, 3.0), 3) for _ in range(k)), reverse=True)
        options.append(list(zip(lats, costs, strict=True)))
    slo = rng.uniform(0.15, 0.6)
    best = math.inf
    for combo in itertools.product(*[range(len(o)) for o in options]):
        if all(sum(options[m][combo[m]][0] for m in p) <= slo + 1e-9 for p in paths):
            best = min(best, sum(options[m][combo[m]][1] for m in range(n)))
    result = solve_choice(options, paths, slo)
    assert result.finished
    assert result.cost == pytest.approx(best, abs=1e-9) if math.isfinite(best) else result.pick is None
    if result.pick is not None:
        assert all(sum(options[m][result.pick[m]][0] for m in p) <= slo + 1e-9 for p in paths)


@pytest.mark.parametrize("seed", range(30))
def test_the_dual_split_is_the_interior_point_split(seed):
    rng = np.random.default_rng(seed)
    pyrng = random.Random(seed)
    n = pyrng.randint(3, 7)
    paths = _random_dag(pyrng, n)
    beta = list(rng.uniform(1e-4, 1e-2, n))
    u = list(rng.uniform(2e-3, 5e-2, n))
    room = [float(rng.uniform(0.01, 0.08)) for _ in paths]
    a = np.zeros((len(paths), n))
    for p, path in enumerate(paths):
        a[p, path] = 1.0
    found = dual_split(np.array(beta), np.array(u), a, np.array(room))
    x0 = split_convex(beta, u, paths, room)
    assert x0 is not None
    c0 = sum(b / min(x, uu) for b, x, uu in zip(beta, x0, u, strict=True))
    if found is None:  # did not converge: the caller falls back to the interior-point split
        return
    x, dual = found
    assert x is not None
    cost = sum(b / min(xx, uu) for b, xx, uu in zip(beta, x, u, strict=True))
    assert all(sum(x[j] for j in path) <= r * (1 + 1e-12) for path, r in zip(paths, room, strict=True))
    assert dual <= cost * (1 + 1e-12)  # weak duality
    assert cost == pytest.approx(c0, rel=1e-8)


@pytest.mark.parametrize("seed", range(12))
def test_solve_occupancy_matches_every_combination(seed):
    # GIVEN 4-5 modules of 3 configurations each on a random DAG
    rng = random.Random(seed)
    n = rng.randint(4, 5)
    paths = _random_dag(rng, n)
    rates = [rng.uniform(10, 500) for _ in range(n)]
    cands = [
        [
            Config(
                rng.choice(["a", "b"]),
                rng.choice([1, 4, 16]),
                1,
                rng.uniform(0.005, 0.05),
                rng.uniform(0.2, 3),
            )
            for _ in range(3)
        ]
        for _ in range(n)
    ]
    slo = 0.3
    lmax = [
        min(slo - sum(min(c.floor for c in cands[j]) for j in p if j != i) for p in paths if i in p)
        for i in range(n)
    ]
    # WHEN the Lagrangian search runs, THEN it finds the cheapest of every combination's exact split
    best = math.inf
    for combo in itertools.product(*cands):
        beta = [c.batch / c.ratio for c in combo]
        u = [c.batch / rates[i] for i, c in enumerate(combo)]
        room = [slo - sum(combo[j].floor for j in p) for p in paths]
        x = split_convex(beta, u, paths, room)
        if x is not None:
            best = min(best, sum(b / min(xx, uu) for b, xx, uu in zip(beta, x, u, strict=True)))
    result = solve_occupancy(cands, rates, paths, slo, lmax)
    assert result.finished and result.lower_bound == result.cost
    assert result.cost == pytest.approx(best, rel=1e-8)


# --------------------------------------------------------------------------- solve() on 5+ modules


@pytest.mark.parametrize(
    ("seed", "shape", "objective"),
    [
        (0, "chain", "billed"),
        (1, "out-tree", "billed"),
        (1, "out-tree", "occupancy"),
        (1, "dag", "occupancy"),
        (2, "chain", "occupancy"),
        (2, "out-tree", "billed"),
    ],
)
def test_skinflint_meets_the_exhaustive_reference(seed, shape, objective):
    problem = generate_large_problem(seed, 5, shape)
    key = "billed_per_hour" if objective == "billed" else "cost_per_hour"
    ref = solve(problem, "optimal", objective)
    plan = solve(problem, "skinflint", objective)
    assert check_plan(problem, plan) == []
    assert getattr(plan, key) == pytest.approx(getattr(ref, key), rel=1e-7)
    extra = plan.model_extra or {}
    assert extra["proven_optimal"] and extra["proven_gap"] == 0.0
    assert extra["lower_bound_per_hour"] == pytest.approx(getattr(plan, key))


@pytest.mark.parametrize("objective", ["billed", "occupancy"])
def test_a_stopped_search_returns_a_valid_plan_and_a_certified_gap(objective):
    problem = generate_large_problem(47, 10, "dag")
    key = "billed_per_hour" if objective == "billed" else "cost_per_hour"
    full = solve(problem, "skinflint", objective)
    calls = []

    def stop() -> bool:  # the caller's budget: spent after the first look
        calls.append(1)
        return len(calls) > 1

    early = solve(problem, "skinflint", objective, should_stop=stop)
    extra = early.model_extra or {}
    assert calls and check_plan(problem, early) == []
    assert getattr(early, key) >= getattr(full, key) - 1e-9
    if not extra["proven_optimal"]:
        assert extra["proven_gap"] is not None and extra["proven_gap"] >= 0
    assert extra["lower_bound_per_hour"] <= getattr(full, key) + 1e-9  # a bound on the optimum


@pytest.mark.parametrize("objective", ["billed", "occupancy"])
def test_a_warm_start_changes_nothing_but_the_time(objective):
    problem = generate_large_problem(5, 8, "dag")
    cold = solve(problem, "skinflint", objective)
    warm = solve(problem, "skinflint", objective, warm_start=cold)
    assert warm.billed_per_hour == pytest.approx(cold.billed_per_hour)
    assert warm.cost_per_hour == pytest.approx(cold.cost_per_hour)
    # a plan of another problem (other modules) is ignored
    other = solve(generate_large_problem(6, 5, "chain"), "skinflint", objective)
    assert solve(problem, "skinflint", objective, warm_start=other).billed_per_hour == pytest.approx(
        cold.billed_per_hour
    )


def test_small_problems_carry_no_bound_fields(tmp_path):
    problem = generate_large_problem(1, 5, "chain")
    small = problem.model_copy(
        update={"modules": dict(list(problem.modules.items())[:4]), "edges": problem.edges[:3]}
    )
    plan = solve(small, "skinflint", "billed")
    assert "proven_gap" not in (plan.model_extra or {}) and "lower_bound_per_hour" not in (
        plan.model_extra or {}
    )


# --------------------------------------------------------------------------- bad input at this size


def _write(tmp_path: Path, problem: dict) -> str:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(problem))
    return str(path)


@pytest.mark.parametrize(
    ("change", "names"),
    [
        (lambda p: p["edges"].append(["m5", "m1"]), "cycle through"),  # m1 -> ... -> m5 -> m1
        (lambda p: p["edges"].append(["m2", "m9"]), "unknown module 'm9'"),
        (lambda p: p["modules"]["m3"].update(profile=[]), "modules.m3.profile"),
        (lambda p: p["modules"]["m4"].pop("profile"), "modules.m4.profile"),
    ],
)
def test_bad_large_problems_are_one_line_naming_the_culprit(tmp_path, capsys, change, names):
    from planner.cli import main

    problem = generate_large_problem(11, 6, "chain").model_dump(mode="json")
    change(problem)
    assert main(["solve", _write(tmp_path, problem)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and names in err[0]


def test_an_infeasible_large_problem_exits_2_with_its_tightest_path(tmp_path, capsys):
    from planner.cli import main

    problem = generate_large_problem(12, 7, "dag")
    fastest = max(
        (sum(min(e.duration_s for e in problem.modules[m].profile) for m in path), path)
        for path in problem.paths()
    )
    tight = problem.model_copy(update={"slo_s": fastest[0] * 0.99}).model_dump(mode="json")
    assert main(["solve", _write(tmp_path, tight)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and " -> ".join(fastest[1]) in err
