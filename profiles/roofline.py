"""Per-operator roofline derivation, calibrated per device and runtime by several measured anchors.

A device is described by a spec (:class:`DeviceSpec`, a JSON file, ``docs/profiles.md``): its peak FP32
FLOP/s, memory bandwidth, memory and runtime, plus anchors (models measured at some batches with that
runtime). A model's duration at batch ``b`` is predicted from the work of each of its ONNX nodes
(:func:`profiles.onnxgraph.node_costs`):

``d(m, b) = fixed + h2d * I_m * b / link + sum_c launch_c * N_c(m) + sum_c k_c * R_c(m, b)``

- ``R_c(m, b)``: the roofline time of the nodes of operator class ``c`` (dense conv, depthwise conv,
  matmul, recurrent, other): ``sum max(b * flops / peak, (b * act_bytes + weight_bytes) / bandwidth)``,
  a convolution's FLOPs padded to whole waves of ``sm_count * tile_outputs`` outputs (a small batch
  does not fill the device); ``k_c``: the inverse of the efficiency the runtime reaches on that class;
- ``N_c(m)``: the nodes of class ``c`` that launch a kernel (shape-only nodes and element-wise nodes
  fused into an element-wise producer excluded), ``launch_c`` the cost of each;
- with ``overlap`` (an eager runtime, whose host launches the next kernels while the device works) the
  launch sum and the roofline sum do not add up: the larger counts;
- ``fixed``: one invocation's cost that does not depend on the model (it never scales with weight bytes);
- ``I_m``: input bytes of one request, moved over the host link (``link_gbps``).

The coefficients are fitted by non-negative least squares in relative error over all anchor points,
with each class's launch cost and efficiency drawn towards the mean of the classes by a small ridge, so
a class that no anchor exercises gets the others' mean. Everything here is arithmetic on counted and
measured numbers; the ONNX files are read by :func:`model_work`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from profiles.errors import ProfilesError

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from profiles.onnxgraph import NodeCost

__all__ = [
    "OP_CLASSES",
    "Anchor",
    "DeviceSpec",
    "ModelWork",
    "RooflineFit",
    "SpecError",
    "derive_points",
    "fit_roofline",
    "fit_spec",
    "leave_one_out",
    "load_spec",
    "model_work",
    "nnls",
    "spec_from_dict",
    "within_summary",
]

OP_CLASSES = ("conv", "dwconv", "matmul", "rnn", "other")
#: Feature columns: fixed, h2d, then per operator class its launch cost and its inverse efficiency k.
COLUMNS = ("fixed", "h2d", *(f"launch_{c}" for c in OP_CLASSES), *(f"k_{c}" for c in OP_CLASSES))
_LAUNCH = np.array([c.startswith("launch_") for c in COLUMNS])
_ROOF = np.array([c.startswith("k_") for c in COLUMNS])
RIDGE = 0.3  # weight of the penalty rows drawing each class's coefficient towards its group's mean
RANGE = (0.7, 1.45)  # derived/measured acceptance band of issue #27


class SpecError(ProfilesError):
    """A device spec file is missing, not JSON, or lacks a field (one line)."""

    def __init__(self, message: str, path: str = ""):
        super().__init__(message)
        self.path = path


@dataclass(frozen=True)
class Anchor:
    """One measured point of an anchor model: ``model`` is a path relative to the spec file."""

    model: str
    batch: int
    duration_s: float


@dataclass(frozen=True)
class DeviceSpec:
    """A device and runtime, with the measured anchors that calibrate it."""

    hardware: str
    peak_fp32_tflops: float
    memory_bandwidth_gbps: float
    gpu_memory_gib: float
    runtime: str
    anchors: tuple[Anchor, ...]
    link_gbps: float = 16.0
    sm_count: int = 0
    tile_outputs: int = 4096
    overlap: bool = False
    source: str = ""
    base_dir: Path = field(default=Path("."), compare=False)

    def model_path(self, anchor: Anchor) -> Path:
        return (self.base_dir / anchor.model).resolve()

    def as_dict(self) -> dict[str, Any]:
        return {
            "hardware": self.hardware,
            "peak_fp32_tflops": self.peak_fp32_tflops,
            "memory_bandwidth_gbps": self.memory_bandwidth_gbps,
            "gpu_memory_gib": self.gpu_memory_gib,
            "runtime": self.runtime,
            "link_gbps": self.link_gbps,
            "sm_count": self.sm_count,
            "tile_outputs": self.tile_outputs,
            "overlap": self.overlap,
            "source": self.source,
            "anchors": [
                {"model": anchor.model, "batch": anchor.batch, "duration_s": anchor.duration_s}
                for anchor in self.anchors
            ],
        }


def _positive(raw: Mapping[str, Any], key: str, where: str) -> float:
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise SpecError(f"{where}: {key!r} must be a positive number, got {value!r}", where)
    return float(value)


def spec_from_dict(raw: Any, where: str, base_dir: Path) -> DeviceSpec:
    """Validate a parsed spec (see :func:`load_spec`)."""
    if not isinstance(raw, dict):
        raise SpecError(f"{where}: a device spec is a JSON object", where)
    for key in ("hardware", "runtime"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise SpecError(f"{where}: {key!r} must be a non-empty string", where)
    anchors_raw = raw.get("anchors")
    if not isinstance(anchors_raw, list) or not anchors_raw:
        raise SpecError(f"{where}: the spec has no anchors (measured models to calibrate against)", where)
    anchors = []
    for i, item in enumerate(anchors_raw):
        at = f"{where}: anchors[{i}]"
        if not isinstance(item, dict) or not isinstance(item.get("model"), str) or not item["model"]:
            raise SpecError(f"{at} needs 'model' (an ONNX path relative to the spec file)", where)
        batch = item.get("batch")
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise SpecError(f"{at}: 'batch' must be a positive integer, got {batch!r}", where)
        anchors.append(Anchor(item["model"], batch, _positive(item, "duration_s", at)))
    return DeviceSpec(
        hardware=raw["hardware"],
        peak_fp32_tflops=_positive(raw, "peak_fp32_tflops", where),
        memory_bandwidth_gbps=_positive(raw, "memory_bandwidth_gbps", where),
        gpu_memory_gib=_positive(raw, "gpu_memory_gib", where),
        runtime=raw["runtime"],
        anchors=tuple(anchors),
        link_gbps=_positive(raw, "link_gbps", where) if "link_gbps" in raw else 16.0,
        sm_count=int(_positive(raw, "sm_count", where)) if "sm_count" in raw else 0,
        tile_outputs=int(_positive(raw, "tile_outputs", where)) if "tile_outputs" in raw else 4096,
        overlap=bool(raw.get("overlap", "eager" in raw["runtime"])),
        source=str(raw.get("source", "")),
        base_dir=base_dir,
    )


def load_spec(path: str | Path) -> DeviceSpec:
    """Read a device spec file; :class:`SpecError` (one line) when it is unreadable or incomplete."""
    spec_path = Path(path)
    try:
        raw = json.loads(spec_path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SpecError(f"{spec_path}: cannot read ({exc.strerror or exc})", str(spec_path)) from exc
    except ValueError as exc:
        raise SpecError(f"{spec_path}: not JSON ({str(exc)[:80]})", str(spec_path)) from exc
    return spec_from_dict(raw, str(spec_path), spec_path.resolve().parent)


@dataclass(frozen=True)
class ModelWork:
    """What the roofline needs of one model (batch 1): per-class sums are taken per batch."""

    name: str
    nodes: tuple[NodeCost, ...]
    input_bytes: float

    @property
    def launches(self) -> int:
        return sum(1 for node in self.nodes if node.op_class != "shape" and not node.fused)

    @property
    def weight_bytes(self) -> float:
        return sum(node.weight_bytes for node in self.nodes)

    @property
    def activation_bytes(self) -> float:
        return sum(node.act_bytes for node in self.nodes)


def model_work(path: str | Path, name: str | None = None) -> ModelWork:
    """Count a model's per-node work from its ONNX file (raises ``NotOnnxError`` and friends)."""
    from profiles.onnxgraph import input_specs, load_onnx, node_costs

    model = load_onnx(path)
    specs = input_specs(model)
    itemsize = {"float32": 4, "float16": 2, "float64": 8, "int32": 4, "int64": 8, "bool": 1, "uint8": 1}
    inputs = sum(math.prod(spec.shape) * itemsize[spec.dtype] for spec in specs)
    return ModelWork(name or Path(path).stem, tuple(node_costs(model, specs)), float(inputs))


