"""Leave-one-out of the per-operator roofline derivation (issue #27; prints figures, not a timed test).

Each model's profile is predicted from a fit to all the other models (``profiles.roofline``) and compared
with what was measured:

- on the H100 figures of ``profiles/data/gpu/h100_demo_models.json`` (measured outside the project; its
  ``about`` says how): torch eager, fp32 with TF32 off, the host-to-device input copy included (``run1``,
  eight demo models and ResNet-50), and the same calls replayed as CUDA graphs (``run2``, five models);
- on the H100 figures ``bench/gpu_check.py`` measured in a session lent a GPU
  (``profiles/data/gpu/h100_gpu_check_2026-11-27.json``): the eight demo models and ResNet-50, eager and
  CUDA graph, in one run; with the held-out architectures (timm, never fitted) that run derived and measured;
- on this machine's CPU profiles (``profiles/data/<model>.json``, one 2-thread onnxruntime session on the
  2-vCPU development host).

It reports the share of points whose derived/measured ratio is within [0.7, 1.45] and the smallest ratio
(targets: >= 80 % and never below 0.5), next to the method it replaces (ResNet-50 scaled by FLOPs,
activation and weight bytes and operator count, ``profiles.derive``) on the same H100 points. The demo
models are built from code with fixed seeds (``profiles.demo.nets``) and exported once into the models
cache. Usage: ``skinflint bench gpu-derive [--models-dir DIR] [--plot FILE] [--json]``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.results import add_results_arguments, record
from profiles.roofline import RIDGE, DeviceSpec, leave_one_out, model_work, within_summary
from profiles.store import PACKAGE_ROOT, cache_dir

if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping

    from bench.results import Recording
    from profiles.roofline import ModelWork

H100_DATA = PACKAGE_ROOT / "data" / "gpu" / "h100_demo_models.json"
CHECK_DATA = PACKAGE_ROOT / "data" / "gpu" / "h100_gpu_check_2026-11-27.json"
BATCHES = (1, 8, 32)
CPU_BATCHES = (1, 2, 4, 8, 16)
DEMO = (
    "ssdlite_mnv2", "resnet18_vehicle", "resnet18_face", "landmark_net", "pose_vgg", "caption_encoder",
    "caption_decoder", "action_r21d",
)  # fmt: skip
#: The H100 SXM of the shared figures: NVIDIA's datasheet (67 TFLOPS FP32, 3.35 TB/s HBM3, 132 SMs);
#: the host link is PCIe Gen5 x16, 64 GB/s nominal, taken at 25 GB/s achieved for pinned copies.
H100 = DeviceSpec("h100", 67.0, 3350, 80, "torch-eager-fp32", (), link_gbps=25, sm_count=132)
#: This development host's 2 vCPUs, nominal: 2 x 2.45 GHz x 32 FP32 FLOP/cycle (AVX2, two FMA units),
#: about 20 GB/s of memory bandwidth for two vCPUs; no wave quantisation, no host link.
HOST_CPU = DeviceSpec("c6i.large", 0.157, 20, 4, "onnxruntime-cpu-2-threads", (), link_gbps=1e6)


def ensure_models(directory: Path, names: tuple[str, ...]) -> dict[str, Path]:
    """The ONNX files of ``names`` in ``directory``, exported there when missing (progress on stderr)."""
    from profiles.onnxgraph import export_torch

    paths = {name: directory / f"{name}.onnx" for name in names}
    missing = [name for name, path in paths.items() if not path.is_file()]
    if missing:
        # torch takes seconds to import: only when a model must be built
        import torch

        from profiles.demo.nets import MODEL_SPECS, ResNet50, build_model

        for name in missing:
            print(f"exporting {name} to {paths[name]}", file=sys.stderr)
            if name == "resnet50":
                torch.manual_seed(0)
                export_torch(ResNet50().eval(), (3, 224, 224), paths[name])
            else:
                spec = MODEL_SPECS[name]
                export_torch(
                    build_model(name), spec.input_shape, paths[name],
                    input_name=spec.input_name, output_names=spec.output_names,
                )  # fmt: skip
    return paths


def h100_measured(data: Mapping[str, Any], mode: str) -> dict[str, dict[int, float]]:
    """``{model: {batch: median_s}}`` of the shared H100 file: ``eager`` (run1, fp32, input copy
    included) or ``graph`` (run2, CUDA graph replay)."""
    if mode == "eager":
        return {
            model: {b: float(v[f"fp32_b{b}"]["with_h2d"]["median_s"]) for b in BATCHES}
            for model, v in data["run1"]["models"].items()
        }
    return {
        model: {b: float(v[f"graph_b{b}"]["median_s"]) for b in BATCHES}
        for model, v in data["run2"]["models"].items()
    }


def check_measured(data: Mapping[str, Any], runtime: str) -> dict[str, dict[int, float]]:
    """``{model: {batch: median_s}}`` of one runtime of a ``bench/gpu_check.py --json`` record."""
    return {
        model: {int(b): float(s) for b, s in pts.items()}
        for model, pts in data["runtimes"][runtime]["measured"].items()
    }


def held_out_recorded(data: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """Print the held-out architectures of a ``gpu_check`` record (derived there, from that run's
    anchors, with this roofline); returns their summaries by runtime."""
    summaries = {}
    for runtime, held in data.get("held_out", {}).items():
        print(f"== held-out architectures (timm, never fitted), {runtime}, as recorded on {data['date']} ==")
        print(f"  {'model':22} {'batch':>5} {'measured ms':>12} {'derived ms':>11} {'ratio':>6}")
        for p in held["points"]:
            flag = "" if 0.7 <= p["ratio"] <= 1.45 else "  outside"
            measured, derived = p["measured_s"] * 1e3, p["derived_s"] * 1e3
            print(
                f"  {p['model']:22} {p['batch']:5} {measured:12.3f} {derived:11.3f} {p['ratio']:6.2f}{flag}"
            )
        summaries[runtime] = within_summary([p["ratio"] for p in held["points"]])
    return summaries


def cpu_measured(data_dir: Path) -> dict[str, dict[int, float]]:
    """The measured 2-thread, concurrency-1 entries of this host's CPU profiles."""
    out: dict[str, dict[int, float]] = {}
    for name in DEMO:
        path = data_dir / f"{name}.json"
        if not path.is_file():
            continue
        for entry in json.loads(path.read_text()):
            if (
                entry.get("source") == "measured"
                and entry.get("concurrency") == 1
                and entry.get("threads") == 2
                and entry["batch"] in CPU_BATCHES
            ):
                out.setdefault(name, {})[entry["batch"]] = float(entry["duration_s"])
    return out


