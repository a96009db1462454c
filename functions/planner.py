"""AWS Lambda entry point of the planner (EventBridge schedule, app changes, fleet events).

Thin: build the controller from the environment on the first invocation (kept while the Lambda is
warm), hand the event over, return the epoch's JSON summary. Logs are JSON lines with the Lambda
context (functions/telemetry.py). Environment (cdk/stacks/control.py): ``SKINFLINT_CONFIG_TABLE``,
``SKINFLINT_BUCKET``, ``SKINFLINT_METRICS_NAMESPACE``, ``SKINFLINT_ASG_NAMES`` (JSON hardware ->
group), ``SKINFLINT_PLANNER_EPOCH_S``, ``SKINFLINT_TASKS_DLQ_ARN``, ``SKINFLINT_QUEUE_PREFIX`` and the
optional tuning variables of :class:`control.epoch.ControlConfig`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from control.epoch import ControlConfig
from control.service import build_controller, handle_event
from core.settings import DataPlaneConfig
from functions.telemetry import entry_point

if TYPE_CHECKING:
    from control.epoch import Controller

__all__ = ["handler", "reset"]

_controller: dict[str, Controller] = {}


def reset() -> None:
    """Forget the cached controller (tests, or the local stack after changing the environment)."""
    _controller.clear()


@entry_point
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    if "c" not in _controller:
        _controller["c"] = build_controller(DataPlaneConfig.from_env(), ControlConfig.from_env())
    return handle_event(_controller["c"], event)
