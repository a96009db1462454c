"""The profile store: hardware catalog, application specs and per-model profiles behind one interface.

Layout (the same for a local directory and an S3 prefix)::

    hardware.json             {"hardware": {name: {price_per_hour, instance_type, ...}}}
    apps/<app>.json|.yaml     planner.models.AppSpec
    data/<model>.json         list of planner.models.ProfileEntry dicts (with provenance)

:class:`ProfileStore` holds the logic and three abstract storage hooks; :class:`LocalStore` is the
directory adapter, ``profiles.s3store.S3Store`` the S3 one (boto3 stays inside that module), and
:class:`LayeredStore` reads from the first store that has a key (the build cache over the packaged
data). :func:`load_problem` builds the planner's problem for an application.
"""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.models import AppSpec, HardwareSpec, ProblemSpec, ProfileEntry
from profiles.errors import ProfilesError, StoreError
from profiles.hardware import catalog_from_dict, select

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

__all__ = [
    "PACKAGE_ROOT",
    "LayeredStore",
    "LocalStore",
    "ProfileStore",
    "cache_dir",
    "default_store",
    "load_problem",
]

PACKAGE_ROOT = Path(__file__).resolve().parent


def cache_dir() -> Path:
    """``$SKINFLINT_CACHE`` or ``~/.cache/skinflint``: built models (``models/``) and profiles (``data/``)."""
    env = os.environ.get("SKINFLINT_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "skinflint"


def _parse(key: str, raw: bytes) -> Any:
    try:
        if key.endswith((".yaml", ".yml")):
            import yaml  # only .yaml keys need PyYAML (a Lambda layer may lack it)

            return yaml.safe_load(raw)
        return json.loads(raw)
    except Exception as exc:  # JSONDecodeError, YAMLError
        raise StoreError(
            f"{key}: not valid {'YAML' if key.endswith(('.yaml', '.yml')) else 'JSON'} ({exc})", key
        ) from exc


class ProfileStore(ABC):
    """Reads and writes catalog, apps and profiles; subclasses provide the three storage hooks."""

    @abstractmethod
    def _get(self, key: str) -> bytes | None:
        """The object's bytes, or None when it does not exist."""

    @abstractmethod
    def _put(self, key: str, data: bytes) -> None: ...

    @abstractmethod
    def _list(self, prefix: str) -> list[str]:
        """Keys under ``prefix`` (e.g. ``"apps/"``), sorted."""

    # -- documents ---------------------------------------------------------------------------
    def read(self, key: str) -> Any:
        raw = self._get(key)
        if raw is None:
            raise StoreError(f"{self.describe()}: {key} not found", key)
        return _parse(key, raw)

    def write(self, key: str, doc: Any) -> None:
        if isinstance(doc, list):  # profiles: one entry per line (small, diffable)
            text = "[\n" + ",\n".join(json.dumps(entry) for entry in doc) + "\n]\n"
        else:
            text = json.dumps(doc, indent=1) + "\n"
        self._put(key, text.encode())

    def describe(self) -> str:
        return type(self).__name__

    # -- catalog -----------------------------------------------------------------------------
    def load_catalog(self) -> dict[str, HardwareSpec]:
        return catalog_from_dict(self.read("hardware.json"))

    def save_catalog(self, catalog: dict[str, HardwareSpec]) -> None:
        self.write("hardware.json", {"hardware": {name: spec.model_dump() for name, spec in catalog.items()}})

    # -- applications ------------------------------------------------------------------------
    def list_apps(self) -> list[str]:
        names = {Path(key).stem for key in self._list("apps/") if key.endswith((".json", ".yaml", ".yml"))}
        return sorted(names)

    def load_app(self, name: str) -> AppSpec:
        for ext in (".json", ".yaml", ".yml"):
            raw = self._get(f"apps/{name}{ext}")
            if raw is not None:
                try:
                    return AppSpec.model_validate(_parse(f"apps/{name}{ext}", raw))
                except ValueError as exc:
                    raise StoreError(
                        f"apps/{name}{ext}: invalid app spec ({str(exc).splitlines()[0]})"
                    ) from exc
        known = ", ".join(self.list_apps()) or "none"
        raise StoreError(f"{self.describe()}: no application {name!r} (known: {known})", f"apps/{name}")

    def save_app(self, app: AppSpec) -> None:
        self.write(f"apps/{app.name}.json", app.model_dump(mode="json"))

    # -- profiles ----------------------------------------------------------------------------
    def list_models(self) -> list[str]:
        return sorted(Path(key).stem for key in self._list("data/") if key.endswith(".json"))

    def load_profile_dicts(self, model: str) -> list[dict[str, Any]]:
        doc = self.read(f"data/{model}.json")
        if not isinstance(doc, list):
            raise StoreError(f"data/{model}.json: expected a list of profile entries", f"data/{model}.json")
        return doc

    def load_profile(self, model: str) -> list[ProfileEntry]:
        try:
            return [ProfileEntry.model_validate(entry) for entry in self.load_profile_dicts(model)]
        except ValueError as exc:
            raise StoreError(
                f"data/{model}.json: invalid profile entry ({str(exc).splitlines()[0]})"
            ) from exc

    def save_profile(self, model: str, entries: Sequence[dict[str, Any] | ProfileEntry]) -> None:
        docs = [entry.model_dump() if isinstance(entry, ProfileEntry) else dict(entry) for entry in entries]
        for doc in docs:
            ProfileEntry.model_validate(doc)  # refuse to write what the planner cannot read
        self.write(f"data/{model}.json", docs)


class LocalStore(ProfileStore):
    """A directory on disk."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def describe(self) -> str:
        return str(self.root)

    def _get(self, key: str) -> bytes | None:
        file = self.root / key
        try:
            return file.read_bytes() if file.is_file() else None
        except OSError as exc:
            raise StoreError(f"{file}: {exc}", key) from exc

    def _put(self, key: str, data: bytes) -> None:
        file = self.root / key
        try:
            file.parent.mkdir(parents=True, exist_ok=True)
            tmp = file.with_suffix(file.suffix + ".tmp")
            tmp.write_bytes(data)
            tmp.replace(file)
        except OSError as exc:
            raise StoreError(f"{file}: {exc}", key) from exc

    def _list(self, prefix: str) -> list[str]:
        folder = self.root / prefix
        if not folder.is_dir():
            return []
        return sorted(f"{prefix}{file.name}" for file in folder.iterdir() if file.is_file())


class LayeredStore(ProfileStore):
    """Reads from the first layer that has a key; writes to the first layer."""

    def __init__(self, layers: Sequence[ProfileStore]):
        if not layers:
            raise ValueError("LayeredStore needs at least one layer")
        self.layers = list(layers)

    def describe(self) -> str:
        return " over ".join(layer.describe() for layer in self.layers)

    def _get(self, key: str) -> bytes | None:
        for layer in self.layers:
            raw = layer._get(key)
            if raw is not None:
                return raw
        return None

    def _put(self, key: str, data: bytes) -> None:
        self.layers[0]._put(key, data)

    def _list(self, prefix: str) -> list[str]:
        return sorted({key for layer in self.layers for key in layer._list(prefix)})


def default_store() -> ProfileStore:
    """The build cache (``skinflint models build``) over the packaged catalog, apps and profiles."""
    return LayeredStore([LocalStore(cache_dir()), LocalStore(PACKAGE_ROOT)])


def load_problem(
    app_name: str,
    frame_rate: float,
    hardware: Iterable[str] | None = None,
    slo_s: float | None = None,
    store: ProfileStore | None = None,
) -> ProblemSpec:
    """The planner's problem for ``app_name`` at ``frame_rate`` frames/s on ``hardware`` (default:
    the whole catalog), from the app spec, the stored profiles and the catalog."""
    if frame_rate <= 0:
        raise ProfilesError(f"frame rate must be positive, got {frame_rate}")
    st = store or default_store()
    app = st.load_app(app_name)
    hw = select(st.load_catalog(), list(hardware) if hardware is not None else None)
    profiles: dict[str, list[ProfileEntry]] = {}
    for mod_name, mod in app.modules.items():
        entries = [entry for entry in st.load_profile(mod.model) if entry.hardware in hw]
        if not entries:
            have = sorted({entry.hardware for entry in st.load_profile(mod.model)})
            raise ProfilesError(
                f"module {mod_name!r} ({mod.kind}, model {mod.model}) has no profile on {', '.join(hw)}; "
                f"profiled on: {', '.join(have) or 'nothing'}"
            )
        profiles[mod.model] = entries
    used = {entry.hardware for es in profiles.values() for entry in es}
    return app.to_problem(
        frame_rate, profiles, {name: spec for name, spec in hw.items() if name in used}, slo_s
    )
