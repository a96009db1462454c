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

Usage: .venv/bin/python bench/profiles_bench.py [--models resnet18_face,landmark_net] [--repeats 3] [--build]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads: the noise-floor kernel is 1-thread

from profiles.build import BuildConfig, build  # noqa: E402
from profiles.demo.nets import MODEL_SPECS, build_model  # noqa: E402
from profiles.onnxgraph import export_torch  # noqa: E402
from profiles.profiler import ProfileConfig, profile_onnx  # noqa: E402
from profiles.store import PACKAGE_ROOT, LayeredStore, LocalStore  # noqa: E402


def _load() -> str:
    return f"load {os.getloadavg()[0]:.2f}"


def repeat_profile(models: list[str], repeats: int, runs: int, work: Path) -> None:
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
        for r in range(repeats):
            cfg = ProfileConfig("c6i.large", batches=(1, 2, 4, 8, 16), threads=1, runs=runs)
            res = profile_onnx(path, cfg, name=name)
            for p in res.points:
                medians.setdefault(p.batch, []).append(p.median_s)
                spreads.setdefault(p.batch, []).append(p.spread)
            fit = res.fits()[(1, 1)]
            fit_errs.append(fit.max_rel_err)
            print(f"  {name} repeat {r + 1}: linear fit max error {fit.max_rel_err:.1%} ({_load()})")
        for b in sorted(medians):
            ms = medians[b]
            move = (max(ms) - min(ms)) / statistics.median(ms)
            ok = "ok" if b < 4 or max(spreads[b]) <= 1.10 else "ABOVE 1.10"
            print(
                f"  {name:16} b={b:2}  median {statistics.median(ms) * 1e3:8.2f} ms  "
                f"spread p95/median max {max(spreads[b]):.3f} ({ok})  median moved {move:.1%} across repeats"
            )
        worst = max(fit_errs)
        print(f"  {name}: worst linear-fit error {worst:.1%} ({'within' if worst <= 0.10 else 'ABOVE'} 10%)")


def host_noise_floor(runs: int, repeats: int, target_ms: tuple[float, ...] = (20.0, 40.0, 80.0)) -> None:
    """The same statistic on a fixed kernel that is not a model: a float32 400x400 matmul repeated to
    last about ``target_ms``, one BLAS thread, pinned to the same core the profiler uses. What this
    shows is the host's own noise: a model cannot be measured with less spread than this."""
    import numpy as np

    from profiles.profiler import _pinned

    print(f"== host noise floor: fixed numpy kernel, 1 core, {runs} runs/point, {repeats} repeats ==")
    a = np.random.default_rng(0).random((400, 400), dtype=np.float32)
    with _pinned(1):
        t0 = time.perf_counter()
        for _ in range(10):
            a @ a
        per = (time.perf_counter() - t0) / 10
        for ms in target_ms:
            n = max(1, round(ms / 1e3 / per))
            spreads = []
            for _ in range(repeats):
                ts = []
                for _ in range(runs):
                    t = time.perf_counter()
                    for _ in range(n):
                        a @ a
                    ts.append(time.perf_counter() - t)
                ts.sort()
                p95 = ts[min(len(ts) - 1, -(-95 * len(ts) // 100) - 1)]
                spreads.append(p95 / statistics.median(ts))
            print(
                f"  kernel ~{ms:3.0f} ms  spread p95/median {min(spreads):.3f}-{max(spreads):.3f} "
                f"over {repeats} repeats ({_load()})"
            )


def full_build(runs: int) -> None:
    print(f"== skinflint models build, all apps, fresh cache ({_load()} at start) ==")
    with tempfile.TemporaryDirectory() as tmp:
        target = LocalStore(tmp)
        store = LayeredStore([target, LocalStore(PACKAGE_ROOT)])
        t0 = time.perf_counter()
        report = build(store, Path(tmp) / "models", None, BuildConfig(runs=runs, force=True))
        wall = time.perf_counter() - t0
    print(f"  build time {wall:.1f} s ({'within' if wall <= 300 else 'ABOVE'} 300 s; {_load()} at end)")
    for name, s in report.spreads.items():
        print(f"  {name:18} max spread (batch >= 4, 2 threads) {s:.3f}")
    for key, f in report.fits.items():
        print(f"  linear fit {key:28} max error {f['max_rel_err']:.1%}")
    print("  leave-one-out CPU error, FLOPs+bytes scaling (FLOPs only):")
    for m, e in report.loo.items():
        print(f"    {m:18} {e:6.1%} ({report.loo_flops_only[m]:6.1%})")
    if report.loo:
        print(
            f"    median {statistics.median(report.loo.values()):.1%} "
            f"({statistics.median(report.loo_flops_only.values()):.1%})"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="resnet18_face,landmark_net")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--build", action="store_true", help="also time a full models build")
    args = ap.parse_args()
    host_noise_floor(args.runs, args.repeats)
    with tempfile.TemporaryDirectory() as tmp:
        repeat_profile([m for m in args.models.split(",") if m], args.repeats, args.runs, Path(tmp))
    if args.build:
        full_build(args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