def features(work: ModelWork, batch: int, spec: DeviceSpec) -> np.ndarray:
    """One row of the design matrix (seconds per unit coefficient), columns as :data:`COLUMNS`."""
    peak = spec.peak_fp32_tflops * 1e12
    bandwidth = spec.memory_bandwidth_gbps * 1e9
    wave = spec.sm_count * spec.tile_outputs
    roof = dict.fromkeys(OP_CLASSES, 0.0)
    for node in work.nodes:
        if node.op_class == "shape":
            continue
        flops = batch * node.flops
        if wave and node.op_class in ("conv", "dwconv") and node.flops and node.outputs:
            # wave quantisation: the outputs are computed in tiles, a wave of one tile per SM at a time
            flops = node.flops / node.outputs * wave * math.ceil(batch * node.outputs / wave)
        roof[node.op_class] += max(flops / peak, (batch * node.act_bytes + node.weight_bytes) / bandwidth)
    counts = dict.fromkeys(OP_CLASSES, 0.0)
    for node in work.nodes:
        if node.op_class != "shape" and not node.fused:
            counts[node.op_class] += 1e-5
    h2d = batch * work.input_bytes / (spec.link_gbps * 1e9)
    # fixed: 1 ms; launch: 10 us per kernel (scales keep the coefficients near 1 for the ridge)
    return np.array([1e-3, h2d, *(counts[c] for c in OP_CLASSES), *(roof[c] for c in OP_CLASSES)])


