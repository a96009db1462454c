"""Configurations, machine groups and the three worst-case latency models.

- ``tc``: throughput-cost dispatch (Harpagon/Piccolo Theorem 1). Machines are ordered by
  r = t / p; machine i's remaining workload w_i is the rate on machines with r_j <= r_i (equal r
  share w); its worst case is d_i + b_i / w_i.
- ``rr``: round-robin dispatch of single requests; a machine collects its own batch at its own rate f,
  so its worst case is d + b / f (2d for a full machine with concurrency 1) — Nexus, InferLine, Clipper.
- ``dt``: batches assumed collected at the machine's throughput, d + b / t — Scrooge.

Device time and latency-only overhead: a configuration's duration d is device time (what occupies the
machine, so throughput is c b / d); its overhead o (the hop that delivers the module's requests: queue
send, delivery, receive, which the worker overlaps with the device) is latency only. Every worst case
above is the formula plus o (e.g. TC: d + o + b / w); no throughput counts o. With o = 0 (every
profile that does not set ``overhead_s``) the models are the papers'.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from planner.models import HardwareSpec, ProfileEntry

__all__ = [
    "EPS",
    "Config",
    "Group",
    "LatencyModel",
    "billed_cost",
    "configs_for",
    "group_latencies",
    "occupancy_cost",
    "worst_case",
]

LatencyModel = Literal["tc", "rr", "dt"]
EPS = 1e-9  # tolerance on latencies (s) and rates (req/s) in feasibility checks


@dataclass(frozen=True, slots=True)
class Config:
    """One way to run a module on one machine: hardware, batch b, concurrency c, duration d (s, device
    time), price p ($/h) and latency-only overhead o (s). Throughput t = c b / d (req/s, device time
    only); throughput-cost ratio r = t / p; ``floor`` d + o is the latency no worst case goes below."""

    hardware: str
    batch: int
    concurrency: int
    duration: float
    price: float
    overhead: float = 0.0
    throughput: float = field(init=False, compare=False, repr=False)
    ratio: float = field(init=False, compare=False, repr=False)
    floor: float = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        t = self.concurrency * self.batch / self.duration
        object.__setattr__(self, "throughput", t)
        object.__setattr__(self, "ratio", t / self.price)
        object.__setattr__(self, "floor", self.duration + self.overhead)

    def tc_latency(self, w: float) -> float:
        """Theorem 1 plus the overhead: d + o + b / w (w = remaining workload seen by this machine)."""
        return self.floor + self.batch / w if w > 0 else float("inf")

    def min_rate(self, budget: float) -> float:
        """Smallest remaining workload w with d + o + b / w <= budget (inf if d + o >= budget)."""
        gap = budget - self.floor
        return self.batch / gap if gap > EPS else float("inf")

    def label(self) -> str:
        return f"{self.hardware}/b{self.batch}/c{self.concurrency}"


@dataclass(frozen=True, slots=True)
class Group:
    """``machines`` machines of one config, each assigned ``rate`` req/s (0 < rate <= t)."""

    config: Config
    machines: int
    rate: float

    @property
    def total(self) -> float:
        return self.machines * self.rate


def configs_for(profile: Iterable[ProfileEntry], hardware: dict[str, HardwareSpec]) -> list[Config]:
    """Configurations of a module, deduplicated, in descending throughput-cost order."""
    seen: dict[tuple[str, int, int], Config] = {}
    for e in profile:
        key = (e.hardware, e.batch, e.concurrency)
        price = hardware[e.hardware].price_per_hour
        cfg = Config(e.hardware, e.batch, e.concurrency, e.duration_s, price, e.overhead_s)
        if key not in seen or (cfg.duration, cfg.overhead) < (seen[key].duration, seen[key].overhead):
            seen[key] = cfg
    return sorted(seen.values(), key=lambda c: (-c.ratio, c.floor, c.price))


def group_latencies(groups: Sequence[Group], model: LatencyModel = "tc") -> list[float]:
    """Worst-case latency of each group's machines under ``model`` (same order as ``groups``)."""
    if model == "tc":
        out = []
        for g in groups:
            r = g.config.ratio
            w = sum(h.total for h in groups if h.config.ratio <= r * (1 + 1e-12))
            out.append(g.config.tc_latency(w))
        return out
    if model == "rr":
        return [g.config.floor + g.config.batch / g.rate if g.rate > 0 else 0.0 for g in groups]
    return [g.config.floor + g.config.batch / g.config.throughput for g in groups]


def worst_case(groups: Sequence[Group], model: LatencyModel = "tc") -> float:
    """The module's worst-case latency: the max over its machines."""
    return max(group_latencies(groups, model), default=0.0)


def occupancy_cost(groups: Iterable[Group]) -> float:
    """The papers' cost: sum of p * f / t over machines ($/h), dummy load included."""
    return sum(g.machines * g.config.price * g.rate / g.config.throughput for g in groups)


def billed_cost(groups: Iterable[Group]) -> float:
    """What AWS bills: whole machines times price ($/h)."""
    return sum(g.machines * g.config.price for g in groups)
