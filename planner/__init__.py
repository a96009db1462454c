"""Skinflint's planner: pure cost-minimising scheduling of DNN pipelines (numpy + pydantic only)."""

import importlib
from typing import TYPE_CHECKING, Any

from planner.errors import InfeasibleError, PlannerError, ProblemError
from planner.models import (
    AppModuleSpec,
    AppSpec,
    HardwareSpec,
    MachineGroup,
    ModulePlan,
    ModuleSpec,
    Objective,
    Plan,
    ProblemSpec,
    ProfileEntry,
)

if TYPE_CHECKING:
    from planner.fleet import FleetResult, plan_fleet
    from planner.packing import FleetPlan, Instance, PackingError, Share, check_fleet, pack
    from planner.robust import Realisation, realise, solve_dispatchable
    from planner.scaling import Hysteresis, ScalingError, forecast_rate

# Fleet packing and scaling load on first use: `import planner` stays light (no numpy) for the front.
_LAZY = {
    "FleetResult": "planner.fleet",
    "plan_fleet": "planner.fleet",
    "FleetPlan": "planner.packing",
    "Instance": "planner.packing",
    "PackingError": "planner.packing",
    "Share": "planner.packing",
    "check_fleet": "planner.packing",
    "pack": "planner.packing",
    "Hysteresis": "planner.scaling",
    "ScalingError": "planner.scaling",
    "forecast_rate": "planner.scaling",
    "Realisation": "planner.robust",
    "realise": "planner.robust",
    "solve_dispatchable": "planner.robust",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'planner' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "AppModuleSpec",
    "AppSpec",
    "FleetPlan",
    "FleetResult",
    "HardwareSpec",
    "Hysteresis",
    "InfeasibleError",
    "Instance",
    "MachineGroup",
    "ModulePlan",
    "ModuleSpec",
    "Objective",
    "PackingError",
    "Plan",
    "PlannerError",
    "ProblemError",
    "ProblemSpec",
    "ProfileEntry",
    "Realisation",
    "ScalingError",
    "Share",
    "check_fleet",
    "forecast_rate",
    "pack",
    "plan_fleet",
    "realise",
    "solve_dispatchable",
]
