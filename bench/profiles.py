"""Benchmark of the profiler (prints figures; not a timed test).

Targets from issue #3, measured on whatever machine this runs on (shared machines are noisy: the
host load average is printed next to every figure):

- the host's noise floor: the same spread statistic on a fixed numpy kernel (not a model), pinned
  to the same core, so a model's spread can be read against what this host allows;
- repeated profiling of one model at one thread: spread (p95/median) <= 1.10 for batch >= 4, and
  how much the median moves between repeats;
- Nexus's linear model within 10% of every measured point;
- ``skinflint models build`` for all five apps plus CPU profiles in <= 5 minutes (``--build``);
- leave-one-out error of the FLOPs/bytes scaling used to derive GPU profiles (``--build``).

Usage: skinflint bench profiles [--models resnet18_face,landmark_net] [--repeats 3] [--runs 20] [--build]
"""

from __future__ import annotations

import os

# before numpy loads (the imports below load it): the noise-floor kernel runs on one BLAS thread
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import TYPE_CHECKING  # noqa: E402

import numpy as np  # noqa: E402

from bench.results import add_results_arguments, record  # noqa: E402
from profiles.build import BuildConfig, build  # noqa: E402
from profiles.onnxgraph import export_torch  # noqa: E402
from profiles.profiler import ProfileConfig, _pinned, profile_onnx  # noqa: E402
from profiles.store import PACKAGE_ROOT, LayeredStore, LocalStore  # noqa: E402

if TYPE_CHECKING:
    import argparse


def _load() -> str:
    return f"load {os.getloadavg()[0]:.2f}"


def repeat_profile(models: list[str], repeats: int, runs: int, work: Path) -> None:
    # torch takes seconds to import: only when models are profiled (not for --help)
    from profiles.demo.nets import MODEL_SPECS, build_model

    print(f"== repeated profiling, 1 thread, batches 1..16, {runs} runs/point, {repeats} repeats ==")
    for name in models:
        spec = MODEL_SPECS[name]
        path = export_torch(
            build_model(name), spec.input_shape, work / f"{name}.onnx",
            input_name=spec.input_name, output_names=spec.output_names,
        )  # fmt: skip
        medians: dict[int, list[float]] = {}
        spreads: dict[int, list[float]] = {}
        fit_errs = []
        for repeat in range(repeats):
            cfg = ProfileConfig("c6i.large", batches=(1, 2, 4, 8, 16), threads=1, runs=runs)
            profiled = profile_onnx(path, cfg, name=name)
            for point in profiled.points:
                medians.setdefault(point.batch, []).append(point.median_s)
                spreads.setdefault(point.batch, []).append(point.spread)
            fit = profiled.fits()[(1, 1)]
            fit_errs.append(fit.max_rel_err)
            print(f"  {name} repeat {repeat + 1}: linear fit max error {fit.max_rel_err:.1%} ({_load()})")
        for batch in sorted(medians):
            batch_medians = medians[batch]
            move = (max(batch_medians) - min(batch_medians)) / statistics.median(batch_medians)
            ok = "ok" if batch < 4 or max(spreads[batch]) <= 1.10 else "ABOVE 1.10"
            print(
                f"  {name:16} b={batch:2}  median {statistics.median(batch_medians) * 1e3:8.2f} ms  "
                f"spread p95/median max {max(spreads[batch]):.3f} ({ok})  median moved {move:.1%} across "
                "repeats"
            )
        worst = max(fit_errs)
        print(f"  {name}: worst linear-fit error {worst:.1%} ({'within' if worst <= 0.10 else 'ABOVE'} 10%)")


def host_noise_floor(runs: int, repeats: int, target_ms: tuple[float, ...] = (20.0, 40.0, 80.0)) -> None:
    """The same statistic on a fixed kernel that is not a model: a float32 400x400 matmul repeated to
    last about ``target_ms``, one BLAS thread, pinned to the same core the profiler uses. What this
    shows is the host's own noise: a model cannot be measured with less spread than this."""
    print(f"== host noise floor: fixed numpy kernel, 1 core, {runs} runs/point, {repeats} repeats ==")
    matrix = np.random.default_rng(0).random((400, 400), dtype=np.float32)
    with _pinned(1):
        began = time.perf_counter()
        for _ in range(10):
            matrix @ matrix
        per = (time.perf_counter() - began) / 10
        for ms in target_ms:
            products = max(1, round(ms / 1e3 / per))
            spreads = []
            for _ in range(repeats):
                times = []
                for _ in range(runs):
                    began = time.perf_counter()
                    for _ in range(products):
                        matrix @ matrix
                    times.append(time.perf_counter() - began)
                times.sort()
                p95 = times[min(len(times) - 1, -(-95 * len(times) // 100) - 1)]
                spreads.append(p95 / statistics.median(times))
            print(
                f"  kernel ~{ms:3.0f} ms  spread p95/median {min(spreads):.3f}-{max(spreads):.3f} "
                f"over {repeats} repeats ({_load()})"
            )


def full_build(runs: int) -> None:
    print(f"== skinflint models build, all apps, fresh cache ({_load()} at start) ==")
    with tempfile.TemporaryDirectory() as tmp:
        target = LocalStore(tmp)
        store = LayeredStore([target, LocalStore(PACKAGE_ROOT)])
        began = time.perf_counter()
        report = build(store, Path(tmp) / "models", None, BuildConfig(runs=runs, force=True))
        wall = time.perf_counter() - began
    print(f"  build time {wall:.1f} s ({'within' if wall <= 300 else 'ABOVE'} 300 s; {_load()} at end)")
    for name, spread in report.spreads.items():
        print(f"  {name:18} max spread (batch >= 4, 2 threads) {spread:.3f}")
    for key, fit in report.fits.items():
        print(f"  linear fit {key:28} max error {fit['max_rel_err']:.1%}")
    print("  leave-one-out CPU error, FLOPs+bytes scaling (FLOPs only):")
    for model, error in report.loo.items():
        print(f"    {model:18} {error:6.1%} ({report.loo_flops_only[model]:6.1%})")
    if report.loo:
        print(
            f"    median {statistics.median(report.loo.values()):.1%} "
            f"({statistics.median(report.loo_flops_only.values()):.1%})"
        )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Benchmark the profiler on this machine: the host's noise floor (a fixed numpy kernel), repeated "
        "profiling of demo models at one thread (spread, median moves, Nexus's linear fit) and, with "
        "--build, a full `skinflint models build` with the leave-one-out error of the GPU scaling."
    )
    parser.add_argument(
        "--models",
        default="resnet18_face,landmark_net",
        help="demo models to profile, comma-separated (default resnet18_face,landmark_net)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="profiles of each model (default 3)")
    parser.add_argument("--runs", type=int, default=20, help="timed runs per point (default 20)")
    parser.add_argument("--build", action="store_true", help="also time a full models build")
    add_results_arguments(parser)


def run_command(args: argparse.Namespace) -> int:
    return record("profiles", args, lambda _page: main(args.models, args.repeats, args.runs, args.build))


def main(models: str, repeats: int, runs: int, full: bool) -> int:
    host_noise_floor(runs, repeats)
    with tempfile.TemporaryDirectory() as tmp:
        repeat_profile([name for name in models.split(",") if name], repeats, runs, Path(tmp))
    if full:
        full_build(runs)
    return 0
