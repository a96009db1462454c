"""The dispatch-aware solve: a plain solve, repaired round by round until its realisation meets the SLO,
then refined and searched for a cheaper realised plan."""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from planner.errors import InfeasibleError
from planner.latency import EPS
from planner.policies import get_policy
from planner.robust.realisation import annotate
from planner.robust.search import Attempt, DispatchSearch, Key
from planner.robust.spread import RATE_STEP
from planner.robust.staircase import RealisedSearch, adopt_picks
from planner.robust.stretch import STRETCHES, stretch_windows
from planner.solve import solve
from planner.split import topology

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from planner.dispatch import DispatchSchedule
    from planner.models import Objective, Plan, ProblemSpec

__all__ = [
    "DEFAULT_CHILD_HEADROOM",
    "DEFAULT_SEARCH_WORK",
    "FIRST_FOUND_KEY",
    "QUICK_HEADROOM",
    "QUICK_SLO",
    "solve_dispatchable",
]

#: Minimum extra planned rate of every child module, as a fraction of its expected rate, on top of
#: what :func:`required_spread_rate` asks for (timing noise of a real data plane). docs/dispatch.md,
#: "Child headroom", has the measurements behind the value.
DEFAULT_CHILD_HEADROOM = 0.0

#: Units of work (module options examined plus module plans realised) the branch and bound over
#: realised plans spends on one problem before it keeps the cheapest plan found so far. On the 300
#: generated problems of seeds 0-2 (billed $/h: plain 1366.4, repair only 1714.3) it finds 1659.9 at
#: 30, 1649.8 at 60, 1647.4 at 120 and 1625.8 without a limit, for about +7 % (30-60), +12 % (120)
#: and +144 % (no limit) of a cold fleet epoch's function calls; 239 of the 300 need fewer than 60.
DEFAULT_SEARCH_WORK = 60

#: Plan extra of a :func:`solve_dispatchable` plan made with ``first_found`` (not the full solve's plan).
FIRST_FOUND_KEY = "first_found"

#: Where ``first_found`` starts: children planned this much above their rate (a fraction) and the
#: splitter SLO this fraction of the SLO, so that the first round realises more often. On the 100
#: generated problems of seed 0 (CPU of the solves, one process): 159 rounds instead of 252 starting
#: from the plain attempt, 0.50-0.58 s instead of 0.93 s, 566.1 $/h instead of 554.2 (the full solve:
#: 518.9); seeds 1 and 2: 0.67 s against 0.96-1.0 s.
QUICK_HEADROOM = 0.2

QUICK_SLO = 0.9

#: Bisection steps spent, once a realisable plan is found, looking for a cheaper one.
_REFINE_STEPS = 3

_SLO_STEP = 1e-7  # seconds: a shrink goes at least this far below the previous splitter SLO


def _ancestors(problem: ProblemSpec) -> dict[str, set[str]]:
    topo = topology(problem)
    parents = topo.parents
    out: dict[str, set[str]] = {}
    for m in topo.order:
        out[m] = set(parents[m]).union(*(out[p] for p in parents[m]))
    return out


def _repair(attempts: list[Attempt], problem: ProblemSpec) -> tuple[dict[str, float], dict[str, Key]]:
    """The next variant for children below their required spread rate, upstream first (a child below a
    module that changes now is left for the next round: its requirement changes with it). A parent
    with several configurations completes batches at irregular times (bursts can nearly coincide), so
    it is restricted to the configuration that carries most of its rate (its multi-configuration
    combination is forbidden); a child of a one-configuration parent is planned at the rate its spread
    needs (the plan's W is at least the rate, the spread rate min(W, W') can be a little lower, so the
    rate is raised by the shortfall ratio). Raising a child changes its parent's plan a little, and so
    its requirement: a child raised again overshoots by 2 %, 4 %, 8 %... so the chase ends."""
    last = attempts[-1]
    rates, only = dict(last.rates), dict(last.only)
    parents, ancestors = topology(problem).parents, _ancestors(problem)
    changed: set[str] = set()
    for child in (m for m in topology(problem).order if m in last.short):
        if ancestors[child] & (changed | set(last.short)):
            continue
        multi = [
            p
            for p in parents[child]
            if p not in last.only
            and sum(1 for g in last.plan.modules[p].groups if g.rate_per_machine > 0) > 1
        ]
        for p in multi:
            top = max(last.plan.modules[p].groups, key=lambda g: g.machines * g.rate_per_machine)
            only[p] = (top.hardware, top.batch, top.concurrency)
            changed.add(p)
        if not multi and math.isfinite(last.short[child]):
            need = last.short[child]
            ratio = need / max(last.real[child].capacity_rate, 1e-12)
            again = sum(1 for a in attempts if child in a.short) - 1
            overshoot = 0.01 * 2**again if again > 0 else RATE_STEP
            rates[child] = max(rates[child] * ratio, need) * (1 + overshoot)
            changed.add(child)
    return rates, only


