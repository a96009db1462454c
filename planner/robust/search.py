"""The dispatch-aware search's state: attempts (a plan solved for raised child rates and a splitter SLO,
and its realisation) and the search that solves and caches them."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from planner.errors import InfeasibleError
from planner.latency import EPS
from planner.robust.realisation import Realisation, realise
from planner.robust.stretch import stretch_windows
from planner.solve import BilledCache, solve
from planner.split import topology

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from planner.dispatch import DispatchSchedule
    from planner.models import Objective, Plan, ProblemSpec, ProfileEntry

__all__ = ["Attempt", "DispatchSearch", "Key"]


# --------------------------------------------------------------------------- dispatch-aware solve


Key = tuple[str, int, int]  # (hardware, batch, concurrency): one configuration of a module


@dataclass
class Attempt:
    splitter_slo: float
    rates: dict[str, float]  # the rates the solve planned for (children raised by headroom)
    only: dict[str, Key]  # modules restricted to one configuration (a parent whose bursts overlap)
    plan: Plan
    real: dict[str, Realisation]
    over: float  # worst realised path minus the SLO (<= 0: within the SLO)
    excess: float  # largest realised-minus-planned sum over the paths that miss the SLO
    short: dict[str, float]  # children below their required spread rate -> that rate
    cost: float
    round: int = 0  # which attempt of its search (1: the first), where a caller needs it
    stretch: float = 0.0  # the share of their slack modules with children took as longer windows
    solved: Plan | None = None  # with a stretch: the plan as solved, before its windows were stretched

    @property
    def ok(self) -> bool:
        return self.over <= EPS and not self.short

    def same_variant(self, other: Attempt) -> bool:
        return self.rates == other.rates and self.only == other.only and self.stretch == other.stretch


def _cost(plan: Plan, objective: Objective) -> float:
    return plan.billed_per_hour if objective == "billed" else plan.cost_per_hour


class DispatchSearch:
    """Solves at given splitter SLOs and child rates; keeps every attempt."""

    def __init__(
        self,
        problem: ProblemSpec,
        *,
        policy: str,
        objective: Objective,
        fan_out: Mapping[tuple[str, str], float] | None,
        schedules: dict[tuple[object, ...], DispatchSchedule] | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> None:
        self.problem = problem
        self.should_stop = should_stop  # the caller's budget, read by every attempt's solve
        self.policy, self.objective, self.fan_out = policy, objective, fan_out
        self.attempts: list[Attempt] = []
        self.schedules: dict[tuple[object, ...], DispatchSchedule] = {} if schedules is None else schedules
        topo = topology(problem)
        self.joins = {m: len(ps) for m, ps in topo.parents.items() if len(ps) > 1}
        self.paths = topo.paths  # of the problem every variant keeps (only rates and profiles change)
        # the rounds solve variants of one problem: most modules' billed optima come back unchanged
        self.billed = BilledCache()
        # the plans solved so far by (splitter SLO, rates, restrictions, plain), before any stretch:
        # the stretched rounds start where the unstretched ones did (shared with their searches)
        self.solved: dict[tuple[object, ...], Plan] = {}
        self._profiles: dict[tuple[str, Key | None, bool], list[ProfileEntry]] = {}

    def _profile(self, m: str, key: Key | None, joined: bool) -> list[ProfileEntry]:
        """Module ``m``'s profile in a variant: restricted to configuration ``key`` (None: all) and, for a
        join, to batches with a place for every parent's stream; the module's own list when nothing is
        removed. The rounds get the same list object for the same restriction, so the solves' shared
        :class:`BilledCache` knows its configurations (it recognises a profile list by identity)."""
        found = self._profiles.get((m, key, joined))
        if found is None:
            mod = self.problem.modules[m]
            profile = [e for e in mod.profile if key is None or (e.hardware, e.batch, e.concurrency) == key]
            if joined:
                profile = [e for e in profile if e.batch >= self.joins[m]]
            found = self._profiles[(m, key, joined)] = (
                profile if len(profile) < len(mod.profile) else mod.profile
            )
        if joined and not found:
            raise InfeasibleError(
                f"infeasible: join {m!r} has no configuration with a batch of at least "
                f"{self.joins[m]} (one place per parent stream)"
            )
        return found

    def attempt(
        self,
        splitter_slo: float,
        rates: dict[str, float],
        only: dict[str, Key],
        *,
        plain: bool = False,
        stretch: float = 0.0,
    ) -> Attempt:
        """Solve and realise one variant. Unless ``plain``, a join of ``k`` parents may only use
        configurations whose batch has room for every parent's stream (``b >= k``: each stream takes
        at least one place of a window, :func:`required_capacity`). ``stretch``: the modules with
        children take that share of their slack as longer windows (:func:`stretch_windows`) before the
        plan is realised."""
        key = (splitter_slo, tuple(sorted(rates.items())), tuple(sorted(only.items())), plain)
        found = self.solved.get(key)
        if found is not None:
            return self._adopt_stretched(splitter_slo, rates, only, found, stretch)
        modules = {}
        for m, mod in self.problem.modules.items():
            update: dict[str, Any] = {"rate": rates[m]}
            profile = self._profile(m, only.get(m), not plain and m in self.joins)
            if profile is not mod.profile:
                update["profile"] = profile
            modules[m] = mod.model_copy(update=update)
        spec = self.problem.model_copy(update={"slo_s": splitter_slo, "modules": modules})
        plan = solve(spec, self.policy, self.objective, cache=self.billed, should_stop=self.should_stop)
        self.solved[key] = plan
        return self._adopt_stretched(splitter_slo, rates, only, plan, stretch)

    def _adopt_stretched(
        self, splitter_slo: float, rates: dict[str, float], only: dict[str, Key], plan: Plan, stretch: float
    ) -> Attempt:
        """:meth:`adopt` of ``plan`` (solved for ``rates``) with its windows stretched by ``stretch``."""
        if not stretch:
            return self.adopt(splitter_slo, rates, only, plan)
        modules = {m: mod.model_copy(update={"rate": rates[m]}) for m, mod in self.problem.modules.items()}
        stretched = stretch_windows(self.problem.model_copy(update={"modules": modules}), plan, stretch)
        a = self.adopt(splitter_slo, rates, only, stretched, stretch=stretch)
        a.solved = plan
        return a

    def adopt(
        self,
        splitter_slo: float,
        rates: dict[str, float],
        only: dict[str, Key],
        plan: Plan,
        *,
        stretch: float = 0.0,
    ) -> Attempt:
        """Realise ``plan`` (planned for ``rates``; its windows stretched by ``stretch``) and keep it as
        an attempt."""
        real = realise(self.problem, plan, fan_out=self.fan_out, cache=self.schedules)
        over, excess = -math.inf, 0.0
        for path in self.paths:
            lat = sum(real[m].worst_case_s for m in path)
            over = max(over, lat - self.problem.slo_s)
            if lat > self.problem.slo_s + EPS:
                excess = max(excess, lat - sum(real[m].planned_s for m in path))
        short = {m: r.required_rate for m, r in real.items() if r.guaranteed and not r.collision_free}
        a = Attempt(
            splitter_slo,
            dict(rates),
            dict(only),
            plan,
            real,
            over,
            excess,
            short,
            _cost(plan, self.objective),
            stretch=stretch,
        )
        self.attempts.append(a)
        return a

    def best(self) -> Attempt | None:
        ok = [a for a in self.attempts if a.ok]
        # at equal cost the shorter windows (a frame waits less for its window) and the looser split
        return min(ok, key=lambda a: (a.cost, a.stretch, -a.splitter_slo)) if ok else None
