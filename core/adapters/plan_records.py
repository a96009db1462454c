"""The documents the plan store keeps (core/adapters/plan_store.py, docs/control.md "Plan store"): a
version's manifest and its per-app entries, slot claims and instance heartbeats, and what a slot's
content is. Pure models: the store reads and writes them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from planner.packing import Instance

__all__ = ["AppEntry", "Claim", "InstanceStatus", "Manifest", "slot_content"]


class AppEntry(BaseModel):
    """What a version holds for one app. Extra keys (planned rate, spec revision, ...) are kept."""

    model_config = ConfigDict(extra="allow")

    sha256: str  # of the Deployment document
    frame_rate: float
    changed: list[str] = Field(default_factory=list)  # modules given fresh queues in this version


class Manifest(BaseModel):
    """The head of a version. ``activate_at``: the front dispatches on this version from that time
    on (epoch s); until then it keeps dispatching on ``previous`` (the version served when this one
    was published) while workers preload. A *gated* version (``activate_by`` set) is published with
    ``activate_at = activate_by``, the latest activation; the control loop moves ``activate_at``
    earlier once every slot is held by an instance that loaded the version (``activation``
    ``"ready"``, ``ready_at``), or records at the deadline which slots were not ready
    (``activation`` ``"deadline"``, ``unready``)."""

    model_config = ConfigDict(extra="allow")

    version: int
    created_at: float
    activate_at: float
    reason: str
    previous: int | None
    apps: dict[str, AppEntry]
    counts: dict[str, int] = Field(default_factory=dict)  # planned instances per hardware type
    billed_per_hour: float = 0.0
    occupancy_per_hour: float = 0.0
    fleet_sha256: str = ""
    activate_by: float | None = None  # epoch s: the latest activation (None: ``activate_at`` is fixed)
    activation: str | None = None  # how a gated version activated: "ready" | "deadline" (None: not yet)
    ready_at: float | None = None  # epoch s: when every slot was first seen served by a loaded instance
    unready: list[str] = Field(default_factory=list)  # slots not ready when it activated at the deadline

    @property
    def gated(self) -> bool:
        """Activation waits for the slots to be served and nothing has decided it yet."""
        return self.activate_by is not None and self.activation is None

    def serving(self, now: float) -> int:
        """The version the front dispatches on at ``now``."""
        if now < self.activate_at and self.previous is not None:
            return self.previous
        return self.version


class Claim(BaseModel):
    slot: str
    instance_id: str
    hardware: str
    at: float


class InstanceStatus(BaseModel):
    """An instance's heartbeat (``state``: starting, idle, serving, draining, gone): the slot it
    holds, ``version`` the newest version it adopted, and ``serving_versions`` every version whose
    shares it still runs (during a version change the superseded version's shares drain after the
    new one's have started, so an instance serves two or more at once). A heartbeat written before
    ``serving_versions`` existed carries ``version`` alone: :meth:`served_versions` reads both."""

    model_config = ConfigDict(extra="allow")

    instance_id: str
    hardware: str
    version: int | None = None
    serving_versions: list[int] = Field(default_factory=list)
    slot: str | None = None
    state: str = "serving"
    at: float

    def served_versions(self) -> set[int]:
        """Every version this instance may still poll a queue of: ``serving_versions`` and
        ``version`` (the only one an old heartbeat records)."""
        out = set(self.serving_versions)
        if self.version is not None:
            out.add(self.version)
        return out


def slot_content(instance: Instance) -> tuple[tuple[Any, ...], ...]:
    """What an instance must have loaded to serve a slot: its shares' keys (app, module, hardware,
    batch, concurrency, duration). Two slots with equal content are served without reloading."""
    return tuple(sorted(share.key for share in instance.shares))
