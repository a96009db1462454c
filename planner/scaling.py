"""Plan-driven scaling: the rate to plan for (short trend + headroom, quantised), hysteresis on the
instance counts per hardware type, so noisy load neither re-plans every epoch nor flaps the fleet, and
the backlog correction between epochs (:func:`backlog_boost`: which apps' task queues hold more than
their plan allows, and by how much to raise their planned rate in an early re-plan).

Pure: the caller passes the observed rates, queue depths and the epoch number; the hysteresis state is
a plain dict (:meth:`Hysteresis.to_dict`) because the planner Lambda keeps no memory between invocations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from planner.errors import PlannerError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = [
    "Hysteresis",
    "QueueBacklog",
    "ScalingError",
    "backlog_boost",
    "forecast_rate",
    "quantise_up",
]


class ScalingError(PlannerError):
    """Bad input to the scaling policy (no history, negative or non-finite rates, bad parameters)."""


def quantise_up(x: float, step: float) -> float:
    """Smallest level ``(1 + step) ** k`` (k integer) that is >= ``x``; 0 stays 0. Levels are fixed, so a
    rate moving inside one level keeps the same planned rate."""
    if x <= 0:
        return 0.0
    if step < 1e-9:  # no grid finer than float noise
        return x
    base = math.log1p(step)
    k = math.ceil(math.log(x) / base - 1e-9)
    level = math.exp(k * base)
    return level if level >= x else math.exp((k + 1) * base)


#: Two-sided 95 % critical values of Student's t for 1-10 degrees of freedom (a line through n points
#: has n - 2); beyond, 2.2 (10 degrees: 2.23). A slope below it is not told from noise: with 5 points a
#: fixed 2 took one noisy window in seven for a trend.
_T95 = (12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23)


def forecast_rate(
    history: Sequence[float], *, headroom: float = 0.1, trend_epochs: int = 5, step: float = 0.05
) -> float:
    """The rate to plan for from the observed rates of the last epochs (oldest first).

    The *level* of the last ``trend_epochs`` observations is their least-squares line extrapolated one
    epoch ahead (never below the last observation) when the line's slope is significant (at least 3
    points; the slope over its standard error beyond Student's t at 95 %, two-sided: a ramp), else their
    mean (noise). The forecast is the
    larger of the level times ``1 + headroom`` and the last observation times ``1 + headroom / 2``,
    quantised up to a level of the relative grid ``(1 + step) ** k`` so noise inside one level does not
    change the plan.

    Why not the line always: extrapolated one epoch ahead, a line through 5 noisy points has the noise
    of one observation (1.05 of its standard deviation), so under steady load every new high of the
    noise re-planned an app; held plans only ever grow, and the fleet crept up an instance every few
    epochs (docs/packing.md, "Steady load"). The mean of 5 has 0.45 of it. A step up beyond the
    headroom is followed at once (the last observation), a ramp through its line.
    """
    if not history:
        raise ScalingError("no observed rates to forecast from")
    if headroom < 0 or step < 0 or trend_epochs < 1:
        raise ScalingError(
            f"bad forecast parameters: headroom {headroom}, step {step}, trend_epochs {trend_epochs}"
        )
    xs = np.asarray(history[-trend_epochs:], dtype=np.float64)
    if not np.all(np.isfinite(xs)) or np.any(xs < 0):
        raise ScalingError(f"observed rates must be finite and >= 0, got {list(history[-trend_epochs:])}")
    last = float(xs[-1])
    level = float(xs.mean())
    if len(xs) >= 3:
        t = np.arange(len(xs), dtype=np.float64)
        slope, intercept = np.polyfit(t, xs, 1)
        resid = xs - (intercept + slope * t)
        sxx = float(((t - t.mean()) ** 2).sum())
        se = math.sqrt(float(resid @ resid) / (len(xs) - 2) / sxx)
        if abs(slope) > _T95[min(len(xs) - 2, len(_T95)) - 1] * se:
            level = max(last, float(intercept + slope * len(xs)))
    return quantise_up(max(level * (1 + headroom), last * (1 + headroom / 2)), step)


@dataclass
class _HwState:
    last_change: int | None = None  # epoch of the last change this policy made
    below_since: int | None = None  # first epoch of the current run of targets below the capacity
    recent: list[tuple[int, int]] = field(default_factory=list)  # (epoch, target) of the last epochs


@dataclass
class Hysteresis:
    """Desired instance count per hardware type from the packed plan's counts.

    Scale up at once (latency first), to the target plus a reserve of ``floor(reserve * target)`` idle
    instances; a scale-down keeps the same reserve over the largest recent target. Under steady load the
    plans' rates still rise now and then (each app's to the top of its noise: a plan is re-solved when
    its forecast rises above it, kept when it falls within ``hold``), so a large group's target creeps up
    an instance at a time, from independent apps in consecutive epochs; the reserve takes those rises
    without a scale change (an idle instance claims the new slot at once, where a launch takes minutes).
    A target less than ``floor(down_band * capacity)`` instances below
    the capacity counts as the capacity (noise around a large group: a one-instance dip would scale down
    and straight back up). Scale down only after the target has stayed below that band for
    ``down_epochs`` consecutive epochs and at least ``min_gap_epochs`` after this type's last change,
    and then only to the largest target of the last ``memory_epochs`` epochs (never below the current
    target) plus ``spare`` instances (none when that largest target is 0), so that noise just after a
    scale-down does not scale straight back up. docs/packing.md ("Steady load") has the figures behind
    the defaults.
    """

    down_epochs: int = 2
    min_gap_epochs: int = 2
    memory_epochs: int = 4
    spare: int = 0
    down_band: float = 0.05
    reserve: float = 0.02
    state: dict[str, _HwState] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.spare < 0:
            raise ScalingError(f"spare must be >= 0, got {self.spare}")
        if not 0 <= self.down_band < 1:
            raise ScalingError(f"down_band must be a fraction in [0, 1), got {self.down_band}")
        if not 0 <= self.reserve < 1:
            raise ScalingError(f"reserve must be a fraction in [0, 1), got {self.reserve}")
        if min(self.down_epochs, self.min_gap_epochs, self.memory_epochs) < 1:
            raise ScalingError(
                "down_epochs, min_gap_epochs and memory_epochs must be >= 1, got "
                f"{self.down_epochs}, {self.min_gap_epochs}, {self.memory_epochs}"
            )

    def desired(self, target: Mapping[str, int], current: Mapping[str, int], epoch: int) -> dict[str, int]:
        """Desired count per hardware type (every type of ``target`` or ``current``); updates the state."""
        out: dict[str, int] = {}
        for hw in sorted(set(target) | set(current)):
            want, have = int(target.get(hw, 0)), int(current.get(hw, 0))
            if want < 0 or have < 0:
                raise ScalingError(f"{hw}: instance counts must be >= 0, got target {want}, current {have}")
            st = self.state.setdefault(hw, _HwState())
            st.recent = [(e, t) for e, t in st.recent if epoch - e < self.memory_epochs and e != epoch]
            st.recent.append((epoch, want))
            out[hw] = self._one(st, want, have, epoch)
        return out

    def _one(self, st: _HwState, want: int, have: int, epoch: int) -> int:
        band = math.floor(self.down_band * have + 1e-9)
        if want >= have - band:  # at or above the capacity, or inside the band below it
            st.below_since = None
            if want > have:
                st.last_change = epoch
                return want + math.floor(self.reserve * want + 1e-9)
            return have
        if st.below_since is None:
            st.below_since = epoch
        held = epoch - st.below_since + 1 >= self.down_epochs
        spaced = st.last_change is None or epoch - st.last_change >= self.min_gap_epochs
        down = max(t for _, t in st.recent)
        if down > 0:
            down += self.spare + math.floor(self.reserve * down + 1e-9)
        if held and spaced and down < have - band:
            st.last_change = epoch
            st.below_since = None
            return down
        return have

    def to_dict(self) -> dict[str, Any]:
        return {
            "down_epochs": self.down_epochs,
            "min_gap_epochs": self.min_gap_epochs,
            "memory_epochs": self.memory_epochs,
            "spare": self.spare,
            "down_band": self.down_band,
            "reserve": self.reserve,
            "state": {
                hw: {
                    "last_change": s.last_change,
                    "below_since": s.below_since,
                    "recent": [list(x) for x in s.recent],
                }
                for hw, s in sorted(self.state.items())
            },
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Hysteresis:
        try:
            state = {
                str(hw): _HwState(
                    last_change=None if s.get("last_change") is None else int(s["last_change"]),
                    below_since=None if s.get("below_since") is None else int(s["below_since"]),
                    recent=[(int(e), int(t)) for e, t in s.get("recent", [])],
                )
                for hw, s in dict(data.get("state", {})).items()
            }
            return cls(
                down_epochs=int(data.get("down_epochs", 2)),
                min_gap_epochs=int(data.get("min_gap_epochs", 2)),
                memory_epochs=int(data.get("memory_epochs", 4)),
                spare=int(data.get("spare", 0)),
                down_band=float(data.get("down_band", cls.down_band)),
                reserve=float(data.get("reserve", cls.reserve)),
                state=state,
            )
        except (TypeError, ValueError, AttributeError) as exc:
            raise ScalingError(f"bad hysteresis state: {exc}") from exc


# --------------------------------------------------------------------------- backlog between epochs


@dataclass(frozen=True)
class QueueBacklog:
    """One planned machine's task queue, read between epochs.

    In steady state under its plan a machine's queue holds at most one batch in hand plus what arrives
    within the module's latency budget at the machine's planned rate: a request older than that has
    missed its budget. ``allowed`` is that figure; the rest is the ``excess``."""

    app: str
    module: str
    # requests (tasks) visible + in flight: SQS's ApproximateNumberOfMessages + NotVisible times the
    # tasks a message carries (several since the v2 wire format; control/backlog.py converts)
    depth: int
    rate: float  # the machine's planned rate, req/s (dummy included): its planned drain rate
    batch: int
    budget_s: float  # the module's latency budget in the plan, s
    served: bool = True  # a live instance holds the slot of this machine
    queue: str = ""  # which queue (a label for reports)
    # processed messages still in flight because their delete waits to share a DeleteMessageBatch
    # (core.settings.undeleted_bound): part of the depth, not of the backlog
    undeleted: float = 0.0

    @property
    def allowed(self) -> float:
        return self.batch + self.rate * self.budget_s + self.undeleted

    @property
    def excess(self) -> float:
        return max(0.0, self.depth - self.allowed)

    @property
    def late(self) -> bool:
        """The backlog over the planned drain rate exceeds the budget (beyond one batch in hand)."""
        return self.excess > 0


def backlog_boost(
    queues: Sequence[QueueBacklog], *, horizon_s: float, min_boost: float = 0.1, max_boost: float = 1.0
) -> dict[str, dict[str, float]]:
    """App -> module -> the rate (req/s) to plan the module for, for the modules with a late queue that
    an instance serves.

    A module's planned rate ``W`` is its machines' rates summed over every queue read (dummy included:
    what the plan can drain). It needs ``W * (1 + excess / (horizon_s * W))``, ``excess`` what its served
    queues hold beyond ``allowed``: the capacity that would clear the excess within ``horizon_s`` (an
    epoch) on top of the planned load, the factor bounded to ``[1 + min_boost, 1 + max_boost]`` (a
    correction is a bounded step above what the plan can drain; the next epoch re-plans from observed
    rates anyway). A late queue nobody serves (its slot unclaimed, its instance silent) is not a
    capacity problem and asks for nothing: the Auto Scaling group and the claim garbage collector
    replace the instance.
    """
    if horizon_s <= 0 or not 0 <= min_boost <= max_boost or not math.isfinite(max_boost):
        raise ScalingError(
            f"bad backlog parameters: horizon_s {horizon_s}, min_boost {min_boost}, max_boost {max_boost}"
        )
    planned: dict[tuple[str, str], float] = {}
    excess: dict[tuple[str, str], float] = {}
    for q in queues:
        if q.depth < 0 or not 0 <= q.rate < math.inf or not 0 <= q.budget_s < math.inf:
            raise ScalingError(f"{q.app}.{q.module}: bad queue reading {q}")
        key = (q.app, q.module)
        planned[key] = planned.get(key, 0.0) + q.rate
        if q.served and q.late:
            excess[key] = excess.get(key, 0.0) + q.excess
    out: dict[str, dict[str, float]] = {}
    for (app, module), extra in sorted(excess.items()):
        w = planned[(app, module)]
        factor = 1 + extra / (horizon_s * w) if w > 0 else 1 + max_boost
        out.setdefault(app, {})[module] = w * min(max(factor, 1 + min_boost), 1 + max_boost)
    return out
