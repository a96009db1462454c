"""Data models of the planner: what a user specifies (``*Spec``) and what the planner returns (``*Plan``).

The JSON shapes of :class:`ProblemSpec` and :class:`Plan` are contracts (docs/design.md §3): other tools
read them. Extra keys are allowed everywhere and kept, so profiles can carry provenance.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "AppModuleSpec",
    "AppSpec",
    "HardwareSpec",
    "MachineGroup",
    "ModulePlan",
    "ModuleSpec",
    "Objective",
    "Plan",
    "ProblemSpec",
    "ProfileEntry",
    "planned_device_occupancy",
    "topological_order",
]

Objective = Literal["occupancy", "billed"]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class HardwareSpec(_Open):
    """A hardware class: price per machine-hour (USD) and, when deployable, its EC2 instance type."""

    price_per_hour: float = Field(gt=0)
    instance_type: str | None = None


def _zero(value: float) -> bool:
    return value == 0


class ProfileEntry(_Open):
    """One measured (or derived) configuration of a module: ``concurrency`` copies of the model each
    run a batch of ``batch`` requests in ``duration_s`` seconds on one machine of ``hardware``.

    ``duration_s`` is device time: what occupies the machine, so it sets the throughput. ``overhead_s``
    is latency only (the hop that delivers the module's requests: queue send, delivery, receive, which
    the worker overlaps with the device): it adds to every worst case and to no throughput. It is
    written out only when non-zero, so problems without it read and write as before."""

    hardware: str
    batch: int = Field(ge=1)
    concurrency: int = Field(default=1, ge=1)
    duration_s: float = Field(gt=0)
    overhead_s: float = Field(default=0.0, ge=0, exclude_if=_zero)

    @property
    def throughput(self) -> float:
        """Requests per second one machine sustains: c * b / d."""
        return self.concurrency * self.batch / self.duration_s


class ModuleSpec(_Open):
    """A module of the application DAG: its request rate (req/s) and its profile."""

    rate: float = Field(gt=0)
    profile: list[ProfileEntry] = Field(min_length=1)


def topological_order(nodes: list[str], edges: list[tuple[str, str]]) -> list[str]:
    """Kahn's algorithm, stable in ``nodes`` order. Raises ValueError naming a cycle's nodes."""
    indeg = dict.fromkeys(nodes, 0)
    children: dict[str, list[str]] = defaultdict(list)
    for src, dst in edges:
        children[src].append(dst)
        indeg[dst] += 1
    ready = [n for n in nodes if indeg[n] == 0]
    order: list[str] = []
    while ready:
        n = ready.pop(0)
        order.append(n)
        for c in children[n]:
            indeg[c] -= 1
            if indeg[c] == 0:
                ready.append(c)
    if len(order) != len(nodes):
        stuck = sorted(n for n in nodes if indeg[n] > 0)
        raise ValueError(f"edges form a cycle through {', '.join(stuck)}")
    return order


class ProblemSpec(_Open):
    """A planning problem: one application DAG with per-module rates and profiles and one SLO."""

    name: str = "problem"
    slo_s: float = Field(gt=0)
    hardware: dict[str, HardwareSpec] = Field(min_length=1)
    modules: dict[str, ModuleSpec] = Field(min_length=1)
    edges: list[tuple[str, str]] = Field(default_factory=list)

    @field_validator("edges", mode="before")
    @classmethod
    def _edges_are_pairs(cls, v: object) -> object:
        if isinstance(v, list):
            for e in v:
                if not isinstance(e, list | tuple) or len(e) != 2:
                    raise ValueError(f"each edge must be a [parent, child] pair, got {e!r}")
        return v

    @model_validator(mode="after")
    def _check_references(self) -> ProblemSpec:
        for name, mod in self.modules.items():
            for entry in mod.profile:
                if entry.hardware not in self.hardware:
                    raise ValueError(f"module {name!r}: profile names unknown hardware {entry.hardware!r}")
        for src, dst in self.edges:
            for end in (src, dst):
                if end not in self.modules:
                    raise ValueError(f"edge [{src!r}, {dst!r}] names unknown module {end!r}")
            if src == dst:
                raise ValueError(f"edge [{src!r}, {dst!r}] is a self-loop")
        topological_order(list(self.modules), list(self.edges))
        return self

    def order(self) -> list[str]:
        """Modules in topological order."""
        return topological_order(list(self.modules), list(self.edges))

    def children(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {m: [] for m in self.modules}
        for src, dst in self.edges:
            out[src].append(dst)
        return out

    def parents(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {m: [] for m in self.modules}
        for src, dst in self.edges:
            out[dst].append(src)
        return out

    def paths(self) -> list[tuple[str, ...]]:
        """Every root-to-leaf path of the DAG (each must finish within the SLO)."""
        children = self.children()
        parents = self.parents()
        out: list[tuple[str, ...]] = []

        def walk(node: str, prefix: tuple[str, ...]) -> None:
            path = (*prefix, node)
            if not children[node]:
                out.append(path)
            for c in children[node]:
                walk(c, path)

        for root in (m for m in self.order() if not parents[m]):
            walk(root, ())
        return out


class MachineGroup(_Open):
    """``machines`` machines running one configuration, each at ``rate_per_machine`` req/s
    (dummy load included). Groups are listed in throughput-cost dispatch order. ``duration_s`` is the
    configuration's device time per batch, ``overhead_s`` its latency-only overhead (written out only
    when non-zero): a worst case is ``duration_s + overhead_s`` + the batch's collection time."""

    hardware: str
    batch: int = Field(ge=1)
    concurrency: int = Field(default=1, ge=1)
    machines: int = Field(ge=1)
    rate_per_machine: float = Field(ge=0)
    duration_s: float = Field(default=0.0, ge=0)
    overhead_s: float = Field(default=0.0, ge=0, exclude_if=_zero)


