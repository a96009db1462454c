"""The planner's problem of a registered app: the dispatch-aware solve's fan-out hint."""

from __future__ import annotations

import pytest

from control.problems import app_problem, max_children
from control.spec import RegistrationSpec
from planner.models import HardwareSpec
from planner.robust import FAN_OUT_KEY, realise, solve_dispatchable

CATALOG = {"t4": HardwareSpec(price_per_hour=0.526, instance_type="g4dn.xlarge")}


def spec(edges: list[list[object]]) -> RegistrationSpec:
    return RegistrationSpec.model_validate(
        {
            "name": "cams",
            "slo_s": 0.5,
            "rate": 20.0,
            "modules": {"det": {"model": "d"}, "cls": {"model": "c"}, "ocr": {"model": "o"}},
            "edges": edges,
            "profiles": {m: [{"hardware": "t4", "batch": 4, "duration_s": 0.02}] for m in ("d", "c", "o")},
        }
    )


@pytest.mark.parametrize(
    ("fan_out", "most"),
    [
        (2.0, 2.0),  # an integral factor: exactly that many children per request
        (1.5, 2.0),  # 1.5 on average: some requests send 2
        (0.3, 1.0),  # most requests send none, one sends at most 1
        (1.0 + 1e-12, 1.0),  # float noise above an integer does not add a child
    ],
)
def test_max_children_is_the_ceiling_of_the_fan_out(fan_out: float, most: float) -> None:
    assert max_children([("a", "b", fan_out)]) == [["a", "b", most]]


def test_app_problem_carries_the_fan_out_hint_the_solver_reads() -> None:
    p = app_problem(spec([["det", "cls", 1.5], ["cls", "ocr", 3.0]]), 10.0, CATALOG, None, 0.05)
    assert (p.model_extra or {})[FAN_OUT_KEY] == [["det", "cls", 2.0], ["cls", "ocr", 3.0]]
    # rates follow the average fan-out; bursts the most children: 10 fps -> cls 15, ocr 45
    assert p.modules["cls"].rate == pytest.approx(15.0) and p.modules["ocr"].rate == pytest.approx(45.0)
    plan = solve_dispatchable(p)
    real = realise(p, plan)
    # a det batch holds at most ceil(10 fps * window) frames, each sending up to 2 cls requests
    assert real["cls"].burst % 2 == 0 and real["cls"].burst >= 2
    assert plan.model_extra["dispatch_realised"] is True  # type: ignore[index]


def test_a_single_module_app_has_no_hint() -> None:
    one = spec([]).model_copy(update={"modules": {"det": spec([]).modules["det"]}})
    p = app_problem(one, 10.0, CATALOG, None, 0.05)
    assert FAN_OUT_KEY not in (p.model_extra or {})
