"""`python -m planner solve` contract: plan JSON on stdout, one-line errors, exit 2 when infeasible."""

import json
import subprocess
import sys

import pytest

from planner.check import check_plan
from planner.cli import main
from planner.models import Plan, ProblemSpec

from .conftest import EXAMPLES

GOOD = {
    "name": "t",
    "slo_s": 0.45,
    "hardware": {"v100": {"price_per_hour": 3.06}, "t4": {"price_per_hour": 0.526}},
    "modules": {
        "detector": {
            "rate": 120.0,
            "profile": [{"hardware": "v100", "batch": 8, "concurrency": 1, "duration_s": 0.031}],
        },
        "car": {"rate": 60.0, "profile": [{"hardware": "t4", "batch": 4, "duration_s": 0.02}]},
    },
    "edges": [["detector", "car"]],
}


def run(tmp_path, payload, *args):
    path = tmp_path / "p.json"
    path.write_text(payload if isinstance(payload, str) else json.dumps(payload))
    return subprocess.run(
        [sys.executable, "-m", "planner", "solve", str(path), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_design_example_prints_a_valid_plan(tmp_path):
    out = run(tmp_path, GOOD)
    assert out.returncode == 0, out.stderr
    plan = Plan.model_validate(json.loads(out.stdout))
    assert plan.objective == "billed"
    assert check_plan(ProblemSpec.model_validate(GOOD), plan) == []
    for m in plan.modules.values():
        total = sum(g.machines * g.rate_per_machine for g in m.groups)
        assert total == pytest.approx(
            GOOD["modules"][next(k for k in GOOD["modules"] if plan.modules[k] is m)]["rate"] + m.dummy_rate
        )


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        ("{not json", "malformed JSON"),
        ([1, 2], "expected a JSON object"),
        ({**GOOD, "edges": [["detector", "car"], ["car", "detector"]]}, "cycle"),
        (
            {
                **GOOD,
                "modules": {
                    **GOOD["modules"],
                    "car": {"rate": 0, "profile": GOOD["modules"]["car"]["profile"]},
                },
            },
            "rate",
        ),
        ({**GOOD, "hardware": {"v100": {"price_per_hour": 3.06}}}, "unknown hardware"),
        ({**GOOD, "modules": {**GOOD["modules"], "car": {"rate": 5}}}, "profile"),
    ],
)
def test_bad_input_exits_1_with_one_line(tmp_path, payload, fragment):
    out = run(tmp_path, payload)
    assert out.returncode == 1
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in out.stderr


def test_missing_file_is_one_line(capsys):
    assert main(["solve", "/nonexistent/p.json"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no such file" in err[0]


def test_slo_below_fastest_path_exits_2_naming_the_path(tmp_path):
    # detector 0.031 + car 0.02 = 0.051 s at the very least (with unbounded load): SLO 0.05 is infeasible
    out = run(tmp_path, {**GOOD, "slo_s": 0.05})
    assert out.returncode == 2
    line = out.stderr.strip()
    assert "detector -> car" in line and "0.051" in line and len(line.splitlines()) == 1


@pytest.mark.parametrize(
    "policy", ["skinflint", "optimal", "harpagon", "nexus", "scrooge", "inferline", "clipper", "harp-q0.1"]
)
@pytest.mark.parametrize("objective", ["occupancy", "billed"])
def test_every_policy_on_the_papers_examples(policy, objective):
    paths = sorted(EXAMPLES.glob("*.json"))
    assert len(paths) == 4
    for path in paths:
        problem = ProblemSpec.model_validate(json.loads(path.read_text()))
        from planner.solve import solve

        plan = solve(problem, policy, objective)
        model = plan.model_extra["latency_model"]
        assert check_plan(problem, plan, model) == [], (path.name, policy)
