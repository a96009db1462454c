"""``skinflint models build|list``: the demo applications' models, built from code with fixed seeds
(no download), exported to ONNX with a dynamic batch axis, profiled on this machine."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skinflint.commands.profile import _int_list, progress_bar
from skinflint.errors import UsageError

if TYPE_CHECKING:
    import argparse


def _names(text: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in text.split(",") if name.strip())


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "models", help="build and profile the demo applications' models", description=__doc__
    )
    msub = parser.add_subparsers(dest="models_command", metavar="ACTION")
    build_parser = msub.add_parser(
        "build", help="export the demo models to ONNX, profile them, write the profile store"
    )
    build_parser.add_argument(
        "--cache",
        type=Path,
        default=None,
        help="cache directory (default $SKINFLINT_CACHE or ~/.cache/skinflint)",
    )
    build_parser.add_argument(
        "--store", type=Path, default=None, help="write profiles here instead of CACHE (e.g. profiles/)"
    )
    build_parser.add_argument("--apps", type=_names, default=None, help="comma-separated apps (default: all)")
    build_parser.add_argument("--batches", type=_int_list, default=(1, 2, 4, 8, 16))
    build_parser.add_argument(
        "--sweep-batches", type=_int_list, default=(1, 4, 16), help="batches of the thread sweep"
    )
    build_parser.add_argument("--runs", type=int, default=20, help="timed runs per point (default 20)")
    build_parser.add_argument(
        "--force", action="store_true", help="re-export models that are already in the cache"
    )
    build_parser.add_argument("--json", action="store_true", help="print the build report as JSON")
    build_parser.set_defaults(func=run_build)
    ls = msub.add_parser("list", help="the demo models, their apps and whether they are built")
    ls.add_argument("--cache", type=Path, default=None)
    ls.set_defaults(func=run_list)
    parser.set_defaults(func=lambda _args: (parser.print_help(), 2)[1])


def _cache(args: argparse.Namespace) -> Path:
    # CLI start-up: loaded when this command runs
    from profiles.store import cache_dir

    return (args.cache or cache_dir()).expanduser()


def run_list(args: argparse.Namespace) -> int:
    # CLI start-up: loaded when this command runs
    from profiles.demo.nets import MODEL_SPECS
    from profiles.store import PACKAGE_ROOT, LocalStore

    pkg = LocalStore(PACKAGE_ROOT)
    used: dict[str, list[str]] = {}
    for app in pkg.list_apps():
        for mod in pkg.load_app(app).modules.values():
            used.setdefault(mod.model, []).append(app)
    models_dir = _cache(args) / "models"
    for name, spec in MODEL_SPECS.items():
        built = "built" if (models_dir / f"{name}.onnx").is_file() else "not built"
        print(f"{name:18} {built:9} apps={','.join(used.get(name, [])) or '-':24} {spec.description}")
    print(
        f"{'iou_tracker':18} {'cpu':9} apps={','.join(used.get('iou_tracker', [])):24} "
        "SORT-style IoU/Kalman tracker (numpy)"
    )
    return 0


def _print_report(report: Any, store_desc: str, model_dir: Path) -> None:
    print(f"models: {', '.join(report.models)}")
    print(f"ONNX files in {model_dir}; profiles written to {store_desc}; GPU profiles: {report.gpu}")
    for name in report.models:
        exp = report.export_s.get(name)
        spread = report.spreads.get(name)
        print(
            f"  {name:18} export {exp if exp is not None else 0:5.1f} s  "
            f"profile {report.profile_s.get(name, 0):5.1f} s"
            + (f"  max spread (p95/median, batch>=4, 2 threads) {spread:.3f}" if spread is not None else "")
        )
    for key, fit in report.fits.items():
        print(
            f"  linear fit {key:28} alpha {fit['alpha_s'] * 1e3:7.3f} ms  "
            f"beta {fit['beta_s'] * 1e3:7.3f} ms  "
            f"max err {fit['max_rel_err']:6.1%}"
        )
    for msg in report.limits:
        print(f"  limit: {msg}")
    if report.loo:
        print("leave-one-out CPU prediction error, 1 thread (FLOPs+bytes scaling, mean over batches):")
        for model, error in report.loo.items():
            print(
                f"  {model:18} {error:6.1%}   "
                f"(FLOPs only: {report.loo_flops_only.get(model, float('nan')):6.1%})"
            )
        print(
            f"  median {statistics.median(report.loo.values()):.1%}  "
            f"(FLOPs only: {statistics.median(report.loo_flops_only.values()):.1%})"
        )
    print(
        f"total build time {report.total_s:.1f} s "
        f"(host load average {report.load_1m[0]:.2f} at start, {report.load_1m[1]:.2f} at end)"
    )


def run_build(args: argparse.Namespace) -> int:
    # CLI start-up: loaded when this command runs
    from profiles.build import CPU_MODELS, BuildConfig, build, models_for_apps, total_points
    from profiles.errors import ProfilesError
    from profiles.store import PACKAGE_ROOT, LayeredStore, LocalStore

    if args.runs < 1:
        raise UsageError("--runs must be at least 1")
    cache = _cache(args)
    model_dir = cache / "models"
    target = LocalStore(args.store if args.store is not None else cache)
    store = LayeredStore([target, LocalStore(PACKAGE_ROOT)])
    cfg = BuildConfig(
        batches=args.batches, sweep_batches=args.sweep_batches, runs=args.runs, force=args.force
    )
    try:
        model_dir.mkdir(parents=True, exist_ok=True)
        models = models_for_apps(store, args.apps)
        n_cpu = sum(model in CPU_MODELS for model in models)
        with progress_bar(total_points(cfg, len(models) - n_cpu, n_cpu), "models build") as tick:
            report = build(store, model_dir, args.apps, cfg, progress=tick)
    except ProfilesError as exc:
        raise UsageError(str(exc)) from exc
    except OSError as exc:
        raise UsageError(f"cannot write to {cache}: {exc.strerror or exc}") from exc
    if args.json:
        print(json.dumps(report.as_dict(), indent=1))
    else:
        _print_report(report, target.describe(), model_dir)
    return 0
