"""Derived profiles: CPU instance sizes from thread sweeps (HiTDL) and GPUs from published anchors.

Both produce ``planner.models.ProfileEntry`` dicts marked ``"source": "derived"``; the method is
documented in ``docs/profiles.md``. Everything here is pure arithmetic on measured numbers.

GPU method (per hardware h, anchor R = ResNet-50 FP32 at 224x224, NVIDIA's published latencies):

- anchor linear model: ``alpha_R = (d(32) - d(1)) / 31``, ``beta_R = d(1) - alpha_R``;
- per-request cost of model m on h in FLOP-equivalents: ``cost_h(m) = F_m + ridge_h * A_m`` (FLOPs
  plus activation bytes weighted by the hardware's ridge point peak_flops / bandwidth);
- fixed cost of one invocation: ``fixed(m) = (W_m / W_R + N_m / N_R) / 2`` (half reading the weights,
  half launching the ``N`` operators);
- ``d_h(m, b) = alpha_R * cost_h(m) / cost_h(R) * b + beta_R * fixed(m)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from profiles.fit import fit_hitdl, fit_linear

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from planner.models import HardwareSpec

__all__ = [
    "ANCHORS",
    "RESNET50_COST",
    "GpuAnchor",
    "cpu_size_entries",
    "derive_gpu_entries",
    "gpu_linear_model",
    "leave_one_out",
]

# ResNet-50 (224x224, FP32) counted by profiles.onnxgraph.graph_cost on profiles.demo.nets.ResNet50
# (tests/unit/profiles/test_derive.py re-counts it): FLOPs, weight bytes, activation bytes, operators.
RESNET50_COST = {"flops": 8.178e9, "weight_bytes": 102.03e6, "activation_bytes": 105.87e6, "nodes": 168}


@dataclass(frozen=True)
class GpuAnchor:
    """Published ResNet-50 FP32 latencies (seconds) at batch 1 and 32 on one GPU."""

    hardware: str
    d1_s: float
    d32_s: float
    source: str

    @property
    def alpha_s(self) -> float:
        return (self.d32_s - self.d1_s) / 31

    @property
    def beta_s(self) -> float:
        return self.d1_s - self.alpha_s


_V100 = GpuAnchor(
    "v100", 0.0104, 0.0294, "NVIDIA ResNet-50 FP32 inference, V100: batch 1 10.4 ms, batch 32 29.4 ms"
)
_P100_FLOPS = 15.7 / 9.3  # V100 SXM2 / P100 PCIe peak FP32 TFLOPS
_P100_BW = 900 / 732  # V100 / P100 memory bandwidth (GB/s)
ANCHORS: dict[str, GpuAnchor] = {
    "v100": _V100,
    "t4": GpuAnchor(
        "t4", 0.0107, 0.0776, "NVIDIA ResNet-50 FP32 inference, T4: batch 1 10.7 ms, batch 32 77.6 ms"
    ),
    # P100: no current NVIDIA figure in FP32 inference; scale V100's per-image cost by peak FP32
    # (15.7/9.3) and its fixed cost by memory bandwidth (900/732).
    "p100": GpuAnchor(
        "p100",
        _V100.beta_s * _P100_BW + _V100.alpha_s * _P100_FLOPS,
        _V100.beta_s * _P100_BW + 32 * _V100.alpha_s * _P100_FLOPS,
        "V100 anchor scaled: per-image x 15.7/9.3 (peak FP32), fixed x 900/732 (bandwidth)",
    ),
}


def _ridge(spec: HardwareSpec | None, default: float = 10.0) -> float:
    extra = (spec.model_extra or {}) if spec is not None else {}
    tf, bw = extra.get("peak_fp32_tflops"), extra.get("memory_bandwidth_gbps")
    return float(tf) * 1e12 / (float(bw) * 1e9) if tf and bw else default


def _per_request(cost: Mapping[str, float], ridge: float) -> float:
    return float(cost["flops"]) + ridge * float(cost["activation_bytes"])


def _fixed(cost: Mapping[str, float], ref: Mapping[str, float]) -> float:
    return 0.5 * float(cost["weight_bytes"]) / float(ref["weight_bytes"]) + 0.5 * float(
        cost["nodes"]
    ) / float(ref["nodes"])


def scaled_linear(
    cost: Mapping[str, float], ref_cost: Mapping[str, float], ref_alpha: float, ref_beta: float, ridge: float
) -> tuple[float, float]:
    """(alpha, beta) of a model from a reference model's linear fit, scaled by FLOPs and bytes."""
    alpha = ref_alpha * _per_request(cost, ridge) / _per_request(ref_cost, ridge)
    beta = ref_beta * _fixed(cost, ref_cost)
    return alpha, beta


def gpu_linear_model(
    cost: Mapping[str, float], hardware: str, spec: HardwareSpec | None
) -> tuple[float, float]:
    anchor = ANCHORS[hardware]
    return scaled_linear(cost, RESNET50_COST, anchor.alpha_s, anchor.beta_s, _ridge(spec))


