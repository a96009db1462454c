"""Admission reserves kept true to an app's ``shed_target`` as its rate moves.

A registration with a ``shed_target`` chooses the smallest ``admission_reserve`` whose plan sheds at
most the target of Poisson frames *at the registered rate* (``control.registration``,
:func:`~control.registration.reserve.search_admission_reserve`). The shed fraction depends on the rate
(the same plan's windows hold other counts): on the test app of ``tests/functional`` at a 0.06 s SLO
and a 1 % target, the reserve chosen at 20 frames/s (0, 0.4 % shed) sheds 2.4 % at 40 frames/s and
12 % at 80 (docs/control.md, "Reserves that follow the rate").

So after each epoch the control loop reviews the apps whose rate moved past :data:`REVIEW_BAND`
(either way) from the rate their reserve was chosen at: it searches the reserves again at the rate the
epoch planned for (before headroom), as the registration did, and keeps the choice in the control
state (:class:`~control.state.ReserveChoice`) for the app's revision. The next epoch plans
with it (:func:`effective_specs`); a re-registration starts again from its own choice. When no reserve
meets the target at the new rate, the one of least shed is kept and the epoch warns
(``ShedTargetUnmet``). The reviews run after the version is published, within their own budget of
wall time (``ControlConfig.reserve_review_budget_s``; the app that drifted most first, at least one per
epoch when any is due), so they never delay a plan.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from control.errors import RegistrationError
from control.registration.reserve import search_admission_reserve
from control.state import ReserveChoice

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from control.registration.store import AppRecord
    from control.spec import RegistrationSpec
    from control.state import ControlState
    from planner.models import HardwareSpec

__all__ = ["REVIEW_BAND", "ReserveReview", "effective_specs", "review_reserves"]

#: A reserve is chosen again when the app's rate is more than this factor above or below the rate it
#: was chosen at (the chosen rate is the new centre: no review every epoch for the same move).
REVIEW_BAND = 1.25


def _current(
    name: str, record: AppRecord, spec: RegistrationSpec, state: ControlState
) -> tuple[float, float]:
    """(reserve in force, the rate it was chosen at) for an app with a ``shed_target``."""
    choice = state.reserves.get(name)
    if choice is not None and choice.revision == record.revision:
        return choice.reserve, choice.rate
    return spec.admission_reserve, spec.rate


def effective_specs(
    apps: Mapping[str, tuple[AppRecord, RegistrationSpec]], state: ControlState
) -> dict[str, tuple[AppRecord, RegistrationSpec]]:
    """``apps`` with the reserve the control loop chose for each app's current revision; choices
    for apps gone or re-registered are dropped from ``state``."""
    for gone in [
        app
        for app, reserve_choice in state.reserves.items()
        if app not in apps or apps[app][0].revision != reserve_choice.revision
    ]:
        del state.reserves[gone]
    out = dict(apps)
    for name, choice in state.reserves.items():
        record, spec = apps[name]
        if spec.shed_target is not None and choice.reserve != spec.admission_reserve:
            out[name] = (record, spec.model_copy(update={"admission_reserve": choice.reserve}))
    return out


@dataclass
class ReserveReview:
    """What :func:`review_reserves` did in one epoch."""

    reviewed: dict[str, dict[str, Any]] = field(default_factory=dict)  # app -> the new choice
    due: list[str] = field(default_factory=list)  # apps past the band left for a later epoch
    warnings: list[str] = field(default_factory=list)
    spent_s: float = 0.0


def review_reserves(
    apps: Mapping[str, tuple[AppRecord, RegistrationSpec]],
    rates: Mapping[str, float],
    state: ControlState,
    *,
    catalog: Mapping[str, HardwareSpec],
    available: list[str] | None,
    settings: Mapping[str, Any],
    now: float,
    budget_s: float,
    band: float = REVIEW_BAND,
    clock: Callable[[], float] = time.perf_counter,
) -> ReserveReview:
    """Choose the reserve again for the apps with a ``shed_target`` whose rate ``rates`` (frames/s,
    the epoch's planned rate before headroom) is past ``band`` from the rate their reserve was chosen
    at; record each choice in ``state.reserves``. ``apps`` holds the registered specs; ``settings``
    the registration's planner settings (``planner_settings``: overhead, headroom, child headroom,
    policy). Apps are reviewed by drift, largest first, while less than ``budget_s`` has been spent
    (at least one when any is due)."""
    out = ReserveReview()
    if budget_s <= 0:
        return out
    drift: dict[str, float] = {}
    for name, (record, spec) in apps.items():
        rate = rates.get(name)
        if spec.shed_target is None or rate is None or rate <= 0:
            continue
        _, at = _current(name, record, spec, state)
        drift_factor = max(rate / at, at / rate)
        if drift_factor > band:
            drift[name] = drift_factor
    t0 = clock()
    for name in sorted(drift, key=lambda app: (-drift[app], app)):
        if out.reviewed and clock() - t0 >= budget_s:
            out.due.append(name)
            continue
        record, spec = apps[name]
        before, _ = _current(name, record, spec, state)
        at_rate = spec.model_copy(update={"rate": rates[name]})
        try:
            found = search_admission_reserve(at_rate, catalog, available, **settings)
        except RegistrationError as exc:  # not plannable at that rate at all: the epoch says why
            out.warnings.append(f"{name}: admission reserve not reviewed: {exc}")
            continue
        state.reserves[name] = ReserveChoice(
            reserve=found.reserve,
            rate=rates[name],
            shed=found.shed,
            met=found.met,
            revision=record.revision,
            at=now,
        )
        out.reviewed[name] = {
            "rate": round(rates[name], 4),
            "reserve": found.reserve,
            "previous_reserve": before,
            "simulated_shed": round(found.shed, 5),
            "met": found.met,
        }
        if not found.met:
            out.warnings.append(
                f"{name}: shed_target {spec.shed_target:g} is not met at {rates[name]:.4g} frames/s: the "
                f"least shed found was {found.shed:.3g} (admission_reserve {found.reserve:g})"
            )
    out.spent_s = clock() - t0
    return out
