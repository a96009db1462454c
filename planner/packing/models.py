"""What the packer produces: shares of planned machines, instances and the fleet plan."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from planner.errors import PlannerError

__all__ = ["FleetPlan", "Instance", "PackingError", "Share", "ShareKey", "TOL"]

TOL = 1e-9

ShareKey = tuple[str, str, str, int, int, float]


class PackingError(PlannerError):
    """The apps cannot be packed together (e.g. two apps price one hardware type differently)."""


class Share(BaseModel):
    """One planned machine of one module of one app, placed on an instance. ``group`` and ``machine``
    index that app's ``Plan.modules[module].groups``."""

    model_config = ConfigDict(frozen=True)

    app: str
    module: str
    group: int = Field(ge=0)
    machine: int = Field(ge=0)
    hardware: str
    batch: int = Field(ge=1)
    concurrency: int = Field(ge=1)
    duration_s: float = Field(gt=0)
    rate: float = Field(ge=0, description="req/s this machine carries (rate_per_machine, dummy included)")
    occupancy: float = Field(ge=0, description="fraction of the instance's time it uses: f / t")
    added_wait_s: float = Field(
        default=0.0, ge=0, description="worst-case extra queueing caused by co-located shares"
    )
    busy: float = Field(
        default=0.0, ge=0, description="device time of one batch at a time: d f / b (= occupancy * c)"
    )
    phase_s: float | None = Field(
        default=None,
        ge=0,
        description="on an aligned instance: the module's schedule phase (s after t = 0, mod the cycle); "
        "its batches are ready at phase_s + k * cycle_s",
    )
    fifo_wait_s: float = Field(
        default=0.0, ge=0, description="worst-case added wait if the phases are not honoured (FIFO bound)"
    )

    @property
    def key(self) -> ShareKey:
        """What a worker loads: the same key on the same slot means no model reload."""
        return (self.app, self.module, self.hardware, self.batch, self.concurrency, self.duration_s)

    @property
    def ident(self) -> tuple[str, str, int, int]:
        return (self.app, self.module, self.group, self.machine)


class Instance(BaseModel):
    """One whole instance of ``hardware``; ``slot`` is stable within the fleet (e.g. ``t4/3``) and reused
    across epochs when the content is unchanged. With several shares, batches run one at a time in the
    order their windows close."""

    slot: str
    hardware: str
    shares: list[Share]
    cycle_s: float | None = Field(
        default=None, gt=0, description="aligned duty cycle: every share's batch interval (None: FIFO)"
    )

    @property
    def aligned(self) -> bool:
        return self.cycle_s is not None and len(self.shares) > 1

    @property
    def occupancy(self) -> float:
        return sum(s.occupancy for s in self.shares)

    @property
    def busy(self) -> float:
        return sum(s.busy for s in self.shares)


class FleetPlan(BaseModel):
    """Whole instances per hardware type and the figures to judge them by."""

    instances: list[Instance]
    prices: dict[str, float] = Field(description="hardware -> $/h")
    occupancy_per_hour: float = Field(
        description="the packed plans' occupancy cost (dummy load included): no packing of them bills less"
    )
    dedicated_per_hour: float = Field(description="one instance per planned machine")

    def counts(self) -> dict[str, int]:
        """Instances per hardware type (every priced type listed, zero included)."""
        out = dict.fromkeys(sorted(self.prices), 0)
        for inst in self.instances:
            out[inst.hardware] = out.get(inst.hardware, 0) + 1
        return out

    @property
    def billed_per_hour(self) -> float:
        return sum(self.prices[i.hardware] for i in self.instances)

    @property
    def shared_instances(self) -> int:
        return sum(1 for i in self.instances if len(i.shares) > 1)