def _small_join_batches(plan: Plan, joins: Mapping[str, int]) -> bool:
    """Whether a join of ``k`` parents uses a configuration with a batch below ``k``."""
    return any(g.batch < k for m, k in joins.items() for g in plan.modules[m].groups)


def _relax(search: DispatchSearch, good: Attempt, floor: Mapping[str, float], max_rounds: int) -> None:
    """Children raised in earlier rounds may need less once the plan around them settled: plan them
    for what the realisable plan requires now (never below ``floor``, the rate with the minimum
    headroom) and keep the result when it is realisable (and cheaper: :meth:`DispatchSearch.best` decides)."""
    current = good
    while len(search.attempts) < max_rounds:
        lower = {
            m: max(floor[m], r.required_rate * (1 + RATE_STEP))
            for m, r in current.real.items()
            if m in floor and current.rates[m] > max(floor[m], r.required_rate) * 1.01
        }
        if not lower:
            return
        try:
            a = search.attempt(
                current.splitter_slo, {**current.rates, **lower}, current.only, stretch=current.stretch
            )
        except InfeasibleError:
            return
        if not a.ok or a.cost >= current.cost - EPS:
            return
        current = a


def _rounds(
    search: DispatchSearch, last: Attempt, rates: dict[str, float], only: dict[str, Key], max_rounds: int
) -> None:
    """Solve again from ``last`` until an attempt realises or ``max_rounds`` attempts were made: a child
    short of its spread rate is raised (:func:`_repair`); else the splitter SLO is lowered by the worst
    missing path's excess (at ``rates`` and ``only``, the variant of the rounds so far)."""
    problem = search.problem
    while not last.ok and len(search.attempts) < max_rounds:
        nxt_slo = last.splitter_slo
        if last.short:
            rates, only = _repair(search.attempts, problem)
            if (rates, only) == (last.rates, last.only):
                return  # nothing a rate can fix (a requirement without bound)
        else:  # the same excess on a plan whose paths fit slo - excess fits the SLO
            nxt_slo = min(problem.slo_s - last.excess, last.splitter_slo - _SLO_STEP)
        try:
            last = search.attempt(nxt_slo, rates, only, stretch=last.stretch)
        except InfeasibleError:
            return


def _sub_search(search: DispatchSearch) -> DispatchSearch:
    """A search of its own for ``search``'s problem (a repair's chase starts afresh), sharing its module
    optima and schedules."""
    sub = DispatchSearch(
        search.problem,
        policy=search.policy,
        objective=search.objective,
        fan_out=search.fan_out,
        schedules=search.schedules,
        should_stop=search.should_stop,
    )
    sub.billed, sub.solved = search.billed, search.solved
    return sub


def _variants(
    search: DispatchSearch,
    plain: Attempt,
    rates: dict[str, float],
    parents: Mapping[str, Sequence[str]],
    child_headroom: float,
    max_rounds: int,
) -> list[tuple[DispatchSearch, Attempt]]:
    """The rounds unstretched (in ``search``), then with each of :data:`STRETCHES`' longer windows above
    the children (each in a search of its own, sharing its module optima and schedules): per variant
    that realises, its search and its cheapest realisable attempt. A stretch that changes no module of
    the plain plan is skipped (its rounds would be the unstretched ones), and so are the stretches left
    once a variant is at the proven plain optimum or the caller's budget (``should_stop``) is spent with
    a realisable plan in hand."""
    out: list[tuple[DispatchSearch, Attempt]] = []
    for fraction in STRETCHES:
        if fraction and out and search.should_stop is not None and search.should_stop():
            break  # out of the caller's budget with a realisable plan in hand
        if fraction and stretch_windows(search.problem, plain.plan, fraction) is plain.plan:
            continue
        sub = _sub_search(search) if fraction else search
        good = _variant_rounds(sub, plain, rates, fraction, parents, child_headroom, max_rounds)
        if good is not None:
            out.append((sub, good))
            if _at_bound(plain, good):
                break  # nothing realisable is cheaper than the proven plain optimum
    return out


