"""``skinflint bench planner --suite epoch``: a tiny run's figures and the CLI wiring."""

import json

import pytest

from bench import planner_epoch
from skinflint.cli import main


def test_a_tiny_cold_epoch_prints_every_apps_gap(capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN 6 small apps with no plan and a budget of 0 (one full solve, then quick plans), 2 epochs
    assert planner_epoch.main(6, [0], "small", 0.0, 2, as_json=True) == 0
    result = json.loads(capsys.readouterr().out)
    (run,) = result["runs"]
    # THEN the first epoch gives quick plans, and every plan, quick or not, carries a proven gap
    first, second = run["epochs"]
    assert first["quick"] == 5 and first["carried"] == 5 and first["with_gap"] == 6
    # no budget left for solving them in full: still carried, with their gaps
    assert not run["converged"] and second["carried"] == 5 and second["with_gap"] == 6
    assert 0 <= first["within_1pct"] <= 6 and first["max_gap"] < 1
    # every app solved in full at once: every plan has a gap, none is dearer than the quick ones
    full = run["unbudgeted"]
    assert full["with_gap"] == 6 and full["failed"] == 0
    assert full["billed_per_hour"] <= first["billed_per_hour"] + 1e-9
    sources = run["sources"]
    assert sources["over_1pct"] == 6 - second["within_1pct"]
    assert sources["bound_is_plain_optimum"] <= sources["over_1pct"]
    assert result["host"]["cpus"] >= 1


def test_a_budget_that_solves_every_app_converges_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    assert planner_epoch.main(4, [1], "small", 60.0, 5, as_json=True) == 0
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    (epoch,) = run["epochs"]
    assert run["converged"] and epoch["quick"] == 0 and epoch["with_gap"] == 4


def test_the_apps_are_small_or_large() -> None:
    assert len(planner_epoch.fleet_problems(3, 0, "large")) == 3
    with pytest.raises(ValueError, match="shape must be one of"):
        planner_epoch.fleet_problems(3, 0, "huge")


def test_bad_budget_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as err:
        main(["bench", "planner", "--suite", "epoch", "--budget", "-1"])
    assert err.value.code == 2
    assert "a budget is finite seconds >= 0 or 'none'" in capsys.readouterr().err
