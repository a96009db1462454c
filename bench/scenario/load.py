"""The day's load (:func:`make_load`): per-app diurnal curves, Zipf shares, AR(1) noise and a flash crowd."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from bench.errors import ScenarioError
from bench.scenario.config import MINUTES_PER_DAY, LoadConfig

if TYPE_CHECKING:
    from collections.abc import Sequence

#: Diurnal knots (hour, fraction of the daily peak) before the trough is applied: night low at 04:00,
#: morning ramp 06:00-09:00, midday plateau, evening peak at 20:00. Smoothstep between knots.
_KNOTS: tuple[tuple[float, float], ...] = (
    (0.0, 0.42),
    (4.0, 0.0),  # replaced by the trough
    (6.0, 0.08),
    (9.0, 0.72),
    (12.0, 0.84),
    (14.5, 0.78),
    (17.0, 0.86),
    (20.0, 1.0),
    (22.0, 0.74),
    (24.0, 0.42),
)
_NOISE_PHI = 0.95  # AR(1) coefficient per minute of the log-rate noise (about 20 min memory)
_MAX_SHIFT_H = 1.5  # apps' diurnal curves are shifted by up to this many hours (time zones, habits)


def diurnal_shape(hours: np.ndarray, trough: float = 0.15) -> np.ndarray:
    """Fraction of the daily peak at each hour of day (periodic, smoothstep between :data:`_KNOTS`)."""
    xs = np.array([knot[0] for knot in _KNOTS])
    ys = np.array([trough if knot[1] == 0.0 else trough + (1 - trough) * knot[1] for knot in _KNOTS])
    hour_of_day = np.mod(hours, 24.0)
    i = np.clip(np.searchsorted(xs, hour_of_day, side="right") - 1, 0, len(xs) - 2)
    progress = (hour_of_day - xs[i]) / (xs[i + 1] - xs[i])
    progress = progress * progress * (3 - 2 * progress)
    out: np.ndarray = ys[i] + (ys[i + 1] - ys[i]) * progress
    return out


@dataclass
class DayLoad:
    """Per-app frame rates (frames/s) per minute; column ``history`` is midnight."""

    names: list[str]
    kinds: list[str]
    shares: np.ndarray  # mean share of each app
    rates: np.ndarray  # (apps, history + 1440) frames/s
    history: int  # minutes before midnight
    epoch_minutes: int
    config: LoadConfig
    burst: dict[str, object] = field(default_factory=dict)

    @property
    def epochs(self) -> int:
        return MINUTES_PER_DAY // self.epoch_minutes

    def _cols(self, epoch: int) -> slice:
        start = self.history + epoch * self.epoch_minutes
        return slice(start, start + self.epoch_minutes)

    def epoch_mean(self, epoch: int) -> np.ndarray:
        """Each app's mean rate in ``epoch`` (negative epochs: the history before midnight)."""
        mean: np.ndarray = self.rates[:, self._cols(epoch)].mean(axis=1)
        return mean

    def epoch_peak(self, epoch: int) -> np.ndarray:
        peak: np.ndarray = self.rates[:, self._cols(epoch)].max(axis=1)
        return peak

    def epoch_minutes_of(self, epoch: int) -> np.ndarray:
        """(apps, minutes) rates of the epoch's minutes."""
        block: np.ndarray = self.rates[:, self._cols(epoch)]
        return block

    def total(self) -> np.ndarray:
        """Total frames/s per minute of the day (history excluded)."""
        tot: np.ndarray = self.rates[:, self.history :].sum(axis=0)
        return tot


def make_load(cfg: LoadConfig, kinds: Sequence[str]) -> DayLoad:
    """The day's load for ``cfg.apps`` apps whose kinds cycle through ``kinds`` (seeded shuffle)."""
    if not kinds:
        raise ScenarioError("no application kinds to build apps from")
    rng = np.random.default_rng(cfg.seed)
    apps = cfg.apps
    order = [kinds[int(i)] for i in rng.permutation(len(kinds))]
    app_kinds = [order[i % len(order)] for i in range(apps)]
    names = [f"{kind}-{i:02d}" for i, kind in enumerate(app_kinds)]
    weights = 1.0 / np.arange(1, apps + 1) ** cfg.zipf
    shares = weights / weights.sum()
    history = cfg.history_epochs * cfg.epoch_minutes
    minutes = np.arange(-history, MINUTES_PER_DAY)
    hours = minutes / 60.0
    shift = rng.uniform(-_MAX_SHIFT_H, _MAX_SHIFT_H, apps)
    trough = np.clip(cfg.trough * rng.uniform(0.7, 1.3, apps), 0.01, 0.95)
    base = np.stack([diurnal_shape(hours - shift[i], float(trough[i])) for i in range(apps)])
    noise = np.zeros((apps, len(minutes)))
    eps = rng.standard_normal((apps, len(minutes))) * cfg.noise * math.sqrt(1 - _NOISE_PHI**2)
    noise[:, 0] = rng.standard_normal(apps) * cfg.noise
    for minute in range(1, len(minutes)):
        noise[:, minute] = _NOISE_PHI * noise[:, minute - 1] + eps[:, minute]
    rates = shares[:, None] * base * np.exp(noise - cfg.noise**2 / 2)
    burst = _add_burst(rates, rng, cfg, history, names)
    day = rates[:, history:].sum(axis=0)
    rates *= cfg.peak_rps / float(day.max())
    return DayLoad(names, app_kinds, shares, rates, history, cfg.epoch_minutes, cfg, burst)


def _add_burst(
    rates: np.ndarray, rng: np.random.Generator, cfg: LoadConfig, history: int, names: list[str]
) -> dict[str, object]:
    """A flash crowd on ``burst_apps`` apps (not the largest): 5-minute ramp up, hold, 10-minute ramp down,
    starting at a seeded minute between 10:00 and 18:00. In place; returns its description."""
    hit_count = min(cfg.burst_apps, max(0, len(names) - 1))
    if hit_count == 0 or cfg.burst_minutes == 0 or cfg.burst_factor == 1:
        return {}
    hit = sorted(int(i) for i in rng.choice(np.arange(1, len(names)), size=hit_count, replace=False))
    start = int(rng.integers(600, 1080))
    since_start = np.arange(rates.shape[1]) - history - start
    up, down = 5.0, 10.0
    ramp = np.clip(
        np.minimum((since_start + 1) / up, (cfg.burst_minutes + down - since_start) / down), 0.0, 1.0
    )
    rates[hit] *= 1 + (cfg.burst_factor - 1) * ramp
    return {
        "apps": [names[i] for i in hit],
        "start_minute": start,
        "minutes": cfg.burst_minutes,
        "factor": cfg.burst_factor,
    }