def _at_bound(plain: Attempt, good: Attempt) -> bool:
    """Whether ``good`` is at the proven optimum of the plain problem, which no realisable plan beats."""
    return (plain.plan.model_extra or {}).get("proven_optimal") is True and good.cost <= plain.cost + EPS


def _variant_rounds(
    search: DispatchSearch,
    plain: Attempt,
    rates: dict[str, float],
    fraction: float,
    parents: Mapping[str, Sequence[str]],
    child_headroom: float,
    max_rounds: int,
) -> Attempt | None:
    """The cheapest realisable attempt of the rounds of ``search`` (no attempt yet but, unstretched,
    ``plain``) from the problem's SLO at ``rates`` with the windows stretched by ``fraction``
    (:func:`stretch_windows`), else of the quick mode's start; None when neither realises."""
    problem = search.problem
    if fraction:
        try:
            last = search.attempt(problem.slo_s, rates, {}, stretch=fraction)
        except InfeasibleError:
            last = None
    else:
        reuse = child_headroom == 0 and not _small_join_batches(plain.plan, search.joins)
        try:
            last = plain if reuse else search.attempt(problem.slo_s, rates, {})
        except InfeasibleError:
            last = plain
    if last is not None:
        _rounds(search, last, rates, {}, max_rounds)
    good = search.best()
    if good is None:  # the quick mode's start (children raised, the splitter SLO lowered) realises more often
        good = _quick_start(search, parents, max_rounds, (fraction,))
    return good


def _first_found(
    problem: ProblemSpec,
    policy: str,
    objective: Objective,
    fan_out: Mapping[tuple[str, str], float] | None,
    schedules: dict[tuple[object, ...], DispatchSchedule] | None,
    parents: Mapping[str, Sequence[str]],
    max_rounds: int,
    should_stop: Callable[[], bool] | None = None,
) -> tuple[Attempt | None, Plan | None]:
    """The first realisable attempt of the rounds started at ``QUICK_HEADROOM`` and ``QUICK_SLO``
    (``round``: how many it took), or None; and the plain problem's plan (:func:`~planner.solve.solve`
    on the unchanged problem, not realised: its certified bound bounds the quick plan), None when the
    plain problem is infeasible (the rounds are then not tried)."""
    search = DispatchSearch(
        problem,
        policy=policy,
        objective=objective,
        fan_out=fan_out,
        schedules=schedules,
        should_stop=should_stop,
    )
    try:  # the rounds' solves share its module optima (the search's BilledCache)
        plain = solve(problem, policy, objective, cache=search.billed, should_stop=should_stop)
    except InfeasibleError:
        return None, None
    return _quick_rounds(search, parents, max_rounds), plain


def _quick_rounds(
    search: DispatchSearch,
    parents: Mapping[str, Sequence[str]],
    max_rounds: int,
    stretches: Sequence[float] = STRETCHES,
) -> Attempt | None:
    """The first realisable attempt of the rounds of ``search`` (with no attempt yet) started at
    ``QUICK_HEADROOM`` and ``QUICK_SLO`` (``round``: how many it took), or None."""
    problem = search.problem
    rates = {m: s.rate * (1 + QUICK_HEADROOM) if parents[m] else s.rate for m, s in problem.modules.items()}
    for fraction in stretches:  # unstretched first; longer windows above the children when it fails
        if fraction and search.should_stop is not None and search.should_stop():
            return None  # out of the caller's budget: the full solve's unstretched rounds come next
        sub = search if fraction == 0.0 else _sub_search(search)
        try:
            first = sub.attempt(problem.slo_s * QUICK_SLO, rates, {}, stretch=fraction)
        except InfeasibleError:
            return None
        _rounds(sub, first, rates, {}, max_rounds)
        if sub is not search:
            search.attempts.extend(sub.attempts)
        found = next((a for a in search.attempts if a.ok), None)
        if found is not None:
            return replace(found, round=search.attempts.index(found) + 1)
    return None


