"""Registration checks feasibility with the planner's own settings: the CLI and the admin API read
SKINFLINT_PLANNER_HEADROOM, SKINFLINT_CHILD_HEADROOM and SKINFLINT_HOP_OVERHEAD_S through
``ControlConfig.from_env``, as the epoch does, so the rate and solve they check are the epoch's."""

from __future__ import annotations

from typing import Any

import pytest

import planner.robust
from control.epoch import ControlConfig
from control.errors import ControlError
from control.registration.checks import first_plan_rate, planner_settings
from control.registration.validate import validate_spec
from planner.scaling import forecast_rate
from profiles.hardware import load_catalog

SPEC: dict[str, Any] = {
    "name": "cams",
    "slo_s": 0.5,
    "rate": 20.0,
    "modules": {"det": {"model": "det-net"}, "cls": {"model": "cls-net"}},
    "edges": [["det", "cls", 2.0]],
    "hardware": ["t4"],
    "profiles": {
        "det-net": [{"hardware": "t4", "batch": 4, "duration_s": 0.02}],
        "cls-net": [{"hardware": "t4", "batch": 4, "duration_s": 0.01}],
    },
}
ENV = {
    "SKINFLINT_PLANNER_HEADROOM": "0.5",
    "SKINFLINT_CHILD_HEADROOM": "0.25",
    "SKINFLINT_HOP_OVERHEAD_S": "0.03",
}


@pytest.fixture
def planner_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)


def test_settings_come_from_the_planners_parser(planner_env: None) -> None:
    want = {"overhead_s": 0.03, "headroom": 0.5, "child_headroom": 0.25, "policy": "skinflint"}
    assert planner_settings() == want
    assert planner_settings(ControlConfig.from_env(ENV)) == want
    assert planner_settings(ControlConfig()) == {
        "overhead_s": 0.05,
        "headroom": 0.1,
        "child_headroom": 0.0,
        "policy": "skinflint",
    }


def test_a_bad_setting_fails_registration_as_it_fails_the_planner(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKINFLINT_CHILD_HEADROOM", "-1")
    with pytest.raises(ControlError, match="bad planner setting"):
        planner_settings()


def test_registration_solves_at_the_rate_and_child_headroom_the_epoch_uses(
    planner_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[float, float, float, float]] = []
    real = planner.robust.solve_dispatchable

    def spy(problem: Any, **kw: Any) -> Any:
        seen.append(
            (
                problem.modules["det"].rate,
                kw["child_headroom"],
                problem.modules["det"].profile[0].duration_s,
                problem.modules["det"].profile[0].overhead_s,
            )
        )
        return real(problem, **kw)

    monkeypatch.setattr(planner.robust, "solve_dispatchable", spy)
    spec = validate_spec(SPEC, catalog=load_catalog(), stored_profile=lambda _m: None, **planner_settings())
    # the epoch plans a new app at forecast_rate([rate], headroom) (control/epoch.py)
    epoch_rate = max(forecast_rate([spec.rate], headroom=ControlConfig.from_env().headroom), spec.floor_rate)
    assert first_plan_rate(spec, 0.5) == epoch_rate >= 20.0 * 1.5
    ((rate, child, duration, overhead),) = seen
    assert rate == pytest.approx(epoch_rate) and child == 0.25
    # the profile's device time, and the planner's hop overhead beside it as latency only (issue #24:
    # before, the duration was 0.02 + 0.03 = 0.05 s); their sum is still the 0.05 s the hop set
    assert duration == pytest.approx(0.02)
    assert overhead == pytest.approx(0.03)
    assert duration + overhead == pytest.approx(0.02 + 0.03)


def test_the_cli_and_the_admin_api_build_their_registrar_with_those_settings(
    planner_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import core.clients
    from control import service
    from core.settings import DataPlaneConfig
    from front.admin import admin_from_config
    from skinflint.commands import apps

    # no AWS here: clients, the catalog and the profile store are stubbed, the wiring is real
    monkeypatch.setattr(core.clients, "make_client", lambda *_a, **_k: None)
    monkeypatch.setattr(service, "load_catalog", lambda *_a: load_catalog())
    monkeypatch.setattr(service, "profile_store", lambda *_a, **_k: None)
    monkeypatch.delenv("SKINFLINT_PLANNER_FUNCTION", raising=False)
    cfg = DataPlaneConfig()
    for registrar in (apps._registrar(cfg), admin_from_config(cfg).registrar):
        got = (registrar.headroom, registrar.child_headroom, registrar.overhead_s, registrar.policy)
        assert got == (0.5, 0.25, 0.03, "skinflint")


@pytest.mark.parametrize(
    ("min_rate", "observed", "planned"),
    [
        # the floor with the headroom: 4 x 1.1 = 4.4, quantised up to 1.05^31 = 4.538 (not 4.0)
        (4.0, [1.0, 1.0], 1.05**31),
        # above the floor the forecast decides: 10 x 1.1 = 11, up to 1.05^50 = 11.467
        (4.0, [10.0, 10.0], 1.05**50),
        # no min_rate: the floor is rate / 10 = 2, through the headroom: 2.2 up to 1.05^17 = 2.292
        (None, [0.5, 0.5], 1.05**17),
    ],
)
def test_the_floor_is_planned_with_the_same_headroom_as_any_rate(
    min_rate: float | None, observed: list[float], planned: float
) -> None:
    """A floor is a rate the app can always send at: planned at exactly that rate, its batch-1 windows
    have no spare room and two cameras' frames in one window are shed (``slot_full``) at the floor."""
    from control.planning import planned_rate
    from control.registration.checks import floor_plan_rate
    from control.registration.store import AppRecord
    from control.spec import RegistrationSpec

    spec = RegistrationSpec.model_validate({**SPEC, "rate": 20.0, "min_rate": min_rate})
    assert floor_plan_rate(spec, 0.1) == pytest.approx(forecast_rate([spec.floor_rate], headroom=0.1))
    record = AppRecord(
        name=spec.name, revision=1, sha256="0", s3_key="k", registered_at=0.0, slo_s=1.0, rate=20.0,
        modules=list(spec.modules),
    )  # fmt: skip
    config = ControlConfig(headroom=0.1)
    rate = planned_rate(
        spec, record, observed, 10.0, headroom=config.headroom, trend_epochs=config.trend_epochs
    )
    assert rate == pytest.approx(planned)