class ModulePlan(_Open):
    latency_budget_s: float
    worst_case_latency_s: float
    dummy_rate: float = 0.0
    groups: list[MachineGroup]


def planned_device_occupancy(mp: ModulePlan, hardware: str | None = None) -> float | None:
    """The device occupancy the plan predicts for the module's machines of ``hardware`` (None: all
    of them) from its real load: each machine runs ``rate_per_machine / batch`` batches a second,
    each holding one of ``concurrency`` model slots for ``duration_s`` (device time: the hop and the
    window are latency, not occupancy), averaged over the machines; the dummy load that fills
    machines to their planned rate (``dummy_rate``) is never sent, so it is taken out in proportion.
    None when the plan has no such machine."""
    total = sum(group.machines * group.rate_per_machine for group in mp.groups)
    real = max(0.0, total - mp.dummy_rate) / total if total > 0 else 0.0
    machines = busy = 0.0
    for group in mp.groups:
        if hardware is not None and group.hardware != hardware:
            continue
        machines += group.machines
        busy += group.machines * group.rate_per_machine * group.duration_s / (group.batch * group.concurrency)
    return real * busy / machines if machines else None


class Plan(_Open):
    """The planner's output (docs/design.md §3). ``cost_per_hour`` is the occupancy cost (sum of p*f/t,
    dummy load paid), ``billed_per_hour`` the sum of machines * price; ``objective`` says which one
    the plan minimises."""

    objective: Objective
    cost_per_hour: float
    billed_per_hour: float
    solve_ms: float
    modules: dict[str, ModulePlan]


class AppModuleSpec(_Open):
    """A module of an application spec: which model it runs and whether it is a DNN or CPU stage."""

    model: str
    kind: Literal["dnn", "cpu"] = "dnn"


class AppSpec(_Open):
    """An application: DAG of modules with fan-out factors on the edges and a default SLO.

    ``edges`` are ``[parent, child]`` or ``[parent, child, fan_out]``: the child receives ``fan_out``
    requests per request of the parent (e.g. 2.5 detected vehicles per frame). The roots receive the
    frame rate.
    """

    name: str
    slo_s: float = Field(gt=0)
    modules: dict[str, AppModuleSpec] = Field(min_length=1)
    edges: list[tuple[str, str, float]] = Field(default_factory=list)

    @field_validator("edges", mode="before")
    @classmethod
    def _default_fan_out(cls, v: object) -> object:
        if isinstance(v, list):
            return [(*e, 1.0) if isinstance(e, list | tuple) and len(e) == 2 else e for e in v]
        return v

    @model_validator(mode="after")
    def _check(self) -> AppSpec:
        for src, dst, fan in self.edges:
            for end in (src, dst):
                if end not in self.modules:
                    raise ValueError(f"edge [{src!r}, {dst!r}] names unknown module {end!r}")
            if fan <= 0:
                raise ValueError(f"edge [{src!r}, {dst!r}] has non-positive fan_out {fan}")
        topological_order(list(self.modules), [(s, d) for s, d, _ in self.edges])
        return self

    def module_rates(self, frame_rate: float) -> dict[str, float]:
        """Request rate of every module when the roots receive ``frame_rate`` frames/s."""
        order = topological_order(list(self.modules), [(s, d) for s, d, _ in self.edges])
        has_parent = {d for _, d, _ in self.edges}
        rates = {m: (frame_rate if m not in has_parent else 0.0) for m in order}
        for m in order:
            for src, dst, fan in self.edges:
                if src == m:
                    rates[dst] += rates[m] * fan
        return rates

    def to_problem(
        self,
        frame_rate: float,
        profiles: dict[str, list[ProfileEntry]],
        hardware: dict[str, HardwareSpec],
        slo_s: float | None = None,
    ) -> ProblemSpec:
        """Build the planner's problem: ``profiles`` maps a model name to its profile entries."""
        modules: dict[str, ModuleSpec] = {}
        for name, rate in self.module_rates(frame_rate).items():
            model = self.modules[name].model
            if model not in profiles:
                raise ValueError(f"no profile for model {model!r} of module {name!r}")
            entries = [e for e in profiles[model] if e.hardware in hardware]
            modules[name] = ModuleSpec(rate=rate, profile=entries)
        return ProblemSpec(
            name=f"{self.name}@{frame_rate:g}fps",
            slo_s=slo_s if slo_s is not None else self.slo_s,
            hardware=hardware,
            modules=modules,
            edges=[(s, d) for s, d, _ in self.edges],
        )
