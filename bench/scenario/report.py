"""What the scenario reports: per epoch, per strategy, the headroom sweep and the whole day."""

from __future__ import annotations

from pydantic import BaseModel, Field

from bench.scenario.config import LoadConfig, PolicyConfig  # noqa: TC001 -- pydantic reads the annotations at runtime


class EpochRecord(BaseModel):
    """One epoch of one strategy. Rates in frames/s, costs in USD per hour, frames summed over the epoch."""

    epoch: int
    start_h: float
    offered_rps: float  # mean over the epoch, all apps
    busiest_rps: float  # sum over apps of each app's busiest minute
    planned_rps: float  # sum of the rates planned for
    capacity_rps: float  # sum of the plans' capacities
    billed_per_hour: float  # instances paid for (after hysteresis) x price
    packed_per_hour: float  # the packed fleet's instances x price (before hysteresis)
    occupancy_per_hour: float  # the plans' occupancy cost (the papers' lower bound)
    instances: dict[str, int]
    scale_changes: int  # hardware types whose paid count changed at the start of this epoch
    launched: int
    terminated: int
    replanned: int  # apps solved afresh (the others kept their plan)
    failed: dict[str, str] = Field(default_factory=dict)
    offered: float
    shed: float
    within_slo: float
    slo_attainment: float  # within / offered
    admitted_attainment: float  # within / admitted (the simulator's figure, weighted by frames)
    worst_app: str = ""
    worst_app_attainment: float = 1.0
    p99_s: float = 0.0  # largest simulated end-to-end p99 over apps
    plan_ms: float = 0.0
    sim_s: float = 0.0


class StrategyResult(BaseModel):
    """A strategy over the day: cost in USD, frames summed over the day."""

    name: str
    headroom: float
    simulated: bool
    billed_usd: float
    occupancy_usd: float
    offered: float
    shed: float
    within_slo: float
    slo_attainment: float
    scale_changes: int  # over the day, the first epoch's launch excluded
    launched: int
    terminated: int
    peak_instances: int
    plan_s: float
    sim_s: float
    epochs: list[EpochRecord]


class SweepPoint(BaseModel):
    headroom: float
    adaptive_usd: float
    static_usd: float
    saving: float  # 1 - adaptive / static
    slo_attainment: float
    shed_fraction: float
    scale_changes: int


class ScenarioReport(BaseModel):
    load: LoadConfig
    policy: PolicyConfig  # the chosen headroom's
    apps: list[dict[str, object]]
    burst: dict[str, object]
    minute_total_rps: list[float]
    adaptive: StrategyResult
    static: StrategyResult
    oracle: StrategyResult | None
    sweep: list[SweepPoint]
    target_attainment: float
    target_met: bool
    saving: float  # 1 - adaptive / static at the chosen headroom
    solves: int  # distinct problems solved (SolveCache misses)
    solve_cache_hits: int
    simulations: int  # distinct simulations run (SimCache misses)
    simulation_cache_hits: int
