"""What a module plan promises before its schedule is built: Theorem 1's per-group worst case and the
round-robin dispatch of the baselines."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import TYPE_CHECKING

from planner.dispatch.schedule import DispatchError
from planner.latency import EPS

if TYPE_CHECKING:
    from collections.abc import Mapping

    from planner.models import ModulePlan

__all__ = ["rr_pattern", "theorem1_latencies"]


# --------------------------------------------------------------------------- Theorem 1


def theorem1_latencies(module_plan: ModulePlan, prices: Mapping[str, float] | None = None) -> list[float]:
    """Theorem 1 per group: ``d_g + o_g + b_g / w_g`` (``o_g`` the group's latency-only overhead,
    ``overhead_s``) with ``w_g`` the rate of all groups whose throughput-cost ratio ``t/p`` (device time
    only) is no larger than group ``g``'s. Without ``prices`` the list order is the TC order and
    consecutive groups with the same configuration share ``w``."""
    gs = module_plan.groups
    rates = [g.machines * g.rate_per_machine for g in gs]
    if prices is not None:
        ratio = [
            (g.concurrency * g.batch / g.duration_s if g.duration_s > 0 else math.inf) / prices[g.hardware]
            for g in gs
        ]
        w = [
            sum(r for r, q in zip(rates, ratio, strict=True) if q <= ratio[i] * (1 + EPS))
            for i in range(len(gs))
        ]
    else:
        key = [(g.hardware, g.batch, g.concurrency, g.duration_s, g.overhead_s) for g in gs]
        w = []
        for i in range(len(gs)):
            j = i
            while j > 0 and key[j - 1] == key[i]:
                j -= 1
            w.append(sum(rates[j:]))
    return [
        g.duration_s + g.overhead_s + g.batch / wi if wi > 0 else math.inf
        for g, wi in zip(gs, w, strict=True)
    ]


# --------------------------------------------------------------------------- round-robin baseline


def rr_pattern(module_plan: ModulePlan, max_len: int = 100_000) -> list[tuple[int, int]]:
    """Round-robin per request (the baselines' dispatch): a smooth weighted cycle of ``(group, machine)``
    proportional to the machines' rates. Each machine then collects its own batch at its own rate, so a
    full machine's worst case is ``b / f + d = 2d`` (for c = 1)."""
    weights: list[tuple[int, int, float]] = [
        (gi, m, g.rate_per_machine)
        for gi, g in enumerate(module_plan.groups)
        for m in range(g.machines)
        if g.rate_per_machine > 0
    ]
    if not weights:
        raise DispatchError("no machine has a positive rate")
    f_min = min(w for _, _, w in weights)
    ratios = [Fraction(f / f_min).limit_denominator(1000) for _, _, f in weights]
    den = math.lcm(*(r.denominator for r in ratios))
    exact = all(
        abs(float(r) - f / f_min) <= 1e-9 * f / f_min for r, (_, _, f) in zip(ratios, weights, strict=True)
    )
    if exact and sum(int(r * den) for r in ratios) <= max_len:
        counts = [int(r * den) for r in ratios]
    else:
        total = sum(f for _, _, f in weights)
        counts = [max(1, round(f * max_len / total)) for _, _, f in weights]
    keyed: list[tuple[float, int, int]] = []
    for (gi, m, _), n in zip(weights, counts, strict=True):
        keyed.extend(((k + 0.5) / n, gi, m) for k in range(n))
    keyed.sort()
    return [(gi, m) for _, gi, m in keyed]
