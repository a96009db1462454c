"""Settings of the control loop (:class:`ControlConfig`; ``from_env``: the planner Lambda's
environment). The registration's feasibility check reads the same settings
(:func:`control.registration.checks.planner_settings`)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from control.errors import ControlError
from control.hops import HopSettings
from core.adapters.rates import DEFAULT_SHED_CAP
from core.settings import DEFAULT_DELETE_LINGER_S, delete_linger_from_env

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["ControlConfig"]


@dataclass(frozen=True)
class ControlConfig:
    """Settings of the control loop (``from_env``: the planner Lambda's environment)."""

    asg_names: dict[str, str] = field(default_factory=dict)  # hardware -> Auto Scaling group name
    epoch_s: float = 60.0  # s between scheduled epochs
    min_gap_s: float = 10.0  # s: never re-plan sooner than this after the previous epoch (Nexus)
    headroom: float = 0.1  # planned rate = forecast * (1 + headroom)
    trend_epochs: int = 5  # observations the trend line is fitted to
    history_len: int = 20  # observations kept per app
    activate_lead_s: float = 15.0  # s: the earliest a version activates after publishing (preload)
    activate_max_lead_s: float = 180.0  # s: the latest, served or not (<= activate_lead_s: no gating)
    activate_notice_s: float = 3.0  # s between moving an activation earlier and the new time
    activate_wait_s: float = 0.0  # s an epoch that published waits for the slots to be served
    activate_poll_s: float = 2.0  # s between readiness reads while it waits
    heartbeat_fresh_s: float = 30.0  # s: a heartbeat older than this does not show a slot served
    # s: the cold-start hop (SQS send, delivery, receive) of a module not measured yet (docs/control.md
    # says where 0.05 comes from); a measured p99 replaces it per module (control/hops.py)
    hop_overhead_s: float = 0.05
    # s: the worker's own latency-only time per batch besides the delivery: its batch-closing grace
    # (workers.worker.Worker.grace_s); added to every module's hop, the default or a measured one
    batch_overhead_s: float = 0.0
    # fraction a derived profile entry (source "derived": no measurement of that model on that class
    # yet) is planned longer by, until an instance measures it (docs/profiles.md); 0.5 = 1 / 0.66, the
    # worst derived/measured ratio of the roofline derivation's leave-one-out on CUDA-graph points
    derived_margin: float = 0.5
    measure_hops: bool = True  # plan each module with the p99 of its measured deliveries (HopDelayBucket)
    hop_floor_s: float = 0.02  # s: the least hop a measurement plans
    hop_min_samples: int = 100  # deliveries in the rate window before a module's p99 is used
    hop_band_s: float = 0.01  # s: a measured hop this much (or less) below the one in force keeps it
    calibrate: bool = False  # opt-in: learn service-time corrections from ServiceOverrunMs (calibration.py)
    rate_period_s: int = 60  # s: CloudWatch period the observed rate is summed over
    # s: the rate window ends this long before now, so every writer (front, workers) has flushed the
    # values of its last period (they are stamped with the time they happened: adapters/metrics.py)
    rate_lag_s: float = 5.0
    unavailable_s: float = 600.0  # s a hardware type is left out after a failed launch
    stale_s: float = 180.0  # s: an instance whose heartbeat is older is gone
    # frames the front shed count as demand up to this many times those accepted (core/adapters/rates.py
    # ObservedRates; 0: plan from admitted frames alone): a flood of refused requests cannot raise the plan
    shed_demand_cap: float = DEFAULT_SHED_CAP
    # s past a frame's deadline before the sweeper accounts for it (control/sweeper.py); 0: no sweep
    sweep_grace_s: float = 120.0
    emulated_hardware: tuple[str, ...] = ()  # local stack: GPU classes emulated from profiles
    dlq_arn: str | None = None  # shared DLQ of the task queues (None: one DLQ per app)
    queue_prefix: str = "skinflint-"
    visibility_timeout_s: int = 30  # s: the longest a task queue's visibility timeout is
    # s: the shortest; each module's is its SLO + 2 x its longest batch + the delete linger + 5 s
    # (control/queues.py visibility_timeout_for): a dead worker's messages return that much sooner
    min_visibility_s: int = 10
    queue_workers: int = 1  # apps whose queues are created in parallel (moto's SQS is not thread-safe)
    policy: str = "skinflint"
    child_headroom: float = 0.0  # extra planned rate of child modules (planner.robust, docs/dispatch.md)
    # hardware -> the most machines of it one app's plan may use (the local stack: this host's real
    # CPU runs at most one); a module over it is planned without that class (problems.solve_within_caps)
    machine_caps: dict[str, int] = field(default_factory=dict)
    backlog_cooldown_s: float = 60.0  # s: an app's backlog is corrected at most once this often
    backlog_min_boost: float = 0.1  # a correction plans a late module for at least 1.1 x its capacity
    backlog_max_boost: float = 1.0  # ... and at most 2 x
    # the workers' delete linger (core.settings; the same SKINFLINT_DELETE_LINGER_S): the backlog
    # check allows for the processed messages it keeps in flight
    delete_linger_s: float = DEFAULT_DELETE_LINGER_S
    # CPU s an epoch's solving may take before apps whose plan still serves a changed problem (new
    # prices, a looser SLO) keep it and are solved in a later epoch (planner.fleet.plan_fleet's
    # solve_budget_s; None: all solved at once); apps without a serving plan are solved now, in full
    # while the budget allows, the rest with the solve's quick plan (carried, solved in full later)
    solve_budget_s: float | None = 0.4
    # wall s an epoch may spend, after publishing, choosing again the admission reserve of apps with a
    # shed_target whose rate moved past the review band (control/reserves.py; 0: never)
    reserve_review_s: float = 0.5
    # what an epoch's plan minimises (control/objective.py, docs/cost.md): "billed", the fleet's $/h;
    # "all-in", the fleet + the data plane's requests at the planned rates (one solve per batch floor),
    # priced with the deployment's design, frame size and frames per POST. Deployments and the local
    # stack set "all-in" (SKINFLINT_PLAN_OBJECTIVE); the dataclass default keeps tests on the fleet alone
    objective: str = "billed"
    data_plane_policy: str = "today"  # profiles.allin policy (SKINFLINT_DATA_PLANE_POLICY)
    frame_kb: float = 8.0  # KB per frame the data plane is priced at (SKINFLINT_FRAME_KB)
    frames_per_post: int = 10  # frames per POST the data plane is priced at (SKINFLINT_FRAMES_PER_POST)

    def __post_init__(self) -> None:
        if self.objective not in ("billed", "all-in"):
            raise ValueError(f"objective must be 'billed' or 'all-in', got {self.objective!r}")
        if self.objective == "all-in":
            from profiles.allin import policy_named  # noqa: PLC0415 - only an all-in epoch prices requests

            policy_named(self.data_plane_policy)  # AllInError (a ValueError) names the known ones
        if not (0 < self.frame_kb < float("inf")) or not 1 <= self.frames_per_post <= 10:  # noqa: PLR2004
            raise ValueError(
                f"frame_kb must be > 0 and frames_per_post 1-10, got {self.frame_kb}, {self.frames_per_post}"
            )
        if not 0 <= self.child_headroom < float("inf"):
            raise ValueError(f"child_headroom must be a finite fraction >= 0, got {self.child_headroom}")
        if not 0 <= self.rate_lag_s < float("inf"):
            raise ValueError(f"rate_lag_s must be a finite number of seconds >= 0, got {self.rate_lag_s}")
        if self.activate_lead_s < 0 or self.activate_max_lead_s < 0:
            raise ValueError("activation leads must be >= 0")
        if self.activate_notice_s < 0 or self.activate_wait_s < 0 or self.activate_poll_s <= 0:
            raise ValueError("activate_notice_s and activate_wait_s must be >= 0, activate_poll_s > 0")
        if not 0 <= self.backlog_min_boost <= self.backlog_max_boost < float("inf"):
            raise ValueError(
                f"backlog boosts must satisfy 0 <= min <= max < inf, got {self.backlog_min_boost}, "
                f"{self.backlog_max_boost}"
            )
        if self.solve_budget_s is not None and not 0 <= self.solve_budget_s < float("inf"):
            raise ValueError(f"solve_budget_s must be finite seconds >= 0 or None, got {self.solve_budget_s}")
        if not 0 <= self.batch_overhead_s < float("inf"):
            raise ValueError(f"batch_overhead_s must be finite seconds >= 0, got {self.batch_overhead_s}")
        if not 0 <= self.hop_floor_s < float("inf") or not 0 <= self.hop_band_s < float("inf"):
            raise ValueError(
                f"hop_floor_s and hop_band_s must be finite seconds >= 0, got {self.hop_floor_s}, "
                f"{self.hop_band_s}"
            )
        if not 0 <= self.derived_margin <= 10:  # noqa: PLR2004 -- 10 = derived entries planned 11x
            raise ValueError(f"derived_margin must be a fraction in [0, 10], got {self.derived_margin}")
        if self.hop_min_samples < 1:
            raise ValueError(f"hop_min_samples must be >= 1, got {self.hop_min_samples}")
        if not 0 <= self.reserve_review_s < float("inf"):
            raise ValueError(f"reserve_review_s must be finite seconds >= 0, got {self.reserve_review_s}")

    def hop_settings(self) -> HopSettings:
        """The measured hops' settings (control/hops.py)."""
        return HopSettings(
            default_s=self.hop_overhead_s,
            floor_s=self.hop_floor_s,
            min_samples=self.hop_min_samples,
            band_s=self.hop_band_s,
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ControlConfig:
        e = os.environ if env is None else env
        d = cls()
        try:
            return cls(
                asg_names=dict(json.loads(e.get("SKINFLINT_ASG_NAMES") or "{}")),
                epoch_s=float(e.get("SKINFLINT_PLANNER_EPOCH_S", d.epoch_s)),
                min_gap_s=float(e.get("SKINFLINT_PLANNER_MIN_GAP_S", d.min_gap_s)),
                headroom=float(e.get("SKINFLINT_PLANNER_HEADROOM", d.headroom)),
                activate_lead_s=float(e.get("SKINFLINT_ACTIVATE_LEAD_S", d.activate_lead_s)),
                activate_max_lead_s=float(e.get("SKINFLINT_ACTIVATE_MAX_LEAD_S", d.activate_max_lead_s)),
                activate_notice_s=float(e.get("SKINFLINT_ACTIVATE_NOTICE_S", d.activate_notice_s)),
                activate_wait_s=float(e.get("SKINFLINT_ACTIVATE_WAIT_S", d.activate_wait_s)),
                heartbeat_fresh_s=float(e.get("SKINFLINT_HEARTBEAT_FRESH_S", d.heartbeat_fresh_s)),
                hop_overhead_s=float(e.get("SKINFLINT_HOP_OVERHEAD_S", d.hop_overhead_s)),
                batch_overhead_s=float(e.get("SKINFLINT_BATCH_OVERHEAD_S", d.batch_overhead_s)),
                derived_margin=float(e.get("SKINFLINT_DERIVED_MARGIN", d.derived_margin)),
                measure_hops=(e.get("SKINFLINT_MEASURE_HOPS", "1").strip().lower() in ("1", "true", "yes")),
                hop_floor_s=float(e.get("SKINFLINT_HOP_FLOOR_S", d.hop_floor_s)),
                hop_min_samples=int(e.get("SKINFLINT_HOP_MIN_SAMPLES", d.hop_min_samples)),
                hop_band_s=float(e.get("SKINFLINT_HOP_BAND_S", d.hop_band_s)),
                calibrate=(e.get("SKINFLINT_CALIBRATE", "0").strip().lower() in ("1", "true", "yes")),
                rate_period_s=int(e.get("SKINFLINT_RATE_PERIOD_S", d.rate_period_s)),
                rate_lag_s=float(e.get("SKINFLINT_RATE_LAG_S", d.rate_lag_s)),
                unavailable_s=float(e.get("SKINFLINT_UNAVAILABLE_S", d.unavailable_s)),
                stale_s=float(e.get("SKINFLINT_INSTANCE_STALE_S", d.stale_s)),
                sweep_grace_s=float(e.get("SKINFLINT_SWEEP_GRACE_S", d.sweep_grace_s)),
                shed_demand_cap=float(e.get("SKINFLINT_SHED_DEMAND_CAP", d.shed_demand_cap)),
                emulated_hardware=tuple(
                    h for h in (e.get("SKINFLINT_EMULATED_HARDWARE") or "").split(",") if h
                ),
                dlq_arn=e.get("SKINFLINT_TASKS_DLQ_ARN") or None,
                queue_prefix=e.get("SKINFLINT_QUEUE_PREFIX", d.queue_prefix),
                visibility_timeout_s=int(e.get("SKINFLINT_VISIBILITY_TIMEOUT_S", d.visibility_timeout_s)),
                min_visibility_s=int(e.get("SKINFLINT_MIN_VISIBILITY_S", d.min_visibility_s)),
                queue_workers=max(1, int(e.get("SKINFLINT_QUEUE_WORKERS", d.queue_workers))),
                child_headroom=float(e.get("SKINFLINT_CHILD_HEADROOM", d.child_headroom)),
                machine_caps={
                    k: int(v) for k, v in json.loads(e.get("SKINFLINT_MACHINE_CAPS") or "{}").items()
                },
                backlog_cooldown_s=float(e.get("SKINFLINT_BACKLOG_COOLDOWN_S", d.backlog_cooldown_s)),
                backlog_max_boost=float(e.get("SKINFLINT_BACKLOG_MAX_BOOST", d.backlog_max_boost)),
                delete_linger_s=delete_linger_from_env(e),
                solve_budget_s=_budget_from_env(e.get("SKINFLINT_SOLVE_BUDGET_S"), d.solve_budget_s),
                reserve_review_s=float(e.get("SKINFLINT_RESERVE_REVIEW_S", d.reserve_review_s)),
                objective=e.get("SKINFLINT_PLAN_OBJECTIVE", d.objective),
                data_plane_policy=e.get("SKINFLINT_DATA_PLANE_POLICY", d.data_plane_policy),
                frame_kb=float(e.get("SKINFLINT_FRAME_KB", d.frame_kb)),
                frames_per_post=int(e.get("SKINFLINT_FRAMES_PER_POST", d.frames_per_post)),
            )
        except (ValueError, TypeError) as exc:
            raise ControlError(f"bad planner setting in the environment: {exc}") from exc


def _budget_from_env(value: str | None, default: float | None) -> float | None:
    """``SKINFLINT_SOLVE_BUDGET_S``: seconds, or ``none`` (no budget: every changed app solved at once)."""
    if value is None or not value.strip():
        return default
    if value.strip().lower() in ("none", "off", "unlimited"):
        return None
    return float(value)