def write_h100_spec(directory: Path, spec: DeviceSpec, measured: Mapping[str, Mapping[int, float]]) -> Path:
    """A spec file of the shared H100 figures, its anchors the ONNX files in ``directory``."""
    raw = spec.as_dict() | {
        "source": "profiles/data/gpu/h100_demo_models.json (NVIDIA H100 80GB HBM3, torch 2.11.0+cu130, "
        "2026-11-26; see its about)",
        "anchors": [
            {"model": f"{model}.onnx", "batch": batch, "duration_s": duration}
            for model, pts in measured.items()
            for batch, duration in pts.items()
        ],
    }
    path = directory / f"h100-{spec.runtime}.json"
    path.write_text(json.dumps(raw, indent=1) + "\n")
    return path


def old_method_ratios(measured: Mapping[str, Mapping[int, float]], paths: Mapping[str, Path]) -> list[float]:
    """Today's method on the same points: ResNet-50 measured here as the one anchor, scaled by FLOPs,
    activation bytes, weight bytes and operators (``profiles.derive.scaled_linear``)."""
    from profiles.derive import scaled_linear
    from profiles.fit import fit_linear
    from profiles.onnxgraph import graph_cost, load_onnx

    ref = measured["resnet50"]
    ref_fit = fit_linear(list(ref), list(ref.values()))
    ref_cost = graph_cost(load_onnx(paths["resnet50"])).as_dict()
    ridge = H100.peak_fp32_tflops * 1e12 / (H100.memory_bandwidth_gbps * 1e9)
    ratios = []
    for model, pts in measured.items():
        if model == "resnet50":
            continue
        cost = graph_cost(load_onnx(paths[model])).as_dict()
        alpha, beta = scaled_linear(cost, ref_cost, ref_fit.alpha_s, ref_fit.beta_s, ridge)
        ratios += [(alpha * batch + beta) / duration for batch, duration in pts.items()]
    return ratios


def _eager_repeat(data: Mapping[str, Any]) -> None:
    """How far the H100's eager figures move between its two runs (run2: cudnn.benchmark on, no copy)."""
    run1, run2 = data["run1"]["models"], data["run2"]["models"]
    ratios = [
        run2[m][f"eager_b{b}"]["median_s"] / run1[m][f"fp32_b{b}"][copy]["median_s"]
        for m in run2
        for b in BATCHES
        for copy in ("compute", "with_h2d")
    ]
    print(
        f"H100 eager, run2 / run1 for the same model and batch ({len(ratios)} pairs): "
        f"{min(ratios):.2f}-{max(ratios):.2f} (the measurement's own spread, against the [0.7, 1.45] band)"
    )


