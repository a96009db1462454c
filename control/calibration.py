"""Service-time calibration: the plan's batch durations learn what the data plane really adds.

The planner's model of a batch is its profile duration (p95) plus a per-hop overhead (SQS, the
result write, the batch-closing grace, decoding). Where that is too optimistic (a loaded host, a
slower SQS, contention the profile never saw) each module's measured worst case exceeds its planned
one, and the plan's latency figures stop being bounds. So every worker emits, per batch,
``ServiceOverrunMs`` = (finish - window end) - planned batch duration - the packing's added wait
(``workers/worker.py``), and each epoch the controller turns the largest overrun of each
(module, hardware) of an app into an extra duration for that module's profile entries on that
hardware (:func:`control.problems.app_problem`):

- the observed overrun is measured against the plan the workers ran, whose durations already include
  the correction ``c`` it was planned with (recorded in the module plan, ``service_correction_s``;
  not necessarily the latest one learned: an unchanged plan is not republished); the overrun of the
  bare model is therefore ``observed + c``;
- a correction grows at once to that figure (rounded up to :data:`STEP_S`, capped at :data:`CAP_S`);
- it shrinks only after the bare overrun has stayed below half of it for :data:`HOLD_EPOCHS`
  epochs in a row, to the largest bare overrun of those epochs (one re-plan, not one per epoch),
  so a correction that works (observed overrun <= 0) is kept rather than chased down and up again;
- a key without data in the window (the module did not run there) keeps its correction.

Rounding to a grid keeps small fluctuations from changing the problem (an unchanged problem keeps
its plan, ``planner/fleet.py``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from core.schema import SERVICE_CORRECTION_KEY, Deployment

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from control.state import ControlState

__all__ = [
    "CAP_S",
    "HOLD_EPOCHS",
    "STEP_S",
    "correction_keys",
    "forget_apps",
    "in_force",
    "learn_corrections",
    "update_corrections",
]

STEP_S = 0.005  # s: corrections are multiples of this
HOLD_EPOCHS = 3  # epochs of low overruns before a correction shrinks
CAP_S = 1.0  # s: the largest correction (beyond it the profile, not the overhead, is wrong)


def _key(module: str, hardware: str) -> str:
    return f"{module}@{hardware}"


def correction_keys(deployments: Iterable[Deployment]) -> list[tuple[str, str, str]]:
    """(app, module, hardware) of every module group in ``deployments``: the series to read."""
    return sorted(
        {
            (dep.app, name, group.hardware)
            for dep in deployments
            for name, mp in dep.plan.modules.items()
            for group in mp.groups
        }
    )


def in_force(deployment: Deployment) -> dict[tuple[str, str], float]:
    """(module, hardware) -> the correction the deployment's durations include."""
    out: dict[tuple[str, str], float] = {}
    for name, mp in deployment.plan.modules.items():
        for hw, correction in ((mp.model_extra or {}).get(SERVICE_CORRECTION_KEY) or {}).items():
            out[(name, hw)] = float(correction)
    return out


def _up(value: float, step: float) -> float:
    return round(math.ceil(value / step - 1e-9) * step, 6)


def update_corrections(
    current: Mapping[str, float],
    observed: Mapping[tuple[str, str], float],
    planned_with: Mapping[tuple[str, str], float] | None = None,
    *,
    low: dict[str, list[float]] | None = None,
    step: float = STEP_S,
    cap: float = CAP_S,
    hold: int = HOLD_EPOCHS,
) -> dict[str, float]:
    """The next corrections of one app (``"module@hardware"`` -> s) from the ones learned so far
    (``current``), the largest ``ServiceOverrunMs`` observed per (module, hardware) in the window
    (s; may be negative: slack) and the corrections the plan the workers ran was planned with
    (``planned_with``, :func:`in_force`; default: ``current``). ``low`` (updated in place, kept by the
    caller between epochs) holds each key's bare overruns of the epochs in a row that were below
    half its correction. Zero corrections are left out."""
    out = dict(current)
    streaks = low if low is not None else {}
    for (module, hw), obs in observed.items():
        key = _key(module, hw)
        cur = current.get(key, 0.0)
        ran = cur if planned_with is None else planned_with.get((module, hw), 0.0)
        bare = max(0.0, obs + ran)
        new = cur
        if bare > cur:
            new = min(_up(bare, step), cap)
            streaks.pop(key, None)
        elif bare < cur / 2:
            streak = streaks.setdefault(key, [])
            streak.append(bare)
            if len(streak) >= hold:
                new = _up(max(streak), step)
                streaks.pop(key, None)
        else:
            streaks.pop(key, None)
        if new > 0:
            out[key] = new
        else:
            out.pop(key, None)
    return out


def forget_apps(state: ControlState, apps: Iterable[str]) -> None:
    """Drop the corrections (and shrink streaks) of apps no longer registered."""
    keep = set(apps)
    for gone in set(state.corrections) - keep:
        del state.corrections[gone]
    for gone in set(state.corrections_low) - keep:
        del state.corrections_low[gone]


def learn_corrections(
    state: ControlState, deployments: Iterable[Deployment], maxima: Mapping[tuple[str, str, str], float]
) -> None:
    """Update each app's corrections in ``state`` from the largest overrun of its modules in the window
    (``maxima``: (app, module, hardware) -> s, read for :func:`correction_keys` of ``deployments``)."""
    for dep in deployments:
        app = dep.app
        seen = {(module, hw): value for (app_name, module, hw), value in maxima.items() if app_name == app}
        low = state.corrections_low.setdefault(app, {})
        new = update_corrections(state.corrections.get(app, {}), seen, in_force(dep), low=low)
        if not low:
            state.corrections_low.pop(app, None)
        if new:
            state.corrections[app] = new
        else:
            state.corrections.pop(app, None)
