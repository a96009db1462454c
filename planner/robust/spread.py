"""Spread rates: the capacity a child's streams need, and the rate at which a parent's burst must be spread
so that the child's windows never overflow."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from planner.dispatch import DispatchSchedule
    from planner.models import ModulePlan

__all__ = [
    "RATE_STEP",
    "planned_spread_rates",
    "required_capacity",
    "required_spread_rate",
    "share_spread_rates",
]

RATE_STEP = 1e-6  # relative: a raised child rate goes this far above its requirement


def required_capacity(needs: Sequence[float], batches: Sequence[int]) -> float:
    """Smallest capacity rate ``C`` at which streams spread at rates ``needs`` fit every window:
    ``sum_p ceil(b need_p / C) <= b`` for every batch size ``b``. One stream: its rate. Two streams of
    20 req/s and a batch of 3 need 60 req/s, not 40: a window of ``3 / C`` seconds can hold
    ``ceil(60 / C)`` requests of each stream, so one stream must have a single place (``C >= 60``).
    ``C`` is one of the points ``b need_p / a`` (``a = 1..b``), where a stream's count steps."""
    busy = [x for x in needs if x > 0]
    if not busy:
        return 0.0
    if not all(math.isfinite(x) for x in busy):
        return math.inf
    if any(b < len(busy) for b in batches):
        return math.inf  # every stream takes at least one place of a window
    out = 0.0
    for b in batches:
        cands = sorted({b * x / a for x in busy for a in range(1, b + 1)})
        lo, hi = 0, len(cands) - 1  # the count is non-increasing in C, and <= b at the largest point
        while lo < hi:
            mid = (lo + hi) // 2
            if sum(math.ceil(b * x / cands[mid] - 1e-9) for x in busy) <= b:
                hi = mid
            else:
                lo = mid + 1
        out = max(out, cands[lo])
    return out


def share_spread_rates(
    needs: Mapping[str, float],
    bursts: Mapping[str, int],
    batches: Sequence[int],
    capacity: float,
    *,
    leaf: bool,
) -> dict[str, float] | None:
    """Per-parent spread rates whose streams fit the windows (:func:`_fits`), each at least the
    parent's ``needs`` rate; ``None`` when they do not fit (``capacity`` < :func:`required_capacity`).

    For each batch size ``b``, parent ``p`` gets ``a_p`` of the window's ``b`` places, at least what its
    need takes (``ceil(b need_p / capacity)``), and ``rho_p = capacity * a_p / b`` (a hair below, so
    float rounding never puts ``b + 1`` requests in a window; the smallest over the batch sizes). A leaf
    gives the spare places one at a time to the parent with the largest burst term ``(n_p - 1) / a_p``
    (shortest bursts: the greedy minimises the largest term); a module with children keeps every stream
    at its need (a sparser stream needs less of its own children's capacity, like one parent's). A
    parent whose windows send no child (``bursts[p] == 0``) takes no place."""
    top = capacity * (1 - RATE_STEP)
    busy = [p for p in needs if bursts[p] >= 1]
    rates = dict.fromkeys(needs, top)
    if not busy:
        return rates
    if top <= 0 or not all(math.isfinite(needs[p]) for p in busy):
        return None
    tol = 1e-9 * capacity
    for b in batches:
        units = {p: max(1, math.ceil(b * (needs[p] - tol) / top - 1e-9)) for p in busy}
        spare = b - sum(units.values())
        if spare < 0:
            return None
        if leaf and len(busy) == 1:
            units[busy[0]] = b
        elif leaf:
            for _ in range(spare):
                p = max(busy, key=lambda q: ((bursts[q] - 1) / units[q], needs[q] / units[q]))
                units[p] += 1
        for p in busy:
            rates[p] = min(rates[p], top * units[p] / b)
    if not leaf:
        for p in busy:
            rates[p] = min(rates[p], max(needs[p], 1e-9) * (1 + RATE_STEP))
    return rates


def _window_arrays(sched: DispatchSchedule) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per window of one period: length, completion offset after the window's start (length + wait +
    duration), completion time, batch size."""
    start, end, wait, dur, batch = sched.window_arrays()
    length = end - start
    return length, length + wait + dur, end + wait + dur, batch


def required_spread_rate(
    parent: DispatchSchedule,
    per_request: float,
    parent_spacing_rate: float | Sequence[float],
    *,
    spaced: bool = True,
) -> tuple[float, int]:
    """(spread rate a child needs so that no two of its bursts from ``parent`` overlap, largest burst).

    ``parent_spacing_rate``: the parent's own requests form streams of rate ``r`` each (a root: its
    rate; a child: its spread rate, one per parent of its own). A child's streams are *spaced*: its
    parents' workers dispatch them at least ``1 / r`` apart (the spread, whose bursts never overlap).
    A root's stream is not (``spaced=False``): frames arrive when cameras send them, and what the
    front enforces is a count per window (``A_k`` below, ``front/admission.py``); for a
    stream at least ``1 / r`` apart that count is what a window can hold, so the counts are the same
    either way. The parent's batches complete at ``end + wait + d`` of its windows,
    periodically (constant durations; an empty window completes nothing, which only widens the gaps).
    Window ``k`` holds at most ``A_k = min(b_k, sum_r ceil(r * length_k))`` requests and sends at most
    ``n_k = ceil(per_request * A_k)`` children, spread over ``n_k / W_s`` seconds, which must end before
    the next non-empty completion, at least ``gap_k`` later: the next completion of the pattern and,
    with one configuration and one spaced stream (completion order = arrival order), also
    ``1 / r - length_k`` (the next request arrives ``1 / r`` after the last one of window ``k``; an
    unspaced stream can put a request at the start of the next window). Returns ``max_k n_k / gap_k``.

    The answer is kept in the parent schedule's memo (:meth:`DispatchSchedule.derived`) under every
    other input (the period, the fan-out and the stream rates, compared as floats: ``-0.0`` and ``0.0``
    give the same counts and the same error), so the rounds of a solve and the shapes of a plan that
    keep the parent's schedule and streams get it without computing it again."""
    streams = (
        (float(parent_spacing_rate),)
        if isinstance(parent_spacing_rate, int | float)
        else tuple(float(r) for r in parent_spacing_rate)
    )
    memo = parent.derived()
    key = ("spread", parent.period_s, float(per_request), streams, spaced)
    hit = memo.get(key)
    if hit is None:
        small = len(parent.windows) <= _SMALL_PATTERN and all(map(math.isfinite, (*streams, per_request)))
        compute = _required_spread_rate_small if small else _required_spread_rate
        hit = memo[key] = compute(parent, float(per_request), streams, spaced)
    rate, burst = hit
    return rate, burst


