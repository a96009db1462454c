"""GPU check (issue #27): measure the demo models on this machine's CUDA device, write device specs with
the measurements as anchors, and print the derived profile against the measured one.

On a machine with a CUDA device it builds the demo models (``profiles.demo.nets``, fixed seeds) and
ResNet-50, exports them to ONNX next to the spec files, and measures each at the batch sizes:

- with onnxruntime's CUDA provider when it is installed (runtime ``ort-cuda-fp32``);
- otherwise with torch on the device (fp32, TF32 off, ``cudnn.benchmark`` on): eager, the pinned host
  input copied in the timed call (``torch-eager-fp32``), and the same call captured once as a CUDA graph
  and replayed (``torch-cudagraph-fp32``, the input copied into the graph's static input).

Each point is the median of ``--runs`` timed calls after warm-ups, synchronised after each call. A spec
per runtime goes to ``--out`` (``<runtime>.json``, anchors relative to it; ``skinflint profile derive
MODEL.onnx --gpu <runtime>.json`` reads it), and derived against measured is printed: each model
predicted from all the others (leave-one-out), when the ``onnx`` package is there to count the graphs.
Without a CUDA device (or without torch) it says so and exits 0. It needs no network and no onnxruntime,
and not the planner's own dependencies (pydantic): the roofline is loaded from its files.

``--held-out NAMES`` also measures architectures from outside the project (``timm`` models by name,
randomly initialised, no weights downloaded; skipped with a line when timm is not installed) and prints
each one derived from a fit to all the demo anchors of the same run against what it measured: the
test of a derivation on models nobody fitted it to.

Usage: ``skinflint bench gpu-check [--out DIR] [--batches 1,8,32] [--runs 40] [--held-out NAMES]``, or
``python bench/gpu_check.py ...`` / ``python -m bench.gpu_check ...`` from the repository root.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import statistics
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if __package__ in (None, ""):  # run as a script: python bench/gpu_check.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.results import add_results_arguments, record

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from bench.results import Recording

__all__ = ["DeviceInfo", "detect_device", "main", "run_check", "write_spec"]

DEMO = (
    "ssdlite_mnv2", "resnet18_vehicle", "resnet18_face", "landmark_net", "pose_vgg", "caption_encoder",
    "caption_decoder", "action_r21d",
)  # fmt: skip
#: Datasheet peak FP32 (TFLOPS, no tensor cores) and memory bandwidth (GB/s), by a substring of the
#: device name as CUDA reports it. A device not here gets its SM count x 128 FP32 lanes x 2 x clock and
#: a measured device-to-device copy bandwidth.
KNOWN_GPUS: tuple[tuple[str, float, float], ...] = (
    ("H200", 67.0, 4800),
    ("H100 80GB HBM3", 67.0, 3350),
    ("H100 PCIe", 51.0, 2000),
    ("H100", 67.0, 3350),
    ("A100-SXM4-80GB", 19.5, 2039),
    ("A100", 19.5, 1555),
    ("A10G", 31.2, 600),
    ("L4", 30.3, 300),
    ("T4", 8.1, 320),
    ("V100", 15.7, 900),
)


@dataclass(frozen=True)
class DeviceInfo:
    """The CUDA device that measures: name, memory, SMs, peak FP32, bandwidth and where they came from."""

    name: str
    memory_gib: float
    sm_count: int
    peak_fp32_tflops: float
    memory_bandwidth_gbps: float
    figures_source: str
    runtime_versions: str

    @property
    def hardware(self) -> str:
        for label in ("H200", "H100", "A100", "A10G", "L4", "T4", "V100"):
            if label in self.name:
                return label.lower()
        return self.name.lower().replace("nvidia ", "").replace(" ", "-")


def _bandwidth_gbps(torch: Any) -> float:
    """Device-to-device copy of 1 GiB: read + write bytes over the median time."""
    src = torch.empty(2**28, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    times = []
    for _ in range(6):
        torch.cuda.synchronize()
        began = time.perf_counter()
        dst.copy_(src)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - began)
    return float(2 * src.numel() * 4 / statistics.median(times[1:]) / 1e9)


def detect_device() -> DeviceInfo | None:
    """The first CUDA device seen by torch, or None (no torch, or no device)."""
    try:
        import torch  # optional heavy dependency: torch (on a GPU machine, the CUDA build)
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    name = str(props.name)
    known = next(((tf, bw) for key, tf, bw in KNOWN_GPUS if key in name), None)
    if known:
        peak, bandwidth, source = known[0], known[1], "datasheet (bench/gpu_check.py KNOWN_GPUS)"
    else:
        clock_ghz = float(getattr(props, "clock_rate", 1_500_000)) / 1e6
        peak = props.multi_processor_count * 128 * 2 * clock_ghz / 1e3
        bandwidth = _bandwidth_gbps(torch)
        source = "estimated: SMs x 128 lanes x 2 x clock; bandwidth from a 1 GiB device copy"
    versions = f"torch {torch.__version__}, CUDA {torch.version.cuda}"
    return DeviceInfo(
        name, props.total_memory / 2**30, int(props.multi_processor_count), peak, bandwidth, source, versions
    )


def ort_cuda_available() -> bool:
    try:
        import onnxruntime as ort  # optional heavy dependency: onnxruntime
    except ImportError:
        return False
    return "CUDAExecutionProvider" in ort.get_available_providers()


def _median_time(call: Callable[[], None], sync: Callable[[], None], runs: int, warmup: int) -> float:
    for _ in range(warmup):
        call()
    sync()
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        call()
        sync()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def measure_torch(
    module: Any, input_shape: Sequence[int], batch: int, mode: str, runs: int = 40, warmup: int = 10
) -> float:
    """Median seconds of one call of ``module`` on batch ``batch``: ``eager`` (pinned host input copied
    in the call) or ``graph`` (the same call captured once as a CUDA graph and replayed). On a machine
    without CUDA, ``eager`` runs on the CPU (for tests)."""
    import torch  # optional heavy dependency: torch

    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    model = module.to(device).eval()
    host = torch.randn(batch, *input_shape)
    if cuda:
        host = host.pin_memory()

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    with torch.inference_mode():
        if mode == "eager":
            return _median_time(lambda: model(host.to(device, non_blocking=True)), sync, runs, warmup)
        if not cuda:
            raise RuntimeError("CUDA graphs need a CUDA device")
        static = host.to(device)
        side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                model(static)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            model(static)

        def replay() -> None:
            static.copy_(host, non_blocking=True)
            graph.replay()

        return _median_time(replay, sync, runs, warmup)


def measure_ort(path: Path, batch: int, runs: int = 40, warmup: int = 10) -> float:
    """Median seconds of one onnxruntime CUDA-provider run (host input in, host output out)."""
    import numpy as np
    import onnxruntime as ort  # optional heavy dependency: onnxruntime

    from profiles.onnxgraph import input_specs, load_onnx

    session = ort.InferenceSession(str(path), providers=["CUDAExecutionProvider"])
    if session.get_providers()[0] != "CUDAExecutionProvider":
        raise RuntimeError(f"onnxruntime runs {session.get_providers()[0]}, not CUDA")
    feeds = {
        spec.name: np.random.default_rng(0).random((batch, *spec.shape)).astype(spec.dtype)
        for spec in input_specs(load_onnx(path))
    }
    return _median_time(lambda: session.run(None, feeds), lambda: None, runs, warmup)


def _nets() -> Any:
    """``profiles/demo/nets.py`` loaded from its file: it needs torch only, whereas importing the
    ``profiles`` package loads the planner's pydantic models, which a bare GPU machine may not have."""
    module = sys.modules.get("_skinflint_demo_nets")
    if module is None:
        path = Path(__file__).resolve().parents[1] / "profiles" / "demo" / "nets.py"
        spec = importlib.util.spec_from_file_location("_skinflint_demo_nets", path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules["_skinflint_demo_nets"] = module
        spec.loader.exec_module(module)
    return module


def build_demo(name: str) -> tuple[Any, tuple[int, ...], str, tuple[str, ...]]:
    """A demo model (or ResNet-50) in eval mode: module, per-request input shape, input and output names."""
    import torch  # optional heavy dependency: torch

    nets = _nets()
    if name == "resnet50":
        torch.manual_seed(0)
        return nets.ResNet50().eval(), (3, 224, 224), "input", ("output",)
    spec = nets.MODEL_SPECS[name]
    return nets.build_model(name), spec.input_shape, spec.input_name, spec.output_names


def export_demo(name: str, path: Path) -> None:
    """Export as ``profiles.onnxgraph.export_torch`` does (TorchScript exporter, opset 17, dynamic batch),
    without importing ``profiles`` (see :func:`_nets`)."""
    module, shape, input_name, outputs = build_demo(name)
    export_module(module, shape, input_name, outputs, path)


def measure_demo(
    name: str, runtime: str, batches: Sequence[int], runs: int, onnx_path: Path
) -> dict[int, float]:
    """``{batch: median_s}`` of one demo model with one runtime."""
    if runtime == "ort-cuda-fp32":
        return {batch: measure_ort(onnx_path, batch, runs) for batch in batches}
    module, shape, _, _ = build_demo(name)
    mode = "graph" if runtime == "torch-cudagraph-fp32" else "eager"
    return {batch: measure_torch(module, shape, batch, mode, runs) for batch in batches}


def write_spec(
    path: Path, device: DeviceInfo, runtime: str, measured: Mapping[str, Mapping[int, float]], date: str
) -> dict[str, Any]:
    """The device spec with every measured point as an anchor (``<model>.onnx`` next to the spec)."""
    spec = {
        "hardware": device.hardware,
        "peak_fp32_tflops": round(device.peak_fp32_tflops, 2),
        "memory_bandwidth_gbps": round(device.memory_bandwidth_gbps, 1),
        "gpu_memory_gib": round(device.memory_gib, 1),
        "runtime": runtime,
        "sm_count": device.sm_count,
        "source": f"measured by bench/gpu_check.py on {device.name} ({device.runtime_versions}), {date}; "
        f"peak and bandwidth: {device.figures_source}",
        "anchors": [
            {"model": f"{model}.onnx", "batch": batch, "duration_s": round(duration, 7)}
            for model, pts in measured.items()
            for batch, duration in sorted(pts.items())
        ],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(spec, indent=1) + "\n")
    return spec


def _roofline() -> Any:
    """``profiles.roofline`` (and ``profiles.onnxgraph``, which it reads ONNX files with). When the
    ``profiles`` package cannot be imported (its ``__init__`` loads the planner's pydantic models, which a
    bare GPU machine may lack), the two modules are loaded from their files under a bare package."""
    try:
        from profiles import roofline
    except ImportError:
        import types

        root = Path(__file__).resolve().parents[1] / "profiles"
        bare = types.ModuleType("profiles")
        bare.__path__ = [str(root)]
        sys.modules["profiles"] = bare
        from profiles import roofline
    return roofline


def _compare(spec_path: Path, measured: Mapping[str, Mapping[int, float]]) -> dict[str, Any] | None:
    """Leave-one-out derived against measured, printed; None when ``onnx`` is missing."""
    try:
        import onnx  # noqa: F401  optional heavy dependency: onnx (to count the graphs)

        roofline = _roofline()
        leave_one_out, load_spec = roofline.leave_one_out, roofline.load_spec
        model_work, within_summary = roofline.model_work, roofline.within_summary
    except ImportError as exc:
        print(f"  {exc.name} is not installed: derived against measured skipped (the spec is written)")
        return None
    if not all((spec_path.parent / f"{name}.onnx").is_file() for name in measured):
        print("  an ONNX file is missing: derived against measured skipped (the spec is written)")
        return None

    spec = load_spec(spec_path)
    works = {name: model_work(spec_path.parent / f"{name}.onnx", name) for name in measured}
    loo = leave_one_out(spec, measured, works)
    ratios = _ratio_table([(m, b, d, t) for m, pts in loo.items() for b, (d, t) in pts.items()])
    summary: dict[str, Any] = within_summary(ratios)
    print(
        f"  leave-one-out: {summary['within']:.0%} of {int(summary['points'])} points within [0.7, 1.45], "
        f"min ratio {summary['min']:.2f}"
    )
    return summary


def _ratio_table(rows: Sequence[tuple[str, int, float, float]]) -> list[float]:
    """Print ``(model, batch, derived_s, measured_s)`` rows; returns the derived/measured ratios."""
    print(f"  {'model':22} {'batch':>5} {'measured ms':>12} {'derived ms':>11} {'ratio':>6}")
    ratios = []
    for model, batch, derived, meas in rows:
        ratios.append(derived / meas)
        flag = "" if 0.7 <= derived / meas <= 1.45 else "  outside"
        print(f"  {model:22} {batch:5} {meas * 1e3:12.3f} {derived * 1e3:11.3f} {derived / meas:6.2f}{flag}")
    return ratios


def build_timm(name: str) -> tuple[Any, tuple[int, ...], str, tuple[str, ...]]:
    """A ``timm`` architecture by name, randomly initialised (seed 0, no weights fetched), in eval mode."""
    import timm  # optional heavy dependency: timm (held-out architectures; not a project dependency)
    import torch  # optional heavy dependency: torch

    torch.manual_seed(0)
    module = timm.create_model(name, pretrained=False).eval()
    shape = tuple(int(v) for v in (module.pretrained_cfg or {}).get("input_size", (3, 224, 224)))
    return module, shape, "input", ("output",)


def export_module(
    module: Any, shape: Sequence[int], input_name: str, outputs: Sequence[str], path: Path
) -> None:
    """Export a torch module to ONNX: the TorchScript exporter, opset 17, the batch axis dynamic."""
    import torch  # optional heavy dependency: torch

    axes = {input_name: {0: "batch"}} | {output: {0: "batch"} for output in outputs}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module.eval(), (torch.zeros(2, *shape),), str(path), input_names=[input_name],
            output_names=list(outputs), dynamic_axes=axes, opset_version=17, do_constant_folding=True,
            dynamo=False,
        )  # fmt: skip


