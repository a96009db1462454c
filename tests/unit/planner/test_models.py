import pytest
from pydantic import ValidationError

from planner.models import AppSpec, ProblemSpec

BASE = {
    "slo_s": 0.5,
    "hardware": {"t4": {"price_per_hour": 0.526}},
    "modules": {
        "a": {"rate": 10, "profile": [{"hardware": "t4", "batch": 2, "duration_s": 0.02}]},
        "b": {"rate": 5, "profile": [{"hardware": "t4", "batch": 1, "duration_s": 0.01}]},
    },
    "edges": [["a", "b"]],
}


def test_valid_problem_defaults_concurrency_and_keeps_extra_keys():
    raw = {**BASE, "owner": "team-a"}
    p = ProblemSpec.model_validate(raw)
    assert p.modules["a"].profile[0].concurrency == 1
    assert p.model_extra == {"owner": "team-a"}
    assert p.paths() == [("a", "b")]


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"edges": [["a", "b"], ["b", "a"]]}, "cycle"),
        ({"edges": [["a", "zz"]]}, "unknown module"),
        ({"edges": [["a", "a"]]}, "self-loop"),
        ({"edges": [["a"]]}, "pair"),
        ({"slo_s": 0}, "greater than 0"),
        ({"hardware": {"v100": {"price_per_hour": 3.06}}}, "unknown hardware"),
        (
            {"modules": {"a": {"rate": -1, "profile": [{"hardware": "t4", "batch": 1, "duration_s": 0.01}]}}},
            "greater than 0",
        ),
        ({"modules": {"a": {"rate": 1, "profile": []}}}, "at least 1"),
    ],
)
def test_invalid_problems_are_rejected_with_a_reason(patch, message):
    raw = {**BASE, **patch}
    if "modules" in patch:
        raw["edges"] = []
    with pytest.raises(ValidationError, match=message):
        ProblemSpec.model_validate(raw)


def test_paths_of_a_dag_with_a_join():
    raw = {
        "slo_s": 1,
        "hardware": {"t4": {"price_per_hour": 1}},
        "modules": {
            m: {"rate": 1, "profile": [{"hardware": "t4", "batch": 1, "duration_s": 0.01}]} for m in "abcd"
        },
        "edges": [["a", "b"], ["a", "c"], ["b", "d"], ["c", "d"]],
    }
    assert sorted(ProblemSpec.model_validate(raw).paths()) == [("a", "b", "d"), ("a", "c", "d")]


def test_app_spec_rates_follow_fan_out():
    app = AppSpec.model_validate(
        {
            "name": "traffic",
            "slo_s": 0.5,
            "modules": {"det": {"model": "ssd"}, "car": {"model": "resnet"}, "face": {"model": "resnet"}},
            "edges": [["det", "car", 2.5], ["det", "face"]],
        }
    )
    # 20 fps -> car 20 * 2.5 = 50, face 20 * 1.0 = 20
    assert app.module_rates(20) == {"det": 20, "car": 50, "face": 20}
