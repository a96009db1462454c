"""Measured on the instance wins (issue #27): the entries an instance measured on its class replace
the registered ones for that class; derived entries are planned with a stated margin; the plan says
what each module's figures rest on."""

from __future__ import annotations

import pytest

from control.problems import DERIVED_MARGIN, adjust_profiles, app_problem, plan_sources, prefer_measured
from control.spec import RegistrationSpec
from planner.models import HardwareSpec, ProfileEntry
from planner.robust import solve_dispatchable
from profiles.onsite import ONSITE_NOTE

CATALOG = {
    "t4": HardwareSpec(price_per_hour=0.526, instance_type="g4dn.xlarge"),
    "c6i.large": HardwareSpec(price_per_hour=0.085, instance_type="c6i.large"),
}


def _e(hw: str, batch: int, duration: float, source: str, **extra: object) -> dict[str, object]:
    return {
        "hardware": hw,
        "batch": batch,
        "concurrency": 1,
        "duration_s": duration,
        "source": source,
    } | extra


def spec(profile: list[dict[str, object]]) -> RegistrationSpec:
    return RegistrationSpec.model_validate(
        {
            "name": "cams",
            "slo_s": 1.0,
            "rate": 10.0,
            "modules": {"det": {"model": "d"}},
            "profiles": {"d": profile},
        }
    )


def test_entries_measured_on_an_instance_replace_that_class_only():
    registered = spec([_e("t4", 4, 0.02, "derived"), _e("c6i.large", 1, 0.05, "measured")])
    stored = {
        "d": [
            _e("t4", 4, 0.03, "measured", note=ONSITE_NOTE, instance_type="g4dn.xlarge"),
            _e("t4", 8, 0.05, "measured", note=ONSITE_NOTE, instance_type="g4dn.xlarge"),
            _e("c6i.large", 1, 0.04, "measured"),  # measured elsewhere: not an instance's
            _e("v100", 4, 0.01, "measured", note=ONSITE_NOTE),  # a class the app was not registered for
        ]
    }
    profiles, replaced = prefer_measured(registered.profiles, stored)
    assert replaced == {"d": ["t4"]}
    got = [(e.hardware, e.batch, e.duration_s) for e in profiles["d"]]
    assert got == [("c6i.large", 1, 0.05), ("t4", 4, 0.03), ("t4", 8, 0.05)]
    assert prefer_measured(registered.profiles, {}) == (registered.profiles, {})


def test_derived_entries_are_planned_with_the_margin_and_say_so():
    p = app_problem(spec([_e("t4", 4, 0.02, "derived")]), 10.0, CATALOG, None, 0.05)
    (entry,) = p.modules["det"].profile
    # 0.02 s derived x (1 + 0.5) = 0.03 s planned; the hop is latency only
    assert entry.duration_s == pytest.approx(0.02 * (1 + DERIVED_MARGIN)) == pytest.approx(0.03)
    assert (entry.model_extra or {})["derived_margin"] == DERIVED_MARGIN


def test_measured_entries_get_no_margin():
    p = app_problem(spec([_e("t4", 4, 0.02, "measured", p95_s=0.025)]), 10.0, CATALOG, None, 0.05)
    (entry,) = p.modules["det"].profile
    assert entry.duration_s == pytest.approx(0.025)  # its p95, nothing added
    assert "derived_margin" not in (entry.model_extra or {})


def test_adjust_profiles_without_a_margin_is_unchanged():
    p = app_problem(spec([_e("t4", 4, 0.02, "derived")]), 10.0, CATALOG, None, 0.05, derived_margin=0.0)
    assert p.modules["det"].profile[0].duration_s == pytest.approx(0.02)
    again = adjust_profiles(p, 0.0)
    assert again.modules["det"].profile[0].duration_s == pytest.approx(0.02)


def test_plan_sources_name_what_each_planned_class_rests_on():
    registered = spec([_e("t4", 4, 0.02, "derived"), _e("c6i.large", 4, 0.02, "measured")])
    onsite = {"d": [_e("c6i.large", 4, 0.02, "measured", note=ONSITE_NOTE)]}
    profiles, _ = prefer_measured(registered.profiles, onsite)
    measured = registered.model_copy(update={"profiles": profiles})
    plan = solve_dispatchable(app_problem(measured, 10.0, CATALOG, None, 0.05))
    used = {g.hardware for g in plan.modules["det"].groups}
    sources = plan_sources(measured, plan)
    assert set(sources["det"]) == used
    for hw in used:
        assert sources["det"][hw] == {"c6i.large": ONSITE_NOTE, "t4": "derived"}[hw]


def test_a_replaced_profile_is_a_valid_planner_entry():
    onsite = {"d": [_e("t4", 4, 0.03, "measured", note=ONSITE_NOTE, runs=20, threads=1)]}
    profiles, _ = prefer_measured(spec([_e("t4", 4, 0.02, "derived")]).profiles, onsite)
    assert isinstance(profiles["d"][0], ProfileEntry) and (profiles["d"][0].model_extra or {})["runs"] == 20