def held_out_check(
    out: Path,
    names: Sequence[str],
    runtimes: Sequence[str],
    batches: Sequence[int],
    runs: int,
    *,
    build: Callable[[str], tuple[Any, tuple[int, ...], str, tuple[str, ...]]] = build_timm,
    measure: Callable[[Any, Sequence[int], int, str, int], float] | None = None,
) -> dict[str, Any]:
    """Measure architectures from outside the project and derive each from the run's own spec (every demo
    anchor; the held-out models are never in the fit): ``{runtime: {"points": [...], "summary": ...}}``."""
    import onnx  # noqa: F401  optional heavy dependency: onnx (to count the graphs)

    roofline = _roofline()
    timed = measure or measure_torch
    held = out / "held-out"
    held.mkdir(parents=True, exist_ok=True)
    works: dict[str, Any] = {}
    modules: dict[str, tuple[Any, tuple[int, ...]]] = {}
    for name in names:
        print(f"building and exporting held-out {name}", file=sys.stderr)
        try:
            module, shape, input_name, outputs = build(name)
            path = held / f"{name}.onnx"
            if not path.is_file():
                export_module(module, shape, input_name, outputs, path)
            works[name] = roofline.model_work(path, name)
            modules[name] = (module, shape)
        except Exception as exc:  # one architecture that will not build, export or count: the others run
            print(f"  held-out {name}: skipped ({type(exc).__name__}: {str(exc)[:120]})")
    result: dict[str, Any] = {}
    for runtime in runtimes:
        spec_path = out / f"{runtime}.json"
        fit = roofline.fit_spec(roofline.load_spec(spec_path))
        mode = "graph" if runtime == "torch-cudagraph-fp32" else "eager"
        print(f"== held-out architectures, {runtime}: derived from the {spec_path.name} anchors ==")
        rows = []
        for name, (module, shape) in modules.items():
            print(f"measuring held-out {name} ({runtime})", file=sys.stderr)
            for batch in batches:
                try:
                    measured = timed(module, shape, batch, mode, runs)
                except Exception as exc:  # e.g. a model CUDA graphs cannot capture
                    print(
                        f"  held-out {name} b{batch}: not measured ({type(exc).__name__}: {str(exc)[:120]})"
                    )
                    continue
                rows.append((name, batch, fit.predict(works[name], batch), measured))
        ratios = _ratio_table(rows)
        summary = roofline.within_summary(ratios)
        print(
            f"  held-out: {summary['within']:.0%} of {int(summary['points'])} points within [0.7, 1.45], "
            f"min ratio {summary['min']:.2f}"
        )
        result[runtime] = {
            "points": [
                {"model": m, "batch": b, "derived_s": d, "measured_s": t, "ratio": d / t}
                for m, b, d, t in rows
            ],
            "summary": summary,
        }
    return result


