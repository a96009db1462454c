"""The worked examples of the Harpagon and Piccolo papers, with the hand arithmetic."""

import pytest

from planner.latency import Config, Group, group_latencies
from planner.module import algorithm1, billed_optimal, harpagon_dummy, occupancy_optimal, piccolo_dummy
from planner.solve import solve

from .conftest import example, gpu_configs

# Harpagon Table I, module M3: (b, d) -> t = 20, 32, 40 req/s
M3 = gpu_configs((2, 0.100), (8, 0.250), (32, 0.800))
# Piccolo Table I, module M1: t = 50, 80, 100 req/s
P1 = gpu_configs((5, 0.1), (20, 0.25), (100, 1.0))


def test_harpagon_table2_round_robin_two_configs_costs_6_3():
    # RR: b32 worst case 0.8 + 32/40 = 1.6 > 1 -> c_opt = b8 (0.25 + 8/32 = 0.5); 6 x 32 = 192,
    # residual 6 req/s: b8 partial 0.25 + 8/6 > 1, b2 partial 0.1 + 2/6 = 0.43 -> 6 + 6/20 = 6.3
    s = algorithm1(M3, 198, 1.0, "rr", max_configs=2)
    assert s is not None and s.occupancy == pytest.approx(6.3)


def test_harpagon_table2_tc_two_configs_costs_5_9():
    # TC: b32 at w = 198: 0.8 + 32/198 = 0.96 <= 1 -> 4 x 40 = 160; residual 38 in one config:
    # b8: full machine ok (w = 38) but its partial 6 has 0.25 + 8/6 > 1; b2: 1 x 20 + 18/20 -> 5.9
    s = algorithm1(M3, 198, 1.0, "tc", max_configs=2)
    assert s is not None and s.occupancy == pytest.approx(5.9)


def test_harpagon_table2_algorithm1_costs_5_3():
    # 4 x b32 (160), then b8 at rw = 38: 0.25 + 8/38 = 0.46 -> 1 x 32, then b2 at rw = 6: 0.3 machine
    s = algorithm1(M3, 198, 1.0)
    assert s is not None
    assert [(g.config.batch, g.machines, g.rate) for g in s.groups] == [(32, 4, 40), (8, 1, 32), (2, 1, 6)]
    assert s.occupancy == pytest.approx(5.3)


def test_harpagon_table2_dummy_costs_5_0():
    # u(b32) = 32 + 6 = 38; dum = t - u = 40 - 38 = 2 -> 200 req/s = 5 x b32: 0.8 + 32/200 = 0.96
    base = algorithm1(M3, 198, 1.0)
    assert base is not None
    s = harpagon_dummy(M3, base, 1.0, "occupancy")
    assert s.occupancy == pytest.approx(5.0) and s.dummy == pytest.approx(2.0)


def test_harpagon_198_exact_occupancy_is_4_95():
    # Theorem 1 with all load on b32: w = 198, 0.8 + 32/198 = 0.96 <= 1; cost 198/40 = 4.95
    s = occupancy_optimal(M3, 198, 1.0)
    assert s is not None and s.occupancy == pytest.approx(4.95) and s.wcl == pytest.approx(0.8 + 32 / 198)


def test_harpagon_198_billed_optimum_is_5_machines():
    s, proven = billed_optimal(M3, 198, 1.0)
    assert proven and s is not None and s.billed == 5 and s.wcl == pytest.approx(0.96)


def test_piccolo_285_round_robin_3_7_multi_config_3_1_dummy_3_0_exact_2_85():
    # RR two-config: 2 x b100 (2d = 2.0) + b5 for 85: 1 + 35/50 -> 3.7
    rr = algorithm1(P1, 285, 2.0, "rr", max_configs=2)
    # Alg 1: 2 x b100 (1 + 100/285 = 1.35), b20 at 85 (0.25 + 20/85), b5 for 5 -> 2 + 1 + 0.1 = 3.1
    tc = algorithm1(P1, 285, 2.0)
    assert rr is not None and tc is not None
    assert rr.occupancy == pytest.approx(3.7)
    assert tc.occupancy == pytest.approx(3.1)
    # Piccolo dummy: b/(L - d) - u = 100/(2 - 1) - 85 = 15 -> 300 req/s on 3 x b100
    assert piccolo_dummy(P1, tc, 2.0, "occupancy").occupancy == pytest.approx(3.0)
    # exact (docs/design.md §2): w = 285 on b100: 1 + 100/285 = 1.35 <= 2 -> 285/100 = 2.85
    assert occupancy_optimal(P1, 285, 2.0).occupancy == pytest.approx(2.85)  # type: ignore[union-attr]


