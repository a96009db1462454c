"""``skinflint bench planner --suite large``: a tiny run's figures, the helpers, the CLI wiring."""

import json

import pytest

from bench import planner_large
from planner.generate_large import generate_large_problem
from skinflint.cli import main


def test_a_tiny_large_suite_prints_its_figures(capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN two problems (5 and 6 modules), the reference limited to 2 CPU seconds a solve
    assert planner_large.main(2, 0, 2.0, 60.0, as_json=True, plot=None) == 0
    result = json.loads(capsys.readouterr().out)
    # THEN every policy is reported for both objectives, skinflint plans everything validly
    for objective in ("occupancy", "billed"):
        rows = result["results"][objective]
        assert set(rows) == {"skinflint", "harpagon", "piccolo"}
        sk = rows["skinflint"]
        assert sk["problems"] == 2 and sk["planned"] == 2 and sk["valid"] == 2 and sk["timeouts"] == 0
        assert sk["below_reference"] == 0  # never cheaper than the exact reference
        assert sk["at_optimum"] == sk["reference_finished"] or sk["worst_ratio"] is not None
        by = result["solve_cpu_ms_by_modules"][objective]
        assert set(by) == {"5", "6", "all"} and by["all"]["n"] == 2
    assert result["host"]["cpus"] >= 1 and len(result["host"]["load_avg_start"]) == 3


def test_percentiles_are_nearest_rank() -> None:
    values = [float(v) for v in range(1, 21)]  # 1..20: p95 = the 19th value
    assert planner_large._percentile(values, 0.95) == 19.0
    assert planner_large._percentiles(values)["median"] == 10.5
    assert planner_large._percentiles([]) == {"n": 0, "median": None, "p95": None, "max": None}


@pytest.mark.parametrize("shape", ["chain", "out-tree", "dag"])
def test_the_shape_is_read_from_the_name(shape: str) -> None:
    assert planner_large._shape(generate_large_problem(3, 7, shape)) == shape  # type: ignore[arg-type]


def test_the_suite_is_a_flag_of_bench_planner(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "planner", "--help"])
    out = capsys.readouterr().out
    assert (
        "--suite {small,large,epoch,realisability}" in out
        and "--reference-limit" in out
        and "--budget" in out
    )
