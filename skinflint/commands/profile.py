"""``skinflint profile MODEL.onnx --hardware NAME``: measure a model over batch sizes, concurrency
and thread counts with onnxruntime; fit Nexus's linear model (and HiTDL's L(n) over threads).

``skinflint profile derive MODEL.onnx --gpu SPEC.json [--batches 1,8,32] [--json]``: derive the model's
profile on a device that is not here, from a device spec and its measured anchors (a per-operator
roofline, ``profiles.roofline``)."""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skinflint.errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


@contextmanager
def progress_bar(total: int, title: str) -> Iterator[Callable[[str], None]]:
    # CLI start-up: loaded when this command runs
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[label]}"),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    ) as prog:
        task = prog.add_task(title, total=total, label="")

        def tick(label: str) -> None:
            prog.update(task, advance=1, label=label)

        yield tick


def _int_list(text: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(value) for value in text.split(",") if value.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not vals or min(vals) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return vals


def _batches(text: str | None, default: tuple[int, ...]) -> tuple[int, ...]:
    """``--batches``, checked here rather than by argparse: a bad value is one line and exit 1."""
    if text is None:
        return default
    try:
        return _int_list(text)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"--batches: {exc}") from None


def _input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    name, sep, dims = text.partition("=")
    try:
        shape = tuple(int(dim) for dim in dims.lower().split("x"))
    except ValueError:
        shape = ()
    if not sep or not name or not shape or min(shape) < 1:
        raise argparse.ArgumentTypeError(f"expected NAME=D1xD2x..., got {text!r}")
    return name, shape


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "profile",
        help="measure an ONNX model over batch sizes and concurrency (onnxruntime)",
        description=__doc__,
    )
    parser.add_argument(
        "model",
        help="ONNX file (leading input dimension must be a dynamic batch axis), or `derive` followed by "
        "the ONNX file to derive a profile with --gpu SPEC.json",
    )
    parser.add_argument("derive_model", nargs="?", metavar="MODEL.onnx", help=argparse.SUPPRESS)
    parser.add_argument(
        "--hardware", help="catalog name the entries are recorded for (e.g. c6i.large); required to measure"
    )
    parser.add_argument(
        "--gpu",
        type=Path,
        metavar="SPEC.json",
        help="derive: the device spec with its anchors (docs/profiles.md)",
    )
    parser.add_argument("--batches", default=None, help="default 1,2,4,8,16,32 (derive: 1,8,32)")
    parser.add_argument("--concurrency", type=_int_list, default=(1,), help="sessions run at once, e.g. 1,2")
    parser.add_argument(
        "--threads",
        type=_int_list,
        default=None,
        help="total threads (split between concurrent sessions); a list (1,2) sweeps and fits HiTDL's L(n)",
    )
    parser.add_argument("--runs", type=int, default=20, help="timed runs per point (default 20)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--max-duration-s", type=float, default=2.0, help="stop growing the batch past this")
    parser.add_argument(
        "--max-memory-mb", type=float, default=None, help="cap on resident memory (default: half free)"
    )
    parser.add_argument("--input-shape", type=_input_shape, action="append", default=[], metavar="NAME=D1xD2")
    parser.add_argument("--out", type=Path, help="write the profile (list of ProfileEntry dicts) here")
    parser.add_argument("--json", action="store_true", help="print the full result as JSON on stdout")
    parser.set_defaults(func=run)


def _hitdl_by_batch(points: list[Any]) -> dict[int, dict[str, Any]]:
    # CLI start-up: loaded when this command runs
    from profiles.fit import fit_hitdl

    out = {}
    for batch in sorted({point.batch for point in points if point.concurrency == 1}):
        pts = [point for point in points if point.concurrency == 1 and point.batch == batch]
        if len({point.threads for point in pts}) >= 2:
            out[batch] = fit_hitdl(
                [point.threads for point in pts], [point.median_s for point in pts]
            ).as_dict()
    return out


def _print_table(summary: dict[str, Any], hitdl: dict[int, dict[str, Any]]) -> None:
    # CLI start-up: loaded when this command runs
    from rich.console import Console
    from rich.table import Table

    con = Console()
    table = Table(
        title=f"{summary['model']} ({summary['provenance']['provider']}, {summary['provenance']['host_cpu']})"
    )
    for col in ("conc", "threads", "batch", "median ms", "p95 ms", "spread", "runs", "peak MB", "thr req/s"):
        table.add_column(col, justify="right")
    for point in summary["points"]:
        table.add_row(
            str(point["concurrency"]),
            str(point["threads"]),
            str(point["batch"]),
            f"{point['median_s'] * 1e3:.2f}",
            f"{point['p95_s'] * 1e3:.2f}",
            f"{point['spread']:.3f}",
            str(point["runs"]),
            f"{point['peak_rss_mb']:.0f}",
            f"{point['concurrency'] * point['batch'] / point['median_s']:.1f}",
        )
    con.print(table)
    for key, fit in summary["fits"].items():
        con.print(
            f"linear fit {key}: d(b) = {fit['alpha_s'] * 1e3:.3f} ms * b + {fit['beta_s'] * 1e3:.3f} ms, "
            f"max error {fit['max_rel_err']:.1%}, mean {fit['mean_rel_err']:.1%}"
        )
    for batch, fit in hitdl.items():
        con.print(
            f"HiTDL fit batch {batch}: L(n) = {fit['c0'] * 1e3:.3f} + {fit['c1'] * 1e3:.3f}/n "
            f"+ {fit['c2'] * 1e3:.3f}/n^2 ms"
            + (" (2 core counts: c2 fixed to 0)" if fit["degenerate"] else "")
        )
    for msg in summary["limits"]:
        con.print(f"[yellow]limit[/]: {msg}")
    cost = summary["cost"]
    con.print(
        f"per request: {cost['flops'] / 1e9:.3f} GFLOPs, weights {cost['weight_bytes'] / 1e6:.1f} MB, "
        f"activations {cost['activation_bytes'] / 1e6:.1f} MB"
    )