def run_check(
    out: Path,
    device: DeviceInfo,
    runtimes: Sequence[str],
    batches: Sequence[int],
    runs: int,
    *,
    models: Sequence[str] = (*DEMO, "resnet50"),
    measure: Callable[[str, str, Sequence[int], int, Path], dict[int, float]] = measure_demo,
    export: Callable[[str, Path], None] = export_demo,
    date: str = "",
) -> dict[str, Any]:
    """Export, measure, write one spec per runtime and compare; returns the figures (for ``--json``)."""
    date = date or dt.datetime.now(dt.UTC).date().isoformat()
    out.mkdir(parents=True, exist_ok=True)
    for name in models:
        path = out / f"{name}.onnx"
        if not path.is_file():
            print(f"exporting {name}", file=sys.stderr)
            try:
                export(name, path)
            except Exception as exc:  # an exporter missing a dependency: measure all the same
                print(f"  {name}: ONNX export failed ({type(exc).__name__}: {str(exc)[:100]})")
    figures: dict[str, Any] = {"device": device.__dict__, "date": date, "runtimes": {}}
    for runtime in runtimes:
        print(f"== {runtime} on {device.name} ({device.runtime_versions}) ==")
        measured: dict[str, dict[int, float]] = {}
        for name in models:
            print(f"measuring {name} ({runtime})", file=sys.stderr)
            measured[name] = measure(name, runtime, batches, runs, out / f"{name}.onnx")
        spec_path = out / f"{runtime}.json"
        write_spec(spec_path, device, runtime, measured, date)
        print(f"  spec with {sum(len(p) for p in measured.values())} anchors: {spec_path}")
        summary = _compare(spec_path, measured)
        figures["runtimes"][runtime] = {
            "spec": str(spec_path),
            "measured": measured,
            "leave_one_out": summary,
        }
    return figures


