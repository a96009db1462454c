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
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from profiles.errors import StoreError
from profiles.profiler import ProfileConfig, profile_onnx

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
    "profile_source",
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


def derived_only(store: ProfileStore, models: Sequence[str], hardware: str) -> list[str]:
    """The models with no measured entry for ``hardware`` (only derived ones, or none at all)."""
    return [
        model
        for model in models
        if not any(
            entry.get("hardware") == hardware and entry.get("source") == "measured"
            for entry in _entries(store, model)
        )
    ]


def profile_source(entries: Sequence[Mapping[str, Any]], hardware: str) -> str:
    """``measured on instance``, ``measured``, ``derived`` or ``none``: what a module's planned figures
    on ``hardware`` rest on (the best of its entries there)."""
    here = [entry for entry in entries if entry.get("hardware") == hardware]
    if any(entry.get("source") == "measured" and entry.get("note") == ONSITE_NOTE for entry in here):
        return ONSITE_NOTE
    if any(entry.get("source") == "measured" for entry in here):
        return "measured"
    return "derived" if here else "none"


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
    profile: Callable[..., ProfileResult] = profile_onnx,
    clock: Callable[[], float] = time.monotonic,
    log: Callable[[str], None] = print,
    date: str = "",
) -> OnsiteReport:
    """Measure each model of ``models`` (name -> ONNX file) that has only derived entries on
    ``hardware``, at ``batches``, and replace its ``hardware`` entries in the store with the measured
    ones (``source: measured``, ``note: measured on instance``, the instance's provenance). The sweep
    stops starting new models once ``budget_s`` has passed; a model that fails is logged and skipped."""
    date = date or dt.datetime.now(dt.UTC).date().isoformat()
    report = OnsiteReport()
    began = clock()
    todo = derived_only(store, list(models), hardware)
    log(f"on-instance profiling: {len(todo)} of {len(models)} models have only derived entries on {hardware}")
    for i, name in enumerate(todo, 1):
        spent = clock() - began
        if spent > budget_s:
            report.skipped[name] = f"time budget of {budget_s:.0f} s spent ({spent:.0f} s)"
            log(f"  {name}: skipped, {report.skipped[name]}")
            continue
        log(f"  [{i}/{len(todo)}] {name}: batches {','.join(map(str, batches))} on {instance.device}")
        cfg = ProfileConfig(hardware, tuple(batches), (1,), runs=runs, use_gpu=use_gpu)
        try:
            result = profile(
                models[name], cfg, name=name, progress=lambda label, n=name: log(f"    {n} {label}")
            )
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
