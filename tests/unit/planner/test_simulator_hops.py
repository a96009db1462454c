"""The simulator with measured hops: each request's hop drawn from samples, a window closed one planned
hop after its end, a late request a batch of its own (the worker) or folded into a later window."""

from __future__ import annotations

import pytest

from control.problems import adjust_profiles
from planner.generate import generate_problem
from planner.robust import solve_dispatchable
from planner.simulator import simulate

HOP_S = 0.05


@pytest.fixture(scope="module")
def planned():
    # a generated two-module app (pose-9), its SLO lengthened by one hop per module, planned with a 50 ms
    # hop as latency only (the control loop's model)
    problem = generate_problem(9)
    problem = problem.model_copy(update={"slo_s": problem.slo_s + 2 * HOP_S})
    plan = solve_dispatchable(adjust_profiles(problem, HOP_S, hop_as_latency=True))
    return problem, plan


def _run(problem, plan, **kw):
    return simulate(problem, plan, 5.0, "poisson", seed=3, admission="planned", **kw)


def test_hops_within_the_planned_one_give_the_constant_hops_figures(planned):
    problem, plan = planned
    constant = _run(problem, plan)
    # every draw at or below the planned hop: every request makes its window's close (its end + 50 ms),
    # so every batch is ready when the constant model says
    for samples in ([HOP_S], [0.0, 0.01, 0.049]):
        drawn = _run(problem, plan, hop_samples=samples)
        assert drawn.end_to_end.slo_attainment == constant.end_to_end.slo_attainment == 1.0
        assert drawn.end_to_end.latency.p99_s == pytest.approx(constant.end_to_end.latency.p99_s, rel=0.05)


def test_late_deliveries_cost_batches_the_schedule_has_no_room_for(planned):
    problem, plan = planned
    # every delivery 30 ms later than planned: each request is a batch of its own, ready on delivery
    late = _run(problem, plan, hop_samples=[HOP_S + 0.03])
    assert late.end_to_end.slo_attainment < 1.0
    assert sum(m.batches for m in late.modules.values()) > sum(
        m.batches for m in _run(problem, plan).modules.values()
    )


def test_a_late_request_folded_into_a_later_window_runs_no_batch_of_its_own(planned):
    problem, plan = planned
    own = _run(problem, plan, hop_samples=[HOP_S + 0.03])
    folded = _run(problem, plan, hop_samples=[HOP_S + 0.03], late="next")
    assert sum(m.batches for m in folded.modules.values()) < sum(m.batches for m in own.modules.values())


@pytest.mark.parametrize("samples", [[], [-0.01], [float("nan")]])
def test_bad_hop_samples_are_refused(planned, samples):
    problem, plan = planned
    with pytest.raises(ValueError, match="hop_samples"):
        _run(problem, plan, hop_samples=samples)