def _batches(text: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not vals or min(vals) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return vals


def _names(text: str) -> tuple[str, ...]:
    names = tuple(v.strip() for v in text.split(",") if v.strip())
    if not names:
        raise argparse.ArgumentTypeError(f"expected comma-separated model names, got {text!r}")
    return names


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (__doc__ or "").split("\n\n")[0]
    parser.add_argument(
        "--out", type=Path, default=None, help="specs and ONNX files (default <models cache>/gpu-check)"
    )
    parser.add_argument("--batches", type=_batches, default=(1, 8, 32), help="default 1,8,32")
    parser.add_argument("--runs", type=int, default=40, help="timed calls per point (default 40)")
    parser.add_argument(
        "--held-out",
        type=_names,
        default=(),
        metavar="NAMES",
        help="comma-separated timm architectures to derive from this run's anchors and measure (needs timm)",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    add_results_arguments(parser)


def run_command(args: argparse.Namespace) -> int:
    return record("gpu-check", args, lambda page: main(args, page))


def main(
    args: argparse.Namespace,
    page: Recording | None = None,
    detect: Callable[[], DeviceInfo | None] = detect_device,
) -> int:
    device = detect()
    if device is None:
        print("gpu-check: no CUDA device here (torch sees none): nothing measured")
        return 0
    if args.out is None:  # profiles.store.cache_dir(), without importing profiles (see _nets)
        args.out = (
            Path(os.environ.get("SKINFLINT_CACHE") or Path.home() / ".cache" / "skinflint") / "gpu-check"
        )
    runtimes = ("ort-cuda-fp32",) if ort_cuda_available() else ("torch-eager-fp32", "torch-cudagraph-fp32")
    figures = run_check(args.out, device, runtimes, args.batches, max(1, args.runs))
    held_out = tuple(getattr(args, "held_out", ()) or ())
    if held_out:
        if importlib.util.find_spec("timm") is None:
            print("gpu-check: timm is not installed: the held-out architectures were not measured")
        elif runtimes == ("ort-cuda-fp32",):
            print("gpu-check: held-out architectures are measured with torch runtimes only: skipped")
        else:
            figures["held_out"] = held_out_check(
                args.out, held_out, runtimes, args.batches, max(1, args.runs)
            )
    if args.json:
        print(json.dumps(figures, indent=1, default=str))
    return 0


if __name__ == "__main__":
    cli = argparse.ArgumentParser(prog="python bench/gpu_check.py")
    add_arguments(cli)
    parsed = cli.parse_args()
    parsed.command_line = "python bench/gpu_check.py " + " ".join(sys.argv[1:])
    sys.exit(run_command(parsed))