def derive_gpu_entries(
    model: str,
    cost: Mapping[str, float],
    catalog: Mapping[str, HardwareSpec],
    batches: Sequence[int] = (1, 2, 4, 8, 16, 32),
    date: str = "",
) -> list[dict[str, Any]]:
    """Derived single-session profiles of ``model`` on every GPU of ``catalog`` that has an anchor.
    Batches whose activations and weights would not fit in GPU memory are left out."""
    out: list[dict[str, Any]] = []
    for hw, spec in catalog.items():
        if hw not in ANCHORS:
            continue
        alpha, beta = gpu_linear_model(cost, hw, spec)
        mem = float((spec.model_extra or {}).get("gpu_memory_gib") or 16) * 2**30
        for batch in batches:
            if float(cost["weight_bytes"]) + 2 * batch * float(cost["activation_bytes"]) > 0.8 * mem:
                break
            out.append(
                {
                    "hardware": hw,
                    "batch": batch,
                    "concurrency": 1,
                    "duration_s": round(alpha * batch + beta, 7),
                    "source": "derived",
                    "method": "resnet50-anchor flops/bytes scaling (docs/profiles.md)",
                    "anchor": ANCHORS[hw].source,
                    "model": model,
                    "date": date,
                }
            )
    return out


def cpu_size_entries(
    model: str,
    *,
    t1: Mapping[int, float],
    t2: Mapping[int, float],
    concurrent_t1: Mapping[int, float],
    catalog: Mapping[str, HardwareSpec],
    measured_vcpus: int = 2,
    provenance: Mapping[str, Any] | None = None,
) -> tuple[list[dict[str, Any]], dict[int, dict[str, Any]]]:
    """Entries for every CPU size of the catalog from a thread sweep on this host.

    ``t1[b]``/``t2[b]``: batch-b latency of one session with 1 / 2 threads; ``concurrent_t1[b]``:
    latency of each of 2 concurrent 1-thread sessions. Per batch, HiTDL's ``L(n)`` is fitted to the
    measured thread counts; a size with ``v`` vCPUs and concurrency ``c`` gets ``L(v/c)``, times the
    measured interference ratio ``concurrent_t1 / t1`` when ``c > 1``. The size with
    ``measured_vcpus`` vCPUs gets the measured numbers themselves (``"source": "measured"``);
    the others are ``"derived"`` (extrapolated beyond the measured cores). Returns the entries and
    the per-batch fits.
    """
    prov = dict(provenance or {})
    sizes = {name: int((spec.model_extra or {}).get("vcpus") or 0) for name, spec in catalog.items()}
    sizes = {
        name: vcpu_count
        for name, vcpu_count in sizes.items()
        if (catalog[name].model_extra or {}).get("kind") == "cpu" and vcpu_count > 0
    }
    entries: list[dict[str, Any]] = []
    fits: dict[int, dict[str, Any]] = {}
    for batch in sorted(set(t1) & set(t2)):
        fit = fit_hitdl([1, measured_vcpus], [t1[batch], t2[batch]])
        interference = concurrent_t1[batch] / t1[batch] if batch in concurrent_t1 else None
        fits[batch] = {**fit.as_dict(), "interference": interference}
        for hw, vcpus in sizes.items():
            for concurrency in (1, 2):
                if concurrency > vcpus or (concurrency > 1 and interference is None):
                    continue
                measured = vcpus == measured_vcpus
                if measured:
                    duration = t2[batch] if concurrency == 1 else concurrent_t1[batch]
                else:
                    duration = fit.predict(vcpus / concurrency) * (interference if concurrency > 1 else 1.0)  # type: ignore[operator]
                entry = {
                    "hardware": hw,
                    "batch": batch,
                    "concurrency": concurrency,
                    "duration_s": round(duration, 7),
                    "threads": vcpus // concurrency,
                    "model": model,
                    **prov,
                }
                if measured:
                    entry["source"] = "measured"
                    entry["note"] = (
                        f"measured on this host's {measured_vcpus} vCPUs ({prov.get('host_cpu', '?')})"
                    )
                else:
                    entry["source"] = "derived"
                    entry["method"] = (
                        f"hitdl L(n)=c0+c1/n+c2/n^2 fitted at n=1,{measured_vcpus}, "
                        f"extrapolated to n={vcpus // concurrency}"
                        + (f", x{interference:.2f} measured interference" if concurrency > 1 else "")
                    )
                entries.append(entry)
    return entries, fits


def leave_one_out(
    measured: Mapping[str, Mapping[int, float]], costs: Mapping[str, Mapping[str, float]], ridge: float
) -> dict[str, float]:
    """Validate the GPU scaling on what can be measured: predict each model's CPU profile from every
    other model (as the single anchor, like ResNet-50 on the GPU) and take the geometric mean of the
    predictions; return each model's mean relative error over its measured batches.

    ``measured[m][b]`` is model m's measured duration at batch b on one hardware."""
    fits = {model: fit_linear(list(pts), list(pts.values())) for model, pts in measured.items()}
    out: dict[str, float] = {}
    for model, pts in measured.items():
        others = [other for other in measured if other != model]
        if not others:
            continue
        errs = []
        for batch, duration in pts.items():
            preds = []
            for other in others:
                alpha, beta = scaled_linear(
                    costs[model], costs[other], fits[other].alpha_s, fits[other].beta_s, ridge
                )
                preds.append(alpha * batch + beta)
            pred = math.exp(float(np.mean(np.log(preds))))
            errs.append(abs(pred - duration) / duration)
        out[model] = float(np.mean(errs))
    return out
