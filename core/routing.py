"""Where a module request goes: the TC dispatch decision as a queue URL and a batch slot.

Mechanism only: the windows come from ``planner.dispatch`` (the policy); this module maps a slot to
its machine's queue and to epoch times. The decision is in process and costs a bisection (see
``skinflint bench dispatch``, ``bench/dispatch.py``)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from core.schema import Deployment, Payload, TaskMessage, TaskOut, queue_key

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["Route", "Router", "child_count", "child_region"]


@dataclass(frozen=True)
class Route:
    module: str
    queue_url: str
    group: int
    machine: int
    batch_id: int
    window_end: float  # epoch s
    module_deadline: float  # epoch s


class Router:
    """Routes module requests of one deployment. ``schedules`` maps a module to an object with
    ``slot_at(t)`` (``planner.dispatch.DispatchSchedule``)."""

    def __init__(self, deployment: Deployment, schedules: Mapping[str, Any]):
        self.deployment = deployment
        self._schedules = schedules
        self._origin = deployment.origin_s
        self._origins: dict[str, float] = {}
        # planner.dispatch and planner.robust load numpy: the front's first request pays for them, not
        # the Lambda's cold start (tests/unit/functions/test_lean_imports.py)
        from planner.dispatch import planned_spread_rate

        # a burst's spread rate: the plan's (dispatch-aware plans record it), else the planned rate
        self._rate = {
            module: planned_spread_rate(
                mp, sum(group.machines * group.rate_per_machine for group in mp.groups)
            )
            for module, mp in deployment.plan.modules.items()
        }
        from planner.robust import planned_spread_rates  # cold start: numpy (above)

        # a join's plan gives each parent's stream its own spread rate (docs/dispatch.md, "Joins")
        self._parent_rate = {
            module: planned_spread_rates(mp) for module, mp in deployment.plan.modules.items()
        }

    @classmethod
    def for_deployment(cls, deployment: Deployment) -> Router:
        from planner.dispatch import build_schedules  # numpy: not at cold start (see __init__)

        # lookup tables now: the first request routed must not pay for them
        return cls(
            deployment,
            {module: schedule.prepare() for module, schedule in build_schedules(deployment.plan).items()},
        )

    def schedule(self, module: str) -> Any:
        return self._schedules.get(module)

    def origin(self, module: str) -> float:
        """Epoch time of the module's schedule origin: the deployment's, shifted to the module's
        schedule phase when the plan fixes one (aligned duty cycles, ``planner.dispatch.schedule_origin``)."""
        origin = self._origins.get(module)
        if origin is None:
            from planner.dispatch import schedule_origin  # numpy: not at cold start (see __init__)

            sched = self._schedules.get(module)
            period = float(getattr(sched, "period_s", 0.0) or 0.0)
            mp = self.deployment.plan.modules.get(module)
            origin = self._origin if mp is None else schedule_origin(self._origin, mp, period)
            self._origins[module] = origin
        return origin

    def route(self, module: str, at: float) -> Route:
        origin = self.origin(module)
        slot = self._schedules[module].slot_at(at - origin)
        return Route(
            module=module,
            queue_url=self.deployment.queues[module][queue_key(slot.group, slot.machine)],
            group=slot.group,
            machine=slot.machine,
            batch_id=slot.batch_id,
            window_end=origin + slot.window_end_s,
            module_deadline=origin + slot.deadline_s,
        )

    def route_burst(self, module: str, at: float, n: int, parent: str | None = None) -> list[Route]:
        """Routes for ``n`` requests that appear at once (a parent batch's fan-out). The plan assumes
        a steady arrival rate, so the k-th request is dispatched as if it arrived at ``at + k / w``
        (w = the plan's spread rate for the module from ``parent``, ``dispatch.spread_rates[parent]``,
        else ``dispatch.spread_rate``, or without one its planned total rate): no window receives more
        than its batch (docs/dispatch.md)."""
        w = self._parent_rate.get(module, {}).get(parent or "") or self._rate.get(module) or 1.0
        return [self.route(module, at + k / w) for k in range(n)]

    def task(
        self,
        route: Route,
        *,
        request_id: str,
        task_id: str,
        accepted_at: float,
        enqueued_at: float,
        deadline: float,
        payload: Payload,
        region: list[float] | None = None,
        weight: str = "1",
        lineage: list[TaskOut] | None = None,
        recheck: bool = False,
    ) -> TaskMessage:
        return TaskMessage(
            idempotency_key=f"{request_id}/{task_id}",
            request_id=request_id,
            task_id=task_id,
            app=self.deployment.app,
            module=route.module,
            deployment_version=self.deployment.version,
            accepted_at=accepted_at,
            enqueued_at=enqueued_at,
            deadline=deadline,
            module_deadline=route.module_deadline,
            group=route.group,
            machine=route.machine,
            batch_id=route.batch_id,
            window_end=route.window_end,
            payload=payload,
            region=region,
            weight=weight,
            lineage=list(lineage or ()),
            recheck=recheck,
        )


def _unit(key: str) -> float:
    """A deterministic number in [0, 1) from a string (stable across processes and redeliveries)."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big") / 2**64


def child_count(task_key: str, child: str, fan_out: float) -> int:
    """How many requests of ``child`` one parent request yields: floor(f) or floor(f) + 1, chosen
    deterministically from the task key so the mean is ``f`` (the app's fan-out factor) and a
    redelivered parent forwards exactly the same children."""
    whole = int(fan_out)
    return whole + (1 if _unit(f"{task_key}>{child}") < fan_out - whole else 0)


def child_region(task_key: str, child: str, k: int) -> list[float]:
    """A deterministic crop box (fractions of the frame) for the k-th child request."""
    u, v = _unit(f"{task_key}>{child}#{k}x"), _unit(f"{task_key}>{child}#{k}y")
    x0, y0 = 0.6 * u, 0.6 * v
    return [round(x0, 4), round(y0, 4), round(x0 + 0.4, 4), round(y0 + 0.4, 4)]
