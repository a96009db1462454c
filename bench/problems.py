"""What the benchmarks do to a problem before planning it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from planner.models import ProblemSpec

__all__ = ["scaled"]


def scaled(problem: ProblemSpec, factor: float, slo_factor: float = 1.0) -> ProblemSpec:
    """``problem`` with every rate times ``factor`` (e.g. ``1 + headroom``: what the control loop plans
    for) and its SLO times ``slo_factor``."""
    return problem.model_copy(
        update={
            "slo_s": problem.slo_s * slo_factor,
            "modules": {
                module: spec.model_copy(update={"rate": spec.rate * factor})
                for module, spec in problem.modules.items()
            },
        }
    )
