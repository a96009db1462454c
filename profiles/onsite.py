"""Measured on the instance (issue #27): the sweep an instance runs on its own device, before it claims a
slot, for the models its hardware class has only derived entries for.

This module is the mechanism: which models need measuring (:func:`derived_only`), the bounded sweep
with progress and provenance, and the store update (:func:`measure_on_instance`), and the label status
views show (:func:`profile_source`). The caller (a worker at start-up) passes the store, the ONNX files,
the planned batch sizes and what it knows of its instance; the profiler is injected so tests (and a
runtime other than onnxruntime) can replace it. Entries of other hardware classes are never touched.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from profiles.errors import StoreError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path

    from profiles.profiler import ProfileResult
    from profiles.store import ProfileStore

__all__ = [
    "ONSITE_NOTE",
    "InstanceInfo",
    "OnsiteReport",
    "derived_only",
    "measure_on_instance",
    "onsite_entries",
    "profile_source",
    "stored_entries",
]

ONSITE_NOTE = "measured on instance"


@dataclass(frozen=True)
class InstanceInfo:
    """What measured: the EC2 instance type, the device (GPU or CPU model), its driver, the runtime and
    the execution provider the worker serves with."""

    instance_type: str
    device: str
    driver: str
    runtime: str
    provider: str

    def provenance(self, date: str) -> dict[str, Any]:
        return {
            "instance_type": self.instance_type,
            "device": self.device,
            "driver": self.driver,
            "runtime": self.runtime,
            "provider": self.provider,
            "date": date,
        }


@dataclass
class OnsiteReport:
    """Per model: how many entries were measured, or why it was not (time budget spent, an error)."""

    measured: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    wall_s: float = 0.0


def _entries(store: ProfileStore, model: str) -> list[dict[str, Any]]:
    try:
        return store.load_profile_dicts(model)
    except StoreError:
        return []


def _counts(entry: Mapping[str, Any], hardware: str, require_onsite: bool) -> bool:
    """Whether ``entry`` exempts ``hardware`` from measuring: measured there (with ``require_onsite``:
    measured on an instance of that class, not on a development host that stood in for it)."""
    if entry.get("hardware") != hardware or entry.get("source") != "measured":
        return False
    return not require_onsite or entry.get("note") == ONSITE_NOTE


def derived_only(
    store: ProfileStore, models: Sequence[str], hardware: str, *, require_onsite: bool = False
) -> list[str]:
    """The models with no measured entry for ``hardware`` (only derived ones, or none at all); with
    ``require_onsite``, those with no entry measured on an instance of ``hardware``."""
    return [
        model
        for model in models
        if not any(_counts(entry, hardware, require_onsite) for entry in _entries(store, model))
    ]


def stored_entries(store: ProfileStore) -> Callable[[str], list[dict[str, Any]]]:
    """``model -> entries`` over ``store`` for the control loop: ``[]`` for a model the store does not
    hold; a store that cannot be read raises :class:`~profiles.errors.StoreError`."""

    def lookup(model: str) -> list[dict[str, Any]]:
        key = f"data/{model}.json"
        raw = store._get(key)  # noqa: SLF001 - the store's own hook: None is absent, not unreadable
        if raw is None:
            return []
        try:
            doc = json.loads(raw)
        except ValueError as exc:
            raise StoreError(f"{key}: not JSON ({exc})", key) from exc
        if not isinstance(doc, list):
            raise StoreError(f"{key}: expected a list of profile entries", key)
        return doc

    return lookup


def onsite_entries(entries: Sequence[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Hardware class -> the entries of ``entries`` measured on an instance of that class."""
    out: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        if entry.get("source") == "measured" and entry.get("note") == ONSITE_NOTE:
            out.setdefault(str(entry.get("hardware")), []).append(dict(entry))
    return out


