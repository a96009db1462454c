"""The Skinflint stacks: stateful (data), fleet (VPC + workers), control (planner), front (API),
observability (dashboard + alarms)."""

from cdk.stacks.control import ControlStack, ControlStackProps
from cdk.stacks.fleet import FleetStack, FleetStackProps
from cdk.stacks.front import FrontStack, FrontStackProps
from cdk.stacks.observability import ObservabilityStack, ObservabilityStackProps
from cdk.stacks.stateful import StatefulStack

__all__ = [
    "ControlStack",
    "ControlStackProps",
    "FleetStack",
    "FleetStackProps",
    "FrontStack",
    "FrontStackProps",
    "ObservabilityStack",
    "ObservabilityStackProps",
    "StatefulStack",
]
