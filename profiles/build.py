"""``skinflint models build``: export the demo models to ONNX, profile them on this machine and write
the profile store (measured CPU entries, HiTDL-derived CPU sizes, anchor-derived or measured GPUs).

The manager does the measuring; the derivations in :mod:`profiles.derive` are pure arithmetic.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from profiles.demo.tracker import time_tracker
from profiles.derive import cpu_size_entries, derive_gpu_entries, leave_one_out
from profiles.errors import ProfilesError
from profiles.fit import fit_linear
from profiles.hardware import cpu_hardware
from profiles.onnxgraph import export_torch
from profiles.profiler import ProfileConfig, ProfileResult, _provenance, host_cpu_model, profile_onnx

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

    from planner.models import HardwareSpec
    from profiles.store import ProfileStore

__all__ = ["BuildConfig", "BuildReport", "build", "detect_gpu", "models_for_apps", "total_points"]

CPU_MODELS = {"iou_tracker"}


@dataclass(frozen=True)
class BuildConfig:
    """``batches``: one session with all ``threads`` (2 here); ``sweep_batches``: the thread sweep
    (1 thread, and 2 concurrent 1-thread sessions) used for HiTDL and the interference ratio."""

    batches: tuple[int, ...] = (1, 2, 4, 8, 16)
    sweep_batches: tuple[int, ...] = (1, 4, 16)
    gpu_batches: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    runs: int = 20
    warmup: int = 2
    threads: int = 2
    max_duration_s: float = 2.0
    force: bool = False


@dataclass
class BuildReport:
    models: list[str] = field(default_factory=list)
    export_s: dict[str, float] = field(default_factory=dict)
    profile_s: dict[str, float] = field(default_factory=dict)
    fits: dict[str, dict[str, Any]] = field(default_factory=dict)
    spreads: dict[str, float] = field(default_factory=dict)
    limits: list[str] = field(default_factory=list)
    loo: dict[str, float] = field(default_factory=dict)
    loo_flops_only: dict[str, float] = field(default_factory=dict)
    gpu: str = "derived"
    load_1m: tuple[float, float] = (0.0, 0.0)
    total_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def models_for_apps(store: ProfileStore, apps: Sequence[str] | None) -> list[str]:
    """Unique models of the given applications (all stored apps when None), in first-use order."""
    out: list[str] = []
    for name in apps or store.list_apps():
        for mod in store.load_app(name).modules.values():
            if mod.model not in out:
                out.append(mod.model)
    return out


def detect_gpu() -> str | None:
    """Catalog name of the local GPU when onnxruntime has CUDA and nvidia-smi names a known GPU."""
    import onnxruntime as ort  # optional heavy dependency: onnxruntime

    if "CUDAExecutionProvider" not in ort.get_available_providers() or not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            check=False,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.upper()
    except (OSError, subprocess.SubprocessError):
        return None
    for key, name in (("V100", "v100"), ("T4", "t4"), ("P100", "p100")):
        if key in out:
            return name
    return None


def total_points(cfg: BuildConfig, n_dnn: int, n_cpu: int) -> int:
    return n_dnn * (len(cfg.batches) + 2 * len(cfg.sweep_batches)) + n_cpu * len(cfg.batches)


def _medians(result: ProfileResult, concurrency: int, threads: int) -> dict[int, float]:
    return {point.batch: point.median_s for point in result.series(concurrency, threads)}


def _interpolate(points: dict[int, float], batches: Sequence[int]) -> dict[int, float]:
    """Fill batches missing from a sparse sweep with its linear fit (the HiTDL inputs at every batch)."""
    if not points:
        return {}
    fit = fit_linear(list(points), list(points.values()))
    return {batch: points.get(batch, fit.predict(batch)) for batch in batches}


def _profile_dnn(
    path: Path, name: str, cfg: BuildConfig, hw_name: str, tick: Callable[[str], None]
) -> ProfileResult:
    base = ProfileConfig(
        hardware=hw_name,
        batches=cfg.batches,
        runs=cfg.runs,
        warmup=cfg.warmup,
        max_duration_s=cfg.max_duration_s,
        threads=cfg.threads,
    )
    full = profile_onnx(path, base, name=name, progress=tick, series=[(1, cfg.threads)])
    if cfg.threads > 1:
        sweep = ProfileConfig(**{**base.__dict__, "batches": cfg.sweep_batches})
        part = profile_onnx(path, sweep, name=name, progress=tick, series=[(1, 1), (2, 1)])
        full.points += part.points
        full.limits += part.limits
    return full


def _dnn_entries(
    result: ProfileResult, cfg: BuildConfig, catalog: dict[str, HardwareSpec], date: str, gpu: str | None
) -> list[dict[str, Any]]:
    prov = {**result.provenance, "model_sha256": result.model_sha256}
    t2 = _medians(result, 1, cfg.threads)
    t1 = _interpolate(_medians(result, 1, 1), list(t2))
    conc = _interpolate(_medians(result, 2, 1), list(t2))
    measured_conc = set(_medians(result, 2, 1))
    cpu_cat = {name: catalog[name] for name in cpu_hardware(catalog)}
    entries, _ = cpu_size_entries(
        result.model,
        t1=t1,
        t2=t2,
        concurrent_t1=conc,
        catalog=cpu_cat,
        measured_vcpus=cfg.threads,
        provenance=prov,
    )
    stats = {(point.concurrency, point.threads, point.batch): point for point in result.points}
    kept = []
    for entry in entries:
        if entry["source"] == "measured":
            if entry["concurrency"] > 1 and entry["batch"] not in measured_conc:
                continue  # only the measured sweep batches are reported as measured
            point = stats.get((entry["concurrency"], entry["threads"], entry["batch"]))
            if point is not None:
                entry.update(p95_s=round(point.p95_s, 7), spread=round(point.spread, 4), runs=point.runs)
        kept.append(entry)
    if gpu is None:
        kept += derive_gpu_entries(result.model, result.cost.as_dict(), catalog, cfg.gpu_batches, date)
    return kept


def _tracker_entries(
    cfg: BuildConfig, catalog: dict[str, HardwareSpec], tick: Callable[[str], None]
) -> list[dict[str, Any]]:
    prov = _provenance(False) | {"runtime": "numpy", "runtime_version": np.__version__}
    out: list[dict[str, Any]] = []
    sizes = cpu_hardware(catalog)
    for batch in cfg.batches:
        times = np.asarray(time_tracker(batch, runs=cfg.runs))
        med, p95 = float(np.median(times)), float(np.percentile(times, 95))
        tick(f"iou_tracker b={batch}")
        for hw in sizes:
            vcpus = int((catalog[hw].model_extra or {}).get("vcpus") or 1)
            for concurrency in sorted({1, vcpus}):
                entry: dict[str, Any] = {
                    "hardware": hw,
                    "batch": batch,
                    "concurrency": concurrency,
                    "duration_s": round(med, 7),
                    "threads": 1,
                    "model": "iou_tracker",
                    **prov,
                }
                if hw == sizes[0] and concurrency == 1:
                    entry.update(p95_s=round(p95, 7), spread=round(p95 / med, 4), runs=len(times))
                    entry["note"] = f"measured on this host ({host_cpu_model()}), one Python thread"
                else:
                    entry["source"] = "derived"
                    entry["method"] = (
                        "single-threaded: one independent process per vCPU at the measured per-frame time"
                    )
                out.append(entry)
    return out


def build(
    store: ProfileStore,
    model_dir: Path,
    apps: Sequence[str] | None = None,
    cfg: BuildConfig | None = None,
    progress: Callable[[str], None] | None = None,
) -> BuildReport:
    """Export, profile and write profiles for ``apps`` (default: all). Returns the figures printed."""
    from profiles.demo.nets import MODEL_SPECS, build_model  # optional heavy dependency: torch

    cfg = cfg or BuildConfig()
    tick = progress or (lambda _label: None)
    t_start = time.perf_counter()
    catalog = store.load_catalog()
    models = models_for_apps(store, apps)
    unknown = [model for model in models if model not in MODEL_SPECS and model not in CPU_MODELS]
    if unknown:
        raise ProfilesError(f"no demo model builder for {', '.join(unknown)}")
    gpu = detect_gpu()
    report = BuildReport(models=models, gpu=f"measured on {gpu}" if gpu else "derived (no GPU on this host)")
    load0 = os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan
    date = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d")
    results: dict[str, ProfileResult] = {}
    for name in models:
        t0 = time.perf_counter()
        if name in CPU_MODELS:
            store.save_profile(name, _tracker_entries(cfg, catalog, tick))
            report.profile_s[name] = time.perf_counter() - t0
            continue
        spec = MODEL_SPECS[name]
        path = model_dir / f"{name}.onnx"
        if cfg.force or not path.is_file():
            tmp = path.with_suffix(".onnx.tmp")
            export_torch(
                build_model(name),
                spec.input_shape,
                tmp,
                input_name=spec.input_name,
                output_names=spec.output_names,
            )
            tmp.replace(path)
        report.export_s[name] = time.perf_counter() - t0
        t1 = time.perf_counter()
        result = _profile_dnn(path, name, cfg, cpu_hardware(catalog)[0], tick)
        entries = _dnn_entries(result, cfg, catalog, date, gpu)
        if gpu is not None:
            gres = profile_onnx(
                path, ProfileConfig(gpu, cfg.gpu_batches, runs=cfg.runs, use_gpu=True), name=name
            )
            entries += gres.entries()
        store.save_profile(name, entries)
        report.profile_s[name] = time.perf_counter() - t1
        results[name] = result
        for (concurrency, threads), fit in result.fits().items():
            report.fits[f"{name} c{concurrency} t{threads}"] = fit.as_dict()
        big = [point.spread for point in result.series(1, cfg.threads) if point.batch >= 4]
        report.spreads[name] = max(big) if big else math.nan
        report.limits += [f"{name}: {lim.message()}" for lim in result.limits]
    if len(results) >= 2:
        # the 1-thread series: on a shared machine it is the least disturbed by other processes
        measured = {
            model: _medians(model_result, 1, 1) or _medians(model_result, 1, cfg.threads)
            for model, model_result in results.items()
        }
        costs = {model: model_result.cost.as_dict() for model, model_result in results.items()}
        report.loo = leave_one_out(measured, costs, ridge=CPU_RIDGE)
        report.loo_flops_only = leave_one_out(measured, costs, ridge=0.0)
    report.total_s = time.perf_counter() - t_start
    report.load_1m = (load0, os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan)
    return report


# FLOP-per-byte ridge used for this host's CPU in the leave-one-out check (two AVX2 cores: roughly
# 50 GFLOP/s against 10 GB/s); GPUs take theirs from the catalog (peak FP32 / memory bandwidth).
CPU_RIDGE = 5.0