def test_harpagon_m1_batch_aware_needs_4_machines_round_robin_5():
    # Harpagon §II, M1 at 100 req/s, SLO 0.4: TC b8 0.32 + 8/100 = 0.4 -> 100/25 = 4;
    # RR b8 2d = 0.64 > 0.4, b4 2d = 0.4 -> 100/20 = 5
    tc = algorithm1(gpu_configs((2, 0.16), (4, 0.2), (8, 0.32)), 100, 0.4)
    rr = algorithm1(gpu_configs((2, 0.16), (4, 0.2), (8, 0.32)), 100, 0.4, "rr", max_configs=1)
    assert tc is not None and tc.occupancy == pytest.approx(4.0)
    assert rr is not None and rr.occupancy == pytest.approx(5.0)


def test_tc_vs_rr_worst_case_three_machines_8_req_s():
    # Harpagon §III-B, M4: A, B batch 6 d 2.0 at 3 req/s each, C batch 2 d 1.0 at 2 req/s.
    # TC: w_A = w_B = 8 -> 2.0 + 6/8 = 2.75; w_C = 2 -> 1.0 + 2/2 = 2.0; module worst case 2.75.
    # RR: A and B collect at their own 3 req/s -> 2.0 + 6/3 = 4.0 per Theorem-1 style bound; the
    # paper's trace (requests alternate between A and B) gives 3.375 s for the first batch.
    ab = Config("gpu", 6, 1, 2.0, 1.0)
    c = Config("gpu", 2, 1, 1.0, 1.0)
    groups = [Group(ab, 2, 3.0), Group(c, 1, 2.0)]
    assert max(group_latencies(groups, "tc")) == pytest.approx(2.75)
    # the paper's RR trace: req 1..12 alternate A/B at 8 req/s -> A's 6th request is req 11 at
    # 10/8 = 1.25 s after req 1, so batch collection 1.375 s for its first request (11/8)
    assert 2.0 + 11 / 8 == pytest.approx(3.375)
    assert max(group_latencies(groups, "rr")) > 3.375


def test_latency_cost_efficiency_values():
    from planner.split import iterative_split  # noqa: F401  (LC is computed inside Algorithm 2)

    # Harpagon: M1 at 100 req/s from b2 (0.16 + 2/100) to b4 (0.2 + 4/100) and b8 (0.32 + 8/100)
    lc4 = (100 / 12.5 - 100 / 20) / ((0.2 + 4 / 100) - (0.16 + 2 / 100))
    lc8 = (100 / 12.5 - 100 / 25) / ((0.32 + 8 / 100) - (0.16 + 2 / 100))
    assert lc4 == pytest.approx(50.0) and lc8 == pytest.approx(18.18, abs=0.01)
    # Piccolo: M1 at 100 req/s from b5 to b20 and b100
    lc20 = (100 / 50 - 100 / 80) / ((0.25 + 20 / 100) - (0.1 + 5 / 100))
    lc100 = (100 / 50 - 100 / 100) / ((1.0 + 100 / 100) - (0.1 + 5 / 100))
    assert lc20 == pytest.approx(2.50) and lc100 == pytest.approx(0.54, abs=0.005)


def test_algorithm2_prefers_the_higher_latency_cost_efficiency():
    # One module, Piccolo M1 at 100 req/s, SLO 0.6 s: from b5, LC(b20) = 2.50 > LC(b100) = 0.54
    # (and b100 does not fit: 1 + 100/100 = 2 > 0.6), so Algorithm 2 moves to b20.
    from planner.split import iterative_split

    cs = P1

    def single(i: int, c: Config) -> tuple[float, float]:
        return c.tc_latency(100), 100 / c.throughput

    start = [next(c for c in cs if c.batch == 5)]
    (assign, *_) = iterative_split([cs], single, start, [[0]], 0.6, "lc", [frozenset()], [frozenset()])
    assert assign[0].batch == 20


@pytest.mark.parametrize(
    ("name", "objective", "expected"),
    [
        ("harpagon_m3", "occupancy", 4.95),
        ("harpagon_m3", "billed", 5.0),
        ("piccolo_m1", "occupancy", 2.85),
        ("piccolo_m1", "billed", 3.0),
        ("harpagon_m1", "occupancy", 4.0),
        ("harpagon_m1", "billed", 4.0),
    ],
)
def test_examples_solve_to_the_exact_optimum(name, objective, expected):
    plan = solve(example(name), "skinflint", objective)
    cost = plan.cost_per_hour if objective == "occupancy" else plan.billed_per_hour
    assert cost == pytest.approx(expected)
    assert plan.model_extra["proven_optimal"] is True


def test_piccolo_chain_exact_beats_the_papers_algorithms():
    problem = example("piccolo_m2m3_chain")
    exact = solve(problem, "skinflint", "occupancy")
    assert exact.cost_per_hour <= solve(problem, "harpagon", "occupancy").cost_per_hour + 1e-9
    assert exact.cost_per_hour <= solve(problem, "nexus", "occupancy").cost_per_hour + 1e-9
    # the chain's latencies add up within the SLO
    assert exact.model_extra["paths"][0]["worst_case_latency_s"] <= problem.slo_s + 1e-9