def profile_source(entries: Sequence[Mapping[str, Any]], hardware: str) -> str:
    """``measured on instance``, ``measured``, ``derived`` or ``none``: what a module's planned figures
    on ``hardware`` rest on (the best of its entries there)."""
    here = [entry for entry in entries if entry.get("hardware") == hardware]
    if any(entry.get("source") == "measured" and entry.get("note") == ONSITE_NOTE for entry in here):
        return ONSITE_NOTE
    if any(entry.get("source") == "measured" for entry in here):
        return "measured"
    return "derived" if here else "none"


def _ticker(log: Callable[[str], None], name: str) -> Callable[[str], None]:
    def tick(label: str) -> None:
        log(f"    {name} {label}")

    return tick


def measure_on_instance(
    store: ProfileStore,
    models: Mapping[str, str | Path],
    hardware: str,
    batches: Sequence[int],
    instance: InstanceInfo,
    *,
    runs: int = 20,
    budget_s: float = 120.0,
    use_gpu: bool = False,
    series: Mapping[str, Sequence[tuple[int, int]]] | None = None,
    per_model_batches: Mapping[str, Sequence[int]] | None = None,
    require_onsite: bool = False,
    profile: Callable[..., ProfileResult] | None = None,
    clock: Callable[[], float] = time.monotonic,
    log: Callable[[str], None] = print,
    date: str = "",
) -> OnsiteReport:
    """Measure each model of ``models`` (name -> ONNX file) that has only derived entries on
    ``hardware``, at ``batches``, and replace its ``hardware`` entries in the store with the measured
    ones (``source: measured``, ``note: measured on instance``, the instance's provenance). The sweep
    stops starting new models once ``budget_s`` has passed; a model that fails is logged and skipped.

    ``series`` (model -> ``(concurrency, threads)`` pairs: the settings its worker serves with) and
    ``per_model_batches`` (model -> batches, else ``batches``) narrow the sweep to what is planned;
    ``require_onsite`` also measures models whose ``hardware`` entries were measured elsewhere (a
    development host standing in for the class), not on an instance of it."""
    # the profiler (numpy, onnx) loads here: the control loop imports this module for the labels
    from profiles.profiler import ProfileConfig, profile_onnx

    run_profile: Callable[..., ProfileResult] = profile or profile_onnx
    date = date or dt.datetime.now(dt.UTC).date().isoformat()
    report = OnsiteReport()
    began = clock()
    todo = derived_only(store, list(models), hardware, require_onsite=require_onsite)
    what = "no entry measured on an instance" if require_onsite else "only derived entries"
    log(f"on-instance profiling: {len(todo)} of {len(models)} models have {what} on {hardware}")
    for i, name in enumerate(todo, 1):
        spent = clock() - began
        if spent > budget_s:
            report.skipped[name] = f"time budget of {budget_s:.0f} s spent ({spent:.0f} s)"
            log(f"  {name}: skipped, {report.skipped[name]}")
            continue
        sweep = tuple(sorted(set((per_model_batches or {}).get(name) or batches)))
        pairs = list((series or {}).get(name) or [])
        how = f", (concurrency, threads) {pairs}" if pairs else ""
        log(f"  [{i}/{len(todo)}] {name}: batches {','.join(map(str, sweep))}{how} on {instance.device}")
        cfg = ProfileConfig(hardware, sweep, (1,), runs=runs, use_gpu=use_gpu)
        more: dict[str, Any] = {"series": pairs} if pairs else {}
        try:
            result = run_profile(models[name], cfg, name=name, progress=_ticker(log, name), **more)
        except Exception as exc:  # a model that cannot be measured keeps its derived entries
            report.skipped[name] = f"{type(exc).__name__}: {str(exc)[:120]}"
            log(f"  {name}: not measured ({report.skipped[name]})")
            continue
        measured = [
            entry | instance.provenance(date) | {"source": "measured", "note": ONSITE_NOTE}
            for entry in result.entries(hardware)
        ]
        kept = [entry for entry in _entries(store, name) if entry.get("hardware") != hardware]
        store.save_profile(name, kept + measured)
        report.measured[name] = len(measured)
    report.wall_s = clock() - began
    log(f"on-instance profiling done in {report.wall_s:.1f} s: {len(report.measured)} measured")
    return report
