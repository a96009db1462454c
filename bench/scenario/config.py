"""The scenario's settings: the application kinds apps are made of (:class:`AppTemplate`), the day's load
(:class:`LoadConfig`) and how the fleet is planned and an epoch served (:class:`PolicyConfig`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

if TYPE_CHECKING:
    from collections.abc import Mapping

    from planner.models import AppSpec, HardwareSpec, ProblemSpec, ProfileEntry


MINUTES_PER_DAY = 1440


@dataclass(frozen=True)
class AppTemplate:
    """An application kind (DAG, per-model profiles, hardware catalog) that apps are instances of."""

    kind: str
    spec: AppSpec
    profiles: Mapping[str, list[ProfileEntry]]
    hardware: Mapping[str, HardwareSpec]

    def problem(self, name: str, frame_rate: float) -> ProblemSpec:
        """The planning problem of an app of this kind at ``frame_rate`` frames/s (hardware limited to the
        classes some module has a profile on, as :func:`profiles.store.load_problem` does)."""
        used = {
            entry.hardware for es in self.profiles.values() for entry in es if entry.hardware in self.hardware
        }
        hw = {name: spec for name, spec in self.hardware.items() if name in used}
        return self.spec.to_problem(frame_rate, dict(self.profiles), hw).model_copy(update={"name": name})

    def per_frame(self) -> dict[str, float]:
        """Requests each module receives per frame (the roots get one)."""
        return self.spec.module_rates(1.0)


class LoadConfig(BaseModel):
    """The day's load. ``peak_rps`` is frames/s at the front, summed over apps, in the busiest minute."""

    model_config = ConfigDict(frozen=True)

    apps: int = Field(default=24, ge=1, le=10_000)
    peak_rps: float = Field(default=100_000.0, gt=0)
    epochs: int = Field(default=96, ge=1, le=MINUTES_PER_DAY)
    seed: int = 0
    trough: float = Field(default=0.15, gt=0, lt=1, description="night low / evening peak of one app")
    noise: float = Field(default=0.06, ge=0, lt=1, description="sd of the per-minute log-rate noise")
    zipf: float = Field(default=1.0, ge=0, description="rate share of the k-th app ~ 1 / k ** zipf")
    burst_factor: float = Field(default=2.0, ge=1)
    burst_minutes: int = Field(default=30, ge=0, le=MINUTES_PER_DAY)
    burst_apps: int = Field(default=3, ge=0)
    history_epochs: int = Field(default=8, ge=1, description="epochs before midnight given as history")

    @model_validator(mode="after")
    def _check(self) -> LoadConfig:
        if MINUTES_PER_DAY % self.epochs:
            raise ValueError(f"epochs must divide the day's {MINUTES_PER_DAY} minutes, got {self.epochs}")
        return self

    @property
    def epoch_minutes(self) -> int:
        return MINUTES_PER_DAY // self.epochs


class PolicyConfig(BaseModel):
    """How the fleet is planned and how an epoch is served (see the module doc)."""

    model_config = ConfigDict(frozen=True)

    headroom: float = Field(default=0.1, ge=0, le=5)
    trend_epochs: int = Field(default=5, ge=1)
    step: float = Field(default=0.05, ge=0, description="relative grid of planned rates (forecast_rate)")
    down_epochs: int = Field(default=2, ge=1)
    min_gap_epochs: int = Field(default=2, ge=1)
    sample_s: float = Field(default=4.0, gt=0, le=3600, description="simulated seconds per app per epoch")
    sim_grid: float = Field(
        default=0.025,
        ge=0,
        lt=1,
        description="simulated rates are rounded up to this grid of the plan's capacity (0: every minute "
        "simulated at its own rate)",
    )
    arrivals: Literal["uniform", "poisson", "bursty"] = "uniform"
    policy: str = "skinflint"
    solver: Literal["plain", "dispatchable"] = Field(
        default="plain", description="planner.solve.solve, or planner.robust.solve_dispatchable"
    )
    simulate: bool = True