def _cpu_provenance(data_dir: Path) -> None:
    """Where the CPU figures came from: the load and spread each measured entry recorded."""
    loads, spreads, dates = [], [], set()
    for name in DEMO:
        for entry in json.loads((data_dir / f"{name}.json").read_text()):
            if (
                entry.get("source") == "measured"
                and entry.get("concurrency") == 1
                and entry.get("threads") == 2
            ):
                loads.append(float(entry.get("host_load_1m", math.nan)))
                spreads.append(float(entry.get("spread", math.nan)))
                dates.add(str(entry.get("date")))
    print(
        f"CPU entries (profiles/data/<model>.json, {', '.join(sorted(dates))}): host load "
        f"{min(loads):.2f}-{max(loads):.2f} on 2 vCPUs, "
        f"spread p95/median {min(spreads):.2f}-{max(spreads):.2f}"
    )


def catalog_t4(works: Mapping[str, ModelWork]) -> None:
    """The catalog's T4 through the roofline, anchored on what it has: NVIDIA's published ResNet-50 FP32
    latencies (``profiles.derive.ANCHORS``), against the packaged T4 entries (the ResNet-50 scaling)."""
    from profiles.derive import ANCHORS
    from profiles.roofline import fit_roofline

    published = ANCHORS["t4"]
    spec = DeviceSpec("t4", 8.1, 320, 16, "nvidia-published-resnet50-fp32", (), sm_count=40)
    fit = fit_roofline(
        spec, [(works["resnet50"], 1, published.d1_s), (works["resnet50"], 32, published.d32_s)]
    )
    print(f"== catalog t4 through the roofline, one anchor model ({published.source}) ==")
    print(
        f"  fit: fixed {fit.fixed_s * 1e3:.2f} ms, launch {max(fit.launch_s.values()) * 1e6:.1f} us: "
        "two points of one model leave the launch and fixed costs confounded"
    )
    print(f"  {'model':18} {'batch':>5} {'packaged ms':>12} {'roofline ms':>12}")
    for name in DEMO:
        entries = json.loads((PACKAGE_ROOT / "data" / f"{name}.json").read_text())
        packaged = {e["batch"]: e["duration_s"] for e in entries if e["hardware"] == "t4"}
        for batch in (b for b in BATCHES if b in packaged):
            derived = fit.predict(works[name], batch)
            print(f"  {name:18} {batch:5} {packaged[batch] * 1e3:12.2f} {derived * 1e3:12.2f}")


def _table(title: str, loo: Mapping[str, Mapping[int, tuple[float, float]]]) -> list[float]:
    print(f"== {title} ==")
    print(f"  {'model':18} {'batch':>5} {'measured ms':>12} {'derived ms':>11} {'ratio':>6}")
    ratios = []
    for model, pts in loo.items():
        for batch, (derived, measured) in pts.items():
            ratio = derived / measured
            ratios.append(ratio)
            flag = "" if 0.7 <= ratio <= 1.45 else "  outside"
            print(f"  {model:18} {batch:5} {measured * 1e3:12.3f} {derived * 1e3:11.3f} {ratio:6.2f}{flag}")
    return ratios


def _summary_line(name: str, summary: Mapping[str, float]) -> str:
    return (
        f"  {name:62} {int(summary['points']):3} points, {summary['within']:6.1%} within [0.7, 1.45], "
        f"min {summary['min']:.2f}, max {summary['max']:.2f}, geomean {summary['geomean']:.2f}"
    )


