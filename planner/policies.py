"""Named planning policies: Skinflint's own, the papers' algorithms, the baselines and the
ablation switches of Harpagon §IV-C. A policy is data; :mod:`planner.solve` interprets it."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from planner.errors import ProblemError

if TYPE_CHECKING:
    from planner.latency import LatencyModel

__all__ = ["POLICIES", "PolicySpec", "get_policy"]

SplitMethod = Literal["exact", "lc", "tb", "greedy", "even", "quantized", "exhaustive"]
HardwareChoice = Literal["all", "cheapest", "priciest", "single"]
DummyChoice = Literal["none", "harpagon", "piccolo", "both"]


@dataclass(frozen=True)
class PolicySpec:
    name: str
    description: str
    model: LatencyModel = "tc"
    module: Literal["exact", "alg1"] = "alg1"
    max_configs: int | None = None
    dummy: DummyChoice = "harpagon"
    reassign: Literal["none", "one", "all"] = "all"
    hardware: HardwareChoice = "all"
    split: SplitMethod = "lc"
    quantum_s: float = 0.01
    merger: bool = True
    cost_direct: int = 2  # undo this many final Algorithm 2 iterations and redo them by cost
    batching: bool = True


_HARPAGON = PolicySpec(
    "harpagon",
    "Harpagon as printed: TC dispatch, Algorithm 1, dummy t-u, latency reassigner, "
    "Algorithm 2 split with node merger and cost-direct",
)

POLICIES: dict[str, PolicySpec] = {
    p.name: p
    for p in [
        PolicySpec(
            "skinflint",
            "best plan: exact module scheduling and exact latency split under Theorem 1 "
            "(branch and bound; falls back to the Harpagon heuristics past a search limit)",
            module="exact",
            split="exact",
            dummy="none",
            reassign="all",
        ),
        PolicySpec(
            "optimal",
            "exhaustive reference: every configuration combination (occupancy) or every "
            "Pareto-optimal machine mix per module (billed), combined exhaustively",
            module="exact",
            split="exhaustive",
            dummy="none",
            reassign="none",
        ),
        _HARPAGON,
        PolicySpec(
            "piccolo",
            "Piccolo: TC dispatch, Algorithm 1, dummy b/(L-d)-u, reassigner, LC split",
            dummy="piccolo",
            merger=False,
            cost_direct=0,
        ),
        PolicySpec(
            "nexus",
            "Nexus: round-robin dispatch (2d), two configs, one hardware type, quantized DP split",
            model="rr",
            max_configs=2,
            dummy="none",
            reassign="none",
            hardware="single",
            split="quantized",
            quantum_s=0.01,
        ),
        PolicySpec(
            "scrooge",
            "Scrooge: batches at machine throughput (d + b/t), two configs, heterogeneous, "
            "throughput-based split",
            model="dt",
            max_configs=2,
            dummy="none",
            reassign="none",
            split="tb",
        ),
        PolicySpec(
            "inferline",
            "InferLine: round-robin (2d), one config, heterogeneous, greedy cost-reduction split",
            model="rr",
            max_configs=1,
            dummy="none",
            reassign="none",
            split="greedy",
        ),
        PolicySpec(
            "clipper",
            "Clipper: round-robin (2d), one config, one hardware type, even split",
            model="rr",
            max_configs=1,
            dummy="none",
            reassign="none",
            hardware="single",
            split="even",
        ),
        # Harpagon §IV-C ablations
        replace(_HARPAGON, name="harp-2d", description="ablation: round-robin dispatch (2d)", model="rr"),
        replace(
            _HARPAGON, name="harp-dt", description="ablation: dispatch at machine throughput", model="dt"
        ),
        replace(_HARPAGON, name="harp-1c", description="ablation: one config per module", max_configs=1),
        replace(_HARPAGON, name="harp-2c", description="ablation: two configs per module", max_configs=2),
        replace(
            _HARPAGON, name="harp-nb", description="ablation: no batching (batch 1 only)", batching=False
        ),
        replace(
            _HARPAGON, name="harp-nhc", description="ablation: cheapest hardware only", hardware="cheapest"
        ),
        replace(
            _HARPAGON, name="harp-nhe", description="ablation: priciest hardware only", hardware="priciest"
        ),
        replace(_HARPAGON, name="harp-nd", description="ablation: no dummy requests", dummy="none"),
        replace(_HARPAGON, name="harp-0re", description="ablation: no latency reassignment", reassign="none"),
        replace(_HARPAGON, name="harp-1re", description="ablation: reassign to one module", reassign="one"),
        replace(_HARPAGON, name="harp-tb", description="ablation: throughput-based split", split="tb"),
        replace(
            _HARPAGON, name="harp-q0.01", description="ablation: quantized split, 0.01 s", split="quantized"
        ),
        replace(
            _HARPAGON,
            name="harp-q0.1",
            description="ablation: quantized split, 0.1 s",
            split="quantized",
            quantum_s=0.1,
        ),
    ]
}

BASELINES = ["nexus", "scrooge", "inferline", "clipper"]


def get_policy(name: str) -> PolicySpec:
    try:
        return POLICIES[name]
    except KeyError:
        raise ProblemError(f"unknown policy {name!r}; choose one of: {', '.join(POLICIES)}") from None
