"""Registration of an app spec: parse and check it (:mod:`control.spec`), check that the
epoch can plan it (:mod:`control.registration.checks`), choose its admission reserve when it gives a
``shed_target`` (:mod:`control.registration.reserve`); the result is what the registry stores
(:mod:`control.registration.store`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from control.registration.checks import check_hardware_profiles, check_plannable
from control.registration.reserve import choose_admission_reserve
from control.spec import RegistrationSpec, parse_spec

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from planner.models import HardwareSpec, Plan, ProfileEntry

__all__ = ["Registration", "validate_registration", "validate_spec"]


@dataclass(frozen=True)
class Registration:
    """A validated spec and the plan its feasibility check solved (``planner.fleet.seed_plan``; None
    when feasibility was not checked)."""

    spec: RegistrationSpec
    seed: Plan | None = None


def validate_spec(doc: Any, **settings: Any) -> RegistrationSpec:
    """:func:`validate_registration`'s spec (the same keyword arguments)."""
    return validate_registration(doc, **settings).spec


def validate_registration(
    doc: Any,
    *,
    catalog: Mapping[str, HardwareSpec],
    stored_profile: Callable[[str], list[ProfileEntry] | None],
    available: Iterable[str] | None = None,
    check_feasible: bool = True,
    overhead_s: float = 0.0,
    headroom: float = 0.0,
    child_headroom: float = 0.0,
    policy: str = "skinflint",
) -> Registration:
    """Check an app spec document and return it with every model's profile resolved, and the plan of
    the feasibility check. Raises :class:`RegistrationError` listing every problem found (not only the
    first). Feasibility is checked as the first epoch will plan the app (:func:`check_plannable`): at
    its registered rate plus ``headroom`` (quantised as the forecast does), with the dispatch-aware
    solve."""
    avail = set(available) if available is not None else None
    spec = parse_spec(doc, catalog=catalog, stored_profile=stored_profile, available=avail)
    check_hardware_profiles(spec, catalog, avail)
    if not check_feasible:
        return Registration(spec)
    settings = {"overhead_s": overhead_s, "headroom": headroom, "child_headroom": child_headroom}
    if spec.shed_target is not None:
        spec, seed = choose_admission_reserve(spec, catalog, avail, policy=policy, **settings)
        return Registration(spec, seed)
    seed = check_plannable(spec, catalog, avail, policy=policy, **settings)
    return Registration(spec, seed)