def run(args: argparse.Namespace) -> int:
    # CLI start-up: loaded when this command runs
    from profiles.errors import ProfilesError
    from profiles.hardware import load_catalog
    from profiles.profiler import ProfileConfig, plan_series, profile_onnx

    if args.model == "derive":
        return run_derive(args)
    if args.derive_model is not None or args.gpu is not None:
        raise UsageError(
            "one ONNX file to measure; to derive a profile: "
            "skinflint profile derive MODEL.onnx --gpu SPEC.json"
        )
    if not args.hardware:
        raise UsageError("--hardware is required to measure (e.g. --hardware c6i.large)")
    args.batches = _batches(args.batches, (1, 2, 4, 8, 16, 32))
    if args.runs < 1:
        raise UsageError("--runs must be at least 1")
    catalog = load_catalog()
    if args.hardware not in catalog:
        raise UsageError(f"unknown hardware {args.hardware!r}; the catalog has {', '.join(catalog)}")
    kind = (catalog[args.hardware].model_extra or {}).get("kind")
    use_gpu = kind == "gpu"
    if use_gpu:
        # optional heavy dependency: onnxruntime
        import onnxruntime as ort

        if "CUDAExecutionProvider" not in ort.get_available_providers():
            raise UsageError(
                f"{args.hardware} is a GPU but onnxruntime has no CUDA provider here; "
                "GPU profiles are derived by `skinflint models build`"
            )
    shapes = dict(args.input_shape)
    series: list[tuple[int, int]] = []
    for total in args.threads or (None,):
        base = ProfileConfig(args.hardware, args.batches, args.concurrency, threads=total)
        series += [series_name for series_name in plan_series(base) if series_name not in series]
    cfg = ProfileConfig(
        args.hardware,
        args.batches,
        args.concurrency,
        threads=None,
        runs=args.runs,
        warmup=args.warmup,
        max_duration_s=args.max_duration_s,
        max_memory_mb=args.max_memory_mb,
        use_gpu=use_gpu,
        input_shapes=shapes or None,
    )
    if args.runs < 20:
        print(
            f"skinflint: note: {args.runs} runs per point (profiles for planning use at least 20)",
            file=sys.stderr,
        )
    try:
        with progress_bar(len(series) * len(set(args.batches)), f"profiling {Path(args.model).name}") as tick:
            result = profile_onnx(args.model, cfg, progress=tick, series=series)
    except ProfilesError as exc:
        raise UsageError(str(exc)) from exc
    summary = result.summary()
    hitdl = _hitdl_by_batch(result.points)
    summary["hitdl"] = hitdl
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result.entries(), indent=1) + "\n")
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        _print_table(summary, hitdl)
        if args.out:
            print(f"wrote {len(result.points)} entries to {args.out}")
    return 0


def run_derive(args: argparse.Namespace) -> int:
    """``skinflint profile derive MODEL.onnx --gpu SPEC.json``: fit the spec's anchors, derive the model."""
    # CLI start-up: loaded when this command runs (numpy, onnx)
    from profiles.errors import ProfilesError
    from profiles.roofline import derive_points, fit_spec, load_spec, model_work

    if not args.derive_model:
        raise UsageError("skinflint profile derive MODEL.onnx --gpu SPEC.json: name the ONNX file")
    if args.gpu is None:
        raise UsageError("skinflint profile derive needs --gpu SPEC.json (a device spec with anchors)")
    batches = _batches(args.batches, (1, 8, 32))
    try:
        spec = load_spec(args.gpu)
        work = model_work(args.derive_model)
        fit = fit_spec(spec)
        points = derive_points(fit, work, batches)
    except ProfilesError as exc:
        raise UsageError((str(exc).splitlines() or [type(exc).__name__])[0]) from exc
    result = {
        "model": work.name,
        "hardware": spec.hardware,
        "runtime": spec.runtime,
        "spec": str(args.gpu),
        "fit": fit.as_dict(),
        "points": [
            {key: point[key] for key in ("batch", "duration_s", "source", "method")} for point in points
        ],
        "left_out": [batch for batch in batches if batch not in {p["batch"] for p in points}],
    }
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    # CLI start-up: loaded when this command runs
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{work.name} on {spec.hardware} ({spec.runtime}), derived")
    for col in ("batch", "derived ms", "req/s"):
        table.add_column(col, justify="right")
    for point in points:
        table.add_row(
            str(point["batch"]),
            f"{point['duration_s'] * 1e3:.3f}",
            f"{point['batch'] / point['duration_s']:.0f}",
        )
    con = Console()
    con.print(table)
    con.print(f"method: {fit.method()}; worst anchor error {fit.max_rel_err:.0%}")
    if result["left_out"]:
        con.print(f"left out (weights + 2 x activations over 80 % of device memory): {result['left_out']}")
    return 0
