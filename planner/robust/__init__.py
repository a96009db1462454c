"""Dispatch-aware planning: plans whose worst-case figures are what the time-window dispatch realises.

:func:`planner.solve.solve` plans under Theorem 1 (``d + b / w`` per machine). The time-window dispatch
of :mod:`planner.dispatch` realises that bound for a root module with one configuration under uniform
arrivals, but not in general (docs/dispatch.md, "What the dispatch realises"):

- **several configurations**: contiguous windows cannot always give every machine Theorem 1; the
  schedule's own exact steady-state bound (:attr:`DispatchSchedule.worst_case_latency_s`) can be larger;
- **bursts**: the children of one parent batch appear at once and are dispatched ``1 / rho_p`` apart
  (``rho_p`` = the child's spread rate for that parent, at most its capacity rate ``min(W, W')``), so
  the last of a burst of ``n`` waits ``(n - 1) / rho_p`` more than a uniform arrival;
- **overlapping bursts**: a burst still being spread when the next parent batch completes makes the two
  share windows, a window then receives more than its batch and the machine falls behind. The spread is
  stateless (any worker, no shared counter), so the only protection is capacity: a spread rate of at
  least the parent's required rate (the largest burst over the time to the next parent completion,
  from the parent's exact periodic completion pattern) keeps one parent's requests ``1 / rho_p`` apart;
- **joins** (several parents): each parent's stream gets its own spread rate, a whole number ``a_p`` of
  a window's ``b`` places (``rho_p <= capacity * a_p / b``, ``sum_p a_p <= b``), so whatever the phases
  of the streams a window of ``b / W'`` seconds receives at most ``sum_p ceil(b rho_p / W') <= b``
  requests (:func:`share_spread_rates`, :func:`required_capacity`).

:func:`realise` computes all four for a plan. :func:`solve_dispatchable` solves, realises, and repairs
until the realised plan is feasible: a child below its required capacity is re-planned at that rate
(its headroom), and a path whose realised worst case exceeds the SLO makes the next round solve with
the SLO seen by the splitter shrunk by that path's excess over its Theorem-1 figure. The repair chooses
every module under Theorem 1 and pays afterwards for what the dispatch realises, which costs more than
it must: a parent whose windows are sparse or rounded up makes its children dearer than the parent
saves, and one global shrink takes slack from every path. So a branch and bound over realised plans
(:class:`RealisedSearch`) then looks for a cheaper realisable plan, choosing the modules in
topological order with each one's realised figures known exactly once its parents are chosen. The
returned plan's ``worst_case_latency_s`` figures are the realised ones; each module's
``dispatch.spread_rates`` maps a parent to the rate its workers spread this module's requests at
(:func:`planned_spread_rates`).

Modules: :mod:`.spread` (spread rates and capacities), :mod:`.realisation` (a plan's realisation),
:mod:`.search` (attempts), :mod:`.staircase` (branch and bound over realised plans), :mod:`.dispatchable`
(:func:`solve_dispatchable`).
"""

from __future__ import annotations

from planner.robust.dispatchable import (
    DEFAULT_CHILD_HEADROOM,
    DEFAULT_SEARCH_WORK,
    FIRST_FOUND_KEY,
    QUICK_HEADROOM,
    QUICK_SLO,
    solve_dispatchable,
)
from planner.robust.realisation import FAN_OUT_KEY, Realisation, annotate, realise, schedule_key
from planner.robust.spread import (
    planned_spread_rates,
    required_capacity,
    required_spread_rate,
    share_spread_rates,
)

__all__ = [
    "DEFAULT_CHILD_HEADROOM",
    "DEFAULT_SEARCH_WORK",
    "FAN_OUT_KEY",
    "FIRST_FOUND_KEY",
    "QUICK_HEADROOM",
    "QUICK_SLO",
    "Realisation",
    "annotate",
    "planned_spread_rates",
    "realise",
    "required_capacity",
    "required_spread_rate",
    "schedule_key",
    "share_spread_rates",
    "solve_dispatchable",
]
