"""Realised plans: a shaped plan's dispatch realisation (its Theorem 1 figures when it does not realise),
and the cache of realisations an epoch shares."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from planner.dispatch import theorem1_latencies
from planner.fleet.keys import SPLIT_KEY
from planner.models import ModulePlan, Plan
from planner.robust import annotate, realise
from planner.split import topology

if TYPE_CHECKING:
    from collections.abc import Mapping

    from planner.dispatch import DispatchSchedule
    from planner.models import ProblemSpec
    from planner.robust import Realisation

    #: Module schedules by :func:`planner.robust.realise`'s cache key (module, groups, prices).
    Schedules = dict[tuple[object, ...], DispatchSchedule]

__all__ = ["REALISATIONS", "RealisationCache", "realised_or_not", "redispatch"]


def realised(plan: Plan) -> bool:
    """The plan carries dispatch-realised figures (:func:`planner.robust.annotate`)."""
    if (plan.model_extra or {}).get("dispatch_realised"):
        return True
    return any(isinstance((mp.model_extra or {}).get("dispatch"), dict) for mp in plan.modules.values())


def redispatch(
    problem: ProblemSpec,
    plan: Plan,
    *,
    cache: RealisationCache | None = None,
    schedules: Schedules | None = None,
) -> Plan | None:
    """``plan`` with its dispatch figures (``dispatch``, worst cases, paths) recomputed by
    :func:`planner.robust.realise` for its current groups, e.g. after shaping or after packing raised
    rates; each module's planned figure is its Theorem-1 bound. None when the realised plan misses the
    SLO on a path or a child's spread rate no longer covers its requirement. Fan-out comes from the
    problem (``max_children_per_request``, else the rate ratio), as in ``solve_dispatchable`` without
    an explicit ``fan_out``. ``cache`` keeps the result for the same problem and module plans (a later
    call, or a later epoch, gets it without realising again); ``schedules`` is passed to ``realise`` (its
    keys hold everything a schedule depends on, prices included). Either gives the same result as none."""
    key = cache.key(problem, plan) if cache is not None else None
    if cache is not None and key is not None:
        hit = cache.get(key)
        if hit is not None:
            return plan.model_copy(update=hit) if hit else None
    out = _redispatch(problem, plan, schedules)
    if cache is not None and key is not None:
        cache.put(key, {} if out is None else {k: getattr(out, k) for k in _REALISED_FIELDS})
    return out


#: What :func:`planner.robust.annotate` sets on a plan: a cached realisation is these, applied to the plan.
_REALISED_FIELDS = ("modules", "paths", "slo_s", "dispatch_realised", "guaranteed")


def _redispatch(problem: ProblemSpec, plan: Plan, schedules: Schedules | None) -> Plan | None:
    return realised_or_not(problem, plan, schedules)[0]


def realised_or_not(
    problem: ProblemSpec, plan: Plan, schedules: Schedules | None
) -> tuple[Plan | None, Mapping[str, Realisation]]:
    """``plan`` realised (:func:`redispatch` without its cache; None when it misses the SLO on a path or
    a child's spread falls short) and the realisation it was judged by."""
    prices = {h: x.price_per_hour for h, x in problem.hardware.items()}
    modules: dict[str, ModulePlan] = {}
    kept: dict[str, ModulePlan] = {}
    for m, given in plan.modules.items():
        mp = given
        if SPLIT_KEY in (given.model_extra or {}):
            # the realised figure replaces d + 2 b / W, so the residual's saving is no longer known
            data = given.model_dump()
            data.pop(SPLIT_KEY)
            mp = ModulePlan.model_validate(data)
        kept[m] = mp
        t1 = max(theorem1_latencies(mp, prices), default=0.0)
        modules[m] = mp.model_copy(update={"worst_case_latency_s": t1, "dispatch": {"theorem1_s": t1}})
    real = realise(problem, plan.model_copy(update={"modules": modules}), cache=schedules)
    for path in topology(problem).paths:
        if sum(real[m].worst_case_s for m in path) > problem.slo_s + 1e-9:
            return None, real
    if any(r.guaranteed and not r.collision_free for r in real.values()):
        return None, real
    return annotate(problem, plan.model_copy(update={"modules": kept}), real), real


class RealisationCache:
    """Dispatch-realised figures of plans (:func:`redispatch`), keyed by the problem and the module
    plans (their full content: what ``realise`` and ``annotate`` read). What one epoch used (:meth:`rotate`
    ends an epoch) is kept through the next and dropped at its end unless used again, so an epoch whose
    plans are all reused realises nothing again (the shapes of the ``keep`` s it did not choose included);
    the memory held is a few module plans per app and ``keep`` of the last two epochs."""

    def __init__(self) -> None:
        self._now: dict[str, dict[str, Any]] = {}
        self._last: dict[str, dict[str, Any]] = {}
        self._problems: dict[int, tuple[ProblemSpec, str]] = {}
        # problem digest -> the one-line error its solve failed with (kept as the figures are)
        self._failed_now: dict[str, str] = {}
        self._failed_last: dict[str, str] = {}

    def failure(self, digest: str) -> str | None:
        """The error the solve of the problem of ``digest`` failed with in this epoch or the last one
        (:meth:`fail`), kept for the next epoch; None if none."""
        hit = self._failed_now.get(digest)
        if hit is None:
            hit = self._failed_last.pop(digest, None)
            if hit is not None:
                self._failed_now[digest] = hit
        return hit

    def fail(self, digest: str, error: str) -> None:
        self._failed_now[digest] = error

    def key(self, problem: ProblemSpec, plan: Plan) -> str:
        held = self._problems.get(id(problem))
        if held is None or held[0] is not problem:  # the digest of a problem object is computed once
            held = (problem, hashlib.sha256(problem.model_dump_json().encode()).hexdigest())
            self._problems[id(problem)] = held
        blob = "|".join(f"{m}:{mp.model_dump_json()}" for m, mp in plan.modules.items())
        return held[1] + hashlib.sha256(blob.encode()).hexdigest()

    def get(self, key: str) -> dict[str, Any] | None:
        hit = self._now.get(key)
        if hit is None:
            hit = self._last.pop(key, None)
            if hit is not None:
                self._now[key] = hit
        return hit

    def put(self, key: str, value: dict[str, Any]) -> None:
        self._now[key] = value

    def rotate(self) -> None:
        """End an epoch: what was not used since the previous rotation is dropped."""
        self._last, self._now = self._now, {}
        self._failed_last, self._failed_now = self._failed_now, {}
        self._problems.clear()

    def __len__(self) -> int:
        return len(self._now) + len(self._last)


#: The cache :func:`plan_fleet` uses by default (one per process: the control loop's epochs share it).
REALISATIONS = RealisationCache()
