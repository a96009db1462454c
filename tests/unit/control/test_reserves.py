"""The control loop's reserve reviews (control/reserves.py): which apps are due, in what
order, within what budget, and how the chosen reserves reach the epoch's specs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from control import reserves
from control.errors import RegistrationError
from control.registration.reserve import ReserveSearch
from control.registration.store import AppRecord
from control.reserves import REVIEW_BAND, effective_specs, review_reserves
from control.spec import RegistrationSpec
from control.state import ControlState, ReserveChoice

if TYPE_CHECKING:
    from collections.abc import Iterator

PLAN: Any = object()  # the search's plan is not read by the review


def app(name: str, rate: float = 20.0, revision: int = 1, **extra: Any) -> tuple[AppRecord, RegistrationSpec]:
    spec = RegistrationSpec.model_validate(
        {
            "name": name,
            "slo_s": 0.25,
            "rate": rate,
            "modules": {"det": {"model": "det-net"}},
            "shed_target": 0.01,
            "admission_reserve": 0.15,
        }
        | extra
    )
    record = AppRecord(
        name=name,
        revision=revision,
        sha256="x",
        s3_key="k",
        registered_at=0.0,
        slo_s=0.25,
        rate=rate,
        modules=["det"],
        admission_reserve=spec.admission_reserve,
        shed_target=spec.shed_target,
    )
    return record, spec


def choice(reserve: float, rate: float, revision: int = 1) -> ReserveChoice:
    return ReserveChoice(reserve=reserve, rate=rate, shed=0.0, met=True, revision=revision, at=0.0)


@pytest.fixture
def searched(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, float]]:
    """Every search the review makes (app, rate); each finds reserve 0.3, met."""
    calls: list[tuple[str, float]] = []

    def search(spec: RegistrationSpec, *_a: Any, **_kw: Any) -> ReserveSearch:
        calls.append((spec.name, spec.rate))
        return ReserveSearch(reserve=0.3, shed=0.002, plan=PLAN, met=True)

    monkeypatch.setattr(reserves, "search_admission_reserve", search)
    return calls


def review(apps: dict[str, Any], rates: dict[str, float], state: ControlState, **kw: Any) -> Any:
    opts: dict[str, Any] = {"catalog": {}, "available": None, "settings": {}, "now": 5.0, "budget_s": 1.0}
    return review_reserves(apps, rates, state, **(opts | kw))


def test_only_apps_past_the_band_are_reviewed_largest_drift_first(searched: list[tuple[str, float]]) -> None:
    apps = {
        "steady": app("steady"),
        "inside": app("inside"),
        "up": app("up"),
        "down": app("down"),
        "plain": app("plain", shed_target=None),
    }
    rates = {"steady": 20.0, "inside": 20.0 * REVIEW_BAND, "up": 30.0, "down": 5.0, "plain": 200.0}
    state = ControlState()
    out = review(apps, rates, state)
    # down: 4x below, up: 1.5x above; inside: exactly at the band (not past it); plain: no target
    assert searched == [("down", 5.0), ("up", 30.0)]
    assert set(out.reviewed) == {"down", "up"} and not out.due and not out.warnings
    assert out.reviewed["up"] == {
        "rate": 30.0,
        "reserve": 0.3,
        "previous_reserve": 0.15,
        "simulated_shed": 0.002,
        "met": True,
    }
    assert state.reserves["down"] == ReserveChoice(
        reserve=0.3, rate=5.0, shed=0.002, met=True, revision=1, at=5.0
    )


def test_a_chosen_reserve_is_the_new_centre_of_the_band(searched: list[tuple[str, float]]) -> None:
    apps = {"a": app("a")}
    state = ControlState(reserves={"a": choice(0.3, 40.0)})
    review(apps, {"a": 45.0}, state)  # 1.125 x the rate chosen at: no review, though 2.25 x registered
    assert searched == []
    review(apps, {"a": 60.0}, state)
    assert searched == [("a", 60.0)] and state.reserves["a"].rate == 60.0


def test_a_choice_for_another_revision_is_not_the_centre(searched: list[tuple[str, float]]) -> None:
    apps = {"a": app("a", revision=2)}
    state = ControlState(reserves={"a": choice(0.3, 40.0, revision=1)})
    review(apps, {"a": 21.0}, state)  # near the new revision's registered rate
    assert searched == []


def test_the_budget_leaves_the_rest_for_a_later_epoch(searched: list[tuple[str, float]]) -> None:
    ticks: Iterator[float] = iter([0.0, 0.5, 1.2, 1.2])  # start, before b, before c, end
    apps = {n: app(n) for n in ("a", "b", "c")}
    out = review(apps, {"a": 100.0, "b": 80.0, "c": 60.0}, ControlState(), clock=lambda: next(ticks))
    assert [a for a, _ in searched] == ["a", "b"] and out.due == ["c"]
    assert review(apps, {"a": 100.0}, ControlState(), budget_s=0.0).reviewed == {}


def test_the_first_due_app_is_reviewed_whatever_the_budget(searched: list[tuple[str, float]]) -> None:
    ticks: Iterator[float] = iter([0.0, 5.0, 5.0, 5.0])
    out = review(
        {"a": app("a"), "b": app("b")}, {"a": 100.0, "b": 90.0}, ControlState(), clock=lambda: next(ticks)
    )
    assert list(out.reviewed) == ["a"] and out.due == ["b"]


def test_an_app_that_cannot_be_planned_at_the_rate_is_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    def search(spec: RegistrationSpec, *_a: Any, **_kw: Any) -> ReserveSearch:
        raise RegistrationError(["cannot be planned at 900 frames/s"], spec.name)

    monkeypatch.setattr(reserves, "search_admission_reserve", search)
    state = ControlState()
    out = review({"a": app("a")}, {"a": 900.0}, state)
    assert not out.reviewed and not state.reserves
    assert out.warnings == [
        "a: admission reserve not reviewed: app 'a': 1 problem: cannot be planned at 900 frames/s"
    ]


def test_effective_specs_apply_the_choices_and_drop_the_stale_ones() -> None:
    apps = {"a": app("a"), "b": app("b", revision=3), "plain": app("plain", shed_target=None)}
    state = ControlState(
        reserves={
            "a": choice(0.3, 40.0),
            "b": choice(0.2, 40.0, revision=2),  # made for an earlier revision
            "gone": choice(0.2, 40.0),  # an app no longer registered
        }
    )
    out = effective_specs(apps, state)
    assert out["a"][1].admission_reserve == 0.3 and out["a"][1].planning_slo_s == pytest.approx(0.175)
    assert out["b"] is apps["b"] and out["plain"] is apps["plain"]
    assert set(state.reserves) == {"a"}
    assert apps["a"][1].admission_reserve == 0.15  # the registered spec is not changed
