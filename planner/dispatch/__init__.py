"""Throughput-cost (TC) dispatch from a stateless front: a plan becomes a periodic schedule of time windows.

Every request of a module that arrives inside window ``k`` belongs to one batch, executed by one machine
when the window closes (docs/design.md §4, "time windows"). The front needs no shared counter: it maps the
arrival time to a window with :meth:`DispatchSchedule.slot_at` (a bisect on precomputed offsets).

Construction (docs/dispatch.md has the argument and the measurements):

- A module's groups run ``machines`` machines at ``rate_per_machine`` req/s (dummy load included); the
  planned rate is ``W = sum n_g f_g``. Machine ``i`` needs ``f_i / b_i`` batches per second.
- The schedule repeats with period ``P``. Each machine gets an integer number of windows per period,
  ``N_i = ceil(f_i P / b_i)`` capped at its throughput ``floor(c_i P / d_i)``; ``P`` is chosen (exact
  rational hyperperiod when one exists, else the best multiple of the longest batch interval) so that the
  rounding error is smallest. The effective rate ``W' = sum N_i b_i / P`` is ``>= W`` unless a cap binds.
- A window of machine ``i`` lasts ``b_i / W'``: at the planned rate the batch fills exactly when the window
  closes, and the windows of one period tile ``[0, P)`` exactly.
- The order of windows inside the period is built group by group (machines of one group take turns) with
  earliest-deadline-first among the groups whose machine will be free (up to the group's Theorem-1 slack)
  when the window closes. The steady-state queue wait of every window is then computed exactly (constant
  durations, full windows), so :attr:`DispatchSchedule.worst_case_latency_s` is the schedule's own exact
  bound, to compare with Theorem 1's ``d_i + b_i / w_i``.

Modules: :mod:`.schedule` (the schedule a front reads), :mod:`.bounds` (Theorem 1, round robin),
:mod:`.period` (period and counts), :mod:`.order` (window order), :mod:`.build` (plan to schedule),
:mod:`.windows` (spread rate, window caps, origin).
"""

from __future__ import annotations

from planner.dispatch.bounds import rr_pattern, theorem1_latencies
from planner.dispatch.build import build_schedule, build_schedules
from planner.dispatch.schedule import DispatchError, DispatchSchedule, Slot, Window, WindowTable
from planner.dispatch.windows import PHASE_KEY, planned_spread_rate, root_window_caps, schedule_origin

__all__ = [
    "PHASE_KEY",
    "DispatchError",
    "DispatchSchedule",
    "Slot",
    "Window",
    "WindowTable",
    "build_schedule",
    "build_schedules",
    "planned_spread_rate",
    "root_window_caps",
    "rr_pattern",
    "schedule_origin",
    "theorem1_latencies",
]
