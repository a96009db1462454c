"""The admission reserve a ``shed_target`` chooses: the smallest of :data:`RESERVE_STEPS` whose plan
(the feasibility check's) sheds at most the target of Poisson frames at the app's rate in the
simulator. One rule (:func:`pick_reserve`) wherever a reserve is chosen: the registration, the
control loop's review (:mod:`control.reserves`) and ``skinflint bench simulator --reserve-study``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from control.errors import RegistrationError
from control.problems import app_problem
from control.registration.checks import check_plannable
from planner.simulator import simulate

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from control.spec import RegistrationSpec
    from planner.models import HardwareSpec, Plan

__all__ = [
    "RESERVE_STEPS",
    "SHED_SIM_FRAMES",
    "SHED_SIM_MAX_S",
    "SHED_SIM_MIN_S",
    "ReserveSearch",
    "choose_admission_reserve",
    "pick_reserve",
    "search_admission_reserve",
    "simulated_shed",
]

#: The reserves a ``shed_target`` chooses from, smallest (cheapest) first.
RESERVE_STEPS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4)
#: Poisson frames the ``shed_target`` simulation offers at least (over at least SHED_SIM_MIN_S and at
#: most SHED_SIM_MAX_S simulated seconds): 2,000 frames put a 1 % shed rate within about +-0.5 %.
SHED_SIM_FRAMES = 2000
SHED_SIM_MIN_S, SHED_SIM_MAX_S = 10.0, 600.0
_T = TypeVar("_T")


def simulated_shed(
    spec: RegistrationSpec,
    plan: Plan,
    catalog: Mapping[str, HardwareSpec],
    available: Iterable[str] | None,
    overhead_s: float,
) -> float:
    """The fraction of Poisson frames at ``spec``'s registered rate that the front's admission sheds
    with ``plan`` in the simulator (``planner.simulator.simulate``, ``admission="planned"``): frames
    keep the whole SLO as their deadline, the plan is what the epoch runs. Enough simulated time for
    :data:`SHED_SIM_FRAMES` frames (within the bounds), one fixed seed: the same answer every time."""
    full = spec.model_copy(update={"admission_reserve": 0.0})
    problem = app_problem(full, spec.rate, catalog, available, overhead_s)
    duration = min(max(SHED_SIM_FRAMES / spec.rate, SHED_SIM_MIN_S), SHED_SIM_MAX_S)
    report = simulate(problem, plan, duration, "poisson", seed=0, admission="planned")
    return report.frames_shed / report.frames_offered if report.frames_offered else 0.0


@dataclass(frozen=True)
class ReserveSearch:
    """What :func:`search_admission_reserve` found: the reserve to plan with, what its plan shed in
    the simulator, that plan, and whether it met the spec's ``shed_target`` (when not: the reserve of
    least shed among the steps tried)."""

    reserve: float
    shed: float
    plan: Plan
    met: bool


def search_admission_reserve(
    spec: RegistrationSpec,
    catalog: Mapping[str, HardwareSpec],
    available: Iterable[str] | None,
    *,
    overhead_s: float,
    headroom: float = 0.0,
    child_headroom: float = 0.0,
    policy: str = "skinflint",
) -> ReserveSearch:
    """The smallest ``admission_reserve`` of :data:`RESERVE_STEPS` whose plan (the feasibility
    check's, :func:`check_plannable`) sheds at most ``spec.shed_target`` of Poisson frames at
    ``spec.rate`` (:func:`simulated_shed`). A larger reserve costs more (the app is planned for less of
    its SLO), so the first that meets the target is the cheapest of the steps. When none does, the one
    of least shed (``met`` false). Raises :class:`RegistrationError` only when the app cannot be
    planned within its whole SLO; the steps past the first that does not plan are not tried."""
    target = spec.shed_target
    if target is None:
        raise ValueError("search_admission_reserve needs a spec with a shed_target")
    settings = {"overhead_s": overhead_s, "headroom": headroom, "child_headroom": child_headroom}

    def evaluate(reserve: float) -> tuple[float, Plan] | None:
        candidate = spec.model_copy(update={"admission_reserve": reserve})
        try:
            seed = check_plannable(candidate, catalog, available, policy=policy, **settings)
        except RegistrationError:
            if reserve == 0.0:
                raise  # not plannable within its whole SLO: the plain feasibility error
            return None  # less of the SLO does not plan either
        return simulated_shed(candidate, seed, catalog, available, overhead_s), seed

    found = pick_reserve(evaluate, target)
    assert found is not None  # reserve 0 either plans or raises
    reserve, shed, plan, met = found
    return ReserveSearch(reserve, shed, plan, met)


def pick_reserve(
    evaluate: Callable[[float], tuple[float, _T] | None], target: float
) -> tuple[float, float, _T, bool] | None:
    """The reserve search's rule, wherever a reserve is chosen (the registration, the control loop's
    review, ``skinflint bench simulator --reserve-study``): over :data:`RESERVE_STEPS`, smallest first,
    ``evaluate(reserve)`` gives (shed, what was planned), or None when that reserve cannot be planned
    (nor any larger one: the search stops). Returns (reserve, shed, planned, met): the first whose shed
    is at most ``target``, else the one of least shed (``met`` false); None when none plans."""
    best: tuple[float, float, _T, bool] | None = None
    for reserve in RESERVE_STEPS:
        got = evaluate(reserve)
        if got is None:
            break
        shed, planned = got
        if shed <= target:
            return reserve, shed, planned, True
        if best is None or shed < best[1]:
            best = (reserve, shed, planned, False)
    return best


def choose_admission_reserve(
    spec: RegistrationSpec,
    catalog: Mapping[str, HardwareSpec],
    available: Iterable[str] | None,
    *,
    overhead_s: float,
    headroom: float = 0.0,
    child_headroom: float = 0.0,
    policy: str = "skinflint",
) -> tuple[RegistrationSpec, Plan]:
    """``spec`` with the reserve :func:`search_admission_reserve` finds, with that plan as the seed.
    Raises :class:`RegistrationError` when the app cannot be planned at all, or when no step meets the
    target (naming the least shed found)."""
    found = search_admission_reserve(
        spec,
        catalog,
        available,
        overhead_s=overhead_s,
        headroom=headroom,
        child_headroom=child_headroom,
        policy=policy,
    )
    if found.met:
        return spec.model_copy(
            update={"admission_reserve": found.reserve, "simulated_shed": found.shed}
        ), found.plan
    raise RegistrationError(
        [
            f"shed_target {spec.shed_target:g} cannot be met: the least shed found was {found.shed:.3g} of "
            f"Poisson frames at {spec.rate:g} frames/s (admission_reserve {found.reserve:g}), up to "
            f"reserve {RESERVE_STEPS[-1]:g} of the SLO: a longer SLO or a larger target"
        ],
        spec.name,
    )
