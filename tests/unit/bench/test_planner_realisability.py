"""``skinflint bench planner --suite realisability``: a tiny run's figures and the CLI wiring."""

import json
from pathlib import Path

import pytest

from bench import planner_realisability
from skinflint.cli import main


def test_each_problem_has_a_simulated_plain_and_realised_plan(capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN three small generated problems, simulated half a second each
    assert planner_realisability.main(3, 0, "small", 0.5, as_json=True, plot_path=None) == 0
    result = json.loads(capsys.readouterr().out)
    rows = result["rows"]
    assert len(rows) == 3 and result["all"]["problems"] == 3
    for row in rows:
        # THEN the plain plan is simulated under both arrival processes
        for label in ("uniform", "poisson"):
            assert 0 <= row["plain"][label]["within_slo"] <= 1
            assert 0 <= row["plain"][label]["shed"] <= 1
        assert row["plain"]["uniform"]["shed"] == 0  # no admission: nothing is shed
        if row["realised"] is None:
            assert row["no_plan"].startswith("infeasible")
            continue
        # AND a realised plan never bills less than the plain plan, whose bill bounds it
        assert row["realised"]["billed_per_hour"] >= row["plain"]["billed_per_hour"] - 1e-9
        assert row["price_of_realisability"] >= -1e-12
        # AND it serves its app under the arrivals it was planned for, with no window overflowing
        assert row["realised"]["uniform"]["within_slo"] == 1.0
        assert not row["realised"]["uniform"]["overflow"]
    summary = result["all"]
    assert summary["realisable"] == sum(r["realised"] is not None for r in rows)
    assert sum(s["problems"] for s in result["by_modules"].values()) == 3


def test_the_problems_are_small_or_large() -> None:
    assert [len(p.modules) for p in planner_realisability.problems(2, 0, "large")] == [5, 6]
    with pytest.raises(ValueError, match="shape must be one of"):
        planner_realisability.problems(2, 0, "huge")


def test_the_cli_writes_a_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plot = tmp_path / "r.png"
    code = main(
        ["bench", "planner", "--suite", "realisability", "--problems", "1", "--apps", "small"]
        + ["--duration", "0.3", "--plot", str(plot), "--no-results"]
    )
    assert code == 0 and plot.stat().st_size > 0
    assert "price of realisability" in capsys.readouterr().out


def test_bad_duration_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as err:
        main(["bench", "planner", "--suite", "realisability", "--duration", "0"])
    assert err.value.code == 2
    assert "a duration is finite seconds > 0" in capsys.readouterr().err