#: Largest parent period (windows) whose completion pattern :func:`required_spread_rate` reads in plain
#: Python (:func:`_required_spread_rate_small`): numpy costs microseconds per call on the few windows
#: most parents have (one group of 1-8 windows).
_SMALL_PATTERN = 96


def _required_spread_rate_small(
    parent: DispatchSchedule, per_request: float, streams: tuple[float, ...], spaced: bool = True
) -> tuple[float, int]:
    """:func:`_required_spread_rate` in plain Python floats: the same IEEE operations in the same order
    (numpy's ``mod`` is Python's ``%`` on floats, its stable ``argsort`` a stable ``sorted``, its
    ``minimum``/``maximum`` conditionals that keep the same operand), so the same answer, bit for bit."""
    start, end, wait, dur, batch = parent.window_lists()
    period = parent.period_s
    length = [e - s for e, s in zip(end, start, strict=True)]
    n: list[float] = []
    for ln, b in zip(length, batch, strict=True):
        places = 0.0
        for r in streams:
            places += float(math.ceil(r * ln - 1e-9))
        held = b if b <= places else places  # np.minimum (no NaN here)
        n.append(float(math.ceil(per_request * held - 1e-9)))
    if not any(x >= 1 for x in n):
        return 0.0, 0
    x = [((e + w) + d) % period for e, w, d in zip(end, wait, dur, strict=True)]
    order = sorted(range(len(x)), key=x.__getitem__)
    gap = [0.0] * len(x)
    for pos in range(len(order) - 1):
        gap[order[pos]] = x[order[pos + 1]] - x[order[pos]]
    gap[order[-1]] = (x[order[0]] + period) - x[order[-1]]
    if spaced and len(parent.window_groups()) == 1 and len(streams) == 1:
        offset = [(ln + w) + d for ln, w, d in zip(length, wait, dur, strict=True)]
        lead = 1.0 / streams[0] + min(o - ln for o, ln in zip(offset, length, strict=True))
        for k, o in enumerate(offset):
            alt = lead - o
            gap[k] = gap[k] if gap[k] >= alt else alt  # np.maximum
    need = -math.inf
    for nk, g in zip(n, gap, strict=True):
        if nk >= 1:
            v = nk / (g if g >= 1e-300 else 1e-300) if g > 1e-12 else math.inf
            need = need if need >= v else v
    return need, int(max(n))


def _required_spread_rate(
    parent: DispatchSchedule, per_request: float, streams: tuple[float, ...], spaced: bool = True
) -> tuple[float, int]:
    """:func:`required_spread_rate`, computed (numpy: the parents with long periods)."""
    length, offset, done, batch = _window_arrays(parent)
    places = np.zeros_like(length)
    for r in streams:
        places += np.ceil(r * length - 1e-9)
    held = np.minimum(batch, places)
    n = np.ceil(per_request * held - 1e-9)
    period = parent.period_s
    x = np.mod(done, period)
    order = np.argsort(x, kind="stable")
    xs = x[order]
    gap_sorted = np.empty_like(xs)
    gap_sorted[:-1] = np.diff(xs)
    gap_sorted[-1] = xs[0] + period - xs[-1]
    gap = np.empty_like(gap_sorted)
    gap[order] = gap_sorted
    if spaced and len(parent.window_groups()) == 1 and len(streams) == 1:
        gap = np.maximum(gap, 1.0 / streams[0] + float(np.min(offset - length)) - offset)
    busy = n >= 1
    if not np.any(busy):
        return 0.0, 0
    with np.errstate(divide="ignore"):
        need = np.where(gap[busy] > 1e-12, n[busy] / np.maximum(gap[busy], 1e-300), math.inf)
    return float(np.max(need)), int(np.max(n))


def planned_spread_rates(module_plan: ModulePlan) -> dict[str, float]:
    """Parent -> the rate at which that parent's workers spread a burst of this module's requests
    (``k``-th at ``completion + k / rate``), as a dispatch-aware plan records it
    (``dispatch.spread_rates``); empty for other plans (callers then use
    :func:`planner.dispatch.planned_spread_rate`, one rate for every parent)."""
    info = (module_plan.model_extra or {}).get("dispatch")
    rates = info.get("spread_rates") if isinstance(info, dict) else None
    if not isinstance(rates, dict):
        return {}
    return {str(p): float(r) for p, r in rates.items() if isinstance(r, int | float) and r > 0}