def plot(results: Mapping[str, Mapping[str, Mapping[int, tuple[float, float]]]], path: Path) -> None:
    import matplotlib  # optional and slow to import: only when a plot is asked for

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after use("Agg"): no display backend

    fig, ax = plt.subplots(figsize=(6.5, 6))
    lo, hi = math.inf, 0.0
    for (name, loo), marker in zip(results.items(), "osd^vP", strict=False):
        pairs = [pt for pts in loo.values() for pt in pts.values()]
        derived, measured = [p[0] for p in pairs], [p[1] for p in pairs]
        lo, hi = min(lo, *derived, *measured), max(hi, *derived, *measured)
        ax.scatter(measured, derived, marker=marker, label=name, alpha=0.8)
    grid = [lo * 0.8, hi * 1.25]
    ax.plot(grid, grid, color="black", lw=1, label="derived = measured")
    for factor in (0.7, 1.45):
        ax.plot(grid, [g * factor for g in grid], color="grey", lw=0.8, ls="--")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured (s)")
    ax.set_ylabel("derived, leave-one-out (s)")
    ax.set_title("per-operator roofline, each model predicted from the others\n(dashed: x0.7 and x1.45)")
    ax.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__.split("\n\n")[0] if __doc__ else None
    parser.add_argument(
        "--models-dir",
        type=Path,
        default=None,
        help="where the demo models' ONNX files are (exported there when missing; default the models cache)",
    )
    parser.add_argument("--data", type=Path, default=H100_DATA, help="the measured H100 figures (JSON)")
    parser.add_argument(
        "--plot", type=Path, default=None, help="PNG (default docs/results/<date>-gpu-derive.png)"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    add_results_arguments(parser)


def run_command(args: argparse.Namespace) -> int:
    return record("gpu-derive", args, lambda page: main(args, page))


def main(args: argparse.Namespace, page: Recording | None = None) -> int:
    models_dir = args.models_dir or cache_dir() / "models"
    paths = ensure_models(models_dir, (*DEMO, "resnet50"))
    works: dict[str, ModelWork] = {name: model_work(path, name) for name, path in paths.items()}
    data = json.loads(args.data.read_text())
    sets = {
        "H100 torch eager (input copy included)": (
            dataclasses.replace(H100, overlap=True),
            h100_measured(data, "eager"),
        ),
        "H100 CUDA graph": (
            dataclasses.replace(H100, runtime="torch-cudagraph-fp32"),
            h100_measured(data, "graph"),
        ),
    }
    check = json.loads(CHECK_DATA.read_text())
    sets |= {
        f"H100 torch eager, gpu-check {check['date']}": (
            dataclasses.replace(H100, overlap=True),
            check_measured(check, "torch-eager-fp32"),
        ),
        f"H100 CUDA graph, gpu-check {check['date']}": (
            dataclasses.replace(H100, runtime="torch-cudagraph-fp32"),
            check_measured(check, "torch-cudagraph-fp32"),
        ),
        "CPU, this host (onnxruntime, 2 threads)": (HOST_CPU, cpu_measured(PACKAGE_ROOT / "data")),
    }
    for spec, measured in list(sets.values())[:2]:  # the H100 specs, next to the ONNX files they name
        spec_path = write_h100_spec(models_dir, spec, measured)
        print(f"spec: {spec_path} (skinflint profile derive MODEL.onnx --gpu {spec_path})", file=sys.stderr)
    results: dict[str, dict[str, dict[int, tuple[float, float]]]] = {}
    summaries: dict[str, dict[str, float]] = {}
    for name, (spec, measured) in sets.items():
        results[name] = leave_one_out(spec, measured, works)
        if not args.json:
            summaries[name] = within_summary(_table(f"leave-one-out: {name}", results[name]))
        else:
            ratios = [d / m for pts in results[name].values() for d, m in pts.values()]
            summaries[name] = within_summary(ratios)
    old = within_summary(old_method_ratios(h100_measured(data, "eager"), paths))
    if args.json:
        held = {
            r: within_summary([p["ratio"] for p in h["points"]]) for r, h in check.get("held_out", {}).items()
        }
        print(json.dumps({"summaries": summaries, "old_method_h100_eager": old, "held_out": held, "results": {
            name: {m: {str(b): {"derived_s": d, "measured_s": s} for b, (d, s) in pts.items()}
                   for m, pts in loo.items()} for name, loo in results.items()}}, indent=1))  # fmt: skip
    else:
        held_summaries = held_out_recorded(check)
        print("== summary (targets: >= 80 % within [0.7, 1.45], min >= 0.5) ==")
        for name, summary in summaries.items():
            print(_summary_line(f"leave-one-out: {name}", summary))
        for runtime, summary in held_summaries.items():
            print(_summary_line(f"held-out (timm), {runtime}, {check['date']}", summary))
        print(_summary_line("H100 eager, old method (ResNet-50 scaled)", old))
        print(f"== sensitivity to the ridge tying the classes' coefficients (used: {RIDGE}) ==")
        for ridge in (0.1, 1.0):
            for name, (spec, measured) in list(sets.items())[:2]:
                ratios = [
                    d / m
                    for pts in leave_one_out(spec, measured, works, ridge).values()
                    for d, m in pts.values()
                ]
                print(_summary_line(f"ridge {ridge}: {name}", within_summary(ratios)))
        _eager_repeat(data)
        _cpu_provenance(PACKAGE_ROOT / "data")
        catalog_t4(works)
    plot_path = args.plot or Path(args.results) / f"{dt.datetime.now().astimezone().date()}-gpu-derive.png"
    if not getattr(args, "no_results", False) or args.plot:
        plot(results, plot_path)
        print(f"plot: {plot_path}", file=sys.stderr)
        if page is not None:
            page.plots.append(str(plot_path))
    return 0
