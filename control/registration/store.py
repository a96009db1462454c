"""The app registry: every registered revision's spec file in S3 (``registry/apps/<name>/r<revision>.json``,
and ``.seed.json``: the plan its feasibility check solved), an index item per app in the config table
(``appspec#<name>``: :class:`AppRecord`, written conditionally on the revision read), and the
planning requests (``control#replan``: asks the planner to run; it also runs on its schedule)."""

from __future__ import annotations

import hashlib
import time
from typing import TYPE_CHECKING

from pydantic import BaseModel, ValidationError

from control.errors import ControlError, RegistrationConflictError
from control.spec import RegistrationSpec, first_problem
from core.adapters.config_items import ItemConflictError
from core.errors import BlobError, ConfigError
from planner.models import Plan

if TYPE_CHECKING:
    from collections.abc import Iterable

    from core.adapters.blobs import BlobStore
    from core.adapters.config_items import ConfigItems

__all__ = ["REPLAN_KEY", "AppRecord", "AppRegistry"]

REPLAN_KEY = "control#replan"
_INDEX = "appspec#"
_S3_PREFIX = "registry/apps/"


class AppRecord(BaseModel):
    """The index item of a registered app."""

    name: str
    revision: int
    sha256: str
    s3_key: str
    registered_at: float
    slo_s: float
    rate: float
    modules: list[str]
    seed_key: str | None = None  # S3 key of the plan the registration's feasibility check solved
    seed_sha256: str | None = None
    admission_reserve: float = 0.0  # fraction of the SLO planned for spilled frames (given or chosen)
    shed_target: float | None = None  # what the reserve was chosen for, if it was
    simulated_shed: float | None = None  # what the chosen reserve's plan shed in the simulator


class AppRegistry:
    """Registered apps: spec files in S3 (:class:`~core.adapters.blobs.BlobStore`), an index in the
    config table (:class:`~core.adapters.config_items.ConfigItems`). The adapters are injected."""

    def __init__(self, items: ConfigItems, files: BlobStore):
        self._items = items
        self._files = files

    def put(self, spec: RegistrationSpec, now: float | None = None, seed: Plan | None = None) -> AppRecord:
        """Store a validated spec as the app's next revision (conditional on the revision read:
        :class:`ControlError` when another registration of the same app won), with ``seed``, the plan
        its feasibility check solved (:class:`~control.registration.validate.Registration`), when given."""
        old = self.record(spec.name)
        revision = (old.revision if old else 0) + 1
        body = spec.model_dump_json(indent=1).encode()
        key = f"{_S3_PREFIX}{spec.name}/r{revision}.json"
        seed_key = seed_sha = None
        if seed is not None:
            seed_body = seed.model_dump_json().encode()
            seed_key, seed_sha = (
                f"{_S3_PREFIX}{spec.name}/r{revision}.seed.json",
                hashlib.sha256(seed_body).hexdigest(),
            )
            self._write(seed_key, seed_body)
        record = AppRecord(
            name=spec.name,
            revision=revision,
            sha256=hashlib.sha256(body).hexdigest(),
            s3_key=key,
            registered_at=time.time() if now is None else now,
            slo_s=spec.slo_s,
            rate=spec.rate,
            modules=list(spec.modules),
            seed_key=seed_key,
            seed_sha256=seed_sha,
            admission_reserve=spec.admission_reserve,
            shed_target=spec.shed_target,
            simulated_shed=spec.simulated_shed,
        )
        self._write(key, body)
        values = {"revision": revision, "doc": record.model_dump_json()}
        try:
            self._items.put(
                _INDEX + spec.name,
                values,
                if_new=old is None,
                if_equal=None if old is None else ("revision", old.revision),
            )
        except ItemConflictError as exc:
            why = f"app {spec.name!r} was registered concurrently; try again"
            raise RegistrationConflictError(why) from exc
        except ConfigError as exc:
            raise ControlError(f"cannot index app {spec.name!r}: {exc}") from exc
        return record

    def _write(self, key: str, body: bytes) -> None:
        try:
            self._files.put(key, body, "application/json")
        except BlobError as exc:
            raise ControlError(str(exc)) from exc

    def _read(self, key: str, sha256: str) -> bytes:
        try:
            body = self._files.get(key)
        except BlobError as exc:
            raise ControlError(str(exc)) from exc
        if hashlib.sha256(body).hexdigest() != sha256:
            raise ControlError(f"s3://{self._files.bucket}/{key} does not match its index (checksum)")
        return body

    def record(self, name: str) -> AppRecord | None:
        try:
            item = self._items.get(_INDEX + name)
        except ConfigError as exc:
            raise ControlError(f"cannot read app {name!r}: {exc}") from exc
        return AppRecord.model_validate_json(item["doc"]) if item else None

    def records(self) -> list[AppRecord]:
        try:
            items = self._items.scan(_INDEX)
        except ConfigError as exc:
            raise ControlError(f"cannot list registered apps: {exc}") from exc
        return sorted(
            (AppRecord.model_validate_json(item["doc"]) for item in items), key=lambda record: record.name
        )

    def spec(self, record: AppRecord) -> RegistrationSpec:
        return RegistrationSpec.model_validate_json(self._read(record.s3_key, record.sha256))

    def seed(self, record: AppRecord) -> Plan | None:
        """The plan the revision's registration solved (None: stored without one). Raises
        :class:`ControlError` when it cannot be read or does not match its index."""
        if record.seed_key is None or record.seed_sha256 is None:
            return None
        body = self._read(record.seed_key, record.seed_sha256)
        try:
            return Plan.model_validate_json(body)
        except ValidationError as exc:
            raise ControlError(
                f"s3://{self._files.bucket}/{record.seed_key} is not a plan: {first_problem(exc)}"
            ) from exc

    def get(self, name: str) -> tuple[AppRecord, RegistrationSpec] | None:
        rec = self.record(name)
        return (rec, self.spec(rec)) if rec else None

    def load_all(self) -> dict[str, tuple[AppRecord, RegistrationSpec]]:
        return {record.name: (record, self.spec(record)) for record in self.records()}

    def delete(self, name: str) -> bool:
        """Unregister an app (the planner drops it at its next epoch); False when unknown."""
        rec = self.record(name)
        if rec is None:
            return False
        try:
            self._items.delete(_INDEX + name)
        except ConfigError as exc:
            raise ControlError(f"cannot unregister {name!r}: {exc}") from exc
        return True

    # -- planning requests ---------------------------------------------------------------------
    def request_replan(self, app: str, now: float | None = None) -> None:
        """Ask the planner to re-plan (read and cleared by the next epoch)."""
        try:
            self._items.add_to_set(
                REPLAN_KEY, "apps", [app], also={"requested_at": time.time() if now is None else now}
            )
        except ConfigError as exc:
            raise ControlError(f"cannot request planning: {exc}") from exc

    def replan_requested(self) -> set[str]:
        try:
            item = self._items.get(REPLAN_KEY)
        except ConfigError as exc:
            raise ControlError(f"cannot read planning requests: {exc}") from exc
        return set(item.get("apps", [])) if item else set()

    def clear_replan(self, apps: Iterable[str]) -> None:
        names = sorted(apps)
        if not names:
            return
        try:
            self._items.remove_from_set(REPLAN_KEY, "apps", names)
        except ConfigError as exc:
            raise ControlError(f"cannot clear planning requests: {exc}") from exc
