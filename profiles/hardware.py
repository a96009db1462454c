"""The hardware catalog: price, EC2 instance type and size of every hardware class.

``profiles/hardware.json`` is the packaged catalog; :func:`load_catalog` returns
``dict[str, planner.models.HardwareSpec]`` (the extra keys — kind, vCPUs, GPU memory, region, price
date — ride along on each spec). :func:`validate_for_deployment` refuses hardware that has no EC2
instance type (P100) unless the caller maps it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner.models import HardwareSpec
from profiles.errors import StoreError, UnknownHardwareError, UnmappedHardwareError

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = [
    "CATALOG_PATH",
    "catalog_from_dict",
    "cpu_hardware",
    "gpu_hardware",
    "load_catalog",
    "select",
    "validate_for_deployment",
]

CATALOG_PATH = Path(__file__).with_name("hardware.json")


def catalog_from_dict(doc: Mapping[str, Any]) -> dict[str, HardwareSpec]:
    """Parse the catalog document (``{"hardware": {name: {...}}}``)."""
    try:
        return {name: HardwareSpec.model_validate(spec) for name, spec in doc["hardware"].items()}
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(
            f"hardware catalog is malformed: {str(exc).splitlines()[0]}", "hardware.json"
        ) from exc


def load_catalog(path: str | Path | None = None) -> dict[str, HardwareSpec]:
    """The hardware catalog as ``{name: HardwareSpec}`` (default: the packaged ``hardware.json``)."""
    catalog_path = Path(path) if path is not None else CATALOG_PATH
    try:
        doc = json.loads(catalog_path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise StoreError(f"{catalog_path}: cannot read hardware catalog ({exc})", str(catalog_path)) from exc
    return catalog_from_dict(doc)


def _extra(spec: HardwareSpec, key: str) -> Any:
    return (spec.model_extra or {}).get(key)


def gpu_hardware(catalog: Mapping[str, HardwareSpec]) -> list[str]:
    return [name for name, spec in catalog.items() if _extra(spec, "kind") == "gpu"]


def cpu_hardware(catalog: Mapping[str, HardwareSpec]) -> list[str]:
    """CPU sizes, smallest first."""
    names = [name for name, spec in catalog.items() if _extra(spec, "kind") == "cpu"]
    return sorted(names, key=lambda name: _extra(catalog[name], "vcpus") or 0)


def select(catalog: Mapping[str, HardwareSpec], names: Iterable[str] | None) -> dict[str, HardwareSpec]:
    """The sub-catalog ``names`` (all when None); :class:`UnknownHardwareError` for a name not listed."""
    if names is None:
        return dict(catalog)
    out: dict[str, HardwareSpec] = {}
    for name in names:
        if name not in catalog:
            raise UnknownHardwareError(
                f"unknown hardware {name!r}; the catalog has {', '.join(catalog)}", name
            )
        out[name] = catalog[name]
    return out


def validate_for_deployment(
    catalog: Mapping[str, HardwareSpec],
    names: Iterable[str] | None = None,
    instance_types: Mapping[str, str] | None = None,
) -> dict[str, HardwareSpec]:
    """Check that every hardware class in ``names`` (default: all) maps to an EC2 instance type.

    ``instance_types`` supplies a mapping for classes that have none (``{"p100": "my-p100-pool"}``).
    Returns the deployable specs with the mapping applied; raises :class:`UnmappedHardwareError`
    naming every unmapped class otherwise (P100: AWS has never offered it).
    """
    chosen = select(catalog, names)
    mapping = dict(instance_types or {})
    out: dict[str, HardwareSpec] = {}
    missing: list[str] = []
    for name, spec in chosen.items():
        itype = mapping.get(name) or spec.instance_type
        if not itype:
            missing.append(name)
            continue
        out[name] = spec if itype == spec.instance_type else spec.model_copy(update={"instance_type": itype})
    if missing:
        raise UnmappedHardwareError(
            f"hardware {', '.join(missing)} has no EC2 instance type (AWS has never offered P100): "
            "map it to an instance type you run (instance_types={'p100': '...'}) or drop it from the plan",
            tuple(missing),
        )
    return out
