"""What was planned, read from the config table: the versioned plan store (``plan#...``: each
version's manifest with the fleet's billed and occupancy cost, the apps' deployments and the packed
fleet) the control loop publishes. The report compares what was observed with this."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.adapters.plan_store import Manifest, PlanStore
from core.errors import ConfigError
from skinflint.report.cloudwatch import ReportError

if TYPE_CHECKING:
    from core.schema import Deployment

__all__ = ["PlanHistory", "PlannedVersion", "load_plan_history"]


@dataclass(frozen=True)
class PlannedVersion:
    """One plan as it applied from ``activate_at``: the fleet's cost and each app's part of it."""

    version: int
    activate_at: float  # epoch s
    billed_per_hour: float  # whole instances x price (the fleet, every app)
    occupancy_per_hour: float
    app_billed_per_hour: dict[str, float] = field(default_factory=dict)  # each app's part of the bill
    counts: dict[str, int] = field(default_factory=dict)  # instances per hardware type


@dataclass
class PlanHistory:
    versions: list[PlannedVersion]  # ascending activate_at
    deployments: dict[str, Deployment]  # the latest deployment of every app
    source: str  # "plan store" | "none"

    def at(self, when: float) -> PlannedVersion | None:
        """The version in force at ``when`` (the first one before it started)."""
        best = None
        for version in self.versions:
            if version.activate_at <= when:
                best = version
        return best or (self.versions[0] if self.versions else None)


def _app_parts(fleet: Any) -> dict[str, float]:
    """Each app's part of the fleet's bill: every instance's price split over its shares in
    proportion to their occupancy (a dedicated instance goes wholly to its app)."""
    parts: dict[str, float] = {}
    for inst in fleet.instances:
        price = float(fleet.prices[inst.hardware])
        total = sum(share.occupancy for share in inst.shares)
        for share in inst.shares:
            weight = share.occupancy / total if total > 0 else 1.0 / len(inst.shares)
            parts[share.app] = parts.get(share.app, 0.0) + price * weight
    return parts


def _from_plan_store(ddb: Any, table: str) -> PlanHistory | None:
    store = PlanStore(ddb, table)
    current = store.current()
    if current is None:
        return None
    # the versions served: the chain of ``previous`` from the current one (each manifest names the
    # version served when it was published, so a version superseded before it activated, reserved
    # or orphaned versions, are not on it); a manifest already collected ends the chain
    chain: list[Manifest] = [current]
    seen = {current.version}
    while (prev := chain[-1].previous) is not None and prev not in seen:
        manifest = store.manifest(prev)
        if manifest is None:
            break
        chain.append(manifest)
        seen.add(prev)
    versions: list[PlannedVersion] = []
    for manifest in chain:
        version = manifest.version
        fleet = store.fleet(version)
        versions.append(
            PlannedVersion(
                version=version,
                activate_at=manifest.activate_at,
                billed_per_hour=manifest.billed_per_hour,
                occupancy_per_hour=manifest.occupancy_per_hour,
                app_billed_per_hour=_app_parts(fleet) if fleet is not None else {},
                counts=dict(manifest.counts),
            )
        )
    versions.sort(key=lambda version: version.activate_at)
    return PlanHistory(versions, store.deployments(current.version), "plan store")


def load_plan_history(ddb: Any, table: str) -> PlanHistory:
    """The plans of the config table ``table`` (see the module doc)."""
    try:
        history = _from_plan_store(ddb, table)
    except ConfigError as exc:
        raise ReportError(f"cannot read the plans in {table}: {exc}") from exc
    return history if history is not None else PlanHistory([], {}, "none")
