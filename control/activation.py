"""Activation of a new plan version, gated on its slots being served (docs/control.md, "Activation").

A version published over one that is serving is *gated*: it is published with ``activate_at`` at its
latest (``activate_by``: ``created_at + activate_max_lead_s``), and the front keeps dispatching on
the previous version meanwhile. :func:`check_activation` (run by every epoch, every backlog check
and, on the Lambda, in a short wait after publishing) reads the version's slot claims and the
instances' heartbeats: once every slot is claimed by an instance whose fresh heartbeat says it
serves that slot of that version (the agent heartbeats after it loaded every model of the slot), it
moves ``activate_at`` earlier, to ``max(now + activate_notice_s, created_at + activate_lead_s)``,
with a conditional rewrite of the pointer (:meth:`PlanStore.set_activation`). The notice gives the
front (1 s pointer cache) and the agents (1 s poll) time to see the new time before it comes. A
version whose slots are not all served by ``activate_by`` activates anyway (a fleet that cannot
grow must not freeze the plan); the first check after that records which slots were not ready
(``unready``), logs them and emits ``ActivationUnreadySlots``.

In three steps: :func:`slot_readiness` reads the claims and heartbeats, :func:`decide_activation`
decides from them (no I/O), :func:`apply_activation` rewrites the pointer and emits the metrics;
:meth:`control.epoch.Controller.check_activation` runs them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.adapters.plan_store import VersionConflictError

if TYPE_CHECKING:
    from core.adapters.metrics import Metrics
    from core.adapters.plan_store import Manifest, PlanStore

__all__ = ["ActivationCheck", "apply_activation", "decide_activation", "slot_readiness"]

log = logging.getLogger("skinflint.control")


@dataclass
class ActivationCheck:
    """What a check found; ``as_json`` goes into the epoch's and the backlog check's summaries."""

    status: str  # active (not gated, or decided) | waiting | ready (moved earlier) | deadline | conflict
    version: int | None = None
    slots: int = 0
    ready: int = 0
    missing: dict[str, str] = field(default_factory=dict)  # slot -> why it is not ready
    activate_at: float | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            key: value for key, value in self.__dict__.items() if value not in (None, {}) or key == "status"
        }


def slot_readiness(store: PlanStore, version: int, now: float, fresh_s: float) -> tuple[int, dict[str, str]]:
    """(slots of ``version``, slot -> why it is not served yet). A slot is ready when it is claimed
    and its holder's heartbeat, at most ``fresh_s`` old, says it serves that slot of ``version``
    (state ``serving``)."""
    fleet = store.fleet(version)
    if fleet is None:
        return 0, {}
    # eventually consistent, as the heartbeats' scan: a claim or heartbeat a moment old (the
    # replicas' lag, under a second) only moves the activation to the next check
    claims = store.claims(version, fleet, consistent=False)
    beats = store.instances()
    missing: dict[str, str] = {}
    for inst in fleet.instances:
        slot = str(inst.slot)
        claim = claims.get(slot)
        if claim is None:
            missing[slot] = "unclaimed"
            continue
        beat = beats.get(claim.instance_id)
        if beat is None or beat.version != version or beat.slot != slot:
            missing[slot] = f"{claim.instance_id} has not loaded it"
        elif beat.state != "serving":
            missing[slot] = f"{claim.instance_id} is {beat.state}"
        elif beat.at < now - fresh_s:
            missing[slot] = f"{claim.instance_id} silent for {now - beat.at:.0f} s"
    return len(fleet.instances), missing


def decide_activation(
    cur: Manifest, now: float, slots: int, missing: dict[str, str], *, lead_s: float, notice_s: float
) -> ActivationCheck:
    """What to do with a gated version (``cur``) whose readiness is ``slots`` and ``missing``
    (:func:`slot_readiness`): ``deadline`` (its deadline came first: it is active, say what was not
    ready), ``waiting`` (slots not served yet) or ``ready`` (activate at ``activate_at``, earlier)."""
    out = ActivationCheck(status="active", version=cur.version, activate_at=cur.activate_at)
    out.slots, out.missing = slots, missing
    out.ready = out.slots - len(out.missing)
    if now >= cur.activate_at:
        out.status = "deadline"
    elif out.missing:
        out.status = "waiting"
    else:
        out.status = "ready"
        out.activate_at = min(cur.activate_at, max(now + notice_s, cur.created_at + lead_s))
    return out


def apply_activation(
    plans: PlanStore, metrics: Metrics, cur: Manifest, decision: ActivationCheck, now: float
) -> ActivationCheck:
    """Rewrite the pointer as ``decision`` says (a ``deadline`` records the unready slots, ``ready``
    moves ``activate_at`` earlier) and emit the metrics. Never raises a
    :class:`~core.adapters.plan_store.VersionConflictError`: a concurrent publish or check wins (status
    ``conflict``)."""
    if decision.status not in ("deadline", "ready"):
        return decision
    out = ActivationCheck(
        status=decision.status,
        version=decision.version,
        slots=decision.slots,
        ready=decision.ready,
        missing=decision.missing,
        activate_at=cur.activate_at,
    )
    try:
        if decision.status == "deadline":
            unready = [f"{slot}: {why}" for slot, why in sorted(out.missing.items())]
            plans.set_activation(cur, cur.activate_at, activation="deadline", unready=unready)
            metrics.put("ActivationUnreadySlots", len(unready))
            metrics.put("ActivationSeconds", cur.activate_at - cur.created_at, "Seconds")
            if unready:
                log.warning(
                    "v%d activated at its deadline (%.0f s after publishing) with %d of %d slot(s) not "
                    "ready: %s",
                    cur.version,
                    cur.activate_at - cur.created_at,
                    len(unready),
                    out.slots,
                    "; ".join(unready),
                )
            return out
        at = decision.activate_at
        assert at is not None  # a ready decision says when
        plans.set_activation(cur, at, activation="ready", ready_at=now)
    except VersionConflictError as exc:
        out.status = "conflict"
        log.info("activation of v%d not rewritten: %s", cur.version, exc)
        return out
    out.activate_at = at
    metrics.put("ActivationUnreadySlots", 0)
    metrics.put("ActivationSeconds", at - cur.created_at, "Seconds")
    log.info(
        "v%d: every slot served %.1f s after publishing; active at %+.1f s",
        cur.version,
        now - cur.created_at,
        at - now,
    )
    return out
