"""Skinflint's planner: pure cost-minimising scheduling of DNN pipelines (numpy + pydantic only)."""

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

__all__ = [
    "AppModuleSpec",
    "AppSpec",
    "HardwareSpec",
    "InfeasibleError",
    "MachineGroup",
    "ModulePlan",
    "ModuleSpec",
    "Objective",
    "Plan",
    "PlannerError",
    "ProblemError",
    "ProblemSpec",
    "ProfileEntry",
]
