"""`skinflint bench fleet`'s epoch timing: the registered epoch (every app's registration plan as its
seed) plans the fleet the cold epoch plans."""

from __future__ import annotations

from planner.generate import generate_problems
from skinflint.bench_fleet import epoch_times


def test_registered_epoch_is_timed_and_plans_the_cold_fleet() -> None:
    problems = {f"app{i}": p for i, p in enumerate(generate_problems(4, 11))}
    out = epoch_times(problems, 1, "dispatchable")
    assert out["seeded_apps"] == out["planned"] > 0
    assert out["same_fleet_seeded"] is True
    assert out["registered_cpu"]["median_ms"] > 0 and out["registration_solve_cpu"]["max_ms"] > 0
    plain = epoch_times(problems, 1, "plain")  # registration solves with the control loop's solver only
    assert plain["registered_cpu"] is None and plain["seeded_apps"] == 0