def _quick_start(
    search: DispatchSearch,
    parents: Mapping[str, Sequence[str]],
    max_rounds: int,
    stretches: Sequence[float] = STRETCHES,
) -> Attempt | None:
    """:func:`_quick_rounds` for the problem of ``search``, whose rounds found nothing: a search of its
    own (the repair's chase starts afresh), sharing the module optima and schedules; its attempts are
    added to ``search``'s."""
    quick = _sub_search(search)
    found = _quick_rounds(quick, parents, max_rounds, stretches)
    search.attempts.extend(quick.attempts)
    return found


def solve_dispatchable(
    problem: ProblemSpec,
    *,
    policy: str = "skinflint",
    objective: Objective = "billed",
    child_headroom: float = DEFAULT_CHILD_HEADROOM,
    fan_out: Mapping[tuple[str, str], float] | None = None,
    max_rounds: int = 12,
    schedules: dict[tuple[object, ...], DispatchSchedule] | None = None,
    search_work: int = DEFAULT_SEARCH_WORK,
    first_found: bool = False,
    should_stop: Callable[[], bool] | None = None,
) -> Plan:
    """The cheapest plan found whose dispatch-realised worst cases (:func:`realise`) meet the SLO.

    Children are first planned for ``rate * (1 + child_headroom)``. Each round solves; a child whose
    spread rate is below its requirement is raised to it for the next round; otherwise, while the
    realised plan misses the SLO, the next round solves with the splitter's SLO lowered to the SLO
    minus the worst missing path's excess over its Theorem-1 figure. A realisable plan at the (proven)
    plain optimum is returned as it is: nothing realisable is cheaper. Otherwise a branch and bound over
    realised plans (:class:`RealisedSearch`, for the policies whose module plans are exact billed
    optima: ``skinflint``, ``optimal``; objective ``billed``) looks for a cheaper one, spending at most
    ``search_work`` units (options examined plus plans realised; 0: no search). When it did not finish
    (or does not apply), children raised in earlier rounds are re-planned at what the plan requires and
    up to three bisection rounds between the realisable splitter SLO and the nearest unrealisable one
    above look for a cheaper plan, as the solve did before the search, and the cheapest plan of both is
    kept. A finished search is exact over its own options, not over every plan those refinements can
    reach (of 700 generated problems, seeds 0-6, none came out dearer than the solve without search). The
    plan records the plain optimum (``solve`` on the unchanged problem), the price of realisability and
    what the search did (``dispatch_search``: work, complete, improved, the repaired cost it started
    from; None when there was no search). Raises :class:`~planner.errors.InfeasibleError` when
    ``max_rounds`` solves find no realisable plan, nor ``max_rounds`` more started as ``first_found``'s
    are (or the plain problem is infeasible).

    ``schedules``: where the module schedules the rounds build are kept (:func:`realise`'s ``cache``;
    default a dict of this call's own). A caller that passes one dict gets them back, e.g. to realise
    the plan again after shaping it (:func:`planner.fleet.plan_fleet`) without building them again; it
    changes only the time taken, never the plan.

    ``first_found``: a quick mode, for a caller that must plan many problems at once under a time
    budget and solves them in full later (:func:`planner.fleet.plan_fleet`). The rounds start with
    children at ``QUICK_HEADROOM`` above their rate and the splitter SLO at ``QUICK_SLO`` of the SLO
    (no plain attempt), and the first realisable plan is returned, without the search, the re-planned
    children or the bisections: about 0.6 of the full solve's CPU on generated problems, and about 9 %
    dearer. It records ``first_found: True`` and no plain optimum, but the plain problem is solved (not
    realised; its module optima are shared with the rounds) for its certified bound, so a quick plan
    carries ``lower_bound_per_hour`` and ``proven_gap`` too. When those rounds find nothing, the full
    solve runs.

    ``should_stop``: the caller's budget, given to every round's :func:`~planner.solve.solve` (the
    anytime mode of its large searches: once it returns True each round keeps the best plan it found).
    The plan records ``lower_bound_per_hour``, a certified lower bound on the objective's cost of every
    realisable plan (the plain problem's: a realisable plan is a plain plan), and ``proven_gap``, (cost -
    bound) / cost, 0 when the plan is at the proven plain optimum (it includes the price of
    realisability); both None where no bound is certified (a plain solve without one). A plain solve
    stopped by ``should_stop`` gives the bound its search proved. Why the plain bound holds: every
    realisable plan is a feasible plan of the plain problem with the same billed cost. Its modules are
    planned for at least their rates (children only raised), from subsets of their profiles (a join's
    batches, one configuration), within a splitter SLO of at most the SLO, and each module's realised
    worst case is at least its Theorem-1 figure (:func:`realise_module`: ``max(planned, schedule) +
    burst``), so every path's Theorem-1 sum is within the SLO.
    """
    if max_rounds < 1:
        raise ValueError(f"max_rounds must be >= 1, got {max_rounds}")
    if child_headroom < 0 or not math.isfinite(child_headroom):
        raise ValueError(f"child_headroom must be a finite fraction >= 0, got {child_headroom}")
    if search_work < 0:
        raise ValueError(f"search_work must be >= 0, got {search_work}")
    started, cpu_started = time.perf_counter(), time.process_time()
    parents = topology(problem).parents
    base = {m: s.rate for m, s in problem.modules.items()}
    if first_found:
        quick, bounded = _first_found(
            problem, policy, objective, fan_out, schedules, parents, max_rounds, should_stop
        )
        if quick is not None:
            plan = _assemble(
                problem,
                quick,
                None,
                None,
                bound=None if bounded is None else plain_bound(bounded),
                child_headroom=QUICK_HEADROOM,
                rounds=quick.round,
                solve_ms=(time.perf_counter() - started) * 1000,
                cpu_ms=(time.process_time() - cpu_started) * 1000,
            )
            return plan.model_copy(update={FIRST_FOUND_KEY: True})
    search = DispatchSearch(
        problem,
        policy=policy,
        objective=objective,
        fan_out=fan_out,
        schedules=schedules,
        should_stop=should_stop,
    )
    # raises InfeasibleError when Theorem 1 cannot
    plain = search.attempt(problem.slo_s, base, {}, plain=True)
    rates = {m: r * (1 + child_headroom) if parents[m] else r for m, r in base.items()}
    floor = {m: r for m, r in rates.items() if parents[m]}
    variants = _variants(search, plain, rates, parents, child_headroom, max_rounds)
    if not variants:
        raise InfeasibleError(
            f"infeasible: no dispatch-realisable plan within the SLO of {problem.slo_s:g} s "
            f"after {len(search.attempts)} round(s) (the plain plan's realised worst path is "
            f"{plain.over + problem.slo_s:.4g} s)",
            min_latency_s=plain.over + problem.slo_s,
        )
    good = min((g for _, g in variants), key=lambda a: (a.cost, a.stretch, -a.splitter_slo))
    # a proven plain optimum bounds every realisable plan from below: a plan at it is the cheapest
    at_bound = _at_bound(plain, good)
    finder = None
    # (at the bound, a stretched plan still asks the search for one of its cost with shorter windows)
    if search_work > 0 and _searchable(policy, objective) and (not at_bound or good.stretch):
        try:
            # above a stretched plan the search may find one of the same cost with shorter windows
            bound = good.cost + 2 * EPS if good.stretch else good.cost
            finder = RealisedSearch(search, bound, child_headroom, search_work)
        except InfeasibleError:  # a join without a batch for each parent: the repair's plans only
            finder = None
    picks = finder.run() if finder is not None else None
    if not at_bound and (finder is None or not finder.complete):
        for sub, good_f in variants:
            _relax(sub, good_f, floor, max_rounds)
            _refine(sub, sub.best() or good_f, max_rounds)
    for sub, _ in variants:
        if sub is not search:
            search.attempts.extend(sub.attempts)
    found = adopt_picks(search, good, picks) if picks is not None else None
    searched = None
    if finder is not None:
        searched = {
            "work": finder.work,
            "complete": finder.complete,
            "improved": found is not None and found.ok,
            "repaired_cost_per_hour": good.cost,
        }
    best = search.best()
    assert best is not None
    if best.stretch and best.solved is not None:  # the same machines with their windows unstretched,
        search.adopt(best.splitter_slo, best.rates, best.only, best.solved)  # kept at equal cost if ok
        best = search.best()
        assert best is not None
    return _assemble(
        problem,
        best,
        plain,
        searched,
        bound=plain_bound(plain.plan),
        child_headroom=child_headroom,
        rounds=len(search.attempts),
        solve_ms=(time.perf_counter() - started) * 1000,
        cpu_ms=(time.process_time() - cpu_started) * 1000,
    )


