"""The epoch's all-in objective (control/objective.py): the plan of least fleet + data plane among the
batch floors, the fleet-only plan when nothing beats it, floors that cannot meet the SLO skipped."""

from __future__ import annotations

from typing import Any

import pytest

from control.config import ControlConfig
from control.objective import AllInPricing, all_in_cost, batch_floors, plan_all_in
from control.planning import dispatch_solver
from control.preview import preview_app
from control.spec import profile_lookup
from planner.errors import InfeasibleError
from profiles.store import PACKAGE_ROOT, LocalStore

STORE = LocalStore(PACKAGE_ROOT)


@pytest.fixture(scope="module")
def traffic_problem() -> Any:
    kwargs: dict[str, Any] = {"catalog": STORE.load_catalog(), "stored_profile": profile_lookup(STORE)}
    doc = STORE.load_app("traffic").model_dump(mode="json", exclude_none=True)
    return preview_app(doc, 1000, **kwargs).problem


def test_the_epoch_plans_the_floor_of_least_fleet_plus_data_plane(traffic_problem: Any) -> None:
    pricing = AllInPricing("today", 8.0, 10)
    billed = dispatch_solver(ControlConfig())(traffic_problem)
    chosen = dispatch_solver(ControlConfig(objective="all-in", data_plane_policy="today"))(traffic_problem)
    # every floor, priced the same way: the chosen plan is the least of them, never above the fleet-only one
    solve = dispatch_solver(ControlConfig())
    totals = [sum(all_in_cost(traffic_problem, billed, pricing))]
    for _, limited in batch_floors(traffic_problem):
        try:
            totals.append(sum(all_in_cost(limited, solve(limited), pricing)))
        except InfeasibleError:
            continue
    got = sum(all_in_cost(traffic_problem, chosen, pricing))
    assert got == pytest.approx(min(totals)) and got <= totals[0] + 1e-9
    assert len(totals) > 1  # there were floors to weigh
    # requests cost something at 1,000 frames/s: the chosen batches are no smaller than the fleet-only ones
    assert min(g.batch for mp in chosen.modules.values() for g in mp.groups) >= min(
        g.batch for mp in billed.modules.values() for g in mp.groups
    )


def test_a_floor_that_cannot_plan_is_skipped_and_the_quick_mode_solves_once(traffic_problem: Any) -> None:
    calls: list[int] = []

    def solve(problem: Any) -> Any:
        calls.append(min(e.batch for m in problem.modules.values() for e in m.profile))
        if calls[-1] > 1:
            raise InfeasibleError("batches this large miss the SLO")
        return dispatch_solver(ControlConfig())(problem)

    plan = plan_all_in(solve, traffic_problem, AllInPricing("today", 8.0, 10))
    assert calls[0] == 1 and len(calls) == 1 + len(batch_floors(traffic_problem))
    assert plan.billed_per_hour > 0 and len(calls) > 1
    quick = dispatch_solver(ControlConfig(objective="all-in"))(traffic_problem, first_found=True)
    assert quick.modules  # the quick mode plans with floor 1 only (no floors in a budget-squeezed epoch)


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"objective": "cheapest"}, "objective must be"),
        ({"objective": "all-in", "data_plane_policy": "nope"}, "unknown data-plane policy"),
        ({"frames_per_post": 11}, "frames_per_post 1-10"),
    ],
)
def test_bad_objective_settings_are_refused(changes: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ControlConfig(**changes)


def test_the_environment_selects_the_objective() -> None:
    cfg = ControlConfig.from_env(
        {"SKINFLINT_PLAN_OBJECTIVE": "all-in", "SKINFLINT_FRAMES_PER_POST": "4", "SKINFLINT_FRAME_KB": "60"}
    )
    assert (cfg.objective, cfg.frames_per_post, cfg.frame_kb) == ("all-in", 4, 60.0)


def test_an_app_that_pushes_its_results_is_priced_with_its_results_queue(traffic_problem: Any) -> None:
    pull, push = AllInPricing("today", 8.0, 10), AllInPricing("today", 8.0, 10, results="push")
    assert (pull.policy.result_sink, push.policy.result_sink) == ("dynamodb", "sqs")
    assert push.policy.name == "today_push"
    plan = dispatch_solver(ControlConfig())(traffic_problem)
    fleet, pulled = all_in_cost(traffic_problem, plan, pull)
    same_fleet, pushed = all_in_cost(traffic_problem, plan, push)
    # the records leave the results table for the results queue: a cheaper data plane for this app
    assert same_fleet == fleet and pushed < pulled
    # the epoch's solver prices the apps it is told push so (problem.name is the app)
    config = ControlConfig(objective="all-in", data_plane_policy="today")
    as_push = dispatch_solver(config, frozenset({traffic_problem.name}))(traffic_problem)
    as_pull = dispatch_solver(config)(traffic_problem)
    assert (
        sum(all_in_cost(traffic_problem, as_push, push))
        <= sum(all_in_cost(traffic_problem, as_pull, push)) + 1e-9
    )
