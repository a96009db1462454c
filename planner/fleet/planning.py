"""What an epoch's solve phase works with: the solver and its settings, the per-app schedules it reuses
and what the phase gives the epoch."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from planner.solve import solve

if TYPE_CHECKING:
    from collections.abc import Callable

    from planner.fleet.realised import RealisationCache, Schedules
    from planner.models import Plan, ProblemSpec

__all__ = ["Memo", "Planning", "ScheduleSharingSolver", "Solved", "takes_keyword"]


# --------------------------------------------------------------------------- epoch


@dataclass(frozen=True)
class Planning:
    policy: str
    tighten: float
    hold: float
    stick: float
    solver: Callable[[ProblemSpec], Plan] | None
    shares: bool = False  # the solver takes a ``schedules`` keyword (:class:`ScheduleSharingSolver`)
    budget: float | None = None  # CPU s of the solve phase before carried plans stay (None: no carrying)
    quick: bool = False  # the solver takes a ``first_found`` keyword (a quick mode)

    def plan(self, problem: ProblemSpec, schedules: Schedules | None, *, first_found: bool = False) -> Plan:
        if self.solver is None:
            return solve(problem, policy=self.policy, objective="billed")
        kwargs: dict[str, Any] = {"first_found": True} if first_found and self.quick else {}
        if self.shares and schedules is not None:
            kwargs["schedules"] = schedules
        return self.solver(problem, **kwargs)


class ScheduleSharingSolver(Protocol):
    """A solver that keeps the module schedules it builds in ``schedules`` (a dict keyed as
    :func:`planner.robust.realise`'s cache), e.g. :func:`planner.robust.solve_dispatchable`.
    :func:`plan_fleet` gives such a solver one dict per app and realises the app's shapes with the same
    dict, so a module the shaping or packing leaves as solved is not scheduled again."""

    def __call__(self, problem: ProblemSpec, /, *, schedules: Schedules | None = None) -> Plan: ...


def takes_keyword(solver: Callable[..., Plan] | None, name: str) -> bool:
    """Whether ``solver`` takes keyword ``name`` (``schedules``: a :class:`ScheduleSharingSolver`;
    ``first_found``: a quick mode, as :func:`planner.robust.solve_dispatchable` has)."""
    if solver is None:
        return False
    try:
        param = inspect.signature(solver).parameters.get(name)
    except (TypeError, ValueError):  # no signature to read (some builtins): call it plainly
        return False
    return param is not None and param.kind in (param.KEYWORD_ONLY, param.POSITIONAL_OR_KEYWORD)


@dataclass(frozen=True)
class Memo:
    """What one :func:`plan_fleet` call reuses: the realisation cache and, per app, the module schedules
    its solve and its realisations build (none when ``cache`` is None: everything is computed afresh)."""

    cache: RealisationCache | None
    schedules: dict[str, Schedules] = field(default_factory=dict)

    def of(self, app: str) -> Schedules | None:
        return None if self.cache is None else self.schedules.setdefault(app, {})


@dataclass
class Solved:
    """What :func:`solve_all` gives the epoch."""

    plans: dict[str, Plan] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    reused: list[str] = field(default_factory=list)
    seeded: list[str] = field(default_factory=list)
    carried: list[str] = field(default_factory=list)  # on a carried plan at the end of the solve phase
    resolved: list[str] = field(default_factory=list)  # carried before, solved again now
    quick: list[str] = field(default_factory=list)  # given the solver's first realisable plan (carried)

    @property
    def unchanged(self) -> set[str]:
        """Apps whose plan was not solved this epoch (their shapes can be reused)."""
        return set(self.reused) | set(self.carried)