def _refine(search: DispatchSearch, good: Attempt, max_rounds: int) -> None:
    """Bisect the splitter SLO between the realisable attempt and the nearest unrealisable one above it
    (same child rates): a larger splitter SLO can only make the Theorem-1 optimum cheaper."""
    above = [
        a.splitter_slo
        for a in search.attempts
        if not a.ok and a.same_variant(good) and a.splitter_slo > good.splitter_slo
    ]
    if not above:
        return
    lo, hi = good.splitter_slo, min(above)
    for _ in range(_REFINE_STEPS):
        if len(search.attempts) >= max_rounds or hi - lo < 1e-6:
            return
        mid = (lo + hi) / 2
        try:
            a = search.attempt(mid, good.rates, good.only, stretch=good.stretch)
        except InfeasibleError:
            return
        if a.ok:
            lo = mid
        else:
            hi = mid


def _searchable(policy: str, objective: Objective) -> bool:
    """Whether :class:`RealisedSearch` applies to ``policy``: one whose module plans are exact billed
    optima under Theorem 1 over every configuration (the search's options are such plans)."""
    pol = get_policy(policy)
    return (
        objective == "billed"
        and pol.module == "exact"
        and pol.model == "tc"
        and pol.batching
        and pol.hardware == "all"
    )


def plain_bound(plain: Plan) -> float | None:
    """A certified lower bound on the objective's optimum of the plain problem ``plain`` was solved for:
    the bound its large search proved (None where it certified none), else its cost when it is proven
    optimal; None otherwise."""
    extra = plain.model_extra or {}
    if "lower_bound_per_hour" in extra:
        bound = extra["lower_bound_per_hour"]
        return None if bound is None else float(bound)
    if extra.get("proven_optimal") is True:
        return plain.billed_per_hour if plain.objective == "billed" else plain.cost_per_hour
    return None


