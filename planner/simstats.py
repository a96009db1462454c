"""The simulator's report models and latency statistics, re-exported by :mod:`planner.simulator`.

Holds the arrival, dispatch and admission modes a run is configured with (:data:`Arrivals`,
:data:`Dispatch`, :data:`Admission`), the report a run returns (:class:`SimulationReport`, with its
:class:`ModuleStats`, :class:`EndToEndStats` and :class:`LatencyStats`) and ``_Hist``, the log-spaced
latency histogram the simulator accumulates those statistics in.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

__all__ = [
    "Admission",
    "Arrivals",
    "Dispatch",
    "EndToEndStats",
    "LatencyStats",
    "ModuleStats",
    "SimulationReport",
]

Arrivals = Literal["uniform", "poisson", "bursty"]
Dispatch = Literal["tc", "rr"]
#: Root admission: ``none`` (every arrival enters the window its arrival time falls in); ``planned`` (the
#: front's batch slots: a window takes at most what the plan's realisation assumed it holds,
#: :func:`planner.dispatch.root_window_caps`; a frame whose window is full spills to later windows while
#: their bound meets its deadline, else it is shed); ``batch`` (the same with the batch as the only cap,
#: as the front did before: the children can receive more than they were sized for).
Admission = Literal["none", "batch", "planned"]
_HIST_LO, _HIST_HI, _HIST_BINS = 1e-6, 1e4, 20_000


class LatencyStats(BaseModel):
    model_config = ConfigDict(frozen=True)

    count: int
    mean_s: float
    p50_s: float
    p95_s: float
    p99_s: float
    max_s: float


class ModuleStats(BaseModel):
    model_config = ConfigDict(frozen=True)

    requests: int
    batches: int
    windows: int
    empty_windows: int
    overflow_batches: int
    mean_fill: float
    latency: LatencyStats
    queue_wait: LatencyStats
    planned_worst_case_s: float
    schedule_worst_case_s: float
    theorem1_s: float
    measured_worst_case_s: float
    within_plan: bool
    within_schedule: bool


class EndToEndStats(BaseModel):
    model_config = ConfigDict(frozen=True)

    paths: int
    latency: LatencyStats
    slo_s: float
    slo_attainment: float
    planned_worst_case_s: float


class SimulationReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    problem: str
    duration_s: float
    arrivals: Arrivals
    dispatch: Dispatch
    jitter: float
    seed: int
    requests: int
    modules: dict[str, ModuleStats]
    end_to_end: EndToEndStats
    all_within_plan: bool
    admission: Admission = "none"
    frames_offered: int = 0  # root arrivals (requests of the root modules), admitted or shed
    frames_shed: int = 0  # root arrivals that no window could take by their deadline (``admission``)
    front_instances: int = 1  # fronts counting their own frames apart (``admission``)


# --------------------------------------------------------------------------- statistics


class _Hist:
    """Log-spaced latency histogram with exact count, sum and max; zeros counted apart."""

    def __init__(self) -> None:
        self.bins = np.zeros(_HIST_BINS, dtype=np.int64)
        self.zeros = 0
        self.count = 0
        self.total = 0.0
        self.max = 0.0
        self._scale = _HIST_BINS / math.log(_HIST_HI / _HIST_LO)

    def add(self, x: np.ndarray, weights: np.ndarray | None = None) -> None:
        if len(x) == 0:
            return
        w = np.ones(len(x), dtype=np.int64) if weights is None else weights.astype(np.int64)
        pos = x > _HIST_LO
        self.zeros += int(w[~pos].sum())
        idx = np.clip((np.log(x[pos] / _HIST_LO) * self._scale).astype(np.int64), 0, _HIST_BINS - 1)
        self.bins += np.bincount(idx, weights=w[pos], minlength=_HIST_BINS).astype(np.int64)
        self.count += int(w.sum())
        self.total += float(np.dot(x, w))
        self.max = max(self.max, float(x.max()))

    def quantile(self, q: float) -> float:
        if self.count == 0:
            return 0.0
        rank = q * self.count
        if rank <= self.zeros:
            return 0.0
        cum = np.cumsum(self.bins) + self.zeros
        i = int(np.searchsorted(cum, rank))
        upper = _HIST_LO * math.exp((i + 1) / self._scale)
        return min(upper, self.max)

    def stats(self) -> LatencyStats:
        return LatencyStats(
            count=self.count,
            mean_s=self.total / self.count if self.count else 0.0,
            p50_s=self.quantile(0.50),
            p95_s=self.quantile(0.95),
            p99_s=self.quantile(0.99),
            max_s=self.max,
        )