def nnls(a: np.ndarray, b: np.ndarray, max_iter: int = 500) -> np.ndarray:
    """Non-negative least squares, ``min |a x - b|`` with ``x >= 0`` (Lawson and Hanson's active set)."""
    cols = a.shape[1]
    x = np.zeros(cols)
    passive = np.zeros(cols, dtype=bool)
    grad = a.T @ (b - a @ x)
    for _ in range(max_iter):
        if passive.all() or grad[~passive].max(initial=-np.inf) <= 1e-12:
            break
        pick = np.where(~passive, grad, -np.inf).argmax()
        passive[pick] = True
        while True:
            trial = np.zeros(cols)
            trial[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if (trial[passive] > 0).all():
                x = trial
                break
            bad = passive & (trial <= 0)
            step = np.min(x[bad] / (x[bad] - trial[bad]))
            x = x + step * (trial - x)
            passive &= x > 1e-15
            x[~passive] = 0.0
        grad = a.T @ (b - a @ x)
    return x


@dataclass(frozen=True)
class RooflineFit:
    """Fitted coefficients of one device and runtime (see the module docstring)."""

    spec: DeviceSpec
    coef: tuple[float, ...]
    anchors: tuple[str, ...]
    max_rel_err: float

    @property
    def fixed_s(self) -> float:
        return self.coef[0] * 1e-3

    @property
    def launch_s(self) -> dict[str, float]:
        """Launch cost of one operator of each class (seconds)."""
        return {c: x * 1e-5 for c, x in zip(OP_CLASSES, np.array(self.coef)[_LAUNCH], strict=True)}

    def efficiency(self) -> dict[str, float]:
        """Fraction of the roofline each operator class reaches (1 / k_c)."""
        return {
            c: 1.0 / k if k > 0 else math.inf
            for c, k in zip(OP_CLASSES, np.array(self.coef)[_ROOF], strict=True)
        }

    def predict(self, work: ModelWork, batch: int) -> float:
        return _combine(features(work, batch, self.spec), np.array(self.coef), self.spec.overlap)

    def method(self) -> str:
        return (
            f"per-operator roofline on {self.spec.hardware} ({self.spec.runtime}), fixed "
            f"{self.fixed_s * 1e3:.3f} ms + {np.mean(np.array(self.coef)[_LAUNCH]) * 10:.2f} us (mean) "
            "per operator, fitted to "
            f"{len(self.anchors)} anchor models (docs/profiles.md)"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "hardware": self.spec.hardware,
            "runtime": self.spec.runtime,
            "fixed_s": self.fixed_s,
            "launch_s": self.launch_s,
            "h2d_factor": self.coef[1],
            "efficiency": {c: (e if math.isfinite(e) else None) for c, e in self.efficiency().items()},
            "anchors": list(self.anchors),
            "max_rel_err": self.max_rel_err,
        }


def _combine(row: np.ndarray, coef: np.ndarray, overlap: bool) -> float:
    """The duration of one row: launches and GPU work add up, or (``overlap``: an eager runtime launches
    from the host while the device works) the larger of the two counts."""
    if not overlap:
        return float(row @ coef)
    both = _LAUNCH | _ROOF
    return float(row[~both] @ coef[~both] + max(row[_LAUNCH] @ coef[_LAUNCH], row[_ROOF] @ coef[_ROOF]))


def _regimes(a: np.ndarray, coef: np.ndarray) -> np.ndarray:
    """The rows with the launch regime's columns kept and the roofline's dropped, or the other way."""
    launch = a[:, _LAUNCH] @ coef[_LAUNCH] >= a[:, _ROOF] @ coef[_ROOF]
    out = a.copy()
    out[np.ix_(launch, _ROOF)] = 0.0
    out[np.ix_(~launch, _LAUNCH)] = 0.0
    return out


def _tie(group: np.ndarray, ridge: float) -> np.ndarray:
    """Penalty rows ``ridge * (x_c - mean of the group)``: each class's coefficient is drawn towards the
    mean of its group, so a class that no anchor exercises gets the others' mean."""
    cols = np.flatnonzero(group)
    rows = np.zeros((len(cols), len(COLUMNS)))
    for row, col in enumerate(cols):
        rows[row, cols] = -ridge / len(cols)
        rows[row, col] += ridge
    return rows


def fit_roofline(
    spec: DeviceSpec, points: Iterable[tuple[ModelWork, int, float]], ridge: float = RIDGE
) -> RooflineFit:
    """Fit the coefficients to measured ``(work, batch, duration_s)`` points (relative least squares)."""
    rows, names = [], []
    for work, batch, duration in points:
        rows.append(features(work, batch, spec) / duration)
        names.append(work.name)
    if not rows:
        raise SpecError(f"{spec.hardware}: no anchor points to fit", spec.hardware)
    a = np.array(rows)
    b = np.ones(len(rows))
    penalty = np.vstack([_tie(group, ridge) for group in (_LAUNCH, _ROOF)])
    target = np.concatenate([b, np.zeros(len(penalty))])
    coef = nnls(np.vstack([a, penalty]), target)
    if spec.overlap:  # the max of two linear forms: refit with each point in the regime that dominates it
        for _ in range(20):
            again = nnls(np.vstack([_regimes(a, coef), penalty]), target)
            if np.allclose(again, coef):
                break
            coef = again
    rel = np.abs(np.array([_combine(row, coef, spec.overlap) for row in a]) - 1.0)
    return RooflineFit(spec, tuple(float(c) for c in coef), tuple(dict.fromkeys(names)), float(rel.max()))


def fit_spec(spec: DeviceSpec, works: Mapping[str, ModelWork] | None = None) -> RooflineFit:
    """Fit a spec's own anchors, reading each anchor's ONNX file once (``works`` caches them by path)."""
    cache: dict[str, ModelWork] = dict(works or {})
    points = []
    for anchor in spec.anchors:
        key = str(spec.model_path(anchor))
        if key not in cache:
            cache[key] = model_work(key, Path(anchor.model).stem)
        points.append((cache[key], anchor.batch, anchor.duration_s))
    return fit_roofline(spec, points)


def leave_one_out(
    spec: DeviceSpec,
    measured: Mapping[str, Mapping[int, float]],
    works: Mapping[str, ModelWork],
    ridge: float = RIDGE,
) -> dict[str, dict[int, tuple[float, float]]]:
    """Predict each model from a fit to all the others: ``{model: {batch: (derived_s, measured_s)}}``."""
    out: dict[str, dict[int, tuple[float, float]]] = {}
    for model, pts in measured.items():
        train = [
            (works[other], batch, duration)
            for other, other_pts in measured.items()
            if other != model
            for batch, duration in other_pts.items()
        ]
        fit = fit_roofline(spec, train, ridge)
        out[model] = {batch: (fit.predict(works[model], batch), duration) for batch, duration in pts.items()}
    return out


def within_summary(ratios: Sequence[float], band: tuple[float, float] = RANGE) -> dict[str, float]:
    """Share of derived/measured ratios inside ``band``, their minimum, maximum and geometric mean."""
    arr = np.array(list(ratios), dtype=float)
    if not arr.size:
        return {"points": 0, "within": 0.0, "min": math.nan, "max": math.nan, "geomean": math.nan}
    inside = (arr >= band[0]) & (arr <= band[1])
    return {
        "points": int(arr.size),
        "within": float(inside.mean()),
        "min": float(arr.min()),
        "max": float(arr.max()),
        "geomean": float(np.exp(np.log(arr).mean())),
    }


def derive_points(fit: RooflineFit, work: ModelWork, batches: Sequence[int]) -> list[dict[str, Any]]:
    """The derived profile of ``work`` at ``batches`` on the fitted device: one point per batch whose
    weights plus twice its activations fit in 80 % of the device memory (larger batches are left out)."""
    memory = fit.spec.gpu_memory_gib * 2**30
    points: list[dict[str, Any]] = []
    for batch in batches:
        if batch < 1:
            raise SpecError(f"batch sizes must be positive, got {batch}")
        if work.weight_bytes + 2 * batch * work.activation_bytes > 0.8 * memory:
            break
        points.append(
            {
                "hardware": fit.spec.hardware,
                "batch": batch,
                "concurrency": 1,
                "duration_s": round(fit.predict(work, batch), 7),
                "source": "derived",
                "method": fit.method(),
                "runtime": fit.spec.runtime,
                "model": work.name,
            }
        )
    return points