def _gap_figures(best: Attempt, bound: float | None) -> dict[str, Any]:
    """The realised plan's certified bound and proven gap (module doc of :func:`solve_dispatchable`),
    from ``bound``, a certified lower bound on the plain problem's optimum (:func:`plain_bound`)."""
    if bound is None:
        return {"lower_bound_per_hour": None, "proven_gap": None}
    bound = min(bound, best.cost)
    gap = max(0.0, (best.cost - bound) / best.cost) if best.cost > 0 else 0.0
    return {"lower_bound_per_hour": bound, "proven_gap": gap}


def _plain_figures(problem: ProblemSpec, best: Attempt, plain: Attempt | None) -> dict[str, Any]:
    """What a plan records of the plain optimum (None each without a plain attempt)."""
    if plain is None:
        keys = ("plain_cost_per_hour", "plain_billed_per_hour", "plain_realised_worst_path_s")
        return {**dict.fromkeys(keys), "price_of_realisability": None}
    return {
        "plain_cost_per_hour": plain.plan.cost_per_hour,
        "plain_billed_per_hour": plain.plan.billed_per_hour,
        "plain_realised_worst_path_s": plain.over + problem.slo_s,
        "price_of_realisability": (best.cost - plain.cost) / plain.cost if plain.cost > 0 else 0.0,
    }


def _assemble(
    problem: ProblemSpec,
    best: Attempt,
    plain: Attempt | None,
    searched: dict[str, Any] | None,
    *,
    bound: float | None,
    child_headroom: float,
    rounds: int,
    solve_ms: float,
    cpu_ms: float,
) -> Plan:
    parents = topology(problem).parents
    plan = annotate(problem, best.plan, best.real)
    modules = {
        name: mp.model_copy(
            update={
                "child_headroom": child_headroom if parents[name] else 0.0,
                "planned_for_rate": best.rates[name],
                "single_config": name in best.only,
            }
        )
        for name, mp in plan.modules.items()
    }
    return plan.model_copy(
        update={
            "modules": modules,
            "solve_ms": solve_ms,
            "solve_cpu_ms": cpu_ms,
            "splitter_slo_s": best.splitter_slo,
            "dispatch_rounds": rounds,
            "child_headroom": child_headroom,
            **_plain_figures(problem, best, plain),
            **_gap_figures(best, bound),
            "dispatch_search": searched,
        }
    )
