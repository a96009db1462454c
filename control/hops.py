"""Measured hops: each module is planned with the hop that really delivers its requests.

A module's worst case counts the hop that brings it its requests (SQS send, delivery, receive) as
latency (``overhead_s`` of its profile entries, :func:`control.problems.adjust_profiles`). The workers
measure every first delivery (``HopDelayMs`` and its histogram ``HopDelayBucket``, core/hops.py), and
each epoch the controller reads the histogram of every (app, module) over the rate window
(:class:`core.adapters.rates.HopDelays`) and decides here, without I/O, the hop each module is planned
with:

- fewer than ``min_samples`` deliveries in the window: the hop stays what it was (the cold-start
  default :attr:`control.config.ControlConfig.hop_overhead_s` until a module was ever measured): a p99
  of a few deliveries is their maximum, and a quiet window must not move the plan;
- otherwise the target is ``max(p99, floor)``, the p99 rounded up to the histogram's grid (5 ms steps
  up to 50 ms) and then to :data:`STEP_S`;
- the hop moves to the target when the target is above it (an under-planned hop breaks the worst
  case at once) and when it is more than ``band`` below it; a target within ``band`` below keeps it.
  A changed hop changes the app's problem, which is solved again, so the band keeps a p99 that wavers
  by a step from re-planning every epoch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.hops import quantile_ms

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from control.state import ControlState

__all__ = ["STEP_S", "HopSettings", "decide_hop", "learn_hops", "plan_hops"]

STEP_S = 0.005  # s: a planned hop is a multiple of this


@dataclass(frozen=True)
class HopSettings:
    default_s: float = 0.05  # the cold-start hop (ControlConfig.hop_overhead_s)
    floor_s: float = 0.02  # the least hop a measurement may plan
    min_samples: int = 100  # deliveries in the window before the p99 is used
    band_s: float = 0.01  # a target this much (or less) below the hop in force keeps it
    quantile: float = 0.99


def _up(value: float, step: float = STEP_S) -> float:
    return round(math.ceil(value / step - 1e-9) * step, 6)


def decide_hop(current: float | None, samples: int, p99_s: float, settings: HopSettings) -> tuple[float, str]:
    """(the hop to plan with, why: ``default`` | ``kept`` | ``measured``) from the hop in force
    (``current``; None: never measured) and the window's ``samples`` deliveries and their p99."""
    held = settings.default_s if current is None else current
    why_held = "default" if current is None else "kept"
    if samples < settings.min_samples or not math.isfinite(p99_s):
        # an infinite p99 (above the histogram's last bound) is a stalled consumer, not a hop
        return held, why_held
    target = max(_up(p99_s), _up(settings.floor_s))
    if target > held or target < held - settings.band_s - 1e-9:
        return target, "measured"
    return held, why_held


def plan_hops(
    current: Mapping[str, float],
    counts: Mapping[str, Mapping[str, float]],
    modules: Iterable[str],
    settings: HopSettings,
) -> tuple[dict[str, float], dict[str, dict[str, float | int | str]]]:
    """One app's measured hops (module -> s; modules still on the default are left out) and, for
    every module of ``modules``, what decided it (``hop_s``, ``source``, ``samples``, ``p99_s``).
    ``current``: the hops measured so far (module -> s), ``counts``: the window's histogram per
    module (``UpToMs`` label -> deliveries)."""
    out: dict[str, float] = {}
    report: dict[str, dict[str, float | int | str]] = {}
    for module in sorted(modules):
        samples, p99_ms = quantile_ms(counts.get(module, {}), settings.quantile)
        hop, why = decide_hop(current.get(module), samples, p99_ms / 1e3, settings)
        if why != "default":
            out[module] = hop
        entry: dict[str, float | int | str] = {"hop_s": hop, "source": why, "samples": samples}
        if samples:
            entry["p99_s"] = p99_ms / 1e3 if math.isfinite(p99_ms) else -1.0  # -1: above the grid
        report[module] = entry
    return out, report


def learn_hops(
    state: ControlState,
    modules: Mapping[str, Iterable[str]],
    counts: Mapping[tuple[str, str], Mapping[str, float]],
    settings: HopSettings,
) -> dict[str, dict[str, dict[str, float | int | str]]]:
    """Update ``state.hops`` (app -> module -> s) of every app of ``modules`` (app -> its modules)
    from the window's histograms (``counts``: (app, module) -> ``UpToMs`` -> deliveries); apps no
    longer registered are forgotten. Returns the per-module report of each app (:func:`plan_hops`)."""
    for gone in set(state.hops) - set(modules):
        del state.hops[gone]
    reports: dict[str, dict[str, dict[str, float | int | str]]] = {}
    for app, listed in sorted(modules.items()):
        names = list(listed)
        mine = {module: bucket for (name, module), bucket in counts.items() if name == app}
        hops, reports[app] = plan_hops(state.hops.get(app, {}), mine, names, settings)
        hops = {module: hop for module, hop in hops.items() if module in names}
        if hops:
            state.hops[app] = hops
        else:
            state.hops.pop(app, None)
    return reports
